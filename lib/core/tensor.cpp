#include "core/tensor.h"

#include "core/device.h"
#include "core/error.h"

namespace tp {

// ---- Shape ---------------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  TP_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "a tensor has at most ", kMaxDims,
           " dims, got ", dims.size());
  ndim_ = static_cast<int>(dims.size());
  for (int i = 0; i < ndim_; ++i) {
    TP_CHECK(dims[i] >= 0, "negative dimension ", dims[i], " in a shape");
    dims_[i] = dims[i];
  }
}

int64_t Shape::operator[](int i) const {
  TP_CHECK(i >= 0 && i < ndim_, "dim ", i, " out of range for shape ", str());
  return dims_[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

int64_t Shape::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < ndim_; ++i) n *= dims_[i];
  return n;
}

int64_t Shape::cols() const { return ndim_ == 0 ? 1 : dims_[ndim_ - 1]; }

Shape Shape::with(int i, int64_t value) const {
  TP_CHECK(i >= 0 && i < ndim_, "dim ", i, " out of range for shape ", str());
  Shape s = *this;
  s.dims_[i] = value;
  return s;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

// ---- Tensor --------------------------------------------------------------------------------------

struct Tensor::Storage {
  Device* device;
  void* ptr;
  size_t bytes;
  Storage(Device* d, size_t n) : device(d), ptr(n ? d->allocate(n) : nullptr), bytes(n) {
    device->track(static_cast<int64_t>(bytes));
  }
  ~Storage() {
    if (ptr) device->deallocate(ptr);
    device->track(-static_cast<int64_t>(bytes));
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

Tensor::Tensor(Device& device, const Shape& shape, Dtype dtype)
    : device_(&device),
      storage_(std::make_shared<Storage>(&device,
                                         static_cast<size_t>(shape.numel() * dtype_size(dtype)))),
      shape_(shape),
      dtype_(dtype) {}

Tensor Tensor::zeros(Device& device, const Shape& shape, Dtype dtype) {
  Tensor t(device, shape, dtype);
  if (dtype == Dtype::f32) {
    device.fill(t, 0.0f);
  } else if (t.numel() > 0) {  // bf16 zero is all-zero bits; fill has no bf16 kernel
    const std::vector<uint16_t> zero(static_cast<size_t>(t.numel()), 0);
    device.copy_from_host(t.raw(), zero.data(), t.bytes());
  }
  return t;
}

Tensor Tensor::from_host(Device& device, const Shape& shape, const std::vector<float>& values,
                         Dtype dtype) {
  Tensor t(device, shape, dtype);
  t.copy_from_host(values);
  return t;
}

Device& Tensor::device() const {
  TP_CHECK(device_ != nullptr, "use of an undefined (empty) tensor");
  return *device_;
}

float* Tensor::data() const {
  TP_CHECK(dtype_ == Dtype::f32, "data() of a ", dtype_name(dtype_), " tensor ", shape_.str(),
           ": data() is the f32 pointer; use raw(), or Device::convert to f32 first");
  return static_cast<float*>(raw());
}

void* Tensor::raw() const {
  TP_CHECK(storage_ != nullptr, "use of an undefined (empty) tensor");
  return static_cast<char*>(storage_->ptr) + offset_ * element_size();
}

Tensor Tensor::view(int64_t begin, int64_t end) const {
  TP_CHECK(ndim() >= 1, "view() needs at least one dim; shape ", shape_.str());
  TP_CHECK(0 <= begin && begin <= end && end <= dim(0), "view [", begin, ", ", end,
           ") out of range for dim 0 of shape ", shape_.str());
  Tensor v = *this;
  v.shape_ = shape_.with(0, end - begin);
  v.offset_ = offset_ + begin * (numel() / (dim(0) ? dim(0) : 1));
  return v;
}

Tensor Tensor::reshape(const Shape& shape) const {
  TP_CHECK(shape.numel() == numel(), "reshape from ", shape_.str(), " to ", shape.str(),
           " changes the element count");
  Tensor v = *this;
  v.shape_ = shape;
  return v;
}

Tensor Tensor::clone() const {
  Tensor t(device(), shape_, dtype_);
  t.copy_from(*this);
  return t;
}

std::vector<float> Tensor::to_host() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (numel() == 0) return out;
  if (dtype_ == Dtype::f32) {
    device().copy_to_host(out.data(), data(), bytes());
    return out;
  }
  std::vector<uint16_t> bits(out.size());
  device().copy_to_host(bits.data(), raw(), bytes());
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_bits_to_float(bits[i]);
  return out;
}

void Tensor::copy_from_host(const std::vector<float>& values) {
  TP_CHECK(static_cast<int64_t>(values.size()) == numel(), "copy_from_host: ", values.size(),
           " values for a tensor of shape ", shape_.str());
  if (numel() == 0) return;
  if (dtype_ == Dtype::f32) {
    device().copy_from_host(data(), values.data(), bytes());
    return;
  }
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16_bits(values[i]);
  device().copy_from_host(raw(), bits.data(), bytes());
}

void Tensor::copy_from(const Tensor& other) {
  TP_CHECK(other.numel() == numel(), "copy_from: shape ", other.shape().str(), " into ",
           shape_.str());
  TP_CHECK(other.dtype() == dtype_, "copy_from: a ", dtype_name(other.dtype()), " tensor into a ",
           dtype_name(dtype_), " one; a change of dtype is Device::convert");
  TP_CHECK(&other.device() == &device(), "copy_from: tensors on different devices");
  if (numel() > 0) device().copy(raw(), other.raw(), bytes());
}

}  // namespace tp
