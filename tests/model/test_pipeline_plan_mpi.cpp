// test_pipeline_plan_mpi.cpp — the pipeline preflight (lib/model/pipeline_plan.h), arithmetic only:
//   - the bubble (N − 1)/(m + N − 1) and the micro-batches in flight (AFAB m, 1F1B min(m, N − s));
//   - the even split of blocks into contiguous stages;
//   - each stage's shard against the TP preflight: the stages' parameters add up to the whole
//     model's shard (plus one more wte shard when the head is tied and N > 1), activations are
//     k_s · L_s · block_activation_bytes, the totals add up;
//   - each link's bytes against its formula (TP m · L_s · 4 all-reduces of S·b·h·d, PP one
//     S·b·h·d message per micro-batch and direction, /t under SP; DP 2 (D − 1)/D · P_s·d) and
//     the link each group lies on for ProcessGrid's rank order;
//   - the bad inputs: more stages than blocks, m < N under 1F1B, a batch that does not split,
//     more GPUs than the job, an unknown schedule (bad input, exit code 2).
// Runs in test_mpi (any np: nothing here communicates).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/error.h"
#include "model/memory.h"
#include "model/pipeline_plan.h"
#include "model/presets.h"

namespace {

using namespace tp;

PipelineInput small(int t, int pp, int dp, int m, PpSchedule s = PpSchedule::OneFOneB) {
  PipelineInput in;
  in.base.model = gpt_shape(5, 48, 12, 0, 96, 64, 12);  // L, h, nh, nkv, f, V, S
  in.base.batch = 8;
  in.base.t = t;
  in.pp = pp;
  in.dp = dp;
  in.micro_batches = m;
  in.schedule = s;
  return in;
}

bool has_one(const std::vector<std::string>& list, const std::string& part) {
  int n = 0;
  for (const auto& s : list) n += s.find(part) != std::string::npos;
  return n == 1;
}

TEST(PipelinePlan, BubbleAndMicroBatchesInFlight) {
  EXPECT_DOUBLE_EQ(pipeline_bubble(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble(2, 2), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble(8, 64), 7.0 / 71.0);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(micro_batches_in_flight(PpSchedule::Afab, 4, s, 8), 8) << s;
    EXPECT_EQ(micro_batches_in_flight(PpSchedule::OneFOneB, 4, s, 8), 4 - s) << s;
    EXPECT_EQ(micro_batches_in_flight(PpSchedule::OneFOneB, 4, s, 2), s < 2 ? 2 : 4 - s) << s;
  }
}

TEST(PipelinePlan, StagesAreContiguousAndEven) {
  for (int L : {1, 5, 12, 80})
    for (int N = 1; N <= L && N <= 9; ++N) {
      const auto st = stage_blocks(L, N);
      ASSERT_EQ(static_cast<int>(st.size()), N);
      int next = 0, lo = L, hi = 0;
      for (const auto& [first, n] : st) {
        EXPECT_EQ(first, next) << L << " " << N;
        next += n;
        lo = std::min(lo, n);
        hi = std::max(hi, n);
      }
      EXPECT_EQ(next, L) << L << " " << N;
      EXPECT_LE(hi - lo, 1) << L << " " << N;
      EXPECT_GE(lo, 1) << L << " " << N;
    }
  EXPECT_EQ(stage_blocks(5, 2)[0].second, 3);
  EXPECT_EQ(stage_blocks(5, 2)[1].second, 2);
}

TEST(PipelinePlan, StageShardsAddUpToTheModel) {
  for (bool tied : {true, false})
    for (int t : {1, 2, 4})
      for (int N : {1, 2, 3, 5}) {
        PipelineInput in = small(t, N, 1, 8, PpSchedule::Afab);
        in.base.model.tied = tied;
        const PipelinePlan p = plan_pipeline(in);
        ASSERT_TRUE(p.problems.empty()) << p.problems[0];
        // The whole model's shard on one rank at pp 1 (the TP preflight), and wte's shard.
        int64_t wte = 0;
        for (const PreflightTensor& x : p.tp.tensors)
          if (x.name == "transformer.wte.weight") wte = x.local.numel();
        int64_t sum = 0, blocks = 0;
        for (const StagePlan& s : p.stages) {
          sum += s.params;
          blocks += s.blocks;
          EXPECT_EQ(s.weight_bytes, s.params * 4);
          EXPECT_EQ(s.grad_bytes, s.params * 4);
          EXPECT_EQ(s.adamw_bytes, s.params * 8);  // fp32: no master copy
          EXPECT_EQ(s.in_flight, 8);               // AFAB keeps every micro-batch
          EXPECT_EQ(s.activation_bytes, 8 * s.blocks * block_activation_bytes(p.tp.cfg, 12, 1, t));
          EXPECT_EQ(s.total_bytes, s.weight_bytes + s.grad_bytes + s.adamw_bytes +
                                       s.activation_bytes + s.logits_bytes);
          EXPECT_EQ(s.logits_bytes > 0, s.stage == N - 1);
        }
        EXPECT_EQ(blocks, 5);
        EXPECT_EQ(sum, p.tp.params_per_rank + (tied && N > 1 ? wte : 0))
            << "tied " << tied << " t " << t << " N " << N;
        EXPECT_TRUE(p.stages.front().embeddings);
        EXPECT_TRUE(p.stages.back().head);
      }
}

TEST(PipelinePlan, OneFOneBKeepsFewerMicroBatches) {
  const PipelinePlan a = plan_pipeline(small(2, 4, 1, 8, PpSchedule::Afab));
  const PipelinePlan f = plan_pipeline(small(2, 4, 1, 8, PpSchedule::OneFOneB));
  ASSERT_TRUE(a.problems.empty() && f.problems.empty());
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(f.stages[s].in_flight, 4 - s);
    EXPECT_EQ(f.stages[s].activation_bytes * 8, a.stages[s].activation_bytes * (4 - s));
  }
  EXPECT_DOUBLE_EQ(a.bubble,
                   f.bubble);  // the same bubble: the schedule moves memory, not idle time
}

TEST(PipelinePlan, TrafficOnEachLinkIsItsFormula) {
  for (bool sp : {false, true}) {
    // tp 2 × pp 2 × dp 2, 8 GPUs per node: every group inside the one node.
    PipelineInput in = small(2, 2, 2, 2);
    in.base.model.sp = sp;
    in.base.gpus_per_node = 8;
    in.base.nodes = 1;
    const PipelinePlan p = plan_pipeline(in);
    ASSERT_TRUE(p.problems.empty()) << p.problems[0];
    const int64_t b = 8 / (2 * 2), Nh = 12 * b * 48, d = 4;
    EXPECT_EQ(p.micro_batch, b);
    EXPECT_EQ(p.pp_message, Nh * d / (sp ? 2 : 1));
    // Plain TP: 4 all-reduces per layer, each rank sends 2 (t − 1)/t of N·h·d. SP: 4 all-gathers
    // and 2 reduce-scatters in backward, 2 + 2 in forward, (t − 1)/t each: 10 half-collectives.
    const double layer = sp ? 10 * ring_wire_bytes("all_gather", 2, Nh * d)
                            : 4 * ring_wire_bytes("all_reduce", 2, Nh * d);
    EXPECT_DOUBLE_EQ(p.layer_tp_bytes, layer);
    for (const StagePlan& s : p.stages) {
      EXPECT_TRUE(s.tp.inside_node && s.pp.inside_node && s.dp.inside_node);
      EXPECT_EQ(s.tp.link.name, "nvlink");
      EXPECT_EQ(s.tp.bytes, static_cast<int64_t>(2 * s.blocks * layer));
      EXPECT_EQ(s.pp.bytes, 2 * p.pp_message);  // m = 2 messages, one direction at either end
      EXPECT_EQ(s.dp.bytes, static_cast<int64_t>(ring_wire_bytes("all_reduce", 2, s.params * d)));
      EXPECT_EQ(s.tied.bytes, static_cast<int64_t>(ring_wire_bytes(
                                  "all_reduce", 2, p.tp.tensors[0].local.numel() * d)));
      EXPECT_GT(s.pp.seconds, 0);
    }
  }
  // Three stages: the middle one sends both ways.
  const PipelinePlan three = plan_pipeline(small(1, 3, 1, 4));
  ASSERT_TRUE(three.problems.empty());
  EXPECT_EQ(three.stages[1].pp.bytes, 2 * three.stages[0].pp.bytes);
  EXPECT_EQ(three.stages[1].tied.bytes, 0);  // only the first and last stage hold wte
}

TEST(PipelinePlan, LinksFollowTheGridsRankOrder) {
  // The articles' 70B layout: tp 8 inside each node of 8 GPUs, pp 4 and dp 2 across nodes.
  PipelineInput in;
  in.base.model = model_preset("llama2-70b");
  in.base.batch = 16;
  in.base.dtype_bytes = 2;
  in.base.t = 8;
  in.base.nodes = 8;
  in.base.gpus_per_node = 8;
  in.pp = 4;
  in.dp = 2;
  in.micro_batches = 8;
  PipelinePlan p = plan_pipeline(in);
  ASSERT_TRUE(p.problems.empty()) << p.problems[0];
  EXPECT_TRUE(p.stages[0].tp.inside_node);
  EXPECT_FALSE(p.stages[0].pp.inside_node);
  EXPECT_FALSE(p.stages[0].dp.inside_node);
  EXPECT_EQ(p.stages[0].pp.link.name, "ib");
  EXPECT_EQ(p.stages[0].blocks, 20);
  EXPECT_EQ(p.pp_message, int64_t{4096} * 8192 * 2);  // 64 MiB
  EXPECT_EQ(p.stages[3].tied.bytes, 0);               // untied
  // bf16: 18 B per parameter as the library holds them (issue 41): 2-byte weights, fp32
  // gradients, the fp32 master copy on top of the moments.
  EXPECT_EQ(p.stages[1].weight_bytes, p.stages[1].params * 2);
  EXPECT_EQ(p.stages[1].grad_bytes, p.stages[1].params * 4);
  EXPECT_EQ(p.stages[1].adamw_bytes, p.stages[1].params * 12);
  EXPECT_EQ(p.stages[1].weight_bytes + p.stages[1].grad_bytes + p.stages[1].adamw_bytes,
            p.stages[1].params * 18);
  // tp 16 on nodes of 8: the TP group crosses nodes; dp 2 × tp 4 on 8 GPUs: DP stays inside.
  in.base.t = 16;
  in.base.kv_replication = true;  // 8 KV heads at t = 16: two copies of each
  in.pp = 2;
  in.dp = 2;
  p = plan_pipeline(in);
  ASSERT_TRUE(p.problems.empty()) << p.problems[0];
  EXPECT_FALSE(p.stages[0].tp.inside_node);
  in.base.t = 4;
  in.pp = 2;
  in.dp = 2;
  p = plan_pipeline(in);
  ASSERT_TRUE(p.problems.empty()) << p.problems[0];
  EXPECT_TRUE(p.stages[0].tp.inside_node);
  EXPECT_TRUE(p.stages[0].dp.inside_node);
  EXPECT_FALSE(p.stages[0].pp.inside_node);
}

// The link of each axis against a brute force over every rank of every group (block placement, G
// ranks per node): the plan looks at each group's first and last rank only.
TEST(PipelinePlan, PlacementMatchesEveryRank) {
  for (int t : {1, 2, 3, 4})
    for (int D : {1, 2, 3})
      for (int N : {1, 2, 4})
        for (int G : {1, 2, 4, 6, 8}) {
          PipelineInput in = small(t, N, D, 1 * 4, PpSchedule::Afab);
          in.base.model.heads = 12;
          in.base.model.layers = 4;
          in.base.batch = 4 * D;
          in.base.gpus_per_node = G;
          const PipelinePlan p = plan_pipeline(in);
          ASSERT_TRUE(p.problems.empty()) << p.problems[0];
          const int W = t * D * N;
          auto node = [&](int r) { return r / G; };
          bool tp_in = true, dp_in = true, pp_in = true;
          for (int r = 0; r < W; ++r) {
            const int tr = r % t, dr = (r / t) % D, pr = r / (t * D);
            tp_in &= node(r) == node((pr * D + dr) * t);  // the group's tp_rank 0
            dp_in &= node(r) == node(pr * D * t + tr);    // its dp_rank 0
            pp_in &= node(r) == node(dr * t + tr);        // its pp_rank 0
          }
          const StagePlan& s = p.stages[0];
          EXPECT_EQ(s.tp.inside_node, tp_in) << t << " " << D << " " << N << " " << G;
          EXPECT_EQ(s.dp.inside_node, dp_in) << t << " " << D << " " << N << " " << G;
          EXPECT_EQ(s.pp.inside_node, pp_in) << t << " " << D << " " << N << " " << G;
        }
}

TEST(PipelinePlan, BadInputs) {
  PipelinePlan p = plan_pipeline(small(1, 6, 1, 8));
  EXPECT_TRUE(has_one(p.problems, "--pp=6 is more stages than the model's 5 blocks"))
      << p.problems[0];
  p = plan_pipeline(small(1, 4, 1, 2));
  EXPECT_TRUE(has_one(p.problems, "--micro-batches=2 < --pp=4")) << p.problems[0];
  EXPECT_TRUE(plan_pipeline(small(1, 4, 1, 2, PpSchedule::Afab)).problems.empty());
  p = plan_pipeline(small(1, 2, 3, 2));
  EXPECT_TRUE(has_one(p.problems, "--batch=8 does not split")) << p.problems[0];
  PipelineInput big = small(2, 2, 2, 2);
  big.base.nodes = 1;
  big.base.gpus_per_node = 4;
  p = plan_pipeline(big);
  EXPECT_TRUE(has_one(p.problems, "= 8 GPUs, but the job has 1 nodes x 4 GPUs")) << p.problems[0];
  // A grid no job has: refused before anything is laid out.
  PipelineInput huge = small(1, 2, 1, 2);
  huge.dp = 1 << 20;
  huge.base.batch = int64_t{2} << 20;
  p = plan_pipeline(huge);
  EXPECT_TRUE(has_one(p.problems, "more than this planner lays out")) << p.problems[0];
  // A TP problem (ffn % t) comes through the TP preflight.
  PipelineInput odd = small(2, 2, 1, 2);
  odd.base.model.ffn = 7;
  p = plan_pipeline(odd);
  EXPECT_TRUE(has_one(p.problems, "ffn=7 is not divisible by t=2"));
  EXPECT_FALSE(p.tp.problems.empty());
  try {
    parse_pp_schedule("gpipe");
    ADD_FAILURE() << "gpipe accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("expected one of afab, 1f1b"), std::string::npos);
  }
  EXPECT_EQ(parse_pp_schedule("afab"), PpSchedule::Afab);
  EXPECT_STREQ(pp_schedule_name(parse_pp_schedule("1f1b")), "1f1b");
}

}  // namespace
