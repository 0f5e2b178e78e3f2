// test_preflight_cp_mpi.cpp — the preflight of context parallelism (lib/model/preflight_cp.h):
//
//   - with cp the activations per layer and the peak's activations are exactly the preflight's
//     at cp = 1 divided by cp (every kept value is per token), plain TP and TP + SP, in fp32 and
//     bf16; weights, gradients and AdamW do not change;
//   - the ring's bytes: the formula on the 70B example (hand-computed), and a real RingAttention
//     forward and backward at cp = np whose CommLedger must record exactly cp_ring_bytes;
//   - the layouts' work: zigzag gives every rank 2·cp tiles, contiguous the last rank 4cp − 2, so
//     the contiguous attention time is (4cp − 2)/(2cp) of zigzag's;
//   - every bad input is one problem naming its fix: cp < 1, S not divisible by 2·cp (zigzag) or
//     cp (contiguous), S/cp not divisible by t under SP, tp·cp·pp·dp more than the job's GPUs.
// Runs under mpirun -np 1 … 4 (only the ledger test depends on np).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/tensor.h"
#include "model/preflight.h"
#include "model/preflight_cp.h"
#include "model/presets.h"
#include "parallel/ring_attention.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::random_vector;
using tp::testing::world;

bool has_one(const std::vector<std::string>& list, const std::string& part) {
  int n = 0;
  for (const auto& s : list) n += s.find(part) != std::string::npos;
  return n == 1 && list.size() == 1;
}

// L 2, h 48, 12 heads, 4 KV heads, f 96, V 64, S 48.
PreflightInput small(int t, bool sp, int64_t dtype_bytes) {
  PreflightInput in;
  in.model = gpt_shape(2, 48, 12, 4, 96, 64, 48);
  in.model.sp = sp;
  in.batch = 2;
  in.t = t;
  in.dtype_bytes = dtype_bytes;
  return in;
}

CpInput cp_of(int cp, CpLayout layout = CpLayout::Zigzag) {
  CpInput c;
  c.cp = cp;
  c.layout = layout;
  return c;
}

TEST(PreflightCp, ActivationsDivideByCpStatesDoNot) {
  for (int t : {1, 2, 4})
    for (bool sp : {false, true})
      for (int64_t d : {4, 2})
        for (int cp : {2, 3, 4, 6}) {
          const std::string tag = "t " + std::to_string(t) + (sp ? " sp" : "") + " d " +
                                  std::to_string(d) + " cp " + std::to_string(cp);
          const Preflight p = preflight(small(t, sp, d));
          ASSERT_TRUE(p.problems.empty()) << tag;
          const CpLayout layout = cp == 3 ? CpLayout::Contiguous : CpLayout::Zigzag;
          const CpPlan c = plan_cp(p, cp_of(cp, layout));
          ASSERT_TRUE(c.problems.empty()) << tag << ": " << c.problems[0];
          EXPECT_EQ(c.local_seq * cp, 48) << tag;
          EXPECT_EQ(c.act_tp * cp, p.act_impl_tp) << tag;
          EXPECT_EQ(c.act_sp * cp, p.act_impl_sp) << tag;
          EXPECT_EQ(c.peak.activations * cp, p.peak.activations) << tag;
          EXPECT_EQ(c.peak.weights, p.peak.weights) << tag;
          EXPECT_EQ(c.peak.grads, p.peak.grads) << tag;
          EXPECT_EQ(c.peak.optimizer, p.peak.optimizer) << tag;
          EXPECT_EQ(c.grad_allreduce, p.params_per_rank * 4) << tag;
        }
}

// The docs' example: Llama-2-70B's shape at S = 131072, B = 1, t = 8, bf16.
TEST(PreflightCp, RingBytesOfThe70bExample) {
  GptConfig cfg = model_preset("llama2-70b");
  cfg.seq = 131072;
  for (int cp : {1, 2, 8, 16}) {
    const CpRingBytes r = cp_ring_bytes(cfg, 1, 8, cp, 2);
    if (cp == 1) {
      EXPECT_EQ(r.total(), 0);
      continue;
    }
    const int64_t kv = 131072 / cp * 1 * (8 / 8) * 128;  // (S/cp)·B·(nkv/t)·hd
    EXPECT_EQ(r.kv, kv) << cp;
    EXPECT_EQ(r.forward, 2 * kv * 2 * (cp - 1)) << cp;
    EXPECT_EQ(r.backward, 2 * kv * 2 * (cp - 1) + 2 * kv * 2 * cp) << cp;
  }
  // cp 8: kv = 2 Mi elements, forward 2·2Mi·2·7 B = 56 MiB, backward 56 + 64 = 120 MiB.
  const CpRingBytes r8 = cp_ring_bytes(cfg, 1, 8, 8, 2);
  EXPECT_EQ(r8.forward, 56 * 1048576);
  EXPECT_EQ(r8.backward, 120 * 1048576);
}

// The formula against what the ring really sends: one RingAttention forward and backward at
// cp = np, the ledger's bytes of this rank.
TEST(PreflightCp, RingBytesEqualTheLedger) {
  Communicator& cp = world();
  const int64_t S = 24, B = 2, nh = 4, nkv = 2, hd = 8;
  GptConfig cfg = gpt_shape(1, nh * hd, nh, nkv, 64, 16, S);
  const CpRingBytes want = cp_ring_bytes(cfg, B, 1, cp.size(), 4);
  for (CpLayout layout : {CpLayout::Zigzag, CpLayout::Contiguous}) {
    const int64_t n = S / cp.size();
    auto T = [&](int64_t cols, const char* name) {
      return Tensor::from_host(device(), Shape{n * B, cols}, random_vector(name, n * B * cols));
    };
    Tensor q = T(nh * hd, "cp.q"), k = T(nkv * hd, "cp.k"), v = T(nkv * hd, "cp.v"),
           dout = T(nh * hd, "cp.dout");
    RingAttention ring(device(), cp, S, layout);
    AttentionShape shape{S, B, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
    Tensor out(device(), q.shape()), lse(device(), ring.lse_shape(B, nh));
    const size_t start = cp.ledger().size();
    ring.forward(out, lse, q, k, v, shape);
    const size_t mid = cp.ledger().size();
    const double forward = cp.ledger().wire_bytes_since(start);
    Tensor dq(device(), q.shape()), dk(device(), k.shape()), dv(device(), v.shape());
    ring.backward(dq, dk, dv, dout, q, k, v, out, lse, shape);
    const double backward = cp.ledger().wire_bytes_since(mid);
    EXPECT_EQ(static_cast<int64_t>(forward), want.forward) << cp_layout_name(layout);
    EXPECT_EQ(static_cast<int64_t>(backward), want.backward) << cp_layout_name(layout);
  }
}

TEST(PreflightCp, ContiguousIsSlowerByTheLastRanksWork) {
  const Preflight p = preflight(small(2, true, 2));
  for (int cp : {2, 4, 8}) {
    const CpPlan z = plan_cp(p, cp_of(cp, CpLayout::Zigzag));
    const CpPlan c = plan_cp(p, cp_of(cp, CpLayout::Contiguous));
    ASSERT_TRUE(z.problems.empty() && c.problems.empty()) << cp;
    EXPECT_EQ(z.work, std::vector<double>(cp, 2.0 * cp)) << cp;
    EXPECT_EQ(c.work.back(), 4.0 * cp - 2) << cp;
    EXPECT_NEAR(c.attention_seconds / z.attention_seconds, (4.0 * cp - 2) / (2.0 * cp), 1e-12)
        << cp;
    EXPECT_EQ(z.ring.total(), c.ring.total()) << cp;  // the same bytes in either layout
  }
}

TEST(PreflightCp, EveryBadInputIsOneProblemWithItsFix) {
  const Preflight p = preflight(small(2, true, 4));  // S = 48, t = 2, SP
  ASSERT_TRUE(p.problems.empty());
  EXPECT_TRUE(has_one(plan_cp(p, cp_of(0)).problems, "must be at least 1"));
  EXPECT_TRUE(has_one(plan_cp(p, cp_of(-3)).problems, "must be at least 1"));
  // 48 = 2·cp·k for cp 2, 3, 4, 6, 12, 24; cp 5 and cp 16 (32 chunks) are not.
  EXPECT_TRUE(has_one(plan_cp(p, cp_of(5)).problems, "is not divisible by 10"));
  EXPECT_TRUE(has_one(plan_cp(p, cp_of(16)).problems, "--cp-layout contiguous"));
  EXPECT_TRUE(
      has_one(plan_cp(p, cp_of(5, CpLayout::Contiguous)).problems, "is not divisible by 5"));
  // SP: cp 24 leaves S/cp = 2 positions, which t = 2 splits; cp 16 contiguous 3, which it cannot
  // (the fix: a multiple of lcm(cp, cp·t) = 32); at t = 4, cp 24's 2 cannot be split either.
  EXPECT_TRUE(plan_cp(p, cp_of(24)).problems.empty());
  EXPECT_TRUE(has_one(plan_cp(p, cp_of(16, CpLayout::Contiguous)).problems,
                      "S/cp = 3 positions, not divisible by t=2"));
  EXPECT_TRUE(has_one(plan_cp(p, cp_of(16, CpLayout::Contiguous)).problems,
                      "choose --seq a multiple of 32"));
  const Preflight p4 = preflight(small(4, true, 4));  // t = 4
  EXPECT_TRUE(has_one(plan_cp(p4, cp_of(24)).problems, "choose --seq a multiple of 96"));
  // The job: tp·cp·pp·dp GPUs against nodes × GPUs per node.
  PreflightInput job = small(2, false, 4);
  job.nodes = 1;
  job.gpus_per_node = 8;
  const Preflight pj = preflight(job);
  EXPECT_TRUE(plan_cp(pj, cp_of(4)).problems.empty());  // 2 × 4 = 8
  EXPECT_TRUE(has_one(plan_cp(pj, cp_of(8)).problems, "= 16 GPUs, but the job has 1 nodes x 8"));
  CpInput with_pp = cp_of(2);
  with_pp.pp = 4;
  EXPECT_TRUE(has_one(plan_cp(pj, with_pp).problems, "2 x 2 x 4 x 1 = 16 GPUs"));
}

TEST(PreflightCp, TheRingStaysInsideANodeOnlyWhenTheNodeHoldsWholeGroups) {
  PreflightInput in = small(2, false, 4);
  in.gpus_per_node = 8;
  const Preflight p = preflight(in);
  EXPECT_TRUE(plan_cp(p, cp_of(4)).ring_inside_node);   // 2 × 4 = 8 ranks: one node
  EXPECT_FALSE(plan_cp(p, cp_of(8)).ring_inside_node);  // 16 ranks: two nodes
  EXPECT_EQ(plan_cp(p, cp_of(8)).ring_link.name, "ib");
  in.gpus_per_node = 0;  // not given: a TP group is a node, so any ring crosses nodes
  EXPECT_FALSE(plan_cp(preflight(in), cp_of(2)).ring_inside_node);
}

}  // namespace
