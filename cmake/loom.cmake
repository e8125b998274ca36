# Helpers shared by the layer CMakeLists.

# loom_layer(NAME SOURCES... DEPS ...): a static library loom_<NAME> whose headers are included as
# "loom/<NAME>/x.h" and which links only the given (lower) layers and packages.
function(loom_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(loom_${name} STATIC ${ARG_SOURCES})
  target_include_directories(loom_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(loom_${name} PUBLIC ${ARG_DEPS})
endfunction()

# loom_test(NAME SOURCES... DEPS ...): a GoogleTest binary registered with CTest.  Tests live beside
# the code they test (foo.cc -> foo_test.cc).  LOOM_SHARED_DIR tells tests where ../shared is.
function(loom_test name)
  if(NOT LOOM_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    LOOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" LOOM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
