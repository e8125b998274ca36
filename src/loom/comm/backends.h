// Factories of the backend folders (internal to the comm layer; callers use CreateGroup).
#pragma once

#include <memory>

#include "loom/base/status.h"
#include "loom/comm/config.h"
#include "loom/comm/group.h"

namespace loom::comm {

// A one-rank group: collectives are copies or no-ops (no environment, or LOOM_BACKEND=self).
StatusOr<std::unique_ptr<Group>> CreateSelfGroup(const GroupConfig& config);

namespace tcp {
StatusOr<std::unique_ptr<Group>> CreateTcpGroup(const GroupConfig& config);
}  // namespace tcp

namespace shm {
StatusOr<std::unique_ptr<Group>> CreateShmGroup(const GroupConfig& config);
}  // namespace shm

namespace mpi {
// Whether this build has the MPI backend (CMake option LOOM_WITH_MPI and Open MPI found).
bool MpiCompiledIn();
// Initializes MPI on first use; rank and size come from MPI itself (config.rank/size are checked
// against them when set).
StatusOr<std::unique_ptr<Group>> CreateMpiGroup(const GroupConfig& config);
}  // namespace mpi

}  // namespace loom::comm
