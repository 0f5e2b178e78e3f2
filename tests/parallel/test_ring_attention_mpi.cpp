// test_ring_attention_mpi.cpp — ring attention (lib/parallel/ring_attention.h) at cp = np against
// one device's attention of the whole sequence: every rank's out, lse, dq, dk and dv at its own
// positions, in the zigzag and the contiguous layout, MHA and GQA; a ring whose merge drops the
// log-sum-exp weights must fail the same check; the ring's bytes in the ledger against the
// formula. Runs under mpirun -np 1 … 4 (np 1: no ring, the kernel itself).
//
// Tolerance: relative 1e-5 (the merged softmax adds the same terms in another order).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/tensor.h"
#include "parallel/context_parallel.h"
#include "parallel/ring_attention.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::random_vector;
using tp::testing::world;

constexpr double kTol = 1e-5;

// This rank's rows (sequence-major, B per position) of a whole (S·B, cols) host tensor.
std::vector<float> my_rows(const std::vector<float>& whole, const std::vector<int64_t>& pos,
                           int64_t batch, int64_t cols) {
  std::vector<float> r;
  for (int64_t p : pos)
    r.insert(r.end(), whole.begin() + p * batch * cols, whole.begin() + (p + 1) * batch * cols);
  return r;
}

struct Result {
  double out, lse, dq, dk, dv;
};

// One ring forward and backward at cp = np against the whole attention on every rank.
Result ring_against_whole(CpLayout layout, int64_t nkv, bool broken, int64_t* kv_bytes = nullptr) {
  Communicator& cp = world();
  const int64_t S = 24, B = 2, nh = 4, hd = 8;
  const int64_t qc = nh * hd, kc = nkv * hd;
  AttentionShape whole{S, B, nh, nkv, hd, 1.0f / std::sqrt(8.0f)};
  const std::string tag = std::to_string(nkv);
  const auto q = random_vector("ring.q" + tag, S * B * qc),
             k = random_vector("ring.k" + tag, S * B * kc),
             v = random_vector("ring.v" + tag, S * B * kc),
             dout = random_vector("ring.do" + tag, S * B * qc);
  const auto T = [](const Shape& s, const std::vector<float>& x) {
    return Tensor::from_host(device(), s, x);
  };
  // One device: the whole sequence.
  Tensor Q = T(Shape{S * B, qc}, q), K = T(Shape{S * B, kc}, k), V = T(Shape{S * B, kc}, v);
  Tensor O(device(), Q.shape()), L(device(), Shape{B, nh, S});
  device().attention_forward(O, L, Q, K, V, whole);
  Tensor dQ(device(), Q.shape()), dK(device(), K.shape()), dV(device(), V.shape());
  device().attention_backward(dQ, dK, dV, T(Q.shape(), dout), Q, K, V, O, L, whole);
  // The ring: this rank's positions only.
  const std::vector<int64_t> pos = cp_positions(S, cp.size(), cp.rank(), layout);
  const int64_t n = static_cast<int64_t>(pos.size());
  RingAttention ring(device(), cp, S, layout);
  RingAttention::set_broken_merge_for_test(broken);
  Tensor q_ = T(Shape{n * B, qc}, my_rows(q, pos, B, qc)),
         k_ = T(Shape{n * B, kc}, my_rows(k, pos, B, kc)),
         v_ = T(Shape{n * B, kc}, my_rows(v, pos, B, kc));
  Tensor o_(device(), q_.shape()), l_(device(), ring.lse_shape(B, nh));
  const size_t before = cp.ledger().size();
  ring.forward(o_, l_, q_, k_, v_, whole);
  if (kv_bytes) *kv_bytes = static_cast<int64_t>(cp.ledger().wire_bytes_since(before));
  Tensor dq_(device(), q_.shape()), dk_(device(), k_.shape()), dv_(device(), v_.shape());
  ring.backward(dq_, dk_, dv_, T(q_.shape(), my_rows(dout, pos, B, qc)), q_, k_, v_, o_, l_, whole);
  RingAttention::set_broken_merge_for_test(false);
  // lse: the whole one's (B, nh, S) at my positions, chunk by chunk as lse_shape lays them out.
  const auto Lh = L.to_host();
  std::vector<float> want_lse;
  for (const CpChunk& c : ring.chunks())
    for (int64_t bj = 0; bj < B * nh; ++bj)
      for (int64_t s = c.global_begin; s < c.global_begin + c.len; ++s)
        want_lse.push_back(Lh[bj * S + s]);
  return {rel_error(o_.to_host(), my_rows(O.to_host(), pos, B, qc)),
          rel_error(l_.to_host(), want_lse),
          rel_error(dq_.to_host(), my_rows(dQ.to_host(), pos, B, qc)),
          rel_error(dk_.to_host(), my_rows(dK.to_host(), pos, B, kc)),
          rel_error(dv_.to_host(), my_rows(dV.to_host(), pos, B, kc))};
}

TEST(RingAttention, EqualsOneDeviceInBothLayouts) {
  for (CpLayout layout : {CpLayout::Zigzag, CpLayout::Contiguous})
    for (int64_t nkv : {4, 2}) {
      const Result r = ring_against_whole(layout, nkv, false);
      const std::string tag = std::string(cp_layout_name(layout)) + " nkv " + std::to_string(nkv) +
                              " cp " + std::to_string(world().size());
      EXPECT_LE(r.out, kTol) << tag;
      EXPECT_LE(r.lse, kTol) << tag;
      EXPECT_LE(r.dq, kTol) << tag;
      EXPECT_LE(r.dk, kTol) << tag;
      EXPECT_LE(r.dv, kTol) << tag;
    }
}

// Adding the partial outputs without e^(lse − L) is what the merge is for: at cp > 1 some query
// chunk meets two key blocks, and its output is then wrong by far more than rounding.
TEST(RingAttention, AMergeWithoutTheLogSumExpFails) {
  if (world().size() == 1) GTEST_SKIP() << "no ring at cp = 1";
  const Result r = ring_against_whole(CpLayout::Zigzag, 2, true);
  Tensor worst = Tensor::from_host(device(), Shape{1}, {static_cast<float>(r.out)});
  world().all_reduce(worst, ReduceOp::Max);
  EXPECT_GT(worst.to_host()[0], 1e-2);
}

// The forward's bytes: cp − 1 passes of this rank's K and V, 2·(S/cp)·B·nkv·hd·4 bytes each.
TEST(RingAttention, ForwardSendsCpMinusOneKvBlocks) {
  int64_t bytes = 0;
  ring_against_whole(CpLayout::Zigzag, 2, false, &bytes);
  const int cp = world().size();
  const int64_t want = cp == 1 ? 0 : int64_t{2} * (24 / cp) * 2 * 2 * 8 * 4 * (cp - 1);
  EXPECT_EQ(bytes, want);
}

}  // namespace
