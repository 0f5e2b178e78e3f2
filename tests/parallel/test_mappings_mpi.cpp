// test_mappings_mpi.cpp — the seven region ops, forward and backward, against closed-form answers built
// from one global tensor G (s × h, G[i][j] = 100 i + j), and the collectives each op records.
// Runs under mpirun -np 1, 2, 3, 4. Values are small integers, so equality is exact.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "core/host.h"
#include "parallel/mappings.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

struct Global {
  int t = world().size(), r = world().rank();
  int64_t s = 2 * t, h = 3 * t;  // both divisible by t
  std::vector<float> g;          // G, row-major s × h
  Global() {
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < h; ++j) g.push_back(static_cast<float>(100 * i + j));
  }
  Tensor full(float scale = 1.0f) const {
    std::vector<float> v = g;
    for (float& x : v) x *= scale;
    return Tensor::from_host(device(), Shape{s, h}, v);
  }
  std::vector<float> cols(int rank, float scale = 1.0f) const {  // rank's h/t columns
    auto v = host_block(g, h, 0, s, rank * (h / t), h / t);
    for (float& x : v) x *= scale;
    return v;
  }
  std::vector<float> rows(int rank, float scale = 1.0f) const {  // rank's s/t rows
    auto v = host_block(g, h, rank * (s / t), s / t, 0, h);
    for (float& x : v) x *= scale;
    return v;
  }
  Tensor local_cols() const { return Tensor::from_host(device(), Shape{s, h / t}, cols(r)); }
  Tensor local_rows() const { return Tensor::from_host(device(), Shape{s / t, h}, rows(r)); }
  float triangle() const { return static_cast<float>(t * (t + 1) / 2); }  // Σ_r (r + 1)
};

// Runs `op` and checks that it recorded exactly `ops` on the world ledger (none at t = 1).
void expect_comm(const std::function<void()>& op, const std::vector<std::string>& ops) {
  const size_t before = world().ledger().size();
  op();
  std::vector<std::string> got;
  for (size_t i = before; i < world().ledger().size(); ++i)
    got.push_back(world().ledger().records()[i].op);
  EXPECT_EQ(got, world().size() == 1 ? std::vector<std::string>{} : ops);
}

TEST(Mappings, CopyToTpRegion_f) {
  Global S;
  expect_comm([&] { EXPECT_EQ(copy_to_tp_region_forward(world(), S.full()).to_host(), S.g); }, {});
  // Backward sums every rank's partial gradient: Σ_r (r + 1) G.
  expect_comm(
      [&] {
    EXPECT_EQ(copy_to_tp_region_backward(world(), S.full(S.r + 1.0f)).to_host(),
              S.full(S.triangle()).to_host());
      },
      {"all_reduce"});
}

TEST(Mappings, ReduceFromTpRegion_g) {
  Global S;
  expect_comm(
      [&] {
    EXPECT_EQ(reduce_from_tp_region_forward(world(), S.full(S.r + 1.0f)).to_host(),
              S.full(S.triangle()).to_host());
      },
      {"all_reduce"});
  expect_comm([&] { EXPECT_EQ(reduce_from_tp_region_backward(world(), S.full()).to_host(), S.g); },
              {});
}

TEST(Mappings, ScatterToTpRegion) {
  Global S;
  expect_comm(
      [&] {
    Tensor y = scatter_to_tp_region_forward(world(), S.full());
    EXPECT_EQ(y.shape(), (Shape{S.s, S.h / S.t}));
    EXPECT_EQ(y.to_host(), S.cols(S.r));
      },
      {});
  expect_comm(
      [&] { EXPECT_EQ(scatter_to_tp_region_backward(world(), S.local_cols()).to_host(), S.g); },
      {"all_gather"});
}

TEST(Mappings, GatherFromTpRegion) {
  Global S;
  expect_comm(
      [&] { EXPECT_EQ(gather_from_tp_region_forward(world(), S.local_cols()).to_host(), S.g); },
      {"all_gather"});
  expect_comm(
      [&] { EXPECT_EQ(gather_from_tp_region_backward(world(), S.full()).to_host(), S.cols(S.r)); },
      {});
}

TEST(Mappings, LastDimOpsSeeLeadingDimsAsRows) {
  // (2, t, h) splits along h exactly like the 2-D (2t, h) matrix.
  Global S;
  Tensor x3 = S.full().reshape(Shape{2, S.t, S.h});
  Tensor y = scatter_to_tp_region_forward(world(), x3);
  EXPECT_EQ(y.shape(), (Shape{2, S.t, S.h / S.t}));
  EXPECT_EQ(y.to_host(), S.cols(S.r));
  EXPECT_EQ(gather_from_tp_region_forward(world(), y).shape(), (Shape{2, S.t, S.h}));
}

TEST(Mappings, ScatterToSpRegion) {
  Global S;
  expect_comm(
      [&] { EXPECT_EQ(scatter_to_sp_region_forward(world(), S.full()).to_host(), S.rows(S.r)); },
      {});
  expect_comm(
      [&] { EXPECT_EQ(scatter_to_sp_region_backward(world(), S.local_rows()).to_host(), S.g); },
      {"all_gather"});
}

TEST(Mappings, GatherFromSpRegion) {
  Global S;
  expect_comm(
      [&] { EXPECT_EQ(gather_from_sp_region_forward(world(), S.local_rows()).to_host(), S.g); },
      {"all_gather"});
  // Backward: every rank used the whole sequence; its block's gradient is the sum over ranks.
  expect_comm(
      [&] {
    EXPECT_EQ(gather_from_sp_region_backward(world(), S.full(S.r + 1.0f)).to_host(),
              S.rows(S.r, S.triangle()));
      },
      {"reduce_scatter"});
}

TEST(Mappings, ReduceScatterToSpRegion) {
  Global S;
  expect_comm(
      [&] {
    EXPECT_EQ(reduce_scatter_to_sp_region_forward(world(), S.full(S.r + 1.0f)).to_host(),
              S.rows(S.r, S.triangle()));
      },
      {"reduce_scatter"});
  expect_comm(
      [&] {
    EXPECT_EQ(reduce_scatter_to_sp_region_backward(world(), S.local_rows()).to_host(), S.g);
      },
      {"all_gather"});
}

TEST(Mappings, AllReduceEqualsReduceScatterThenAllGather) {
  Global S;
  Tensor a = reduce_from_tp_region_forward(world(), S.full(S.r + 1.0f));
  Tensor b = reduce_scatter_to_sp_region_backward(
      world(), reduce_scatter_to_sp_region_forward(world(), S.full(S.r + 1.0f)));
  EXPECT_EQ(a.to_host(), b.to_host());
}

TEST(Mappings, NonDivisibleSizesAreBadInputNamingTheDimension) {
  const int t = world().size();
  if (t == 1) GTEST_SKIP() << "every size is divisible by t = 1";
  Tensor odd_cols(device(), Shape{2, 2 * t + 1});
  Tensor odd_rows(device(), Shape{2 * t + 1, 3});
  try {
    scatter_to_tp_region_forward(world(), odd_cols);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("the last dimension=" + std::to_string(2 * t + 1) +
                                         " is not divisible by t=" + std::to_string(t)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(scatter_to_sp_region_forward(world(), odd_rows), Error);
  EXPECT_THROW(reduce_scatter_to_sp_region_forward(world(), odd_rows), Error);
}

}  // namespace
