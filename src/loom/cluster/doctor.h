// `loom doctor`: this machine's facts, its links to the other members of a cluster, and plain
// advice for a model (does it fit, which split is fastest on these links and why, what a faster
// link would change).  Everything here is data in, a versioned JSON report out, and the report
// rendered as text, so that it is tested without a terminal, a daemon or a measurement; the
// command (cli/cmd_doctor.cc) gathers the inputs.
//
// The report ({"v": 1, ...}, kDoctorVersion):
//   machine  this machine's facts and measured read bandwidth (one thread, all cores), its RDMA
//            devices, and "advice"
//   chip     (Apple Silicon, or a chip named with --chip) the chip table's answer: Thunderbolt
//            generation, RDMA capability, published memory bandwidth, and "advice"
//   cluster  the daemon's members and measured links per pair (the fastest marked), or why none
//            answers and how to start one, and "advice"
//   model    (with -m) fit, every split's predicted speed on the links, the same with an assumed
//            RDMA-class link, and "advice"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"
#include "loom/cluster/cost_model.h"
#include "loom/cluster/messages.h"
#include "loom/model/model_file.h"

namespace loom::cluster {

inline constexpr int kDoctorVersion = 1;

// A faster link for "what would change": RDMA over Thunderbolt 5.  80 Gbit/s each way is
// Thunderbolt 5's rate (docs: ../shared/docs/APPLE.md); 5 us one-way is our assumption for RDMA
// (APPLE.md: RDMA lowers latency between Macs from about 300 us to under 50 us).
inline constexpr double kRdmaLatencyUs = 5;
inline constexpr double kRdmaGbps = 80;

// What the chip table says about an Apple Silicon chip.
struct AppleChip {
  std::string query;      // the name looked up
  std::string chip;       // "Apple M4 Max"; empty when the name is no M-series chip
  bool in_table = false;  // listed in the table (else: inferred from the family rule, or unknown)
  int thunderbolt = 0;    // generation, 4 or 5; 0 = unknown
  bool rdma = false;      // RDMA over Thunderbolt 5 (macOS 26.2 or later)
  double memory_gbytes_per_s = 0;  // Apple's published unified memory bandwidth; 0 = not listed
  std::string memory_note;         // e.g. "410 / 546 GB/s by bin"
};

// Looks a chip up by name ("Apple M4 Max", "M3 Ultra", any case; text after the tier is ignored).
AppleChip LookupAppleChip(std::string_view name);

// Whether a CPU name names Apple Silicon ("Apple M..." / "Apple ...").
bool IsAppleName(std::string_view cpu);

// macOS's version from uname's "Darwin 25.2.0 arm64" (Darwin 25.x is macOS 26.x); {0, 0} when
// the OS is not macOS.
struct MacOsVersion {
  int major = 0;
  int minor = 0;
};
MacOsVersion MacOsFromUname(std::string_view os);

// This machine's chip name: on macOS the brand string (sysctl), elsewhere `cpu`.
std::string ThisChipName(const std::string& cpu);

// The report's sections.
// `all_cores_bytes_per_s`: read bandwidth with every core (Facts carry the one-thread figure).
nlohmann::json MachineSection(const Facts& facts, double all_cores_bytes_per_s);
// `given`: the name came from --chip (else it is this machine's); `macos`: this machine's.
nlohmann::json ChipSection(const AppleChip& chip, bool given, MacOsVersion macos);
// `view`: the daemon's answer (QueryDaemon), or why none came.
nlohmann::json ClusterSection(const StatusOr<nlohmann::json>& view,
                              const std::string& control_path);

struct ModelAdviceInputs {
  std::string model;           // the path, for people
  CostInputs cost;             // ranks, one rank's speed and memory, the links, --ctx
  LinkFacts fast;              // the faster link to compare with (kRdma*)
  int64_t available_here = 0;  // bytes this machine has for the model alone
  bool hypothetical = true;    // ranks are machines like this one (no daemon, or alone in it)
};
// Fit here, every split's prediction on the links and on the faster link, and the advice.
StatusOr<nlohmann::json> ModelSection(const model::ModelFile& file, const ModelAdviceInputs& in);

// {"v": 1, machine, chip?, cluster, model?}; a null section is left out.
nlohmann::json DoctorReport(nlohmann::json machine, nlohmann::json chip, nlohmann::json cluster,
                            nlohmann::json model);

// The report as plain text, the way `loom doctor` prints it.
std::string DoctorText(const nlohmann::json& report);

}  // namespace loom::cluster
