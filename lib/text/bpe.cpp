// bpe.cpp — GPT-2's byte-level BPE: the byte map, UTF-8 sanitizing, the pre-tokeniser, loading the
// vocabulary and merges, encode and decode (bpe.h says what each follows and why).
#include "text/bpe.h"

#include <unicode/uchar.h>

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/output_file.h"

namespace tp::text {

namespace {

// ---- UTF-8 ------------------------------------------------------------------------------------

// The length of the well-formed sequence at s[i] (Unicode table 3-7), or the length of its maximal
// invalid subpart negated (-1 .. -3).
int utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return 1;
  int need;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    const unsigned x = b(i + k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return -k;
  }
  return need + 1;
}

// Decodes the valid sequence of `len` bytes at p.
char32_t utf8_code_point(const unsigned char* p, int len) {
  switch (len) {
    case 1:
      return p[0];
    case 2:
      return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
      return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
             (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

// ---- Character classes of the pattern -----------------------------------------------------------

enum Class : uint8_t { kLetter, kNumber, kSpace, kOther };

bool js_space(char32_t c) {  // ECMAScript's \s (WhiteSpace and LineTerminator)
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000 || c == 0xFEFF;
}

Class classify(char32_t c) {
  if (js_space(c)) return kSpace;
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return kLetter;
  if (mask & U_GC_N_MASK) return kNumber;
  return kOther;
}

struct AsciiClasses {
  std::array<Class, 128> of{};
  AsciiClasses() {
    for (char32_t c = 0; c < 128; ++c) of[c] = classify(c);
  }
};

// ---- Files ------------------------------------------------------------------------------------

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TP_CHECK_INPUT(in.good(), "cannot read ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A token spelled in the byte alphabet -> its bytes; false when a character is not in it.
bool alphabet_to_bytes(std::string_view spelled, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < spelled.size();) {
    const int len = utf8_sequence(spelled, i);
    if (len < 0) return false;
    const int b =
        unicode_to_byte(utf8_code_point(reinterpret_cast<const unsigned char*>(&spelled[i]), len));
    if (b < 0) return false;
    bytes += static_cast<char>(b);
    i += static_cast<size_t>(len);
  }
  return true;
}

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr size_t kCacheLimit = 1 << 18;  // pieces; the cache starts over when it is full

}  // namespace

// ---- The byte map -------------------------------------------------------------------------------

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> map = [] {
    std::array<char32_t, 256> m{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      m[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return m;
  }();
  return map;
}

int unicode_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    for (int b = 0; b < 256; ++b) m[byte_to_unicode()[b]] = b;
    return m;
  }();
  const auto it = inverse.find(c);
  return it == inverse.end() ? -1 : it->second;
}

// ---- UTF-8 sanitizing ---------------------------------------------------------------------------

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const int len = utf8_sequence(bytes, i);
    if (len > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(-len);
    }
  }
  return out;
}

// ---- The pre-tokeniser --------------------------------------------------------------------------

std::vector<std::string_view> pretokenize(std::string_view text) {
  static const AsciiClasses ascii;
  // 1. Decode: the byte offset and the class of every code point (offsets has one more: the end).
  std::vector<uint32_t> offsets;
  std::vector<Class> cls;
  std::vector<char32_t> cps;
  offsets.reserve(text.size() + 1);
  cls.reserve(text.size());
  cps.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    int len = 1;
    char32_t c = p[i];
    if (c >= 0x80) {
      len = utf8_sequence(text, i);
      TP_CHECK(len > 0, "pretokenize: invalid UTF-8 at byte ", i, " (call sanitize_utf8 first)");
      c = utf8_code_point(p + i, len);
    }
    offsets.push_back(static_cast<uint32_t>(i));
    cps.push_back(c);
    cls.push_back(c < 128 ? ascii.of[c] : classify(c));
    i += static_cast<size_t>(len);
  }
  const size_t n = cps.size();
  offsets.push_back(static_cast<uint32_t>(text.size()));

  // 2. Scan: at each position the first alternative of the pattern that matches, as a regex
  // engine would try them.
  std::vector<std::string_view> pieces;
  const auto run = [&](size_t from, Class c) {
    while (from < n && cls[from] == c) ++from;
    return from;
  };
  for (size_t i = 0; i < n;) {
    size_t j = 0;
    const char32_t c = cps[i];
    const auto at = [&](size_t k) { return k < n ? cps[k] : char32_t(0); };
    if (c == '\'' &&
        (at(i + 1) == 's' || at(i + 1) == 't' || at(i + 1) == 'm' || at(i + 1) == 'd')) {
      j = i + 2;  // 's 't 'm 'd
    } else if (c == '\'' &&
               ((at(i + 1) == 'r' && at(i + 2) == 'e') || (at(i + 1) == 'v' && at(i + 2) == 'e') ||
                (at(i + 1) == 'l' && at(i + 2) == 'l'))) {
      j = i + 3;  // 're 've 'll
    } else if (cls[i] != kSpace) {
      j = run(i, cls[i]);  // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
    } else if (c == ' ' && i + 1 < n && cls[i + 1] != kSpace) {
      j = run(i + 1, cls[i + 1]);  // the same with the optional space in front
    } else {
      const size_t k = run(i, kSpace);
      // \s+(?!\S): the run, less its last space when a non-space follows; a single space before a
      // non-space falls through to \s+, which takes it alone.
      j = (k == n || k - i == 1) ? k : k - 1;
    }
    pieces.emplace_back(text.data() + offsets[i], offsets[j] - offsets[i]);
    i = j;
  }
  return pieces;
}

// ---- The tokenizer ------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::vector<std::string> tokens,
                     const std::vector<std::pair<std::string, std::string>>& merges,
                     const std::string& source)
    : tokens_(std::move(tokens)) {
  TP_CHECK_INPUT(tokens_.size() < static_cast<size_t>(INT32_MAX), source, " has too many tokens");
  ids_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    TP_CHECK_INPUT(ids_.emplace(tokens_[id], static_cast<int32_t>(id)).second, source,
                   ": two ids have the same token (ids ", ids_[tokens_[id]], " and ", id,
                   "); it is not a GPT-2 style vocabulary");
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids_.find(std::string(1, static_cast<char>(b)));
    TP_CHECK_INPUT(it != ids_.end(), source, " has no token for the byte ", b,
                   ": it is not a byte-level BPE vocabulary (GPT-2's has all 256)");
    byte_id_[b] = it->second;
  }
  const auto eot = ids_.find(std::string(kEndOfText));
  if (eot != ids_.end()) eot_ = eot->second;
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = ids_.find(a), ib = ids_.find(b), iab = ids_.find(a + b);
    TP_CHECK_INPUT(
        ia != ids_.end() && ib != ids_.end() && iab != ids_.end(), source, ": merge ", r + 1,
        " joins tokens that are not all in the vocabulary (the left part, the right part "
        "and their join must be); the vocabulary and the merges do not belong together");
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    merges_.emplace(key, Merge{static_cast<int32_t>(r), iab->second});  // the first rank wins
  }
}

Tokenizer Tokenizer::load(const std::string& dir) {
  // A folder that is missing, loops (symlinks) or is a file is named with its errno, not taken
  // for a folder without the files.
  struct stat st {};
  const int err = ::stat(dir.c_str(), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  TP_CHECK_INPUT(err == 0, "tokenizer folder ", dir, ": ", errno_text(err),
                 "; give the folder that holds GPT-2's vocab.json + merges.txt or encoder.json + "
                 "vocab.bpe");
  std::string vocab_path, merges_path;
  for (const auto& [v, m] : {std::pair<const char*, const char*>{"vocab.json", "merges.txt"},
                             {"encoder.json", "vocab.bpe"}}) {
    if (is_file(dir + "/" + v) && is_file(dir + "/" + m)) {
      vocab_path = dir + "/" + v;
      merges_path = dir + "/" + m;
      break;
    }
  }
  TP_CHECK_INPUT(!vocab_path.empty(), "tokenizer folder ", dir,
                 " has neither vocab.json + merges.txt (Hugging Face's names) nor encoder.json + "
                 "vocab.bpe (OpenAI's); put GPT-2's tokenizer files there");

  // 1. The vocabulary: a JSON object, token (in the byte alphabet) -> id, the ids 0..n-1.
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_path));
  } catch (const nlohmann::json::exception& e) {
    TP_CHECK_INPUT(false, vocab_path, " is not valid JSON (", e.what(), "); download it again");
  }
  TP_CHECK_INPUT(vocab.is_object() && !vocab.empty(), vocab_path,
                 " is not a JSON object of token -> id; it is not a GPT-2 vocabulary");
  std::vector<std::string> tokens(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  std::string bytes;
  // A missing byte token leaves a gap in the ids that the check below would blame on whichever
  // token holds an id past the end (GPT-2's <|endoftext|>): when the ids are wrong, a missing byte
  // is named first.
  auto check_every_byte = [&vocab, &vocab_path] {
    std::vector<bool> has_byte(256, false);
    std::string b1;
    for (const auto& item : vocab.items())
      if (alphabet_to_bytes(item.key(), b1) && b1.size() == 1)
        has_byte[static_cast<unsigned char>(b1[0])] = true;
    for (int b = 0; b < 256; ++b)
      TP_CHECK_INPUT(has_byte[b], vocab_path, " has no token for the byte ", b,
                     ": it is not a byte-level BPE vocabulary (GPT-2's has all 256)");
  };
  for (const auto& [spelled, id] : vocab.items()) {
    const bool id_ok = id.is_number_integer() && id.get<int64_t>() >= 0 &&
                       id.get<int64_t>() < static_cast<int64_t>(tokens.size()) &&
                       !seen[id.get<size_t>()];
    if (!id_ok) check_every_byte();
    TP_CHECK_INPUT(id_ok, vocab_path, ": token \"", spelled, "\" has id ", id.dump(),
                   "; the ids must be 0..", tokens.size() - 1, ", each once");
    TP_CHECK_INPUT(alphabet_to_bytes(spelled, bytes), vocab_path, ": token \"", spelled,
                   "\" has a character outside GPT-2's byte alphabet");
    seen[id.get<size_t>()] = true;
    tokens[id.get<size_t>()] = bytes;
  }

  // 2. The merges: "#version" first (optional), then "left right" per line, by rank.
  const std::string text = read_file(merges_path);
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream lines(text);
  std::string line, left, right;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    const bool two = space != std::string::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string::npos;
    TP_CHECK_INPUT(two, merges_path, " line ", number, ": \"", line.substr(0, 60),
                   "\" is not two tokens separated by one space; download the file again");
    TP_CHECK_INPUT(alphabet_to_bytes(std::string_view(line).substr(0, space), left) &&
                       alphabet_to_bytes(std::string_view(line).substr(space + 1), right),
                   merges_path, " line ", number, ": \"", line.substr(0, 60),
                   "\" has a character outside GPT-2's byte alphabet");
    merges.emplace_back(left, right);
  }
  return Tokenizer(std::move(tokens), merges, vocab_path + " with " + merges_path);
}

const std::vector<int32_t>& Tokenizer::bpe(std::string_view piece) {
  std::string key(piece);
  const auto hit = cache_.find(key);
  if (hit != cache_.end()) return hit->second;
  std::vector<int32_t> word;
  word.reserve(piece.size());
  for (const char ch : piece) word.push_back(byte_id_[static_cast<unsigned char>(ch)]);
  const auto pair_of = [](int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  };
  // The pair of lowest rank merges, every occurrence left to right, until no pair has a rank.
  std::vector<int32_t> next;
  while (word.size() > 1) {
    const Merge* best = nullptr;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = merges_.find(pair_of(word[i], word[i + 1]));
      if (it != merges_.end() && (!best || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = it->first;
      }
    }
    if (!best) break;
    next.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && pair_of(word[i], word[i + 1]) == best_key) {
        next.push_back(best->result);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word.swap(next);
  }
  if (cache_.size() >= kCacheLimit) cache_.clear();
  return cache_.emplace(std::move(key), std::move(word)).first->second;
}

void Tokenizer::encode_ordinary(std::string_view valid, std::vector<int32_t>& out) {
  for (const std::string_view piece : pretokenize(valid)) {
    const auto& ids = bpe(piece);
    out.insert(out.end(), ids.begin(), ids.end());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, Special special) {
  const std::string valid = sanitize_utf8(text);
  std::vector<int32_t> out;
  out.reserve(valid.size() / 3 + 1);
  std::string_view rest(valid);
  if (special == Special::Token && eot_ >= 0) {
    for (size_t at; (at = rest.find(kEndOfText)) != std::string_view::npos;) {
      encode_ordinary(rest.substr(0, at), out);
      out.push_back(eot_);
      rest.remove_prefix(at + kEndOfText.size());
    }
  }
  encode_ordinary(rest, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) {
    TP_CHECK_INPUT(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary [0, ",
                   vocab_size(), ")");
    out += tokens_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace tp::text
