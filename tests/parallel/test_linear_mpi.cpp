// test_linear_mpi.cpp — ColumnParallelLinear and RowParallelLinear at t = np against a single-device
// linear built from the same global weights (Y, dX, dW, db; with and without bias; non-square;
// gather_output / input_is_parallel on and off), Column → Row chained against the unsharded
// two-layer product, and the collectives the ledger records.
// Runs under mpirun -np 1, 2, 3, 4.
//
// Tolerance: relative error ‖got − want‖ / ‖want‖ ≤ 1e-5. The reference is computed on the host
// in double; the layers in float, with sums split over t ranks in a different order.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/host.h"
#include "parallel/linear.h"
#include "test_util.h"

namespace {

using namespace tp;
using namespace tp::testing;  // test_util.h, model_test_helpers.h

constexpr double kTol = 1e-5;
constexpr uint64_t kSeed = 2024;
const Distribution kInit = Distribution::normal(0.0f, 0.5f);

// The global parameter a layer initialises from (seed, name): what a single device would hold.
std::vector<float> global_param(const std::string& name, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  const RngKey key = RngKey::from(kSeed, name);
  for (int64_t i = 0; i < n; ++i) v[i] = random_value(key, i, kInit);
  return v;
}

std::vector<float> column_sums(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> s(static_cast<size_t>(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[c] += m[r * cols + c];
  return s;
}

// Single-device linear Y = XW + b and its gradients, on the host.
struct Reference {
  std::vector<float> y, dx, dw, db;
  Reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
            const std::vector<float>& dy, int64_t n, int64_t in, int64_t out) {
    y = host_matmul(x, w, n, in, out);
    if (!b.empty())
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < out; ++j) y[i * out + j] += b[j];
    dx = host_matmul(dy, host_transpose(w, in, out), n, out, in);
    dw = host_matmul(host_transpose(x, n, in), dy, in, n, out);
    db = column_sums(dy, n, out);
  }
};

// A layer's global inputs: W (in, out) and b (out; empty without bias) as layer `name` draws them
// at init, random X (n, in) and dY (n, out); and the single-device results from them.
struct LinearCase {
  std::vector<float> w, b, x, dy;
  Reference ref;
  LinearCase(const std::string& name, int64_t n, int64_t in, int64_t out, bool bias)
      : w(global_param(name + ".weight", in * out)),
        b(bias ? global_param(name + ".bias", out) : std::vector<float>{}),
        x(random_vector("x", n * in)),
        dy(random_vector("dy", n * out)),
        ref(x, w, b, dy, n, in, out) {}
};

class ColumnParallel : public ::testing::TestWithParam<std::tuple<Bias, ColumnOutput>> {};

TEST_P(ColumnParallel, MatchesSingleDevice) {
  const auto [bias_mode, output] = GetParam();
  const bool bias = bias_mode == Bias::With, gather = output == ColumnOutput::Gathered;
  const int t = world().size(), r = world().rank();
  const int64_t n = 3, in = 5, out = 12, c = out / t;  // non-square; out divisible by 1..4
  ColumnParallelLinear layer(device(), world(), "fc", in, out, bias_mode, output);
  layer.init(kSeed, kInit);
  const auto& [w, b, x, dy, ref] = LinearCase("fc", n, in, out, bias);

  Tensor y = layer.forward(Tensor::from_host(device(), Shape{n, in}, x));
  const auto dy_in = gather ? dy : host_block(dy, out, 0, n, r * c, c);
  Tensor dx =
      layer.backward(Tensor::from_host(device(), gather ? Shape{n, out} : Shape{n, c}, dy_in));

  EXPECT_EQ(layer.weight.to_host(), host_block(w, out, 0, in, r * c, c));  // bit-identical init
  EXPECT_LE(rel_error(y.to_host(), gather ? ref.y : host_block(ref.y, out, 0, n, r * c, c)), kTol);
  EXPECT_LE(rel_error(dx.to_host(), ref.dx), kTol);
  EXPECT_LE(rel_error(layer.dweight.to_host(), host_block(ref.dw, out, 0, in, r * c, c)), kTol);
  if (bias) {
    EXPECT_LE(rel_error(layer.dbias.to_host(), host_block(ref.db, out, 0, 1, r * c, c)), kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(BiasAndGather, ColumnParallel,
                         ::testing::Combine(::testing::Values(Bias::Without, Bias::With),
                                            ::testing::Values(ColumnOutput::Split,
                                                              ColumnOutput::Gathered)));

class RowParallel : public ::testing::TestWithParam<std::tuple<Bias, RowInput>> {};

TEST_P(RowParallel, MatchesSingleDevice) {
  const auto [bias_mode, input] = GetParam();
  const bool bias = bias_mode == Bias::With, input_is_parallel = input == RowInput::Split;
  const int t = world().size(), r = world().rank();
  const int64_t n = 3, in = 12, out = 5, k = in / t;
  RowParallelLinear layer(device(), world(), "proj", in, out, bias_mode, input);
  layer.init(kSeed, kInit);
  const auto& [w, b, x, dy, ref] = LinearCase("proj", n, in, out, bias);

  const auto x_in = input_is_parallel ? host_block(x, in, 0, n, r * k, k) : x;
  Tensor y = layer.forward(Tensor::from_host(device(), Shape{n, input_is_parallel ? k : in}, x_in));
  Tensor dx = layer.backward(Tensor::from_host(device(), Shape{n, out}, dy));

  EXPECT_EQ(layer.weight.to_host(), host_block(w, out, r * k, k, 0, out));  // bit-identical init
  EXPECT_LE(rel_error(y.to_host(), ref.y), kTol);
  EXPECT_LE(
      rel_error(dx.to_host(), input_is_parallel ? host_block(ref.dx, in, 0, n, r * k, k) : ref.dx),
      kTol);
  EXPECT_LE(rel_error(layer.dweight.to_host(), host_block(ref.dw, out, r * k, k, 0, out)), kTol);
  if (bias) {
    EXPECT_LE(rel_error(layer.dbias.to_host(), ref.db), kTol);  // replicated: whole db everywhere
  }
}

INSTANTIATE_TEST_SUITE_P(BiasAndInputSplit, RowParallel,
                         ::testing::Combine(::testing::Values(Bias::Without, Bias::With),
                                            ::testing::Values(RowInput::Whole, RowInput::Split)));

// Column (h → ffn) then Row (ffn → h): Z = (X A + a) B + b, with one all-reduce forward (g) and one
// backward (f), each of N·h elements.
TEST(ColumnThenRow, EqualsTheUnshardedTwoLayerProduct) {
  const int t = world().size(), r = world().rank();
  const int64_t n = 4, h = 6, ffn = 12, f = ffn / t;
  ColumnParallelLinear fc1(device(), world(), "fc1", h, ffn, Bias::With, ColumnOutput::Split);
  RowParallelLinear fc2(device(), world(), "fc2", ffn, h, Bias::With, RowInput::Split);
  fc1.init(kSeed, kInit);
  fc2.init(kSeed, kInit);
  const auto A = global_param("fc1.weight", h * ffn), a = global_param("fc1.bias", ffn);
  const auto B = global_param("fc2.weight", ffn * h), b = global_param("fc2.bias", h);
  const auto x = random_vector("x", n * h), dz = random_vector("dz", n * h);
  const std::vector<float> no_grad(static_cast<size_t>(n * ffn), 0.0f);
  const auto u = Reference(x, A, a, no_grad, n, h, ffn).y;  // U = XA + a
  const Reference second(u, B, b, dz, n, ffn, h);           // Z, dU, dB, db
  const Reference first(x, A, a, second.dx, n, h, ffn);     // dX, dA, da

  CommLedger& ledger = world().ledger();
  size_t mark = ledger.size();
  Tensor z = fc2.forward(fc1.forward(Tensor::from_host(device(), Shape{n, h}, x)));
  const auto fwd = std::vector<CommRecord>(ledger.records().begin() + mark, ledger.records().end());
  mark = ledger.size();
  Tensor dx = fc1.backward(fc2.backward(Tensor::from_host(device(), Shape{n, h}, dz)));
  const auto bwd = std::vector<CommRecord>(ledger.records().begin() + mark, ledger.records().end());

  EXPECT_LE(rel_error(z.to_host(), second.y), kTol);
  EXPECT_LE(rel_error(dx.to_host(), first.dx), kTol);
  EXPECT_LE(rel_error(fc1.dweight.to_host(), host_block(first.dw, ffn, 0, h, r * f, f)), kTol);
  EXPECT_LE(rel_error(fc1.dbias.to_host(), host_block(first.db, ffn, 0, 1, r * f, f)), kTol);
  EXPECT_LE(rel_error(fc2.dweight.to_host(), host_block(second.dw, h, r * f, f, 0, h)), kTol);
  EXPECT_LE(rel_error(fc2.dbias.to_host(), second.db), kTol);

  if (t == 1) {  // the region ops bypass communication at t = 1
    EXPECT_TRUE(fwd.empty());
    EXPECT_TRUE(bwd.empty());
  } else {
    ASSERT_EQ(fwd.size(), 1u);
    EXPECT_EQ(fwd[0].op, "all_reduce");
    EXPECT_EQ(fwd[0].elements, n * h);
    EXPECT_EQ(fwd[0].label, "reduce_from_tp_region.forward");
    ASSERT_EQ(bwd.size(), 1u);
    EXPECT_EQ(bwd[0].op, "all_reduce");
    EXPECT_EQ(bwd[0].elements, n * h);
    EXPECT_EQ(bwd[0].label, "copy_to_tp_region.backward");
  }
}

TEST(ParallelLinear, GradientsAccumulateUntilZeroed) {
  const int64_t n = 2, in = 4, out = 4 * 3;
  ColumnParallelLinear layer(device(), world(), "acc", in, out, Bias::With, ColumnOutput::Gathered);
  layer.init(kSeed, kInit);
  Tensor x = Tensor::from_host(device(), Shape{n, in}, random_vector("x", n * in));
  Tensor dy = Tensor::from_host(device(), Shape{n, out}, random_vector("dy", n * out));
  layer.forward(x);
  layer.backward(dy);
  const auto once = layer.dweight.to_host();
  layer.backward(dy);
  auto twice = once;
  for (float& v : twice) v *= 2;
  EXPECT_LE(rel_error(layer.dweight.to_host(), twice), 1e-6);
  layer.zero_grad();
  for (float v : layer.dweight.to_host()) EXPECT_EQ(v, 0.0f);
}

TEST(ParallelLinear, NonDivisibleSizesAreBadInput) {
  const int t = world().size();
  if (t == 1) GTEST_SKIP() << "every size is divisible by t = 1";
  const int64_t bad = 4 * t + 1;  // never divisible by t ≥ 2
  try {
    ColumnParallelLinear layer(device(), world(), "fc1", 4, bad, Bias::With, ColumnOutput::Split);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string want =
        "fc1.out=" + std::to_string(bad) + " is not divisible by t=" + std::to_string(t);
    EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
  }
  EXPECT_THROW(RowParallelLinear(device(), world(), "fc2", bad, 4, Bias::With, RowInput::Split),
               Error);
}

}  // namespace
