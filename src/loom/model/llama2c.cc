#include "loom/model/llama2c.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "loom/base/byte_reader.h"

namespace loom::model {

namespace {

// Plausibility limits for header fields (far above any llama2.c export; they also keep every size
// product below 2^62).
constexpr int64_t kMaxDim = 65536;
constexpr int64_t kMaxHidden = 1 << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxSeqLen = 1 << 22;

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

bool Plausible(const Header& h) {
  const int64_t vocab = std::llabs(static_cast<int64_t>(h.vocab_size));
  return h.dim > 0 && h.dim <= kMaxDim && h.hidden_dim > 0 && h.hidden_dim <= kMaxHidden &&
         h.n_layers > 0 && h.n_layers <= kMaxLayers && h.n_heads > 0 && h.n_heads <= kMaxHeads &&
         h.n_kv_heads > 0 && h.n_kv_heads <= h.n_heads && h.dim % h.n_heads == 0 &&
         h.n_heads % h.n_kv_heads == 0 && vocab > 0 && vocab <= kMaxVocab && h.seq_len > 0 &&
         h.seq_len <= kMaxSeqLen;
}

Header ReadHeader(std::span<const std::byte> bytes, int64_t offset) {
  Header h;
  std::memcpy(&h, bytes.data() + offset, sizeof(h));
  return h;
}

// Lays out consecutive float32 tensors from a start offset.
class Layout {
 public:
  Layout(int64_t offset, ModelFile* model) : offset_(offset), model_(model) {}

  // One tensor of the given shape (outermost first).
  void Add(const std::string& name, std::vector<int64_t> shape) {
    if (model_ == nullptr) {  // sizing pass
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      offset_ += n * 4;
      return;
    }
    TensorInfo t;
    t.name = name;
    t.type = kernels::DType::kF32;
    t.shape = std::move(shape);
    t.size_bytes = t.elements() * 4;
    t.file_offset = offset_;
    offset_ += t.size_bytes;
    model_->tensors[name] = std::move(t);
  }
  // n_layers tensors "blk.<l>.<suffix>" of the same shape, stacked.
  void AddLayers(int64_t n_layers, const std::string& suffix, const std::vector<int64_t>& shape) {
    if (model_ == nullptr) {
      for (int64_t l = 0; l < n_layers; ++l) Add("", shape);
      return;
    }
    for (int64_t l = 0; l < n_layers; ++l) Add("blk." + std::to_string(l) + "." + suffix, shape);
  }
  void Skip(int64_t floats) { offset_ += floats * 4; }
  int64_t offset() const { return offset_; }

 private:
  int64_t offset_;
  ModelFile* model_;
};

}  // namespace

bool HasLlama2cMagic(std::span<const std::byte> bytes) {
  uint32_t magic = 0;
  if (bytes.size() < 4) return false;
  std::memcpy(&magic, bytes.data(), 4);
  return magic == kLlama2cMagic;
}

bool LooksLikeLlama2cLegacy(std::span<const std::byte> bytes) {
  if (static_cast<int64_t>(bytes.size()) < kLlama2cLegacyHeaderBytes) return false;
  return Plausible(ReadHeader(bytes, 0));
}

Status Llama2cToModel(std::span<const std::byte> bytes, ModelFile* model) {
  const std::string& name = model->path;
  const int64_t file_size = static_cast<int64_t>(bytes.size());
  int version = 0;
  int64_t data_start = kLlama2cLegacyHeaderBytes;
  Header h{};
  bool shared = false;
  if (HasLlama2cMagic(bytes)) {
    base::ByteReader r(bytes);
    uint32_t magic = 0;
    int32_t v = 0;
    uint8_t shared_flag = 0;
    Status s = r.Read(&magic);
    if (s.ok()) s = r.Read(&v);
    if (s.ok()) s = r.Read(&h);
    if (s.ok()) s = r.Read(&shared_flag);
    if (s.ok() && file_size < kLlama2cV1HeaderBytes) {
      s = DataLossError("truncated: the header needs ", kLlama2cV1HeaderBytes, " bytes, file has ",
                        file_size);
    }
    if (!s.ok()) return s.WithContext(name + ": reading the llama2.c header");
    if (v == 2) {
      return UnimplementedError(name,
                                ": llama2.c version 2 checkpoints (int8 groups) are not "
                                "supported; export with --version 0 or 1, or use GGUF");
    }
    if (v != 1) return DataLossError(name, ": unknown llama2.c checkpoint version ", v);
    if (shared_flag > 1) {
      return DataLossError(name, ": llama2.c shared_classifier flag is ", int{shared_flag});
    }
    if (h.vocab_size < 0) {
      return DataLossError(name, ": llama2.c version 1 header has vocab_size ", h.vocab_size);
    }
    version = 1;
    data_start = kLlama2cV1HeaderBytes;
    shared = shared_flag == 1;
  } else {
    if (file_size < kLlama2cLegacyHeaderBytes) {
      return DataLossError(name, ": truncated llama2.c header (", file_size, " of ",
                           kLlama2cLegacyHeaderBytes, " bytes)");
    }
    h = ReadHeader(bytes, 0);
    shared = h.vocab_size > 0;
  }
  if (!Plausible(h)) {
    return DataLossError(name, ": implausible llama2.c header (dim ", h.dim, ", hidden_dim ",
                         h.hidden_dim, ", n_layers ", h.n_layers, ", n_heads ", h.n_heads,
                         ", n_kv_heads ", h.n_kv_heads, ", vocab_size ", h.vocab_size, ", seq_len ",
                         h.seq_len, ")");
  }

  const int64_t dim = h.dim;
  const int64_t hidden = h.hidden_dim;
  const int64_t L = h.n_layers;
  const int64_t vocab = std::llabs(static_cast<int64_t>(h.vocab_size));
  const int64_t head_size = dim / h.n_heads;
  const int64_t kv_dim = head_size * h.n_kv_heads;

  // Lays the tensors out from data_start; with a null model it only computes the end offset, so
  // that a header whose size does not match is rejected before any table is built.
  auto lay_out = [&](ModelFile* target) {
    Layout lay(data_start, target);
    if (version == 0) {
      lay.Add("token_embd.weight", {vocab, dim});
      lay.AddLayers(L, "attn_norm.weight", {dim});
      lay.AddLayers(L, "attn_q.weight", {dim, dim});
      lay.AddLayers(L, "attn_k.weight", {kv_dim, dim});
      lay.AddLayers(L, "attn_v.weight", {kv_dim, dim});
      lay.AddLayers(L, "attn_output.weight", {dim, dim});
      lay.AddLayers(L, "ffn_norm.weight", {dim});
      lay.AddLayers(L, "ffn_gate.weight", {hidden, dim});
      lay.AddLayers(L, "ffn_down.weight", {dim, hidden});
      lay.AddLayers(L, "ffn_up.weight", {hidden, dim});
      lay.Add("output_norm.weight", {dim});
      lay.Skip(2 * h.seq_len * (head_size / 2));  // freq_cis_real, freq_cis_imag
    } else {
      lay.AddLayers(L, "attn_norm.weight", {dim});
      lay.AddLayers(L, "ffn_norm.weight", {dim});
      lay.Add("output_norm.weight", {dim});
      lay.Add("token_embd.weight", {vocab, dim});
      lay.AddLayers(L, "attn_q.weight", {dim, dim});
      lay.AddLayers(L, "attn_k.weight", {kv_dim, dim});
      lay.AddLayers(L, "attn_v.weight", {kv_dim, dim});
      lay.AddLayers(L, "attn_output.weight", {dim, dim});
      lay.AddLayers(L, "ffn_gate.weight", {hidden, dim});
      lay.AddLayers(L, "ffn_down.weight", {dim, hidden});
      lay.AddLayers(L, "ffn_up.weight", {hidden, dim});
    }
    if (!shared) lay.Add("output.weight", {vocab, dim});
    return lay.offset();
  };
  const int64_t end = lay_out(nullptr);
  if (end != file_size) {
    const int64_t other = shared ? end + vocab * dim * 4 : end - vocab * dim * 4;
    return DataLossError(name, ": llama2.c checkpoint (dim ", dim, ", hidden_dim ", hidden,
                         ", n_layers ", L, ", n_heads ", h.n_heads, ", n_kv_heads ", h.n_kv_heads,
                         ", vocab_size ", h.vocab_size, ", seq_len ", h.seq_len, ") should be ",
                         end, " bytes but the file has ", file_size,
                         other == file_size ? " (the classifier flag looks wrong)" : "");
  }
  model->format = "llama2c";
  model->tensors.clear();
  lay_out(model);
  for (auto& [tensor_name, t] : model->tensors) t.data = bytes.data() + t.file_offset;

  HParams& hp = model->hparams;
  hp = HParams{};
  hp.arch = "llama";
  hp.dim = dim;
  hp.n_layers = L;
  hp.n_heads = h.n_heads;
  hp.n_kv_heads = h.n_kv_heads;
  hp.head_dim = head_size;
  hp.ffn_dim = hidden;
  hp.vocab_size = vocab;
  hp.context_length = h.seq_len;
  hp.rms_eps = 1e-5f;
  hp.rope_theta = 10000.0f;
  hp.rope_style = kernels::RopeStyle::kInterleaved;
  hp.tied_embeddings = shared;

  TokenizerSpec& tok = model->tokenizer;
  tok = TokenizerSpec{};
  tok.bos_id = 1;
  tok.eos_id = 2;
  tok.add_bos = true;
  tok.add_space_prefix = true;
  tok.stop_at_bos = true;  // run.c stops when it samples BOS

  model->metadata.clear();
  model->metadata["llama2c.version"] = std::to_string(version);
  model->metadata["llama2c.dim"] = std::to_string(h.dim);
  model->metadata["llama2c.hidden_dim"] = std::to_string(h.hidden_dim);
  model->metadata["llama2c.n_layers"] = std::to_string(h.n_layers);
  model->metadata["llama2c.n_heads"] = std::to_string(h.n_heads);
  model->metadata["llama2c.n_kv_heads"] = std::to_string(h.n_kv_heads);
  model->metadata["llama2c.vocab_size"] = std::to_string(h.vocab_size);
  model->metadata["llama2c.seq_len"] = std::to_string(h.seq_len);
  model->metadata["llama2c.shared_classifier"] = shared ? "true" : "false";
  return OkStatus();
}

}  // namespace loom::model
