// test_kernels_attention.cpp — the CPU causal attention (cpu_backend/kernels/attention.cpp):
// forward, backward and the forward over a key/value cache against a double reference and finite
// differences (kernel_test_util.h) for GQA, MHA and MQA, thread independence, and every
// instruction-set variant of the kernel (serial).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "kernels/attention.h"
#include "test_util.h"

namespace {

using tp::AttentionShape;
using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

// ---- double reference -------------------------------------------------------------------------

struct AttnRef {
  Vec out, probs, lse;  // lse: (B, nh, S), log Σ_{t ≤ s} e^(scale·q_s·k_t)
};

// The definition, loop by loop: token (s, b) is row s·B + b; query head j reads kv head j/(nh/nkv).
AttnRef attention_ref(const Vec& q, const Vec& k, const Vec& v, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  AttnRef r{Vec(q.size(), 0.0), Vec(B * nh * S * S, 0.0), Vec(B * nh * S, 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j) {
      const int64_t g = j / (nh / nkv);
      for (int64_t s = 0; s < S; ++s) {
        Vec score(s + 1);
        double mx = -1e300;
        for (int64_t t = 0; t <= s; ++t) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e)
            d += q[(s * B + b) * nh * hd + j * hd + e] * k[(t * B + b) * nkv * hd + g * hd + e];
          score[t] = sh.scale * d;
          mx = std::max(mx, score[t]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        r.lse[(b * nh + j) * S + s] = mx + std::log(sum);
        for (int64_t t = 0; t <= s; ++t) {
          const double p = score[t] / sum;
          r.probs[((b * nh + j) * S + s) * S + t] = p;
          for (int64_t e = 0; e < hd; ++e)
            r.out[(s * B + b) * nh * hd + j * hd + e] += p * v[(t * B + b) * nkv * hd + g * hd + e];
        }
      }
    }
  return r;
}

// ---- attention --------------------------------------------------------------------------------

AttentionShape attn_shape(int64_t S, int64_t B, int64_t nh, int64_t nkv, int64_t hd) {
  return {S, B, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
}

std::string attn_tag(const AttentionShape& s) {
  return "S=" + std::to_string(s.seq) + " B=" + std::to_string(s.batch) +
         " nh=" + std::to_string(s.heads) + " nkv=" + std::to_string(s.kv_heads) +
         " hd=" + std::to_string(s.head_dim);
}

struct AttnCase {
  AttentionShape sh;
  std::vector<float> q, k, v;
  Tensor Q, K, V, out, lse;
  explicit AttnCase(const AttentionShape& s) : sh(s) {
    const int64_t rows = s.seq * s.batch, qc = s.heads * s.head_dim, kc = s.kv_heads * s.head_dim;
    const std::string tag = attn_tag(s);
    q = random_scaled("q" + tag, rows * qc, 2.0f);  // peaked enough that softmax is not uniform
    k = random_scaled("k" + tag, rows * kc, 2.0f);
    v = random_vector("v" + tag, rows * kc);
    Q = on_device(Shape{rows, qc}, q);
    K = on_device(Shape{rows, kc}, k);
    V = on_device(Shape{rows, kc}, v);
    out = filled(Shape{rows, qc}, kNaN);
    lse = filled(Shape{s.batch, s.heads, s.seq}, kNaN);
    device().attention_forward(out, lse, Q, K, V, sh);
  }
};

const AttentionShape kAttnShapes[] = {
    attn_shape(5, 2, 4, 2, 3),  // GQA: two query heads per kv head
    attn_shape(5, 2, 3, 3, 4),  // MHA
    attn_shape(4, 3, 4, 1, 2),  // MQA
};

// The forward's output and its log-sum-exp against the double reference; the lse is what the
// backward rebuilds P from, so P = e^(scale·q·k − lse) must be causal and sum to 1 per row.
TEST(KernelAttention, ForwardMatchesReferenceAndLseRebuildsTheProbabilities) {
  for (const AttentionShape& sh : kAttnShapes) {
    AttnCase c(sh);
    const AttnRef ref = attention_ref(to_d(c.q), to_d(c.k), to_d(c.v), sh);
    EXPECT_LE(rel_error(c.out.to_host(), to_f(ref.out)), kForwardTol) << attn_tag(sh);
    const auto lse = c.lse.to_host();
    EXPECT_LE(rel_error(lse, to_f(ref.lse)), kForwardTol) << attn_tag(sh);
    const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
    const int64_t nkv = sh.kv_heads;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < nh; ++j)
        for (int64_t s = 0; s < S; ++s) {
          double sum = 0;
          for (int64_t t = 0; t <= s; ++t) {
            double d = 0;
            for (int64_t e = 0; e < hd; ++e)
              d += static_cast<double>(c.q[(s * B + b) * nh * hd + j * hd + e]) *
                   c.k[(t * B + b) * nkv * hd + (j / (nh / nkv)) * hd + e];
            sum += std::exp(sh.scale * d - lse[(b * nh + j) * S + s]);
          }
          EXPECT_NEAR(sum, 1.0, 1e-5) << attn_tag(sh) << " b " << b << " j " << j << " s " << s;
        }
  }
}

TEST(KernelAttention, BackwardMatchesFiniteDifferences) {
  for (const AttentionShape& sh : kAttnShapes) {
    AttnCase c(sh);
    const Vec R = to_d(random_vector("R" + attn_tag(sh), c.Q.numel()));
    Tensor dOut = on_device(c.Q.shape(), to_f(R));
    Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(c.K.shape(), kNaN),
           dV = filled(c.V.shape(), kNaN);
    device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.out, c.lse, sh);
    const Vec q = to_d(c.q), k = to_d(c.k), v = to_d(c.v);
    const Vec want_dq = fd_grad([&](const Vec& x) { return attention_ref(x, k, v, sh).out; }, q, R);
    const Vec want_dk = fd_grad([&](const Vec& x) { return attention_ref(q, x, v, sh).out; }, k, R);
    const Vec want_dv = fd_grad([&](const Vec& x) { return attention_ref(q, k, x, sh).out; }, v, R);
    EXPECT_LE(rel_error(dQ.to_host(), to_f(want_dq)), kGradTol) << attn_tag(sh);
    EXPECT_LE(rel_error(dK.to_host(), to_f(want_dk)), kGradTol) << attn_tag(sh);
    EXPECT_LE(rel_error(dV.to_host(), to_f(want_dv)), kGradTol) << attn_tag(sh);
  }
}

// B·nh·S²·hd ≥ 5e5: parallel; S = 200 is four key blocks and two query blocks of the backward.
TEST(KernelAttention, BackwardIsThreadIndependent) {
  for (const AttentionShape& sh : {attn_shape(64, 2, 4, 2, 16), attn_shape(200, 2, 4, 2, 16)}) {
    AttnCase c(sh);
    Tensor dOut = on_device(c.Q.shape(), random_vector("attn_thr_dout", c.Q.numel()));
    std::vector<float> got[2][3];
    for (int t = 1; t <= 2; ++t)
      with_threads(t, [&] {
        Tensor dQ(device(), c.Q.shape()), dK(device(), c.K.shape()), dV(device(), c.V.shape());
        device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.out, c.lse, c.sh);
        got[t - 1][0] = dQ.to_host();
        got[t - 1][1] = dK.to_host();
        got[t - 1][2] = dV.to_host();
      });
    EXPECT_EQ(got[0][0], got[1][0]) << attn_tag(sh);
    EXPECT_EQ(got[0][1], got[1][1]) << attn_tag(sh);
    EXPECT_EQ(got[0][2], got[1][2]) << attn_tag(sh);
  }
}

// Ring attention's pieces (parallel/ring_attention.h): the sequence cut into chunks of c
// positions, each query chunk a attends to key chunks b ≤ a — the diagonal one with the causal
// mask (past = 0), the earlier ones whole (past = (a − b)·c) — and the partial outputs merge by
// their log-sum-exps. The merged out and lse are the whole forward's; the backward of every pair,
// given the whole out and lse, sums to the whole backward (dq over b, dk and dv over a).
std::vector<float> lse_chunk(const std::vector<float>& lse, const AttentionShape& sh, int64_t s0,
                             int64_t c) {
  std::vector<float> r;
  for (int64_t bj = 0; bj < sh.batch * sh.heads; ++bj)
    for (int64_t s = s0; s < s0 + c; ++s) r.push_back(lse[bj * sh.seq + s]);
  return r;
}

TEST(KernelAttention, ChunkPairsMergedAreTheWholeAttention) {
  // 300 in four chunks of 75: two key blocks of the backward per pair, the second ragged
  for (const AttentionShape& whole :
       {attn_shape(12, 2, 4, 2, 3), attn_shape(40, 2, 2, 1, 36), attn_shape(300, 1, 4, 2, 20)}) {
    AttnCase c(whole);
    const int64_t B = whole.batch, n = 4, len = whole.seq / n, qc = whole.heads * whole.head_dim,
                  kc = whole.kv_heads * whole.head_dim;
    const std::vector<float> lse_all = c.lse.to_host();
    Tensor dOut =
        on_device(c.Q.shape(), random_vector("chunk_dout" + attn_tag(whole), c.Q.numel()));
    Tensor dQ(device(), c.Q.shape()), dK(device(), c.K.shape()), dV(device(), c.V.shape());
    device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.out, c.lse, whole);
    std::vector<float> out(c.out.numel()), dq(dQ.numel(), 0.0f), dk(dK.numel(), 0.0f),
        dv(dV.numel(), 0.0f);
    for (int64_t a = 0; a < n; ++a) {
      AttentionShape sh = whole;
      sh.seq = sh.kv_seq = len;
      const auto rows = [&](int64_t i) { return std::make_pair(i * len * B, (i + 1) * len * B); };
      const Tensor Qa = c.Q.view(rows(a).first, rows(a).second);
      Tensor acc, acc_lse;
      for (int64_t b = 0; b <= a; ++b) {
        sh.past = (a - b) * len;
        Tensor o(device(), Qa.shape()), l(device(), Shape{B, sh.heads, len});
        device().attention_forward(o, l, Qa, c.K.view(rows(b).first, rows(b).second),
                                   c.V.view(rows(b).first, rows(b).second), sh);
        if (b == 0) {
          acc = o;
          acc_lse = l;
        } else {
          device().attention_merge(acc, acc_lse, o, l, sh);
        }
      }
      const auto ah = acc.to_host();
      std::copy(ah.begin(), ah.end(), out.begin() + a * len * B * qc);
      EXPECT_LE(rel_error(acc_lse.to_host(), lse_chunk(lse_all, whole, a * len, len)), kForwardTol)
          << attn_tag(whole) << " lse of chunk " << a;
      // The backward of each pair, from the whole out and lse of chunk a.
      const Tensor La = on_device(Shape{B, sh.heads, len}, lse_chunk(lse_all, whole, a * len, len));
      for (int64_t b = 0; b <= a; ++b) {
        sh.past = (a - b) * len;
        Tensor pq(device(), Qa.shape()), pk(device(), Shape{len * B, kc}),
            pv(device(), Shape{len * B, kc});
        device().attention_backward(pq, pk, pv, dOut.view(rows(a).first, rows(a).second), Qa,
                                    c.K.view(rows(b).first, rows(b).second),
                                    c.V.view(rows(b).first, rows(b).second),
                                    c.out.view(rows(a).first, rows(a).second), La, sh);
        const auto add = [](std::vector<float>& to, int64_t at, const std::vector<float>& x) {
          for (size_t i = 0; i < x.size(); ++i) to[at + i] += x[i];
        };
        add(dq, a * len * B * qc, pq.to_host());
        add(dk, b * len * B * kc, pk.to_host());
        add(dv, b * len * B * kc, pv.to_host());
      }
    }
    EXPECT_LE(rel_error(out, c.out.to_host()), kForwardTol) << attn_tag(whole);
    EXPECT_LE(rel_error(dq, dQ.to_host()), kForwardTol) << attn_tag(whole);
    EXPECT_LE(rel_error(dk, dK.to_host()), kForwardTol) << attn_tag(whole);
    EXPECT_LE(rel_error(dv, dV.to_host()), kForwardTol) << attn_tag(whole);
  }
}

// A merge with a side that saw no key (lse = −inf) leaves the other side; two equal halves
// average.
TEST(KernelAttention, MergeWeighsBySoftmaxMass) {
  const AttentionShape sh = attn_shape(1, 1, 1, 1, 2);
  Tensor out = on_device(Shape{1, 2}, {1.0f, 2.0f}), lse = on_device(Shape{1, 1, 1}, {0.5f});
  device().attention_merge(out, lse, on_device(Shape{1, 2}, {7.0f, 9.0f}),
                           on_device(Shape{1, 1, 1}, {-INFINITY}), sh);
  EXPECT_EQ(out.to_host(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(lse.to_host(), (std::vector<float>{0.5f}));
  device().attention_merge(out, lse, on_device(Shape{1, 2}, {3.0f, 4.0f}),
                           on_device(Shape{1, 1, 1}, {0.5f}), sh);
  EXPECT_EQ(out.to_host(), (std::vector<float>{2.0f, 3.0f}));
  EXPECT_NEAR(lse.to_host()[0], 0.5 + std::log(2.0), 1e-6);
}

// Attention over a key/value cache: the queries of positions [past, S) against keys [0, S) give
// the full forward's rows of those positions, for a prefill (past = 0), a middle block and the
// last position alone (decoding). The keys and values are views of the full ones' first rows.
TEST(KernelAttention, CachedForwardMatchesForwardRows) {
  for (const AttentionShape& sh : kAttnShapes) {
    AttnCase c(sh);
    const int64_t S = sh.seq, B = sh.batch;
    const auto full = c.out.to_host();
    for (int64_t past : {int64_t{0}, int64_t{2}, S - 1}) {
      const int64_t n = S - past, qc = sh.heads * sh.head_dim;
      AttentionShape part = sh;
      part.seq = n;
      Tensor out = filled(Shape{n * B, qc}, kNaN);
      device().attention_cached_forward(out, c.Q.view(past * B, S * B), c.K, c.V, past, part);
      const std::vector<float> want(full.begin() + past * B * qc, full.end());
      EXPECT_LE(rel_error(out.to_host(), want), kForwardTol) << attn_tag(sh) << " past " << past;
      // Keys past the last query's position are never read: a shorter cache gives the same rows.
      if (past > 0) {
        AttentionShape one = sh;
        one.seq = 1;
        Tensor out1 = filled(Shape{B, qc}, kNaN);
        device().attention_cached_forward(out1, c.Q.view(past * B, (past + 1) * B),
                                          c.K.view(0, (past + 1) * B), c.V.view(0, (past + 1) * B),
                                          past, one);
        const std::vector<float> want1(full.begin() + past * B * qc,
                                       full.begin() + (past + 1) * B * qc);
        EXPECT_LE(rel_error(out1.to_host(), want1), kForwardTol)
            << attn_tag(sh) << " one at " << past;
      }
    }
  }
  // Bad sizes: k must hold past + n positions.
  const AttentionShape sh = attn_shape(2, 1, 2, 2, 2);
  Tensor q(device(), Shape{2, 4}), k(device(), Shape{3, 4}), v(device(), Shape{3, 4});
  Tensor out(device(), Shape{2, 4});
  EXPECT_THROW(device().attention_cached_forward(out, q, k, v, 2, sh), tp::Error);
  EXPECT_THROW(device().attention_cached_forward(out, q, k, v, -1, sh), tp::Error);
}

TEST(KernelAttention, BadShapesAreErrors) {
  AttentionShape sh = attn_shape(3, 2, 3, 2, 4);  // nh % nkv != 0
  Tensor q(device(), Shape{6, 12}), k(device(), Shape{6, 8}), v(device(), Shape{6, 8});
  Tensor out(device(), Shape{6, 12}), lse(device(), Shape{2, 3, 3});
  EXPECT_THROW(device().attention_forward(out, lse, q, k, v, sh), tp::Error);
  sh = attn_shape(3, 2, 4, 2, 4);  // q is 6x12, not 6x16
  EXPECT_THROW(device().attention_forward(out, lse, q, k, v, sh), tp::Error);
  sh = attn_shape(3, 2, 4, 2, 3);  // q 6x12, k and v 6x6 fit; lse holds B·nh·S + 1 values
  Tensor k6(device(), Shape{6, 6}), v6(device(), Shape{6, 6});
  Tensor lse_ok(device(), Shape{2, 4, 3}), lse_long(device(), Shape{2 * 4 * 3 + 1});
  EXPECT_NO_THROW(device().attention_forward(out, lse_ok, q, k6, v6, sh));
  EXPECT_THROW(device().attention_forward(out, lse_long, q, k6, v6, sh), tp::Error);
}

// ---- attention: the CPU kernel's instruction sets ----------------------------------------------
// cpu_backend/kernels/attention.cpp is a register-tiled kernel built for AVX-512, AVX2 + FMA and
// the baseline; each variant this CPU runs is checked against the double reference, on shapes
// whose S and hd are not multiples of the tiles (tails in every loop), and the FMA variants,
// which add every element in the same order, are checked to give the same bits.

// The backward by its definition (core/device.h), in double, from the forward reference's P.
struct AttnGrads {
  Vec dq, dk, dv;
};
AttnGrads attention_backward_ref(const Vec& q, const Vec& k, const Vec& v, const Vec& dout,
                                 const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, nkv = sh.kv_heads, hd = sh.head_dim;
  const Vec P = attention_ref(q, k, v, sh).probs;
  AttnGrads g{Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(v.size(), 0.0)};
  const auto qi = [&](int64_t s, int64_t b, int64_t j, int64_t e) {
    return (s * B + b) * nh * hd + j * hd + e;
  };
  const auto ki = [&](int64_t t, int64_t b, int64_t h, int64_t e) {
    return (t * B + b) * nkv * hd + h * hd + e;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j) {
      const int64_t h = j / (nh / nkv);
      for (int64_t s = 0; s < S; ++s) {
        const double* p = &P[((b * nh + j) * S + s) * S];
        Vec dp(s + 1, 0.0);
        double r = 0;
        for (int64_t t = 0; t <= s; ++t) {
          for (int64_t e = 0; e < hd; ++e) dp[t] += dout[qi(s, b, j, e)] * v[ki(t, b, h, e)];
          r += p[t] * dp[t];
        }
        for (int64_t t = 0; t <= s; ++t) {
          const double ds = p[t] * (dp[t] - r);
          for (int64_t e = 0; e < hd; ++e) {
            g.dq[qi(s, b, j, e)] += sh.scale * ds * k[ki(t, b, h, e)];
            g.dk[ki(t, b, h, e)] += sh.scale * ds * q[qi(s, b, j, e)];
            g.dv[ki(t, b, h, e)] += p[t] * dout[qi(s, b, j, e)];
          }
        }
      }
    }
  return g;
}

// Restores the default variant when a test ends, passed or not.
struct AttnIsaGuard {
  ~AttnIsaGuard() { tp::cpu::set_attention_isa(tp::cpu::attention_isas().front()); }
};

TEST(KernelAttentionIsa, EveryVariantMatchesTheReference) {
  const std::vector<std::string> isas = tp::cpu::attention_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "base");  // the baseline runs everywhere
  const AttentionShape shapes[] = {
      attn_shape(37, 2, 4, 2, 40),   // GQA; S, hd past the tiles and the panels' 32
      attn_shape(70, 1, 3, 3, 16),   // MHA; three 32-key chunks, the last ragged
      attn_shape(5, 2, 4, 2, 3),     // the kernel tests' smallest
      attn_shape(150, 1, 4, 2, 24),  // GQA; three key blocks of the backward, two query blocks
  };
  AttnIsaGuard guard;
  std::vector<std::vector<std::vector<float>>> got(isas.size());  // [isa][shape·5 + tensor]
  for (size_t i = 0; i < isas.size(); ++i) {
    tp::cpu::set_attention_isa(isas[i]);
    for (const AttentionShape& sh : shapes) {
      const std::string tag = isas[i] + " " + attn_tag(sh);
      AttnCase c(sh);
      const Vec q = to_d(c.q), k = to_d(c.k), v = to_d(c.v);
      const AttnRef ref = attention_ref(q, k, v, sh);
      EXPECT_LE(rel_error(c.out.to_host(), to_f(ref.out)), kForwardTol) << tag;
      EXPECT_LE(rel_error(c.lse.to_host(), to_f(ref.lse)), kForwardTol) << tag;
      const std::vector<float> r = random_vector("R" + attn_tag(sh), c.Q.numel());
      Tensor dOut = on_device(c.Q.shape(), r);
      Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(c.K.shape(), kNaN),
             dV = filled(c.V.shape(), kNaN);
      device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.out, c.lse, sh);
      const AttnGrads want = attention_backward_ref(q, k, v, to_d(r), sh);
      // the same bound as the forward: an analytic reference, no finite differences
      EXPECT_LE(rel_error(dQ.to_host(), to_f(want.dq)), kForwardTol) << tag;
      EXPECT_LE(rel_error(dK.to_host(), to_f(want.dk)), kForwardTol) << tag;
      EXPECT_LE(rel_error(dV.to_host(), to_f(want.dv)), kForwardTol) << tag;
      // the cached forward of the last S − 3 positions gives the forward's rows
      const int64_t past = 3, n = sh.seq - past, qc = sh.heads * sh.head_dim;
      AttentionShape part = sh;
      part.seq = n;
      Tensor cached = filled(Shape{n * sh.batch, qc}, kNaN);
      device().attention_cached_forward(cached, c.Q.view(past * sh.batch, sh.seq * sh.batch), c.K,
                                        c.V, past, part);
      const std::vector<float> full = c.out.to_host();
      const std::vector<float> rows(full.begin() + past * sh.batch * qc, full.end());
      EXPECT_LE(rel_error(cached.to_host(), rows), kForwardTol) << tag << " cached";
      for (Tensor* t : {&c.out, &c.lse, &dQ, &dK, &dV}) got[i].push_back(t->to_host());
    }
  }
  // AVX-512 and AVX2 + FMA: each element is the same chain of fused multiply-adds.
  std::vector<size_t> fma;
  for (size_t i = 0; i < isas.size(); ++i)
    if (isas[i] != "base") fma.push_back(i);
  for (size_t f = 1; f < fma.size(); ++f)
    for (size_t t = 0; t < got[fma[0]].size(); ++t)
      EXPECT_EQ(got[fma[0]][t], got[fma[f]][t])
          << isas[fma[0]] << " vs " << isas[fma[f]] << ", tensor " << t;
}

// The forward and the cached forward, like the backward above, give the same bits on 1 and 2
// threads (one (b, j) pair runs whole on one thread).
TEST(KernelAttentionIsa, ForwardIsThreadIndependent) {
  const AttentionShape sh = attn_shape(64, 2, 4, 2, 16);
  AttnCase c(sh);
  std::vector<float> out[2], lse[2], cached[2];
  const int64_t past = 40, n = sh.seq - past, B = sh.batch;
  AttentionShape part = sh;
  part.seq = n;
  for (int t = 1; t <= 2; ++t)
    with_threads(t, [&] {
      Tensor o = filled(c.Q.shape(), kNaN), l = filled(c.lse.shape(), kNaN);
      device().attention_forward(o, l, c.Q, c.K, c.V, sh);
      Tensor oc = filled(Shape{n * B, sh.heads * sh.head_dim}, kNaN);
      device().attention_cached_forward(oc, c.Q.view(past * B, sh.seq * B), c.K, c.V, past, part);
      out[t - 1] = o.to_host();
      lse[t - 1] = l.to_host();
      cached[t - 1] = oc.to_host();
    });
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(lse[0], lse[1]);
  EXPECT_EQ(cached[0], cached[1]);
}

// The backward at S = 300, GQA: five key blocks (the last of 44 keys) and three query blocks
// (the last of 44 queries), neither a multiple of the blocks nor of the tiles, against the double
// reference.
TEST(KernelAttention, BackwardOverSeveralBlocksMatchesTheReference) {
  const AttentionShape sh = attn_shape(300, 1, 4, 2, 20);
  AttnCase c(sh);
  const std::vector<float> r = random_vector("R" + attn_tag(sh), c.Q.numel());
  Tensor dOut = on_device(c.Q.shape(), r);
  Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(c.K.shape(), kNaN),
         dV = filled(c.V.shape(), kNaN);
  device().attention_backward(dQ, dK, dV, dOut, c.Q, c.K, c.V, c.out, c.lse, sh);
  const AttnGrads want = attention_backward_ref(to_d(c.q), to_d(c.k), to_d(c.v), to_d(r), sh);
  EXPECT_LE(rel_error(dQ.to_host(), to_f(want.dq)), kForwardTol);
  EXPECT_LE(rel_error(dK.to_host(), to_f(want.dk)), kForwardTol);
  EXPECT_LE(rel_error(dV.to_host(), to_f(want.dv)), kForwardTol);
}

// Keys that no query sees (kv_seq = 300 against 100 queries at past 0: the key blocks from 128 on
// are skipped whole) get dk = dv = 0, and the rest is the self-attention of the first 100 keys.
TEST(KernelAttention, BackwardOfUnseenKeyBlocksIsZero) {
  const AttentionShape self = attn_shape(100, 2, 4, 2, 16);
  AttnCase c(self);
  const int64_t B = self.batch, kc = self.kv_heads * self.head_dim, keys = 300;
  AttentionShape sh = self;
  sh.kv_seq = keys;
  std::vector<float> k = random_vector("unseen_k", keys * B * kc);
  std::vector<float> v = random_vector("unseen_v", keys * B * kc);
  std::copy(c.k.begin(), c.k.end(), k.begin());  // the first 100 keys are the case's
  std::copy(c.v.begin(), c.v.end(), v.begin());
  Tensor K = on_device(Shape{keys * B, kc}, k), V = on_device(Shape{keys * B, kc}, v);
  Tensor dOut = on_device(c.Q.shape(), random_vector("unseen_dout", c.Q.numel()));
  Tensor dQ = filled(c.Q.shape(), kNaN), dK = filled(K.shape(), kNaN), dV = filled(V.shape(), kNaN);
  device().attention_backward(dQ, dK, dV, dOut, c.Q, K, V, c.out, c.lse, sh);
  Tensor sQ(device(), c.Q.shape()), sK(device(), c.K.shape()), sV(device(), c.V.shape());
  device().attention_backward(sQ, sK, sV, dOut, c.Q, c.K, c.V, c.out, c.lse, self);
  EXPECT_LE(rel_error(dQ.to_host(), sQ.to_host()), kForwardTol);
  const std::vector<float> gk = dK.to_host(), gv = dV.to_host();
  const size_t seen = static_cast<size_t>(self.seq * B * kc);
  EXPECT_LE(rel_error(std::vector<float>(gk.begin(), gk.begin() + seen), sK.to_host()),
            kForwardTol);
  EXPECT_LE(rel_error(std::vector<float>(gv.begin(), gv.begin() + seen), sV.to_host()),
            kForwardTol);
  EXPECT_EQ(std::vector<float>(gk.begin() + seen, gk.end()), std::vector<float>(gk.size() - seen));
  EXPECT_EQ(std::vector<float>(gv.begin() + seen, gv.end()), std::vector<float>(gv.size() - seen));
}

TEST(KernelAttentionIsa, UnknownVariantIsAnError) {
  EXPECT_THROW(tp::cpu::set_attention_isa("avx9000"), tp::Error);
}

}  // namespace
