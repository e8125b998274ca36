#include "loom/text/jinja_lexer.h"

#include <cerrno>
#include <cstdlib>

#include "loom/text/jinja_ast.h"
#include "loom/text/utf8.h"

namespace loom::text::jinja {
namespace {

bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Token MakeToken(Tok kind, size_t pos, std::string text = {}) {
  Token t;
  t.kind = kind;
  t.pos = static_cast<int64_t>(pos);
  t.text = std::move(text);
  return t;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool strip_leading = false;  // the previous tag ended with "-"
    bool trim_newline = false;   // the previous tag was a block or comment (trim_blocks)
    // keep_trailing_newline is off: one final newline of the template is not output.
    std::string_view src = src_;
    if (!src.empty() && src.back() == '\n') {
      src.remove_suffix(src.size() >= 2 && src[src.size() - 2] == '\r' ? 2 : 1);
    }
    const size_t n = src.size();
    while (pos <= n) {
      const size_t tag = FindTag(src, pos);
      size_t a = pos;
      size_t b = tag;
      if (strip_leading) {
        while (a < b && IsBlank(src[a])) ++a;
      } else if (trim_newline) {
        if (a < b && src[a] == '\n') {
          ++a;
        } else if (a + 1 < b && src[a] == '\r' && src[a + 1] == '\n') {
          a += 2;
        }
      }
      if (tag >= n) {
        PushText(src, a, b, pos);
        break;
      }
      const char type = src[tag + 1];
      const char marker = tag + 2 < n ? src[tag + 2] : '\0';
      if (marker == '-') {
        while (b > a && IsBlank(src[b - 1])) --b;
      } else if ((type == '%' || type == '#') && marker != '+') {
        // lstrip_blocks: only when the tag starts its line.
        size_t k = tag;
        while (k > pos && (src[k - 1] == ' ' || src[k - 1] == '\t')) --k;
        const bool line_start = k == 0 || src[k - 1] == '\n' || (k == pos && pos == 0);
        if (line_start && k >= pos) b = std::min(b, std::max(a, k));
      }
      PushText(src, a, b, pos);
      size_t after = tag + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      if (type == '#') {
        const size_t close = src.find("#}", after);
        if (close == std::string_view::npos) return Fail(tag, "unclosed comment");
        strip_leading = close > after && src[close - 1] == '-';
        trim_newline = !strip_leading;
        pos = close + 2;
        continue;
      }
      const bool is_expr = type == '{';
      tokens_.push_back(MakeToken(is_expr ? Tok::kExprOpen : Tok::kStmtOpen, tag));
      const size_t first_token = tokens_.size();
      LOOM_ASSIGN_OR_RETURN(const size_t close, LexTag(src, after, is_expr, tag));
      // close points at the closing delimiter ("}}" / "%}"), possibly preceded by '-' or '+'.
      const char before = src[close - 1];
      strip_leading = before == '-' && close - 1 >= after;
      trim_newline = !is_expr && !strip_leading && before != '+';
      tokens_.push_back(MakeToken(is_expr ? Tok::kExprClose : Tok::kStmtClose, close));
      pos = close + 2;
      // {% raw %}: everything up to {% endraw %} is text.
      if (!is_expr && tokens_.size() == first_token + 2 &&
          tokens_[first_token].kind == Tok::kName && tokens_[first_token].text == "raw") {
        tokens_.resize(first_token - 1);
        LOOM_ASSIGN_OR_RETURN(pos, LexRaw(src, pos, tag, &strip_leading, &trim_newline));
      }
    }
    tokens_.push_back(MakeToken(Tok::kEnd, src_.size()));
    return std::move(tokens_);
  }

 private:
  Status Fail(size_t pos, std::string_view what) {
    return InvalidArgumentError("template syntax error at ", Where(src_, static_cast<int64_t>(pos)),
                                ": ", what);
  }

  // The offset of the next "{{", "{%" or "{#" at or after `pos`, or the source size.
  static size_t FindTag(std::string_view src, size_t pos) {
    while (pos < src.size()) {
      const size_t brace = src.find('{', pos);
      if (brace == std::string_view::npos || brace + 1 >= src.size()) return src.size();
      const char next = src[brace + 1];
      if (next == '{' || next == '%' || next == '#') return brace;
      pos = brace + 1;
    }
    return src.size();
  }

  void PushText(std::string_view src, size_t a, size_t b, size_t pos) {
    if (b > a) {
      tokens_.push_back({.kind = Tok::kText,
                         .pos = static_cast<int64_t>(pos),
                         .text = std::string(src.substr(a, b - a))});
    }
  }

  StatusOr<size_t> LexRaw(std::string_view src, size_t pos, size_t tag, bool* strip_leading,
                          bool* trim_newline) {
    for (size_t search = pos;;) {
      const size_t open = src.find("{%", search);
      if (open == std::string_view::npos) return Fail(tag, "{% raw %} without {% endraw %}");
      size_t k = open + 2;
      const bool strip_before = k < src.size() && src[k] == '-';
      if (strip_before || (k < src.size() && src[k] == '+')) ++k;
      while (k < src.size() && IsBlank(src[k])) ++k;
      if (src.substr(k, 6) != "endraw") {
        search = open + 2;
        continue;
      }
      k += 6;
      while (k < src.size() && IsBlank(src[k])) ++k;
      const bool strip_after = k < src.size() && src[k] == '-';
      if (strip_after) ++k;
      if (src.substr(k, 2) != "%}") return Fail(open, "malformed {% endraw %}");
      size_t a = pos;
      size_t b = open;
      if (*strip_leading) {
        while (a < b && IsBlank(src[a])) ++a;
      } else if (*trim_newline && a < b && src[a] == '\n') {
        ++a;
      }
      if (strip_before) {
        while (b > a && IsBlank(src[b - 1])) --b;
      }
      PushText(src, a, b, pos);
      *strip_leading = strip_after;
      *trim_newline = !strip_after;
      return k + 2;
    }
  }

  // Lexes the inside of a tag from `pos`; returns the offset of its closing "}}" or "%}" (the
  // '-' or '+' before it belongs to the delimiter).
  StatusOr<size_t> LexTag(std::string_view src, size_t pos, bool is_expr, size_t tag) {
    const char close_first = is_expr ? '}' : '%';
    const size_t n = src.size();
    for (;;) {
      while (pos < n && IsBlank(src[pos])) ++pos;
      if (pos >= n) return Fail(tag, is_expr ? "unclosed {{" : "unclosed {%");
      const char c = src[pos];
      if (c == close_first && pos + 1 < n && src[pos + 1] == '}') return pos;
      if ((c == '-' || c == '+') && pos + 2 < n && src[pos + 1] == close_first &&
          src[pos + 2] == '}') {
        return pos + 1;
      }
      if (IsNameStart(c)) {
        size_t end = pos;
        while (end < n && IsNameChar(src[end])) ++end;
        tokens_.push_back({.kind = Tok::kName,
                           .pos = static_cast<int64_t>(pos),
                           .text = std::string(src.substr(pos, end - pos))});
        pos = end;
        continue;
      }
      if (IsDigit(c)) {
        LOOM_ASSIGN_OR_RETURN(pos, LexNumber(src, pos));
        continue;
      }
      if (c == '\'' || c == '"') {
        LOOM_ASSIGN_OR_RETURN(pos, LexString(src, pos));
        continue;
      }
      static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      bool matched = false;
      for (std::string_view op : kTwo) {
        if (src.substr(pos, 2) == op) {
          tokens_.push_back(
              {.kind = Tok::kOp, .pos = static_cast<int64_t>(pos), .text = std::string(op)});
          pos += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string_view("()[]{},.:|=<>+-*/%~").find(c) != std::string_view::npos) {
        tokens_.push_back(
            {.kind = Tok::kOp, .pos = static_cast<int64_t>(pos), .text = std::string(1, c)});
        ++pos;
        continue;
      }
      return Fail(pos, StrCat("unexpected character '", std::string(1, c), "' in a tag"));
    }
  }

  StatusOr<size_t> LexNumber(std::string_view src, size_t pos) {
    const size_t n = src.size();
    size_t end = pos;
    while (end < n && (IsDigit(src[end]) || src[end] == '_')) ++end;
    bool is_float = false;
    if (end + 1 < n && src[end] == '.' && IsDigit(src[end + 1])) {
      is_float = true;
      ++end;
      while (end < n && (IsDigit(src[end]) || src[end] == '_')) ++end;
    }
    if (end < n && (src[end] == 'e' || src[end] == 'E')) {
      size_t k = end + 1;
      if (k < n && (src[k] == '+' || src[k] == '-')) ++k;
      if (k < n && IsDigit(src[k])) {
        is_float = true;
        end = k;
        while (end < n && IsDigit(src[end])) ++end;
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src[i] != '_') text.push_back(src[i]);
    }
    Token t = MakeToken(is_float ? Tok::kFloat : Tok::kInt, pos);
    errno = 0;
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Fail(pos, "integer literal out of range");
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  // Python string literal escapes; unknown escapes stay as they are ("\d" is backslash, d).
  StatusOr<size_t> LexString(std::string_view src, size_t pos) {
    const char quote = src[pos];
    std::string value;
    size_t i = pos + 1;
    const size_t n = src.size();
    for (;;) {
      if (i >= n) return Fail(pos, "unclosed string literal");
      const char c = src[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= n) return Fail(pos, "unclosed string literal");
      const char e = src[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value.push_back('\n');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case '0':
          value.push_back('\0');
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const int h = i + k < n ? HexDigit(src[i + k]) : -1;
            if (h < 0) return Fail(i - 2, StrCat("bad \\", std::string(1, e), " escape"));
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          i += digits;
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return Fail(i - digits - 2, "escape is not a Unicode scalar value");
          }
          AppendUtf8(cp, &value);
          break;
        }
        default:
          value.push_back('\\');
          value.push_back(e);
      }
    }
    tokens_.push_back(
        {.kind = Tok::kString, .pos = static_cast<int64_t>(pos), .text = std::move(value)});
    return i + 1;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string Where(std::string_view source, int64_t pos) {
  int64_t line = 1;
  int64_t col = 1;
  const int64_t end = std::min<int64_t>(pos, static_cast<int64_t>(source.size()));
  for (int64_t i = 0; i < end; ++i) {
    if (source[static_cast<size_t>(i)] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return StrCat("line ", line, " col ", col);
}

StatusOr<std::vector<Token>> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace loom::text::jinja
