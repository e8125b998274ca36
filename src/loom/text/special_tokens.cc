#include "loom/text/special_tokens.h"

namespace loom::text {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

int32_t SpecialTokenMatcher::Child(int32_t node, uint8_t byte) const {
  for (const auto& [b, child] : nodes_[static_cast<size_t>(node)].children) {
    if (b == byte) return child;
  }
  return -1;
}

void SpecialTokenMatcher::Add(std::string_view text, const Token& token) {
  if (text.empty()) return;
  int32_t node = root_[static_cast<uint8_t>(text[0])];
  if (node < 0) {
    node = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
    root_[static_cast<uint8_t>(text[0])] = node;
  }
  for (size_t i = 1; i < text.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    int32_t next = Child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      nodes_[static_cast<size_t>(node)].children.emplace_back(byte, next);
    }
    node = next;
  }
  Node& end = nodes_[static_cast<size_t>(node)];
  if (end.token >= 0) return;
  end.token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
}

std::pair<size_t, int32_t> SpecialTokenMatcher::Longest(std::string_view text, size_t pos,
                                                        bool allow_control) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = root_[static_cast<uint8_t>(text[pos])];
  for (size_t i = pos + 1; node >= 0; ++i) {
    const int32_t t = nodes_[static_cast<size_t>(node)].token;
    if (t >= 0 && (allow_control || !tokens_[static_cast<size_t>(t)].control)) {
      best = {i - pos, t};
    }
    if (i >= text.size()) break;
    node = Child(node, static_cast<uint8_t>(text[i]));
  }
  return best;
}

void SpecialTokenMatcher::Split(std::string_view text, bool allow_control,
                                std::vector<Fragment>* out) const {
  size_t plain_start = 0;  // start of the pending plain text
  size_t pos = 0;
  while (pos < text.size()) {
    if (tokens_.empty() || root_[static_cast<uint8_t>(text[pos])] < 0) {
      ++pos;
      continue;
    }
    const auto [len, index] = Longest(text, pos, allow_control);
    if (index < 0) {
      ++pos;
      continue;
    }
    const Token& token = tokens_[static_cast<size_t>(index)];
    size_t begin = pos;
    size_t end = pos + len;
    if (token.lstrip) {
      while (begin > plain_start && IsSpace(text[begin - 1])) --begin;
    }
    if (token.rstrip) {
      while (end < text.size() && IsSpace(text[end])) ++end;
    }
    if (begin > plain_start) out->push_back({text.substr(plain_start, begin - plain_start), -1});
    out->push_back({text.substr(begin, end - begin), token.id});
    pos = end;
    plain_start = end;
  }
  if (plain_start < text.size()) out->push_back({text.substr(plain_start), -1});
}

}  // namespace loom::text
