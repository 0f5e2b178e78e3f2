// test_moe.cpp — the mixture-of-experts layer on one rank (model/moe.h) against a naive host
// reference in double: routing (top-k, ties to the lowest id, renormalised gates), the experts, the
// capacity's drops, the balancing loss and the z-loss; backward against finite differences of the
// reference (serial).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "expect_bad_input.h"
#include "model/moe.h"
#include "observe/memory_ledger.h"
#include "test_util.h"

using tp::testing::device;
using tp::testing::random_vector;
using tp::testing::rel_error;

namespace tp {
namespace {

using Vec = std::vector<double>;

// ---- the reference ------------------------------------------------------------------------------

struct RefExpert {
  Vec w_fc, b_fc, w_gate, b_gate, w_proj, b_proj;  // (h, f), (f), (h, f), (f), (f, h), (h)
};

struct RefParams {
  Vec router;  // (h, E)
  std::vector<RefExpert> experts;
};

struct RefOut {
  Vec y;  // (N, h)
  double aux = 0, z = 0;
  std::vector<int> expert;  // (N·k)
  Vec gate;                 // (N·k), 0 when dropped
  int64_t dropped = 0;
};

double gelu(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

// expert(x) for one token: x (h) → (h).
Vec expert_ref(const MoeConfig& cfg, const RefExpert& ex, const double* x) {
  const int64_t h = cfg.hidden, f = cfg.ffn;
  Vec act(static_cast<size_t>(f));
  for (int64_t j = 0; j < f; ++j) {
    double u = ex.b_fc[j], g = cfg.act == Activation::SwiGlu ? ex.b_gate[j] : 0.0;
    for (int64_t i = 0; i < h; ++i) {
      u += x[i] * ex.w_fc[i * f + j];
      if (cfg.act == Activation::SwiGlu) g += x[i] * ex.w_gate[i * f + j];
    }
    act[j] = cfg.act == Activation::SwiGlu ? g / (1.0 + std::exp(-g)) * u : gelu(u);
  }
  Vec y(ex.b_proj);
  for (int64_t c = 0; c < h; ++c)
    for (int64_t j = 0; j < f; ++j) y[c] += act[j] * ex.w_proj[j * h + c];
  return y;
}

RefOut moe_ref(const MoeConfig& cfg, const RefParams& p, const Vec& x) {
  const int64_t h = cfg.hidden, n = static_cast<int64_t>(x.size()) / h;
  const int ne = cfg.experts, k = cfg.top_k;
  RefOut r;
  r.y.assign(x.size(), 0.0);
  Vec count(ne, 0.0), prob_sum(ne, 0.0);
  double lse_sq = 0;
  std::vector<int64_t> used(ne, 0);
  const int64_t cap = cfg.capacity_factor > 0
                          ? static_cast<int64_t>(std::ceil(cfg.capacity_factor * n * k / ne))
                          : n * k;
  for (int64_t t = 0; t < n; ++t) {
    Vec z(ne, 0.0);
    for (int e = 0; e < ne; ++e)
      for (int64_t i = 0; i < h; ++i) z[e] += x[t * h + i] * p.router[i * ne + e];
    const double mx = *std::max_element(z.begin(), z.end());
    double s = 0;
    for (double v : z) s += std::exp(v - mx);
    const double lse = mx + std::log(s);
    lse_sq += lse * lse;
    Vec prob(ne);
    for (int e = 0; e < ne; ++e) prob_sum[e] += prob[e] = std::exp(z[e] - lse);
    std::vector<int> order(ne);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += prob[order[j]];
    for (int j = 0; j < k; ++j) {
      const int e = order[j];
      count[e] += 1;
      double g = (cfg.renormalise && k > 1) ? prob[e] / chosen : prob[e];
      if (used[e]++ >= cap) {
        g = 0;
        ++r.dropped;
      }
      r.expert.push_back(e);
      r.gate.push_back(g);
      if (g == 0) continue;
      const Vec o = expert_ref(cfg, p.experts[e], &x[t * h]);
      for (int64_t c = 0; c < h; ++c) r.y[t * h + c] += g * o[c];
    }
  }
  double dot = 0;
  for (int e = 0; e < ne; ++e) dot += count[e] / (n * k) * prob_sum[e] / n;
  r.aux = cfg.aux_loss_coef * ne * dot;
  r.z = cfg.z_loss_coef * lse_sq / n;
  return r;
}

// The scalar the gradients are of: Σ y ⊙ R + aux + z.
double ref_loss(const MoeConfig& cfg, const RefParams& p, const Vec& x, const Vec& rw) {
  const RefOut o = moe_ref(cfg, p, x);
  double l = o.aux + o.z;
  for (size_t i = 0; i < rw.size(); ++i) l += o.y[i] * rw[i];
  return l;
}

// ---- setup --------------------------------------------------------------------------------------

Vec rand_vec(const std::string& name, int64_t n, double scale, uint64_t seed) {
  const std::vector<float> v = random_vector(name, n, seed);
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = scale * static_cast<double>(v[i]);
  return out;
}

std::vector<float> to_f(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }
Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

MoeConfig small_cfg(int k, Activation act) {
  MoeConfig cfg;
  cfg.hidden = 8;
  cfg.ffn = 12;
  cfg.experts = 4;
  cfg.top_k = k;
  cfg.act = act;
  return cfg;
}

// Random parameters, rounded to f32 (the layer holds them in f32; the reference reads the same).
RefParams random_params(const MoeConfig& cfg, uint64_t seed) {
  const int64_t h = cfg.hidden, f = cfg.ffn;
  auto r = [&](const std::string& n, int64_t len, double s) {
    return to_d(to_f(rand_vec(n, len, s, seed)));
  };
  RefParams p;
  p.router = r("router", h * cfg.experts, 1.0);
  for (int e = 0; e < cfg.experts; ++e) {
    const std::string s = std::to_string(e);
    p.experts.push_back(RefExpert{r("wfc" + s, h * f, 0.5), r("bfc" + s, f, 0.2),
                                  r("wg" + s, h * f, 0.5), r("bg" + s, f, 0.2),
                                  r("wp" + s, f * h, 0.5), r("bp" + s, h, 0.2)});
  }
  return p;
}

void load(MoeLayer& layer, const RefParams& p) {
  layer.router_weight.copy_from_host(to_f(p.router));
  for (size_t e = 0; e < p.experts.size(); ++e) {
    MoeExpert& ex = layer.experts[e];
    const RefExpert& r = p.experts[e];
    ex.w_fc.copy_from_host(to_f(r.w_fc));
    ex.b_fc.copy_from_host(to_f(r.b_fc));
    ex.w_proj.copy_from_host(to_f(r.w_proj));
    ex.b_proj.copy_from_host(to_f(r.b_proj));
    if (layer.config().act != Activation::SwiGlu) continue;
    ex.w_gate.copy_from_host(to_f(r.w_gate));
    ex.b_gate.copy_from_host(to_f(r.b_gate));
  }
}

std::string name_of(const MoeConfig& cfg) {
  return "k=" + std::to_string(cfg.top_k) + (cfg.act == Activation::SwiGlu ? " swiglu" : " gelu") +
         (cfg.capacity_factor > 0 ? " c=" + std::to_string(cfg.capacity_factor) : "");
}

constexpr int64_t kTokens = 10;

// ---- forward ------------------------------------------------------------------------------------

void check_forward(const MoeConfig& cfg, uint64_t seed) {
  SCOPED_TRACE(name_of(cfg));
  const RefParams p = random_params(cfg, seed);
  const Vec x = to_d(to_f(rand_vec("x", kTokens * cfg.hidden, 1.0, seed)));
  const RefOut want = moe_ref(cfg, p, x);
  MoeLayer layer(device(), "moe", cfg);
  load(layer, p);
  const Tensor y = layer.forward(Tensor::from_host(device(), Shape{kTokens, cfg.hidden}, to_f(x)));
  EXPECT_LT(rel_error(y.to_host(), to_f(want.y)), 1e-5);
  EXPECT_EQ(layer.choices(), want.expert);
  EXPECT_LT(rel_error(layer.gates(), to_f(want.gate)), 1e-6);
  EXPECT_NEAR(layer.losses().aux, want.aux, 1e-6 * want.aux);
  EXPECT_NEAR(layer.losses().z_loss, want.z, 1e-6 * want.z);
  EXPECT_EQ(layer.dropped(), want.dropped);
  // f_e and P_e for logging: fractions of N·k choices, mean probabilities; each sums to 1
  const std::vector<double> f = layer.choice_fraction(), pm = layer.mean_prob();
  EXPECT_NEAR(std::accumulate(f.begin(), f.end(), 0.0), 1.0, 1e-12);
  EXPECT_NEAR(std::accumulate(pm.begin(), pm.end(), 0.0), 1.0, 1e-6);
  for (int e = 0; e < cfg.experts; ++e)
    EXPECT_DOUBLE_EQ(f[e] * kTokens * cfg.top_k,
                     std::count(want.expert.begin(), want.expert.end(), e));
}

TEST(Moe, ForwardMatchesTheReference) {
  for (Activation act : {Activation::Gelu, Activation::SwiGlu})
    for (int k : {1, 2}) check_forward(small_cfg(k, act), 7);
}

// ---- backward -----------------------------------------------------------------------------------

// ∂L/∂v[i] by central differences of the reference in double, v a parameter of `p` or x.
template <typename Get>
Vec numeric_grad(const MoeConfig& cfg, RefParams p, Vec x, const Vec& rw, Get get) {
  Vec& v = get(p, x);
  Vec g(v.size());
  const double eps = 1e-5;
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + eps;
    const double up = ref_loss(cfg, p, x, rw);
    v[i] = keep - eps;
    const double down = ref_loss(cfg, p, x, rw);
    v[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

// The layer's dx and parameter gradients against finite differences of Σ y ⊙ R + aux + z (with
// R = 0 only the two losses). The routing does not change under the small steps (f_e constant).
void check_backward(const MoeConfig& cfg, uint64_t seed, double r_scale) {
  SCOPED_TRACE(name_of(cfg) + " R×" + std::to_string(r_scale));
  const RefParams p = random_params(cfg, seed);
  const Vec x = to_d(to_f(rand_vec("x", kTokens * cfg.hidden, 1.0, seed)));
  const Vec rw = to_d(to_f(rand_vec("r", kTokens * cfg.hidden, r_scale, seed + 1)));
  MoeLayer layer(device(), "moe", cfg);
  load(layer, p);
  const Shape shape{kTokens, cfg.hidden};
  layer.forward(Tensor::from_host(device(), shape, to_f(x)));
  const Tensor dx = layer.backward(Tensor::from_host(device(), shape, to_f(rw)));
  // the expert with the most kept tokens: its gradients are checked
  std::vector<int> kept(cfg.experts, 0);
  for (size_t a = 0; a < layer.choices().size(); ++a)
    if (layer.gates()[a] != 0.0f) ++kept[layer.choices()[a]];
  const int e = static_cast<int>(std::max_element(kept.begin(), kept.end()) - kept.begin());
  const double tol = 2e-3;
  auto fd = [&](auto get) { return to_f(numeric_grad(cfg, p, x, rw, get)); };
  EXPECT_LT(rel_error(dx.to_host(), fd([](RefParams&, Vec& xx) -> Vec& { return xx; })), tol)
      << "dx";
  EXPECT_LT(rel_error(layer.router_dweight.to_host(),
                      fd([](RefParams& q, Vec&) -> Vec& { return q.router; })),
            tol)
      << "router";
  if (r_scale == 0) return;  // the experts get nothing from the losses
  const MoeExpert& ex = layer.experts[e];
  EXPECT_LT(rel_error(ex.dw_fc.to_host(),
                      fd([e](RefParams& q, Vec&) -> Vec& { return q.experts[e].w_fc; })),
            tol)
      << "w_fc of expert " << e;
  EXPECT_LT(rel_error(ex.db_fc.to_host(),
                      fd([e](RefParams& q, Vec&) -> Vec& { return q.experts[e].b_fc; })),
            tol);
  EXPECT_LT(rel_error(ex.dw_proj.to_host(),
                      fd([e](RefParams& q, Vec&) -> Vec& { return q.experts[e].w_proj; })),
            tol);
  EXPECT_LT(rel_error(ex.db_proj.to_host(),
                      fd([e](RefParams& q, Vec&) -> Vec& { return q.experts[e].b_proj; })),
            tol);
  if (cfg.act != Activation::SwiGlu) return;
  EXPECT_LT(rel_error(ex.dw_gate.to_host(),
                      fd([e](RefParams& q, Vec&) -> Vec& { return q.experts[e].w_gate; })),
            tol);
  EXPECT_LT(rel_error(ex.db_gate.to_host(),
                      fd([e](RefParams& q, Vec&) -> Vec& { return q.experts[e].b_gate; })),
            tol);
}

TEST(Moe, BackwardMatchesFiniteDifferences) {
  for (Activation act : {Activation::Gelu, Activation::SwiGlu})
    for (int k : {1, 2}) check_backward(small_cfg(k, act), 11, 1.0);
}

// The aux and z-loss gradients alone (dy = 0), with the coefficients raised so that they are not
// lost beside float rounding; their values are checked in every forward test.
TEST(Moe, BalancingAndZLossGradientsMatchFiniteDifferences) {
  for (int k : {1, 2}) {
    MoeConfig cfg = small_cfg(k, Activation::Gelu);
    cfg.aux_loss_coef = 0.5;
    cfg.z_loss_coef = 0.1;
    check_backward(cfg, 13, 0.0);
  }
}

// ---- capacity -----------------------------------------------------------------------------------

// c = 0.5 with N = 10, k = 2, E = 4: capacity ceil(0.5 · 20 / 4) = 3 per expert, so at least 8
// of the 20 choices are dropped, the later tokens' first.
TEST(Moe, ACapacityFactorDropsTheLaterTokensAndCountsThem) {
  for (Activation act : {Activation::Gelu, Activation::SwiGlu}) {
    MoeConfig cfg = small_cfg(2, act);
    cfg.capacity_factor = 0.5;
    check_forward(cfg, 17);
    check_backward(cfg, 17, 1.0);
    const RefParams p = random_params(cfg, 17);
    const Vec x = to_d(to_f(rand_vec("x", kTokens * cfg.hidden, 1.0, 17)));
    MoeLayer layer(device(), "moe", cfg);
    load(layer, p);
    const std::vector<float> y =
        layer.forward(Tensor::from_host(device(), Shape{kTokens, cfg.hidden}, to_f(x))).to_host();
    EXPECT_EQ(layer.capacity(), 3);
    EXPECT_GE(layer.dropped(), 8);
    // a token with both choices dropped gets exactly zero; one with none dropped does not
    int all_dropped = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      const bool none = layer.gates()[t * 2] == 0.0f && layer.gates()[t * 2 + 1] == 0.0f;
      for (int64_t c = 0; c < cfg.hidden && none; ++c) {
        EXPECT_EQ(y[t * cfg.hidden + c], 0.0f) << "token " << t;
      }
      all_dropped += none;
    }
    EXPECT_GT(all_dropped, 0) << "the test wants a token that lost both experts";
    // first come first served: token 0's choices are never dropped
    EXPECT_NE(layer.gates()[0], 0.0f);
    EXPECT_NE(layer.gates()[1], 0.0f);
  }
}

// ---- routing rules ------------------------------------------------------------------------------

// Integer inputs and weights make the logits exact, so ties are exact.
TEST(Moe, TiesGoToTheLowestExpertId) {
  struct Case {
    std::vector<float> logits;
    int k;
    std::vector<int> want;
  };
  const std::vector<Case> cases = {{{0, 2, 1, 2}, 1, {1}},    {{0, 2, 1, 2}, 2, {1, 3}},
                                   {{2, 2, 2, 0}, 2, {0, 1}}, {{0, 0, 0, 0}, 2, {0, 1}},
                                   {{0, 0, 0, 0}, 1, {0}},    {{1, 3, 3, 3}, 2, {1, 2}}};
  for (const Case& c : cases) {
    MoeConfig cfg = small_cfg(c.k, Activation::Gelu);
    MoeLayer layer(device(), "moe", cfg);
    std::vector<float> w(static_cast<size_t>(cfg.hidden * cfg.experts), 0.0f);
    std::copy(c.logits.begin(), c.logits.end(), w.begin());  // row 0 of W_r: x = e_0 reads it
    layer.router_weight.copy_from_host(w);
    std::vector<float> x(static_cast<size_t>(cfg.hidden), 0.0f);
    x[0] = 1.0f;
    layer.forward(Tensor::from_host(device(), Shape{1, cfg.hidden}, x));
    EXPECT_EQ(layer.choices(), c.want) << "logits " << c.logits[0] << " " << c.logits[1] << " "
                                       << c.logits[2] << " " << c.logits[3] << ", k=" << c.k;
  }
}

// With every expert the same MLP, renormalised gates (summing to 1) give y = expert(x) exactly
// whatever the router says; raw gates would give (p_1 + p_2) · expert(x). k = 1 keeps p_1.
TEST(Moe, GatesAreRenormalisedOverTheTopKButNotAtKEqualsOne) {
  for (int k : {1, 2}) {
    const MoeConfig cfg = small_cfg(k, Activation::Gelu);
    RefParams p = random_params(cfg, 19);
    for (RefExpert& ex : p.experts) ex = p.experts[0];
    const Vec x = to_d(to_f(rand_vec("x", kTokens * cfg.hidden, 1.0, 19)));
    MoeLayer layer(device(), "moe", cfg);
    load(layer, p);
    const std::vector<float> y =
        layer.forward(Tensor::from_host(device(), Shape{kTokens, cfg.hidden}, to_f(x))).to_host();
    for (int64_t t = 0; t < kTokens; ++t) {
      const Vec o = expert_ref(cfg, p.experts[0], &x[t * cfg.hidden]);
      double gate_sum = 0;
      for (int j = 0; j < k; ++j) gate_sum += layer.gates()[t * k + j];
      if (k == 2) {
        EXPECT_NEAR(gate_sum, 1.0, 1e-6) << "token " << t;
      } else {
        EXPECT_LT(gate_sum, 0.99) << "token " << t << ": k = 1 keeps the raw p";
      }
      std::vector<float> want(o.size());
      for (size_t c = 0; c < o.size(); ++c) want[c] = static_cast<float>(gate_sum * o[c]);
      const std::vector<float> got(y.begin() + t * cfg.hidden, y.begin() + (t + 1) * cfg.hidden);
      EXPECT_LT(rel_error(got, want), 1e-5) << "token " << t << " k=" << k;
      if (k == 2) {
        EXPECT_LT(rel_error(got, to_f(o)), 1e-5) << "token " << t << ": the gates sum to 1";
      }
    }
  }
}

// ---- the statistics' reducer --------------------------------------------------------------------

// A reducer that sums this rank's statistics over two ranks holding the same tokens (what an
// all-reduce over dp = 2 gives there): the losses stay those of one rank, and backward adds half
// of their gradient (this rank's tokens' share of the global batch's).
TEST(Moe, AStatsReducerReplacesTheSumsAndScalesTheGradientShare) {
  MoeConfig cfg = small_cfg(2, Activation::Gelu);
  cfg.aux_loss_coef = 0.5;
  cfg.z_loss_coef = 0.1;
  const RefParams p = random_params(cfg, 23);
  const std::vector<float> x = to_f(rand_vec("x", kTokens * cfg.hidden, 1.0, 23));
  const Shape shape{kTokens, cfg.hidden};
  const Tensor zero = Tensor::zeros(device(), shape);
  MoeLayer solo(device(), "moe", cfg), twice(device(), "moe", cfg);
  load(solo, p);
  load(twice, p);
  twice.set_stats_reducer([](RouterStats& s) {
    for (double& c : s.choices) c *= 2;
    for (double& v : s.prob_sum) v *= 2;
    s.tokens *= 2;
    s.lse_sq_sum *= 2;
  });
  solo.forward(Tensor::from_host(device(), shape, x));
  twice.forward(Tensor::from_host(device(), shape, x));
  EXPECT_NEAR(twice.losses().aux, solo.losses().aux, 1e-12);
  EXPECT_NEAR(twice.losses().z_loss, solo.losses().z_loss, 1e-12);
  EXPECT_DOUBLE_EQ(twice.stats().tokens, 2.0 * kTokens);
  solo.backward(zero, 0.5f);  // loss_scale halves the losses' gradient
  twice.backward(zero);
  EXPECT_LT(rel_error(twice.router_dweight.to_host(), solo.router_dweight.to_host()), 1e-6);
  // and a reducer that changes the counts changes aux as the formula says
  MoeLayer skew(device(), "moe", cfg);
  load(skew, p);
  skew.set_stats_reducer([](RouterStats& s) {
    std::fill(s.choices.begin(), s.choices.end(), 0.0);
    s.choices[1] = s.tokens * 2;  // every choice to expert 1
  });
  skew.forward(Tensor::from_host(device(), shape, x));
  EXPECT_NEAR(skew.losses().aux, cfg.aux_loss_coef * cfg.experts * skew.mean_prob()[1], 1e-12);
}

// ---- parameters, memory, bad input --------------------------------------------------------------

TEST(Moe, CollectParamsNamesEveryTensorAndObserveRecordsWhatForwardKeeps) {
  const MoeConfig cfg = small_cfg(2, Activation::SwiGlu);
  MoeLayer layer(device(), "h.0.moe", cfg);
  ParamList params;
  layer.collect_params(params, 0.02f, 0.01f);
  ASSERT_EQ(params.size(), 1u + 6u * cfg.experts);
  EXPECT_EQ(params[0].name, "h.0.moe.router.weight");
  EXPECT_EQ(params[0].shape, (Shape{cfg.hidden, cfg.experts}));
  EXPECT_EQ(params[1].name, "h.0.moe.experts.0.c_fc.weight");
  EXPECT_EQ(params[3].name, "h.0.moe.experts.0.c_gate.weight");
  EXPECT_EQ(params.back().name, "h.0.moe.experts.3.c_proj.bias");
  EXPECT_FLOAT_EQ(params[5].init_std, 0.01f);  // c_proj.weight
  for (const Param& q : params) EXPECT_EQ(q.split, Split::Replicated) << q.name;
  init_params(device(), params, 5);
  EXPECT_GT(device().sum_squares(layer.router_weight), 0.0);
  EXPECT_EQ(device().sum_squares(layer.experts[2].b_fc), 0.0);

  MemoryLedger ledger;
  layer.observe(&ledger, 0);
  const Tensor x = Tensor::from_host(device(), Shape{kTokens, cfg.hidden},
                                     random_vector("x", kTokens * cfg.hidden));
  const std::vector<float> y = layer.forward(x).to_host();
  // x (N, h); per slot: its token and gate, c_fc and c_gate outputs and the activation (M, ffn),
  // the experts' output (M, h); dropless M = N·k
  const int64_t m = kTokens * 2, f32 = 4;
  EXPECT_EQ(ledger.layer_bytes(0),
            f32 * (kTokens * cfg.hidden + 2 * m + 3 * m * cfg.ffn + m * cfg.hidden));
  // a ledger that keeps nothing (full recomputation): the same output, nothing recorded
  MemoryLedger none;
  none.set_keeping(false);
  layer.observe(&none, 0);
  EXPECT_EQ(layer.forward(x).to_host(), y);
  EXPECT_EQ(none.layer_bytes(0), 0);
}

TEST(Moe, BadConfigsAndInputsAreRefusedWithOneLine) {
  using testing::expect_bad_input;
  MoeConfig k_big = small_cfg(5, Activation::Gelu);
  expect_bad_input([&] { MoeLayer l(device(), "moe", k_big); }, "choose k in 1..4",
                   "k = 5 > E = 4");
  MoeConfig no_experts = small_cfg(1, Activation::Gelu);
  no_experts.experts = 0;
  expect_bad_input([&] { MoeLayer l(device(), "moe", no_experts); }, "at least 1 expert", "E = 0");
  MoeConfig cap = small_cfg(2, Activation::Gelu);
  cap.capacity_factor = -1;
  expect_bad_input([&] { MoeLayer l(device(), "moe", cap); }, "--capacity-factor -1 must be > 0",
                   "c = -1");
  MoeLayer layer(device(), "moe", small_cfg(2, Activation::Gelu));
  expect_bad_input(
      [&] {
    layer.forward(Tensor::zeros(device(), Shape{3, 5}));
      },
      "should be f32 (N, 8)", "x of 5 columns at h = 8");
}

}  // namespace
}  // namespace tp
