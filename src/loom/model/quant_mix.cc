#include "loom/model/quant_mix.h"

#include <cctype>

namespace loom::model {
namespace {

using kernels::DType;

bool Contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// The layer of "blk.N.<...>"; -1 for tensors outside the layers.
int64_t LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int64_t layer = 0;
  size_t i = kPrefix.size();
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    layer = layer * 10 + (name[i] - '0');
    if (layer > (int64_t{1} << 30)) return -1;
  }
  return i < name.size() && name[i] == '.' ? layer : -1;
}

// llama.cpp's roles, matched on the name as its quantizer matches them (substrings, in this
// order: attn_qkv / attn_kv_b / attn_v before attn_k, ffn_up before ffn_gate before ffn_down).
enum class Role : uint8_t { kOutput, kTokenEmbd, kAttnV, kAttnK, kAttnOutput, kFfnDown, kOther };

Role RoleOf(std::string_view name) {
  if (name == "output.weight") return Role::kOutput;
  if (name == "token_embd.weight") return Role::kTokenEmbd;
  if (Contains(name, "attn_qkv.weight") || Contains(name, "attn_kv_b.weight") ||
      Contains(name, "attn_v.weight")) {
    return Role::kAttnV;
  }
  if (Contains(name, "attn_k.weight")) return Role::kAttnK;
  if (Contains(name, "attn_q.weight")) return Role::kOther;
  if (Contains(name, "attn_output.weight")) return Role::kAttnOutput;
  if (Contains(name, "ffn_up") || Contains(name, "ffn_gate")) return Role::kOther;
  if (Contains(name, "ffn_down")) return Role::kFfnDown;
  return Role::kOther;
}

// A K-quant on rows that are not whole super-blocks: the type `loom convert` would give them.
DType FitRows(DType type, int64_t cols) {
  const int64_t block = kernels::Traits(type).block_elems;
  if (cols % block == 0) return type;
  return cols % 32 == 0 ? DType::kQ8_0 : DType::kF16;
}

}  // namespace

std::optional<QuantMix> ParseQuantMix(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "q4_k_m") return QuantMix::kQ4_K_M;
  return std::nullopt;
}

std::string_view QuantMixName(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ4_K_M:
      return "q4_k_m";
  }
  return "?";
}

uint32_t QuantMixFileType(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ4_K_M:
      return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  }
  return 0;
}

DType QuantMixBaseType(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ4_K_M:
      return DType::kQ4_K;
  }
  return DType::kQ4_K;
}

bool UseMoreBits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

std::vector<DType> QuantMixTypes(QuantMix mix, std::span<const std::string> names,
                                 std::span<const int64_t> cols, int64_t n_layers,
                                 int64_t n_experts) {
  const DType base = QuantMixBaseType(mix);
  const bool eight_experts = n_experts == 8;
  // llama.cpp counts the attention-value-like matrices first, then numbers them in file order.
  int64_t n_attn_v = 0;
  for (const std::string& name : names) n_attn_v += RoleOf(name) == Role::kAttnV ? 1 : 0;
  int64_t i_attn_v = 0;
  int64_t i_ffn_down = 0;
  std::vector<DType> types;
  types.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    DType type = base;
    switch (RoleOf(name)) {
      case Role::kOutput:
        type = DType::kQ6_K;
        break;
      case Role::kTokenEmbd:
        break;
      case Role::kAttnV:
        if (eight_experts) {
          type = DType::kQ8_0;
        } else if (UseMoreBits(i_attn_v, n_attn_v)) {
          type = DType::kQ6_K;
        }
        ++i_attn_v;
        break;
      case Role::kAttnK:
        if (eight_experts) type = DType::kQ8_0;
        break;
      case Role::kAttnOutput:
        if (eight_experts) type = DType::kQ5_K;
        break;
      case Role::kFfnDown: {
        // Dense models count ffn_down matrices; with experts the layer comes from the name.
        const int64_t layer = n_experts > 1 ? LayerOf(name) : i_ffn_down;
        if (layer >= 0 && UseMoreBits(layer, n_layers)) type = DType::kQ6_K;
        ++i_ffn_down;
        break;
      }
      case Role::kOther:
        break;
    }
    types.push_back(FitRows(type, cols[i]));
  }
  return types;
}

}  // namespace loom::model
