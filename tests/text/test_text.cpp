// test_text.cpp — the pieces of GPT-2's tokenizer (lib/text/bpe.h), serial: the byte map and its
// inverse, the replacement of invalid UTF-8, the pre-tokeniser's splits, BPE merges by rank on a
// tiny hand-written vocabulary, "<|endoftext|>", decode(encode(s)) == s, and reading a folder.
// The comparison with GPT-2's real files and two independent implementations is
// scripts/tests/tokenizer.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/bpe.h"

using namespace tp;
using namespace tp::text;

namespace {

using Pieces = std::vector<std::string>;

Pieces split(const std::string& s) {
  Pieces out;
  for (const auto p : pretokenize(s)) out.emplace_back(p);
  return out;
}

// The 256 bytes (id = byte), then the merged tokens in `extra`, then "<|endoftext|>".
std::vector<std::string> tiny_vocab(const std::vector<std::string>& extra) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  v.insert(v.end(), extra.begin(), extra.end());
  v.emplace_back("<|endoftext|>");
  return v;
}

std::string utf8(char32_t c) {  // one code point as UTF-8
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

int exit_code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.exit_code();
  }
  return 0;
}

}  // namespace

TEST(Text, ByteMapIsABijectionThatKeepsPrintableBytes) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_unicode()[b];
    seen.insert(c);
    EXPECT_EQ(unicode_to_byte(c), b);
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) {
      EXPECT_EQ(c, static_cast<char32_t>(b));
    } else {
      EXPECT_GE(c, 256u);
    }
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(byte_to_unicode()[' '], U'\u0120');   // "Ġ", as in GPT-2's " the" = "Ġthe"
  EXPECT_EQ(byte_to_unicode()['\n'], U'\u010A');  // "Ċ"
  EXPECT_EQ(byte_to_unicode()[0xAD], U'\u0143');  // the soft hyphen, the last unprintable byte
  EXPECT_EQ(unicode_to_byte(U'\u0144'), -1);
}

TEST(Text, InvalidUtf8BecomesOneReplacementPerMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  const std::string valid = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x91\x8D";  // a é 中 👍
  EXPECT_EQ(sanitize_utf8(valid), valid);
  EXPECT_EQ(sanitize_utf8("\xFF"), r);
  EXPECT_EQ(sanitize_utf8("\xC0\x80"), r + r);  // overlong: neither byte can start
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), r);      // truncated: one subpart
  EXPECT_EQ(sanitize_utf8("\xE2\x82x"), r + "x");
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), r);                  // truncated 4-byte sequence
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xE0\x80\xAF"), r + r + r);          // overlong 3-byte
  EXPECT_EQ(sanitize_utf8("ab\x80"
                          "cd"),
            "ab" + r + "cd");
}

TEST(Text, PretokenizerSplitsAsGpt2sPattern) {
  EXPECT_EQ(split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("I'm you're they'll it's"),
            (Pieces{"I", "'m", " you", "'re", " they", "'ll", " it", "'s"}));
  EXPECT_EQ(split("DON'T ''s"),
            (Pieces{"DON", "'", "T", " ''", "s"}));  // contractions are lower case
  EXPECT_EQ(split("abc123 4567"), (Pieces{"abc", "123", " 4567"}));
  EXPECT_EQ(split("a  b"), (Pieces{"a", " ", " b"}));  // \s+(?!\S) leaves the last space to " b"
  EXPECT_EQ(split("a\t\tb"), (Pieces{"a", "\t", "\t", "b"}));  // a lone tab before b: \s+
  EXPECT_EQ(split("x \n\n y"), (Pieces{"x", " \n\n", " y"}));
  EXPECT_EQ(split("end   "), (Pieces{"end", "   "}));  // at the end the whole run
  EXPECT_EQ(split("?!... ok"), (Pieces{"?!...", " ok"}));
  EXPECT_EQ(split(" !x"), (Pieces{" !", "x"}));
  EXPECT_EQ(split("\xE4\xB8\xAD\xE6\x96\x87 \xE5\xAD\x97"),
            (Pieces{"\xE4\xB8\xAD\xE6\x96\x87", " \xE5\xAD\x97"}));
  EXPECT_EQ(split("na\xC3\xAFve"), (Pieces{"na\xC3\xAFve"}));      // ï is a letter
  EXPECT_EQ(split("cafe\xCC\x81"), (Pieces{"cafe", "\xCC\x81"}));  // U+0301 is a mark, not a letter
  EXPECT_EQ(split(" \xD9\xA1\xD9\xA2"), (Pieces{" \xD9\xA1\xD9\xA2"}));  // Arabic-Indic digits
  EXPECT_EQ(split("x\xC2\xA0y"), (Pieces{"x", "\xC2\xA0", "y"}));        // NBSP is \s
  EXPECT_EQ(split("x\xC2\xA0\xC2\xA0y"), (Pieces{"x", "\xC2\xA0", "\xC2\xA0", "y"}));
  EXPECT_EQ(split("x\xC2\x85\xC2\x85y"),
            (Pieces{"x", "\xC2\x85\xC2\x85", "y"}));  // NEL: not \s in JS
  EXPECT_TRUE(split("").empty());
  // The pieces always concatenate to the text.
  const std::string s = "  Mixed\ttext, 12 numbers\n\n and\xE3\x80\x80\xF0\x9F\x91\x8D'll   ";
  std::string joined;
  for (const auto& p : split(s)) joined += p;
  EXPECT_EQ(joined, s);
}

TEST(Text, MergesApplyByRankLeftToRight) {
  // ids: bytes 0..255, then ab 256, abc 257, bc 258, aa 259, <|endoftext|> 260
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"ab", "c"}, {"b", "c"}, {"a", "a"}};
  Tokenizer tok(tiny_vocab({"ab", "abc", "bc", "aa"}), merges);
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.eot_id(), 260);
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{257}));        // a b c -> ab c -> abc
  EXPECT_EQ(tok.encode("bcab"), (std::vector<int32_t>{258, 256}));  // ab first, then bc
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{259, 'a'}));   // left to right
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{259, 259}));
  EXPECT_EQ(tok.encode("xyz"), (std::vector<int32_t>{'x', 'y', 'z'}));  // no merge: the bytes
  EXPECT_EQ(tok.encode("ab abc"),
            (std::vector<int32_t>{256, ' ', 257}));  // " abc" has no merge with ' '
  // The other order of ranks: bc before ab.
  Tokenizer other(tiny_vocab({"ab", "abc", "bc", "aa"}), {{"b", "c"}, {"a", "b"}, {"ab", "c"}});
  EXPECT_EQ(other.encode("abc"), (std::vector<int32_t>{'a', 258}));
  // A second call hits the cache and gives the same ids.
  EXPECT_EQ(tok.encode("bcab"), (std::vector<int32_t>{258, 256}));
}

TEST(Text, EndOfTextIsItsIdOrText) {
  Tokenizer tok(tiny_vocab({}), {});
  const auto ids = tok.encode("x<|endoftext|>y<|endoftext|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{'x', 256, 'y', 256}));
  const auto text = tok.encode("x<|endoftext|>y", Special::Text);
  EXPECT_EQ(text.size(), 15u);
  EXPECT_EQ(tok.decode(ids), "x<|endoftext|>y<|endoftext|>");
}

TEST(Text, DecodeOfEncodeIsTheIdentityOnValidUtf8) {
  Tokenizer tok(tiny_vocab({"ab", "abc", "bc", "aa"}),
                {{"a", "b"}, {"ab", "c"}, {"b", "c"}, {"a", "a"}});
  std::mt19937 rng(7);
  const std::vector<char32_t> alphabet = {'a',   'b',    'c',     ' ',    '\t',    '\n',  '\'',
                                          's',   '1',    '!',     0xA0,   0xE9,    0x301, 0x4E2D,
                                          0x661, 0x3000, 0x1F44D, 0xFEFF, 0x10FFFF};
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += utf8(alphabet[rng() % alphabet.size()]);
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << "trial " << trial;
  }
  // Invalid UTF-8 decodes to its sanitized text.
  EXPECT_EQ(tok.decode(tok.encode("a\xFF"
                                  "b")),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(exit_code_of([&] { tok.decode({0, 261}); }), 2);
}

TEST(Text, BadVocabulariesAreBadInput) {
  std::vector<std::string> no_byte = tiny_vocab({});
  no_byte.erase(no_byte.begin() + 'q');
  EXPECT_EQ(exit_code_of([&] { Tokenizer t(no_byte, {}); }), 2);
  EXPECT_EQ(exit_code_of([&] { Tokenizer t(tiny_vocab({}), {{"a", "b"}}); }), 2);  // "ab" missing
}

TEST(Text, LoadsAFolderInEitherNaming) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tp_test_text_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const auto spell = [](const std::string& bytes) {
    std::string s;
    for (const char b : bytes) s += utf8(byte_to_unicode()[static_cast<unsigned char>(b)]);
    return s;
  };
  const std::vector<std::string> vocab = tiny_vocab({"ab", " ab"});
  const auto write =
      [&](const std::string& vname, const std::string& mname, const std::string& merges) {
    std::ofstream v(dir / vname);
    v << "{";
    for (size_t id = 0; id < vocab.size(); ++id) {
      std::string key;
      for (const char c : spell(vocab[id]))
        key += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
      v << (id ? ", " : "") << '"' << key << "\": " << id;
    }
    v << "}";
    std::ofstream(dir / mname) << merges;
  };
  write("vocab.json", "merges.txt", "#version: 0.2\na b\n" + spell(" ") + " ab\n");
  Tokenizer hf = Tokenizer::load(dir.string());
  EXPECT_EQ(hf.encode("ab ab"), (std::vector<int32_t>{256, 257}));
  fs::remove(dir / "vocab.json");
  fs::remove(dir / "merges.txt");
  EXPECT_EQ(exit_code_of([&] { Tokenizer::load(dir.string()); }), 2);  // neither pair
  write("encoder.json", "vocab.bpe", "#version: 0.2\na b\n" + spell(" ") + " ab\n");
  EXPECT_EQ(Tokenizer::load(dir.string()).encode("ab ab"), (std::vector<int32_t>{256, 257}));
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\na b c\n";
  EXPECT_EQ(exit_code_of([&] { Tokenizer::load(dir.string()); }), 2);  // a bad merges line
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\n";
  std::ofstream(dir / "encoder.json") << R"({"a": 0, "b": 5})";
  EXPECT_EQ(exit_code_of([&] { Tokenizer::load(dir.string()); }), 2);  // ids not 0..n-1
  fs::remove_all(dir);
}

// issue 39: a --tokenizer that is missing, loops or is a file is named with its errno, not taken for
// a folder without the files.
TEST(Text, AFolderThatIsNotOneIsNamedWithItsErrno) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("tp_test_text_errno_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  fs::create_symlink("loop", dir / "loop");
  const std::pair<fs::path, const char*> cases[] = {
      {dir / "missing", "(ENOENT)"}, {dir / "loop", "(ELOOP)"}, {dir / "file", "(ENOTDIR)"}};
  for (const auto& [path, name] : cases) {
    try {
      Tokenizer::load(path.string());
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("has neither"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}
