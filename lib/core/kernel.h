// kernel.h — the one list of the Device's kernels: `enum class Kernel`, each kernel's name, and
// KernelSet, a set of them.
//
// A kernel is named in many places: the front's checks and error lines ("cpu: adamw_step has no
// bf16 kernel"), the timeline's spans (observe/timeline.h, what --trace writes and
// scripts/bench.py groups), a backend's answer to which kernels it takes in bf16
// (Device::takes_bf16, native_bf16) and the model's list of the kernels a bf16 step calls
// (model/gpt.cpp). Each of them names it by this enum; the string is made here once, from the
// list below, so a kernel added to the Device is added to every one of those places by adding one
// line. scripts/bench.py reads the names from this file too (the X(...) lines).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tp {

// X(name) for every public Device kernel, in core/device.h's order. The name is the public method's
// and the span's; gemm_packed records its span as gemm (the same GEMM, another B layout).
#define TP_KERNELS(X)         \
  X(convert)                  \
  X(fill)                     \
  X(scale)                    \
  X(axpy)                     \
  X(gemm)                     \
  X(pack_gemm_b)              \
  X(add_bias)                 \
  X(add_bias_backward)        \
  X(copy_columns)             \
  X(fill_random)              \
  X(mul)                      \
  X(sum_squares)              \
  X(dropout_mask)             \
  X(gelu_forward)             \
  X(gelu_backward)            \
  X(bias_gelu_forward)        \
  X(bias_gelu_backward)       \
  X(swiglu_forward)           \
  X(swiglu_backward)          \
  X(layernorm_forward)        \
  X(layernorm_backward)       \
  X(rmsnorm_forward)          \
  X(rmsnorm_backward)         \
  X(add_layernorm_forward)    \
  X(add_rmsnorm_forward)      \
  X(layernorm_backward_add)   \
  X(rmsnorm_backward_add)     \
  X(attention_forward)        \
  X(attention_backward)       \
  X(attention_merge)          \
  X(attention_cached_forward) \
  X(embedding_shard_forward)  \
  X(embedding_shard_backward) \
  X(position_forward)         \
  X(position_backward)        \
  X(vocab_max)                \
  X(vocab_sum_exp_target)     \
  X(vocab_loss)               \
  X(vocab_softmax_backward)   \
  X(adamw_step)

/// A Device kernel (core/device.h): Kernel::gemm is Device::gemm.
enum class Kernel : uint8_t {
#define TP_KERNEL_ENUM(name) name,
  TP_KERNELS(TP_KERNEL_ENUM)
#undef TP_KERNEL_ENUM
};

/// How many kernels the list holds.
inline constexpr size_t kKernelCount = 0
#define TP_KERNEL_COUNT(name) +1
    TP_KERNELS(TP_KERNEL_COUNT)
#undef TP_KERNEL_COUNT
    ;

/// Every kernel, in the list's order (for a loop over them all).
inline constexpr Kernel kAllKernels[] = {
#define TP_KERNEL_ITEM(name) Kernel::name,
    TP_KERNELS(TP_KERNEL_ITEM)
#undef TP_KERNEL_ITEM
};

/// The kernel's name, the public method's: "layernorm_forward". A string literal (static storage).
constexpr const char* kernel_name(Kernel k) {
  constexpr const char* kNames[] = {
#define TP_KERNEL_NAME(name) #name,
      TP_KERNELS(TP_KERNEL_NAME)
#undef TP_KERNEL_NAME
  };
  return kNames[static_cast<size_t>(k)];
}

/// A set of kernels, written as a list: KernelSet{Kernel::gemm, Kernel::axpy}.
class KernelSet {
 public:
  static_assert(kKernelCount <= 64, "KernelSet holds its kernels in 64 bits");
  constexpr KernelSet() = default;
  constexpr KernelSet(std::initializer_list<Kernel> kernels) {
    for (const Kernel k : kernels) bits_ |= bit(k);
  }
  constexpr bool contains(Kernel k) const { return (bits_ & bit(k)) != 0; }

 private:
  static constexpr uint64_t bit(Kernel k) { return uint64_t{1} << static_cast<unsigned>(k); }
  uint64_t bits_ = 0;
};

}  // namespace tp
