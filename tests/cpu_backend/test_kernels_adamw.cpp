// test_kernels_adamw.cpp — the CPU AdamW step (cpu_backend/kernels/adamw.cpp): step one is sign
// descent, two steps match the documented update in double (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

// ---- optimizer --------------------------------------------------------------------------------

TEST(KernelAdamW, StepOneIsSignDescentWithoutDecay) {
  // m̂ = g, v̂ = g² at step 1, so the update is lr · g / (|g| + eps) ≈ lr · sign(g).
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f}, g = {0.3f, -4.0f, 1e-3f};
  Tensor P = on_device(Shape{3}, p0), G = on_device(Shape{3}, g);
  Tensor M = filled(Shape{3}, 0.0f), V = filled(Shape{3}, 0.0f);
  tp::AdamWParams hp;
  hp.lr = 0.1f;
  device().adamw_step(P, G, M, V, hp, 1);
  const auto p = P.to_host();
  EXPECT_NEAR(p[0], 0.9f, 1e-6);
  EXPECT_NEAR(p[1], -1.9f, 1e-6);
  EXPECT_NEAR(p[2], 0.4f, 1e-5);  // g = 1e-3: eps = 1e-8 shifts the step by 1e-6 relative
}

TEST(KernelAdamW, TwoStepsMatchHandComputation) {
  const int64_t n = 11;
  const auto p0 = random_vector("adam_p", n), g1 = random_vector("adam_g1", n),
             g2 = random_vector("adam_g2", n);
  tp::AdamWParams hp;
  hp.lr = 0.01f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  Tensor P = on_device(Shape{n}, p0), M = filled(Shape{n}, 0.0f), V = filled(Shape{n}, 0.0f);
  Tensor G1 = on_device(Shape{n}, g1), G2 = on_device(Shape{n}, g2);
  device().adamw_step(P, G1, M, V, hp, 1);
  device().adamw_step(P, G2, M, V, hp, 2);

  // The documented update in double, with the float hyper-parameters.
  Vec p = to_d(p0), m(n, 0.0), v(n, 0.0);
  const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.weight_decay;
  for (int step = 1; step <= 2; ++step) {
    const auto& g = step == 1 ? g1 : g2;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double{hp.grad_scale} * g[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, step)), vhat = v[i] / (1 - std::pow(b2, step));
      p[i] -= lr * mhat / (std::sqrt(vhat) + hp.eps) + lr * wd * p[i];
    }
  }
  // Compare the change in p (≈ 2 lr), not p itself, so an error in the update is not hidden by p.
  const auto got = P.to_host();
  Vec got_delta(n), want_delta(n);
  for (int64_t i = 0; i < n; ++i) {
    got_delta[i] = got[i] - static_cast<double>(p0[i]);
    want_delta[i] = p[i] - p0[i];
  }
  EXPECT_LE(rel_error(to_f(got_delta), to_f(want_delta)), 1e-4);  // p − p0 loses ~7 bits to float p
  EXPECT_LE(rel_error(M.to_host(), to_f(m)), kForwardTol);
  EXPECT_LE(rel_error(V.to_host(), to_f(v)), kForwardTol);
}

}  // namespace
