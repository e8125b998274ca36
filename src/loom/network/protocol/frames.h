// The frames that the hub and its node agents exchange.  Each WebSocket text message is one JSON
// object {"v": 1, "type": "<name>", ...fields}.  ParseFrame validates a received frame field by
// field (types, ranges, id characters, no unknown fields, no duplicate keys, bounded nesting);
// SerializeFrame writes compact JSON that ParseFrame reads back to an equal frame.
//
// Direction: node -> hub: hello, register, heartbeat, capacity, accepted, chunk, complete, error.
//            hub -> node: challenge, welcome, assign, cancel, drain, load_model, unload_model,
//                         and error (sent before the hub closes a connection).
// Handshake: node hello -> hub challenge -> node register (signed ChallengeMessage) -> hub welcome.
//
// Limits (what ParseFrame accepts):
//   ids and names (node_id, hub_id, attempt_id, model names, error codes): 1-128 bytes of
//     [A-Za-z0-9._:/@+-];
//   labels (simd, os, version, chip): at most 128 bytes, no control characters;
//   a location: latitude in [-90, 90], longitude in [-180, 180] degrees, finite;
//   free text (error message): at most 4096 bytes; chunk text: at most 1 MiB;
//   byte counts: integers in [0, 2^48], so a hub can add up a large fleet without overflow;
//   token ids: [0, 2^31-1], at most 2^20 in one list; token counts and chunk indices: [0, 2^31-1];
//   model lists: at most 256, names unique within a list;
//   chunk log-probabilities: numbers in [kMinLogprob, kMaxLogprob], one per token id.
// Strings must be valid UTF-8.  A frame built in code with invalid UTF-8 in a string (for example
// chunk text cut inside a multi-byte character) is serialized with U+FFFD in place of the bad
// bytes, so the sender should only cut text at character boundaries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/base/status.h"

namespace loom::network::protocol {

inline constexpr int64_t kProtocolVersion = 1;
inline constexpr int64_t kMaxFrameBytes = int64_t{8} << 20;
inline constexpr int64_t kMaxJsonDepth = 64;  // objects and arrays nested, the frame included
inline constexpr int64_t kMaxIdBytes = 128;
inline constexpr int64_t kMaxLabelBytes = 128;
inline constexpr int64_t kMaxMessageBytes = 4096;
inline constexpr int64_t kMaxChunkTextBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxByteCount = int64_t{1} << 48;
inline constexpr int64_t kMaxTokenCount = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxTokenIds = int64_t{1} << 20;  // per list
inline constexpr int64_t kMaxModels = 256;                 // per list
inline constexpr int64_t kMaxWaiting = int64_t{1} << 20;   // queued requests on one node
inline constexpr int64_t kMaxContext = int64_t{1} << 24;   // tokens
inline constexpr int64_t kMaxKvBytesPerToken = int64_t{1} << 32;
inline constexpr int64_t kMaxConcurrency = 4096;
inline constexpr int64_t kMaxCores = 65536;
inline constexpr int64_t kMaxPodDegree = 64;  // tp and pp
inline constexpr double kMaxMemBandwidthGbps = 1e6;
inline constexpr int64_t kSignatureBytes = 64;  // Ed25519
inline constexpr int64_t kNonceBytes = 32;
inline constexpr double kMinLogprob = -1e9;  // what a node sends for an impossible token
inline constexpr double kMaxLogprob = 1;     // log-probabilities are <= 0 up to rounding

// Every member has an initializer ({} where empty) so that designated initializers may leave any
// out without -Wmissing-field-initializers warnings.

// ---- Shared sub-objects ----

struct ModelInfo {
  std::string name{};    // catalogue name, e.g. "Qwen/Qwen2.5-0.5B"
  std::string sha256{};  // of the weight file, 64 lowercase hex digits
  int64_t weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;  // KV cache bytes per token of context, all layers
  int64_t context = 1;             // tokens, in [1, kMaxContext]
  bool loaded = false;             // resident in memory now
  bool operator==(const ModelInfo&) const = default;
};

// What a node sets aside for a loaded model with `slots` concurrent requests: its weights and a KV
// cache of the whole context for every slot.  The node loads only what this fits in; the hub uses
// the same figure when it decides which models to unload to make room.
inline int64_t LoadedFootprint(const ModelInfo& m, int32_t slots) {
  return m.weight_bytes + int64_t{slots} * m.context * m.kv_bytes_per_token;
}

struct NodeFacts {
  int64_t mem_total_bytes = 0;
  int64_t mem_free_bytes = 0;     // <= mem_total_bytes
  int32_t cores = 1;              // in [1, kMaxCores]
  std::string simd{};             // label, e.g. "avx512" or "neon"
  double mem_bandwidth_gbps = 0;  // GB/s measured by the node, finite, in [0, kMaxMemBandwidthGbps]
  std::string os{};               // label
  std::string version{};          // label: the node agent's version
  // Optional label (absent or "" when unknown): the processor's name, e.g. "Apple M2 Max" or
  // "AMD EPYC 7763 64-Core Processor".  Shown on the hub's public world page.
  std::string chip{};
  bool operator==(const NodeFacts&) const = default;
};

// Where the operator says the machine is (`loom node --location LAT,LON`), in degrees.  The hub
// rounds it (world page) before it keeps or shows it.
struct Location {
  double lat = 0;  // in [-90, 90]
  double lon = 0;  // in [-180, 180]
  bool operator==(const Location&) const = default;
};

struct PodInfo {
  int32_t tp = 1;  // tensor-parallel degree, in [1, kMaxPodDegree]
  int32_t pp = 1;  // pipeline stages, in [1, kMaxPodDegree]
  bool operator==(const PodInfo&) const = default;
};

// A reserved slot: the node commits to keep `model` loaded and answering from begin_minute to
// end_minute (UTC minutes since midnight, [begin, end); end < begin wraps midnight; 0 and 1440:
// all day).  The hub measures its availability itself (probes) and pays it for being there.
struct SlotOffer {
  std::string model{};        // one of the node's models
  int32_t begin_minute = 0;   // in [0, 1439]
  int32_t end_minute = 1440;  // in [1, 1440], != begin_minute
  bool operator==(const SlotOffer&) const = default;
};

// ---- Node -> hub ----

// The first frame of a connection.
struct Hello {
  static constexpr std::string_view kType = "hello";
  std::string node_id{};
  bool operator==(const Hello&) const = default;
};

// The answer to a Challenge: `signature` signs ChallengeMessage(nonce, node_id, hub_id).
struct Register {
  static constexpr std::string_view kType = "register";
  std::string node_id{};
  std::string signature{};  // base64 (standard, padded) of kSignatureBytes bytes
  NodeFacts facts{};
  std::vector<ModelInfo> models{};  // at most kMaxModels, unique names
  std::optional<PodInfo> pod{};     // present when this node leads a pod
  int32_t max_concurrency = 1;      // in [1, kMaxConcurrency]
  std::optional<SlotOffer> slot{};  // a reserved slot for one of `models`; absent: spare time
  std::optional<Location> location{};  // optional: declared by the operator
  bool operator==(const Register&) const = default;
};

struct Heartbeat {
  static constexpr std::string_view kType = "heartbeat";
  int32_t running = 0;  // requests decoding now, in [0, kMaxConcurrency]
  int32_t waiting = 0;  // requests queued, in [0, kMaxWaiting]
  int64_t mem_free_bytes = 0;
  bool draining = false;
  bool paused = false;
  std::vector<std::string> loaded{};  // model names resident now, at most kMaxModels, unique
  bool operator==(const Heartbeat&) const = default;
};

// Sent when the models a node holds or its limits change.
struct Capacity {
  static constexpr std::string_view kType = "capacity";
  std::vector<ModelInfo> models{};  // at most kMaxModels, unique names
  int32_t max_concurrency = 1;      // in [1, kMaxConcurrency]
  int64_t mem_free_bytes = 0;
  bool operator==(const Capacity&) const = default;
};

struct Accepted {
  static constexpr std::string_view kType = "accepted";
  std::string attempt_id{};
  std::vector<int32_t> prompt_token_ids{};  // the prompt as the node tokenized it
  bool operator==(const Accepted&) const = default;
};

struct Chunk {
  static constexpr std::string_view kType = "chunk";
  std::string attempt_id{};
  int64_t index = 0;                 // 0, 1, 2, ... within the attempt
  std::string text{};                // at most kMaxChunkTextBytes
  std::vector<int32_t> token_ids{};  // the tokens this chunk's text decodes from (may be empty)
  // Scoring requests only (the assign's request asked for logprobs): for each of token_ids, its
  // log-probability under the node's model, and the most likely token's log-probability at that
  // position.  Either empty (absent from the JSON) or as long as token_ids; each in
  // [kMinLogprob, kMaxLogprob].
  std::vector<double> logprobs{};
  std::vector<double> best_logprobs{};
  bool operator==(const Chunk&) const = default;
};

struct Complete {
  static constexpr std::string_view kType = "complete";
  std::string attempt_id{};
  std::string finish_reason{};  // "stop" or "length"
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  bool operator==(const Complete&) const = default;
};

// Either direction.  Without attempt_id it concerns the whole connection.
struct Error {
  static constexpr std::string_view kType = "error";
  std::optional<std::string> attempt_id{};
  std::string code{};     // id, e.g. "model_not_loaded"
  std::string message{};  // free text for people, at most kMaxMessageBytes
  int32_t status = 500;   // HTTP-like status, in [100, 599]
  bool operator==(const Error&) const = default;
};

// ---- Hub -> node ----

struct Challenge {
  static constexpr std::string_view kType = "challenge";
  std::string nonce{};  // base64 (standard, padded) of kNonceBytes random bytes
  std::string hub_id{};
  bool operator==(const Challenge&) const = default;
};

struct Welcome {
  static constexpr std::string_view kType = "welcome";
  std::string node_id{};
  int32_t heartbeat_ms = 5000;  // in [100, 600000]
  bool operator==(const Welcome&) const = default;
};

struct Assign {
  static constexpr std::string_view kType = "assign";
  std::string attempt_id{};
  std::string model{};
  std::string endpoint{};                             // "chat" or "completion"
  nlohmann::json request = nlohmann::json::object();  // the client's request body, an object
  int64_t first_token_deadline_ms = 10000;            // in [1, 3600000]
  bool operator==(const Assign&) const = default;
};

struct Cancel {
  static constexpr std::string_view kType = "cancel";
  std::string attempt_id{};
  bool operator==(const Cancel&) const = default;
};

// Finish running work, take no more.
struct Drain {
  static constexpr std::string_view kType = "drain";
  bool operator==(const Drain&) const = default;
};

struct LoadModel {
  static constexpr std::string_view kType = "load_model";
  std::string model{};
  bool operator==(const LoadModel&) const = default;
};

struct UnloadModel {
  static constexpr std::string_view kType = "unload_model";
  std::string model{};
  bool operator==(const UnloadModel&) const = default;
};

// One credit an operator earned, as the hub booked it.
struct Earning {
  std::string kind{};   // "tokens" (an attempt's share of its charge) or "slot" (a period's
                        // availability credit)
  std::string ref{};    // the attempt id, or "slot:<slot id>:<period>"
  std::string model{};
  int64_t tokens = 0;   // kind "tokens": tokens it streamed; "slot": probes answered
  int64_t micro = 0;    // micro-credits, in [0, kMaxByteCount]
  int64_t at_ms = 0;    // Unix milliseconds
  bool operator==(const Earning&) const = default;
};

inline constexpr int64_t kMaxEarnings = 64;  // per Standing
inline constexpr int64_t kMaxReasons = 16;

// What the operator earned and, when the node got no work lately, why (hub_standing.cc): sent
// every standing interval and soon after the node earns.
struct Standing {
  static constexpr std::string_view kType = "standing";
  int64_t pending_micro = 0;        // the operator's pending book (still verifiable)
  int64_t available_micro = 0;      // ...and its available book
  std::vector<Earning> recent{};    // newest first, at most kMaxEarnings
  std::vector<std::string> idle_reasons{};  // at most kMaxReasons, each at most kMaxMessageBytes
  std::string slot{};               // its reserved slot for people, "" when it offers none
  bool operator==(const Standing&) const = default;
};

using Frame = std::variant<Hello, Challenge, Register, Welcome, Heartbeat, Capacity, Assign,
                           Accepted, Chunk, Complete, Error, Cancel, Drain, LoadModel, UnloadModel,
                           Standing>;

// Parses and validates one frame.  Never throws and never crashes, whatever the bytes.
// Errors: kUnimplemented for a protocol version other than kProtocolVersion, kInvalidArgument for
// everything else, with a message naming the frame type, the field and the offending value, e.g.
// "frame 'chunk': field 'index' must be a non-negative integer (got -3)".
StatusOr<Frame> ParseFrame(std::string_view text);

// Compact JSON.  A frame that satisfies ParseFrame's limits parses back to an equal frame.
std::string SerializeFrame(const Frame& frame);

// "hello", "chunk", "load_model", ...
std::string_view FrameTypeName(const Frame& frame);

}  // namespace loom::network::protocol
