// Hugging Face model directories: config.json, single and sharded safetensors, tensor renaming,
// tied heads, dtypes, special ids, rope scaling, and bad inputs with errors that name the file.
#include "loom/model/hf_model.h"

#include <gtest/gtest.h>

#include <cstring>

#include "loom/model/hf_test_util.h"
#include "loom/model/model_file.h"
#include "loom/model/transformer.h"

namespace loom::model {
namespace {

using testing::TempDir;
using testing::TestTensor;
using testing::TinyHfSpec;
using testing::WriteText;
using testing::WriteTinyHfModel;

float FloatAt(const TensorInfo& t, int64_t i) {
  float v = 0;
  if (t.type == kernels::DType::kF32) {
    std::memcpy(&v, t.data + 4 * i, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    v = t.type == kernels::DType::kF16 ? base::F16ToF32(h) : base::Bf16ToF32(h);
  }
  return v;
}

TEST(HfNamesTest, MapsModulesBothWays) {
  EXPECT_EQ(HfModuleToGguf("model.embed_tokens"), "token_embd");
  EXPECT_EQ(HfModuleToGguf("lm_head"), "output");
  EXPECT_EQ(HfModuleToGguf("model.norm"), "output_norm");
  EXPECT_EQ(HfModuleToGguf("model.layers.12.self_attn.q_proj"), "blk.12.attn_q");
  EXPECT_EQ(HfModuleToGguf("model.layers.0.mlp.down_proj"), "blk.0.ffn_down");
  EXPECT_EQ(HfModuleToGguf("model.layers.3.self_attn.k_norm"), "blk.3.attn_k_norm");
  EXPECT_EQ(HfModuleToGguf("model.layers.3.post_attention_layernorm"), "blk.3.ffn_norm");
  EXPECT_EQ(HfModuleToGguf("model.layers.01.mlp.up_proj"), std::nullopt);  // not canonical
  EXPECT_EQ(HfModuleToGguf("model.layers.x.mlp.up_proj"), std::nullopt);
  EXPECT_EQ(HfModuleToGguf("model.layers.1.mlp.experts"), std::nullopt);
  EXPECT_EQ(HfModuleToGguf("vision_tower.blocks.0"), std::nullopt);
  EXPECT_EQ(GgufModuleToHf("blk.7.attn_output"), "model.layers.7.self_attn.o_proj");
  EXPECT_EQ(GgufModuleToHf("token_embd"), "model.embed_tokens");
  EXPECT_EQ(GgufModuleToHf("rope_freqs"), std::nullopt);
}

TEST(HfModelTest, OpensADirectoryWithRenamedTensorsAndConfigValues) {
  TempDir dir;
  TinyHfSpec spec;
  const testing::HfWeights w = WriteTinyHfModel(dir.path(), spec);
  auto m = OpenModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelFile& mf = **m;
  EXPECT_EQ(mf.format, "hf");
  EXPECT_EQ(mf.path, dir.path());
  const HParams& hp = mf.hparams;
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.dim, 32);
  EXPECT_EQ(hp.ffn_dim, 48);
  EXPECT_EQ(hp.n_layers, 2);
  EXPECT_EQ(hp.n_heads, 4);
  EXPECT_EQ(hp.n_kv_heads, 2);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.vocab_size, 40);
  EXPECT_EQ(hp.context_length, 64);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-6f);
  EXPECT_EQ(hp.rope_style, kernels::RopeStyle::kHalves);
  EXPECT_FALSE(hp.tied_embeddings);
  EXPECT_EQ(mf.tokenizer.model, "");
  EXPECT_EQ(mf.tokenizer.bos_id, 1);
  EXPECT_EQ(mf.tokenizer.eos_id, 2);  // the first of [2, 3]
  EXPECT_EQ(mf.tensors.size(), 3u + 9u * 2u);
  const TensorInfo& q = mf.tensors.at("blk.1.attn_q.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{32, 32}));
  const std::vector<float>& want = w.at("model.layers.1.self_attn.q_proj.weight");
  for (int64_t i : {0, 5, 1023}) EXPECT_EQ(FloatAt(q, i), want[static_cast<size_t>(i)]);
  EXPECT_EQ(mf.metadata.at("hf.model_type"), "llama");
  ASSERT_EQ(mf.mappings.size(), 1u);
  EXPECT_TRUE(BindWeights(mf).ok());
}

TEST(HfModelTest, TiedHeadsAndHalfPrecisionTypes) {
  for (StDType dtype : {StDType::kF16, StDType::kBF16}) {
    TempDir dir;
    TinyHfSpec spec;
    spec.tied = true;
    spec.dtype = dtype;
    const testing::HfWeights w = WriteTinyHfModel(dir.path(), spec);
    auto m = OpenModel(dir.path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_TRUE((*m)->hparams.tied_embeddings);
    EXPECT_EQ((*m)->tensors.count("output.weight"), 0u);
    const TensorInfo& e = (*m)->tensors.at("token_embd.weight");
    EXPECT_EQ(e.type, dtype == StDType::kF16 ? kernels::DType::kF16 : kernels::DType::kBF16);
    EXPECT_EQ(FloatAt(e, 17), w.at("model.embed_tokens.weight")[17]);
    auto bound = BindWeights(**m);
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    EXPECT_EQ(bound->output.data, bound->token_embd.data);
  }
}

TEST(HfModelTest, HeadDroppedByExporterMeansTiedWhenConfigIsSilent) {
  TempDir dir;
  TinyHfSpec spec;
  spec.tied = true;
  WriteTinyHfModel(dir.path(), spec);
  std::string config = testing::TinyConfigJson(spec);
  config.replace(config.find(R"("tie_word_embeddings": true, )"), 29, "");
  WriteText(dir / "config.json", config);
  auto m = OpenModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE((*m)->hparams.tied_embeddings);

  // Said untied but without lm_head: an error naming the missing tensor.
  config = testing::TinyConfigJson(spec);
  config.replace(config.find(R"("tie_word_embeddings": true)"), 27,
                 R"("tie_word_embeddings": false)");
  WriteText(dir / "config.json", config);
  auto bad = OpenModel(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("output.weight"), std::string::npos);
}

TEST(HfModelTest, ShardedDirectoriesFollowTheIndex) {
  TempDir src, dir;
  WriteTinyHfModel(src.path(), TinyHfSpec{});
  auto whole = OpenModel(src.path());
  ASSERT_TRUE(whole.ok());
  // Split the tensors over two shard files by layer.
  auto bytes = base::ReadFileToString(src / "model.safetensors");
  ASSERT_TRUE(bytes.ok());
  auto st =
      ParseSafetensors({reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()}, "x");
  ASSERT_TRUE(st.ok());
  std::map<std::string, TestTensor> a, b;
  std::string index = R"({"metadata": {"total_size": 1}, "weight_map": {)";
  bool first = true;
  for (const auto& [name, t] : st->tensors) {
    TestTensor tt;
    tt.shape = t.shape;
    tt.values.resize(static_cast<size_t>(t.elements()));
    std::memcpy(tt.values.data(), t.data.data(), t.data.size());
    const bool second = name.find("layers.1.") != std::string::npos;
    (second ? b : a)[name] = tt;
    index += StrCat(first ? "" : ", ", "\"", name, "\": \"model-0000", second ? 2 : 1,
                    "-of-00002.safetensors\"");
    first = false;
  }
  testing::WriteSafetensors(dir / "model-00001-of-00002.safetensors", a);
  testing::WriteSafetensors(dir / "model-00002-of-00002.safetensors", b);
  WriteText(dir / "model.safetensors.index.json", index + "}}");
  WriteText(dir / "config.json", testing::TinyConfigJson(TinyHfSpec{}));
  auto m = OpenModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->mappings.size(), 2u);
  EXPECT_EQ((*m)->tensors.size(), (*whole)->tensors.size());
  EXPECT_EQ(FloatAt((*m)->tensors.at("blk.1.ffn_up.weight"), 9),
            FloatAt((*whole)->tensors.at("blk.1.ffn_up.weight"), 9));

  // An index that points a tensor at the wrong shard, or outside the directory.
  std::string wrong = index;
  wrong.replace(wrong.find("model-00002"), 11, "model-00001");
  WriteText(dir / "model.safetensors.index.json", wrong + "}}");
  auto bad = OpenModel(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("as the weight_map says"), std::string::npos);
  WriteText(dir / "model.safetensors.index.json",
            R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
  bad = OpenModel(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected a file name in the directory"),
            std::string::npos);
}

TEST(HfModelTest, MistralSlidingWindowCapsTheContext) {
  TempDir dir;
  TinyHfSpec spec;
  spec.model_type = "mistral";
  WriteTinyHfModel(dir.path(), spec);
  std::string config = testing::TinyConfigJson(spec);
  config.insert(config.size() - 1, R"(, "sliding_window": 16)");
  WriteText(dir / "config.json", config);
  auto m = OpenModel(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->hparams.arch, "mistral");
  EXPECT_EQ((*m)->hparams.context_length, 16);
  EXPECT_TRUE(BindWeights(**m).ok());
}

TEST(HfConfigTest, ReadsLlama3RopeScalingAndNewerSpellings) {
  auto c = ParseHfConfig(
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10,
          "max_position_embeddings": 131072, "rope_theta": 500000.0,
          "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"},
          "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": [2, 9],
          "head_dim": null, "torch_dtype": "bfloat16"})",
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hp.head_dim, 32);  // null: hidden_size / heads
  EXPECT_EQ(c->hp.n_kv_heads, 2);
  EXPECT_EQ(c->hp.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(c->hp.rope_scaling.factor, 32.0f);
  EXPECT_EQ(c->hp.rope_scaling.original_context, 8192);
  EXPECT_FLOAT_EQ(c->hp.rope_theta, 500000.0f);
  EXPECT_TRUE(c->hp.tied_embeddings);
  EXPECT_EQ(c->eos_ids, (std::vector<int32_t>{2, 9}));
  EXPECT_EQ(c->torch_dtype, "bfloat16");

  auto linear = ParseHfConfig(
      R"({"model_type": "qwen2", "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10,
          "max_position_embeddings": 64, "rope_scaling": {"type": "linear", "factor": 2}})",
      "config.json");
  ASSERT_TRUE(linear.ok()) << linear.status().ToString();
  EXPECT_EQ(linear->hp.rope_scaling.type, RopeScalingType::kLinear);
}

struct BadConfig {
  const char* what;
  std::string json;
  StatusCode code;
  const char* expect;
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

const std::string kBase =
    R"("hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
       "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 64)";

TEST_P(BadConfigTest, FailsNamingTheFileAndKey) {
  const BadConfig& c = GetParam();
  auto r = ParseHfConfig(c.json, "/m/config.json");
  ASSERT_FALSE(r.ok()) << c.what;
  EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
  EXPECT_NE(r.status().message().find("/m/config.json"), std::string::npos);
  EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfigTest,
    ::testing::Values(
        BadConfig{"not json", "{\"model_type\": ", StatusCode::kInvalidArgument, "not valid JSON"},
        BadConfig{"array", "[]", StatusCode::kInvalidArgument, "expected an object"},
        BadConfig{
            "unknown arch",
            R"({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], )" + kBase + "}",
            StatusCode::kUnimplemented, "model_type 'gemma2' (Gemma2ForCausalLM)"},
        BadConfig{"no model_type", "{" + kBase + "}", StatusCode::kInvalidArgument,
                  "missing \"model_type\""},
        BadConfig{"missing key",
                  R"({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2,
                      "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 64})",
                  StatusCode::kInvalidArgument, "missing \"hidden_size\""},
        BadConfig{"string size", R"({"model_type": "llama", "hidden_size": "8"})",
                  StatusCode::kInvalidArgument, "\"hidden_size\" is \"8\", expected an integer"},
        BadConfig{"yarn",
                  R"({"model_type": "qwen2", "rope_scaling": {"type": "yarn",
                  "factor": 4}, )" +
                      kBase + "}",
                  StatusCode::kUnimplemented, "rope_scaling type 'yarn'"},
        BadConfig{"gelu", R"({"model_type": "llama", "hidden_act": "gelu", )" + kBase + "}",
                  StatusCode::kUnimplemented, "hidden_act 'gelu'"},
        BadConfig{"eos out of range",
                  R"({"model_type": "llama", "eos_token_id": [2, 10], )" + kBase + "}",
                  StatusCode::kInvalidArgument, "eos_token_id 10"},
        BadConfig{"gptq",
                  R"({"model_type": "llama", "quantization_config":
                  {"quant_method": "gptq", "bits": 4}, )" +
                      kBase + "}",
                  StatusCode::kUnimplemented, "quant_method \"gptq\""},
        BadConfig{"mlx bits",
                  R"({"model_type": "llama", "quantization":
                  {"bits": 7, "group_size": 64}, )" +
                      kBase + "}",
                  StatusCode::kUnimplemented, "bits is 7"}));

TEST(HfModelTest, DirectoryErrorsNameTheFile) {
  TempDir dir;
  auto r = OpenModel(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("without config.json"), std::string::npos);

  WriteTinyHfModel(dir.path(), TinyHfSpec{});
  WriteText(dir / "config.json", "{\"model_type\": \"llama\", oops}");
  r = OpenModel(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir / "config.json"), std::string::npos);

  // A corrupt weights file: the error names it.
  WriteText(dir / "config.json", testing::TinyConfigJson(TinyHfSpec{}));
  std::string raw(8, '\0');
  raw[0] = 7;
  WriteText(dir / "model.safetensors", raw + R"({"a":1})");
  r = OpenModel(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir / "model.safetensors"), std::string::npos)
      << r.status().ToString();

  // Weights of a dtype the forward pass cannot use.
  SafetensorsWriter w;
  ASSERT_TRUE(w.AddTensor("model.norm.weight", StDType::kI32, {2}).ok());
  std::vector<std::byte> out;
  ASSERT_TRUE(w.BeginMemory(&out).ok());
  ASSERT_TRUE(w.WriteTensorData(std::vector<std::byte>(8)).ok());
  ASSERT_TRUE(w.Finish().ok());
  ASSERT_TRUE(base::WriteFileAtomically(dir / "model.safetensors", out).ok());
  r = OpenModel(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'model.norm.weight' is I32"), std::string::npos)
      << r.status().ToString();

  // A .safetensors file given instead of its directory.
  r = OpenModel(dir / "model.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("give the model directory"), std::string::npos);
}

}  // namespace
}  // namespace loom::model
