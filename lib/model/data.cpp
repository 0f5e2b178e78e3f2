#include "model/data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/output_file.h"
#include "core/rng.h"

namespace tp {

Batch batch_slice(const Batch& batch, int64_t first, int64_t count) {
  TP_CHECK(first >= 0 && count >= 1 && first + count <= batch.batch, "batch_slice: sequences [",
           first, ", ", first + count, ") of a batch of ", batch.batch);
  Batch out;
  out.seq = batch.seq;
  out.batch = count;
  for (int64_t s = 0; s < batch.seq; ++s)
    for (int64_t b = first; b < first + count; ++b) {
      out.ids.push_back(batch.ids[s * batch.batch + b]);
      out.targets.push_back(batch.targets[s * batch.batch + b]);
    }
  return out;
}

namespace {
constexpr double kProb[4] = {0.5, 0.25, 0.125, 0.125};

Batch empty_batch(int64_t seq, int64_t batch) {
  Batch out;
  out.seq = seq;
  out.batch = batch;
  out.ids.resize(static_cast<size_t>(seq * batch));
  out.targets.resize(out.ids.size());
  return out;
}

double uniform(const RngKey& key, int64_t index) {
  return random_value(key, index, Distribution::uniform(0.0f, 1.0f));
}
}  // namespace

double TokenSource::loss_floor() const { return std::numeric_limits<double>::quiet_NaN(); }

Batch TokenSource::held_out_batch(int64_t, int64_t, int64_t) const {
  TP_CHECK_INPUT(false, "this data (", describe(), ") holds nothing out for validation");
}

MarkovSource::MarkovSource(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {
  TP_CHECK_INPUT(vocab >= 5, "the synthetic Markov data needs --vocab of at least 5, got ", vocab);
  const RngKey key = RngKey::from(seed, "markov.table");
  next_.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    auto& succ = next_[static_cast<size_t>(i)];
    for (int64_t draw = 0; succ.size() < 4; ++draw) {
      const auto cand = static_cast<int32_t>(
          std::min<double>(vocab - 1, std::floor(uniform(key, i * 1024 + draw) * vocab)));
      bool fresh = true;
      for (int32_t s : succ) fresh = fresh && s != cand;
      if (fresh) succ.push_back(cand);
    }
  }
}

Batch MarkovSource::batch(int64_t step, int64_t batch, int64_t seq) const {
  return sample("markov.sample", step, batch, seq);
}

Batch MarkovSource::held_out_batch(int64_t index, int64_t batch, int64_t seq) const {
  return sample("markov.heldout", index, batch, seq);
}

Batch MarkovSource::sample(const char* stream, int64_t index, int64_t batch, int64_t seq) const {
  Batch out = empty_batch(seq, batch);
  const RngKey key = RngKey::from(seed_, stream);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t base = (index * batch + b) * (seq + 1);
    auto token =
        static_cast<int32_t>(std::min<double>(vocab_ - 1, std::floor(uniform(key, base) * vocab_)));
    for (int64_t s = 0; s < seq; ++s) {
      const double u = uniform(key, base + s + 1);
      int j = 0;  // the successor whose cumulative probability first exceeds u
      double acc = kProb[0];
      while (j < 3 && u >= acc) acc += kProb[++j];
      const int32_t next = next_[static_cast<size_t>(token)][static_cast<size_t>(j)];
      out.ids[static_cast<size_t>(s * batch + b)] = token;
      out.targets[static_cast<size_t>(s * batch + b)] = next;
      token = next;
    }
  }
  return out;
}

double MarkovSource::loss_floor() const {
  double h = 0;
  for (double p : kProb) h -= p * std::log(p);
  return h;
}

std::string MarkovSource::describe() const {
  std::ostringstream os;
  os << "synthetic Markov chain over " << vocab_
     << " tokens, 4 successors each (p = 1/2, 1/4, 1/8, 1/8); "
     << "loss floor " << loss_floor() << " nats";
  return os.str();
}

TextSource::TextSource(const std::string& path, int64_t seq, uint64_t seed, double val_fraction)
    : path_(path), seed_(seed) {
  // Only a regular file: opening a FIFO with no writer would block forever.
  struct stat st {};
  TP_CHECK_INPUT(::stat(path.c_str(), &st) == 0, "cannot open data file ", path, " (",
                 errno_text(errno), "); give --data an existing text file");
  TP_CHECK_INPUT(S_ISREG(st.st_mode), "data file ", path, " is ",
                 S_ISDIR(st.st_mode)    ? "a folder"
                 : S_ISFIFO(st.st_mode) ? "a FIFO"
                 : S_ISSOCK(st.st_mode) ? "a socket"
                                        : "a device",
                 ", not a regular file; give --data a text file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TP_CHECK_INPUT(fd_ >= 0, "cannot open data file ", path, " (", errno_text(errno),
                 "); give --data a readable text file");
  size_ = static_cast<int64_t>(st.st_size);
  TP_CHECK_INPUT(size_ > 0, "data file ", path, " is empty");
  TP_CHECK_INPUT(size_ >= seq + 1, "data file ", path, " has ", size_,
                 " bytes; one training sequence needs seq + 1 = ", seq + 1,
                 " (use a longer file or a smaller --seq)");
  const auto held = static_cast<int64_t>(std::floor(val_fraction * static_cast<double>(size_)));
  if (held >= seq + 1 && size_ - held >= seq + 1)
    held_ = held;
  else if (val_fraction > 0)
    held_note_ = "nothing held out: " + std::to_string(held) + " bytes (--val-fraction " +
                 std::to_string(val_fraction).substr(0, 6) + ") and the " +
                 std::to_string(size_ - held) +
                 " before them must each hold a row of seq + 1 = " + std::to_string(seq + 1);
}

TextSource::~TextSource() {
  if (fd_ >= 0) ::close(fd_);
}

Batch TextSource::batch(int64_t step, int64_t batch, int64_t seq) const {
  return rows("text.offset", step, batch, seq, 0, size_ - held_);
}

Batch TextSource::held_out_batch(int64_t index, int64_t batch, int64_t seq) const {
  TP_CHECK(held_ > 0, "held_out_batch of ", path_, ", which holds nothing out");
  return rows("text.heldout", index, batch, seq, size_ - held_, size_);
}

Batch TextSource::rows(const char* key_name, int64_t step, int64_t batch, int64_t seq,
                       int64_t begin, int64_t end) const {
  Batch out = empty_batch(seq, batch);
  const RngKey key = RngKey::from(seed_, key_name);
  const int64_t starts = end - begin - seq;  // valid start offsets, from `begin`
  std::vector<unsigned char> row(static_cast<size_t>(seq + 1));
  for (int64_t b = 0; b < batch; ++b) {
    const auto off =
        begin + std::min<int64_t>(starts - 1, static_cast<int64_t>(uniform(key, step * batch + b) *
                                                                   static_cast<double>(starts)));
    size_t got = 0;
    while (got < row.size()) {
      const ssize_t n = ::pread(fd_, row.data() + got, row.size() - got,
                                static_cast<off_t>(off + static_cast<int64_t>(got)));
      if (n < 0 && errno == EINTR) continue;
      TP_CHECK(n >= 0, "reading data file ", path_, " at byte ", off + static_cast<int64_t>(got),
               " failed: ", errno_text(errno));
      TP_CHECK(n > 0, "data file ", path_, " ended at byte ", off + static_cast<int64_t>(got),
               " but had ", size_, " bytes when training started (it shrank)");
      got += static_cast<size_t>(n);
    }
    for (int64_t s = 0; s < seq; ++s) {
      out.ids[static_cast<size_t>(s * batch + b)] = row[static_cast<size_t>(s)];
      out.targets[static_cast<size_t>(s * batch + b)] = row[static_cast<size_t>(s + 1)];
    }
  }
  return out;
}

std::string TextSource::describe() const {
  return "bytes of " + path_ + " (" + std::to_string(size_) + " bytes, V = 256, read as needed)" +
         (held_ > 0            ? "; the last " + std::to_string(held_) + " held out for validation"
          : held_note_.empty() ? ""
                               : "; " + held_note_);
}

IdSource::IdSource(std::vector<int32_t> ids, int64_t vocab, int64_t seq, uint64_t seed,
                   std::string what)
    : ids_(std::move(ids)), vocab_(vocab), seed_(seed), what_(std::move(what)) {
  TP_CHECK_INPUT(static_cast<int64_t>(ids_.size()) >= seq + 1, what_, " has ", ids_.size(),
                 " tokens; one training sequence needs seq + 1 = ", seq + 1,
                 " (use a longer file or a smaller --seq)");
  for (size_t i = 0; i < ids_.size(); ++i)
    TP_CHECK_INPUT(ids_[i] >= 0 && ids_[i] < vocab_, what_, ": token ", i, " is id ", ids_[i],
                   ", outside the vocabulary [0, ", vocab_, ")");
}

Batch IdSource::batch(int64_t step, int64_t batch, int64_t seq) const {
  Batch out = empty_batch(seq, batch);
  const RngKey key = RngKey::from(seed_, "ids.offset");
  const int64_t starts = static_cast<int64_t>(ids_.size()) - seq;  // valid start offsets
  for (int64_t b = 0; b < batch; ++b) {
    const auto off = std::min<int64_t>(
        starts - 1,
        static_cast<int64_t>(uniform(key, step * batch + b) * static_cast<double>(starts)));
    for (int64_t s = 0; s < seq; ++s) {
      out.ids[static_cast<size_t>(s * batch + b)] = ids_[static_cast<size_t>(off + s)];
      out.targets[static_cast<size_t>(s * batch + b)] = ids_[static_cast<size_t>(off + s + 1)];
    }
  }
  return out;
}

std::string IdSource::describe() const {
  return what_ + " (" + std::to_string(ids_.size()) + " tokens, V = " + std::to_string(vocab_) +
         ")";
}

}  // namespace tp
