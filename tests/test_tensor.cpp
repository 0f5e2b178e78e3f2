// test_tensor.cpp — Shape, Tensor views and copies, the divisibility message (serial).
#include <gtest/gtest.h>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;

TEST(Shape, SizesAndTwoDimensionalView) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.cols(), 4);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(s.with(0, 5), (Shape{5, 3, 4}));
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
}

TEST(Tensor, HostRoundTripViewReshapeClone) {
  Tensor t = Tensor::from_host(device(), Shape{3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.to_host(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor v = t.view(1, 3);  // rows 1..2, shares memory
  EXPECT_EQ(v.shape(), (Shape{2, 2}));
  EXPECT_EQ(v.to_host(), (std::vector<float>{3, 4, 5, 6}));
  Tensor c = t.clone();
  device().fill(v, 0.0f);
  EXPECT_EQ(t.to_host(), (std::vector<float>{1, 2, 0, 0, 0, 0}));
  EXPECT_EQ(c.to_host(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.reshape(Shape{6}).shape(), (Shape{6}));
  EXPECT_THROW(t.reshape(Shape{4}), Error);
  EXPECT_THROW(t.view(2, 4), Error);
  EXPECT_THROW(t.copy_from_host({1, 2}), Error);
}

TEST(Tensor, ElementwiseAndLayoutKernels) {
  Tensor y = Tensor::from_host(device(), Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor x = Tensor::from_host(device(), Shape{2, 3}, {1, 1, 1, 1, 1, 1});
  device().axpy(2.0f, x, y);
  device().scale(y, 0.5f);
  EXPECT_EQ(y.to_host(), (std::vector<float>{1.5, 2, 2.5, 3, 3.5, 4}));
  Tensor b = Tensor::from_host(device(), Shape{3}, {10, 20, 30});
  device().add_bias(y, b);
  EXPECT_EQ(y.to_host(), (std::vector<float>{11.5, 22, 32.5, 13, 23.5, 34}));
  Tensor db = Tensor::zeros(device(), Shape{3});
  device().add_bias_backward(db, y);
  device().add_bias_backward(db, y);  // accumulates
  EXPECT_EQ(db.to_host(), (std::vector<float>{49, 91, 133}));
  Tensor dst = Tensor::zeros(device(), Shape{2, 4});
  device().copy_columns(y, 1, dst, 2, 2);
  EXPECT_EQ(dst.to_host(), (std::vector<float>{0, 0, 22, 32.5, 0, 0, 23.5, 34}));
}

TEST(CheckDivisible, MessageNamesValueTAndChoices) {
  EXPECT_NO_THROW(check_divisible("out", 12, 3));
  try {
    check_divisible("out", 7, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(
        std::string(e.what()),
        "out=7 is not divisible by t=3 (the number of ranks); run with t in {1, 7} or change out");
  }
}

}  // namespace
