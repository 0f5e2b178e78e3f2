// tensor.h — Shape and Tensor: f32 or bf16 (core/dtype.h), row-major, up to 4 dims, memory owned
// by a Device.
//
// A Tensor is a handle (shared ownership of its storage): copying a Tensor copies the handle, not
// the numbers. `clone()` copies the numbers. Code in lib/ never dereferences `data()`: memory may
// live on a GPU. It goes through Device kernels, or through `to_host()` / `from_host()`. (One
// exception, guarded: the Device's argument checks read token ids in place when the device says
// host_accessible(); lib/core/device.cpp.)
//
// Storage dtype. A tensor is f32 unless made with Dtype::bf16; every call that takes no dtype makes
// f32. Memory is allocated through the Device by bytes (numel · dtype_size). data() is the f32
// pointer and refuses a bf16 tensor; raw() is the untyped pointer of either (for communicators and
// the kernels that state they take bf16). The host side always speaks f32: to_host() widens bf16
// exactly, copy_from_host() rounds to nearest even (core/dtype.h), so a test reads a bf16 tensor
// as the floats it holds. Device::convert changes the dtype on the device.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tp {

class Device;

/// A row-major shape of 0 to 4 dimensions (0 dims = a scalar holding one element).
class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const;
  /// Product of all dims (1 for a scalar).
  int64_t numel() const;
  /// Product of all dims but the last: the row count of the 2-D view [rows, cols].
  int64_t rows() const;
  /// The last dim (1 for a scalar): the column count of the 2-D view [rows, cols].
  int64_t cols() const;
  /// The same shape with dim `i` replaced by `value`.
  Shape with(int i, int64_t value) const;
  std::string str() const;  ///< "[2, 3]"
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  int ndim_ = 0;
  int64_t dims_[kMaxDims] = {0, 0, 0, 0};
};

/// A tensor of f32 (the default) or bf16, contiguous and row-major, on one Device.
class Tensor {
 public:
  /// An empty handle (no device, no storage).
  Tensor() = default;
  /// Allocates uninitialised memory for `shape` on `device`, numel · dtype_size(dtype) bytes.
  Tensor(Device& device, const Shape& shape, Dtype dtype = Dtype::f32);

  /// Allocates on `device` and fills with zeros (all-zero bits: 0.0 in f32 and in bf16).
  static Tensor zeros(Device& device, const Shape& shape, Dtype dtype = Dtype::f32);
  /// Allocates on `device` and copies `values` (row-major, numel() of them) in, rounded to
  /// nearest even when dtype is bf16.
  static Tensor from_host(Device& device, const Shape& shape, const std::vector<float>& values,
                          Dtype dtype = Dtype::f32);

  bool defined() const { return storage_ != nullptr; }
  Device& device() const;
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t rows() const { return shape_.rows(); }
  int64_t cols() const { return shape_.cols(); }
  Dtype dtype() const { return dtype_; }
  /// Bytes per element: 4 (f32) or 2 (bf16).
  int64_t element_size() const { return dtype_size(dtype_); }
  size_t bytes() const { return static_cast<size_t>(numel() * element_size()); }

  /// Device pointer to the first element of an f32 tensor (a bf16 tensor is refused: use raw()).
  /// Pass it to the device or a communicator, never read it in lib/.
  float* data() const;
  /// Device pointer to the first element, of either dtype.
  void* raw() const;

  /// Rows [begin, end) along dim 0, sharing memory (contiguous, because dim 0 is outermost).
  Tensor view(int64_t begin, int64_t end) const;
  /// The same memory under another shape with the same numel().
  Tensor reshape(const Shape& shape) const;
  /// A new tensor on the same device with the same numbers and dtype.
  Tensor clone() const;
  /// Copies the numbers into a host vector (synchronises the device); bf16 is widened exactly.
  std::vector<float> to_host() const;
  /// Overwrites the numbers from a host vector of numel() values (rounded to nearest even for bf16).
  void copy_from_host(const std::vector<float>& values);
  /// Overwrites the numbers from another tensor of the same numel() and dtype on the same device
  /// (a change of dtype is Device::convert).
  void copy_from(const Tensor& other);

 private:
  struct Storage;
  Device* device_ = nullptr;
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Dtype dtype_ = Dtype::f32;
};

}  // namespace tp
