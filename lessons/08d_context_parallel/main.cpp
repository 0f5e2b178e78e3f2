// Lesson 08d — context parallelism: the sequence split over cp ranks everywhere, attention included,
// by ring attention: the keys and values travel around the ranks, and each rank merges its partial
// outputs by their log-sum-exps.
//
// What it shows (tiny numbers: S = 16, B = 1, 4 heads of size 4; every number computed):
//   1. The merge on one row: attention over the first half of the keys and over the second, merged
//      by their log-sum-exps (lib/parallel/lse_merge.h), equals attention over all of them; added
//      without the weights it does not.
//   2. Ring attention step by step at cp = np, zigzag layout: at each step the K, V block each rank
//      holds (its source rank, its positions), which (query chunk, key chunk) pairs are full,
//      diagonal or skipped, and for one row its partial output, log-sum-exp and the merge; every
//      device merge checked against the host's; at the end each rank's out, lse and, after the
//      ring backward, dq, dk, dv against one device's attention on the whole sequence.
//   3. Contiguous vs zigzag: the score tiles each rank computed, counted by the ring's observer,
//      against ring_work's model (contiguous rank r 4r + 2 tiles, zigzag 2·cp on every rank).
//   4. The K, V bytes of each ring step from the CP communicator's ledger against the formula of
//      ring_attention.h.
//   5. When a block's transfer hides under its compute: the α–β prediction (hidden = min(1,
//      compute / transfer), forward by forward) against the waits measured over two simulated
//      links whose transfer takes half and twice a step's compute, at a larger shape (512
//      positions per rank), timed on a ring of 2 (ranks 0 and 1) while the other ranks sleep.
//   6. TP, SP and CP side by side for the lesson's model: what each splits, what moves, bytes per
//      layer and activation memory per rank (lib/model/memory.h; CP is S → S/cp at t = 1).
//   7. The picture (--svg): the 2·cp chunks by rank in both layouts, and the causal grid of (query
//      chunk, key chunk) tiles, each full, diagonal or skipped and coloured by the rank computing it.
//
// What is new since lesson 08c: parallel/context_parallel.h (layouts, chunks, pairs, ring_work),
// parallel/ring_attention.h (RingAttention and its observer), Device::attention_merge, and
// AttentionShape::kv_seq and ::past (one chunk of queries against another chunk's keys);
// parallel/lse_merge.h (the merge on the host: exercise 12) and lessons/ring_timing.h.
//
// Run:  make lessons && mpirun -np 4 build/bin/lesson_08d_context_parallel [--step] [--svg P]
//       (also -np 2, 3; S must divide by 2·cp: the default S = 16 becomes 24 at -np 3)
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/comm_ledger.h"
#include "core/format.h"
#include "lesson.h"
#include "model/config.h"
#include "model/memory.h"
#include "model/presets.h"
#include "parallel/context_parallel.h"
#include "parallel/lse_merge.h"
#include "parallel/ring_attention.h"
#include "pictures.h"
#include "ring_timing.h"
#include "sleeping_waits.h"

using namespace tp;

namespace {

constexpr double kTol = 1e-5;  // the ring adds the same terms as one device, in another order

// q, k, v and dout of the whole sequence (every rank makes the same ones) and one device's
// attention on them: the reference every ring is checked against.
struct Whole {
  AttentionShape shape;
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
};

Whole whole_attention(Device& dev, int64_t S, int64_t B, int64_t nh, int64_t hd, uint64_t seed) {
  Whole w;
  w.shape = AttentionShape{S, B, nh, nh, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const int64_t cols = nh * hd;
  auto random = [&](const char* name) {
    Tensor t(dev, Shape{S * B, cols});
    dev.fill_random(t, RngKey::from(seed, name), GlobalIndex::rows(cols, 0),
                    Distribution::normal(0, 1));
    return t;
  };
  Tensor q = random("q"), k = random("k"), v = random("v"), dout = random("dout");
  Tensor out(dev, q.shape()), lse(dev, Shape{B, nh, S});
  dev.attention_forward(out, lse, q, k, v, w.shape);
  Tensor dq(dev, q.shape()), dk(dev, k.shape()), dv(dev, v.shape());
  dev.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, w.shape);
  w.q = q.to_host(), w.k = k.to_host(), w.v = v.to_host(), w.dout = dout.to_host();
  w.out = out.to_host(), w.lse = lse.to_host();
  w.dq = dq.to_host(), w.dk = dk.to_host(), w.dv = dv.to_host();
  return w;
}

// The rows (sequence-major, B per position) of a whole (S·B, cols) host tensor at `pos`.
std::vector<float> rows_at(const std::vector<float>& whole, const std::vector<int64_t>& pos,
                           int64_t B, int64_t cols) {
  std::vector<float> r;
  for (int64_t p : pos)
    r.insert(r.end(), whole.begin() + p * B * cols, whole.begin() + (p + 1) * B * cols);
  return r;
}

// The whole (B, nh, S) log-sum-exps of `chunks`, laid out as RingAttention::lse_shape.
std::vector<float> lse_at(const std::vector<float>& whole, const std::vector<CpChunk>& chunks,
                          const AttentionShape& sh) {
  std::vector<float> r;
  for (const CpChunk& c : chunks)
    for (int64_t bj = 0; bj < sh.batch * sh.heads; ++bj)
      for (int64_t s = c.global_begin; s < c.global_begin + c.len; ++s)
        r.push_back(whole[bj * sh.seq + s]);
  return r;
}

std::string positions(const CpChunk& c) {
  return std::to_string(c.global_begin) + "–" + std::to_string(c.global_begin + c.len - 1);
}
const char* kind_name(ChunkPair k) {
  return k == ChunkPair::Full ? "full" : k == ChunkPair::Diagonal ? "diagonal" : "skipped";
}
std::string chunk_list(const std::vector<CpChunk>& chunks) {
  std::string s;
  for (const CpChunk& c : chunks) s += (s.empty() ? "" : ", ") + positions(c);
  return s;
}

// What the observer saw of one pair, copied to the host at once (merged_out is a view of the
// running output, which later merges overwrite).
struct PairSeen {
  RingPair pair;  // its tensors left empty
  std::vector<float> partial_out, partial_lse, merged_out, merged_lse;
};

// One ring forward and backward over `cp` at this rank's positions of `w`.
struct RingRun {
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<PairSeen> seen;
  int64_t full = 0, diagonal = 0;
  size_t ledger_begin = 0, ledger_backward = 0, ledger_end = 0;  // cp's ledger around each pass
};

RingRun run_ring(Device& dev, Communicator& cp, const Whole& w, CpLayout layout, bool backward) {
  const AttentionShape& sh = w.shape;
  const int64_t B = sh.batch, qc = sh.heads * sh.head_dim, kc = sh.kv_heads * sh.head_dim;
  const std::vector<int64_t> pos = cp_positions(sh.seq, cp.size(), cp.rank(), layout);
  const int64_t n = static_cast<int64_t>(pos.size());
  RingAttention ring(dev, cp, sh.seq, layout);
  RingRun run;
  ring.set_observer([&](const RingPair& p) {
    PairSeen s{p, {}, {}, {}, {}};
    s.pair.partial_out = s.pair.partial_lse = s.pair.merged_out = s.pair.merged_lse = Tensor();
    if (p.kind != ChunkPair::Skipped) {
      s.partial_out = p.partial_out.to_host(), s.partial_lse = p.partial_lse.to_host();
      s.merged_out = p.merged_out.to_host(), s.merged_lse = p.merged_lse.to_host();
    }
    run.seen.push_back(std::move(s));
  });
  auto T = [&](int64_t cols, const std::vector<float>& x) {
    return Tensor::from_host(dev, Shape{n * B, cols}, rows_at(x, pos, B, cols));
  };
  Tensor q = T(qc, w.q), k = T(kc, w.k), v = T(kc, w.v);
  Tensor out(dev, q.shape()), lse(dev, ring.lse_shape(B, sh.heads));
  run.ledger_begin = cp.ledger().size();
  ring.forward(out, lse, q, k, v, sh);
  run.ledger_backward = cp.ledger().size();
  run.out = out.to_host(), run.lse = lse.to_host();
  run.full = ring.full_pairs(), run.diagonal = ring.diagonal_pairs();
  if (backward) {
    Tensor dq(dev, q.shape()), dk(dev, k.shape()), dv(dev, v.shape());
    ring.backward(dq, dk, dv, T(qc, w.dout), q, k, v, out, lse, sh);
    run.dq = dq.to_host(), run.dk = dk.to_host(), run.dv = dv.to_host();
  }
  run.ledger_end = cp.ledger().size();
  return run;
}

// The largest relative difference between every device merge the observer saw and the host's
// lse_merge_rows of the same two operands (the chunk's running out and lse before it, and the
// pair's partial ones).
double merge_error(const RingRun& run, const AttentionShape& sh, size_t chunks) {
  std::vector<std::vector<float>> out(chunks), lse(chunks);
  double worst = 0;
  for (const PairSeen& s : run.seen) {
    if (s.pair.kind == ChunkPair::Skipped) continue;
    const size_t a = static_cast<size_t>(s.pair.q_chunk);
    if (!out[a].empty()) {  // the chunk's first partial is its running output: nothing to merge
      AttentionShape c = sh;
      c.seq = s.pair.q.len;
      lse_merge_rows(out[a], lse[a], s.partial_out, s.partial_lse, c);
      worst = std::max({worst, rel_error(out[a], s.merged_out), rel_error(lse[a], s.merged_lse)});
    }
    out[a] = s.merged_out, lse[a] = s.merged_lse;
  }
  return worst;
}

// 1. The merge on one row: the last position's attention over two halves of the keys.
void merge_one_row(lesson::Lesson& L, Device& dev, const Whole& w) {
  const AttentionShape& sh = w.shape;
  const int64_t S = sh.seq, B = sh.batch, hd = sh.head_dim, cols = sh.heads * hd, half = S / 2;
  const std::vector<float> q_last(w.q.end() - B * cols, w.q.end());
  auto part = [&](int64_t first, std::vector<float>& out, std::vector<float>& lse) {
    AttentionShape p = sh;
    p.seq = 1, p.kv_seq = half, p.past = S - 1 - first;  // query S − 1 sees every key of the half
    const std::vector<int64_t> keys = [&] {
      std::vector<int64_t> k;
      for (int64_t t = first; t < first + half; ++t) k.push_back(t);
      return k;
    }();
    Tensor o(dev, Shape{B, cols}), l(dev, Shape{B, sh.heads, 1});
    dev.attention_forward(
        o, l, Tensor::from_host(dev, Shape{B, cols}, q_last),
        Tensor::from_host(dev, Shape{half * B, cols}, rows_at(w.k, keys, B, cols)),
        Tensor::from_host(dev, Shape{half * B, cols}, rows_at(w.v, keys, B, cols)), p);
    out = o.to_host(), lse = l.to_host();
  };
  std::vector<float> out_a, lse_a, out_b, lse_b;
  part(0, out_a, lse_a);
  part(half, out_b, lse_b);
  AttentionShape one = sh;
  one.seq = 1;
  std::vector<float> merged = out_a, merged_lse = lse_a;
  lse_merge_rows(merged, merged_lse, out_b, lse_b, one);  // exercise 12
  const std::vector<float> want(w.out.end() - B * cols, w.out.end());
  const std::vector<float> want_lse = [&] {
    std::vector<float> l;
    for (int64_t bj = 0; bj < B * sh.heads; ++bj) l.push_back(w.lse[bj * S + S - 1]);
    return l;
  }();
  std::vector<float> added = out_a;  // the bug the weights prevent
  for (size_t i = 0; i < added.size(); ++i) added[i] += out_b[i];
  auto head0 = [&](const std::vector<float>& x) {
    return lesson::fmt(std::vector<float>(x.begin(), x.begin() + hd));
  };
  const double La = lse_a[0], Lb = lse_b[0], Lm = merged_lse[0];
  L.say("  position ", S - 1, " (sequence 0, head 0) attends to all ", S, " keys; split them into ",
        "0–", half - 1, " (A) and ", half, "–", S - 1, " (B):");
  L.say("    A: lse ", lesson::fmt(lse_a[0]), ", out ", head0(out_a));
  L.say("    B: lse ", lesson::fmt(lse_b[0]), ", out ", head0(out_b));
  L.say("    L = log(e^", fixed(La, 4), " + e^", fixed(Lb, 4), ") = ", fixed(Lm, 4),
        ";  weights e^(lse − L): A ", fixed(std::exp(La - Lm), 4), ", B ",
        fixed(std::exp(Lb - Lm), 4), " (they add to 1)");
  L.say("    merged: out ", head0(merged), ", lse ", lesson::fmt(merged_lse[0]));
  L.say("    one device over all ", S, " keys: out ", head0(want), ", lse ",
        lesson::fmt(want_lse[0]));
  const double bad = rel_error(added, want);
  L.say("    added without the weights: relative error ", sci(bad), " (every head)");
  L.check("merge of two halves (out) vs one device", merged, want, kTol);
  L.check("merge of two halves (lse) vs one device", merged_lse, want_lse, kTol);
  L.check_true("adding the partial outputs without their weights is wrong (error > 1e-2)",
               bad > 1e-2, "relative error " + sci(bad));
}

// The kinds of every pair a rank's observer saw, as floats for Lesson::gather: per pair the step,
// the source, its two chunk indices and its kind (0 full, 1 diagonal, 2 skipped).
Tensor pair_codes(Device& dev, const RingRun& run) {
  std::vector<float> v;
  for (const PairSeen& s : run.seen)
    v.insert(v.end(), {float(s.pair.step), float(s.pair.source), float(s.pair.q_chunk),
                       float(s.pair.kv_chunk), float(static_cast<int>(s.pair.kind))});
  return Tensor::from_host(dev, Shape{static_cast<int64_t>(v.size())}, v);
}

// 2. Ring attention step by step (zigzag): what each rank holds and computes at each step, one
// row's partials and merges, and the end against one device. Returns this rank's run.
RingRun ring_step_by_step(lesson::Lesson& L, const Whole& w) {
  Device& dev = L.device();
  Communicator& world = L.world();
  const AttentionShape& sh = w.shape;
  const int cp = L.size();
  const int64_t S = sh.seq, B = sh.batch, hd = sh.head_dim, cols = sh.heads * hd;
  const CpLayout layout = CpLayout::Zigzag;
  RingRun run = run_ring(dev, world, w, layout, /*backward=*/true);
  const std::vector<std::vector<float>> codes = L.gather(pair_codes(dev, run));
  if (L.is_root()) {
    for (int i = 0; i < cp; ++i) {
      L.say("  ring step ", i, ": rank r holds the K, V of rank (r − ", i, ") mod ", cp,
            i == 0 ? " (its own)" : "");
      lesson::Table t({"rank", "its queries", "holds K, V of", "their positions",
                       "pairs (queries × keys: kind)"});
      for (int r = 0; r < cp; ++r) {
        const std::vector<CpChunk> mine = cp_chunks(S, cp, r, layout);
        std::string pairs, source;
        for (size_t k = 0; k + 5 <= codes[r].size(); k += 5) {
          if (static_cast<int>(codes[r][k]) != i) continue;
          const int src = static_cast<int>(codes[r][k + 1]);
          const std::vector<CpChunk> theirs = cp_chunks(S, cp, src, layout);
          source = std::to_string(src);
          pairs += (pairs.empty() ? "" : ", ") + positions(mine[int(codes[r][k + 2])]) + " × " +
                   positions(theirs[int(codes[r][k + 3])]) + ": " +
                   kind_name(static_cast<ChunkPair>(int(codes[r][k + 4])));
        }
        t.add({std::to_string(r), chunk_list(mine), "rank " + source,
               chunk_list(cp_chunks(S, cp, std::stoi(source), layout)), pairs});
      }
      L.say(t.str());
    }
  }
  // One row on rank 0: the last position S − 1 (its second chunk), sequence 0, head 0.
  const CpChunk last = cp_chunks(S, cp, 0, layout).back();
  L.say("  one row, rank 0's position ", S - 1, " (sequence 0, head 0): each pair's partial, then",
        " the running merge");
  for (const PairSeen& s : run.seen) {
    if (s.pair.kind == ChunkPair::Skipped || s.pair.q.global_begin != last.global_begin) continue;
    const int64_t row = (last.len - 1) * B, l = last.len - 1;  // sequence 0
    auto h0 = [&](const std::vector<float>& x) {
      return lesson::fmt(std::vector<float>(x.begin() + row * cols, x.begin() + row * cols + hd));
    };
    L.say("    step ", s.pair.step, ", keys ", positions(s.pair.kv), " (", kind_name(s.pair.kind),
          "): partial out ", h0(s.partial_out), ", lse ", fixed(s.partial_lse[l], 4),
          "  →  merged out ", h0(s.merged_out), ", lse ", fixed(s.merged_lse[l], 4));
  }
  {
    const std::vector<float> want(w.out.begin() + (S - 1) * B * cols,
                                  w.out.begin() + (S - 1) * B * cols + hd);
    L.say("    one device: out ", lesson::fmt(want), ", lse ", fixed(w.lse[S - 1], 4));
  }
  // Every device merge against the host's (lse_merge_rows).
  const double merge_err = merge_error(run, sh, cp_chunks(S, cp, world.rank(), layout).size());
  const std::vector<double> merge_errs = L.gather_double(merge_err);
  double worst_merge = 0;
  for (double e : merge_errs) worst_merge = std::max(worst_merge, e);
  L.say(
      "  every device merge (Device::attention_merge) against the host's lse_merge_rows: largest ",
      "relative difference ", sci(worst_merge), " (tolerance 1e-05)");
  L.check_true("device merges equal lse_merge_rows (every rank, every step)", worst_merge <= kTol,
               "relative difference " + sci(worst_merge));

  // The end: each rank's out and lse against one device; then backward's dq, dk, dv.
  auto want = [&](const std::vector<float>& x, int64_t c) {
    return lesson::per_rank(
        cp, [&](int r) { return rows_at(x, cp_positions(S, cp, r, layout), B, c); });
  };
  const int64_t kc = sh.kv_heads * hd;
  const auto want_lse =
      lesson::per_rank(cp, [&](int r) { return lse_at(w.lse, cp_chunks(S, cp, r, layout), sh); });
  const std::vector<int64_t> pos = cp_positions(S, cp, world.rank(), layout);
  const double e_out = rel_error(run.out, rows_at(w.out, pos, B, cols));
  const double e_lse =
      rel_error(run.lse, lse_at(w.lse, cp_chunks(S, cp, world.rank(), layout), sh));
  const std::vector<double> eo = L.gather_double(e_out), el = L.gather_double(e_lse);
  for (int r = 0; r < cp && L.is_root(); ++r)
    L.say("  rank ", r, " (positions ", chunk_list(cp_chunks(S, cp, r, layout)),
          "): out relative error ", sci(eo[r]), ", lse relative error ", sci(el[r]),
          " (tolerance 1e-05): ", eo[r] <= kTol && el[r] <= kTol ? "PASSED" : "FAILED");
  auto T = [&](const std::vector<float>& x) {
    return Tensor::from_host(dev, Shape{static_cast<int64_t>(x.size())}, x);
  };
  L.check_ranks("out, ring (zigzag) vs one device", T(run.out), want(w.out, cols), kTol);
  L.check_ranks("lse, ring (zigzag) vs one device", T(run.lse), want_lse, kTol);
  L.check_ranks("dq, ring backward vs one device", T(run.dq), want(w.dq, cols), kTol);
  L.check_ranks("dk, ring backward vs one device", T(run.dk), want(w.dk, kc), kTol);
  L.check_ranks("dv, ring backward vs one device", T(run.dv), want(w.dv, kc), kTol);
  L.say("  backward (dK, dV travel with K, V and come home on the last hop): dq, dk, dv of every ",
        "rank checked against one device too");
  return run;
}

// 3. Contiguous vs zigzag: the tiles each rank computed, from the observer, against ring_work.
// Returns the tiles per rank of each layout (rank 0), for the picture.
std::vector<std::vector<double>> layouts(lesson::Lesson& L, const Whole& w) {
  Device& dev = L.device();
  const int cp = L.size();
  const int64_t S = w.shape.seq, c = S / (2 * cp), cols = w.shape.heads * w.shape.head_dim;
  std::vector<std::vector<double>> tiles_by_layout;
  for (CpLayout layout : {CpLayout::Contiguous, CpLayout::Zigzag}) {
    const RingRun run = run_ring(dev, L.world(), w, layout, /*backward=*/false);
    double tiles = 0;
    int64_t products = 0;
    for (const PairSeen& s : run.seen) {
      const int64_t ql = s.pair.q.len, kl = s.pair.kv.len;
      if (s.pair.kind == ChunkPair::Full) tiles += double(ql * kl) / (c * c), products += ql * kl;
      if (s.pair.kind == ChunkPair::Diagonal)
        tiles += 0.5 * double(ql * kl) / (c * c), products += ql * (ql + 1) / 2;
    }
    const std::vector<int64_t> full = L.gather_int64(run.full), diag = L.gather_int64(run.diagonal),
                               prods = L.gather_int64(products);
    const std::vector<double> counted = L.gather_double(tiles);
    const std::vector<double> model = ring_work(S, cp, layout);
    L.say("  ", cp_layout_name(layout), " (",
          layout == CpLayout::Contiguous ? "one chunk of " : "two chunks of ",
          layout == CpLayout::Contiguous ? S / cp : c, " positions per rank):");
    lesson::Table t({"rank", "its positions", "full pairs", "diagonal pairs",
                     "tiles counted (c × c, a diagonal ½)", "ring_work", "q·k scores computed"});
    double busiest = 0, sum = 0;
    for (int r = 0; r < cp && L.is_root(); ++r) {
      t.add({std::to_string(r), chunk_list(cp_chunks(S, cp, r, layout)), std::to_string(full[r]),
             std::to_string(diag[r]), fmt_g(counted[r]), fmt_g(model[r]),
             std::to_string(prods[r])});
      busiest = std::max(busiest, counted[r]), sum += counted[r];
    }
    L.say(t.str());
    if (L.is_root())
      L.say("  busiest rank ", fmt_g(busiest), " tiles, mean ", fmt_g(sum / cp), ": the ring ends ",
            "when the busiest rank does, ", fixed(busiest / (sum / cp), 2), "× a balanced split");
    if (L.is_root()) {
      std::vector<float> got(counted.begin(), counted.end()), want(model.begin(), model.end());
      L.check_fact(std::string("tiles per rank, ") + cp_layout_name(layout) + " = ring_work", got,
                   want, 0);
    }
    tiles_by_layout.push_back(counted);
    L.check_ranks(std::string("out, ring (") + cp_layout_name(layout) + ") vs one device",
                  Tensor::from_host(dev, Shape{int64_t(run.out.size())}, run.out),
                  lesson::per_rank(
                      cp,
                      [&](int r) {
      return rows_at(w.out, cp_positions(S, cp, r, layout), w.shape.batch, cols);
                      }),
                  kTol);
  }
  L.say("  (c = S/(2·cp) = ", c,
        "; a tile is c × c scores, a diagonal pair is ½ tile in the model:",
        " the causal\n  triangle holds c(c + 1)/2 of its c² scores, which the last column counts)");
  return tiles_by_layout;
}

// 4. The K, V bytes of each ring step, from the ledger of step 2's forward and backward.
double ring_bytes(lesson::Lesson& L, const Whole& w, const RingRun& run) {
  const int cp = L.size();
  const AttentionShape& sh = w.shape;
  const int64_t kv = sh.seq / cp * sh.batch * sh.kv_heads * sh.head_dim, per_step = 2 * kv * 4;
  L.say("  kv = (S/cp)·B·nkv·hd = ", sh.seq / cp, "·", sh.batch, "·", sh.kv_heads, "·", sh.head_dim,
        " = ", kv, " floats; one step sends K and V: 2·kv·4 B = ", per_step, " B");
  const auto& recs = L.world().ledger().records();
  lesson::Table t({"pass", "CommLedger label", "calls", "sent per call", "sent per rank",
                   "formula (ring_attention.h)"});
  double total = 0;
  struct Row {
    const char* pass;
    const char* label;
    size_t from, to;
    int64_t calls;
  };
  const Row rows[] = {
      {"forward", "ring attention kv", run.ledger_begin, run.ledger_backward, cp - 1},
      {"backward", "ring attention kv", run.ledger_backward, run.ledger_end, cp - 1},
      {"backward", "ring attention dkv", run.ledger_backward, run.ledger_end, cp}};
  for (const Row& row : rows) {
    int64_t calls = 0;
    double bytes = 0, per_call = 0;
    for (size_t i = row.from; i < row.to; ++i)
      if (recs[i].label == row.label)
        ++calls, bytes += recs[i].wire_bytes, per_call = recs[i].wire_bytes;
    t.add({row.pass, row.label, std::to_string(calls), fixed(per_call, 0) + " B",
           fixed(bytes, 0) + " B",
           "2·kv·4·" + std::string(row.calls == cp ? "cp" : "(cp − 1)") + " = " +
               std::to_string(per_step * row.calls) + " B"});
    L.check_value(std::string(row.pass) + " " + row.label + ": calls", double(calls),
                  double(row.calls), 0);
    L.check_value(std::string(row.pass) + " " + row.label + ": bytes = formula", bytes,
                  double(per_step * row.calls), 0);
    total += bytes;
  }
  L.say(t.str());
  L.say("  one attention's forward + backward: ", fixed(total, 0),
        " B per rank, (3·cp − 2)·2·kv·4;",
        " every other op of the layer is local (its tokens are here, its weights whole)");
  return total;
}

std::string ms(double seconds) { return fixed(seconds * 1e3, 2) + " ms"; }

// 5. The α–β prediction of when a block's transfer hides under its compute, against two simulated
// links: one whose transfer takes half a step's compute, one twice. Timed on ranks 0 and 1 (a
// ring of 2, one rank per core of this 2-core machine) while the other ranks sleep.
void overlap(lesson::Lesson& L, int repeats) {
  Device& dev = L.device();
  Communicator& world = L.world();
  const bool timing = world.rank() < 2;
  std::unique_ptr<Communicator> pair = world.split(timing ? 0 : 1, world.rank());
  L.say("  timed on a ring of 2 (ranks 0 and 1; the others sleep): S = 1024, 512 positions per ",
        "rank (zigzag chunks\n  of 256), B = 1, 4 heads of 64: one K, V block is 524288 B; ",
        repeats, " timed forwards per run, step 0 of each (the one step with a transfer)");
  std::vector<lesson::LinkTimes> links;
  double compute = 0;
  bool same = true;
  if (timing) links = lesson::time_links(dev, *pair, repeats, compute, same);
  lesson::quiet_barrier(dev, world);
  if (!timing) links.resize(2);
  L.say("  real transport (shared memory): a step's compute (issue → wait) ", ms(compute),
        " (the slower rank's median); the links below are sized from it");
  lesson::Table t({"link", "rank", "transfer α + bytes/β", "wait ended (median)",
                   "compute (median)", "predicted hidden", "measured hidden", "min", "max"});
  bool never_early = true;
  for (const lesson::LinkTimes& lt : links) {
    const std::vector<double> ready = L.gather_double(lt.ready),
                              earliest = L.gather_double(lt.earliest / lt.transfer),
                              win = L.gather_double(lt.window),
                              pred = L.gather_double(lt.predicted),
                              hid = L.gather_double(lt.hidden), lo = L.gather_double(lt.lo),
                              hi = L.gather_double(lt.hi);
    for (int r = 0; r < 2 && L.is_root(); ++r) {
      t.add({lt.link, std::to_string(r), ms(lt.transfer), ms(ready[r]), ms(win[r]), pct(pred[r]),
             pct(hid[r]), pct(lo[r]), pct(hi[r])});
      never_early = never_early && earliest[r] >= 0.999;  // gathered as float: 24 bits
    }
  }
  const std::vector<int64_t> same_all = L.gather_int64(same ? 1 : 0);
  L.say(t.str());
  L.say("  predicted hidden = min(1, compute / transfer) for each forward's own compute (the",
        " transfer starts\n  with the step; the wait exposes max(0, transfer − compute));",
        " measured hidden = 1 − wait / transfer.\n  Medians over the timed forwards; min and max",
        " show the spread. Timings, not checks: on this shared\n  2-core machine other programs",
        " take the cores, and a rank that starts its step late makes its\n  partner wait beyond",
        " the model (the spread's low end). Checked: no block arrives before α + bytes/β.");
  if (L.is_root()) {
    L.check_true("the ring over each link computes what it does without it (bit for bit)",
                 std::count(same_all.begin(), same_all.end(), 1) == L.size());
    L.check_true("over each link no K, V block arrives before α + bytes/β", never_early);
  }
}

// 6. TP, SP and CP side by side for the lesson's model, at degree cp: what each splits, what
// moves, the bytes of one layer's forward + backward and the activations a block keeps, per rank.
void schemes(lesson::Lesson& L, const GptConfig& cfg, const Whole& w, double cp_bytes) {
  const int t = L.size();
  const AttentionShape& sh = w.shape;
  const int64_t S = sh.seq, B = sh.batch, h = cfg.hidden, N = S * B;
  L.say("  the lesson's model as a GPT block: h = ", h, " (", sh.heads, " heads of ", sh.head_dim,
        "), ffn = ", cfg.inner(), ", S = ", S, ", B = ", B, ", fp32, dropout ",
        lesson::fmt(cfg.dropout), "; degree ", t, " for each scheme");
  const double half = double(t - 1) / t * N * h * 4;  // one all-gather or reduce-scatter of N·h
  const double tp_bytes = 8 * half, sp_bytes = 10 * half;
  GptConfig sp_cfg = cfg;
  sp_cfg.sp = true;
  const bool tp_fits = sh.heads % t == 0;  // TP splits the heads
  const int64_t one = block_activation_bytes(cfg, S, B, 1),
                tp_act = tp_fits ? block_activation_bytes(cfg, S, B, t) : 0,
                sp_act = tp_fits ? block_activation_bytes(sp_cfg, S, B, t) : 0,
                cp_act = block_activation_bytes(cfg, S / t, B, 1);
  const int64_t matrices = 12 * h * h * 4;  // c_attn 3h², c_proj h², fc 4h², proj 4h²
  lesson::Table tab({"scheme", "splits", "what moves in a layer", "sent per rank per layer",
                     "activations kept per rank", "block matrices per rank"});
  tab.add({"one device", "nothing", "nothing", "0 B", std::to_string(one) + " B",
           std::to_string(matrices) + " B"});
  const std::string na =
      "— (" + std::to_string(sh.heads) + " heads over " + std::to_string(t) + ")";
  tab.add({"TP", "heads, ffn (weights)", "4 all-reduces of N·h",
           tp_fits ? fixed(tp_bytes, 0) + " B" : na, tp_fits ? std::to_string(tp_act) + " B" : na,
           std::to_string(matrices / t) + " B"});
  tab.add({"TP + SP", "weights; norms etc. by sequence", "10 halves of N·h (AG, RS)",
           tp_fits ? fixed(sp_bytes, 0) + " B" : na, tp_fits ? std::to_string(sp_act) + " B" : na,
           std::to_string(matrices / t) + " B"});
  tab.add({"CP", "the sequence, everywhere", "K, V around the ring; dK, dV",
           fixed(cp_bytes, 0) + " B", std::to_string(cp_act) + " B",
           std::to_string(matrices) + " B"});
  L.say(tab.str());
  L.say("  TP: 8·(t − 1)/t·N·h·4 B; SP: 10·(t − 1)/t·N·h·4 B (lesson 08c); CP: step 4's ledger,",
        " (3·cp − 2)·2·(S/cp)·B·nkv·hd·4 B.\n  activations: lib/model/memory.h's",
        " block_activation_bytes, for CP at t = 1 with S → S/cp (each rank runs the\n  whole",
        " block on its S/cp positions; the ring's two K, V buffers live only during attention).",
        "\n  CP's weights are whole on every rank: their gradients are summed over the CP group",
        " once per step,\n  like data parallelism's (", fixed(2.0 * (t - 1) / t * matrices, 0),
        " B per rank for these matrices), not per layer and pass.");
  L.check_value("CP bytes per layer = (3cp − 2)·2·(S/cp)·B·nkv·hd·4", cp_bytes,
                double((3 * t - 2) * 2 * (S / t) * B * sh.kv_heads * sh.head_dim * 4), 0);
  L.check_value("CP activations = one device's / cp", double(cp_act), double(one) / t, 0);
  if (tp_fits) {
    L.check_value("TP + SP activations = one device's / t (no S² term is kept)", double(sp_act),
                  double(one) / t, 0);
    L.check_true("TP alone keeps more than TP + SP and CP", tp_act > sp_act && tp_act > cp_act);
  } else {
    L.say("  (TP splits the ", sh.heads, " heads, which do not divide over ", t, " ranks: its rows",
          " are left out at this rank count)");
  }
}

// The owner of c-position chunk u (0 … 2·cp − 1) of the sequence under `layout`.
int owner(int u, int cp, CpLayout layout) {
  if (layout == CpLayout::Contiguous) return u / 2;
  return u < cp ? u : 2 * cp - 1 - u;
}

// 7. The 2·cp chunks by rank in both layouts, and the causal grid of (query chunk, key chunk)
// tiles, each cell coloured by the rank that computes it (the query chunk's owner).
SvgDiagram draw_layouts(int cp, int64_t S, const std::vector<std::vector<double>>& tiles) {
  const int k = 2 * cp;
  const int64_t c = S / k;
  const double cell = std::min(34.0, 260.0 / k), left = 30, grid_w = k * cell + 90;
  SvgDiagram d(std::max(880.0, 2 * grid_w + 120), 80,
               "Context parallelism at cp = " + std::to_string(cp) + ", S = " + std::to_string(S) +
                   ": who holds which chunk, and who computes which tile");
  double y = 50;
  std::vector<std::pair<std::string, std::string>> legend;
  for (int r = 0; r < cp; ++r)
    legend.push_back({lesson::rank_color(r), "rank " + std::to_string(r)});
  legend.push_back({"#ffffff", "skipped tile"});
  y = lesson::draw_swatches(d, left, y, legend) + 6;
  const CpLayout layouts[] = {CpLayout::Contiguous, CpLayout::Zigzag};
  for (CpLayout layout : layouts) {
    d.text(left, y + 16, cp_layout_name(layout), "start", 12);
    std::vector<lesson::BarPart> parts;
    for (int u = 0; u < k; ++u)
      parts.push_back({double(c), lesson::rank_color(owner(u, cp, layout)),
                       std::to_string(u * c) + "–" + std::to_string((u + 1) * c - 1)});
    lesson::draw_bar(d, left + 90, y + 2, 20, 640.0 / S, parts);
    y += 28;
  }
  y += 20;
  for (int g = 0; g < 2; ++g) {
    const double x0 = left + 60 + g * (grid_w + 60), y0 = y + 30;
    d.text(x0, y + 6, std::string(cp_layout_name(layouts[g])) + ": queries (rows) × keys (columns)",
           "start", 12);
    for (int u = 0; u < k; ++u) {
      d.text(x0 - 6, y0 + u * cell + cell * 0.65, std::to_string(u * c), "end", 10, "#555");
      d.text(x0 + u * cell + cell / 2, y0 - 4, std::to_string(u * c), "middle", 10, "#555");
    }
    for (int qi = 0; qi < k; ++qi)
      for (int ki = 0; ki < k; ++ki) {
        const std::string fill =
            ki > qi ? "#ffffff" : lesson::rank_color(owner(qi, cp, layouts[g]));
        d.box(x0 + ki * cell, y0 + qi * cell, cell, cell, fill, ki == qi ? "½" : "");
      }
    std::string per = "tiles per rank:";
    for (int r = 0; r < cp && r < int(tiles[g].size()); ++r)
      per += " " + fmt_g(tiles[g][r]) + (r + 1 < cp ? "," : "");
    d.text(x0, y0 + k * cell + 18, per, "start", 11);
  }
  y += 30 + k * cell + 40;
  lesson::draw_notes(
      d, y,
      {"Each cell is a c × c tile of scores (c = S/(2·cp)), coloured by the rank that owns its "
       "queries and computes it;",
       "white: skipped (every key after every query); ½: a diagonal tile, the causal triangle. "
       "Contiguous: rank r computes 4r + 2",
       "tiles, so rank 0 idles while rank cp − 1 computes; zigzag pairs an early chunk with a late "
       "one: 2·cp each."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_08d_context_parallel",
      "Lesson 08d: context parallelism, ring attention and the log-sum-exp merge", {4, 2, 3},
      [](lesson::Lesson& L) {
    const int cp = L.size();
    int64_t S = L.options().get_int("seq");
    if (S == 0) S = 16 % (2 * cp) == 0 ? 16 : 8 * cp;  // the default: 16, or 24 at cp = 3
    // Zigzag cuts the sequence into 2·cp chunks (contiguous into cp): S must divide by 2·cp.
    TP_CHECK_INPUT(S % (2 * cp) == 0, "--seq ", S, " does not divide by 2·cp = ", 2 * cp,
                   " (the zigzag layout's chunks): choose a multiple of ", 2 * cp, ", e.g. --seq ",
                   4 * cp);
    const int repeats = static_cast<int>(L.options().get_int("repeats"));
    const std::string svg = lesson::svg_path(L);  // drawn in step 7, its path checked now
    Device& dev = L.device();
    // The model of step 6 (lesson_gpt: h = 16, 4 heads of 4, ffn 4h); its attention is steps 1-4's.
    const GptConfig cfg = lesson_gpt(/*layers=*/1, /*hidden=*/16, /*vocab=*/32, S);
    const Whole w = whole_attention(dev, S, /*B=*/1, cfg.heads, cfg.head_dim(), /*seed=*/8);

    // 1. The merge every ring step relies on, on one row.
    L.step("The log-sum-exp merge on one row: two halves of the keys, merged, equal all of them.");
    merge_one_row(L, dev, w);

    // 2. The ring, step by step.
    L.step("Ring attention at cp = " + std::to_string(cp) +
           " (zigzag), step by step: S = " + std::to_string(S) + ", B = 1, 4 heads of 4.");
    const RingRun run = ring_step_by_step(L, w);

    // 3. Who computes how much: both layouts, counted by the observer.
    L.step("Contiguous vs zigzag: the score tiles each rank computes, counted against ring_work.");
    const std::vector<std::vector<double>> tiles = layouts(L, w);

    // 4. What travels: the ledger of step 2's forward and backward.
    L.step("What travels: K, V bytes per ring step from the CP communicator's ledger.");
    const double cp_bytes = ring_bytes(L, w, run);

    // 5. When the transfer hides under the compute.
    L.step("When a block's transfer hides under its compute: α–β prediction vs a simulated link.");
    overlap(L, repeats);

    // 6. TP, SP and CP side by side.
    L.step("TP, SP and CP side by side: what is split, what moves, what each rank keeps.");
    schemes(L, cfg, w, cp_bytes);

    // 7. The picture.
    L.step("Who holds which chunk, who computes which tile: the picture.");
    if (L.is_root()) lesson::write_picture(L, draw_layouts(cp, S, tiles), svg);

    // 8. Summary.
    L.step("Summary.");
    L.say(
        "Context parallelism splits the sequence everywhere. The MLP, the norms and the\n"
        "projections need only their own tokens; attention needs every earlier key, so the K, V\n"
        "blocks travel around the ring, one hop per step, while each rank computes on the block\n"
        "it holds. Each partial output is normalised over its own keys; the log-sum-exp merge "
        "puts\n"
        "them on the common denominator, and after cp steps every rank holds one device's rows.\n"
        "Under the causal mask, zigzag chunks give every rank the same work. A hop hides under\n"
        "the step's compute when compute ≥ α + bytes/β; CP keeps the activations of TP + SP\n"
        "with whole weights, and moves only K and V.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_08d_context_parallel.svg",
                       "the chunks of both layouts and the causal tile grid by rank");
    o.integer("seq", 0, "S, the sequence length; S must divide by 2·cp (0: 16, or 24 at -np 3)")
        .non_negative();
    o.integer("repeats", 15, "timed ring forwards per link in step 5").min(1).max(1000);
  });
}
