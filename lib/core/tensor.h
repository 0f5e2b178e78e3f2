// tensor.h — Shape and Tensor: f32, row-major, up to 4 dims, memory owned by a Device.
//
// A Tensor is a handle (shared ownership of its storage): copying a Tensor copies the handle, not
// the numbers. `clone()` copies the numbers. Code in lib/ never dereferences `data()`: memory may
// live on a GPU. It goes through Device kernels, or through `to_host()` / `from_host()`. (One
// exception, guarded: the Device's argument checks read token ids in place when the device says
// host_accessible(); lib/core/device.cpp.)
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

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

/// f32 tensor, contiguous and row-major, on one Device.
class Tensor {
 public:
  /// An empty handle (no device, no storage).
  Tensor() = default;
  /// Allocates uninitialised memory for `shape` on `device`.
  Tensor(Device& device, const Shape& shape);

  /// Allocates on `device` and fills with zeros.
  static Tensor zeros(Device& device, const Shape& shape);
  /// Allocates on `device` and copies `values` (row-major, numel() of them) in.
  static Tensor from_host(Device& device, const Shape& shape, const std::vector<float>& values);

  bool defined() const { return storage_ != nullptr; }
  Device& device() const;
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t rows() const { return shape_.rows(); }
  int64_t cols() const { return shape_.cols(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * sizeof(float); }

  /// Device pointer to the first element. Pass it to the device or a communicator, never read it
  /// in lib/.
  float* data() const;

  /// Rows [begin, end) along dim 0, sharing memory (contiguous, because dim 0 is outermost).
  Tensor view(int64_t begin, int64_t end) const;
  /// The same memory under another shape with the same numel().
  Tensor reshape(const Shape& shape) const;
  /// A new tensor on the same device with the same numbers.
  Tensor clone() const;
  /// Copies the numbers into a host vector (synchronises the device).
  std::vector<float> to_host() const;
  /// Overwrites the numbers from a host vector of numel() values.
  void copy_from_host(const std::vector<float>& values);
  /// Overwrites the numbers from another tensor of the same numel() on the same device.
  void copy_from(const Tensor& other);

 private:
  struct Storage;
  Device* device_ = nullptr;
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
};

}  // namespace tp
