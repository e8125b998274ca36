#include "loom/text/tiktoken_file.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "loom/base/mapped_file.h"
#include "loom/text/bpe.h"
#include "loom/text/pretokenizer.h"
#include "loom/text/tokenizer_json_internal.h"
#include "loom/text/utf8.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;
using json_internal::Json;

// At most this much of an offending line goes into an error message.
constexpr size_t kShown = 80;

std::string_view Shown(std::string_view s) { return s.substr(0, kShown); }

// -1 for characters outside the standard base64 alphabet (and for '=').
constexpr std::array<int8_t, 256> kBase64Values = [] {
  std::array<int8_t, 256> v{};
  v.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) v[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return v;
}();

// Standard base64 with padding (as Python's base64.b64decode reads tiktoken files): a multiple
// of four characters, '=' only as the last one or two.  False on anything else.
bool DecodeBase64(std::string_view in, std::string* out) {
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  if (in.back() == '=') pad = in[in.size() - 2] == '=' ? 2 : 1;
  const size_t body = in.size() - pad;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < body; ++i) {
    const int8_t v = kBase64Values[static_cast<uint8_t>(in[i])];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

bool IsBase64Char(char c) { return kBase64Values[static_cast<uint8_t>(c)] >= 0 || c == '='; }

// Parses a decimal rank below `limit`; false when not digits or too large.
bool ParseRank(std::string_view s, int64_t limit, int64_t* rank) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *rank = v;
  return v < limit;
}

// The special tokens tokenizer_config.json names: added_tokens_decoder {"ID": {"content": ...}}.
StatusOr<std::vector<std::pair<int32_t, std::string>>> NamedSpecials(const std::string& file,
                                                                     int64_t n_ranks) {
  std::vector<std::pair<int32_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return out;
  LOOM_ASSIGN_OR_RETURN(const std::string text, base::ReadFileToString(file));
  LOOM_ASSIGN_OR_RETURN(const Json root, json_internal::ParseJson(text, file));
  if (!root.is_object()) return json_internal::TypeError(file, "the top level", "an object", root);
  const auto it = root.find("added_tokens_decoder");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_object()) {
    return json_internal::TypeError(file, "added_tokens_decoder", "an object", *it);
  }
  const int64_t end = n_ranks + kTiktokenReservedSpecials;
  for (const auto& [key, value] : it->items()) {
    int64_t id = 0;
    if (!ParseRank(key, end, &id) || id < n_ranks) {
      return InvalidArgumentError(file, ": added_tokens_decoder id '", Shown(key),
                                  "' is not one of the special ids ", n_ranks, "..", end - 1,
                                  " that follow tiktoken.model's ", n_ranks, " ranks");
    }
    const std::string field = StrCat("added_tokens_decoder['", key, "']");
    if (!value.is_object()) return json_internal::TypeError(file, field, "an object", value);
    LOOM_ASSIGN_OR_RETURN(const std::string content,
                          json_internal::OptString(value, "content", file, field + "."));
    if (content.empty()) return InvalidArgumentError(file, ": ", field, ".content is empty");
    out.emplace_back(static_cast<int32_t>(id), content);
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view text,
                                                      std::string_view source) {
  // Ranks are 0..n-1 over n lines, so none can reach the line count.
  const int64_t lines = static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  std::vector<std::string> tokens;
  std::vector<int64_t> line_of;  // (rank) the line that gave it, 0 = not yet
  std::string bytes;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return InvalidArgumentError(source, ": line ", line_no, ": expected 'BASE64 RANK', got '",
                                  Shown(line), "'");
    }
    const std::string_view b64 = line.substr(0, space);
    const std::string_view rank_text = line.substr(space + 1);
    if (!DecodeBase64(b64, &bytes) || bytes.empty()) {
      return InvalidArgumentError(source, ": line ", line_no, ": token '", Shown(b64),
                                  "' is not valid base64 (or is empty)");
    }
    int64_t rank = 0;
    if (!ParseRank(rank_text, INT64_MAX, &rank)) {
      return InvalidArgumentError(source, ": line ", line_no, ": rank '", Shown(rank_text),
                                  "' is not a decimal number");
    }
    if (rank >= lines) {
      return InvalidArgumentError(source, ": line ", line_no, ": rank ", rank, " is beyond the ",
                                  lines, " lines of the file, so a rank below it is missing");
    }
    const size_t r = static_cast<size_t>(rank);
    if (r >= tokens.size()) {
      tokens.resize(r + 1);
      line_of.resize(r + 1, 0);
    }
    if (line_of[r] != 0) {
      return InvalidArgumentError(source, ": line ", line_no, ": rank ", rank,
                                  " was already given on line ", line_of[r]);
    }
    line_of[r] = line_no;
    tokens[r] = bytes;
  }
  if (tokens.empty()) return InvalidArgumentError(source, ": no ranks (an empty tiktoken file)");
  std::unordered_map<std::string_view, int64_t> seen;
  seen.reserve(tokens.size());
  for (size_t r = 0; r < tokens.size(); ++r) {
    if (line_of[r] == 0) {
      return InvalidArgumentError(source, ": rank ", r, " is missing (ranks must be 0..",
                                  tokens.size() - 1, ", each once)");
    }
    const auto [it, fresh] = seen.emplace(tokens[r], static_cast<int64_t>(r));
    if (!fresh) {
      return InvalidArgumentError(source, ": line ", line_of[r], ": rank ", r,
                                  " has the same bytes as rank ", it->second);
    }
  }
  return tokens;
}

bool LooksLikeTiktoken(std::span<const std::byte> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()),
                              std::min<size_t>(bytes.size(), 4096));
  size_t i = 0;
  while (i < text.size() && IsBase64Char(text[i])) ++i;
  if (i == 0 || i % 4 != 0 || i >= text.size() || text[i] != ' ') return false;
  const size_t digits = ++i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == digits) return false;
  if (i < text.size() && text[i] == '\r') ++i;
  return i == bytes.size() || (i < text.size() && text[i] == '\n');
}

void RankMerges(const std::vector<std::string>& tokens, const std::vector<bool>& normal,
                std::vector<std::string>* merges, std::vector<int32_t>* ranks) {
  merges->clear();
  ranks->clear();
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (normal[i]) id_of.emplace(tokens[i], static_cast<int32_t>(i));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!normal[i]) continue;
    const std::string_view t = tokens[i];
    // Splits at character boundaries of the spelling (one character per byte of the token).
    for (size_t k = Utf8CharLength(t, 0); k > 0 && k < t.size();) {
      const std::string_view left = t.substr(0, k);
      const std::string_view right = t.substr(k);
      if (id_of.count(left) > 0 && id_of.count(right) > 0) {
        merges->push_back(StrCat(left, " ", right));
        ranks->push_back(static_cast<int32_t>(i));
      }
      const size_t len = Utf8CharLength(t, k);
      k = len == 0 ? 0 : k + len;
    }
  }
}

StatusOr<TokenizerJson> LoadTiktokenDirectory(const std::string& path) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "tiktoken.model";
  const fs::path dir = file.parent_path();
  std::vector<std::string> ranks;
  {
    LOOM_ASSIGN_OR_RETURN(const base::MappedFile mapped, base::MappedFile::Open(file.string()));
    const std::span<const std::byte> bytes = mapped.bytes();
    LOOM_ASSIGN_OR_RETURN(
        ranks, ParseTiktokenRanks(
                   std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   file.string()));
  }
  const int64_t n = static_cast<int64_t>(ranks.size());
  LOOM_ASSIGN_OR_RETURN(const auto named,
                        NamedSpecials((dir / "tokenizer_config.json").string(), n));
  LOOM_ASSIGN_OR_RETURN(TokenizerJson t,
                        TiktokenVocabulary(std::move(ranks), named, file.string()));
  LOOM_ASSIGN_OR_RETURN(const bool config_set_add_bos, ApplyDirectoryConfigs(dir.string(), &t));
  // tokenization_kimi.py adds no BOS of its own.
  if (!config_set_add_bos || t.spec.bos_id < 0) t.spec.add_bos = false;
  return t;
}

StatusOr<TokenizerJson> TiktokenVocabulary(
    std::vector<std::string> ranks, const std::vector<std::pair<int32_t, std::string>>& named,
    std::string_view source) {
  const int64_t n = static_cast<int64_t>(ranks.size());
  if (n == 0 || n + kTiktokenReservedSpecials >= INT32_MAX) {
    return InvalidArgumentError(source, ": ", n, " ranks is not a vocabulary");
  }
  TokenizerJson t;
  model::TokenizerSpec& spec = t.spec;
  spec.model = "gpt2";
  spec.pre = "kimi-k2";
  spec.add_bos = false;
  spec.add_space_prefix = false;
  const ByteLevelAlphabet alphabet;
  spec.tokens.resize(static_cast<size_t>(n + kTiktokenReservedSpecials));
  spec.token_types.assign(spec.tokens.size(), 3);
  for (int64_t r = 0; r < n; ++r) {
    alphabet.Encode(ranks[static_cast<size_t>(r)], &spec.tokens[static_cast<size_t>(r)]);
    spec.token_types[static_cast<size_t>(r)] = 1;
  }
  ranks = {};
  for (int64_t id = n; id < n + kTiktokenReservedSpecials; ++id) {
    spec.tokens[static_cast<size_t>(id)] = StrCat("<|reserved_token_", id, "|>");
  }
  for (const auto& [id, content] : named) {
    if (id < n || id >= n + kTiktokenReservedSpecials || content.empty()) {
      return InvalidArgumentError(source, ": special token '", Shown(content), "' has id ", id,
                                  ", outside ", n, "..", n + kTiktokenReservedSpecials - 1);
    }
    spec.tokens[static_cast<size_t>(id)] = content;
  }

  LOOM_ASSIGN_OR_RETURN(t.options, BpeOptionsForPre(spec.pre, source));
  std::vector<bool> normal(spec.tokens.size(), false);
  std::fill(normal.begin(), normal.begin() + n, true);
  RankMerges(spec.tokens, normal, &spec.merges, &t.options.merge_ranks);
  return t;
}

}  // namespace loom::text
