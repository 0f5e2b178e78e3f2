// cpu_kernels.cpp — the CPU backend's model kernels (activations, norms, attention, embedding,
// loss, optimizer, dropout). STUBS: being written.
#include "core/error.h"
#include "cpu_device.h"

namespace tp {

void CpuDevice::mul(const Tensor&, const Tensor&, Tensor&) {
  TP_CHECK(false, "CpuDevice::mul is not implemented yet");
}

double CpuDevice::sum_squares(const Tensor&) {
  TP_CHECK(false, "CpuDevice::sum_squares is not implemented yet");
  return 0.0;
}

void CpuDevice::dropout_mask(Tensor&, const RngKey&, const GlobalIndex&, float) {
  TP_CHECK(false, "CpuDevice::dropout_mask is not implemented yet");
}

void CpuDevice::gelu_forward(Tensor&, const Tensor&) {
  TP_CHECK(false, "CpuDevice::gelu_forward is not implemented yet");
}

void CpuDevice::gelu_backward(Tensor&, const Tensor&, const Tensor&) {
  TP_CHECK(false, "CpuDevice::gelu_backward is not implemented yet");
}

void CpuDevice::swiglu_forward(Tensor&, const Tensor&, const Tensor&) {
  TP_CHECK(false, "CpuDevice::swiglu_forward is not implemented yet");
}

void CpuDevice::swiglu_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  TP_CHECK(false, "CpuDevice::swiglu_backward is not implemented yet");
}

void CpuDevice::layernorm_forward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, float) {
  TP_CHECK(false, "CpuDevice::layernorm_forward is not implemented yet");
}

void CpuDevice::layernorm_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  TP_CHECK(false, "CpuDevice::layernorm_backward is not implemented yet");
}

void CpuDevice::rmsnorm_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, float) {
  TP_CHECK(false, "CpuDevice::rmsnorm_forward is not implemented yet");
}

void CpuDevice::rmsnorm_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  TP_CHECK(false, "CpuDevice::rmsnorm_backward is not implemented yet");
}

void CpuDevice::attention_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const AttentionShape&) {
  TP_CHECK(false, "CpuDevice::attention_forward is not implemented yet");
}

void CpuDevice::attention_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AttentionShape&) {
  TP_CHECK(false, "CpuDevice::attention_backward is not implemented yet");
}

void CpuDevice::embedding_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  TP_CHECK(false, "CpuDevice::embedding_forward is not implemented yet");
}

void CpuDevice::embedding_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, int64_t) {
  TP_CHECK(false, "CpuDevice::embedding_backward is not implemented yet");
}

void CpuDevice::softmax_cross_entropy(Tensor&, Tensor&, const Tensor&, const Tensor&, float) {
  TP_CHECK(false, "CpuDevice::softmax_cross_entropy is not implemented yet");
}

void CpuDevice::adamw_step(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&, int64_t) {
  TP_CHECK(false, "CpuDevice::adamw_step is not implemented yet");
}

}  // namespace tp
