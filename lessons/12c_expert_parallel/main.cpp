// Lesson 12c — mixture of experts and expert parallelism: a router sends each token to k of E
// expert MLPs, and expert parallelism (EP) places the experts on different ranks, so the tokens
// travel to their experts and back by all-to-all.
//
// What it shows (tiny numbers: E = 8 experts, k = 2, h = 4, 4 tokens per rank; every number
// computed):
//   1. MoE on one rank: each token's router probabilities, its top-k experts and their gates
//      (model/moe.h, checked against the lesson's own softmax and top-k), and tokens per expert.
//   2. EP at ep = np: the counts each rank sends per expert and what each expert's owner learns,
//      the rows each rank sends to and receives from every rank, the reorder of what arrived from
//      source-major to expert-major (parallel/expert_parallel.h: exercise 13), and the combine;
//      the layer's output, input gradient, every expert's weight gradient and the router's
//      gradient against one device running every expert on every token.
//   3. Tokens per expert over 50 training steps of a small GPT with 8 experts at ep = np, with and
//      without the balancing loss (model/train.h's train_step).
//   4. The all-to-all bytes per rank from the ledger ("moe dispatch", "moe combine", forward and
//      backward) against the rows that left each rank and the balanced formula.
//   5. The same MLP split by TP and by EP: weights per rank, bytes per layer, which collective,
//      when each pays.
//   6. The picture (--svg): the rows each rank sent to each rank, and step 3's histogram.
//
// What is new since lesson 12b: model/moe.h (MoeLayer), parallel/expert_parallel.h
// (ExpertPlacement, ExpertDispatch), Communicator::all_to_all_v and exchange_counts, and
// ProcessGrid's ep and edp axes.
//
// Run:  make lessons && mpirun -np 4 build/bin/lesson_12c_expert_parallel [--step] [--svg P]
//       (also -np 2; --stop-rank R stops rank R before step 2's all-to-alls: the watchdog names it)
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/format.h"
#include "core/host.h"
#include "lesson.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/moe.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/expert_parallel.h"
#include "parallel/process_grid.h"
#include "pictures.h"
#include "sleeping_waits.h"

using namespace tp;

namespace {

constexpr int kExperts = 8, kTopK = 2;
constexpr int64_t kHidden = 4, kFfn = 8;
constexpr double kTol = 1e-5;  // EP runs the same GEMMs on the same rows, summed in another order
constexpr uint64_t kSeed = 43;
constexpr int64_t kBatch = 8;  // step 3's sequences per step, at any ep (8 divides by 2 and 4)

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
std::vector<int64_t> ints(const std::vector<float>& v, size_t from, size_t n) {
  std::vector<int64_t> r;
  for (size_t i = from; i < from + n; ++i) r.push_back(static_cast<int64_t>(std::lround(v[i])));
  return r;
}
Tensor floats(Device& dev, const std::vector<float>& v) {
  return Tensor::from_host(dev, Shape{static_cast<int64_t>(v.size())}, v);
}
template <class T>
void append(std::vector<float>& out, const std::vector<T>& v) {
  for (const T& x : v) out.push_back(static_cast<float>(x));
}

MoeConfig lesson_moe() {
  MoeConfig c;
  c.hidden = kHidden, c.ffn = kFfn, c.experts = kExperts, c.top_k = kTopK;
  return c;  // GeLU experts, α = 0.01, β = 1e-3, dropless: model/moe.h's defaults
}

// A layer with every expert (ep null) or this rank's E/ep, initialised from (seed, name): the
// same numbers for every expert wherever it lives.
std::unique_ptr<MoeLayer> make_layer(Device& dev, Communicator* ep) {
  auto layer = std::make_unique<MoeLayer>(dev, "moe", lesson_moe());
  if (ep) layer->set_expert_group(ep);
  ParamList params;
  layer->collect_params(params, 0.5f, 0.5f);
  init_params(dev, params, kSeed);
  return layer;
}

Tensor random_rows(Device& dev, int64_t rows, const char* name) {
  Tensor t(dev, Shape{rows, kHidden});
  dev.fill_random(t, RngKey::from(kSeed, name), GlobalIndex::rows(kHidden, 0),
                  Distribution::normal(0, 1));
  return t;
}

// One expert's gradients, flattened: c_fc weight and bias, c_proj weight and bias.
void append_grads(std::vector<float>& out, const MoeExpert& ex) {
  for (const Tensor* t : {&ex.dw_fc, &ex.db_fc, &ex.dw_proj, &ex.db_proj})
    append(out, t->to_host());
}

// The lesson's own routing of one token (double softmax, top-k, ties to the lowest id, gates
// renormalised over the k), to check the layer's.
struct Routed {
  std::vector<double> p;
  std::vector<int> top;
  std::vector<double> gate;
};
Routed route_token(const std::vector<float>& x, const std::vector<float>& wr, int64_t t) {
  Routed r;
  std::vector<double> z(kExperts, 0.0);
  for (int e = 0; e < kExperts; ++e)
    for (int64_t c = 0; c < kHidden; ++c) z[e] += double(x[t * kHidden + c]) * wr[c * kExperts + e];
  const double mx = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (double v : z) sum += std::exp(v - mx);
  for (double v : z) r.p.push_back(std::exp(v - mx) / sum);
  std::vector<int> order(kExperts);
  for (int e = 0; e < kExperts; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return r.p[a] > r.p[b]; });
  double chosen = 0;
  for (int j = 0; j < kTopK; ++j) r.top.push_back(order[j]), chosen += r.p[order[j]];
  for (int j = 0; j < kTopK; ++j) r.gate.push_back(r.p[order[j]] / chosen);
  return r;
}

// 1. The router on one rank: probabilities, top-k, gates, tokens per expert.
void one_rank(lesson::Lesson& L, MoeLayer& one, const Tensor& x, int64_t n) {
  const std::vector<float> xs = x.to_host(), wr = one.router_weight.to_host();
  L.say("  E = ", kExperts, " experts (GeLU MLPs ", kHidden, " → ", kFfn, " → ", kHidden,
        "), k = ", kTopK, ", gates renormalised over the k (Mixtral); ", x.rows(), " tokens (", n,
        " per rank), rank 0's shown");
  lesson::Table t({"token", "router probabilities p (experts 0–7)", "top-2", "gates"});
  bool same = true;
  for (int64_t tok = 0; tok < x.rows(); ++tok) {
    const Routed r = route_token(xs, wr, tok);
    for (int j = 0; j < kTopK; ++j)
      same = same && one.choices()[tok * kTopK + j] == r.top[j] &&
             std::fabs(one.gates()[tok * kTopK + j] - r.gate[j]) < 1e-6;
    if (tok >= n) continue;
    std::string p;
    for (double v : r.p) p += (p.empty() ? "" : " ") + fixed(v, 3);
    t.add({std::to_string(tok), p, std::to_string(r.top[0]) + ", " + std::to_string(r.top[1]),
           fixed(r.gate[0], 3) + ", " + fixed(r.gate[1], 3)});
  }
  L.say(t.str());
  L.check_true("the layer's top-2 and gates = the lesson's softmax, top-k and renormalisation",
               same);
  std::vector<int64_t> per(kExperts, 0);
  for (int e : one.choices()) ++per[e];
  L.say("  tokens per expert (all ", x.rows(), " tokens, k = ", kTopK,
        " choices each): ", list(per), "; mean ", fixed(double(x.rows()) * kTopK / kExperts, 1));
  L.say("  balancing loss α·E·Σ f_e·P_e = ", fixed(one.losses().aux, 6),
        " (α = ", fmt_g(one.config().aux_loss_coef), "; it is α when every f_e = P_e = 1/E)");
}

// What step 2 leaves for steps 4 and 6: every rank's plan, this rank's part of the ledger.
struct EpRun {
  std::vector<std::vector<float>>
      plan;  // per rank: per_expert (E), send_rows, recv_counts, recv_rows
  size_t ledger_begin = 0, ledger_end = 0;
  int64_t received = 0, sent = 0, kept = 0;  // this rank's rows; kept: the block to itself
};

// The expert-major order the lesson expects (not the library's walk): the source-major rows,
// stably sorted by their local expert.
std::vector<int64_t> sorted_by_expert(const std::vector<int64_t>& recv_counts, int ep, int el) {
  std::vector<std::pair<int, int64_t>> rows;  // (local expert, source-major row)
  int64_t r = 0;
  for (int s = 0; s < ep; ++s)
    for (int i = 0; i < el; ++i)
      for (int64_t c = 0; c < recv_counts[s * el + i]; ++c) rows.push_back({i, r++});
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> out;
  for (const auto& p : rows) out.push_back(p.second);
  return out;
}

// The counts and rows exchanged, as a table (rank 0) from every rank's plan.
void print_plan(lesson::Lesson& L, const std::vector<std::vector<float>>& plans, int ep, int el) {
  lesson::Table t({"rank", "its rows per expert 0…7", "rows to rank 0…",
                   "it learns: from rank s, rows per expert it holds", "rows from rank 0…"});
  for (int r = 0; r < ep && L.is_root(); ++r) {
    const std::vector<float>& p = plans[r];
    std::string learns;
    for (int s = 0; s < ep; ++s)
      learns += (s ? " " : "") + list(ints(p, kExperts + ep + s * el, el));
    t.add({std::to_string(r), list(ints(p, 0, kExperts)), list(ints(p, kExperts, ep)), learns,
           list(ints(p, kExperts + ep + ep * el, ep))});
  }
  L.say(t.str());
}

// 3) of step 2: the library's expert-major order (exercise 13) printed for rank 0 and checked on
// every rank against the lesson's stable sort.
void reorder(lesson::Lesson& L, const ExpertDispatch& d) {
  Device& dev = L.device();
  Tensor rows = floats(dev, {float(d.received())});
  {
    CommLedger::Scope scope(L.world().ledger(), "lesson check");
    L.world().all_reduce(rows, ReduceOp::Max);  // the orders are compared padded to the longest
  }
  const int64_t most = std::lround(rows.to_host()[0]);
  const int ep = d.placement().ep, el = d.placement().local();
  const std::vector<int64_t> order = expert_major_order(d.recv_counts(), ep, el),
                             want = sorted_by_expert(d.recv_counts(), ep, el);
  std::vector<float> got_pad(static_cast<size_t>(most), -1.0f), want_pad = got_pad;
  for (size_t j = 0; j < order.size() && j < got_pad.size(); ++j) got_pad[j] = float(order[j]);
  for (size_t j = 0; j < want.size(); ++j) want_pad[j] = float(want[j]);
  std::vector<int64_t> seen(want.size(), 0);
  bool once = order.size() == want.size();
  for (int64_t v : order) once = once && v >= 0 && v < int64_t(seen.size()) && seen[v]++ == 0;
  const std::vector<int64_t> once_all = L.gather_int64(once ? 1 : 0);
  std::string blocks;
  int64_t row = 0;
  for (int s = 0; s < ep; ++s)
    for (int i = 0; i < el; ++i) {
      const int64_t c = d.recv_counts()[s * el + i];
      if (c > 0)
        blocks += (blocks.empty() ? "" : ", ") + std::string("rank ") + std::to_string(s) + "→e" +
                  std::to_string(d.placement().first() + i) + ": " + std::to_string(row) +
                  (c > 1 ? "–" + std::to_string(row + c - 1) : "");
      row += c;
    }
  L.say("  3) rank 0 received ", d.received(), " rows, source-major (from rank 0 its rows for",
        " expert 0, then 1; from rank 1 …):\n     ", blocks);
  std::string ranges;
  for (int i = 0; i < el; ++i) {
    const int64_t b = d.expert_begin()[i], c = d.expert_begin()[i + 1];
    ranges += (i ? ", " : "") + std::string("expert ") + std::to_string(d.placement().first() + i) +
              (c == b       ? std::string(": none")
               : c == b + 1 ? ": row " + std::to_string(b)
                            : ": rows " + std::to_string(b) + "–" + std::to_string(c - 1));
  }
  L.say("     expert-major, each row's source-major index: ", list(order), "\n     (", ranges, ")");
  L.check_fact_ranks("expert-major order (exercise 13) = the rows stably sorted by expert",
                     floats(dev, got_pad), L.gather(floats(dev, want_pad)), 0);
  if (L.is_root())
    L.check_true("expert-major order: every row received once, on every rank",
                 std::count(once_all.begin(), once_all.end(), 1) == ep);
}

// The layer at ep = np on this rank's n tokens (x, dy: every rank's rows), with the balancing
// statistics summed over the ranks as one device counts them.
// stop_rank ≥ 0: that rank stops itself (SIGSTOP) once the statistics are summed, just before
// the layer's all-to-alls (the Try it on the page: the watchdog names it).
std::unique_ptr<MoeLayer> ep_layer(lesson::Lesson& L, int stop_rank) {
  Device& dev = L.device();
  Communicator& world = L.world();
  std::unique_ptr<MoeLayer> layer = make_layer(dev, &world);
  layer->set_stats_reducer([&dev, &world, stop_rank](RouterStats& s) {
    std::vector<float> v;
    append(v, s.choices), append(v, s.prob_sum);
    v.push_back(float(s.tokens)), v.push_back(float(s.lse_sq_sum));
    Tensor t = floats(dev, v);
    CommLedger::Scope scope(world.ledger(), "moe stats");
    world.all_reduce(t);
    const std::vector<float> g = t.to_host();
    for (int e = 0; e < kExperts; ++e) s.choices[e] = g[e], s.prob_sum[e] = g[kExperts + e];
    s.tokens = g[2 * kExperts], s.lse_sq_sum = g[2 * kExperts + 1];
    if (world.rank() == stop_rank) ::raise(SIGSTOP);
  });
  return layer;
}

// 4) of step 2: every rank's y, dx and experts' gradients, and the router's summed gradient,
// against one device.
void against_one(lesson::Lesson& L, MoeLayer& layer, MoeLayer& one, const Tensor& y,
                 const Tensor& dx, const std::vector<float>& y_one,
                 const std::vector<float>& dx_one, int64_t n) {
  Device& dev = L.device();
  const int ep = L.size(), el = kExperts / ep;
  std::vector<float> grads;
  for (const MoeExpert& ex : layer.experts) append_grads(grads, ex);
  const auto ys = L.gather(y), dxs = L.gather(dx), gs = L.gather(floats(dev, grads));
  Tensor router = Tensor::from_host(dev, Shape{kHidden, kExperts}, layer.router_dweight.to_host());
  {
    CommLedger::Scope scope(L.world().ledger(), "lesson check");
    L.world().all_reduce(router);  // each rank's tokens' share of the router's gradient
  }
  if (!L.is_root()) return;
  lesson::Table t({"rank", "its tokens", "its experts", "y error", "dx error",
                   "its experts' weight gradients error"});
  const int64_t rows = n * kHidden;
  for (int r = 0; r < ep; ++r) {
    const std::vector<float> yw(y_one.begin() + r * rows, y_one.begin() + (r + 1) * rows),
        dxw(dx_one.begin() + r * rows, dx_one.begin() + (r + 1) * rows);
    std::vector<float> gw;
    for (int i = 0; i < el; ++i) append_grads(gw, one.experts[static_cast<size_t>(r * el + i)]);
    t.add({std::to_string(r), std::to_string(r * n) + "–" + std::to_string((r + 1) * n - 1),
           std::to_string(r * el) + "–" + std::to_string(r * el + el - 1),
           sci(rel_error(ys[r], yw)), sci(rel_error(dxs[r], dxw)), sci(rel_error(gs[r], gw))});
    L.check("the layer's output y (this rank's tokens)", ys[r], yw, kTol);
    L.check("the layer's input gradient dx (this rank's tokens)", dxs[r], dxw, kTol);
    L.check("every expert's weight gradient (on its rank)", gs[r], gw, kTol);
  }
  L.say(t.str());
  const std::vector<float> rw = router.to_host(), rone = one.router_dweight.to_host();
  L.say("  the router's weight gradient, summed over the ranks: relative error ",
        sci(rel_error(rw, rone)), "; every error above against one device running all ", kExperts,
        " experts on all ", n * ep, " tokens (tolerance ", sci(kTol, 0), ")");
  L.check("the router's weight gradient, summed over the ranks", rw, rone, kTol);
}

// 2. The layer at ep = np: counts, rows, the reorder, the combine, then the checks.
EpRun expert_parallel(lesson::Lesson& L, MoeLayer& one, const Tensor& x, const Tensor& dy,
                      const std::vector<float>& y_one, const std::vector<float>& dx_one, int64_t n,
                      int stop_rank) {
  Device& dev = L.device();
  Communicator& world = L.world();
  const int ep = L.size(), r = L.rank(), el = kExperts / ep;
  std::unique_ptr<MoeLayer> layer = ep_layer(L, stop_rank);
  const std::string held = el == 1   ? "expert r"
                           : el == 2 ? "experts 2r and 2r + 1"
                                     : "experts " + std::to_string(el) + "r … " +
                                           std::to_string(el) + "r + " + std::to_string(el - 1);
  L.say("  ep = ", ep, ": rank r holds ", held, " whole; the router and everything else are",
        " replicas; each rank routes its own ", n, " tokens");
  if (stop_rank >= 0)
    L.say("  rank ", stop_rank, " will stop itself (SIGSTOP) after the router, before the",
          " all-to-alls; the others go on into them and wait there for it");
  EpRun run;
  run.ledger_begin = world.ledger().size();
  const Tensor y = layer->forward(x.view(r * n, (r + 1) * n));
  const Tensor dx = layer->backward(dy.view(r * n, (r + 1) * n));
  run.ledger_end = world.ledger().size();
  const ExpertDispatch& d = layer->dispatch();
  run.received = d.received();
  run.kept = d.send_rows()[static_cast<size_t>(r)];
  for (int64_t v : d.send_rows()) run.sent += v;
  std::vector<int64_t> per(kExperts, 0);  // dropless: every choice is a row
  for (int e : layer->choices()) ++per[e];
  std::vector<float> mine;
  append(mine, per), append(mine, d.send_rows()), append(mine, d.recv_counts());
  append(mine, d.recv_rows());
  run.plan = L.gather(floats(dev, mine));
  L.say("  1) counts first (\"moe counts\": E numbers each way), so that each owner knows what",
        " arrives;\n  2) then the rows (\"moe dispatch\": all_to_all_v of (rows, h), rank p's rows",
        " to rank p):");
  print_plan(L, run.plan, ep, el);
  reorder(L, d);
  L.say("  4) each expert runs its GEMMs on its contiguous rows; \"moe combine\" is the reverse",
        " all_to_all_v,\n     and each token's rank adds g·output of its k rows into y.",
        " Backward: dY dispatched, dX combined, the same plan.");
  against_one(L, *layer, one, y, dx, y_one, dx_one, n);
  return run;
}

// 3. Tokens per expert while a small GPT with 8 experts in every block trains at ep = np: the
// counts of block 0's router (over the global batch) at each step.
std::vector<std::vector<double>> train_counts(lesson::Lesson& L, double aux, int64_t steps) {
  const double lr = L.options().get_real("lr");
  Device& dev = L.device();
  const int ep = L.size();
  auto quiet = std::make_unique<lesson::SleepingWaits>(L.world().split(0, L.rank()));
  ProcessGrid grid(*quiet, GridAxes{ep, 1, 1, ep});
  GptConfig cfg = lesson_gpt(/*layers=*/2, /*hidden=*/16, /*vocab=*/32, /*seq=*/16);
  cfg.experts = kExperts, cfg.top_k = kTopK, cfg.aux_loss_coef = aux;
  Gpt model(dev, grid.tp(), cfg);
  model.set_expert_parallel(grid.ep());
  model.init(kSeed);
  AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  AdamW opt(dev, model.params(), hp);
  MarkovSource data(cfg.vocab, kSeed);
  std::vector<std::vector<double>> counts;
  for (int64_t i = 0; i < steps; ++i) {
    train_step(grid, dev, model, opt, data.batch(i, kBatch, cfg.seq), kSeed, i, hp.lr, 1.0f);
    counts.push_back(model.moe_layers().front()->stats().choices);
  }
  return counts;
}

// max |c_e − mean| / mean over the experts.
double spread(const std::vector<double>& c) {
  double mean = 0, worst = 0;
  for (double v : c) mean += v / c.size();
  for (double v : c) worst = std::max(worst, std::fabs(v - mean) / mean);
  return worst;
}

// 3. Both runs' counts, summed over the last 10 steps; returns {without, with} for the picture.
std::pair<std::vector<double>, std::vector<double>> balancing(lesson::Lesson& L, int64_t steps) {
  const int64_t last = std::min<int64_t>(10, steps);
  const int ep = L.size();
  L.say("  a GPT of 2 blocks (h = 16, 4 heads, seq 16, vocabulary 32), each MLP 8 experts, k = 2,",
        " at ep = ", ep, ";\n  ", steps, " AdamW steps (lr ", fmt_g(L.options().get_real("lr")),
        ") of ", kBatch,
        " sequences on the same Markov data; block 0's router choices (global batch: ",
        kBatch * 16 * kTopK, " a step)");
  std::vector<double> sums[2];
  lesson::Table t({"balancing loss",
                   "choices per expert 0…7, last " + std::to_string(last) + " steps",
                   "spread at step 0", "spread, last " + std::to_string(last) + " steps"});
  const double alpha = L.options().get_real("aux-loss-coef"), coef[] = {0.0, alpha};
  for (int run = 0; run < 2; ++run) {
    const std::vector<std::vector<double>> counts = train_counts(L, coef[run], steps);
    sums[run].assign(kExperts, 0.0);
    for (int64_t i = steps - last; i < steps; ++i)
      for (int e = 0; e < kExperts; ++e) sums[run][e] += counts[i][e];
    std::vector<int64_t> c;
    for (double v : sums[run]) c.push_back(std::llround(v));
    t.add({run ? "α = " + fmt_g(alpha) : "none (α = 0)", list(c), pct(spread(counts[0])),
           pct(spread(sums[run]))});
  }
  L.say(t.str());
  const double with = spread(sums[1]), without = spread(sums[0]);
  L.say("  spread = max |count − mean| / mean: ", pct(without), " without the loss, ", pct(with),
        " with it (the goal: within ±25 %)");
  L.check_true("the balancing loss narrows the spread", with < without,
               pct(with) + " with it, " + pct(without) + " without");
  // The goal is the lesson's own setting's; with other flags it is reported, not checked.
  if (!L.options().given("aux-loss-coef") && !L.options().given("lr") && steps == 50)
    L.check_true("with the balancing loss every expert is within ±25 % of the mean", with <= 0.25,
                 "spread " + pct(with));
  else
    L.say("  (the ±25 % goal is checked at the defaults: α = 0.1, lr 1e-2, 50 steps; here it is ",
          with <= 0.25 ? "met)" : "not met)");
  return {sums[0], sums[1]};
}

// 4. The all-to-all bytes of step 2 from the ledger, per rank and label, against the rows that
// left the rank (exact) and the balanced formula n·k·h·4·(ep − 1)/ep. Returns the mean bytes per
// rank of the layer's four all-to-alls.
double ledger_bytes(lesson::Lesson& L, const EpRun& run, int64_t n) {
  const int ep = L.size();
  const std::vector<CommRecord>& recs = L.world().ledger().records();
  const char* labels[] = {"moe dispatch", "moe combine", "moe dispatch (backward)",
                          "moe combine (backward)", "moe counts"};
  std::vector<float> mine;  // per label: calls, bytes sent; then rows out, rows back
  for (const char* label : labels) {
    double calls = 0, bytes = 0;
    for (size_t i = run.ledger_begin; i < run.ledger_end; ++i)
      if (recs[i].label == label) calls += 1, bytes += recs[i].wire_bytes;
    mine.push_back(float(calls)), mine.push_back(float(bytes));
  }
  mine.push_back(float(run.sent - run.kept)), mine.push_back(float(run.received - run.kept));
  const std::vector<std::vector<float>> all = L.gather(floats(L.device(), mine));
  const double row = kHidden * 4.0, balanced = n * kTopK * row * (ep - 1) / ep;
  L.say("  one row is h·4 = ", fixed(row, 0), " B; a rank's n·k = ", n * kTopK,
        " rows, of which (ep − 1)/ep leave it when the routing is balanced: n·k·h·4·(ep − 1)/ep = ",
        fixed(balanced, 0), " B per all-to-all");
  lesson::Table t({"rank", "rows out / back", "moe dispatch", "moe combine",
                   "moe dispatch (backward)", "moe combine (backward)", "exact: rows × h·4 B",
                   "balanced formula"});
  double total = 0;
  for (int r = 0; r < ep && L.is_root(); ++r) {
    const std::vector<float>& a = all[r];
    const double out = a[10] * row, back = a[11] * row;
    const double want[] = {out, back, out, back};
    std::vector<std::string> cells = {std::to_string(r), fixed(a[10], 0) + " / " + fixed(a[11], 0)};
    for (int l = 0; l < 4; ++l) {
      cells.push_back(fixed(a[2 * l + 1], 0) + " B");
      L.check_value(std::string(labels[l]) + ": one call per pass", a[2 * l], 1, 0);
      L.check_value(std::string(labels[l]) + ": ledger bytes = rows that left the rank × h·4",
                    a[2 * l + 1], want[l], 0);
      total += a[2 * l + 1];
    }
    cells.push_back(fixed(out, 0) + " / " + fixed(back, 0) + " B");
    cells.push_back(fixed(balanced, 0) + " B each");
    t.add(cells);
  }
  L.say(t.str());
  const double mean = total / ep;
  if (L.is_root())
    L.say("  per rank, the layer's four all-to-alls: ", fixed(mean, 1), " B on average; the",
          " balanced formula 4·n·k·h·4·(ep − 1)/ep = ", fixed(4 * balanced, 0),
          " B.\n  \"moe counts\": ", fixed(all[0][8], 0), " call, ", fixed(all[0][9], 0),
          " B per rank (the E counts; backward reuses the forward's plan)");
  return mean;
}

// 5. The same expert MLPs split by TP (each expert's ffn over t ranks, every rank on the group's N
// tokens) and by EP (E/ep whole experts per rank, each rank on its own N/ep tokens).
void tp_or_ep(lesson::Lesson& L, int64_t n, double ep_measured) {
  const int t = L.size();
  const int64_t N = n * t, h = kHidden, f = kFfn, E = kExperts, k = kTopK;
  const int64_t expert = 2 * h * f + f + h;                             // one expert's floats
  const double tp_w = double(E) * (2 * h * f + f) / t + double(E) * h,  // c_proj's bias whole
      ep_w = double(E) / t * expert;
  const double tp_bytes = 2 * 2.0 * (t - 1) / t * N * h * 4,
               ep_bytes = 4.0 * n * k * h * 4 * (t - 1) / t;
  L.say("  ", N, " tokens on ", t, " ranks; the experts: E = ", E, " of ", expert, " floats each (",
        E * expert * 4, " B); k = ", k);
  lesson::Table tab({"split", "each rank holds", "expert weights per rank",
                     "expert activations per rank", "collective", "sent per rank per layer",
                     "when it pays"});
  tab.add({"TP, t = " + std::to_string(t), "1/t of every expert's ffn", fixed(tp_w * 4, 0) + " B",
           fixed(double(N) * k * f / t * 4, 0) + " B", "all-reduce of N·h, forward and backward",
           fixed(tp_bytes, 0) + " B",
           "every layer, whatever the routing: 2 all-reduces of the group's N tokens"});
  tab.add({"EP, ep = " + std::to_string(t), std::to_string(E / t) + " whole experts",
           fixed(ep_w * 4, 0) + " B", "≈ " + fixed(double(n) * k * f * 4, 0) + " B",
           "all-to-all-v of its n·k rows, 4 per layer",
           fixed(ep_bytes, 0) + " B (measured " + fixed(ep_measured, 1) + ")",
           "every layer, by the routing: the busiest rank sets the pace"});
  L.say(tab.str());
  L.say("  bytes: TP 4·(t − 1)/t·N·h·4, EP 4·(N/ep)·k·h·4·(ep − 1)/ep: EP / TP = k/ep = ",
        fixed(ep_bytes / tp_bytes, 2), " at equal t = ep. TP also splits the dense layers;\n  EP",
        " leaves them replicated and their gradients to the data-parallel all-reduce, and sums",
        " each expert's\n  gradient over its EDP group (the ranks holding the same expert: none",
        " here, dp = ep).");
  L.check_value("EP / TP bytes per layer = k/ep", ep_bytes / tp_bytes, double(k) / t, 1e-12);
  L.check_true("TP and EP hold the experts' weights in about the same bytes per rank",
               std::fabs(tp_w - ep_w) <= double(E) * h);
}

// 6. The picture: the rows each rank sent to each rank in step 2, and step 3's histogram.
SvgDiagram draw(int ep, const EpRun& run, const std::vector<double>& with,
                const std::vector<double>& without, double alpha) {
  SvgDiagram d(820, 80,
               "Expert parallelism at ep = " + std::to_string(ep) +
                   ": who sends rows to whom, and tokens per expert");
  const double cell = 44, x0 = 150, y0 = 80;
  d.text(30, 60, "step 2: rows sent (row: from rank, column: to rank; grey: kept, a local copy)",
         "start", 12);
  for (int s = 0; s < ep; ++s) {
    d.text(x0 - 8, y0 + s * cell + cell * 0.6, "from " + std::to_string(s), "end", 11);
    d.text(x0 + s * cell + cell / 2, y0 - 6, "to " + std::to_string(s), "middle", 11);
    for (int p = 0; p < ep; ++p) {
      const int64_t rows = std::lround(run.plan[s][kExperts + p]);
      d.box(x0 + p * cell, y0 + s * cell, cell, cell,
            s == p ? lesson::kWholeColor : lesson::rank_color(p), std::to_string(rows));
    }
  }
  double y = y0 + ep * cell + 50;
  d.text(30, y, "step 3: block 0's router choices per expert, summed over the last 10 steps",
         "start", 12);
  double mean = 0, top = 0;
  for (size_t e = 0; e < with.size(); ++e)
    mean += with[e] / with.size(), top = std::max({top, with[e], without[e]});
  const double hmax = 160, base = y + 20 + hmax, bw = 26, gap = 30, left = 80;
  auto bar_y = [&](double v) { return base - v / top * hmax; };
  for (size_t e = 0; e < with.size(); ++e) {
    const double x = left + e * (2 * bw + gap);
    d.box(x, bar_y(without[e]), bw, base - bar_y(without[e]), "#bbbbbb");
    d.box(x + bw, bar_y(with[e]), bw, base - bar_y(with[e]), lesson::rank_color(0));
    d.text(x + bw, base + 16, "expert " + std::to_string(e), "middle", 11);
  }
  const double right = left + with.size() * (2 * bw + gap);
  d.line(left - 10, bar_y(mean), right, bar_y(mean), "#222", true);
  d.line(left - 10, bar_y(1.25 * mean), right, bar_y(1.25 * mean), "#c33", true);
  d.line(left - 10, bar_y(0.75 * mean), right, bar_y(0.75 * mean), "#c33", true);
  d.text(right + 4, bar_y(mean) + 4, "mean", "start", 10);
  d.text(right + 4, bar_y(1.25 * mean) + 4, "+25 %", "start", 10, "#c33");
  d.text(right + 4, bar_y(0.75 * mean) + 4, "−25 %", "start", 10, "#c33");
  y = lesson::draw_swatches(d, left, base + 30,
                            {{"#bbbbbb", "without the balancing loss"},
                             {lesson::rank_color(0), "with it (α = " + fmt_g(alpha) + ")"}});
  lesson::draw_notes(d, y + 10,
                     {"Each token's router picks k = 2 of 8 experts; each rank holds 8/ep of them, "
                      "so a token's rows go to the ranks where its experts are.",
                      "The balancing loss α·E·Σ f_e·P_e pushes the router towards equal shares."});
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_12c_expert_parallel",
      "Lesson 12c: mixture of experts and expert parallelism, the all-to-all", {4, 2},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    const int64_t n = L.options().get_int("tokens"), N = n * L.size();
    const int stop_rank = static_cast<int>(L.options().get_int("stop-rank"));
    const std::string svg = lesson::svg_path(L);  // drawn in step 6, its path checked now
    TP_CHECK_INPUT(stop_rank < L.size(), "--stop-rank ", stop_rank, " is not a rank of the ",
                   L.size(), ": choose 0 … ", L.size() - 1, " (or -1: none)");
    // Every rank makes the same N tokens and output gradients, and one device's layer on them.
    const Tensor x = random_rows(dev, N, "x"), dy = random_rows(dev, N, "dy");
    std::unique_ptr<MoeLayer> one = make_layer(dev, nullptr);
    const std::vector<float> y_one = one->forward(x).to_host(),
                             dx_one = one->backward(dy).to_host();

    L.step("MoE on one rank: the router's probabilities, each token's top-2 experts and gates.");
    one_rank(L, *one, x, n);

    L.step("Expert parallelism at ep = " + std::to_string(L.size()) +
           ": counts, rows, the reorder, the combine, against one device.");
    const EpRun run = expert_parallel(L, *one, x, dy, y_one, dx_one, n, stop_rank);

    const int64_t steps = L.options().get_int("steps");
    L.step("Tokens per expert while a small GPT trains, with and without the balancing loss.");
    const auto hist = balancing(L, steps);

    L.step("All-to-all bytes per rank from the ledger, against the rows that left each rank.");
    const double measured = ledger_bytes(L, run, n);

    L.step("The same experts split by TP and by EP: weights, bytes, collective, when each pays.");
    tp_or_ep(L, n, measured);

    L.step("Who sends rows to whom, and tokens per expert: the picture.");
    if (L.is_root())
      lesson::write_picture(
          L, draw(L.size(), run, hist.second, hist.first, L.options().get_real("aux-loss-coef")),
          svg);

    L.step("Summary.");
    L.say(
        "A mixture of experts replaces one MLP by E of them and a router that sends each token\n"
        "to k. Expert parallelism places the experts on different ranks and keeps everything\n"
        "else a replica: each rank routes its own tokens, tells the owners how many rows come\n"
        "(counts), sends the rows (all-to-all-v), puts what arrived expert-major, runs its\n"
        "experts and sends the outputs back the same way. Per layer that is four all-to-alls of\n"
        "about n·k·h·(ep − 1)/ep values per rank, k/ep of TP's all-reduces for the same\n"
        "experts, paid by the routing: the busiest rank sets the pace, and the balancing loss\n"
        "keeps the experts' shares even.");
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_12c_expert_parallel.svg",
                       "the rows each rank sends to each rank, and tokens per expert");
    o.integer("tokens", 4, "tokens per rank").min(1).max(64);
    o.integer("steps", 50, "training steps of step 3").min(1).max(1000);
    o.real("lr", 1e-2, "step 3's learning rate").positive();
    o.real("aux-loss-coef", 0.1,
           "step 3's α, the balancing loss's coefficient (Switch's 0.01: see the page)")
        .positive();
    o.integer("stop-rank", -1, "a rank that stops itself (SIGSTOP) before step 2's all-to-alls")
        .min(-1);
  });
}
