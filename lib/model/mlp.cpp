#include "model/mlp.h"

#include <vector>

#include "core/exercise.h"

namespace tp {

ParallelMLP::ParallelMLP(Device& device, Communicator& comm, const std::string& prefix,
                         const GptConfig& cfg)
    : device_(device),
      comm_(comm),
      swiglu_(cfg.activation() == Activation::SwiGlu),
      fused_bias_gelu_(!swiglu_ && cfg.compute_dtype() == Dtype::f32),
      overlap_(cfg.overlap),
      fc1_(device, comm, prefix + ".c_fc", cfg.hidden, cfg.inner(), Bias::With, ColumnOutput::Split,
           cfg.sp),
      gate_(device, comm, prefix + ".c_gate", cfg.hidden, swiglu_ ? cfg.inner() : comm.size(),
            swiglu_ ? Bias::With : Bias::Without, ColumnOutput::Split, cfg.sp),
      fc2_(device, comm, prefix + ".c_proj", cfg.inner(), cfg.hidden, Bias::With, RowInput::Split,
           cfg.sp),
      up_(fc1_.name() + ".output"),
      gate_out_(gate_.name() + ".output") {
  for (ParallelLinearBase* l :
       {static_cast<ParallelLinearBase*>(&fc1_), static_cast<ParallelLinearBase*>(&gate_),
        static_cast<ParallelLinearBase*>(&fc2_)}) {
    l->set_overlap(overlap_);
    l->set_compute_dtype(cfg.compute_dtype());
  }
  fc1_.set_skip_bias_add(fused_bias_gelu_);  // the bias goes into bias_gelu (forward, backward)
}

void ParallelMLP::observe(MemoryLedger* ledger, int64_t layer) {
  saved_.attach(ledger, layer);
  fc1_.observe(ledger, layer);
  gate_.observe(ledger, layer);
  fc2_.observe(ledger, layer);
}

#if TP_EXERCISE != 4  // exercises/04_parallel_mlp.cpp
Tensor ParallelMLP::forward(const Tensor& x_in) {
  // X U_r, X G_r: (N, ffn/t), no communication (SP: X all-gathered once for both; the layers keep
  // my s/t tokens only).
  const std::vector<Tensor> outs = swiglu_
                                       ? ColumnParallelLinear::forward_shared({&fc1_, &gate_}, x_in)
                                       : std::vector<Tensor>{fc1_.forward(x_in)};
  const Tensor& up = saved_.keep(up_, outs[0]);
  Tensor act(device_, up.shape(), up.dtype());
  if (swiglu_) {
    const Tensor& gate = saved_.keep(gate_out_, outs[1]);
    device_.swiglu_forward(act, gate, up);  // silu(X G_r) ⊙ X U_r, local
  } else if (fused_bias_gelu_) {
    device_.bias_gelu_forward(act, up, fc1_.compute_bias());  // GeLU(X U_r + b_r), local
  } else {
    device_.gelu_forward(act, up);  // GeLU(X U_r), local: elementwise
  }
  return fc2_.forward(act);  // Σ_r act_r B_r: g's all-reduce (SP: reduce-scatter)
}

Tensor ParallelMLP::backward(const Tensor& dy) {
  fc1_.prefetch_input();  // SP + async: X's re-gather runs under fc2's and the activation's backward
  Tensor dact = fc2_.backward(dy);  // local (g backward is the identity; SP: all-gather dY)
  const Tensor& up = up_.get();
  Tensor dup(device_, up.shape(), dact.dtype());
  Tensor dgate;
  if (swiglu_) {
    dgate = Tensor(device_, up.shape(), dact.dtype());
    device_.swiglu_backward(dgate, dup, dact, gate_out_.get(), up);
  } else if (fused_bias_gelu_) {
    device_.bias_gelu_backward(dup, fc1_.dbias, dact, up, fc1_.compute_bias());  // and db_r
  } else {
    device_.gelu_backward(dup, dact, up);
  }
  // f backward (SP: reduce-scatter) once for fc1 and the gate together.
  if (swiglu_) return ColumnParallelLinear::backward_shared({&fc1_, &gate_}, {dup, dgate});
  return fc1_.backward(dup);
}
#endif

Tensor ParallelMLP::forward_inference(const Tensor& x) {
  const Tensor up = fc1_.forward(x, Keep::Nothing);  // X U_r: (N, ffn/t), no communication
  Tensor act(device_, up.shape(), up.dtype());
  if (swiglu_)
    device_.swiglu_forward(act, gate_.forward(x, Keep::Nothing), up);  // silu(X G_r) ⊙ X U_r
  else if (fused_bias_gelu_)
    device_.bias_gelu_forward(act, up, fc1_.compute_bias());  // GeLU(X U_r + b_r)
  else
    device_.gelu_forward(act, up);          // GeLU(X U_r)
  return fc2_.forward(act, Keep::Nothing);  // Σ_r act_r B_r: g's all-reduce
}

void ParallelMLP::collect_params(ParamList& out, float std, float proj_std) const {
  fc1_.collect_params(out, std);
  if (swiglu_) gate_.collect_params(out, std);
  fc2_.collect_params(out, proj_std);
}

}  // namespace tp
