#include "loom/network/protocol/frames.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

namespace loom::network::protocol {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

const std::string kSha(64, 'a');
const std::string kSignature(86, 'A');  // 64 zero bytes need 86 characters and "=="
const std::string kNonce = std::string(43, 'A') + "=";

ModelInfo Model(std::string name, bool loaded) {
  return ModelInfo{.name = std::move(name),
                   .sha256 = kSha,
                   .weight_bytes = 988'000'000,
                   .kv_bytes_per_token = 12288,
                   .context = 32768,
                   .loaded = loaded};
}

Register SampleRegister() {
  return Register{.node_id = "node-3f2a",
                  .signature = kSignature + "==",
                  .facts = {.mem_total_bytes = int64_t{64} << 30,
                            .mem_free_bytes = int64_t{40} << 30,
                            .cores = 16,
                            .simd = "avx512",
                            .mem_bandwidth_gbps = 81.25,
                            .os = "Linux 6.1 (x86_64)",
                            .version = "0.1.0"},
                  .models = {Model("Qwen/Qwen2.5-0.5B", true), Model("llama-3.2-1b:q8", false)},
                  .pod = std::nullopt,
                  .max_concurrency = 8};
}

// One frame of every type, plus variants with optional fields present and absent.
std::vector<Frame> SampleFrames() {
  Register with_pod = SampleRegister();
  with_pod.pod = PodInfo{.tp = 2, .pp = 4};
  with_pod.slot = SlotOffer{.model = "llama-3.2-1b:q8", .begin_minute = 1320, .end_minute = 360};
  Register no_models = SampleRegister();
  no_models.models.clear();
  Register located = SampleRegister();
  located.facts.chip = "AMD EPYC 7763 64-Core Processor";
  located.location = Location{.lat = -33.87, .lon = 151.21};
  return {
      Hello{.node_id = "node-3f2a"},
      Challenge{.nonce = kNonce, .hub_id = "hub.example.org"},
      SampleRegister(),
      with_pod,
      no_models,
      Welcome{.node_id = "node-3f2a", .heartbeat_ms = 5000},
      Heartbeat{.running = 2,
                .waiting = 5,
                .mem_free_bytes = 123456789,
                .draining = false,
                .paused = true,
                .loaded = {"Qwen/Qwen2.5-0.5B"}},
      Heartbeat{},
      Capacity{.models = {Model("m1", true)}, .max_concurrency = 4, .mem_free_bytes = 0},
      Assign{.attempt_id = "att-1",
             .model = "Qwen/Qwen2.5-0.5B",
             .endpoint = "chat",
             .request = {{"messages", json::array({{{"role", "user"}, {"content", "hi ☃"}}})},
                         {"max_tokens", 16},
                         {"temperature", 0.7},
                         {"stop", nullptr}},
             .first_token_deadline_ms = 10000},
      Assign{.attempt_id = "att-2",
             .model = "m",
             .endpoint = "completion",
             .request = json::object(),
             .first_token_deadline_ms = 1},
      Accepted{.attempt_id = "att-1", .prompt_token_ids = {1, 2, 3, 2147483647}},
      Accepted{.attempt_id = "att-1", .prompt_token_ids = {}},
      Chunk{.attempt_id = "att-1", .index = 0, .text = "Hello, \"world\"\n€", .token_ids = {9906}},
      Chunk{.attempt_id = "att-1", .index = 7, .text = "", .token_ids = {}},
      Chunk{.attempt_id = "att-2",
            .index = 0,
            .text = " there",
            .token_ids = {383, 12},
            .logprobs = {-0.0684, -1e9},
            .best_logprobs = {-0.0684, -0.5}},
      Complete{.attempt_id = "att-1",
               .finish_reason = "length",
               .prompt_tokens = 12,
               .completion_tokens = 16},
      Error{.attempt_id = std::nullopt, .code = "bad_frame", .message = "nope", .status = 400},
      Error{.attempt_id = "att-1", .code = "model_not_loaded", .message = "", .status = 503},
      Cancel{.attempt_id = "att-1"},
      Drain{},
      LoadModel{.model = "Qwen/Qwen2.5-0.5B"},
      UnloadModel{.model = "Qwen/Qwen2.5-0.5B"},
      Standing{.pending_micro = 1234,
               .available_micro = 99,
               .recent = {{.kind = "tokens", .ref = "cmpl-7-1", .model = "m", .tokens = 16,
                           .micro = 30, .at_ms = 1764633600000},
                          {.kind = "slot", .ref = "slot:3:490176", .model = "m", .tokens = 12,
                           .micro = 7, .at_ms = 1764633500000}},
               .idle_reasons = {"model 'm': 3 requests went to reserved slots"},
               .slot = ""},
      Standing{},
      located,  // (last: tests pick frames above by index)
  };
}

// The serialized frame as JSON, changed by `edit`, as text.
std::string Edited(const Frame& frame, const std::function<void(json&)>& edit) {
  json j = json::parse(SerializeFrame(frame));
  edit(j);
  return j.dump();
}

// The error message ParseFrame gives for `text` ("" if it parsed).
std::string ParseError(std::string_view text) {
  StatusOr<Frame> f = ParseFrame(text);
  return f.ok() ? std::string() : f.status().message();
}

TEST(FramesTest, EveryFrameRoundTrips) {
  for (const Frame& frame : SampleFrames()) {
    const std::string text = SerializeFrame(frame);
    StatusOr<Frame> parsed = ParseFrame(text);
    ASSERT_TRUE(parsed.ok()) << text << "\n" << parsed.status().ToString();
    EXPECT_EQ(*parsed, frame) << text;
    EXPECT_EQ(FrameTypeName(*parsed), FrameTypeName(frame));
  }
}

TEST(FramesTest, EveryTypeIsCovered) {
  std::vector<bool> seen(std::variant_size_v<Frame>, false);
  for (const Frame& frame : SampleFrames()) seen[frame.index()] = true;
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "variant index " << i;
}

TEST(FramesTest, SerializesCompactJsonWithVersionAndType) {
  const std::string text = SerializeFrame(Cancel{.attempt_id = "a1"});
  EXPECT_EQ(text, R"({"attempt_id":"a1","type":"cancel","v":1})");
  EXPECT_EQ(FrameTypeName(LoadModel{}), "load_model");
  EXPECT_EQ(FrameTypeName(UnloadModel{}), "unload_model");
}

TEST(FramesTest, OptionalFieldsMayBeNull) {
  StatusOr<Frame> f = ParseFrame(R"({"v":1,"type":"error","attempt_id":null,"code":"x",)"
                                 R"("message":"m","status":500})");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE(std::get<Error>(*f).attempt_id.has_value());
  const std::string with_null_pod = Edited(SampleRegister(), [](json& j) { j["pod"] = nullptr; });
  StatusOr<Frame> r = ParseFrame(with_null_pod);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(std::get<Register>(*r).pod.has_value());
}

TEST(FramesTest, AcceptsWhitespaceAndKeyOrder) {
  StatusOr<Frame> f = ParseFrame(" {\n \"type\" : \"drain\", \"v\" : 1 }\n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(std::holds_alternative<Drain>(*f));
}

TEST(FramesTest, RejectsWhatIsNotAJsonObject) {
  EXPECT_THAT(ParseError(""), HasSubstr("frame: not valid JSON"));
  EXPECT_THAT(ParseError("{\"v\":1,"), HasSubstr("frame: not valid JSON"));
  EXPECT_THAT(ParseError("{\"v\":1} trailing"), HasSubstr("frame: not valid JSON"));
  EXPECT_THAT(ParseError("{'v':1}"), HasSubstr("frame: not valid JSON"));
  EXPECT_THAT(ParseError("{\"v\":1 /* comment */}"), HasSubstr("frame: not valid JSON"));
  EXPECT_THAT(ParseError("[1,2]"), HasSubstr("frame: must be a JSON object (got an array of 2"));
  EXPECT_THAT(ParseError("\"hello\""), HasSubstr("must be a JSON object (got \"hello\")"));
  EXPECT_THAT(ParseError("null"), HasSubstr("must be a JSON object (got null)"));
}

TEST(FramesTest, RejectsMissingOrUnsupportedVersion) {
  EXPECT_THAT(ParseError(R"({"type":"drain"})"), HasSubstr("missing field 'v'"));
  EXPECT_THAT(ParseError(R"({"v":"1","type":"drain"})"),
              HasSubstr("field 'v' must be a non-negative integer (got \"1\")"));
  StatusOr<Frame> v2 = ParseFrame(R"({"v":2,"type":"drain"})");
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(v2.status().message(),
              HasSubstr("protocol version 2 is not supported (this build understands version 1)"));
  EXPECT_THAT(ParseError(R"({"v":1.0,"type":"drain"})"), HasSubstr("field 'v' must be"));
}

TEST(FramesTest, RejectsMissingOrUnknownType) {
  EXPECT_THAT(ParseError(R"({"v":1})"), HasSubstr("missing field 'type'"));
  EXPECT_THAT(ParseError(R"({"v":1,"type":7})"),
              HasSubstr("field 'type' must be a string (got 7)"));
  EXPECT_THAT(ParseError(R"({"v":1,"type":"benchmark"})"),
              HasSubstr("frame: unknown type \"benchmark\" (known: hello, challenge,"));
}

TEST(FramesTest, RejectsMissingRequiredField) {
  const std::string text = Edited(Chunk{.attempt_id = "a"}, [](json& j) { j.erase("index"); });
  EXPECT_EQ(ParseError(text), "frame 'chunk': missing field 'index'");
  const std::string nested = Edited(SampleRegister(), [](json& j) { j["facts"].erase("cores"); });
  EXPECT_EQ(ParseError(nested), "frame 'register': missing field 'facts.cores'");
}

TEST(FramesTest, RejectsWrongTypes) {
  const Chunk chunk{.attempt_id = "a"};
  EXPECT_EQ(ParseError(Edited(chunk, [](json& j) { j["index"] = -3; })),
            "frame 'chunk': field 'index' must be a non-negative integer (got -3)");
  EXPECT_EQ(ParseError(Edited(chunk, [](json& j) { j["index"] = 1.5; })),
            "frame 'chunk': field 'index' must be a non-negative integer (got 1.5)");
  EXPECT_EQ(ParseError(Edited(chunk, [](json& j) { j["index"] = "3"; })),
            "frame 'chunk': field 'index' must be a non-negative integer (got \"3\")");
  EXPECT_EQ(ParseError(Edited(chunk, [](json& j) { j["text"] = 5; })),
            "frame 'chunk': field 'text' must be a string of at most 1048576 bytes (got 5)");
  EXPECT_EQ(ParseError(Edited(chunk, [](json& j) { j["token_ids"] = json::object(); })),
            "frame 'chunk': field 'token_ids' must be an array of at most 1048576 items (got an "
            "object)");
  EXPECT_THAT(ParseError(Edited(Heartbeat{}, [](json& j) { j["paused"] = 0; })),
              HasSubstr("field 'paused' must be true or false (got 0)"));
  EXPECT_THAT(ParseError(Edited(Heartbeat{}, [](json& j) { j["running"] = nullptr; })),
              HasSubstr("field 'running' must be a non-negative integer (got null)"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(), [](json& j) { j["facts"] = "x"; })),
              HasSubstr("field 'facts' must be an object (got \"x\")"));
  EXPECT_THAT(ParseError(Edited(SampleFrames()[9], [](json& j) { j["request"] = "hi"; })),
              HasSubstr("frame 'assign': field 'request' must be an object (got \"hi\")"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(), [](json& j) { j["models"][1] = 3; })),
              HasSubstr("field 'models[1]' must be an object (got 3)"));
}

TEST(FramesTest, ASlotMustNameOneOfTheNodesModelsAndAWindow) {
  auto with_slot = [](json slot) {
    return Edited(SampleRegister(), [&](json& j) { j["slot"] = slot; });
  };
  EXPECT_THAT(ParseError(with_slot({{"model", "other"}, {"begin_minute", 0}, {"end_minute", 1440}})),
              HasSubstr("frame 'register': field 'slot' names model \"other\", which is not one "
                        "of the node's models"));
  EXPECT_THAT(
      ParseError(with_slot({{"model", "llama-3.2-1b:q8"}, {"begin_minute", 60}, {"end_minute", 60}})),
      HasSubstr("field 'slot.end_minute' must differ from 'begin_minute'"));
  EXPECT_THAT(
      ParseError(with_slot({{"model", "llama-3.2-1b:q8"}, {"begin_minute", 1440}, {"end_minute", 1}})),
      HasSubstr("field 'slot.begin_minute' must be a non-negative integer at most 1439 (got 1440)"));
}

TEST(FramesTest, StandingRejectsUnknownEarningsAndLongReasons) {
  const Frame standing = Standing{.recent = {{.kind = "tokens", .ref = "a", .model = "m"}}};
  EXPECT_THAT(ParseError(Edited(standing, [](json& j) { j["recent"][0]["kind"] = "bonus"; })),
              HasSubstr("field 'recent[0].kind' must be 'tokens' or 'slot'"));
  EXPECT_THAT(ParseError(Edited(standing, [](json& j) { j["recent"][0]["micro"] = -1; })),
              HasSubstr("field 'recent[0].micro' must be a non-negative integer"));
  EXPECT_THAT(ParseError(Edited(standing, [](json& j) {
                j["idle_reasons"] = json::array({std::string(5000, 'x')});
              })),
              HasSubstr("field 'idle_reasons[0]' must be a string of at most 4096 bytes"));
}

TEST(FramesTest, RejectsNumbersOutOfRange) {
  EXPECT_THAT(ParseError(Edited(Welcome{.node_id = "n"}, [](json& j) { j["heartbeat_ms"] = 99; })),
              HasSubstr("field 'heartbeat_ms' must be an integer in [100, 600000] (got 99)"));
  EXPECT_THAT(ParseError(Edited(Error{.code = "c"}, [](json& j) { j["status"] = 600; })),
              HasSubstr("field 'status' must be an integer in [100, 599] (got 600)"));
  EXPECT_THAT(
      ParseError(Edited(Heartbeat{}, [](json& j) { j["mem_free_bytes"] = uint64_t{1} << 63; })),
      HasSubstr("field 'mem_free_bytes' must be a non-negative integer at most 281474976710656 "
                "(got 9223372036854775808)"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(), [](json& j) { j["max_concurrency"] = 0; })),
              HasSubstr("field 'max_concurrency' must be an integer in [1, 4096] (got 0)"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(),
                                [](json& j) {
                                  j["pod"] = {{"tp", 65}, {"pp", 1}};
                                })),
              HasSubstr("field 'pod.tp' must be an integer in [1, 64] (got 65)"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(),
                                [](json& j) { j["facts"]["mem_free_bytes"] = int64_t{65} << 30; })),
              HasSubstr("field 'facts.mem_free_bytes' must be a non-negative integer at most "
                        "68719476736"));
  EXPECT_THAT(
      ParseError(Edited(SampleRegister(), [](json& j) { j["facts"]["mem_bandwidth_gbps"] = -1; })),
      HasSubstr("field 'facts.mem_bandwidth_gbps' must be a number in [0.0, 1000000.0] (got -1)"));
  EXPECT_THAT(ParseError(Edited(Accepted{.attempt_id = "a"},
                                [](json& j) {
                                  j["prompt_token_ids"] = {1, -2};
                                })),
              HasSubstr("field 'prompt_token_ids[1]' must be a non-negative integer (got -2)"));
  EXPECT_THAT(ParseError(Edited(Accepted{.attempt_id = "a"},
                                [](json& j) { j["prompt_token_ids"] = {int64_t{1} << 31}; })),
              HasSubstr("'prompt_token_ids[0]' must be a non-negative integer at most 2147483647"));
  EXPECT_THAT(ParseError(R"({"v":1,"type":"chunk","attempt_id":"a","index":1e400,"text":"",)"
                         R"("token_ids":[]})"),
              HasSubstr("frame: not valid JSON"));
}

TEST(FramesTest, ChunkScoresAreOptionalAndOnePerToken) {
  const Chunk plain{.attempt_id = "a", .token_ids = {1, 2}};
  EXPECT_THAT(SerializeFrame(plain), ::testing::Not(HasSubstr("logprobs")));
  EXPECT_THAT(ParseError(Edited(plain, [](json& j) { j["logprobs"] = {-1.0}; })),
              HasSubstr("field 'logprobs' has 1 items but 'token_ids' has 2"));
  EXPECT_THAT(
      ParseError(Edited(plain,
                        [](json& j) {
                          j["best_logprobs"] = {-1.0, 2.0};
                        })),
      HasSubstr("field 'best_logprobs[1]' must be a number in [-1000000000.0, 1.0] (got 2.0)"));
  EXPECT_THAT(ParseError(Edited(plain,
                                [](json& j) {
                                  j["logprobs"] = {-1.0, "x"};
                                })),
              HasSubstr("field 'logprobs[1]' must be a number"));
  auto null = ParseFrame(Edited(plain, [](json& j) { j["logprobs"] = nullptr; }));
  ASSERT_TRUE(null.ok()) << null.status().ToString();
  EXPECT_TRUE(std::get<Chunk>(*null).logprobs.empty());
}

TEST(FramesTest, ChipAndLocationAreOptional) {
  // A register of an older agent (no chip, no location) still parses.
  StatusOr<Frame> r = ParseFrame(SerializeFrame(SampleRegister()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::get<Register>(*r).facts.chip, "");
  EXPECT_FALSE(std::get<Register>(*r).location.has_value());
  const std::string located = Edited(SampleRegister(), [](json& j) {
    j["facts"]["chip"] = "Apple M2 Max";
    j["location"] = {{"lat", 90}, {"lon", -180}};
  });
  r = ParseFrame(located);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::get<Register>(*r).facts.chip, "Apple M2 Max");
  EXPECT_EQ(std::get<Register>(*r).location, (Location{.lat = 90, .lon = -180}));
  EXPECT_THAT(ParseError(Edited(SampleRegister(),
                                [](json& j) { j["location"] = {{"lat", 90.5}, {"lon", 0}}; })),
              HasSubstr("field 'location.lat' must be a number in [-90.0, 90.0] (got 90.5)"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(),
                                [](json& j) { j["location"] = {{"lat", 0}, {"lon", "east"}}; })),
              HasSubstr("field 'location.lon' must be a number in [-180.0, 180.0]"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(), [](json& j) { j["location"] = {{"lat", 0}}; })),
              HasSubstr("missing field 'location.lon'"));
  EXPECT_THAT(ParseError(Edited(SampleRegister(),
                                [](json& j) {
                                  j["location"] = {{"lat", 0}, {"lon", 0}, {"alt", 3}};
                                })),
              HasSubstr("unknown field \"location.alt\""));
  EXPECT_THAT(ParseError(Edited(SampleRegister(), [](json& j) { j["facts"]["chip"] = "a\nb"; })),
              HasSubstr("field 'facts.chip' must be a string of at most 128 bytes"));
}

TEST(FramesTest, RejectsUnknownFields) {
  EXPECT_EQ(ParseError(Edited(Drain{}, [](json& j) { j["extra"] = 1; })),
            "frame 'drain': unknown field \"extra\"");
  EXPECT_EQ(ParseError(Edited(SampleRegister(), [](json& j) { j["models"][0]["gpu"] = true; })),
            "frame 'register': unknown field \"models[0].gpu\"");
  EXPECT_EQ(ParseError(Edited(SampleRegister(), [](json& j) { j["facts"]["x"] = true; })),
            "frame 'register': unknown field \"facts.x\"");
}

TEST(FramesTest, RejectsDuplicateKeys) {
  EXPECT_THAT(ParseError(R"({"v":1,"type":"cancel","attempt_id":"a","attempt_id":"b"})"),
              HasSubstr("frame: duplicate key \"attempt_id\""));
  EXPECT_THAT(ParseError(R"({"v":1,"type":"drain","x":{"k":1,"k":2}})"),
              HasSubstr("duplicate key \"k\""));
  EXPECT_THAT(ParseError(Edited(Heartbeat{},
                                [](json& j) {
                                  j["loaded"] = {"m", "m"};
                                })),
              HasSubstr("frame 'heartbeat': field 'loaded' lists \"m\" twice"));
  Register twice = SampleRegister();
  twice.models[1].name = twice.models[0].name;
  EXPECT_THAT(ParseError(SerializeFrame(twice)),
              HasSubstr("field 'models' lists \"Qwen/Qwen2.5-0.5B\" twice"));
}

TEST(FramesTest, RejectsBadStrings) {
  EXPECT_EQ(ParseError(SerializeFrame(Hello{.node_id = "no de"})),
            "frame 'hello': field 'node_id' must be 1-128 bytes of [A-Za-z0-9._:/@+-] (got \"no "
            "de\")");
  EXPECT_THAT(ParseError(SerializeFrame(Hello{.node_id = ""})), HasSubstr("(got \"\")"));
  EXPECT_THAT(ParseError(SerializeFrame(Hello{.node_id = std::string(129, 'x')})),
              HasSubstr("field 'node_id' must be 1-128 bytes of [A-Za-z0-9._:/@+-] (got "
                        "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"... (129 bytes))"));
  EXPECT_TRUE(ParseFrame(SerializeFrame(Hello{.node_id = std::string(128, 'x')})).ok());
  EXPECT_THAT(ParseError(SerializeFrame(LoadModel{.model = "café"})),
              HasSubstr("(got \"caf\\u00e9\")"));
  EXPECT_THAT(ParseError(SerializeFrame(Error{.code = "c", .message = std::string(4097, 'm')})),
              HasSubstr("field 'message' must be a string of at most 4096 bytes"));
  Register bad_label = SampleRegister();
  bad_label.facts.os = "Linux\n6.1";
  EXPECT_THAT(ParseError(SerializeFrame(bad_label)),
              HasSubstr("field 'facts.os' must be a string of at most 128 bytes without control"));
  EXPECT_THAT(ParseError(Edited(Complete{.attempt_id = "a", .finish_reason = "stop"},
                                [](json& j) { j["finish_reason"] = "eos"; })),
              HasSubstr("field 'finish_reason' must be 'stop' or 'length' (got \"eos\")"));
  EXPECT_THAT(ParseError(SerializeFrame(Assign{.attempt_id = "a", .model = "m", .endpoint = "x"})),
              HasSubstr("field 'endpoint' must be 'chat' or 'completion'"));
}

TEST(FramesTest, RejectsBadHashesAndBase64) {
  Register upper = SampleRegister();
  upper.models[0].sha256 = std::string(64, 'A');
  EXPECT_THAT(ParseError(SerializeFrame(upper)),
              HasSubstr("field 'models[0].sha256' must be 64 lowercase hex digits"));
  Register short_hash = SampleRegister();
  short_hash.models[0].sha256 = std::string(63, 'a');
  EXPECT_THAT(ParseError(SerializeFrame(short_hash)), HasSubstr("must be 64 lowercase hex"));
  Register bad_sig = SampleRegister();
  bad_sig.signature = "not base64";
  EXPECT_THAT(ParseError(SerializeFrame(bad_sig)),
              HasSubstr("field 'signature' must be base64 of 64 bytes (got \"not base64\")"));
  bad_sig.signature = std::string(88, 'A');  // decodes, but to 66 bytes
  EXPECT_THAT(ParseError(SerializeFrame(bad_sig)), HasSubstr("must be base64 of 64 bytes"));
  EXPECT_THAT(ParseError(SerializeFrame(Challenge{.nonce = "AAAA", .hub_id = "h"})),
              HasSubstr("field 'nonce' must be base64 of 32 bytes (got \"AAAA\")"));
}

TEST(FramesTest, RejectsTooManyItems) {
  Accepted big{.attempt_id = "a", .prompt_token_ids = std::vector<int32_t>((1 << 20) + 1, 7)};
  EXPECT_THAT(ParseError(SerializeFrame(big)),
              HasSubstr("field 'prompt_token_ids' must be an array of at most 1048576 items (got "
                        "an array of 1048577 items)"));
  big.prompt_token_ids.pop_back();
  EXPECT_TRUE(ParseFrame(SerializeFrame(big)).ok());
  Capacity many;
  for (int i = 0; i < 257; ++i) many.models.push_back(Model(StrCat("m", i), false));
  EXPECT_THAT(ParseError(SerializeFrame(many)),
              HasSubstr("field 'models' must be an array of at most 256 items"));
}

TEST(FramesTest, RejectsFramesOverTheSizeLimit) {
  const Chunk chunk{.attempt_id = "a", .text = std::string(kMaxChunkTextBytes, 'x')};
  EXPECT_TRUE(ParseFrame(SerializeFrame(chunk)).ok());
  std::string text = SerializeFrame(chunk);
  text.append(kMaxFrameBytes - text.size() + 1, ' ');  // valid JSON, one byte too long
  EXPECT_THAT(ParseError(text), HasSubstr("frame: 8388609 bytes is over the limit of 8388608"));
  EXPECT_THAT(ParseError(SerializeFrame(
                  Chunk{.attempt_id = "a", .text = std::string(kMaxChunkTextBytes + 1, 'x')})),
              HasSubstr("field 'text' must be a string of at most 1048576 bytes (got \"xxx"));
}

TEST(FramesTest, RejectsDeepNesting) {
  std::string deep = R"({"v":1,"type":"assign","attempt_id":"a","model":"m","endpoint":"chat",)"
                     R"("first_token_deadline_ms":5,"request":{"x":)";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}}";
  EXPECT_THAT(ParseError(deep), HasSubstr("frame: JSON nested deeper than 64 levels"));
}

TEST(FramesTest, RejectsInvalidUtf8) {
  const std::string bad =
      "{\"v\":1,\"type\":\"chunk\",\"attempt_id\":\"a\",\"index\":0,"
      "\"text\":\"\xff\xfe\",\"token_ids\":[]}";
  const std::string message = ParseError(bad);
  EXPECT_THAT(message, HasSubstr("frame: not valid JSON"));
  for (char c : message) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << "raw byte in message";
  EXPECT_THAT(ParseError("{\"v\":1,\"type\":\"drain\",\"\xc3\":1}"), HasSubstr("not valid JSON"));
  // An overlong encoding of '/' and a lone surrogate escape.
  EXPECT_THAT(ParseError("{\"v\":1,\"type\":\"hello\",\"node_id\":\"\xc0\xaf\"}"),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseError(R"({"v":1,"type":"hello","node_id":"\ud800"})"),
              HasSubstr("not valid JSON"));
}

TEST(FramesTest, SerializeReplacesInvalidUtf8InsteadOfThrowing) {
  const std::string text = SerializeFrame(Chunk{.attempt_id = "a", .text = "ab\xe2\x82"});
  StatusOr<Frame> parsed = ParseFrame(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(std::get<Chunk>(*parsed).text, "ab\xef\xbf\xbd");
}

TEST(FramesTest, RejectsEveryTruncatedPrefix) {
  for (const Frame& frame : SampleFrames()) {
    const std::string text = SerializeFrame(frame);
    for (size_t n = 0; n < text.size(); ++n) {
      EXPECT_FALSE(ParseFrame(std::string_view(text).substr(0, n)).ok())
          << "prefix of " << n << " bytes of " << text;
    }
  }
}

TEST(FramesTest, CommittedFuzzSeedsAreValidFrames) {
  const fs::path dir = fs::path(LOOM_SOURCE_DIR) / "fuzz/corpus/network_frame_fuzz";
  int seeds = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    StatusOr<Frame> frame = ParseFrame(text);
    EXPECT_TRUE(frame.ok()) << entry.path() << ": " << frame.status().ToString();
    ++seeds;
  }
  EXPECT_GE(seeds, 3);
}

}  // namespace
}  // namespace loom::network::protocol
