#include "loom/model/convert.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/quantize.h"
#include "loom/model/arch.h"
#include "loom/model/gguf.h"
#include "loom/model/gguf_writer.h"
#include "loom/model/hf_model.h"
#include "loom/model/safetensors_writer.h"

namespace loom::model {

namespace {

namespace fs = std::filesystem;
using kernels::DType;

// One output tensor (or, for MLX, one of the three parts of a quantized matrix).
struct Job {
  std::string name;  // in the output's convention
  const TensorInfo* src = nullptr;
  std::vector<float> values;   // literal contents instead of src (rope_freqs.weight)
  int64_t rows = 1, cols = 0;  // as read: a vector is one row
  std::vector<int64_t> shape;  // as written (outermost first)
  DType type = DType::kF32;    // encoding of plain tensors
  int mlx_part = -1;           // 0 packed weight, 1 scales, 2 biases; -1 plain
  MlxQuantParams mlx;
  DType scale_type = DType::kBF16;
  int64_t permute_head = 0;       // q/k reordering: head size, or 0 for none
  bool permute_elements = false;  // reorder within rows (vectors) rather than whole rows
  int64_t bytes = 0;
};

using Sink = std::function<Status(std::span<const std::byte>)>;

// What --type accepts: the float and block types and the K-quants.
std::vector<DType> WeightTypes() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
          DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// GGUF files of these architectures keep Hugging Face's rotate-halves layout (as llama.cpp writes
// them); Llama-family GGUFs rotate adjacent pairs.
kernels::RopeStyle GgufRopeStyle(const std::string& arch) {
  return arch == "qwen2" || arch == "qwen3" ? kernels::RopeStyle::kHalves
                                            : kernels::RopeStyle::kInterleaved;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether a tensor belongs to a q/k projection whose per-head order depends on the rotary layout.
bool IsRotaryTensor(const std::string& name) {
  for (const char* s : {".attn_q.weight", ".attn_k.weight", ".attn_q.bias", ".attn_k.bias",
                        ".attn_q_norm.weight", ".attn_k_norm.weight"}) {
    if (EndsWith(name, s)) return true;
  }
  return false;
}

StatusOr<int64_t> EncodedRowBytes(DType type, int64_t cols) {
  return kernels::RowBytes(type, cols);
}

Status EmitJob(const Job& j, kernels::RopeStyle from, kernels::RopeStyle to, const Sink& sink,
               const std::function<void(int64_t)>& done) {
  std::vector<float> row(static_cast<size_t>(j.cols)), permuted(static_cast<size_t>(j.cols));
  std::vector<std::byte> encoded;
  const int64_t groups = j.mlx_part >= 0 ? j.cols / j.mlx.group_size : 0;
  const int64_t scale_bytes = kernels::Traits(j.scale_type).block_bytes;
  std::vector<std::byte> packed, scales, biases;
  if (j.mlx_part >= 0) {
    packed.resize(static_cast<size_t>(MlxPackedRowBytes(j.mlx.bits, j.cols)));
    scales.resize(static_cast<size_t>(groups * scale_bytes));
    biases.resize(scales.size());
  } else {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, EncodedRowBytes(j.type, j.cols));
    encoded.resize(static_cast<size_t>(n));
  }
  std::vector<std::byte> chunk;
  constexpr size_t kChunk = size_t{1} << 20;
  chunk.reserve(kChunk + encoded.size() + packed.size());
  const int64_t hd = j.permute_head;
  for (int64_t r = 0; r < j.rows; ++r) {
    int64_t src_row = r;
    if (hd > 0 && !j.permute_elements) {
      src_row = r / hd * hd + RopePermuteIndex(from, to, hd, r % hd);
    }
    if (j.src == nullptr) {
      std::copy_n(j.values.data() + src_row * j.cols, j.cols, row.data());
    } else {
      ReadRowF32(*j.src, src_row, row.data());
    }
    if (hd > 0 && j.permute_elements) {
      for (int64_t i = 0; i < j.cols; ++i) {
        permuted[i] = row[i / hd * hd + RopePermuteIndex(from, to, hd, i % hd)];
      }
      row.swap(permuted);
    }
    std::span<const std::byte> out;
    if (j.mlx_part < 0) {
      kernels::QuantizeRow(j.type, row.data(), j.cols, encoded.data());
      out = encoded;
    } else {
      MlxQuantizeRow(row.data(), j.cols, j.mlx, j.scale_type, packed.data(), scales.data(),
                     biases.data());
      out = j.mlx_part == 0   ? std::span<const std::byte>(packed)
            : j.mlx_part == 1 ? std::span<const std::byte>(scales)
                              : std::span<const std::byte>(biases);
    }
    chunk.insert(chunk.end(), out.begin(), out.end());
    if (chunk.size() >= kChunk || r + 1 == j.rows) {
      LOOM_RETURN_IF_ERROR(sink(chunk));
      done(static_cast<int64_t>(chunk.size()));
      chunk.clear();
    }
  }
  return OkStatus();
}

// llama.cpp's rope_freqs.weight for llama3 scaling: per pair, the divisor of its frequency.
std::vector<float> Llama3FreqFactors(const HParams& hp) {
  const RopeScaling& s = hp.rope_scaling;
  std::vector<float> out;
  const double old_ctx = static_cast<double>(s.original_context);
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  for (int64_t i = 0; i < hp.head_dim / 2; ++i) {
    const double freq =
        1.0 / std::pow(static_cast<double>(hp.rope_theta),
                       static_cast<double>(2 * i) / static_cast<double>(hp.head_dim));
    const double wavelen = 2 * std::numbers::pi / freq;
    double factor = 1.0;
    if (wavelen > low_wavelen) {
      factor = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      factor = 1.0 / ((1 - smooth) / s.factor + smooth);
    }
    out.push_back(static_cast<float>(factor));
  }
  return out;
}

// GGUF llama3 models carry only rope_freqs.weight.  Meta's published Llama 3.1 / 3.2 settings are
// low_freq_factor 1, high_freq_factor 4, original context 8192 (or what the file says), with the
// factor the largest divisor: recover them when they reproduce the divisors exactly.
bool RecoverLlama3(HParams* hp) {
  const std::vector<float>& f = hp->rope_scaling.freq_factors;
  HParams trial = *hp;
  RopeScaling& s = trial.rope_scaling;
  s.type = RopeScalingType::kLlama3;
  s.factor = *std::max_element(f.begin(), f.end());
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  if (s.original_context <= 0) s.original_context = 8192;
  const std::vector<float> want = Llama3FreqFactors(trial);
  for (size_t i = 0; i < f.size(); ++i) {
    if (std::abs(want[i] - f[i]) > 1e-5f * std::abs(f[i])) return false;
  }
  s.freq_factors.clear();
  *hp = trial;
  return true;
}

// Types a GGUF file can hold: the kernels type and the ggml id must map to each other.
bool GgufCanStore(DType type) {
  const GgmlTypeInfo* info = FindGgmlType(GgmlTypeId(type));
  return info != nullptr && info->dtype && *info->dtype == type;
}

DType GgufMatrixType(DType wanted, int64_t cols) {
  const kernels::DTypeTraits& t = kernels::Traits(wanted);
  if (cols % t.block_elems == 0) return wanted;
  // As llama.cpp's quantizer does, rows that do not divide into blocks get a compatible type.
  if (t.block_elems > 32 && cols % 32 == 0) return DType::kQ8_0;
  return DType::kF16;
}

void AddTokenizer(const TokenizerSpec& t, GgufWriter& w) {
  w.AddString("tokenizer.ggml.model", t.model);
  if (!t.pre.empty()) w.AddString("tokenizer.ggml.pre", t.pre);
  w.AddStringArray("tokenizer.ggml.tokens", t.tokens);
  if (!t.scores.empty()) w.AddArray("tokenizer.ggml.scores", std::span<const float>(t.scores));
  if (!t.token_types.empty()) {
    w.AddArray("tokenizer.ggml.token_type", std::span<const int32_t>(t.token_types));
  }
  // SentencePiece vocabularies merge by score (a tokenizer.json's merge list is not GGUF's).
  if (!t.merges.empty() && t.model != "llama") {
    w.AddStringArray("tokenizer.ggml.merges", t.merges);
  }
  if (t.bos_id >= 0) w.AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(t.bos_id));
  if (t.eos_id >= 0) w.AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(t.eos_id));
  if (t.unk_id >= 0) w.AddU32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(t.unk_id));
  if (t.pad_id >= 0) w.AddU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(t.pad_id));
  w.AddBool("tokenizer.ggml.add_bos_token", t.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (t.model == "llama") w.AddBool("tokenizer.ggml.add_space_prefix", t.add_space_prefix);
  if (!t.chat_template.empty()) w.AddString("tokenizer.chat_template", t.chat_template);
}

struct Progress {
  int64_t total = 0;
  int64_t done = 0;
  const std::function<void(int64_t, int64_t)>* callback = nullptr;
  void Add(int64_t n) {
    done += n;
    if (callback != nullptr && *callback) (*callback)(done, total);
  }
};

Status WriteGguf(const ModelFile& in, const std::string& out, const ConvertOptions& o) {
  const HParams& hp = in.hparams;
  const DType wanted = o.type.value_or(DType::kF32);
  if (MlxBits(wanted) != 0 || !GgufCanStore(wanted)) {
    return UnimplementedError("convert: GGUF files cannot hold ", kernels::Traits(wanted).name,
                              " tensors");
  }
  const std::string arch = hp.arch == "mistral" ? "llama" : hp.arch;  // as llama.cpp writes it
  GgufWriter w;
  w.AddString("general.architecture", arch);
  w.AddString("general.name", fs::path(in.path).filename().string());
  const std::string p = arch + ".";
  w.AddU64(p + "context_length", static_cast<uint64_t>(hp.context_length));
  w.AddU64(p + "embedding_length", static_cast<uint64_t>(hp.dim));
  w.AddU64(p + "block_count", static_cast<uint64_t>(hp.n_layers));
  w.AddU64(p + "feed_forward_length", static_cast<uint64_t>(hp.ffn_dim));
  w.AddU64(p + "attention.head_count", static_cast<uint64_t>(hp.n_heads));
  w.AddU64(p + "attention.head_count_kv", static_cast<uint64_t>(hp.n_kv_heads));
  w.AddU64(p + "attention.key_length", static_cast<uint64_t>(hp.head_dim));
  w.AddU64(p + "attention.value_length", static_cast<uint64_t>(hp.head_dim));
  w.AddU64(p + "rope.dimension_count", static_cast<uint64_t>(hp.head_dim));
  w.AddU64(p + "vocab_size", static_cast<uint64_t>(hp.vocab_size));
  w.AddF32(p + "attention.layer_norm_rms_epsilon", hp.rms_eps);
  w.AddF32(p + "rope.freq_base", hp.rope_theta);
  if (hp.rope_scaling.type == RopeScalingType::kLinear) {
    w.AddString(p + "rope.scaling.type", "linear");
    w.AddF32(p + "rope.scaling.factor", hp.rope_scaling.factor);
  }
  if (hp.rope_scaling.original_context > 0) {
    w.AddU64(p + "rope.scaling.original_context_length",
             static_cast<uint64_t>(hp.rope_scaling.original_context));
  }
  const TokenizerSpec& tok = o.tokenizer != nullptr ? *o.tokenizer : in.tokenizer;
  if (!tok.model.empty()) AddTokenizer(tok, w);

  std::vector<Job> jobs;
  for (const auto& [name, t] : in.tensors) {
    if (name == "rope_freqs.weight") continue;  // rewritten below
    Job j;
    j.name = name;
    j.src = &t;
    j.cols = t.shape.back();
    j.rows = t.elements() / std::max<int64_t>(1, j.cols);
    j.shape = t.shape;
    j.type = t.shape.size() == 1 ? DType::kF32 : GgufMatrixType(wanted, j.cols);
    jobs.push_back(std::move(j));
  }
  std::vector<float> factors = hp.rope_scaling.freq_factors;
  if (factors.empty() && hp.rope_scaling.type == RopeScalingType::kLlama3) {
    factors = Llama3FreqFactors(hp);
  }
  if (!factors.empty()) {
    Job j;
    j.name = "rope_freqs.weight";
    j.values = factors;
    j.cols = static_cast<int64_t>(factors.size());
    j.shape = {j.cols};
    jobs.push_back(std::move(j));
  }
  const kernels::RopeStyle to = GgufRopeStyle(arch);
  for (Job& j : jobs) {
    if (hp.rope_style != to && IsRotaryTensor(j.name)) {
      j.permute_head = hp.head_dim;
      j.permute_elements = j.shape.size() == 1;
    }
    LOOM_RETURN_IF_ERROR(w.AddTensor(j.name, j.type, j.shape));
  }
  Progress progress{0, 0, &o.progress};
  for (size_t i = 0; i < jobs.size(); ++i) progress.total += w.tensor_size(i);
  LOOM_RETURN_IF_ERROR(w.BeginFile(out));
  const Sink sink = [&w](std::span<const std::byte> b) { return w.WriteTensorData(b); };
  for (const Job& j : jobs) {
    LOOM_RETURN_IF_ERROR(EmitJob(j, hp.rope_style, to, sink, [&](int64_t n) { progress.Add(n); }));
  }
  return w.Finish();
}

StDType SafetensorsFloat(DType t) {
  return t == DType::kF16 ? StDType::kF16 : t == DType::kBF16 ? StDType::kBF16 : StDType::kF32;
}

std::string_view TorchDtype(DType t) {
  return t == DType::kF16 ? "float16" : t == DType::kBF16 ? "bfloat16" : "float32";
}

// Files of a model directory that describe the tokenizer and generation, copied along.
Status CopyTokenizerFiles(const ModelFile& in, const fs::path& out_dir) {
  std::error_code ec;
  if (!fs::is_directory(in.path, ec)) return OkStatus();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json", "tokenizer.model", "chat_template.jinja"}) {
    const fs::path src = fs::path(in.path) / f;
    if (!fs::is_regular_file(src, ec)) continue;
    LOOM_ASSIGN_OR_RETURN(const std::string bytes, base::ReadFileToString(src.string()));
    LOOM_RETURN_IF_ERROR(base::WriteFileAtomically(
        (out_dir / f).string(), {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}));
  }
  return OkStatus();
}

Status WriteDirectory(const ModelFile& in, const std::string& out, const ConvertOptions& o) {
  const HParams& hp = in.hparams;
  const bool mlx = o.format == ConvertFormat::kMlx;
  const DType ftype = o.type.value_or(mlx ? DType::kBF16 : DType::kF32);
  if (!IsFloat(ftype)) {
    return InvalidArgumentError("convert: --type ", kernels::Traits(ftype).name, " is not a ",
                                mlx ? "MLX" : "Hugging Face",
                                " tensor type (f32, f16 or bf16; MLX quantizes with --bits)");
  }
  if (mlx && (!MlxBitsSupported(o.mlx.bits) || !MlxGroupSizeSupported(o.mlx.group_size))) {
    return InvalidArgumentError("convert: MLX --bits ", o.mlx.bits, " --group-size ",
                                o.mlx.group_size,
                                " (bits 2, 3, 4, 5, 6 or 8; group size 32, 64 or 128)");
  }
  if (FindHfArch(hp.arch) == nullptr) {
    return UnimplementedError("convert: architecture '", hp.arch,
                              "' has no Hugging Face config.json form");
  }
  HParams hp_out = hp;
  if (!hp.rope_scaling.freq_factors.empty() && hp.rope_scaling.type != RopeScalingType::kLlama3) {
    if (!RecoverLlama3(&hp_out)) {
      return UnimplementedError("convert: ", in.path,
                                " has per-pair RoPE frequency factors (rope_freqs.weight) that "
                                "are not llama3 scaling, which config.json cannot express");
    }
  }
  const fs::path dir = out;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError(out, ": cannot create the directory: ", ec.message());
  if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    // Loaders would follow the old index instead of the model.safetensors written here.
    return FailedPreconditionError("convert: ", out,
                                   " holds a sharded model (model.safetensors.index.json); write "
                                   "to an empty directory");
  }

  std::vector<Job> jobs;
  for (const auto& [name, t] : in.tensors) {
    const size_t dot = name.rfind('.');
    const std::optional<std::string> module = GgufModuleToHf(name.substr(0, dot));
    if (!module) continue;  // nothing to map it to (rope_freqs.weight: config.json says it)
    const std::string suffix = name.substr(dot);
    Job j;
    j.src = &t;
    j.cols = t.shape.back();
    j.rows = t.elements() / std::max<int64_t>(1, j.cols);
    j.shape = t.shape;
    j.type = ftype;
    if (hp.rope_style != kernels::RopeStyle::kHalves && IsRotaryTensor(name)) {
      j.permute_head = hp.head_dim;
      j.permute_elements = t.shape.size() == 1;
    }
    if (mlx && t.shape.size() == 2 && suffix == ".weight" && j.cols % o.mlx.group_size == 0) {
      j.mlx = o.mlx;
      j.scale_type = ftype;
      for (int part = 0; part < 3; ++part) {
        Job q = j;
        q.mlx_part = part;
        q.name = *module + (part == 0 ? ".weight" : part == 1 ? ".scales" : ".biases");
        q.shape = {j.rows, part == 0 ? j.cols * o.mlx.bits / 32 : j.cols / o.mlx.group_size};
        jobs.push_back(std::move(q));
      }
      continue;
    }
    j.name = *module + suffix;
    jobs.push_back(std::move(j));
  }
  SafetensorsWriter w;
  w.AddMetadata("format", mlx ? "mlx" : "pt");
  for (Job& j : jobs) {
    const StDType st = j.mlx_part == 0  ? StDType::kU32
                       : j.mlx_part > 0 ? SafetensorsFloat(j.scale_type)
                                        : SafetensorsFloat(j.type);
    LOOM_RETURN_IF_ERROR(w.AddTensor(j.name, st, j.shape));
  }
  Progress progress{0, 0, &o.progress};
  for (size_t i = 0; i < jobs.size(); ++i) progress.total += w.tensor_size(i);

  const TokenizerSpec& tok = o.tokenizer != nullptr ? *o.tokenizer : in.tokenizer;
  const std::string config = HfConfigJson(hp_out, tok, mlx ? &o.mlx : nullptr, TorchDtype(ftype));
  LOOM_RETURN_IF_ERROR(base::WriteFileAtomically(
      (dir / "config.json").string(),
      {reinterpret_cast<const std::byte*>(config.data()), config.size()}));
  LOOM_RETURN_IF_ERROR(w.BeginFile((dir / "model.safetensors").string()));
  const Sink sink = [&w](std::span<const std::byte> b) { return w.WriteTensorData(b); };
  for (size_t i : w.WriteOrder()) {
    LOOM_RETURN_IF_ERROR(EmitJob(jobs[i], hp.rope_style, kernels::RopeStyle::kHalves, sink,
                                 [&](int64_t n) { progress.Add(n); }));
  }
  LOOM_RETURN_IF_ERROR(w.Finish());
  return CopyTokenizerFiles(in, dir);
}

}  // namespace

StatusOr<ConvertFormat> ParseConvertFormat(std::string_view text) {
  if (text == "gguf") return ConvertFormat::kGguf;
  if (text == "hf") return ConvertFormat::kHf;
  if (text == "mlx") return ConvertFormat::kMlx;
  return InvalidArgumentError("unknown output format '", text, "' (gguf, hf or mlx)");
}

StatusOr<DType> ParseWeightType(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string known;
  for (DType t : WeightTypes()) {
    if (kernels::Traits(t).name == lower) return t;
    known += (known.empty() ? "" : ", ") + std::string(kernels::Traits(t).name);
  }
  return InvalidArgumentError("unknown weight type '", text, "' (", known, ")");
}

int64_t RopePermuteIndex(kernels::RopeStyle from, kernels::RopeStyle to, int64_t head_dim,
                         int64_t i) {
  if (from == to) return i;
  const int64_t half = head_dim / 2;
  if (to == kernels::RopeStyle::kInterleaved) return (i % 2) * half + i / 2;  // halves -> pairs
  return 2 * (i % half) + i / half;                                           // pairs -> halves
}

void ReadRowF32(const TensorInfo& t, int64_t row, float* out) {
  if (MlxBits(t.type) != 0) {
    MlxDequantizeTensorRow(t, row, out);
    return;
  }
  kernels::DequantizeRow(t.matrix(), row, out);
}

Status ConvertModel(const ModelFile& in, const std::string& out, const ConvertOptions& options) {
  if (FindArch(in.hparams.arch) == nullptr) {
    return UnimplementedError("convert: ", in.path, ": architecture '", in.hparams.arch,
                              "' is not supported");
  }
  // Neither output form writes these keys yet: refuse rather than drop them.
  if (in.hparams.is_mla() || in.hparams.rope_scaling.type == RopeScalingType::kYarn) {
    return UnimplementedError("convert: ", in.path, ": ",
                              in.hparams.is_mla() ? "multi-head latent attention (deepseek2)"
                                                  : "YaRN RoPE scaling",
                              " cannot be converted yet");
  }
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(out, in.path, ec)) {
    return InvalidArgumentError("convert: the output ", out, " is the input");
  }
  if (options.format == ConvertFormat::kGguf) return WriteGguf(in, out, options);
  return WriteDirectory(in, out, options);
}

}  // namespace loom::model
