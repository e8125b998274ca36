// What a cluster member tells the others about its machine: memory, cores, SIMD target, measured
// memory bandwidth, the host it runs on (boot id), RDMA devices and its IPv4 interfaces.
#pragma once

#include <string>
#include <vector>

#include "loom/cluster/messages.h"

namespace loom::cluster {

// Reads this machine's facts and measures its memory read bandwidth with one thread (~0.3 s).
// The member offers `max_memory_bytes` of the available memory (all of it when 0).
Facts MeasureMachine(int64_t max_memory_bytes = 0);

// The IPv4 interfaces that are up (loopback included), in the kernel's order.
std::vector<Interface> ListInterfaces();

// RDMA devices the OS exposes (Linux: /sys/class/infiniband); empty where there are none.
std::vector<std::string> ListRdmaDevices();

// Whether two addresses lie in one subnet of `prefix` bits (IPv4 dotted quads; false if either
// does not parse).
bool SameSubnet(const std::string& a, const std::string& b, int prefix);

}  // namespace loom::cluster
