// test_moe_model_mpi.cpp — the mixture of experts in the model (--experts, model/moe.h): train_step
// on the grids this np allows against one device on the same global batch — the loss and the
// gradient norm of 3 steps, every gradient of the first step, every weight after 3 steps — with the
// balancing statistics summed over the ranks holding other tokens (SP's TP group, CP, DP), so that
// every grid computes one device's balancing loss; top-1 and top-2, GeLU and SwiGLU, every other
// block, full recomputation, a capacity factor under plain TP (each rank sees every token). And the
// other way: without the statistics' reduction a dp 2 run's loss is not one device's. Expert
// parallelism (--ep, parallel/expert_parallel.h): ep 2, ep 4, ep 2 inside dp 4 (EDP groups of 2),
// tp 2 × ep 2 with and without SP, each rank comparing the experts it holds. Micro-batches (the
// statistics each global micro-batch's, on both sides) and pipeline stages: pp 2 (AFAB and 1F1B,
// several micro-batches in flight: backward routes its tokens again), ep 2 × pp 2, tp 2 × pp 2
// with SP. Runs under mpirun -np 1 … 4.
//
// Tolerances (relative): 1e-5 for the loss and norm of 3 steps and the first step's gradients (the
// sums of the gradients and of the router statistics run in another order); 1e-4 for the weights
// after 3 steps (that rounding fed back through AdamW, whose steps on the rarely chosen experts'
// near-zero gradients magnify it; the TP tests' curve bound); the key biases, zero up to rounding
// noise, left out (test_context_parallel_mpi.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "model_test_helpers.h"
#include "parallel/process_grid.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

GptConfig moe_gpt() {
  GptConfig c = gpt_shape(2, 24, 12, 0, 48, 36, 24);  // splits at t = 1 … 4, V unpadded
  c.init_std = 0.1f;
  c.experts = 4;
  c.top_k = 2;
  c.aux_loss_coef = 0.05;  // large enough that a wrong statistic shows in the loss
  return c;
}

struct Case {
  int dp = 1, cp = 1, ep = 1, pp = 1, micro = 1, zero = 0;
  Schedule schedule = Schedule::Afab;
  Precision precision = Precision::Fp32;
  bool sp = false;
  int top_k = 2, moe_every = 1;
  Activation act = Activation::Gelu;
  Recompute recompute = Recompute::None;
  double capacity = 0;
  std::string tag() const {
    return "dp " + std::to_string(dp) + " cp " + std::to_string(cp) + " ep " + std::to_string(ep) +
           " pp " + std::to_string(pp) + " m " + std::to_string(micro) + (zero ? " zero 1" : "") +
           (schedule == Schedule::OneFOneB ? " 1f1b" : "") +
           (precision == Precision::Bf16 ? " bf16" : "") + (sp ? " sp" : "") + " k " +
           std::to_string(top_k) + " every " + std::to_string(moe_every) +
           (act == Activation::SwiGlu ? " swiglu" : "") +
           (recompute == Recompute::Full ? " full" : "") +
           (capacity > 0 ? " capacity " + std::to_string(capacity) : "");
  }
};

ParamList without_key_bias(const ParamList& all) {
  ParamList kept;
  for (const Param& p : all)
    if (!tp::testing::is_key_bias(p.name)) kept.push_back(p);
  return kept;
}

// The parameters of `all` that `like` has too (under EP a rank holds only its experts), in order.
ParamList holding(const ParamList& all, const ParamList& like) {
  ParamList kept;
  for (const Param& p : all)
    if (std::any_of(like.begin(), like.end(), [&](const Param& q) { return q.name == p.name; }))
      kept.push_back(p);
  return kept;
}

// The global batch with its sequences in the order one device must run them for its contiguous
// micro-batch k to be what the dp ranks' micro-batches k are together (the sequences the balancing
// statistics of micro-batch k cover): rank d's micro-batch k is its slice's k-th part.
Batch as_global_micro_batches(const Batch& b, int dp, int m) {
  const int64_t local = b.batch / dp, micro = local / m;
  std::vector<int64_t> order;
  for (int k = 0; k < m; ++k)
    for (int d = 0; d < dp; ++d)
      for (int64_t j = 0; j < micro; ++j) order.push_back(d * local + k * micro + j);
  Batch out = b;
  for (int64_t s = 0; s < b.seq; ++s)
    for (int64_t i = 0; i < b.batch; ++i) {
      out.ids[s * b.batch + i] = b.ids[s * b.batch + order[i]];
      out.targets[s * b.batch + i] = b.targets[s * b.batch + order[i]];
    }
  return out;
}

struct Outcome {
  double loss = 0, norm = 0, grads = 0, values = 0;
};

Outcome train_against_one(const Case& c, bool reduce = true) {
  ProcessGrid grid(world(), GridAxes{c.dp, c.pp, c.cp, c.ep});
  SerialCommunicator solo;
  ProcessGrid one_grid(solo, 1);
  GptConfig g = moe_gpt();
  g.top_k = c.top_k;
  g.moe_every = c.moe_every;
  g.act = c.act;
  g.recompute = c.recompute;
  g.capacity_factor = c.capacity;
  g.precision = c.precision;
  GptConfig g1 = g;
  g.sp = c.sp && grid.tp_size() > 1;
  Gpt model(device(), grid.tp(), g, pipeline_stage_layout(grid, g, {})), one(device(), solo, g1);
  model.set_context_parallel(grid.cp(), CpLayout::Zigzag);
  model.set_expert_parallel(grid.ep());
  model.init(3);
  one.init(3);
  AdamWParams hp;
  hp.lr = 1e-2f;
  AdamW opt(device(), model.params(), hp), one_opt(device(), one.params(), hp);
  if (c.zero == 1 && c.ep > 1)
    opt.shard_over(grid.dp(), grid.edp(), model.params());  // the experts over EDP (tp_train's)
  else if (c.zero == 1)
    opt.shard_over(grid.dp(), model.params());
  MarkovSource data(g.vocab, 3);
  StepOptions options, one_options;  // one device runs the same micro-batches, one after another
  options.micro_batches = one_options.micro_batches = c.micro;
  options.schedule = c.schedule;
  options.zero = c.zero;
  Outcome o;
  SerialCommunicator s2;
  for (int64_t s = 0; s < 3; ++s) {
    const Batch b = data.batch(s, 2 * c.dp, g.seq);
    StepResult a;
    if (reduce) {
      a = train_step(grid, device(), model, opt, b, 3, s, hp.lr, 0.5f, {}, options);
    } else {  // every replica's own statistics: train_step's reduction undone before the forward
      model.set_moe_reduction({}, 1.0f);
      const Batch mine = batch_slice(b, grid.dp_rank() * 2, 2);
      model.zero_grad();
      const float l = model.forward(mine, 3, s);
      Tensor t = Tensor::from_host(device(), Shape{1}, {l / static_cast<float>(c.dp)});
      grid.dp().all_reduce(t);
      a.loss = t.to_host()[0];
    }
    const StepResult r =
        train_step(one_grid, device(), one, one_opt, as_global_micro_batches(b, c.dp, c.micro), 3,
                   s, hp.lr, 0.5f, {}, one_options);
    o.loss = std::max(o.loss, std::fabs(double{a.loss} - r.loss) / std::fabs(double{r.loss}));
    if (!reduce) return o;
    o.norm = std::max(o.norm, std::fabs(a.grad_norm - r.grad_norm) / r.grad_norm);
    const ParamList mine = without_key_bias(model.params());
    const ParamList same = holding(without_key_bias(one.params()), mine);
    if (s == 0 && c.zero == 0)  // (ZeRO-1 leaves each replica's own gradients in Param::grad)
      o.grads = rel_error(gathered(grid.tp(), mine, ParamField::Grad),
                          gathered(s2, same, ParamField::Grad));
  }
  const ParamList mine = without_key_bias(model.params());
  o.values =
      rel_error(gathered(grid.tp(), mine, ParamField::Value),
                gathered(s2, holding(without_key_bias(one.params()), mine), ParamField::Value));
  return o;
}

std::vector<Case> cases_for(int np) {
  std::vector<Case> v;
  Case plain;  // tp = np: every rank the whole experts on every token
  v.push_back(plain);
  Case k1 = plain;
  k1.top_k = 1;
  v.push_back(k1);
  Case swiglu = plain;
  swiglu.act = Activation::SwiGlu;
  swiglu.moe_every = 2;
  swiglu.recompute = Recompute::Full;
  v.push_back(swiglu);
  Case capacity = plain;
  capacity.capacity = 1.0;
  v.push_back(capacity);
  if (np > 1) {
    Case sp = plain;
    sp.sp = true;  // tp = np, each rank its s/t tokens: the statistics summed over the TP group
    v.push_back(sp);
    Case dp = plain;
    dp.dp = np;
    v.push_back(dp);
  }
  Case micro = plain;  // the statistics of each global micro-batch
  micro.micro = 2;
  v.push_back(micro);
  if (np == 2) {
    for (Schedule s : {Schedule::Afab, Schedule::OneFOneB}) {
      Case pp;  // both micro-batches' forwards before the first backward
      pp.pp = 2;
      pp.micro = 2;
      pp.schedule = s;
      v.push_back(pp);
    }
    Case ep_micro;
    ep_micro.dp = ep_micro.ep = 2;
    ep_micro.micro = 2;
    v.push_back(ep_micro);
    Case ep_zero;  // the rest's moments over dp 2, the experts' over EDP groups of 1
    ep_zero.dp = ep_zero.ep = 2;
    ep_zero.zero = 1;
    v.push_back(ep_zero);
  }
  if (np == 2 || np == 4) {  // E = 4 experts: ep 2 and 4
    Case ep;
    ep.dp = ep.ep = np;
    v.push_back(ep);
    Case ep_k1 = ep;
    ep_k1.top_k = 1;
    ep_k1.act = Activation::SwiGlu;
    ep_k1.recompute = Recompute::Full;
    v.push_back(ep_k1);
  }
  if (np == 4) {
    Case grid;
    grid.dp = 2;
    grid.sp = true;
    v.push_back(grid);
    Case cp;
    cp.cp = 2;
    cp.sp = true;
    v.push_back(cp);
    Case edp;  // EP groups {0, 1} {2, 3}, the experts' gradients summed over {0, 2} and {1, 3}
    edp.dp = 4;
    edp.ep = 2;
    v.push_back(edp);
    Case edp_zero = edp;  // ZeRO-1: the experts' moments sharded over {0, 2} and {1, 3}
    edp_zero.zero = 1;
    v.push_back(edp_zero);
    Case ep_pp_zero;  // ep 2 × pp 2 with ZeRO-1
    ep_pp_zero.dp = ep_pp_zero.ep = ep_pp_zero.pp = ep_pp_zero.micro = 2;
    ep_pp_zero.zero = 1;
    v.push_back(ep_pp_zero);
    Case tp_ep;  // tp 2 × ep 2: each TP rank its own EP group
    tp_ep.dp = tp_ep.ep = 2;
    v.push_back(tp_ep);
    Case tp_ep_sp = tp_ep;
    tp_ep_sp.sp = true;
    v.push_back(tp_ep_sp);
    Case ep_pp;  // ep 2 × pp 2
    ep_pp.dp = ep_pp.ep = ep_pp.pp = 2;
    ep_pp.micro = 2;
    ep_pp.schedule = Schedule::OneFOneB;
    v.push_back(ep_pp);
    Case tp_pp;  // tp 2 × pp 2 with SP
    tp_pp.pp = 2;
    tp_pp.micro = 2;
    tp_pp.sp = true;
    v.push_back(tp_pp);
  }
  return v;
}

// bf16 mixed precision on both sides: the experts on bf16 copies, the router in f32 (model/moe.h).
// Tolerances as the CP and precision tests': 1 % for the loss and norm, 5e-2 for the first step's
// gradients (a bf16 rounding of a sum taken in another order moves a value by up to 2^-8), 5e-2
// for the weights after 3 steps. Measured here: ep 2 4.5e-3 (grads), ep 4 8.4e-8, tp 2 × ep 2 with
// SP 5.1e-3, ep 2 × pp 2 4.9e-3. Not here: plain tp 4 (9.5e-2 here), where the attention's bf16
// all-reduce moves a router input by a rounding and a near-tied token picks another expert.
TEST(MoeModel, Bf16TrainsLikeOneDevice) {
  const int np = world().size();
  if (np != 2 && np != 4) GTEST_SKIP() << "ep 2 and ep 4 (E = 4)";
  std::vector<Case> cases;
  {
    Case ep;
    ep.dp = ep.ep = np;
    cases.push_back(ep);
  }
  if (np == 4) {
    Case tp_ep;
    tp_ep.dp = tp_ep.ep = 2;
    tp_ep.sp = true;
    cases.push_back(tp_ep);
    Case ep_pp;
    ep_pp.dp = ep_pp.ep = ep_pp.pp = ep_pp.micro = 2;
    cases.push_back(ep_pp);
  }
  for (Case c : cases) {
    c.precision = Precision::Bf16;
    const Outcome o = train_against_one(c);
    EXPECT_LE(o.loss, 1e-2) << c.tag();
    EXPECT_LE(o.norm, 1e-2) << c.tag();
    EXPECT_LE(o.grads, 5e-2) << c.tag();
    EXPECT_LE(o.values, 5e-2) << c.tag();
  }
}

TEST(MoeModel, TrainsLikeOneDeviceOnEveryGrid) {
  for (const Case& c : cases_for(world().size())) {
    const Outcome o = train_against_one(c);
    EXPECT_LE(o.loss, 1e-5) << c.tag();
    EXPECT_LE(o.norm, 1e-5) << c.tag();
    EXPECT_LE(o.grads, 1e-5) << c.tag();
    EXPECT_LE(o.values, 1e-4) << c.tag();
  }
}

// The statistics per replica instead of the global batch's (what the reduction is for): at dp > 1
// the balancing loss is each replica's, and the averaged loss is not one device's.
TEST(MoeModel, PerReplicaStatisticsAreNotOneDevice) {
  if (world().size() == 1) GTEST_SKIP() << "needs dp > 1";
  Case c;
  c.dp = world().size();
  const Outcome o = train_against_one(c, false);
  EXPECT_GT(o.loss, 1e-6) << c.tag();
}

}  // namespace
