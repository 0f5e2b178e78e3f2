// test_cpu_device.cpp — what the CPU device does itself rather than in a kernels/ file
// (cpu_backend/cpu_device.cpp): the column copy, within one tensor only without overlap, and the
// cache of freed blocks, reused by size and capped (serial).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cpu_backend/kernel_test_util.h"
#include "cpu_device.h"
#include "test_util.h"

namespace {

using tp::Shape;
using tp::Tensor;
using namespace tp::testing;  // test_util.h, cpu_backend/kernel_test_util.h

TEST(KernelCopyColumns, WithinOneTensorOnlyWhenTheColumnsDoNotOverlap) {
  const auto v = random_vector("cols_v", 24);
  Tensor X = on_device(Shape{3, 8}, v);
  device().copy_columns(X, 0, X, 5, 3);  // columns 0..2 → 5..7 of the same rows: allowed
  auto want = v;
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 3; ++j) want[r * 8 + 5 + j] = v[r * 8 + j];
  EXPECT_EQ(X.to_host(), want);
  EXPECT_THROW(device().copy_columns(X, 0, X, 2, 4), tp::Error);  // columns 0..3 and 2..5 overlap
  Tensor Y = X.view(1, 3);  // rows 1..2 of X: the same memory, other rows
  EXPECT_THROW(device().copy_columns(X.view(0, 2), 0, Y, 0, 8), tp::Error);
}

// ---- the CPU device's memory --------------------------------------------------------------------

// A freed block comes back for the next allocation of its (64-byte rounded) size, 64-byte aligned;
// the cache holds at most max(64 MiB, the most bytes handed out at once), giving back other sizes'
// blocks first.
TEST(CpuDeviceMemory, AFreedBlockIsReusedForItsSizeAndTheCacheIsCapped) {
  tp::CpuDevice dev;
  void* a = dev.allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  dev.deallocate(a);
  EXPECT_EQ(dev.cached_bytes(), 1024u);
  void* b = dev.allocate(1000);
  EXPECT_EQ(b, a);
  EXPECT_EQ(dev.cached_bytes(), 0u);
  void* c = dev.allocate(5000);  // another size: a new block
  EXPECT_NE(c, b);
  dev.deallocate(b);
  dev.deallocate(c);
  EXPECT_EQ(dev.cached_bytes(), 1024u + 5056u);

  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<void*> big;
  for (int i = 0; i < 3; ++i) big.push_back(dev.allocate(40 * kMiB));  // 120 MiB at once: the cap
  for (void* p : big) dev.deallocate(p);
  EXPECT_EQ(dev.cached_bytes(), 120 * kMiB)
      << "the small blocks are given back to make room for the third big one";
  void* d = dev.allocate(kMiB);
  dev.deallocate(d);  // 121 MiB would exceed the cap: a 40 MiB block is given back
  EXPECT_EQ(dev.cached_bytes(), 81 * kMiB);
}

}  // namespace
