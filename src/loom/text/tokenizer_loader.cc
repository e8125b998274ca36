#include "loom/text/tokenizer_loader.h"

#include <cstring>
#include <filesystem>
#include <optional>
#include <span>

#include "loom/base/mapped_file.h"
#include "loom/model/gguf.h"
#include "loom/model/llama2c.h"
#include "loom/text/bpe.h"
#include "loom/text/llama2c_tokenizer.h"
#include "loom/text/sentencepiece.h"
#include "loom/text/sentencepiece_model.h"
#include "loom/text/tiktoken_file.h"
#include "loom/text/tokenizer_json.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;

enum class FileKind {
  kGguf,
  kLlama2cTokenizer,
  kLlama2cModel,
  kJson,
  kTiktoken,
  kSentencePieceModel,
  kUnknown
};

bool IsGguf(std::span<const std::byte> bytes) {
  uint32_t magic = 0;
  if (bytes.size() < sizeof(magic)) return false;
  std::memcpy(&magic, bytes.data(), sizeof(magic));
  return magic == model::kGgufMagic;
}

// What a file is, from its bytes.  A tokenizer.bin has no magic: it is one if it parses to its
// exact end, which a checkpoint or random bytes practically never do.  `tokenizer_error` receives
// the parse error of the tokenizer.bin attempt.
FileKind Sniff(std::span<const std::byte> bytes, const std::string& path, Status* tokenizer_error) {
  if (IsGguf(bytes)) return FileKind::kGguf;
  if (LooksLikeJson(bytes)) return FileKind::kJson;
  if (LooksLikeTiktoken(bytes)) return FileKind::kTiktoken;
  auto parsed = ParseLlama2cTokenizer(bytes, 0, path);
  if (parsed.ok()) return FileKind::kLlama2cTokenizer;
  if (LooksLikeSentencePieceModel(bytes)) return FileKind::kSentencePieceModel;
  *tokenizer_error = parsed.status();
  if (model::HasLlama2cMagic(bytes) || model::LooksLikeLlama2cLegacy(bytes)) {
    return FileKind::kLlama2cModel;
  }
  return FileKind::kUnknown;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Status UnknownFileError(const std::string& path, const Status& tokenizer_error) {
  if (EndsWith(path, ".json")) {
    return InvalidArgumentError(path, ": not a tokenizer.json (it does not start with '{')");
  }
  return InvalidArgumentError(path,
                              ": unknown file: not a GGUF model, a tokenizer.json, a "
                              "tokenizer.model, a llama2.c checkpoint or a llama2.c tokenizer.bin "
                              "(read as tokenizer.bin: ",
                              tokenizer_error.message(), ")");
}

StatusOr<std::unique_ptr<Tokenizer>> FromTokenizerJson(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(TokenizerJson t, LoadTokenizerJson(path));
  return TokenizerFromJson(std::move(t), path);
}

// A tokenizer.model, with the config files beside it (bos/eos ids, chat template, add_bos).
StatusOr<std::unique_ptr<Tokenizer>> FromSentencePieceModel(const std::string& path) {
  TokenizerJson t;
  LOOM_ASSIGN_OR_RETURN(t.spec, LoadSentencePieceModel(path));
  LOOM_RETURN_IF_ERROR(ApplyDirectoryConfigs(fs::path(path).parent_path().string(), &t).status());
  // SentencePiece's decoder drops the dummy prefix of a sequence's first piece.
  t.sp.strip_space_at_start = t.spec.add_space_prefix;
  return TokenizerFromJson(std::move(t), path);
}

// A tiktoken.model (Kimi K2), with tokenizer_config.json and the model configs beside it.
StatusOr<std::unique_ptr<Tokenizer>> FromTiktoken(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(TokenizerJson t, LoadTiktokenDirectory(path));
  return TokenizerFromJson(std::move(t), path);
}

// The tokenizer file a model directory (or the directory of a model file) holds: its
// tokenizer.json, else its tiktoken.model, else its tokenizer.model; "" when none.
std::string TokenizerBeside(const std::string& model_path) {
  std::error_code ec;
  const fs::path p = model_path;
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  for (const char* name : {"tokenizer.json", "tiktoken.model", "tokenizer.model"}) {
    const fs::path candidate = dir / name;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return std::string();
}

StatusOr<std::unique_ptr<Tokenizer>> FromFileBeside(const std::string& file) {
  if (EndsWith(file, "tiktoken.model")) return FromTiktoken(file);
  if (EndsWith(file, ".model")) return FromSentencePieceModel(file);
  return FromTokenizerJson(file);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromJson(TokenizerJson t, std::string_view source) {
  if (t.spec.model == "llama") {
    // The added-token facts were read into t.options; the SentencePiece options take them over.
    static_cast<AddedTokenOptions&>(t.sp) = std::move(static_cast<AddedTokenOptions&>(t.options));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> spm,
                          SentencePieceTokenizer::Create(t.spec, source, t.sp));
    return std::unique_ptr<Tokenizer>(std::move(spm));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> bpe,
                        BpeTokenizer::Create(std::move(t.spec), t.options, source));
  return std::unique_ptr<Tokenizer>(std::move(bpe));
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromSpec(const model::TokenizerSpec& spec,
                                                       std::string_view source) {
  if (spec.model == "llama") {
    // GGUF and llama2.c vocabularies merge by score; a merge list there is ignored (llama.cpp
    // ignores it too).
    std::optional<model::TokenizerSpec> by_score;
    if (!spec.merges.empty()) {
      by_score = spec;
      by_score->merges.clear();
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> t,
                          SentencePieceTokenizer::Create(by_score ? *by_score : spec, source));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (spec.model.empty() || spec.model == "none") {
    return NotFoundError(source, " has no tokenizer; pass --tokenizer FILE");
  }
  if (spec.model == "gpt2") {
    LOOM_ASSIGN_OR_RETURN(BpeOptions options, BpeOptionsForPre(spec.pre, source));
    if (spec.pre == "kimi-k2" && spec.merges.empty()) {
      // A Kimi vocabulary converted from tiktoken ranks without its merges: the ids are the
      // ranks, which give the merges back (tiktoken_file.h).
      model::TokenizerSpec ranked = spec;
      std::vector<bool> normal(ranked.tokens.size(), true);
      for (size_t i = 0; i < ranked.token_types.size(); ++i) {
        const int32_t type = ranked.token_types[i];
        normal[i] = type == 0 || type == 1 || type == 6;
      }
      RankMerges(ranked.tokens, normal, &ranked.merges, &options.merge_ranks);
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t,
                            BpeTokenizer::Create(std::move(ranked), options, source));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t,
                          BpeTokenizer::Create(spec, options, source));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return UnimplementedError(source, ": tokenizer model '", spec.model, "' is not supported");
}

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path,
                                                   int64_t vocab_size_hint) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string beside = TokenizerBeside(path);
    if (beside.empty()) {
      return NotFoundError(path,
                           " is a directory without a tokenizer.json, tiktoken.model or "
                           "tokenizer.model");
    }
    return FromFileBeside(beside);
  }
  {
    LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(path));
    const std::span<const std::byte> bytes = file.bytes();
    if (LooksLikeJson(bytes)) return FromTokenizerJson(path);
    if (LooksLikeTiktoken(bytes)) return FromTiktoken(path);
    if (!IsGguf(bytes)) {
      auto spec = ParseLlama2cTokenizer(bytes, vocab_size_hint, path);
      if (spec.ok()) return TokenizerFromSpec(*spec, path);
      if (LooksLikeSentencePieceModel(bytes)) return FromSentencePieceModel(path);
      if (model::HasLlama2cMagic(bytes) || model::LooksLikeLlama2cLegacy(bytes)) {
        return InvalidArgumentError(
            path,
            " is a llama2.c checkpoint, not a tokenizer: its vocabulary "
            "is a separate tokenizer.bin (pass that with --tokenizer FILE)");
      }
      // A well-formed tokenizer.bin for another vocabulary size: that error says it best.
      if (vocab_size_hint > 0 && ParseLlama2cTokenizer(bytes, 0, path).ok()) return spec.status();
      return UnknownFileError(path, spec.status());
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<model::ModelFile> m, model::OpenModel(path));
  return TokenizerFromSpec(m->tokenizer, path);
}

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const model::ModelFile& model,
                                                           const std::string& tokenizer_path) {
  const int64_t model_vocab = model.hparams.vocab_size;
  std::unique_ptr<Tokenizer> tokenizer;
  if (!tokenizer_path.empty()) {
    LOOM_ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(tokenizer_path, model_vocab));
  } else if (!model.tokenizer.model.empty()) {
    LOOM_ASSIGN_OR_RETURN(tokenizer, TokenizerFromSpec(model.tokenizer, model.path));
  } else if (model.format == "llama2c") {
    const fs::path dir = fs::path(model.path).parent_path();
    const fs::path candidates[] = {dir / "tokenizer.bin",
                                   dir / ("tok" + std::to_string(model_vocab) + ".bin")};
    for (const fs::path& candidate : candidates) {
      std::error_code ec;
      if (!fs::is_regular_file(candidate, ec)) continue;
      LOOM_ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(candidate.string(), model_vocab));
      break;
    }
    if (tokenizer == nullptr) {
      return NotFoundError(model.path, " is a llama2.c checkpoint, which carries no tokenizer, ",
                           "and neither ", candidates[0].string(), " nor ", candidates[1].string(),
                           " exists; pass --tokenizer FILE");
    }
  } else if (const std::string file = TokenizerBeside(model.path); !file.empty()) {
    LOOM_ASSIGN_OR_RETURN(tokenizer, FromFileBeside(file));
  } else {
    return NotFoundError(model.path,
                         " has no tokenizer (and no tokenizer.json or tokenizer.model beside "
                         "it); pass --tokenizer FILE");
  }
  if (model_vocab > 0 && tokenizer->vocab_size() > model_vocab) {
    return InvalidArgumentError("tokenizer ", tokenizer_path.empty() ? model.path : tokenizer_path,
                                " has ", tokenizer->vocab_size(), " tokens but model ", model.path,
                                " only ", model_vocab);
  }
  return tokenizer;
}

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_path,
                                                           const std::string& tokenizer_path) {
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    // A Hugging Face / MLX model directory: its tokenizer.json, without opening the weights.
    if (!tokenizer_path.empty()) return LoadTokenizer(tokenizer_path, 0);
    if (const std::string file = TokenizerBeside(model_path); !file.empty()) {
      return FromFileBeside(file);
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<model::ModelFile> m, model::OpenModel(model_path));
    return LoadTokenizerForModel(*m, tokenizer_path);
  }
  FileKind kind;
  Status tokenizer_error;
  {
    LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(model_path));
    kind = Sniff(file.bytes(), model_path, &tokenizer_error);
  }
  if (kind == FileKind::kLlama2cTokenizer || kind == FileKind::kJson ||
      kind == FileKind::kTiktoken || kind == FileKind::kSentencePieceModel) {
    return LoadTokenizer(tokenizer_path.empty() ? model_path : tokenizer_path, 0);
  }
  if (kind == FileKind::kUnknown) return UnknownFileError(model_path, tokenizer_error);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<model::ModelFile> m, model::OpenModel(model_path));
  return LoadTokenizerForModel(*m, tokenizer_path);
}

}  // namespace loom::text
