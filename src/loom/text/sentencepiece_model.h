// SentencePiece model files (tokenizer.model, the `ModelProto` protobuf of google/sentencepiece)
// read and written with a small protobuf wire-format codec of its own (no libprotobuf).
//
// Read: pieces (text, score, type), trainer_spec (model_type, byte_fallback, unk/bos/eos/pad ids,
// treat_whitespace_as_suffix), normalizer_spec (name, precompiled_charsmap, add_dummy_prefix,
// remove_extra_whitespaces, escape_whitespaces).  Supported: BPE models with the identity
// normalizer and spaces escaped as "▁" (Llama 1/2, Mistral, TinyLlama, llama2.c); Unigram models,
// precompiled normalization rules, removal of extra whitespace and whitespace-as-suffix are
// Unimplemented errors naming the field.  Unknown fields are skipped, as protobuf does.
//
// Written: the same fields for a "llama" TokenizerSpec, so that `loom convert` can put a
// tokenizer.model beside converted weights; google/sentencepiece loads what is written.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::text {

// Parses tokenizer.model bytes into a "llama" spec (add_bos true, as Hugging Face's
// LlamaTokenizer).  `source` (a file name) prefixes errors.
StatusOr<model::TokenizerSpec> ParseSentencePieceModel(std::span<const std::byte> bytes,
                                                       std::string_view source);

// Reads a tokenizer.model file.
StatusOr<model::TokenizerSpec> LoadSentencePieceModel(const std::string& path);

// Serializes a "llama" spec as tokenizer.model bytes.  A vocabulary spelled with real spaces
// (llama2.c) is respelled with "▁" first (MetaspaceSpec).
StatusOr<std::string> SerializeSentencePieceModel(const model::TokenizerSpec& spec);

// A "llama" spec validated and spelled the SentencePiece way: pieces with real spaces (llama2.c
// tokenizer.bin) get "▁", control pieces lose llama2.c's surrounding newlines ("\n<s>\n").
StatusOr<model::TokenizerSpec> MetaspaceSpec(const model::TokenizerSpec& spec);

// Whether `bytes` could be a tokenizer.model: a protobuf whose first field is a piece (field 1,
// length-delimited).
bool LooksLikeSentencePieceModel(std::span<const std::byte> bytes);

}  // namespace loom::text
