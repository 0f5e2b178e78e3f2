// test_device_checks.cpp — the checks belong to tp::Device, not to a backend (core/device.cpp,
// core/kernel_checks.h): a device whose do_* methods check nothing still rejects bad arguments
// before any do_* runs, and gets what the checks worked out (serial).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "test_util.h"

namespace {

using tp::AdamWParams;
using tp::AttentionShape;
using tp::Distribution;
using tp::GemmDims;
using tp::GlobalIndex;
using tp::RngKey;
using tp::Shape;
using tp::Tensor;
using tp::VocabShard;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h (filled)

// A backend that checks nothing: host memory, and every do_* only records that it ran. If the
// public kernels did not check, bad arguments would reach it. `host_accessible` picks how the base
// reads ids for their check: in place, or through copy_to_host.
class RecordingDevice final : public tp::Device {
 public:
  explicit RecordingDevice(bool host_accessible) : host_(host_accessible) {}
  int calls = 0;                // do_* calls so far
  GemmDims dims;                // what the last do_gemm was given
  int64_t real_cols = -1;       // ... do_vocab_max
  std::vector<float> host_ids;  // ... do_embedding_shard_backward (numel of ids of them)

  std::string name() const override { return "recording"; }
  bool host_accessible() const override { return host_; }
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* ptr) override { std::free(ptr); }
  void copy_from_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { std::memmove(d, s, n); }
  void synchronize() override {}

 protected:
  void do_fill(Tensor&, float) override { ++calls; }
  void do_scale(Tensor&, float) override { ++calls; }
  void do_axpy(float, const Tensor&, Tensor&) override { ++calls; }
  void do_gemm(bool, bool, float, const Tensor&, const Tensor&, float, Tensor&,
               const GemmDims& d) override {
    ++calls;
    dims = d;
  }
  void do_add_bias(Tensor&, const Tensor&) override { ++calls; }
  void do_add_bias_backward(Tensor&, const Tensor&) override { ++calls; }
  void do_copy_columns(const Tensor&, int64_t, Tensor&, int64_t, int64_t) override { ++calls; }
  void do_fill_random(Tensor&, const RngKey&, const GlobalIndex&, const Distribution&) override {
    ++calls;
  }
  void do_mul(const Tensor&, const Tensor&, Tensor&) override { ++calls; }
  double do_sum_squares(const Tensor&) override { return ++calls; }
  void do_dropout_mask(Tensor&, const RngKey&, const GlobalIndex&, float) override { ++calls; }
  void do_gelu_forward(Tensor&, const Tensor&) override { ++calls; }
  void do_gelu_backward(Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void do_swiglu_forward(Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void do_swiglu_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    ++calls;
  }
  void do_layernorm_forward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            float) override {
    ++calls;
  }
  void do_layernorm_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&) override {
    ++calls;
  }
  void do_rmsnorm_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, float) override {
    ++calls;
  }
  void do_rmsnorm_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&) override {
    ++calls;
  }
  void do_attention_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const AttentionShape&) override {
    ++calls;
  }
  void do_attention_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Tensor&,
                             const AttentionShape&) override {
    ++calls;
  }
  void do_attention_merge(Tensor&, Tensor&, const Tensor&, const Tensor&,
                          const AttentionShape&) override {
    ++calls;
  }
  void do_attention_cached_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                   const AttentionShape&) override {
    ++calls;
  }
  void do_embedding_shard_forward(Tensor&, const Tensor&, const Tensor&, int64_t) override {
    ++calls;
  }
  void do_embedding_shard_backward(Tensor&, const Tensor&, const Tensor& ids, int64_t,
                                   const float* host) override {
    ++calls;
    host_ids.assign(host, host + ids.numel());
  }
  void do_position_forward(Tensor&, const Tensor&, int64_t, int64_t) override { ++calls; }
  void do_position_backward(Tensor&, const Tensor&, int64_t, int64_t) override { ++calls; }
  void do_vocab_max(Tensor&, const Tensor&, const VocabShard&, int64_t real) override {
    ++calls;
    real_cols = real;
  }
  void do_vocab_sum_exp_target(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const VocabShard&, int64_t) override {
    ++calls;
  }
  void do_vocab_loss(Tensor&, const Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void do_vocab_softmax_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const VocabShard&, float, int64_t) override {
    ++calls;
  }
  void do_adamw_step(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&,
                     int64_t) override {
    ++calls;
  }

 private:
  bool host_;
};

TEST(DeviceChecks, EveryKernelRejectsATensorOfAnotherDeviceBeforeTheBackendRuns) {
  RecordingDevice dev(true);
  Tensor x(dev, Shape{2, 4});
  Tensor other = filled(Shape{2, 4}, 0.0f);  // on the tests' CPU device
  const RngKey key = RngKey::from(1, "checks");
  const GlobalIndex index = GlobalIndex::whole(4);
  const AttentionShape sh{2, 1, 1, 1, 4, 0.5f};
  const VocabShard shard{0, 4};
  const std::vector<std::function<void()>> kernels = {
      [&] {
    dev.fill(other, 1.0f);
      },
      [&] {
    dev.scale(other, 2.0f);
  },
                                           [&] {
    dev.axpy(1.0f, other, x);
  },
      [&] { dev.gemm(false, true, 1.0f, other, x, 0.0f, x); }, [&] { dev.add_bias(x, other); },
      [&] { dev.add_bias_backward(other, x); }, [&] { dev.copy_columns(other, 0, x, 0, 4); },
      [&] { dev.fill_random(other, key, index, Distribution::uniform(0.0f, 1.0f)); },
      [&] { dev.mul(x, other, x); }, [&] { dev.sum_squares(other); },
      [&] { dev.dropout_mask(other, key, index, 0.1f); }, [&] { dev.gelu_forward(x, other); },
      [&] { dev.gelu_backward(x, x, other); }, [&] { dev.swiglu_forward(x, x, other); },
      [&] { dev.bias_gelu_forward(x, other, x); },
      [&] { dev.bias_gelu_backward(x, x, x, other, x); },
      [&] { dev.swiglu_backward(x, x, x, x, other); },
      [&] { dev.layernorm_forward(x, x, x, x, x, other, 1e-5f); },
      [&] { dev.layernorm_backward(x, x, x, x, x, x, x, other); },
      [&] { dev.rmsnorm_forward(x, x, other, x, 1e-5f); },
      [&] { dev.rmsnorm_backward(x, x, x, x, x, other); },
      [&] { dev.attention_forward(x, x, other, x, x, sh); },
      [&] { dev.attention_backward(x, x, x, x, x, x, x, x, other, sh); },
      [&] { dev.attention_cached_forward(x, x, x, other, 0, sh); },
      [&] { dev.embedding_shard_forward(x, other, x, 0); },
      [&] { dev.embedding_shard_backward(x, x, other, 0); },
      [&] { dev.position_forward(x, other, 1, 0); }, [&] { dev.position_backward(other, x, 1, 0); },
      [&] { dev.vocab_max(x, other, shard); },
      [&] { dev.vocab_sum_exp_target(x, x, x, x, other, shard); },
      [&] { dev.vocab_loss(x, x, x, other); },
      [&] { dev.vocab_softmax_backward(x, x, x, x, other, shard, 1.0f); },
      [&] { dev.adamw_step(x, x, x, other, AdamWParams{}, 1); },
      };
  dev.fill(x, 0.0f);  // a good call reaches the backend
  ASSERT_EQ(dev.calls, 1);
  for (size_t i = 0; i < kernels.size(); ++i) {
    try {
      kernels[i]();
      ADD_FAILURE() << "kernel " << i << " accepted a tensor of another device";
    } catch (const tp::Error& e) {
      EXPECT_NE(std::string(e.what()).find("lives on another device"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(dev.calls, 1) << "a kernel reached its do_* with a tensor of another device";
}

TEST(DeviceChecks, TheBackendGetsWhatTheCheckWorkedOut) {
  for (const bool host : {true, false}) {  // ids read in place, or copied with copy_to_host
    RecordingDevice dev(host);
    Tensor a(dev, Shape{3, 2}), b(dev, Shape{5, 3}), c(dev, Shape{2, 5});
    dev.gemm(true, true, 1.0f, a, b, 0.0f, c);  // C (2×5) = Aᵀ (2×3) · Bᵀ (3×5)
    EXPECT_EQ(dev.dims.m, 2);
    EXPECT_EQ(dev.dims.n, 5);
    EXPECT_EQ(dev.dims.k, 3);

    Tensor logits(dev, Shape{2, 4}), row_max(dev, Shape{2});
    dev.vocab_max(row_max, logits, VocabShard{8, 11});  // ids 8..11, of which 8..10 are tokens
    EXPECT_EQ(dev.real_cols, 3);

    const std::vector<float> ids = {3.0f, 0.0f, 3.0f};
    Tensor Ids = Tensor::from_host(dev, Shape{3}, ids);
    Tensor dwte(dev, Shape{4, 2}), dout(dev, Shape{3, 2});
    dev.embedding_shard_backward(dwte, dout, Ids, 0);
    EXPECT_EQ(dev.host_ids, ids);
    EXPECT_EQ(dev.calls, 3);

    Tensor bad = Tensor::from_host(dev, Shape{3}, {3.0f, 0.5f, 1.0f});  // 0.5 is not a token
    EXPECT_THROW(dev.embedding_shard_backward(dwte, dout, bad, 0), tp::Error);
    EXPECT_EQ(dev.calls, 3);
  }
}

}  // namespace
