// Writes small, valid seed inputs for the fuzz targets: fuzz_seeds OUT_DIR creates
// OUT_DIR/gguf_fuzz/seed-*.gguf, OUT_DIR/llama2c_fuzz/seed-*.bin and
// OUT_DIR/tokenizer_model_fuzz/seed-*.model.  Seeds are generated (by the
// GGUF writer and a few lines of llama2.c layout) rather than committed as binaries.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/kernels/quantize.h"
#include "loom/model/gguf_writer.h"
#include "loom/text/sentencepiece_model.h"

namespace {

using loom::Status;
using loom::kernels::DType;
using loom::model::GgufWriter;

struct Tensor {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
};

// A llama model of the given size with small weights; `tokens` > 0 adds a tokenizer; `experts`
// > 0 makes its feed-forward block a mixture of that many experts, two used (Mixtral's layout).
std::vector<std::byte> LlamaGguf(int64_t dim, int64_t ffn, int64_t heads, int64_t kv, int64_t vocab,
                                 DType type, bool tied, int tokens, uint32_t version,
                                 int64_t alignment, int64_t experts = 0) {
  GgufWriter w(version);
  if (alignment != 32) (void)w.SetAlignment(alignment);
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 16);
  w.AddU32("llama.embedding_length", static_cast<uint32_t>(dim));
  w.AddU32("llama.block_count", 1);
  w.AddU32("llama.feed_forward_length", static_cast<uint32_t>(ffn));
  w.AddU32("llama.attention.head_count", static_cast<uint32_t>(heads));
  w.AddU32("llama.attention.head_count_kv", static_cast<uint32_t>(kv));
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddF32("llama.rope.freq_base", 10000.0f);
  if (experts > 0) {
    w.AddU32("llama.expert_count", static_cast<uint32_t>(experts));
    w.AddU32("llama.expert_used_count", 2);
  }
  if (tokens > 0) {
    std::vector<std::string> t = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int i = 3; i < tokens; ++i) {
      t.push_back(std::string(1, static_cast<char>('a' + i % 26)) + std::to_string(i));
      scores.push_back(-static_cast<float>(i));
      types.push_back(1);
    }
    w.AddString("tokenizer.ggml.model", "llama");
    w.AddStringArray("tokenizer.ggml.tokens", t);
    w.AddArray("tokenizer.ggml.scores", std::span<const float>(scores));
    w.AddArray("tokenizer.ggml.token_type", std::span<const int32_t>(types));
    w.AddU32("tokenizer.ggml.bos_token_id", 1);
    w.AddU32("tokenizer.ggml.eos_token_id", 2);
    w.AddU32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    w.AddBool("tokenizer.ggml.add_bos_token", true);
    w.AddString("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
  }
  const int64_t hd = dim / heads;
  std::vector<Tensor> ts = {{"token_embd.weight", type, {vocab, dim}},
                            {"output_norm.weight", DType::kF32, {dim}}};
  if (!tied) ts.push_back({"output.weight", type, {vocab, dim}});
  ts.push_back({"blk.0.attn_norm.weight", DType::kF32, {dim}});
  ts.push_back({"blk.0.attn_q.weight", type, {heads * hd, dim}});
  ts.push_back({"blk.0.attn_k.weight", type, {kv * hd, dim}});
  ts.push_back({"blk.0.attn_v.weight", type, {kv * hd, dim}});
  ts.push_back({"blk.0.attn_output.weight", type, {dim, heads * hd}});
  ts.push_back({"blk.0.ffn_norm.weight", DType::kF32, {dim}});
  if (experts > 0) {
    ts.push_back({"blk.0.ffn_gate_inp.weight", DType::kF32, {experts, dim}});
    ts.push_back({"blk.0.ffn_gate_exps.weight", type, {experts, ffn, dim}});
    ts.push_back({"blk.0.ffn_up_exps.weight", type, {experts, ffn, dim}});
    ts.push_back({"blk.0.ffn_down_exps.weight", type, {experts, dim, ffn}});
  } else {
    ts.push_back({"blk.0.ffn_gate.weight", type, {ffn, dim}});
    ts.push_back({"blk.0.ffn_up.weight", type, {ffn, dim}});
    ts.push_back({"blk.0.ffn_down.weight", type, {dim, ffn}});
  }
  for (const Tensor& t : ts) (void)w.AddTensor(t.name, t.type, t.shape);
  std::vector<std::byte> out;
  (void)w.BeginMemory(&out);
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t cols = ts[i].shape.back();
    int64_t rows = 1;  // all but the last dimension: experts are stacked matrices
    for (size_t d = 0; d + 1 < ts[i].shape.size(); ++d) rows *= ts[i].shape[d];
    std::vector<float> x(static_cast<size_t>(cols));
    std::vector<std::byte> row(static_cast<size_t>(w.tensor_size(i) / rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        x[static_cast<size_t>(c)] =
            static_cast<float>((r * 7 + c * 3 + static_cast<int64_t>(i)) % 11 - 5) / 50;
      }
      loom::kernels::QuantizeRow(ts[i].type, x.data(), cols, row.data());
      (void)w.WriteTensorData(row);
    }
  }
  (void)w.Finish();
  return out;
}

// Every metadata value type, and tensors of types the model loader does not take.
std::vector<std::byte> MetadataGguf() {
  GgufWriter w;
  w.AddU8("t.u8", 1);
  w.AddI8("t.i8", -1);
  w.AddU16("t.u16", 2);
  w.AddI16("t.i16", -2);
  w.AddU32("t.u32", 3);
  w.AddI32("t.i32", -3);
  w.AddU64("t.u64", 4);
  w.AddI64("t.i64", -4);
  w.AddF32("t.f32", 0.5f);
  w.AddF64("t.f64", 0.25);
  w.AddBool("t.bool", true);
  w.AddString("t.str", "text");
  w.AddArray("t.a_u8", std::vector<uint8_t>{1, 2});
  w.AddArray("t.a_f64", std::vector<double>{1.0});
  w.AddStringArray("t.a_str", std::vector<std::string>{"x", "yy"});
  const bool bools[] = {true, false};
  w.AddBoolArray("t.a_bool", bools);
  (void)w.AddTensor("f16", DType::kF16, {2, 4});
  (void)w.AddTensor("bf16", DType::kBF16, {3});
  (void)w.AddTensorRaw("q4k", 12, {1, 256});
  std::vector<std::byte> out;
  (void)w.BeginMemory(&out);
  for (size_t i = 0; i < w.tensor_count(); ++i) {
    (void)w.WriteTensorData(std::vector<std::byte>(static_cast<size_t>(w.tensor_size(i))));
  }
  (void)w.Finish();
  return out;
}

std::vector<std::byte> Llama2c(bool v1, bool shared) {
  const int32_t dim = 4, hidden = 4, layers = 1, heads = 2, kv = 1, vocab = 3, seq = 2;
  std::vector<std::byte> out;
  auto put = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  const int32_t header[7] = {dim, hidden, layers, heads, kv, v1 || shared ? vocab : -vocab, seq};
  if (v1) {
    const uint32_t magic = 0x616b3432;
    const int32_t version = 1;
    const uint8_t flag = shared ? 1 : 0;
    put(&magic, 4);
    put(&version, 4);
    put(header, sizeof(header));
    put(&flag, 1);
    out.resize(256, std::byte{0});
  } else {
    put(header, sizeof(header));
  }
  const int64_t hs = dim / heads;
  int64_t n = vocab * dim + 2 * layers * dim +
              layers * (2 * dim * dim + 2 * kv * hs * dim + 3 * dim * hidden) + dim;
  if (!v1) n += 2 * seq * (hs / 2);
  if (!shared) n += vocab * dim;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i % 13) / 13.0f;
    put(&v, 4);
  }
  return out;
}

bool Save(const std::filesystem::path& dir, const std::string& name,
          const std::vector<std::byte>& bytes) {
  std::filesystem::create_directories(dir);
  const Status s = loom::base::WriteFileAtomically((dir / name).string(), bytes);
  if (!s.ok()) std::fprintf(stderr, "fuzz_seeds: %s\n", s.ToString().c_str());
  return s.ok();
}

}  // namespace

// tokenizer_model_fuzz input: mode byte 0, a tokenizer.model of `pieces` pieces (with byte
// pieces when `bytes`), then the separator and a text.
std::vector<std::byte> TokenizerModel(bool bytes, const char* text) {
  loom::model::TokenizerSpec spec;
  spec.model = "llama";
  spec.tokens = {"<unk>", "<s>", "</s>"};
  spec.token_types = {2, 3, 3};
  if (bytes) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      spec.tokens.emplace_back(buf);
      spec.token_types.push_back(6);
    }
  }
  for (const char* p : {"\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi"}) {
    spec.tokens.emplace_back(p);
    spec.token_types.push_back(1);
  }
  for (size_t i = 0; i < spec.tokens.size(); ++i) spec.scores.push_back(-static_cast<float>(i));
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  auto model = loom::text::SerializeSentencePieceModel(spec);
  std::string input =
      std::string(1, '\0') + (model.ok() ? *model : std::string()) + "\xFF\xFF\xFF\xFF" + text;
  const auto* p = reinterpret_cast<const std::byte*>(input.data());
  return std::vector<std::byte>(p, p + input.size());
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const std::filesystem::path gguf = out / "gguf_fuzz";
  const std::filesystem::path l2c = out / "llama2c_fuzz";
  bool ok = true;
  ok &= Save(gguf, "seed-f32.gguf", LlamaGguf(8, 16, 2, 1, 12, DType::kF32, false, 12, 3, 32));
  ok &= Save(gguf, "seed-f16-tied-v2.gguf", LlamaGguf(8, 8, 2, 2, 6, DType::kF16, true, 0, 2, 8));
  ok &= Save(gguf, "seed-q8_0.gguf", LlamaGguf(32, 32, 4, 2, 4, DType::kQ8_0, false, 4, 3, 64));
  ok &= Save(gguf, "seed-q4_0.gguf", LlamaGguf(32, 32, 4, 1, 4, DType::kQ4_0, true, 0, 3, 32));
  ok &= Save(gguf, "seed-moe-q8_0.gguf",
             LlamaGguf(32, 32, 4, 2, 4, DType::kQ8_0, false, 4, 3, 32, 3));
  ok &= Save(gguf, "seed-metadata.gguf", MetadataGguf());
  ok &= Save(l2c, "seed-legacy-shared.bin", Llama2c(false, true));
  ok &= Save(l2c, "seed-legacy-wcls.bin", Llama2c(false, false));
  ok &= Save(l2c, "seed-v1-shared.bin", Llama2c(true, true));
  ok &= Save(l2c, "seed-v1-wcls.bin", Llama2c(true, false));
  const std::filesystem::path spm = out / "tokenizer_model_fuzz";
  ok &= Save(spm, "seed-bytes.model", TokenizerModel(true, "hi hi \xE4\xB8\xAD <s>"));
  ok &= Save(spm, "seed-no-bytes.model", TokenizerModel(false, "hih"));
  return ok ? 0 : 1;
}
