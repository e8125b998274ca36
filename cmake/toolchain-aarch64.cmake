# Cross-compiling for linux-arm64 with Debian's cross compiler (g++-aarch64-linux-gnu) and the
# multiarch arm64 -dev packages (libhwy-dev:arm64, ...) under /usr/lib/aarch64-linux-gnu.  Tests
# run through qemu-user (CMAKE_CROSSCOMPILING_EMULATOR), so `ctest` and gtest discovery work on
# an x86-64 host.  Used by scripts/arm64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Headers and libraries come from the host's multiarch paths (/usr/include and
# /usr/lib/aarch64-linux-gnu), so the root stays /; programs are the host's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")

# qemu-aarch64 with / as its sysroot: the loader /lib/ld-linux-aarch64.so.1 and the libraries all
# from the multiarch libc6:arm64 the -dev packages pulled in.  Not `-L /usr/aarch64-linux-gnu`:
# that loader is the cross package's (libc6-arm64-cross, an older build of glibc) while libhwy,
# libstdc++ and libc then resolve to the multiarch ones, and the mismatched pair hangs in the
# first pthread_create.  The emulated CPU comes from QEMU_CPU in the environment (qemu's default
# "max" has SVE and SVE2; e.g. QEMU_CPU=cortex-a53 has NEON only).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
