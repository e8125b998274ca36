// Chosen by CMake when the build has no MPI (LOOM_WITH_MPI=OFF or Open MPI not found).
#include "loom/comm/backends.h"

namespace loom::comm::mpi {

bool MpiCompiledIn() { return false; }

StatusOr<std::unique_ptr<Group>> CreateMpiGroup(const GroupConfig&) {
  return UnimplementedError(
      "comm/mpi: this build has no MPI backend (configure with -DLOOM_WITH_MPI=ON and install "
      "libopenmpi-dev)");
}

}  // namespace loom::comm::mpi
