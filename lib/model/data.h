// data.h — where training tokens come from. Every rank draws the same batch for a given step (the
// batch depends on (seed, step) only), so runs at any t see identical data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace tp {

/// Sequences [first, first + count) of `batch` (still sequence-major: position (s, b) of the slice
/// at s·count + b): data parallelism's share of the global batch for one DP rank.
Batch batch_slice(const Batch& batch, int64_t first, int64_t count);

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t vocab() const = 0;
  /// Batch `step`: B sequences of S + 1 consecutive tokens → ids (first S) and targets (last S).
  virtual Batch batch(int64_t step, int64_t batch, int64_t seq) const = 0;
  /// One line for the log.
  virtual std::string describe() const = 0;
  /// The lowest mean loss any model can reach on this data (nats/token), when known; NaN if not.
  virtual double loss_floor() const;
  /// True when the source holds data back from training for validation (--eval-every).
  virtual bool has_held_out() const { return false; }
  /// Held-out batch `index` (0, 1, ...: the same for every rank and every run of this source),
  /// drawn from data no training batch() contains. Needs has_held_out().
  virtual Batch held_out_batch(int64_t index, int64_t batch, int64_t seq) const;
};

/// A synthetic source with a known entropy rate: a Markov chain over V tokens in which every token
/// has 4 distinct successors, taken with probabilities 1/2, 1/4, 1/8, 1/8. Whatever the current
/// token, the next one carries H = 1.75 bits = 1.2130 nats, so no model can beat a mean loss of
/// 1.2130 nats, and a model that has learned the successor table reaches it. The table and the
/// samples come from the counter-based RNG keyed by the seed.
class MarkovSource : public TokenSource {
 public:
  MarkovSource(int64_t vocab, uint64_t seed);
  int64_t vocab() const override { return vocab_; }
  Batch batch(int64_t step, int64_t batch, int64_t seq) const override;
  /// The held-out stream: the same chain, sampled with the key "markov.heldout" instead of
  /// "markov.sample", so its sequences are independent draws of the training distribution (the
  /// chain has no finite data to split). --val-fraction does not apply.
  bool has_held_out() const override { return true; }
  Batch held_out_batch(int64_t index, int64_t batch, int64_t seq) const override;
  std::string describe() const override;
  double loss_floor() const override;
  /// The successors of token `token`, in decreasing probability.
  const std::vector<int32_t>& successors(int32_t token) const {
    return next_[static_cast<size_t>(token)];
  }

 private:
  int64_t vocab_;
  uint64_t seed_;
  std::vector<std::vector<int32_t>> next_;
  Batch sample(const char* stream, int64_t index, int64_t batch, int64_t seq) const;
};

/// Byte-level tokens (V = 256) of any file; batch rows start at offsets drawn from (seed, step).
/// The file is not loaded: each batch reads its rows (seq + 1 bytes each) with pread, so a file of
/// any size (a 100 GB corpus, or a sparse file) costs no memory beyond the batch.
/// Held out (--val-fraction f): the last ⌊f · size⌋ bytes. Training rows lie wholly in the bytes
/// before them, held-out rows wholly in them, so no byte is in both. When either part would be
/// shorter than one row (seq + 1 bytes), nothing is held out (has_held_out() false, and
/// describe() says why).
class TextSource : public TokenSource {
 public:
  /// Bad input when the file is missing, not a regular file, unreadable, or shorter than seq + 1
  /// bytes.
  TextSource(const std::string& path, int64_t seq, uint64_t seed, double val_fraction = 0.0);
  ~TextSource() override;
  TextSource(const TextSource&) = delete;
  TextSource& operator=(const TextSource&) = delete;
  int64_t vocab() const override { return 256; }
  /// A failed or short read (the file shrank or a disk error) is a tp::Error naming the file.
  Batch batch(int64_t step, int64_t batch, int64_t seq) const override;
  std::string describe() const override;
  bool has_held_out() const override { return held_ > 0; }
  Batch held_out_batch(int64_t index, int64_t batch, int64_t seq) const override;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;       ///< bytes in the file when it was opened
  int64_t held_ = 0;       ///< the last held_ bytes are held out
  std::string held_note_;  ///< why nothing is held out (for describe), when val_fraction > 0
  uint64_t seed_;
  /// Rows of `batch` at offsets in [begin, end - seq) drawn with `key` at index·batch + b.
  Batch rows(const char* key, int64_t index, int64_t batch, int64_t seq, int64_t begin,
             int64_t end) const;
};

/// Token ids held in memory, e.g. a text file encoded by a tokenizer (tp_train --data F --tokenizer
/// DIR: lib/text/bpe.h); batch rows start at offsets drawn from (seed, step), as TextSource's do.
class IdSource : public TokenSource {
 public:
  /// `what` names the ids in messages and the log ("data.txt as GPT-2 tokens"). Bad input when
  /// there are fewer than seq + 1 ids, or an id is outside [0, vocab).
  IdSource(std::vector<int32_t> ids, int64_t vocab, int64_t seq, uint64_t seed, std::string what);
  int64_t vocab() const override { return vocab_; }
  Batch batch(int64_t step, int64_t batch, int64_t seq) const override;
  std::string describe() const override;

 private:
  std::vector<int32_t> ids_;
  int64_t vocab_;
  uint64_t seed_;
  std::string what_;
};

}  // namespace tp
