#include "loom/text/sentencepiece_model.h"

#include <cstring>
#include <memory>

#include "loom/base/mapped_file.h"
#include "loom/text/sentencepiece.h"

namespace loom::text {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // "▁" U+2581
constexpr int64_t kMaxPieces = 16 << 20;

// ModelProto field numbers (sentencepiece_model.proto).
enum : uint32_t { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3 };
enum : uint32_t { kPieceText = 1, kPieceScore = 2, kPieceType = 3 };
enum : uint32_t {
  kModelType = 3,
  kVocabSize = 4,
  kWhitespaceAsSuffix = 24,
  kByteFallback = 35,
  kUnkId = 40,
  kBosId = 41,
  kEosId = 42,
  kPadId = 43,
};
enum : uint32_t {
  kNormName = 1,
  kCharsmap = 2,
  kDummyPrefix = 3,
  kRemoveExtraWhitespaces = 4,
  kEscapeWhitespaces = 5,
};
constexpr uint64_t kModelTypeUnigram = 1;
constexpr uint64_t kModelTypeBpe = 2;

enum class Wire : uint8_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

// One field of a message: its number, wire type and value (varint / fixed bits, or the bytes).
struct Field {
  uint32_t number = 0;
  Wire wire = Wire::kVarint;
  uint64_t value = 0;
  std::span<const std::byte> bytes;
};

// Reads the fields of one message in order; every read is bounds-checked.
class ProtoReader {
 public:
  ProtoReader(std::span<const std::byte> bytes, std::string_view source, std::string_view what)
      : bytes_(bytes), source_(source), what_(what) {}

  bool done() const { return pos_ >= bytes_.size(); }

  Status Next(Field* f) {
    const size_t at = pos_;
    uint64_t key = 0;
    LOOM_RETURN_IF_ERROR(Varint(&key));
    const uint64_t number = key >> 3;
    const uint64_t wire = key & 7;
    if (number == 0 || number > 0x1FFFFFFF) return Error(at, StrCat("field number ", number));
    f->number = static_cast<uint32_t>(number);
    switch (wire) {
      case 0:
        f->wire = Wire::kVarint;
        return Varint(&f->value);
      case 1:
        f->wire = Wire::kFixed64;
        return Fixed(8, &f->value);
      case 5:
        f->wire = Wire::kFixed32;
        return Fixed(4, &f->value);
      case 2: {
        f->wire = Wire::kLen;
        uint64_t len = 0;
        LOOM_RETURN_IF_ERROR(Varint(&len));
        if (len > bytes_.size() - pos_) {
          return Error(at, StrCat("field ", number, " of ", len, " bytes runs past the end"));
        }
        f->bytes = bytes_.subspan(pos_, static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return OkStatus();
      }
      default:
        return Error(at, StrCat("field ", number, " has wire type ", wire,
                                " (groups and unknown types are not supported)"));
    }
  }

  Status Error(size_t at, std::string_view what) const {
    return InvalidArgumentError(source_, ": tokenizer.model: ", what_, " at byte ", at, ": ", what);
  }

 private:
  Status Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return Error(pos_, "truncated varint");
      const uint8_t b = static_cast<uint8_t>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return OkStatus();
      }
    }
    return Error(pos_, "varint longer than 10 bytes");
  }
  Status Fixed(size_t n, uint64_t* out) {
    if (n > bytes_.size() - pos_) return Error(pos_, "truncated fixed-width value");
    uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + pos_, n);  // little-endian hosts
    pos_ += n;
    *out = v;
    return OkStatus();
  }

  std::span<const std::byte> bytes_;
  std::string_view source_;
  std::string_view what_;
  size_t pos_ = 0;
};

Status Expect(const ProtoReader& r, const Field& f, Wire wire, std::string_view name) {
  if (f.wire == wire) return OkStatus();
  return r.Error(0, StrCat(name, " (field ", f.number, ") has the wrong wire type"));
}

// An int32 field as protobuf encodes it (negative values sign-extended to 64 bits).
int64_t AsInt32(uint64_t v) { return static_cast<int64_t>(static_cast<int32_t>(v)); }

struct Piece {
  std::string text;
  float score = 0;
  int32_t type = 1;  // NORMAL
};

Status ParsePiece(std::span<const std::byte> bytes, std::string_view source, int64_t index,
                  Piece* out) {
  const std::string what = StrCat("piece ", index);
  ProtoReader r(bytes, source, what);
  Field f;
  while (!r.done()) {
    LOOM_RETURN_IF_ERROR(r.Next(&f));
    if (f.number == kPieceText) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kLen, "piece"));
      out->text.assign(reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size());
    } else if (f.number == kPieceScore) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kFixed32, "score"));
      const uint32_t bits = static_cast<uint32_t>(f.value);
      std::memcpy(&out->score, &bits, sizeof(bits));
    } else if (f.number == kPieceType) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kVarint, "type"));
      if (f.value < 1 || f.value > 6) {
        return r.Error(0, StrCat("type ", AsInt32(f.value), " (expected 1..6)"));
      }
      out->type = static_cast<int32_t>(f.value);
    }
  }
  return OkStatus();
}

struct Trainer {
  uint64_t model_type = kModelTypeUnigram;  // proto defaults
  bool byte_fallback = false;
  bool whitespace_as_suffix = false;
  int64_t unk_id = 0;
  int64_t bos_id = 1;
  int64_t eos_id = 2;
  int64_t pad_id = -1;
};

Status ParseTrainer(std::span<const std::byte> bytes, std::string_view source, Trainer* t) {
  ProtoReader r(bytes, source, "trainer_spec");
  Field f;
  while (!r.done()) {
    LOOM_RETURN_IF_ERROR(r.Next(&f));
    int64_t* id = f.number == kUnkId   ? &t->unk_id
                  : f.number == kBosId ? &t->bos_id
                  : f.number == kEosId ? &t->eos_id
                  : f.number == kPadId ? &t->pad_id
                                       : nullptr;
    if (id != nullptr) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kVarint, "a token id"));
      *id = AsInt32(f.value);
    } else if (f.number == kModelType) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kVarint, "model_type"));
      t->model_type = f.value;
    } else if (f.number == kByteFallback) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kVarint, "byte_fallback"));
      t->byte_fallback = f.value != 0;
    } else if (f.number == kWhitespaceAsSuffix) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kVarint, "treat_whitespace_as_suffix"));
      t->whitespace_as_suffix = f.value != 0;
    }
  }
  return OkStatus();
}

struct Normalizer {
  std::string name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true;  // proto defaults
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

Status ParseNormalizer(std::span<const std::byte> bytes, std::string_view source, Normalizer* n) {
  ProtoReader r(bytes, source, "normalizer_spec");
  Field f;
  while (!r.done()) {
    LOOM_RETURN_IF_ERROR(r.Next(&f));
    if (f.number == kNormName) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kLen, "name"));
      n->name.assign(reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size());
    } else if (f.number == kCharsmap) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kLen, "precompiled_charsmap"));
      n->has_charsmap = !f.bytes.empty();
    } else if (f.number == kDummyPrefix || f.number == kRemoveExtraWhitespaces ||
               f.number == kEscapeWhitespaces) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kVarint, "a flag"));
      bool& flag = f.number == kDummyPrefix              ? n->add_dummy_prefix
                   : f.number == kRemoveExtraWhitespaces ? n->remove_extra_whitespaces
                                                         : n->escape_whitespaces;
      flag = f.value != 0;
    }
  }
  return OkStatus();
}

// Protobuf encoding.
void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutKey(uint32_t number, Wire wire, std::string* out) {
  PutVarint((static_cast<uint64_t>(number) << 3) | static_cast<uint64_t>(wire), out);
}
void PutVarintField(uint32_t number, uint64_t v, std::string* out) {
  PutKey(number, Wire::kVarint, out);
  PutVarint(v, out);
}
void PutInt32Field(uint32_t number, int64_t v, std::string* out) {
  PutVarintField(number, static_cast<uint64_t>(v), out);  // negative: sign-extended, 10 bytes
}
void PutBytesField(uint32_t number, std::string_view bytes, std::string* out) {
  PutKey(number, Wire::kLen, out);
  PutVarint(bytes.size(), out);
  out->append(bytes);
}
void PutFloatField(uint32_t number, float v, std::string* out) {
  PutKey(number, Wire::kFixed32, out);
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

std::string RespellSpaces(std::string_view piece) {
  std::string out;
  for (char c : piece) {
    if (c == ' ') {
      out.append(kMetaspace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

bool LooksLikeSentencePieceModel(std::span<const std::byte> bytes) {
  // Field 1, wire type 2: key byte 0x0A; then a piece message starting with its own field 1.
  if (bytes.size() < 4 || static_cast<uint8_t>(bytes[0]) != 0x0A) return false;
  ProtoReader r(bytes, "", "");
  Field f;
  if (!r.Next(&f).ok() || f.number != kPieces || f.wire != Wire::kLen) return false;
  ProtoReader piece(f.bytes, "", "");
  Field first;
  return piece.Next(&first).ok() && first.number == kPieceText && first.wire == Wire::kLen;
}

StatusOr<model::TokenizerSpec> ParseSentencePieceModel(std::span<const std::byte> bytes,
                                                       std::string_view source) {
  ProtoReader r(bytes, source, "ModelProto");
  std::vector<Piece> pieces;
  Trainer trainer;
  Normalizer normalizer;
  bool has_trainer = false;
  Field f;
  while (!r.done()) {
    LOOM_RETURN_IF_ERROR(r.Next(&f));
    if (f.number == kPieces) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kLen, "pieces"));
      if (static_cast<int64_t>(pieces.size()) >= kMaxPieces) {
        return InvalidArgumentError(source, ": tokenizer.model: more than ", kMaxPieces, " pieces");
      }
      Piece p;
      LOOM_RETURN_IF_ERROR(ParsePiece(f.bytes, source, static_cast<int64_t>(pieces.size()), &p));
      pieces.push_back(std::move(p));
    } else if (f.number == kTrainerSpec) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kLen, "trainer_spec"));
      LOOM_RETURN_IF_ERROR(ParseTrainer(f.bytes, source, &trainer));
      has_trainer = true;
    } else if (f.number == kNormalizerSpec) {
      LOOM_RETURN_IF_ERROR(Expect(r, f, Wire::kLen, "normalizer_spec"));
      LOOM_RETURN_IF_ERROR(ParseNormalizer(f.bytes, source, &normalizer));
    }
  }
  if (pieces.empty()) {
    return InvalidArgumentError(source,
                                ": tokenizer.model has no pieces (not a SentencePiece "
                                "model?)");
  }
  if (!has_trainer) trainer.model_type = kModelTypeBpe;  // nothing says; BPE is what we do
  if (trainer.model_type == kModelTypeUnigram) {
    return UnimplementedError(source,
                              ": tokenizer.model is a Unigram model (T5, ALBERT style); only BPE "
                              "models (Llama, Mistral) are supported");
  }
  if (trainer.model_type != kModelTypeBpe) {
    return UnimplementedError(source, ": tokenizer.model trainer_spec.model_type ",
                              trainer.model_type, " is not supported (only BPE = 2)");
  }
  if (trainer.whitespace_as_suffix) {
    return UnimplementedError(source,
                              ": tokenizer.model treat_whitespace_as_suffix is not supported");
  }
  if (normalizer.has_charsmap) {
    return UnimplementedError(source, ": tokenizer.model normalizer '", normalizer.name,
                              "' (precompiled rules) is not supported; only identity");
  }
  if (normalizer.remove_extra_whitespaces) {
    return UnimplementedError(
        source, ": tokenizer.model normalizer_spec.remove_extra_whitespaces is not supported");
  }
  if (!normalizer.escape_whitespaces) {
    return UnimplementedError(
        source,
        ": tokenizer.model without escape_whitespaces (spaces as \"\xE2\x96\x81\") is "
        "not supported");
  }

  model::TokenizerSpec spec;
  spec.model = "llama";
  const int64_t n = static_cast<int64_t>(pieces.size());
  spec.tokens.reserve(pieces.size());
  spec.scores.reserve(pieces.size());
  spec.token_types.reserve(pieces.size());
  for (Piece& p : pieces) {
    spec.tokens.push_back(std::move(p.text));
    spec.scores.push_back(p.score);
    spec.token_types.push_back(p.type);
  }
  const std::pair<const char*, int64_t> ids[] = {{"unk_id", trainer.unk_id},
                                                 {"bos_id", trainer.bos_id},
                                                 {"eos_id", trainer.eos_id},
                                                 {"pad_id", trainer.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= n) {
      return InvalidArgumentError(source, ": tokenizer.model trainer_spec.", name, " ", id,
                                  " is outside the ", n, " pieces");
    }
  }
  spec.unk_id = static_cast<int32_t>(trainer.unk_id);
  spec.bos_id = static_cast<int32_t>(trainer.bos_id);
  spec.eos_id = static_cast<int32_t>(trainer.eos_id);
  spec.pad_id = static_cast<int32_t>(trainer.pad_id);
  spec.add_bos = spec.bos_id >= 0;
  spec.add_eos = false;
  spec.add_space_prefix = normalizer.add_dummy_prefix;
  // Byte pieces exist (typed BYTE) only in models trained with byte_fallback; without the flag
  // SentencePiece would not fall back to them, so they are plain unused pieces then.
  if (!trainer.byte_fallback) {
    for (int32_t& type : spec.token_types) {
      if (type == 6) type = 5;
    }
  }
  // Validate now, so that errors name this file.
  LOOM_RETURN_IF_ERROR(SentencePieceTokenizer::Create(spec, source).status());
  return spec;
}

StatusOr<model::TokenizerSpec> LoadSentencePieceModel(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(const base::MappedFile file, base::MappedFile::Open(path));
  return ParseSentencePieceModel(file.bytes(), path);
}

StatusOr<model::TokenizerSpec> MetaspaceSpec(const model::TokenizerSpec& in) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> t,
                        SentencePieceTokenizer::Create(in, "tokenizer"));
  model::TokenizerSpec spec = in;
  const size_t n = spec.tokens.size();
  if (spec.token_types.empty()) {
    spec.token_types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      spec.token_types[i] = static_cast<int32_t>(t->piece_kind(static_cast<int32_t>(i)));
    }
  }
  if (spec.scores.empty()) spec.scores.assign(n, 0.0f);
  if (t->metaspace()) return spec;
  for (size_t i = 0; i < n; ++i) {
    std::string& piece = spec.tokens[i];
    const PieceKind kind = t->piece_kind(static_cast<int32_t>(i));
    if (kind == PieceKind::kNormal || kind == PieceKind::kUserDefined) {
      piece = RespellSpaces(piece);
    } else if (kind == PieceKind::kControl) {
      while (!piece.empty() && piece.front() == '\n') piece.erase(0, 1);
      while (!piece.empty() && piece.back() == '\n') piece.pop_back();
    }
  }
  return spec;
}

StatusOr<std::string> SerializeSentencePieceModel(const model::TokenizerSpec& in) {
  LOOM_ASSIGN_OR_RETURN(const model::TokenizerSpec spec, MetaspaceSpec(in));
  const size_t n = spec.tokens.size();
  std::string out;
  int byte_pieces = 0;
  std::string piece;
  for (size_t i = 0; i < n; ++i) {
    piece.clear();
    PutBytesField(kPieceText, spec.tokens[i], &piece);
    PutFloatField(kPieceScore, spec.scores[i], &piece);
    int32_t type = spec.token_types[i] == 0 ? 1 : spec.token_types[i];
    PutVarintField(kPieceType, static_cast<uint64_t>(type), &piece);
    PutBytesField(kPieces, piece, &out);
    if (type == 6) ++byte_pieces;
  }
  std::string trainer;
  PutVarintField(kModelType, kModelTypeBpe, &trainer);
  PutInt32Field(kVocabSize, static_cast<int64_t>(n), &trainer);
  // SentencePiece insists on all 256 byte pieces when byte_fallback is on.
  PutVarintField(kByteFallback, byte_pieces == 256 ? 1 : 0, &trainer);
  PutInt32Field(kUnkId, spec.unk_id, &trainer);
  PutInt32Field(kBosId, spec.bos_id, &trainer);
  PutInt32Field(kEosId, spec.eos_id, &trainer);
  PutInt32Field(kPadId, spec.pad_id, &trainer);
  PutBytesField(kTrainerSpec, trainer, &out);
  std::string normalizer;
  PutBytesField(kNormName, "identity", &normalizer);
  PutVarintField(kDummyPrefix, spec.add_space_prefix ? 1 : 0, &normalizer);
  PutVarintField(kRemoveExtraWhitespaces, 0, &normalizer);
  PutVarintField(kEscapeWhitespaces, 1, &normalizer);
  PutBytesField(kNormalizerSpec, normalizer, &out);
  return out;
}

}  // namespace loom::text
