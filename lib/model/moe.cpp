#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace tp {

namespace {

/// A parameter of the layer, whole on this rank (no TP inside the experts at this step).
void add_param(ParamList& out, const std::string& name, const Tensor& value, const Tensor& grad,
               Init init, float std, bool decay, int expert = -1, const Tensor& compute = {}) {
  Param p;
  p.name = name;
  p.shape = value.shape();
  p.split = Split::Replicated;
  p.value = value;
  p.grad = grad;
  p.init = init;
  p.init_std = std;
  p.decay = decay;
  p.expert = expert;
  p.compute = compute;
  out.push_back(p);
}

// What a layer computes with: the bf16 copy when there is one, else the fp32 parameter.
const Tensor& W(const Tensor& value, const Tensor& copy) { return compute_tensor(value, copy); }

}  // namespace

// An f32 sum (the combine, the input gradient) in the compute dtype: rounded to bf16 once.
Tensor MoeLayer::in_compute_dtype(const Tensor& sum) const {
  if (cfg_.compute == Dtype::f32) return sum;
  Tensor out(device_, sum.shape(), cfg_.compute);
  device_.convert(sum, out);
  return out;
}

void check_moe_config(const MoeConfig& cfg) {
  TP_CHECK_INPUT(cfg.hidden > 0 && cfg.ffn > 0, "moe: hidden=", cfg.hidden, " and ffn=", cfg.ffn,
                 " must both be positive");
  TP_CHECK_INPUT(cfg.experts >= 1, "--experts ", cfg.experts,
                 ": a mixture needs at least 1 expert");
  TP_CHECK_INPUT(cfg.top_k >= 1 && cfg.top_k <= cfg.experts, "--top-k ", cfg.top_k,
                 " with --experts ", cfg.experts, ": choose k in 1..", cfg.experts);
  TP_CHECK_INPUT(cfg.capacity_factor >= 0 && std::isfinite(cfg.capacity_factor),
                 "--capacity-factor ", cfg.capacity_factor,
                 " must be > 0 (leave it out for dropless routing)");
  TP_CHECK_INPUT(cfg.aux_loss_coef >= 0 && cfg.z_loss_coef >= 0, "--aux-loss-coef ",
                 cfg.aux_loss_coef, " and the z-loss coefficient ", cfg.z_loss_coef,
                 " must be ≥ 0 (0 turns the loss off)");
}

MoeLayer::MoeLayer(Device& device, const std::string& prefix, const MoeConfig& cfg)
    : device_(device),
      prefix_(prefix),
      cfg_(cfg),
      swiglu_(cfg.act == Activation::SwiGlu),
      dispatch_(std::make_unique<ExpertDispatch>(device, nullptr, cfg.experts)),
      x_(prefix + ".input"),
      ids_(prefix + ".slot_tokens"),
      gates_(prefix + ".slot_gates"),
      xe_(prefix + ".experts.input"),
      up_(prefix + ".experts.c_fc.output"),
      gate_pre_(prefix + ".experts.c_gate.output"),
      act_(prefix + ".experts.act"),
      out_(prefix + ".experts.c_proj.output") {
  check_moe_config(cfg);
  TP_CHECK(cfg.compute == Dtype::f32 || cfg.compute == Dtype::bf16, prefix, ": compute dtype ",
           dtype_name(cfg.compute));
  const int64_t h = cfg.hidden, f = cfg.ffn;
  router_weight = Tensor::zeros(device, Shape{h, cfg.experts});
  router_dweight = Tensor::zeros(device, Shape{h, cfg.experts});
  experts.resize(static_cast<size_t>(cfg.experts));
  for (MoeExpert& ex : experts) {
    ex.w_fc = Tensor::zeros(device, Shape{h, f});
    ex.b_fc = Tensor::zeros(device, Shape{f});
    ex.w_proj = Tensor::zeros(device, Shape{f, h});
    ex.b_proj = Tensor::zeros(device, Shape{h});
    ex.dw_fc = Tensor::zeros(device, Shape{h, f});
    ex.db_fc = Tensor::zeros(device, Shape{f});
    ex.dw_proj = Tensor::zeros(device, Shape{f, h});
    ex.db_proj = Tensor::zeros(device, Shape{h});
    if (!swiglu_) continue;
    ex.w_gate = Tensor::zeros(device, Shape{h, f});
    ex.b_gate = Tensor::zeros(device, Shape{f});
    ex.dw_gate = Tensor::zeros(device, Shape{h, f});
    ex.db_gate = Tensor::zeros(device, Shape{f});
  }
  for (MoeExpert& ex : experts) {  // bf16: the copies the experts compute with
    ex.cw_fc = make_compute_copy(ex.w_fc, cfg.compute);
    ex.cb_fc = make_compute_copy(ex.b_fc, cfg.compute);
    ex.cw_proj = make_compute_copy(ex.w_proj, cfg.compute);
    ex.cb_proj = make_compute_copy(ex.b_proj, cfg.compute);
    if (!swiglu_) continue;
    ex.cw_gate = make_compute_copy(ex.w_gate, cfg.compute);
    ex.cb_gate = make_compute_copy(ex.b_gate, cfg.compute);
  }
  ones_h_ = Tensor(device, Shape{1, h});
  device.fill(ones_h_, 1.0f);
}

void MoeLayer::collect_params(ParamList& out, float std, float proj_std) const {
  add_param(out, prefix_ + ".router.weight", router_weight, router_dweight, Init::Normal, std,
            true);
  for (size_t i = 0; i < experts.size(); ++i) {
    const MoeExpert& ex = experts[i];
    const int e = dispatch_->placement().first() + static_cast<int>(i);
    const std::string p = prefix_ + ".experts." + std::to_string(e);
    add_param(out, p + ".c_fc.weight", ex.w_fc, ex.dw_fc, Init::Normal, std, true, e, ex.cw_fc);
    add_param(out, p + ".c_fc.bias", ex.b_fc, ex.db_fc, Init::Zeros, 0, false, e, ex.cb_fc);
    if (swiglu_) {
      add_param(out, p + ".c_gate.weight", ex.w_gate, ex.dw_gate, Init::Normal, std, true, e,
                ex.cw_gate);
      add_param(out, p + ".c_gate.bias", ex.b_gate, ex.db_gate, Init::Zeros, 0, false, e,
                ex.cb_gate);
    }
    add_param(out, p + ".c_proj.weight", ex.w_proj, ex.dw_proj, Init::Normal, proj_std, true, e,
              ex.cw_proj);
    add_param(out, p + ".c_proj.bias", ex.b_proj, ex.db_proj, Init::Zeros, 0, false, e, ex.cb_proj);
  }
}

void MoeLayer::set_expert_group(Communicator* ep) {
  TP_CHECK(static_cast<int>(experts.size()) == cfg_.experts, prefix_,
           ": set_expert_group once, on a layer that still holds every expert");
  dispatch_ = std::make_unique<ExpertDispatch>(device_, ep, cfg_.experts);
  const ExpertPlacement& place = dispatch_->placement();
  std::vector<MoeExpert> mine(experts.begin() + place.first(),
                              experts.begin() + place.first() + place.local());
  experts = std::move(mine);
}

void MoeLayer::observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }

std::vector<double> MoeLayer::choice_fraction() const {
  std::vector<double> f(stats_.choices.size(), 0.0);
  const double all = stats_.tokens * cfg_.top_k;
  for (size_t e = 0; e < f.size(); ++e) f[e] = all > 0 ? stats_.choices[e] / all : 0.0;
  return f;
}

std::vector<double> MoeLayer::mean_prob() const {
  std::vector<double> p(stats_.prob_sum.size(), 0.0);
  for (size_t e = 0; e < p.size(); ++e)
    p[e] = stats_.tokens > 0 ? stats_.prob_sum[e] / stats_.tokens : 0.0;
  return p;
}

// ---- routing (host) -----------------------------------------------------------------------------

void MoeLayer::route(const std::vector<float>& logits, int64_t n) {
  const int ne = cfg_.experts, k = cfg_.top_k;
  Route& r = route_;
  r.probs.assign(static_cast<size_t>(n * ne), 0.0f);
  r.lse.assign(static_cast<size_t>(n), 0.0);
  r.expert.assign(static_cast<size_t>(n * k), 0);
  r.gate.assign(static_cast<size_t>(n * k), 0.0f);
  stats_ = RouterStats{std::vector<double>(ne, 0.0), std::vector<double>(ne, 0.0),
                       static_cast<double>(n), 0.0};
  std::vector<int> order(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    const float* z = &logits[static_cast<size_t>(t * ne)];
    float* p = &r.probs[static_cast<size_t>(t * ne)];
    const double mx = *std::max_element(z, z + ne);
    double sum = 0;
    for (int e = 0; e < ne; ++e) sum += std::exp(static_cast<double>(z[e]) - mx);
    r.lse[t] = mx + std::log(sum);
    stats_.lse_sq_sum += r.lse[t] * r.lse[t];
    for (int e = 0; e < ne; ++e) {
      p[e] = static_cast<float>(std::exp(static_cast<double>(z[e]) - mx) / sum);
      stats_.prob_sum[e] += p[e];
    }
    // top-k by probability, ties to the lowest expert id
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[order[j]];
    const bool renorm = cfg_.renormalise && k > 1;
    for (int j = 0; j < k; ++j) {
      const int e = order[j];
      r.expert[t * k + j] = e;
      r.gate[t * k + j] = static_cast<float>(renorm ? p[e] / chosen : p[e]);
      stats_.choices[e] += 1;
    }
  }
  // Capacity, first come first served in token order; then the kept slots sorted by expert.
  capacity_ = cfg_.capacity_factor > 0
                  ? static_cast<int64_t>(std::ceil(cfg_.capacity_factor * n * k / ne))
                  : n * k;
  std::vector<int64_t> count(static_cast<size_t>(ne), 0);
  dropped_ = 0;
  for (int64_t a = 0; a < n * k; ++a) {
    const int e = r.expert[a];
    if (count[e] < capacity_) {
      ++count[e];
    } else {
      r.gate[a] = 0.0f;
      ++dropped_;
    }
  }
  r.begin.assign(static_cast<size_t>(ne + 1), 0);
  for (int e = 0; e < ne; ++e) r.begin[e + 1] = r.begin[e] + count[e];
  r.slot_of.assign(static_cast<size_t>(r.begin[ne]), 0);
  std::vector<int64_t> next(r.begin.begin(), r.begin.end() - 1);
  std::fill(count.begin(), count.end(), 0);
  for (int64_t a = 0; a < n * k; ++a) {
    const int e = r.expert[a];
    if (count[e]++ < capacity_) r.slot_of[next[e]++] = static_cast<int>(a);
  }
}

void MoeLayer::compute_losses() {
  if (reducer_) reducer_(stats_);
  TP_CHECK(stats_.tokens > 0, prefix_, ": the router statistics count no tokens");
  const std::vector<double> f = choice_fraction(), pm = mean_prob();
  double dot = 0;
  for (size_t e = 0; e < f.size(); ++e) dot += f[e] * pm[e];
  losses_.aux = cfg_.aux_loss_coef * cfg_.experts * dot;
  losses_.z_loss = cfg_.z_loss_coef * stats_.lse_sq_sum / stats_.tokens;
}

// The router's logit gradient (N, E), from the gates' gradients (one per kept slot) and the two
// losses. With g_j = p_j / S over the chosen (renormalised): ∂L/∂p_i = (∂L/∂g_i − Σ_j ∂L/∂g_j g_j)
// / S; raw gates: ∂L/∂p_i = ∂L/∂g_i. The balancing loss adds α·E·f_e / N to ∂L/∂p_e of every
// token (f_e constant); the softmax's backward gives ∂L/∂z_e = p_e (∂L/∂p_e − Σ_e' p_e' ∂L/∂p_e');
// the z-loss adds 2β·lse·p_e / N (∂lse/∂z_e = p_e).
std::vector<float> MoeLayer::router_grad(const std::vector<float>& dgate_slot,
                                         float loss_scale) const {
  const int ne = cfg_.experts, k = cfg_.top_k;
  const Route& r = route_;
  const int64_t n = static_cast<int64_t>(r.lse.size());
  std::vector<double> dgate(static_cast<size_t>(n * k), 0.0);
  for (size_t s = 0; s < dgate_slot.size(); ++s) dgate[r.slot_of[s]] = dgate_slot[s];
  const std::vector<double> f = choice_fraction();
  const double tokens = stats_.tokens;
  const bool renorm = cfg_.renormalise && k > 1;
  std::vector<float> dz(static_cast<size_t>(n * ne), 0.0f);
  std::vector<double> dp(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    const float* p = &r.probs[static_cast<size_t>(t * ne)];
    for (int e = 0; e < ne; ++e) dp[e] = loss_scale * cfg_.aux_loss_coef * ne * f[e] / tokens;
    const int* ex = &r.expert[static_cast<size_t>(t * k)];
    const double* dg = &dgate[static_cast<size_t>(t * k)];
    if (renorm) {
      double chosen = 0, dot = 0;
      for (int j = 0; j < k; ++j) chosen += p[ex[j]];
      for (int j = 0; j < k; ++j) dot += dg[j] * (p[ex[j]] / chosen);
      for (int j = 0; j < k; ++j) dp[ex[j]] += (dg[j] - dot) / chosen;
    } else {
      for (int j = 0; j < k; ++j) dp[ex[j]] += dg[j];
    }
    double pdp = 0;
    for (int e = 0; e < ne; ++e) pdp += p[e] * dp[e];
    const double zl = loss_scale * 2.0 * cfg_.z_loss_coef * r.lse[t] / tokens;
    for (int e = 0; e < ne; ++e)
      dz[static_cast<size_t>(t * ne + e)] = static_cast<float>(p[e] * (dp[e] - pdp) + zl * p[e]);
  }
  return dz;
}

// ---- forward and backward -----------------------------------------------------------------------

// xs: (M, h), the kept slots' tokens sorted by expert → the experts' outputs (M, h), ungated.
Tensor MoeLayer::experts_forward(const Tensor& xs) {
  const int64_t m = xs.rows();
  const Dtype dt = xs.dtype();
  Tensor up(device_, Shape{m, cfg_.ffn}, dt), act(device_, Shape{m, cfg_.ffn}, dt);
  Tensor gate = swiglu_ ? Tensor(device_, Shape{m, cfg_.ffn}, dt) : Tensor();
  Tensor out(device_, Shape{m, cfg_.hidden}, dt);
  const std::vector<int64_t>& begin = dispatch_->expert_begin();
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t b = begin[e], c = begin[e + 1];
    if (b == c) continue;
    const MoeExpert& ex = experts[e];
    const Tensor xe = xs.view(b, c);
    Tensor up_e = up.view(b, c), act_e = act.view(b, c), out_e = out.view(b, c);
    device_.gemm(false, false, 1.0f, xe, W(ex.w_fc, ex.cw_fc), 0.0f, up_e);  // X_e W_fc
    if (swiglu_) {
      Tensor gate_e = gate.view(b, c);
      device_.add_bias(up_e, W(ex.b_fc, ex.cb_fc));
      device_.gemm(false, false, 1.0f, xe, W(ex.w_gate, ex.cw_gate), 0.0f, gate_e);
      device_.add_bias(gate_e, W(ex.b_gate, ex.cb_gate));
      device_.swiglu_forward(act_e, gate_e, up_e);  // silu(X W_g + b_g) ⊙ (X W_fc + b_fc)
    } else if (dt == Dtype::f32) {
      device_.bias_gelu_forward(act_e, up_e, ex.b_fc);  // GeLU(X W_fc + b_fc), up kept unbiased
    } else {  // bf16: the bias, then GeLU, each rounding once (up kept biased), as the dense MLP
      device_.add_bias(up_e, W(ex.b_fc, ex.cb_fc));
      device_.gelu_forward(act_e, up_e);
    }
    device_.gemm(false, false, 1.0f, act_e, W(ex.w_proj, ex.cw_proj), 0.0f, out_e);
    device_.add_bias(out_e, W(ex.b_proj, ex.cb_proj));
  }
  saved_.keep(up_, up);
  saved_.keep(act_, act);
  if (swiglu_) saved_.keep(gate_pre_, gate);
  return out;
}

// Router logits on the device, routing on the host (see the header: what it costs), the losses
// (their statistics reduced by the reducer: a collective) and the dispatch plan (a collective
// over the EP group). Backward calls it again when the routing in hand is another forward's.
void MoeLayer::route_tokens(const Tensor& x) {
  const int64_t n = x.rows();
  Tensor logits(device_, Shape{n, cfg_.experts});
  device_.gemm(false, false, 1.0f, x, router_weight, 0.0f, logits);
  route(logits.to_host(), n);
  compute_losses();
  std::vector<int64_t> per_expert(static_cast<size_t>(cfg_.experts));
  for (int e = 0; e < cfg_.experts; ++e) per_expert[e] = route_.begin[e + 1] - route_.begin[e];
  dispatch_->plan(per_expert);
  routed_ = x;
}

Tensor MoeLayer::forward(const Tensor& x_in) {
  const int64_t h = cfg_.hidden, k = cfg_.top_k;
  TP_CHECK_INPUT(x_in.cols() == h && x_in.dtype() == cfg_.compute, prefix_, ": input ",
                 x_in.shape().str(), " should be ", dtype_name(cfg_.compute), " (N, ", h, ")");
  const int64_t n = x_in.rows();
  TP_CHECK_INPUT(n > 0 && n < (int64_t{1} << 24), prefix_, ": ", n,
                 " tokens; the layer routes 1 to 2^24 − 1 tokens per call");
  const Tensor x = x_in.reshape(Shape{n, h});
  saved_.keep(x_, x);
  route_tokens(x);  // 1. the router, the losses and the plan of the experts' all-to-all
  Tensor y = Tensor::zeros(device_, Shape{n, h});
  const int64_t m = static_cast<int64_t>(route_.slot_of.size());
  // M ≥ 1 (a capacity is at least 1); the check keeps the views below non-empty all the same.
  TP_CHECK(m > 0, prefix_, ": no assignment kept (capacity ", capacity_, ")");
  // 2. Each kept slot's token and gate, sorted by expert; the tokens gathered.
  std::vector<float> ids(static_cast<size_t>(m)), gates(static_cast<size_t>(m));
  for (int64_t s = 0; s < m; ++s) {
    ids[s] = static_cast<float>(route_.slot_of[s] / k);
    gates[s] = route_.gate[route_.slot_of[s]];
  }
  // (locals, not the references keep returns: a ledger that is not keeping returns its argument)
  const Tensor id_t = Tensor::from_host(device_, Shape{m}, ids);
  const Tensor gate_t = Tensor::from_host(device_, Shape{m, 1}, gates);
  saved_.keep(ids_, id_t);
  saved_.keep(gates_, gate_t);
  Tensor xs(device_, Shape{m, h}, x.dtype());
  device_.embedding_shard_forward(xs, id_t, x, 0);  // xs[s] = x[token of s]
  // 3. The experts, each on its contiguous rows of xs; under EP on the rows sent to their rank,
  // and the outputs sent back (parallel/expert_parallel.h).
  const Tensor xe = dispatch_->dispatch(xs);
  if (dispatch_->placement().ep > 1) saved_.keep(xe_, xe);
  const Tensor out = dispatch_->combine(experts_forward(xe));
  saved_.keep(out_, out);
  // 4. Combine: y[token of s] += g_s · out[s] (the gates broadcast over h by a rank-1 GEMM).
  Tensor gate_rows(device_, Shape{m, h}), weighted(device_, Shape{m, h});
  device_.gemm(false, false, 1.0f, gate_t, ones_h_, 0.0f, gate_rows);
  device_.mul(out, gate_rows, weighted);
  device_.embedding_shard_backward(y, weighted, id_t, 0);  // in f32 (y, weighted): one rounding
  return in_compute_dtype(y).reshape(x_in.shape());
}

// xs, dout: (M, h) → dxs: (M, h); the experts' parameter gradients +=.
Tensor MoeLayer::experts_backward(const Tensor& xs, const Tensor& dout) {
  const int64_t m = xs.rows();
  const Tensor& up = up_.get();
  const Tensor& act = act_.get();
  const Dtype dt = dout.dtype();
  Tensor dact(device_, Shape{m, cfg_.ffn}, dt), dup(device_, Shape{m, cfg_.ffn}, dt);
  Tensor dgate = swiglu_ ? Tensor(device_, Shape{m, cfg_.ffn}, dt) : Tensor();
  Tensor dxs(device_, Shape{m, cfg_.hidden}, dt);
  const std::vector<int64_t>& begin = dispatch_->expert_begin();
  for (size_t e = 0; e < experts.size(); ++e) {
    const int64_t b = begin[e], c = begin[e + 1];
    if (b == c) continue;
    MoeExpert& ex = experts[e];
    const Tensor xe = xs.view(b, c), dout_e = dout.view(b, c), up_e = up.view(b, c);
    Tensor dact_e = dact.view(b, c), dup_e = dup.view(b, c), dxe = dxs.view(b, c);
    device_.add_bias_backward(ex.db_proj, dout_e);
    device_.gemm(true, false, 1.0f, act.view(b, c), dout_e, 1.0f, ex.dw_proj);  // += actᵀ dY
    device_.gemm(false, true, 1.0f, dout_e, W(ex.w_proj, ex.cw_proj), 0.0f, dact_e);  // dY W_pᵀ
    if (swiglu_) {
      Tensor dgate_e = dgate.view(b, c);
      device_.swiglu_backward(dgate_e, dup_e, dact_e, gate_pre_.get().view(b, c), up_e);
      device_.add_bias_backward(ex.db_gate, dgate_e);
      device_.add_bias_backward(ex.db_fc, dup_e);
      device_.gemm(true, false, 1.0f, xe, dgate_e, 1.0f, ex.dw_gate);
    } else if (dt == Dtype::f32) {
      device_.bias_gelu_backward(dup_e, ex.db_fc, dact_e, up_e, ex.b_fc);
    } else {
      device_.gelu_backward(dup_e, dact_e, up_e);  // up kept biased (forward)
      device_.add_bias_backward(ex.db_fc, dup_e);
    }
    device_.gemm(true, false, 1.0f, xe, dup_e, 1.0f, ex.dw_fc);
    device_.gemm(false, true, 1.0f, dup_e, W(ex.w_fc, ex.cw_fc), 0.0f, dxe);
    if (swiglu_)
      device_.gemm(false, true, 1.0f, dgate.view(b, c), W(ex.w_gate, ex.cw_gate), 1.0f, dxe);
  }
  return dxs;
}

Tensor MoeLayer::backward(const Tensor& dy_in, float loss_scale) {
  const Tensor& x = x_.get();
  const int64_t n = x.rows(), h = cfg_.hidden;
  // Another micro-batch's forward ran since this one's (a pipeline keeps several in flight):
  // route this one's tokens again, which gives the same routing, losses and plan.
  if (!routed_.defined() || routed_.raw() != x.raw()) route_tokens(x);
  TP_CHECK_INPUT(dy_in.numel() == n * h && dy_in.cols() == h, prefix_, ": dy ", dy_in.shape().str(),
                 " should be (", n, ", ", h, ") like the forward's input");
  const Tensor dy = dy_in.reshape(Shape{n, h});
  Tensor dx = Tensor::zeros(device_, Shape{n, h});
  const int64_t m = static_cast<int64_t>(route_.slot_of.size());
  std::vector<float> dgate_slot;
  {  // the experts' path; its (M, h) temporaries are freed before the router's GEMMs
    const Tensor& ids = ids_.get();
    // dY of each slot's token; the gate's gradient is its row's dot with the ungated output.
    Tensor dys(device_, Shape{m, h}, dy.dtype()), prod(device_, Shape{m, h}),
        dg(device_, Shape{m, 1});
    device_.embedding_shard_forward(dys, ids, dy, 0);
    device_.mul(dys, out_.get(), prod);
    device_.gemm(false, true, 1.0f, prod, ones_h_, 0.0f, dg);  // Σ_c dys[s, c] out[s, c]
    dgate_slot = dg.to_host();
    // The experts' dY: g_s · dys[s]. Their input: regathered from x, or under EP the rows that
    // came in forward; dY goes to the experts' ranks as the tokens did, dX comes back.
    Tensor gate_rows(device_, Shape{m, h}), dout(device_, Shape{m, h}, dy.dtype());
    device_.gemm(false, false, 1.0f, gates_.get(), ones_h_, 0.0f, gate_rows);
    device_.mul(dys, gate_rows, dout);
    Tensor dxs;
    if (dispatch_->placement().ep == 1) {
      Tensor xs(device_, Shape{m, h}, x.dtype());
      device_.embedding_shard_forward(xs, ids, x, 0);
      dxs = experts_backward(xs, dout);
    } else {
      const Tensor dxe =
          experts_backward(xe_.get(), dispatch_->dispatch(dout, "moe dispatch (backward)"));
      dxs = dispatch_->combine(dxe, "moe combine (backward)");
    }
    device_.embedding_shard_backward(dx, dxs, ids, 0);  // dx[token of s] += dxs[s]
  }
  // The router: dZ from the host, then dW_r += xᵀ dZ, dx += dZ W_rᵀ.
  const Tensor dlogits =
      Tensor::from_host(device_, Shape{n, cfg_.experts}, router_grad(dgate_slot, loss_scale));
  device_.gemm(true, false, 1.0f, x, dlogits, 1.0f, router_dweight);
  device_.gemm(false, true, 1.0f, dlogits, router_weight, 1.0f, dx);
  routed_ = Tensor();
  return in_compute_dtype(dx).reshape(dy_in.shape());
}

}  // namespace tp
