#include "loom/model/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "loom/base/half.h"

namespace loom::model {
namespace {

using kernels::DType;

SynthOptions Tiny(DType type, uint64_t seed = 1) {
  SynthOptions o;
  o.shape = *FindSynthShape("tiny");
  o.type = type;
  o.seed = seed;
  return o;
}

TEST(Synth, ShapesAreListedAndFound) {
  ASSERT_EQ(SynthShapes().size(), 5u);
  const SynthShape* tiny = FindSynthShape("tiny");
  ASSERT_NE(tiny, nullptr);
  EXPECT_EQ(tiny->dim, 64);
  EXPECT_EQ(tiny->ffn_dim, 192);
  EXPECT_EQ(tiny->n_kv_heads, 4);
  const SynthShape* tl = FindSynthShape("tinyllama-1.1b");
  ASSERT_NE(tl, nullptr);
  EXPECT_EQ(tl->ffn_dim, 5632);
  EXPECT_EQ(tl->n_layers, 22);
  EXPECT_EQ(FindSynthShape("llama2-7b")->n_kv_heads, 32);
  EXPECT_EQ(FindSynthShape("gpt5"), nullptr);
  // Qwen3-30B-A3B's config.json.
  const SynthShape* q3 = FindSynthShape("qwen3-30b-a3b");
  ASSERT_NE(q3, nullptr);
  EXPECT_EQ(q3->dim, 2048);
  EXPECT_EQ(HeadDim(*q3), 128);
  EXPECT_EQ(q3->n_heads, 32);
  EXPECT_EQ(q3->n_kv_heads, 4);
  EXPECT_EQ(q3->n_layers, 48);
  EXPECT_EQ(q3->vocab_size, 151936);
  EXPECT_EQ(q3->experts, 128);
  EXPECT_EQ(q3->experts_used, 8);
  EXPECT_EQ(q3->expert_ffn, 768);
  EXPECT_EQ(HeadDim(*tiny), 8);
}

TEST(Synth, ParsesWeightTypes) {
  EXPECT_EQ(ParseDType("q4_0").value(), DType::kQ4_0);
  EXPECT_EQ(ParseDType("Q8_0").value(), DType::kQ8_0);
  EXPECT_EQ(ParseDType("bf16").value(), DType::kBF16);
  EXPECT_EQ(ParseDType("f16").value(), DType::kF16);
  EXPECT_EQ(ParseDType("F32").value(), DType::kF32);
  EXPECT_EQ(ParseDType("q4_k").value(), DType::kQ4_K);
  EXPECT_EQ(ParseDType("q6_k").value(), DType::kQ6_K);
  EXPECT_EQ(ParseDType("q2_k").status().code(), StatusCode::kInvalidArgument);
}

void CheckVocab(int64_t size) {
  StatusOr<TokenizerSpec> v = SynthVocab(size);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(static_cast<int64_t>(v->tokens.size()), size);
  ASSERT_EQ(v->scores.size(), v->tokens.size());
  ASSERT_EQ(v->token_types.size(), v->tokens.size());
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->tokens[0], "<unk>");
  EXPECT_EQ(v->tokens[1], "<s>");
  EXPECT_EQ(v->tokens[2], "</s>");
  EXPECT_EQ(v->token_types[0], 2);
  EXPECT_EQ(v->token_types[1], 3);
  EXPECT_EQ(v->tokens[3], "<0x00>");
  EXPECT_EQ(v->tokens[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(v->tokens[3 + 0xFF], "<0xFF>");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(v->token_types[static_cast<size_t>(3 + b)], 6);
  std::set<std::string> seen(v->tokens.begin(), v->tokens.end());
  EXPECT_EQ(static_cast<int64_t>(seen.size()), size) << "pieces must be unique";
  std::set<std::string> earlier;
  for (size_t i = 259; i < v->tokens.size(); ++i) {
    const std::string& p = v->tokens[i];
    EXPECT_EQ(v->token_types[i], 1);
    if (i > 259) {
      EXPECT_LT(v->scores[i], v->scores[i - 1]) << i;
    }
    // A piece of several characters must be reachable by one merge of two earlier pieces.
    size_t first_char = 1;
    while (first_char < p.size() && (static_cast<unsigned char>(p[first_char]) & 0xC0) == 0x80) {
      ++first_char;
    }
    if (first_char < p.size()) {
      bool splittable = false;
      for (size_t cut = 1; cut < p.size() && !splittable; ++cut) {
        splittable = earlier.count(p.substr(0, cut)) && earlier.count(p.substr(cut));
      }
      EXPECT_TRUE(splittable) << "piece " << i << " '" << p << "'";
    }
    earlier.insert(p);
  }
  if (size < 300) return;
  EXPECT_TRUE(seen.count("\xE2\x96\x81")) << "the word-start mark";
  EXPECT_TRUE(seen.count("e"));
  EXPECT_TRUE(seen.count("\xE2\x96\x81t"));
}

TEST(Synth, VocabularyIsUniqueMergeableAndOrderedByScore) {
  CheckVocab(259);
  CheckVocab(512);
  CheckVocab(32000);
  EXPECT_EQ(SynthVocab(258).status().code(), StatusCode::kInvalidArgument);
}

TEST(Synth, TinyModelsOfEveryTypeLoadAndValidate) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    std::vector<std::byte> bytes;
    ASSERT_TRUE(WriteSynthModelToMemory(Tiny(type), &bytes).ok());
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "tiny.gguf");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const HParams& hp = (*m)->hparams;
    EXPECT_EQ(hp.dim, 64);
    EXPECT_EQ(hp.ffn_dim, 192);
    EXPECT_EQ(hp.n_layers, 5);
    EXPECT_EQ(hp.n_heads, 8);
    EXPECT_EQ(hp.n_kv_heads, 4);
    EXPECT_EQ(hp.vocab_size, 512);
    EXPECT_EQ(hp.context_length, 512);
    EXPECT_FALSE(hp.tied_embeddings);
    EXPECT_EQ((*m)->tokenizer.tokens.size(), 512u);
    EXPECT_EQ((*m)->tensors.at("token_embd.weight").type, type);
    EXPECT_EQ((*m)->tensors.at("output.weight").type, type);
    EXPECT_EQ((*m)->tensors.at("blk.4.ffn_down.weight").type, type);
    EXPECT_EQ((*m)->tensors.at("blk.4.ffn_norm.weight").type, DType::kF32);
    EXPECT_EQ((*m)->metadata.at("general.file_type"), std::to_string(type == DType::kF32    ? 0
                                                                     : type == DType::kF16  ? 1
                                                                     : type == DType::kQ4_0 ? 2
                                                                     : type == DType::kQ8_0 ? 7
                                                                                            : 32));
  }
}

TEST(Synth, WeightsAreSmallAndCenteredAndNormsNearOne) {
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(Tiny(DType::kF32), &bytes).ok());
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "tiny.gguf");
  ASSERT_TRUE(m.ok());
  const TensorInfo& w = (*m)->tensors.at("blk.2.ffn_gate.weight");
  const float* x = reinterpret_cast<const float*>(w.data);
  double sum = 0, sum2 = 0, max_abs = 0;
  for (int64_t i = 0; i < w.elements(); ++i) {
    sum += x[i];
    sum2 += x[i] * x[i];
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
  }
  const double mean = sum / static_cast<double>(w.elements());
  const double stddev = std::sqrt(sum2 / static_cast<double>(w.elements()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(stddev, 0.02, 0.002);
  EXPECT_LT(max_abs, 0.05);  // triangular: bounded by sqrt(6) * 0.02
  const TensorInfo& norm = (*m)->tensors.at("blk.2.attn_norm.weight");
  const float* n = reinterpret_cast<const float*>(norm.data);
  for (int64_t i = 0; i < norm.elements(); ++i) EXPECT_NEAR(n[i], 1.0f, 0.05f);
  // Neighbouring rows and tensors differ.
  EXPECT_NE(x[0], x[64]);
  const float* y = reinterpret_cast<const float*>((*m)->tensors.at("blk.2.ffn_up.weight").data);
  EXPECT_NE(x[0], y[0]);
}

TEST(Synth, OutputDependsOnlyOnTheSeed) {
  std::vector<std::byte> a, b, c, d;
  SynthOptions o = Tiny(DType::kQ8_0, 7);
  o.threads = 1;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &a).ok());
  o.threads = 2;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &b).ok());
  EXPECT_EQ(a, b);
  ASSERT_TRUE(WriteSynthModelToMemory(Tiny(DType::kQ8_0, 8), &c).ok());
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
  int64_t progress_calls = 0;
  int64_t last_done = 0, last_total = 0;
  o.progress = [&](int64_t done, int64_t total) {
    ++progress_calls;
    EXPECT_GT(done, last_done);
    last_done = done;
    last_total = total;
  };
  ASSERT_TRUE(WriteSynthModelToMemory(o, &d).ok());
  EXPECT_EQ(a, d);
  EXPECT_GT(progress_calls, 40);
  EXPECT_EQ(last_done, last_total);
}

TEST(Synth, WritesAFileThatOpens) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("loom_synth_test_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  ASSERT_TRUE(WriteSynthModel(path, Tiny(DType::kQ4_0)).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->tensors.at("blk.0.attn_q.weight").type, DType::kQ4_0);
  std::filesystem::remove(path);
}

TEST(Synth, RejectsShapesThatDoNotFitTheBlocks) {
  SynthOptions o = Tiny(DType::kQ4_0);
  o.shape.ffn_dim = 172;  // stories260K's width is not a multiple of 32
  std::vector<std::byte> bytes;
  const Status s = WriteSynthModelToMemory(o, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q4_0 blocks"), std::string::npos) << s.message();
  o.type = DType::kF32;
  EXPECT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
}

TEST(Synth, MixturesOfExpertsCarryLlamaCppsKeysAndStackedExperts) {
  EXPECT_EQ(ParseSynthArch("mixtral").value(), SynthArch::kMixtral);
  EXPECT_EQ(ParseSynthArch("qwen3moe").value(), SynthArch::kQwen3Moe);
  EXPECT_EQ(ParseSynthArch("deepseek2").value(), SynthArch::kDeepseek2);
  EXPECT_FALSE(ParseSynthArch("deepseek4").ok());
  SynthOptions o = Tiny(DType::kQ8_0);
  o.arch = SynthArch::kQwen3Moe;
  o.n_experts = 6;
  o.n_experts_used = 3;
  o.expert_ffn_dim = 32;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  auto m = OpenModelFromBytes(bytes, "qwen3moe.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const HParams& hp = (*m)->hparams;
  EXPECT_EQ(hp.arch, "qwen3moe");
  EXPECT_EQ(hp.n_experts, 6);
  EXPECT_EQ(hp.n_experts_used, 3);
  EXPECT_EQ(hp.expert_ffn_dim, 32);
  const TensorInfo& gate = (*m)->tensors.at("blk.2.ffn_gate_exps.weight");
  EXPECT_EQ(gate.shape, (std::vector<int64_t>{6, 32, hp.dim}));
  EXPECT_EQ(gate.type, DType::kQ8_0);
  EXPECT_EQ((*m)->tensors.at("blk.2.ffn_down_exps.weight").shape,
            (std::vector<int64_t>{6, hp.dim, 32}));
  EXPECT_EQ((*m)->tensors.at("blk.2.ffn_gate_inp.weight").type, DType::kF32);
  EXPECT_EQ((*m)->tensors.count("blk.2.attn_q_norm.weight"), 1u);
  EXPECT_EQ((*m)->tensors.count("blk.2.ffn_gate.weight"), 0u);

  o.n_experts_used = 7;
  Status s = WriteSynthModelToMemory(o, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("7 experts used of 6"), std::string::npos) << s.message();
  o.n_experts_used = 3;
  o.expert_ffn_dim = 40;
  s = WriteSynthModelToMemory(o, &bytes);
  EXPECT_NE(s.message().find("expert feed-forward width 40"), std::string::npos) << s.message();

  // Heads wider than dim / n_heads (Qwen3-30B-A3B: 32 heads of 128 on dim 2048), qwen3moe only.
  o.expert_ffn_dim = 32;
  o.shape.head_dim = 16;  // 8 heads: a query width of 128 on dim 64
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  m = OpenModelFromBytes(bytes, "qwen3moe-wide-heads.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->hparams.head_dim, 16);
  EXPECT_EQ((*m)->tensors.at("blk.0.attn_q.weight").shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ((*m)->tensors.at("blk.0.attn_k.weight").shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ((*m)->tensors.at("blk.0.attn_output.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ((*m)->tensors.at("blk.0.attn_q_norm.weight").shape, (std::vector<int64_t>{16}));
  o.arch = SynthArch::kLlama;
  s = WriteSynthModelToMemory(o, &bytes);
  EXPECT_NE(s.message().find("only --arch qwen3moe"), std::string::npos) << s.message();
}

// llama.cpp's `llama-quantize Q4_K_M` on a Llama of 22 layers (TinyLlama's count): Q6_K for the
// output head and for attn_v and ffn_down of layers 0-1, 19-21 and every third between (4, 7, ...,
// 16), Q4_K for everything else.
TEST(Synth, Q4KMMixGivesEachMatrixLlamaQuantizesType) {
  EXPECT_EQ(ParseQuantMix("Q4_K_M"), QuantMix::kQ4_K_M);
  EXPECT_EQ(ParseQuantMix("q4_k"), std::nullopt);
  SynthOptions o;
  o.shape = {"mix", 256, 512, 22, 4, 2, 512, 256, 1e-5f, 10000.0f};
  o.type = DType::kQ4_K;
  o.mix = QuantMix::kQ4_K_M;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  auto m = OpenModelFromBytes(bytes, "q4_k_m.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto& t = (*m)->tensors;
  EXPECT_EQ((*m)->metadata.at("general.file_type"), "15");
  EXPECT_EQ(t.at("token_embd.weight").type, DType::kQ4_K);
  EXPECT_EQ(t.at("output.weight").type, DType::kQ6_K);
  EXPECT_EQ(t.at("output_norm.weight").type, DType::kF32);
  const std::set<int> more_bits = {0, 1, 4, 7, 10, 13, 16, 19, 20, 21};
  for (int l = 0; l < 22; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const DType wide = more_bits.count(l) != 0 ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(t.at(p + "attn_v.weight").type, wide) << l;
    EXPECT_EQ(t.at(p + "ffn_down.weight").type, wide) << l;
    for (const char* name : {"attn_q.weight", "attn_k.weight", "attn_output.weight",
                             "ffn_gate.weight", "ffn_up.weight"}) {
      EXPECT_EQ(t.at(p + name).type, DType::kQ4_K) << p + name;
    }
    EXPECT_EQ(t.at(p + "attn_norm.weight").type, DType::kF32);
  }
  // The mix is built on Q4_K's blocks.
  o.type = DType::kQ4_0;
  const Status s = WriteSynthModelToMemory(o, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("built on q4_k"), std::string::npos) << s.message();
}

// Mixtral (exactly 8 experts): attn_v and attn_k Q8_0, attn_output Q5_K, the experts' ffn_down by
// the layer in their name; the router stays f32.
TEST(Synth, Q4KMMixOfEightExpertsFollowsLlamaCppsMixtralRules) {
  SynthOptions o;
  o.shape = *FindSynthShape("small");
  o.shape.n_layers = 2;
  o.shape.ffn_dim = 256;  // each expert's width: one super-block, quick to quantize
  o.arch = SynthArch::kMixtral;
  o.n_experts = 8;
  o.n_experts_used = 2;
  o.type = DType::kQ4_K;
  o.mix = QuantMix::kQ4_K_M;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  auto m = OpenModelFromBytes(bytes, "mixtral-q4_k_m.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto& t = (*m)->tensors;
  for (const std::string p : {"blk.0.", "blk.1."}) {
    EXPECT_EQ(t.at(p + "attn_v.weight").type, DType::kQ8_0);
    EXPECT_EQ(t.at(p + "attn_k.weight").type, DType::kQ8_0);
    EXPECT_EQ(t.at(p + "attn_q.weight").type, DType::kQ4_K);
    EXPECT_EQ(t.at(p + "attn_output.weight").type, DType::kQ5_K);
    EXPECT_EQ(t.at(p + "ffn_gate_exps.weight").type, DType::kQ4_K);
    EXPECT_EQ(t.at(p + "ffn_gate_inp.weight").type, DType::kF32);
  }
  // Of 2 layers, use_more_bits picks the last (layer >= 7 * 2 / 8).
  EXPECT_EQ(t.at("blk.0.ffn_down_exps.weight").type, DType::kQ4_K);
  EXPECT_EQ(t.at("blk.1.ffn_down_exps.weight").type, DType::kQ6_K);
}

TEST(QuantMix, UseMoreBitsAndRowsThatAreNotWholeSuperBlocks) {
  std::vector<int> picked;
  for (int l = 0; l < 8; ++l) {
    if (UseMoreBits(l, 8)) picked.push_back(l);
  }
  EXPECT_EQ(picked, (std::vector<int>{0, 3, 6, 7}));
  // Rows of 96 values (3 blocks of 32) fall back to Q8_0, of 100 to F16; experts' layers come
  // from their names.
  const std::vector<std::string> names = {"output.weight", "blk.0.attn_v.weight",
                                          "blk.2.ffn_down.weight", "blk.7.ffn_down_exps.weight",
                                          "blk.3.ffn_up_exps.weight"};
  EXPECT_EQ(
      QuantMixTypes(QuantMix::kQ4_K_M, names, std::vector<int64_t>{96, 100, 256, 256, 256}, 8, 4),
      (std::vector<DType>{DType::kQ8_0, DType::kF16, DType::kQ4_K, DType::kQ6_K, DType::kQ4_K}));
}

TEST(Synth, PeakedWeightsHaveGainScaledRowsAndAStrongHead) {
  SynthOptions o = Tiny(DType::kF32);
  o.peaked = true;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  auto m = OpenModelFromBytes(bytes, "peaked.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto stddev = [&](const std::string& name) {
    const TensorInfo& t = (*m)->tensors.at(name);
    const float* v = reinterpret_cast<const float*>(t.data);
    double sum = 0;
    for (int64_t i = 0; i < t.elements(); ++i) sum += static_cast<double>(v[i]) * v[i];
    return std::sqrt(sum / static_cast<double>(t.elements()));
  };
  const double cols = static_cast<double>(o.shape.dim);
  EXPECT_NEAR(stddev("blk.0.attn_q.weight"), kPeakedGain / std::sqrt(cols), 0.01);
  EXPECT_NEAR(stddev("output.weight"), kPeakedHeadGain / std::sqrt(cols), 0.05);
}

}  // namespace
}  // namespace loom::model
