// Lesson 10 — the ring all-reduce, by hand: what every all-reduce of lessons 01–09 costs.
//
// What it shows:
//   1. The ring all-reduce built from send_recv alone. Each rank's buffer is cut into t chunks.
//      Reduce-scatter, t − 1 steps: in step s rank r sends chunk (r − s) mod t to rank r + 1,
//      receives chunk (r − s − 1) mod t from rank r − 1 and adds it to its own copy; afterwards
//      rank r holds the finished sum of chunk (r + 1) mod t. All-gather, t − 1 steps: in step s
//      rank r sends the finished chunk (r + 1 − s) mod t on and overwrites chunk (r − s) mod t with
//      the finished one it receives. At t = 3 with 2 floats per chunk and inputs 10·r + i, every
//      step is printed and checked against its closed form, and the result against all_reduce.
//   2. The cost. Each of the 2(t − 1) steps sends one chunk of N/t bytes, so every rank sends
//      2(t − 1)/t · N bytes, the CommLedger's ring model for all_reduce: its records of the hand
//      ring (2(t − 1) send_recv of N/t) add up to its record of one all_reduce of N. In the α–β
//      model the time is 2(t − 1)α + 2(t − 1)/t · N/β. The bytes are the least any all-reduce can
//      send (bandwidth-optimal); the 2(t − 1) latencies grow with t and dominate small messages,
//      which is what the tuning advice of [A4] is about (TP ≤ 8, merge all-reduces, FP16).
//   3. An nccl-tests table, 4 KiB … 16 MiB: time, algbw, busbw = algbw · 2(t − 1)/t and #wrong
//      of the hand ring against the library's all_reduce (MPI_Allreduce underneath on the CPU).
//      Timings vary from run to run; only the values, #wrong and the bytes are checked.
//
// What is new since lesson 09: Communicator::send_recv (one ring step: send to one neighbour while
// receiving from the other) and the ring built from it (lib/parallel/ring_all_reduce.h; exercise 11), the CommLedger's records read one by one with labels of our own
// (CommLedger::Scope; ring_wire_bytes in lib/core/comm_ledger.h), and the α–β model of a
// collective's time.
//
//   4. A picture of the ring's steps (--svg): which chunk each rank sends where, and what each
//      chunk holds after every step.
//   5. [A4]'s two pieces of precision advice on the same t bf16 partial sums: widened to fp32,
//      all-reduced and rounded once, or all-reduced in bf16 (every combine rounds, half the
//      bytes); the error of each against the exact sum, and the bytes from the ledger.
//
// Run:  make lessons && mpirun -np 3 build/bin/lesson_10_ring_allreduce [--step] [--svg P]
//       (also -np 2, 4)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/dtype.h"
#include "core/host.h"
#include "lesson.h"
#include "observe/timer.h"
#include "parallel/ring_all_reduce.h"
#include "pictures.h"

using namespace tp;

namespace {

int mod(int a, int t) { return ((a % t) + t) % t; }

// The closed forms. x_k, rank k's input, holds 10k + i at element i; chunk c is elements
// [cw, (c + 1)w). sum_of(r, d, c): chunk c summed over the d + 1 ranks r, r − 1, …, r − d.
std::vector<float> sum_of(int r, int d, int c, int t, int w) {
  std::vector<float> v(w, 0.0f);
  for (int j = 0; j <= d; ++j)
    for (int i = 0; i < w; ++i) v[i] += static_cast<float>(10 * mod(r - j, t) + c * w + i);
  return v;
}

// Rank r's chunk c after reduce-scatter step s: chunk r − d arrived in step d − 1 and then held
// the sum of d + 1 ranks (r back to r − d); chunks that have not arrived yet, and chunk r itself,
// still hold x_r.
std::vector<float> after_reduce_step(int r, int c, int s, int t, int w) {
  const int d = mod(r - c, t);
  return sum_of(r, d >= 1 && d <= s + 1 ? d : 0, c, t, w);
}

// Rank r's chunk c after all-gather step s: chunk r + 1 − e is finished once e ≤ s + 1 (e = 0:
// it was finished by the reduce-scatter); the others hold what the reduce-scatter left.
std::vector<float> after_gather_step(int r, int c, int s, int t, int w) {
  if (mod(r + 1 - c, t) <= s + 1) return sum_of(r, t - 1, c, t, w);
  return after_reduce_step(r, c, t - 2, t, w);
}

// "[0, 1] [2, 3] [4, 5]*": one rank's buffer by chunks of w, chunk `mark` starred (none if < 0).
std::string chunks(const std::vector<float>& v, int w, int mark) {
  std::string s;
  for (size_t c = 0; c * w < v.size(); ++c)
    s += (c ? " " : "") +
         lesson::fmt(std::vector<float>(v.begin() + c * w, v.begin() + (c + 1) * w)) +
         (static_cast<int>(c) == mark ? "*" : "");
  return s;
}

std::string num(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The α–β model of the ring: 2(t − 1) steps of latency α, and 2(t − 1)/t · N bytes at β per rank.
// Illustrative round numbers (a few µs per message, a 200 Gb/s link), not a measurement.
// The picture of the ring's steps: a row per step (the start, t − 1 of reduce-scatter, t − 1 of
// all-gather), in it each rank's buffer as a column of t chunks labelled with the ranks whose
// inputs it sums, and an arrow per send into the chunk it updated. Worked out from the same
// rule as ring_reduce_scatter and ring_all_gather: in step s rank r receives chunk (r − s − 1)
// (reduce-scatter: added) or (r − s) (all-gather: copied) mod t from rank r − 1.
SvgDiagram draw_ring(int t) {
  const double cw = 64, ch = 22, gap = 70, left = 40, row = t * ch + 44;
  SvgDiagram d(
      std::max(600.0, left + t * (cw + gap) + 40), 60,
      "The ring all-reduce at t = " + std::to_string(t) + ": whose inputs each chunk sums");
  for (int k = 0; k < t; ++k)
    d.text(left + k * (cw + gap) + cw / 2, 50, "rank " + std::to_string(k), "middle", 13);
  // held[k][c]: the set of ranks (a bit each) whose input chunk c of rank k sums.
  std::vector<std::vector<unsigned>> held(t, std::vector<unsigned>(t));
  for (int k = 0; k < t; ++k)
    for (int c = 0; c < t; ++c) held[k][c] = 1u << k;
  const unsigned all = (1u << t) - 1;
  auto label = [&](unsigned set) {
    if (set == all) return std::string("Σ");
    std::string s;
    for (int k = 0; k < t; ++k)
      if (set & (1u << k)) s += (s.empty() ? "" : "+") + std::to_string(k);
    return s;
  };
  double y = 62;
  for (int step = -1; step < 2 * (t - 1); ++step) {
    const bool reduce = step < t - 1;
    const int s = reduce ? step : step - (t - 1);
    std::vector<int> arrived(t, -1);  // the chunk rank k received in this step
    if (step >= 0) {
      const auto before = held;
      for (int k = 0; k < t; ++k) {
        const int c = mod(reduce ? k - s - 1 : k - s, t);
        arrived[k] = c;
        held[k][c] = reduce ? before[k][c] | before[mod(k - 1, t)][c] : before[mod(k - 1, t)][c];
      }
    }
    d.text(left - 30, y + 12,
           step < 0 ? "start: each rank its own input"
                    : (reduce ? "reduce-scatter step " : "all-gather step ") + std::to_string(s) +
                          (reduce ? ": add the chunk that arrives" : ": copy the finished chunk"),
           "start", 12, "#333");
    const double top = y + 22;
    for (int k = 0; k < t; ++k) {
      const double x = left + k * (cw + gap);
      for (int c = 0; c < t; ++c) {
        const unsigned set = held[k][c];
        const std::string fill = set == all ? "#74c476" : (set == (1u << k) ? "white" : "#c7e9c0");
        d.box(x, top + c * ch, cw, ch, fill, "c" + std::to_string(c) + ": " + label(set));
      }
      if (arrived[k] < 0) continue;
      // The send from rank k − 1: from its right edge, or (rank 0) around from the last rank.
      const double ay = top + arrived[k] * ch + ch / 2;
      if (k > 0) {
        d.arrow(x - gap + 6, ay, x - 3, ay, "#c0392b");
      } else {
        d.arrow(x - 34, ay, x - 3, ay, "#c0392b");
        const double last = left + (t - 1) * (cw + gap) + cw;
        d.line(last + 3, ay, last + 34, ay, "#c0392b", true);
        d.text(last + 36, ay + 4, "to 0", "start", 10, "#c0392b");
      }
    }
    y += row;
  }
  lesson::draw_notes(d, y,
                     {"white: the rank's own input; light green: a partial sum; green (Σ): the sum "
                      "over every rank.",
                      "Red: this step's sends, rank r − 1 to rank r (the last rank to rank 0),",
                      "one chunk of N/t bytes each: 2(t − 1) steps in all."});
  return d;
}

// Step 7: [A4]'s two pieces of precision advice on the same t bf16 partial sums, against their
// exact sum: widened to fp32 and all-reduced, then rounded once ("cast to FP32 before the
// all-reduce", §4.1), or all-reduced in bf16 ("communicate in FP16", §5.2), where every combine of
// two partial sums rounds (communicator.h), t − 1 times in all.
void precision_step(lesson::Lesson& L, Communicator& world, Device& dev) {
  const int t = world.size(), r = world.rank();
  const int64_t n = 3072;
  auto partial = [](int k, int64_t i) {  // rank k's partial sum at element i: signs mixed
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(k) * 40503u;
    return static_cast<float>((h >> 8) % 65536) / 32768.0f - 1.0f;
  };
  std::vector<float> mine(n), mine_bf16(n);
  std::vector<double> exact(n, 0.0), exact_bf16(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = partial(r, i);
    mine_bf16[i] = round_to_bf16(mine[i]);
    for (int k = 0; k < t; ++k) {
      exact[i] += partial(k, i);
      exact_bf16[i] += round_to_bf16(partial(k, i));
    }
  }
  auto error = [&](const std::vector<float>& y, const std::vector<double>& e) {  // normwise
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) num += (y[i] - e[i]) * (y[i] - e[i]), den += e[i] * e[i];
    return std::sqrt(num / den);
  };
  auto reduce = [&](Tensor& x) {  // x summed over the ranks; the ledger's bytes per rank
    const size_t mk = L.mark();
    world.all_reduce(x);
    return world.ledger().wire_bytes_since(mk);
  };
  // fp32 partials, fp32 sum: the reference's own rounding only.
  Tensor a = Tensor::from_host(dev, Shape{n}, mine);
  const double bytes_a = reduce(a);
  const std::vector<float> ya = a.to_host();
  // bf16 partials widened to fp32, summed, the sum rounded to bf16 once.
  Tensor b = Tensor::from_host(dev, Shape{n}, mine_bf16);
  const double bytes_b = reduce(b);
  Tensor b16(dev, Shape{n}, Dtype::bf16);
  dev.convert(b, b16);
  const std::vector<float> yb = b16.to_host();
  // bf16 partials, bf16 all-reduce.
  Tensor c16(dev, Shape{n}, Dtype::bf16);
  c16.copy_from_host(mine_bf16);
  const double bytes_c = reduce(c16);
  const std::vector<float> yc = c16.to_host();
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += yc[i] != yb[i];
  const double ea = error(ya, exact), eb = error(yb, exact_bf16), ec = error(yc, exact_bf16);

  lesson::Table table({"partial sums", "all-reduce", "sent per rank (ledger)", "error vs exact sum",
                       "≠ rounded once"});
  table.add({"fp32", "fp32", num("%.0f B", bytes_a), num("%.2e", ea), "-"});
  table.add(
      {"bf16 → fp32", "fp32, rounded once after", num("%.0f B", bytes_b), num("%.2e", eb), "0"});
  table.add({"bf16", "bf16 (each combine rounds)", num("%.0f B", bytes_c), num("%.2e", ec),
             std::to_string(differ) + " of " + std::to_string(n)});
  L.say("  t = ", t, " partial sums of ", n,
        " values each, held in bf16 (as a bf16 GEMM leaves a row-parallel layer's);\n"
        "  the error is normwise, ‖y − exact‖ / ‖exact‖, against the exact (double) sum of the "
        "same bf16 values.");
  L.say(table.str());
  const double u = std::ldexp(1.0, -8);
  L.say("  bf16's unit roundoff is 2^−8 = ", num("%.2e", u), "; rounding once leaves ",
        num("%.2f", eb / u),
        " of it (normwise).\n"
        "  The bf16 all-reduce rounds after every combine of two partial sums (how many an element "
        "passes\n  through is the MPI algorithm's choice): ",
        num("%.2f", eb > 0 ? ec / eb : 0.0), "× that error, ", differ, " of ", n,
        " elements another bf16\n  value, for half the bytes. At t = 2 the two are the same "
        "numbers: one combine, one rounding.");
  L.check_true("the fp32 sum is exact to fp32 (error < 1e-6)", ea < 1e-6, num("%.2e", ea));
  L.check_true("rounded once: error ≤ 2^−8", eb <= u, num("%.2e", eb));
  L.check_true("the bf16 all-reduce sends half the bytes", 2 * bytes_c == bytes_b);
  if (t == 2)
    L.check_true("at t = 2 the bf16 all-reduce is the once-rounded sum", differ == 0,
                 std::to_string(differ) + " differ");
  else
    L.check_true("at t ≥ 3 the bf16 all-reduce's error exceeds the once-rounded sum's", ec > eb,
                 num("%.2e", ec) + " vs " + num("%.2e", eb));
}

constexpr double kAlpha = 5e-6;  // s per step
constexpr double kBeta = 25e9;   // B/s
double alpha_term(int t) { return 2.0 * (t - 1) * kAlpha; }
double beta_term(int t, double bytes) { return 2.0 * (t - 1) / t * bytes / kBeta; }

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_10_ring_allreduce", "Lesson 10: the ring all-reduce, by hand", {3, 2, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int r = L.rank(), t = L.size();
    const int w = 2;  // floats per chunk
    const int n = t * w;
    const std::string svg = lesson::svg_path(L);  // drawn after step 3, its path checked now

    // 1. The numbers, and the single-device sum.
    L.step("The numbers: every rank's buffer is t = " + std::to_string(t) + " chunks of " +
           std::to_string(w) + " floats; rank r holds x_r[i] = 10·r + i.");
    auto input = [&](int k) {
      std::vector<float> v(n);
      for (int i = 0; i < n; ++i) v[i] = static_cast<float>(10 * k + i);
      return v;
    };
    std::vector<float> total(n, 0.0f);  // the single-device sum Σ_k x_k, on the host
    for (int k = 0; k < t; ++k)
      for (int i = 0; i < n; ++i) total[i] += input(k)[i];
    L.say("  the sum, on one device: Σ_r x_r[i] = ", 10 * t * (t - 1) / 2, " + ", t,
          "·i = ", chunks(total, w, -1));
    L.say("  the ring: rank r sends to rank (r + 1) mod ", t,
          " and receives from rank (r − 1) mod ", t, "; chunk c of a buffer is elements [", w,
          "c, ", w, "c + ", w, ")");
    Tensor buf = Tensor::from_host(dev, Shape{t, w}, input(r));
    Tensor scratch(dev, Shape{1, w});
    L.check_ranks("x_r", buf, lesson::per_rank(t, input));

    // The tables of steps 2 and 3: after each ring step every rank gathers its buffer to rank 0,
    // which checks it against the closed form and adds a row.
    std::vector<std::string> header = {"step", "sends"};
    for (int k = 0; k < t; ++k) header.push_back("rank " + std::to_string(k));
    header.push_back("communication");
    lesson::Table reduce_table(header), gather_table(header);
    size_t m = L.mark();
    const size_t ring_start = m;
    auto observe = [&](bool reduce, int s) {
      auto sent = [&](int k) { return mod(reduce ? k - s : k + 1 - s, t); };
      auto arrived = [&](int k) { return mod(reduce ? k - s - 1 : k - s, t); };
      auto expected = [&](int k) {
        std::vector<float> v;
        for (int c = 0; c < t; ++c) {
          const auto part =
              reduce ? after_reduce_step(k, c, s, t, w) : after_gather_step(k, c, s, t, w);
          v.insert(v.end(), part.begin(), part.end());
        }
        return v;
      };
      const std::string name = (reduce ? "reduce-scatter " : "all-gather ") + std::to_string(s);
      const auto got = L.gather(buf);
      L.check_ranks("after " + name, buf, lesson::per_rank(t, expected));
      if (L.is_root()) {
        std::vector<std::string> row = {name, ""};
        for (int k = 0; k < t; ++k) {
          row[1] += (k ? ", " : "") + std::to_string(sent(k));
          row.push_back(chunks(got[k], w, arrived(k)));
        }
        row.push_back(L.comm_since(m));
        (reduce ? reduce_table : gather_table).add(row);
      }
      m = L.mark();
    };

    // 2. Reduce-scatter by hand.
    const std::string steps = std::to_string(t - 1) + (t == 2 ? " step" : " steps");
    L.step("Reduce-scatter, t − 1 = " + steps +
           ": in step s rank r sends chunk (r − s) mod t to r + 1 and adds the one from "
           "r − 1.");
    {
      const auto start = L.gather(buf);
      std::vector<std::string> row = {"start", ""};
      for (const auto& v : start) row.push_back(chunks(v, w, -1));
      row.push_back("none");
      if (L.is_root()) reduce_table.add(row);
    }
    ring_reduce_scatter(world, dev, buf, scratch, [&](int s) { observe(true, s); });
    L.say("  sends: the chunk each rank sends, rank 0 first.");
    L.say("  *: the chunk that arrived, added to the rank's own copy of it.");
    L.say(reduce_table.str());
    L.say(
        "  After step s, chunk (r − d) mod t on rank r holds the sum over ranks r, r − 1, …, r − d "
        "for d ≤ s + 1.\n"
        "  At the end rank r holds the finished sum of chunk (r + 1) mod t: 1/t of the result "
        "each.");

    // 3. All-gather by hand.
    L.step("All-gather, t − 1 = " + steps +
           ": in step s rank r sends the finished chunk (r + 1 − s) mod t on to r + 1.");
    ring_all_gather(world, buf, [&](int s) { observe(false, s); });
    L.say("  sends: the chunk each rank sends, rank 0 first.");
    L.say("  *: the chunk that arrived, finished, copied over the rank's partial sum.");
    L.say(gather_table.str());
    L.check_ranks("hand ring = single-device sum", buf,
                  lesson::per_rank(t, [&](int) { return total; }));
    lesson::write_picture(L, draw_ring(t), svg);

    // 4. The same numbers from the library, and what the ledger recorded for each.
    L.step("The library's all_reduce on the same inputs, and the ledger's records of both.");
    const auto ring_result = L.gather(buf);  // on rank 0
    Tensor lib = Tensor::from_host(dev, Shape{t, w}, input(r));
    m = L.mark();
    world.all_reduce(lib);
    const size_t lib_record = m;
    L.say("  all_reduce: ", chunks(lib.to_host(), w, -1), "    communication: ", L.comm_since(m));
    L.check_ranks("all_reduce = single-device sum", lib,
                  lesson::per_rank(t, [&](int) { return total; }));
    L.check_ranks("all_reduce = hand ring", lib, ring_result);

    const auto& recs = world.ledger().records();
    lesson::Table ledger(
        {"record", "op", "label", "floats", "bytes", "ring model: bytes this rank sends"});
    double ring_bytes = 0;
    int ring_calls = 0;
    for (size_t i = ring_start; i < lib_record; ++i) {
      ledger.add({std::to_string(i - ring_start), recs[i].op, recs[i].label,
                  std::to_string(recs[i].elements), std::to_string(recs[i].bytes),
                  num("%g", recs[i].wire_bytes)});
      ring_bytes += recs[i].wire_bytes;
      ring_calls += recs[i].op == "send_recv";
    }
    ledger.add({"hand ring", "", "", "", "", num("%g", ring_bytes)});
    ledger.add({"library", recs[lib_record].op, recs[lib_record].label,
                std::to_string(recs[lib_record].elements), std::to_string(recs[lib_record].bytes),
                num("%g", recs[lib_record].wire_bytes)});
    const double N = 4.0 * n;
    L.say("  The ledger of rank 0: the hand ring is ", ring_calls, " send_recv of N/t = ", w,
          " floats; the library, one all_reduce of N = ", n, " floats (", N, " B):");
    L.say(ledger.str());
    L.say("  2(t − 1) · N/t = 2(t − 1)/t · N = ", 2 * (t - 1), " · ", N / t,
          " B = ", 2.0 * (t - 1) / t * N, " B: the same bytes, sent in ", 2 * (t - 1),
          " messages by hand, in one call by the library.");
    L.check_fact("send_recv calls of the hand ring = 2(t − 1)", {static_cast<float>(ring_calls)},
                 {static_cast<float>(2 * (t - 1))}, 0);
    L.check_fact(
        "hand ring bytes = all_reduce bytes = 2(t − 1)/t · N",
        {static_cast<float>(ring_bytes), static_cast<float>(recs[lib_record].wire_bytes)},
        {static_cast<float>(2.0 * (t - 1) / t * N), static_cast<float>(2.0 * (t - 1) / t * N)}, 0);

    // 5. The α–β model: what the bytes and the steps cost.
    L.step(
        "The cost: 2(t − 1) steps of latency α and 2(t − 1)/t · N bytes at bandwidth β per "
        "rank.");
    L.say("  T(N) = 2(t − 1)·α + 2(t − 1)/t · N/β. With round illustrative numbers α = ",
          kAlpha * 1e6, " µs per step and\n  β = ", kBeta / 1e9,
          " GB/s (a 200 Gb/s link; not measured here):");
    const double small = 4096, large = 16 << 20;
    lesson::Table cost({"t", "steps 2(t − 1)", "bytes sent / N", "α term (µs)",
                        "4 KiB: β term (µs)", "4 KiB: α share", "16 MiB: β term (µs)",
                        "16 MiB: α share", "α = β term at N"});
    std::vector<float> factors, ledger_factors;
    for (int tt : {2, 3, 4, 8, 16}) {
      const double a = alpha_term(tt), bs = beta_term(tt, small), bl = beta_term(tt, large);
      cost.add({std::to_string(tt), std::to_string(2 * (tt - 1)), num("%.4g", 2.0 * (tt - 1) / tt),
                num("%.0f", a * 1e6), num("%.3g", bs * 1e6), num("%.1f%%", 100 * a / (a + bs)),
                num("%.0f", bl * 1e6), num("%.1f%%", 100 * a / (a + bl)),
                num("%.3g MB", tt * kAlpha * kBeta / 1e6)});
      factors.push_back(static_cast<float>(2.0 * (tt - 1) / tt));
      ledger_factors.push_back(static_cast<float>(
          ring_wire_bytes("all_reduce", tt, static_cast<int64_t>(large)) / large));
    }
    L.say(cost.str());
    L.check_fact("bytes sent / N = the ledger's ring model at t = 2, 3, 4, 8, 16", factors,
                 ledger_factors);
    L.check_fact("t = 8: 14 steps, 1.75 N sent per rank",
                 {static_cast<float>(2 * (8 - 1)), factors[3]}, {14, 1.75f}, 0);
    L.say(
        "  Bandwidth-optimal: no all-reduce can have each rank send less than 2(t − 1)/t · N "
        "(Patarasuk and\n"
        "  Yuan, 2009). A rank that finishes 1/t of the sum must send out the other (t − 1)/t of "
        "its input and\n"
        "  receive the (t − 1)/t of the result it did not finish. The bytes stay below 2N however "
        "large t gets.\n"
        "  Latency-bound when small: the α term does not shrink with N. Below N = t·α·β (the last "
        "column) the\n"
        "  2(t − 1) latencies cost more than the bytes; at 4 KiB they are nearly all of the time.");

    L.say("  [A4]'s numbers and tuning advice, in this model:");
    const int t8 = 8;
    const double ten_small = 10 * (alpha_term(t8) + beta_term(t8, small)),
                 one_merged = alpha_term(t8) + beta_term(t8, 10 * small);
    const double fp32 = alpha_term(t8) + beta_term(t8, large),
                 fp16 = alpha_term(t8) + beta_term(t8, large / 2);
    L.say(
        "  - \"2(n − 1)/n × data, 2(n − 1) rounds\": at n = 8, 1.75 N and 14 steps. What grows "
        "linearly with n is\n"
        "    the step count (30 at n = 16), not the bytes (1.875 N at n = 16). Beyond 8 ranks TP "
        "also leaves the\n"
        "    node and its fast links; hence \"keep TP at 8 or below\".");
    L.say("  - Merge adjacent all-reduces: at t = 8, ten all-reduces of 4 KiB take ",
          num("%.1f", ten_small * 1e6), " µs, one of 40 KiB ", num("%.1f", one_merged * 1e6),
          " µs\n    (one α term instead of ten).");
    L.say("  - Communicate in FP16: half the bytes, the same steps: 16 MiB at t = 8 goes from ",
          num("%.0f", fp32 * 1e6), " to ", num("%.0f", fp16 * 1e6), " µs.");
    L.say(
        "  - Overlap: an async all_reduce hides T(N) behind computation instead of shrinking it.");
    L.say(
        "  - NCCL_ALGO=Tree: a tree reaches all ranks in about log2 t hops instead of t − 1, a "
        "smaller α term\n"
        "    for small messages at large t. NCCL_BUFFSIZE=4194304 (4 MiB) is NCCL's default "
        "buffer size.");
    L.check_fact("ten 4 KiB all-reduces vs one of 40 KiB at t = 8 (µs)",
                 {static_cast<float>(ten_small * 1e6), static_cast<float>(one_merged * 1e6)},
                 {static_cast<float>(10 * (70 + 1.75 * 4096 / 25e3)),
                  static_cast<float>(70 + 1.75 * 40960 / 25e3)},
                 1e-6);
    const double seed_share = 0.40, before = 280, after = 320;
    L.say(
        "  - [A4]'s case: all-reduce was 40% of a step at 280 tokens/s. Removing it entirely "
        "would give at\n    most 280 / 0.6 = ",
        num("%.0f", before / (1 - seed_share)), " tokens/s; its fixes reached ", after, " (+",
        num("%.1f", 100 * (after / before - 1)), "%).");
    L.check_fact("[A4]'s case: bound 467 tokens/s, +14.3%",
                 {static_cast<float>(std::round(before / (1 - seed_share))),
                  static_cast<float>(std::round(1000 * (after / before - 1)) / 10)},
                 {467, 14.3f}, 0);

    // 6. nccl-tests style timings: the hand ring against the library call.
    L.step(
        "Timings, nccl-tests style: the hand ring (send_recv) against the library's all_reduce.");
    const bool mpi = world.name().rfind("mpi", 0) == 0;
    L.say(
        "  library: world.all_reduce on ", world.name(),
        mpi ? " (MpiCommunicator calls MPI_Allreduce; MPI picks its own algorithm)." : ".",
        "\n"
        "  time: median of 5 calls on rank 0, from a barrier; algbw = bytes / time; busbw = algbw "
        "· 2(t − 1)/t.\n"
        "  #wrong: elements, summed over the ranks, that differ from the closed-form sum. "
        "Timings vary run to run.");
    char line[200];
    L.say("#                          hand ring (send_recv)               library all_reduce");
    L.say(
        "#      size     count      time   algbw   busbw  #wrong      time   algbw   busbw  "
        "#wrong");
    L.say("#       (B)  (floats)      (us)  (GB/s)  (GB/s)              (us)  (GB/s)  (GB/s)");
    std::vector<float> wrong_ring, wrong_lib, bytes_ring, bytes_lib, bytes_model;
    double small_ring_s = 0, best_busbw = 0;
    const double bus = 2.0 * (t - 1) / t;
    for (int64_t size = 4 << 10; size <= (int64_t{16} << 20); size *= 4) {
      const int64_t count = size / 4 / t * t, c = count / t;  // t equal chunks
      // x_r[i] = r + (i mod 97): the sum, t(t − 1)/2 + t·(i mod 97), is exact in fp32.
      std::vector<float> host(count);
      for (int64_t i = 0; i < count; ++i) host[i] = static_cast<float>(r + i % 97);
      Tensor x0 = Tensor::from_host(dev, Shape{t, c}, host);
      Tensor big(dev, Shape{t, c}), big_scratch(dev, Shape{1, c});
      auto ring = [&] { ring_all_reduce(world, dev, big, big_scratch); };
      auto library = [&] { world.all_reduce(big); };
      auto timed = [&](const std::function<void()>& f) {
        big.copy_from(x0);
        world.barrier();
        const double t0 = now();
        f();
        dev.synchronize();
        return now() - t0;
      };
      auto wrong = [&] {  // elements differing from the closed form, summed over the ranks
        const std::vector<float> got = big.to_host();
        int bad = 0;
        for (int64_t i = 0; i < count; ++i)
          bad += got[i] != static_cast<float>(t * (t - 1) / 2 + t * (i % 97));
        Tensor b = Tensor::from_host(dev, Shape{1}, {static_cast<float>(bad)});
        float sum = 0;
        for (const auto& v : L.gather(b)) sum += v[0];
        return sum;
      };
      size_t mk = L.mark();
      timed(ring);  // warm-up, and one call's bytes from the ledger
      bytes_ring.push_back(static_cast<float>(world.ledger().wire_bytes_since(mk)));
      mk = L.mark();
      timed(library);
      bytes_lib.push_back(static_cast<float>(world.ledger().wire_bytes_since(mk)));
      bytes_model.push_back(static_cast<float>(bus * 4.0 * count));
      std::vector<double> ring_s, lib_s;
      for (int i = 0; i < 5; ++i) {  // interleaved, so that both see the same machine
        ring_s.push_back(timed(ring));
        lib_s.push_back(timed(library));
      }
      // Correctness of the last call of each (the buffer is reset before every call).
      const float lib_wrong = wrong();
      timed(ring);
      const float ring_wrong = wrong();
      wrong_ring.push_back(ring_wrong);
      wrong_lib.push_back(lib_wrong);
      std::sort(ring_s.begin(), ring_s.end());
      std::sort(lib_s.begin(), lib_s.end());
      const double tr = ring_s[2], tl = lib_s[2], bytes = 4.0 * count;
      std::snprintf(
          line, sizeof line, "%11.0f %9lld %9.1f %7.3f %7.3f %7.0f %9.1f %7.3f %7.3f %7.0f", bytes,
          static_cast<long long>(count), tr * 1e6, bytes / tr / 1e9, bytes / tr / 1e9 * bus,
          ring_wrong, tl * 1e6, bytes / tl / 1e9, bytes / tl / 1e9 * bus, lib_wrong);
      L.say(line);
      if (size == (4 << 10)) small_ring_s = tr;
      best_busbw = std::max(best_busbw, bytes / tr / 1e9 * bus);
    }
    const std::vector<float> zeros(wrong_ring.size(), 0.0f);
    L.check("#wrong of the hand ring, every size", wrong_ring, zeros, 0);
    L.check("#wrong of the library all_reduce, every size", wrong_lib, zeros, 0);
    L.check_fact("ledger bytes of one hand ring = 2(t − 1)/t · N, every size", bytes_ring,
                 bytes_model);
    L.check_fact("ledger bytes of one all_reduce = 2(t − 1)/t · N, every size", bytes_lib,
                 bytes_model);
    // α and β of this machine, read off the hand ring's rows (not checked). busbw =
    // 2(t − 1)/t · N / T(N) = β · (1 − α share): it approaches β as N grows.
    L.say("  From this run's hand ring: α ≈ 4 KiB time / 2(t − 1) = ",
          num("%.1f", small_ring_s / (2 * (t - 1)) * 1e6),
          " µs per step; β ≈ the largest busbw = ", num("%.2f", best_busbw),
          " GB/s\n  (busbw = 2(t − 1)/t · N / T(N) = β · (1 − α share): it approaches β as N "
          "grows).");

    // 7. [A4]'s two pieces of precision advice, measured.
    L.step(
        "[A4]'s precision advice: \"cast to FP32 before the all-reduce\" (§4.1) against "
        "\"communicate in FP16\" (§5.2).");
    precision_step(L, world, dev);
      },
      [](Options& o) { lesson::svg_option(o, "lesson_10_ring.svg", "the ring's steps"); });
}
