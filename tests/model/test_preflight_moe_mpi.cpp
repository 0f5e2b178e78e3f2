// test_preflight_moe_mpi.cpp — the preflight of a mixture of experts (lib/model/preflight_moe.h):
//
//   - the parameter counts against a real tp::Gpt built with the same config: at t = 1 the
//     preflight's total is exactly the sum of Gpt's params (GeLU and SwiGLU, every block MoE or
//     every other one), and at t = 2, 4 each rank's count and bytes are what that rank allocates
//     (the experts whole on each TP rank);
//   - the active count by hand (one expert's tensors written out), and the EP plan's experts per
//     rank;
//   - the all-to-all bytes: T · k · h · (ep − 1)/ep · e, four of them per layer, zero at ep = 1;
//   - --pp 2: each stage's states per rank against the stage tp::Gpt builds (stages of 2 and 1
//     blocks, every block MoE or every other one: a stage with fewer MoE blocks, one with none),
//     at t = 1, 2, ep = 1, 2, tied or not; the AdamW bytes under ZeRO-1 from the model's own
//     dense and expert elements; and on a real ProcessGrid (np 2: pp 2; np 4: pp 2 × dp 2, ep 2)
//     the stage pipeline_stage_layout gives each rank, experts placed by set_expert_parallel;
//   - the bad inputs, each one line naming the fix: k > E, E not divisible by ep, ep not dividing
//     dp, --ep without --experts, more stages than blocks, and --experts below 0 refused by the
//     option's bounds.
// Serial arithmetic (a pretend communicator builds each rank's model) except PipelineStagesOnAGrid;
// runs under any -np.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "core/options.h"
#include "model/gpt.h"
#include "model/pipeline_plan.h"
#include "model/preflight.h"
#include "model/preflight_moe.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/process_grid.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

// Says it is rank `rank` of `size`; building a model moves no data, so any collective fails.
class Pretend : public Communicator {
 public:
  Pretend(int rank, int size) : Communicator(rank, size) {}
  std::string name() const override { return "pretend"; }

 protected:
  void do_all_reduce(Tensor&, ReduceOp) override { fail(); }
  void do_all_gather(const Tensor&, Tensor&) override { fail(); }
  void do_reduce_scatter(const Tensor&, Tensor&) override { fail(); }
  void do_broadcast(Tensor&, int) override { fail(); }
  void do_send_recv(const Tensor&, int, Tensor&, int) override { fail(); }
  void do_barrier() override { fail(); }
  std::unique_ptr<Communicator> do_split(int, int) override {
    fail();
    return nullptr;
  }

 private:
  static void fail() { throw Error("Pretend: a model under construction communicated"); }
};

// L 3, h 16, 4 heads, 4 KV heads, f 24, V 30 (padded at t = 4), S 8; E 4, k 2.
GptConfig moe_model(Activation act, int moe_every) {
  GptConfig c = gpt_shape(3, 16, 4, 4, 24, 30, 8);
  c.act = act;
  c.tied = false;
  c.experts = 4;
  c.top_k = 2;
  c.moe_every = moe_every;
  return c;
}

PreflightInput input(const GptConfig& c, int t) {
  PreflightInput in;
  in.model = c;
  in.batch = 2;
  in.t = t;
  in.dtype_bytes = 4;
  return in;
}

int64_t allocated(const GptConfig& c, int rank, int t) {
  Pretend comm(rank, t);
  Gpt model(device(), comm, c);
  int64_t n = 0;
  for (const Param& p : model.params()) n += p.value.numel();
  return n;
}

// The elements a stage's model holds: the dense ones and the experts'.
struct Held {
  int64_t dense = 0, experts = 0;
  int64_t all() const { return dense + experts; }
};

Held held(const Gpt& model) {
  Held h;
  for (const Param& p : model.params()) (p.expert >= 0 ? h.experts : h.dense) += p.value.numel();
  return h;
}

// Stage s of `stages` as pipeline_stage_layout cuts the model (the even split).
StageLayout stage_of(const GptConfig& c, int stages, int s) {
  const auto split = stage_blocks(static_cast<int>(c.layers), stages);
  StageLayout st;
  st.first_layer = split[s].first;
  st.end_layer = split[s].first + split[s].second;
  st.embedding = s == 0;
  st.head = s == stages - 1;
  return st;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool has_one(const std::vector<std::string>& list, const std::string& part) {
  return list.size() == 1 && list[0].find(part) != std::string::npos;
}

TEST(PreflightMoe, CountsEqualWhatGptAllocates) {
  for (Activation act : {Activation::Gelu, Activation::SwiGlu}) {
    for (int every : {1, 2}) {
      const GptConfig c = moe_model(act, every);
      for (int t : {1, 2, 4}) {
        const Preflight p = preflight(input(c, t));
        ASSERT_TRUE(p.problems.empty()) << p.problems[0];
        const std::string where = std::string(activation_name(act)) +
                                  " every=" + std::to_string(every) + " t=" + std::to_string(t);
        if (t == 1) {
          EXPECT_EQ(p.params_total, allocated(c, 0, 1)) << where;
        }
        for (int r = 0; r < t; ++r) {
          EXPECT_EQ(p.params_per_rank, allocated(c, r, t)) << where;
        }
        EXPECT_EQ(p.weight_bytes, 4 * p.params_per_rank) << where;
        const MoePlan m = plan_moe(p, MoeInput{});
        ASSERT_TRUE(m.problems.empty()) << where;
        EXPECT_EQ(m.total, p.params_total) << where;
        EXPECT_EQ(m.at_t.params, p.params_per_rank) << where;
        EXPECT_EQ(m.at_t.total(), p.weight_bytes + p.grad_bytes + p.adamw_bytes) << where;
      }
    }
  }
}

TEST(PreflightMoe, ActiveCountByHand) {
  // One SwiGLU expert at h 16, f 24: c_fc 16·24 + 24, c_gate the same, c_proj 24·16 + 16.
  const int64_t expert = 2 * (16 * 24 + 24) + 24 * 16 + 16;
  ASSERT_EQ(expert, 1216);
  const GptConfig c = moe_model(Activation::SwiGlu, 1);  // 3 MoE blocks
  const Preflight p = preflight(input(c, 1));
  ASSERT_TRUE(p.problems.empty());
  const MoePlan m = plan_moe(p, MoeInput{});
  EXPECT_EQ(m.counts.expert, expert);
  EXPECT_EQ(m.counts.router, 16 * 4);
  EXPECT_EQ(m.counts.moe_blocks, 3);
  // A token visits 2 of the 4 experts of each of the 3 blocks: 3 · 2 experts unused.
  EXPECT_EQ(m.active, allocated(c, 0, 1) - 3 * 2 * expert);
  // Every other block: ⌊3/2⌋ = 1 MoE block.
  const GptConfig every2 = moe_model(Activation::SwiGlu, 2);
  const MoePlan m2 = plan_moe(preflight(input(every2, 1)), MoeInput{});
  EXPECT_EQ(m2.counts.moe_blocks, 1);
  EXPECT_EQ(m2.active, allocated(every2, 0, 1) - 1 * 2 * expert);
  // The EP plan at ep 2 and 4: each rank drops (E − E/ep) experts of each MoE block.
  for (int ep : {2, 4}) {
    MoeInput in;
    in.ep = ep;
    const MoePlan e = plan_moe(p, in);
    ASSERT_TRUE(e.problems.empty());
    EXPECT_EQ(e.at_ep.params, p.params_per_rank - 3 * (4 - 4 / ep) * expert) << "ep=" << ep;
  }
  // Mixtral-8x7B (the preset): without this project's wpe and biases, the published 46.7 B total
  // and 12.9 B active.
  PreflightInput mx = input(model_preset("mixtral-8x7b"), 8);
  mx.batch = 1;
  const MoePlan x = plan_moe(preflight(mx), MoeInput{});
  ASSERT_TRUE(x.problems.empty());
  EXPECT_EQ(x.wpe, 32768 * 4096);
  EXPECT_NEAR((x.total - x.wpe - x.biases) / 1e9, 46.7, 0.05);
  EXPECT_NEAR((x.active - x.wpe - x.biases) / 1e9, 12.9, 0.05);
}

TEST(PreflightMoe, AllToAllBytes) {
  // T = 1000 tokens, k = 2, h = 64, e = 4: at ep 4 each all-to-all sends 3/4 of 512000 bytes.
  const MoeAllToAll a = moe_all_to_all_bytes(1000, 2, 64, 4, 4);
  EXPECT_EQ(a.each, 384000);
  EXPECT_EQ(a.per_layer, 4 * 384000);
  EXPECT_EQ(moe_all_to_all_bytes(1000, 2, 64, 1, 4).per_layer, 0);
  EXPECT_EQ(moe_all_to_all_bytes(1000, 2, 64, 2, 2).each, 1000 * 2 * 64 * 2 / 2);
  // The plan: T = B·S (B·S/t under SP), on NVLink when the node holds t · ep GPUs.
  GptConfig c = moe_model(Activation::Gelu, 1);
  PreflightInput in = input(c, 2);
  in.gpus_per_node = 8;
  MoeInput e;
  e.ep = 4;
  MoePlan m = plan_moe(preflight(in), e);
  ASSERT_TRUE(m.problems.empty());
  EXPECT_EQ(m.a2a.tokens, 2 * 8);
  EXPECT_EQ(m.a2a.each, 16 * 2 * 16 * 4 * 3 / 4);
  EXPECT_TRUE(m.a2a_inside_node);
  EXPECT_EQ(m.a2a_link.name, "nvlink");
  in.model.sp = true;
  in.gpus_per_node = 4;  // t · ep = 8 GPUs: two nodes
  m = plan_moe(preflight(in), e);
  EXPECT_EQ(m.a2a.tokens, 2 * 8 / 2);
  EXPECT_FALSE(m.a2a_inside_node);
  EXPECT_EQ(m.a2a_link.name, "ib");
  EXPECT_DOUBLE_EQ(m.a2a_seconds, 3 * m.a2a_link.model.alpha + m.a2a.each / m.a2a_link.model.beta);
}

TEST(PreflightMoe, PipelineStagesEqualWhatTheStageAllocates) {
  constexpr int kStages = 2, kZeroDp = 4;
  for (Activation act : {Activation::Gelu, Activation::SwiGlu})
    for (int every : {1, 2})
      for (bool tied : {false, true})
        for (int t : {1, 2})
          for (int ep : {1, 2}) {
            GptConfig c = moe_model(act, every);
            c.tied = tied;
            PreflightInput in = input(c, t);
            in.zero_dp = kZeroDp;
            MoeInput e;
            e.ep = ep;
            e.dp = kZeroDp;
            e.pp = kStages;
            const MoePlan m = plan_moe(preflight(in), e);
            const std::string where = std::string(activation_name(act)) +
                                      " every=" + std::to_string(every) +
                                      " tied=" + std::to_string(tied) + " t=" + std::to_string(t) +
                                      " ep=" + std::to_string(ep);
            ASSERT_TRUE(m.problems.empty()) << where << ": " << m.problems[0];
            ASSERT_EQ(m.stages.size(), 2u) << where;
            // 3 blocks: stage 0 holds blocks 0, 1, stage 1 block 2. Every block MoE: 2 and 1;
            // every other (block 1): 1 and none.
            EXPECT_EQ(m.stages[0].moe_blocks, every == 1 ? 2 : 1) << where;
            EXPECT_EQ(m.stages[1].moe_blocks, every == 1 ? 1 : 0) << where;
            EXPECT_EQ(m.fullest, 0) << where;
            EXPECT_EQ(m.at_ep.total(), m.stages[0].at_ep.total()) << where;
            for (int s = 0; s < kStages; ++s) {
              const MoeStage& st = m.stages[s];
              EXPECT_EQ(st.first_block, s == 0 ? 0 : 2) << where;
              for (int r = 0; r < t; ++r)
                for (int er = 0; er < ep; ++er) {
                  Pretend comm(r, t), whole(0, 1), group(er, ep);
                  Gpt today(device(), comm, c, stage_of(c, kStages, s));
                  Gpt planned(device(), comm, c, stage_of(c, kStages, s));
                  planned.set_expert_parallel(ep > 1 ? static_cast<Communicator&>(group) : whole);
                  const Held a = held(today), b = held(planned);
                  const std::string at = where + " stage=" + std::to_string(s) +
                                         " rank=" + std::to_string(r) + "/" + std::to_string(er);
                  EXPECT_EQ(st.at_t.params, a.all()) << at;
                  EXPECT_EQ(st.at_ep.params, b.all()) << at;
                  EXPECT_EQ(st.at_ep.weights, 4 * b.all()) << at;
                  EXPECT_EQ(st.at_ep.grads, 4 * b.all()) << at;
                  // ZeRO-1: the dense moments over dp, the experts' over dp/ep.
                  EXPECT_EQ(st.at_ep.adamw,
                            8 * (ceil_div(b.dense, kZeroDp) + ceil_div(b.experts, kZeroDp / ep)))
                      << at;
                  if (st.moe_blocks == 0) {
                    EXPECT_EQ(b.experts, 0) << at;
                  }
                }
            }
          }
}

TEST(PreflightMoe, PipelineStagesOnAGrid) {
  const int np = world().size();
  if (np != 2 && np != 4) GTEST_SKIP() << "pp 2 needs np 2 (pp 2) or 4 (pp 2 x dp 2, ep 2)";
  const int dp = np / 2, ep = dp;
  for (int every : {1, 2}) {
    const GptConfig c = moe_model(Activation::SwiGlu, every);
    ProcessGrid grid(world(), GridAxes{dp, 2, 1, ep});
    Gpt model(device(), grid.tp(), c, pipeline_stage_layout(grid, c));
    model.set_expert_parallel(grid.ep());
    const Held h = held(model);
    PreflightInput in = input(c, grid.tp_size());
    in.zero_dp = dp;
    MoeInput e;
    e.ep = ep;
    e.dp = dp;
    e.pp = 2;
    const MoePlan m = plan_moe(preflight(in), e);
    ASSERT_TRUE(m.problems.empty()) << m.problems[0];
    const MoeStage& st = m.stages[grid.pp_rank()];
    const std::string at = "every=" + std::to_string(every) + " rank " +
                           std::to_string(world().rank()) + " stage " +
                           std::to_string(grid.pp_rank());
    EXPECT_EQ(st.first_block, pipeline_stage_layout(grid, c).first_layer) << at;
    EXPECT_EQ(st.at_ep.params, h.all()) << at;
    EXPECT_EQ(st.at_ep.adamw, 8 * (ceil_div(h.dense, dp) + h.experts)) << at;  // EDP of 1
    EXPECT_EQ(static_cast<int64_t>(model.moe_layers().size()), st.moe_blocks) << at;
  }
}

TEST(PreflightMoe, BadInputsAreOneLineEach) {
  GptConfig c = moe_model(Activation::Gelu, 1);
  c.top_k = 5;  // k > E
  EXPECT_TRUE(has_one(preflight(input(c, 1)).problems, "--top-k=5 must be in [1, --experts=4]"));
  const Preflight p = preflight(input(moe_model(Activation::Gelu, 1), 1));
  MoeInput e;
  e.ep = 3;
  EXPECT_TRUE(has_one(plan_moe(p, e).problems, "--experts=4 is not divisible by --ep=3"));
  e.ep = 4;
  e.dp = 6;
  EXPECT_TRUE(has_one(plan_moe(p, e).problems, "--ep=4 does not divide dp=6"));
  e.dp = 8;
  EXPECT_TRUE(plan_moe(p, e).problems.empty());
  e.pp = 4;  // 3 blocks
  EXPECT_TRUE(has_one(plan_moe(p, e).problems, "--pp=4 is more stages than the model's 3 blocks"));
  e.pp = 1;
  const Preflight dense = preflight(input(gpt_shape(2, 16, 4, 0, 0, 30, 8), 1));
  e.ep = 2;
  e.dp = 0;
  EXPECT_TRUE(has_one(plan_moe(dense, e).problems, "--ep 2 without --experts"));
  // The option's bounds: --experts below 0 is refused before any arithmetic.
  for (const char* bad : {"--experts=-1", "--ep=0"}) {
    Options o("t", "t");
    declare_mixture_of_experts_options(o);
    const char* argv[] = {"t", bad};
    try {
      o.parse(2, argv);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.exit_code(), 2) << bad;
      EXPECT_NE(std::string(err.what()).find(std::string(bad).substr(0, 6)), std::string::npos)
          << err.what();
    }
  }
}

}  // namespace
