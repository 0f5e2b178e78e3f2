#include "model/train.h"

#include <cmath>
#include <utility>

#include "core/error.h"
#include "model/data.h"
#include "parallel/data_parallel.h"

namespace tp {

namespace {

// The first parameter (in parameter order) whose gradient holds a NaN/Inf on any rank. Runs only
// after the norm came out non-finite, so it may be slow: every gradient to the host, one flag per
// parameter, summed over the ranks (each rank holds a different shard).
std::string first_nonfinite_gradient(Communicator& comm, Device& device, const ParamList& params) {
  std::vector<float> bad(params.size(), 0.0f);
  for (size_t i = 0; i < params.size(); ++i)
    for (float g : params[i].grad.to_host())
      if (!std::isfinite(g)) {
        bad[i] = 1.0f;
        break;
      }
  Tensor flags = Tensor::from_host(device, Shape{static_cast<int64_t>(bad.size())}, bad);
  comm.all_reduce(flags);
  const std::vector<float> any = flags.to_host();
  for (size_t i = 0; i < any.size(); ++i)
    if (any[i] > 0) return "gradient of " + params[i].name;
  return "gradient norm";  // every gradient finite, the sum of their squares overflowed
}

// A Gpt stage for run_schedule: micro-batch k's forward and backward, with what its forward kept
// moved aside (a stash per micro-batch in flight) until its backward.
class GptStage : public PipelineStage {
 public:
  GptStage(Gpt& model, const std::vector<Batch>& micro, uint64_t seed, int64_t step)
      : model_(model), micro_(micro), kept_(micro.size()), seed_(seed), step_(step) {}
  Tensor forward(int k, const Tensor& input) override {
    float loss = 0;
    Tensor out = model_.forward_stage(micro_[k], input, seed_, step_, &loss);
    loss_sum_ += loss;
    kept_[k] = model_.take_activations();
    bytes_ += kept_[k].bytes();
    ++in_flight_;
    return out;
  }
  Tensor backward(int k, const Tensor& dout) override {
    bytes_ -= kept_[k].bytes();
    --in_flight_;
    model_.restore_activations(std::move(kept_[k]));
    Tensor dx = model_.backward_stage(dout);
    model_.take_activations();  // dropped: its backward is done
    return dx;
  }
  Shape activation_shape() const override {
    const GptConfig& cfg = model_.config();
    const int64_t n = micro_.front().seq * micro_.front().batch / model_.cp_size();  // CP: S/cp
    return Shape{cfg.sp ? n / model_.tp_size() : n, cfg.hidden};
  }
  Dtype activation_dtype() const override { return model_.config().compute_dtype(); }
  int64_t kept_bytes() const override { return bytes_; }
  int in_flight() const override { return in_flight_; }
  double loss_sum() const { return loss_sum_; }

 private:
  Gpt& model_;
  const std::vector<Batch>& micro_;
  std::vector<KeptActivations> kept_;
  uint64_t seed_;
  int64_t step_;
  double loss_sum_ = 0;
  int64_t bytes_ = 0;
  int in_flight_ = 0;
};

// Mixture of experts: the router statistics summed over the ranks that hold the batch's other
// tokens — the TP group under SP (each rank its s/t tokens; without SP they all hold the same),
// the CP group and the DP group — in one f32 all-reduce per group ("moe_router_stats"). The
// counts are exact in f32 up to 2^24 tokens.
RouterStatsReducer router_stats_reducer(ProcessGrid& grid, Device& device, bool sp) {
  std::vector<Communicator*> groups;
  if (sp) groups.push_back(&grid.tp());
  groups.push_back(&grid.cp());
  groups.push_back(&grid.dp());
  return [groups, &device](RouterStats& s) {
    const size_t E = s.choices.size();
    std::vector<float> packed(2 * E + 2);
    for (size_t e = 0; e < E; ++e) {
      packed[e] = static_cast<float>(s.choices[e]);
      packed[E + e] = static_cast<float>(s.prob_sum[e]);
    }
    packed[2 * E] = static_cast<float>(s.tokens);
    packed[2 * E + 1] = static_cast<float>(s.lse_sq_sum);
    Tensor t = Tensor::from_host(device, Shape{static_cast<int64_t>(packed.size())}, packed);
    for (Communicator* c : groups)
      if (c->size() > 1) {
        CommLedger::Scope scope(c->ledger(), "moe_router_stats");
        c->all_reduce(t);
      }
    packed = t.to_host();
    for (size_t e = 0; e < E; ++e) {
      s.choices[e] = packed[e];
      s.prob_sum[e] = packed[E + e];
    }
    s.tokens = packed[2 * E];
    s.lse_sq_sum = packed[2 * E + 1];
  };
}

// The parameters of the experts (Param::expert ≥ 0) and the rest, each in ParamList order.
std::pair<ParamList, ParamList> split_experts(const ParamList& params) {
  std::pair<ParamList, ParamList> out;  // (dense, experts)
  for (const Param& p : params) (p.expert >= 0 ? out.second : out.first).push_back(p);
  return out;
}

// Expert parallelism: an expert's gradient on its rank holds the terms of every rank of the EP
// group (their tokens came to it), each of its rank's mean loss; summed over the EDP group (the
// ranks holding the same expert) it is the sum over all dp ranks, so the average dp = 1 takes is
// that sum / dp: the EDP average (÷ dp/ep) then ÷ ep. The rest is averaged over DP as always.
void average_expert_parallel(ProcessGrid& grid, Device& device, ParamList& params, float* loss) {
  auto [dense, experts] = split_experts(params);
  average_gradients(grid.dp(), device, dense, loss);
  average_gradients(grid.edp(), device, experts, nullptr, "expert_data_parallel_grads");
  for (Param& p : experts) device.scale(p.grad, 1.0f / static_cast<float>(grid.ep_size()));
}

// ‖g‖ under EP: every rank holds the dense gradients whole (per TP shard) and E/ep experts, so
// the experts' squares are summed over the EP group ("ep_grad_norm") and added once.
// `counted`: as pipeline_grad_norm's (a last stage's copy of the tied wte is the first stage's).
double expert_parallel_grad_norm(ProcessGrid& grid, Device& device, const ParamList& params,
                                 const std::function<bool(const Param&)>& counted) {
  ParamList dense, experts;
  for (const Param& p : params)
    if (counted(p)) (p.expert >= 0 ? experts : dense).push_back(p);
  const double d = global_grad_norm(grid.tp(), device, dense);
  const double e = experts.empty() ? 0.0 : global_grad_norm(grid.tp(), device, experts);
  Tensor sq = Tensor::from_host(device, Shape{1}, {static_cast<float>(e * e)});
  {
    CommLedger::Scope scope(grid.ep().ledger(), "ep_grad_norm");
    grid.ep().all_reduce(sq);
  }
  return std::sqrt(d * d + static_cast<double>(sq.to_host()[0]));
}

// ZeRO-1 under EP: the rest's gradients reduce-scattered over DP (and the loss averaged), the
// experts' over EDP and ÷ ep as average_expert_parallel's; AdamW's two partitions
// (AdamW::shard_over(dp, edp, …)) take them in that order.
std::vector<Tensor> reduce_scatter_expert_parallel(ProcessGrid& grid, Device& device,
                                                   const ParamList& params, float* loss) {
  auto [dense, experts] = split_experts(params);
  std::vector<Tensor> shards{reduce_scatter_gradients(grid.dp(), device, dense, loss), Tensor()};
  if (!experts.empty()) {
    shards[1] = reduce_scatter_gradients(grid.edp(), device, experts, nullptr);
    device.scale(shards[1], 1.0f / static_cast<float>(grid.ep_size()));
  }
  return shards;
}

// ‖g‖ from those shards: each partition's as zero_grad_norm, the experts' squares summed over
// the EP group (each rank's experts are others).
double zero_expert_parallel_grad_norm(ProcessGrid& grid, Device& device, const ParamList& params,
                                      const std::vector<Tensor>& shards,
                                      const std::function<bool(const Param&)>& counted) {
  auto [dense, experts] = split_experts(params);
  const double d = zero_grad_norm(grid.dp(), grid.tp(), device, dense, shards[0], counted);
  const double e = experts.empty()
                       ? 0.0
                       : zero_grad_norm(grid.edp(), grid.tp(), device, experts, shards[1], counted);
  Tensor sq = Tensor::from_host(device, Shape{1}, {static_cast<float>(e * e)});
  {
    CommLedger::Scope scope(grid.ep().ledger(), "ep_grad_norm");
    grid.ep().all_reduce(sq);
  }
  return std::sqrt(d * d + static_cast<double>(sq.to_host()[0]));
}

bool holds_tied_copy(const Gpt& model, int pp) {
  return pp > 1 && model.config().tied && model.stage().head && !model.stage().embedding;
}

}  // namespace

StageLayout pipeline_stage_layout(const ProcessGrid& grid, const GptConfig& cfg,
                                  const std::vector<int64_t>& pp_layers) {
  const int n = grid.pp_size(), s = grid.pp_rank();
  if (n == 1) return StageLayout{};
  const std::vector<int64_t> counts = stage_layer_counts(cfg.layers, n, pp_layers);
  StageLayout stage;
  for (int i = 0; i < s; ++i) stage.first_layer += counts[static_cast<size_t>(i)];
  stage.end_layer = stage.first_layer + counts[static_cast<size_t>(s)];
  stage.embedding = s == 0;
  stage.head = s == n - 1;
  return stage;
}

void sum_embedding_gradients(Communicator& pp, Device& device, Gpt& model) {
  const int n = pp.size(), s = pp.rank();
  if (n == 1 || !model.config().tied || (s != 0 && s != n - 1)) return;
  Tensor g = model.wte_grad();
  Tensor theirs(device, g.shape());
  const int peer = s == 0 ? n - 1 : 0;
  {
    CommLedger::Scope scope(pp.ledger(), "embedding_grads");
    pp.send_recv(g, peer, theirs, peer);
  }
  device.axpy(1.0f, theirs, g);  // a + b on one side, b + a on the other: the same bits
}

namespace {
// The norm over the stages from each stage's: √(Σ_pp stage²), one all-reduce over `pp`.
double sum_over_stages(Communicator& pp, Device& device, double stage) {
  if (pp.size() == 1) return stage;
  Tensor sq = Tensor::from_host(device, Shape{1}, {static_cast<float>(stage * stage)});
  {
    CommLedger::Scope scope(pp.ledger(), "pp_grad_norm");
    pp.all_reduce(sq);
  }
  return std::sqrt(static_cast<double>(sq.to_host()[0]));
}

// Whether a stage's norm counts `p`: all but the last stage's copy of a tied wte.
std::function<bool(const Param&)> counted_on_stage(const Gpt& model, int pp) {
  const bool copy = holds_tied_copy(model, pp);
  return [copy](const Param& p) { return !(copy && p.name == "transformer.wte.weight"); };
}
}  // namespace

double pipeline_grad_norm(Communicator& tp, Communicator& pp, Device& device, Gpt& model) {
  const auto counts = counted_on_stage(model, pp.size());
  ParamList counted;
  for (const Param& p : model.params())
    if (counts(p)) counted.push_back(p);
  return sum_over_stages(pp, device, global_grad_norm(tp, device, counted));
}

std::vector<std::string> step_option_problems(const StepOptions& o, int dp, int64_t global_batch,
                                              float dropout) {
  std::vector<std::string> p;
  const int64_t local = dp > 0 ? global_batch / dp : global_batch;
  const int m = o.micro_batches;
  if (m < 1 || local % m != 0) {
    std::string divisors;
    for (int64_t d = 1; d <= local; ++d)
      if (local % d == 0) divisors += (divisors.empty() ? "" : ",") + std::to_string(d);
    p.push_back("--micro-batches=" + std::to_string(m) + " does not divide the batch per replica " +
                std::to_string(local) + " (batch " + std::to_string(global_batch) + " / dp " +
                std::to_string(dp) + "); choose one of {" + divisors + "}");
  } else if (m > 1 && dropout != 0.0f) {
    p.push_back("--micro-batches=" + std::to_string(m) +
                " with dropout=" + std::to_string(dropout) +
                ": dropout masks are keyed by the row of the batch run, so micro-batches would not "
                "match one batch; use dropout 0 or --micro-batches 1");
  }
  if (o.zero != 0 && o.zero != 1)
    p.push_back("--zero=" + std::to_string(o.zero) + " is not a stage this build has; use 0 or 1");
  else if (o.zero == 1 && dp == 1)
    p.push_back(
        "--zero 1 with dp=1: ZeRO-1 shards the optimizer state over the data-parallel "
        "group, and there is none; add --dp 2 (or more) or use --zero 0");
  return p;
}

StepResult train_step(Communicator& comm, Device& device, Gpt& model, AdamW& opt,
                      const Batch& batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm, const std::function<void(float loss)>& after_backward,
                      const StepOptions& options) {
  ProcessGrid grid(comm, 1);  // dp = pp = 1: the TP group is `comm` itself, nothing is split
  return train_step(grid, device, model, opt, batch, seed, step, lr, max_grad_norm, after_backward,
                    options);
}

StepResult train_step(ProcessGrid& grid, Device& device, Gpt& model, AdamW& opt,
                      const Batch& global_batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm, const std::function<void(float loss)>& after_backward,
                      const StepOptions& options) {
  const int dp = grid.dp_size(), pp = grid.pp_size();
  if (pp > 1) {
    const std::vector<std::string> pipe =
        pipeline_problems(model.config().layers, pp, options.micro_batches, options.schedule,
                          {});  // the stage split itself was checked when the model was built
    TP_CHECK_INPUT(pipe.empty(), pipe.empty() ? "" : pipe.front());
    TP_CHECK(!model.stage().whole(model.config().layers), "train_step: pp=", pp,
             " needs the model of one stage (pipeline_stage_layout)");
  }
  TP_CHECK(model.cp_size() == grid.cp_size(), "train_step: the grid has cp=", grid.cp_size(),
           " but the model runs cp=", model.cp_size(), " (Gpt::set_context_parallel(grid.cp()))");
  if (model.config().experts > 0) {
    // The balancing loss of each forward's tokens over every rank holding others of them (the
    // global batch, or the global micro-batch with --micro-batches), and its gradient shares
    // scaled so that the averages over dp and cp keep their sum.
    model.set_moe_reduction(router_stats_reducer(grid, device, model.config().sp),
                            static_cast<float>(dp * grid.cp_size()));
  }
  const bool ep = grid.ep_size() > 1;
  TP_CHECK(model.ep_size() == grid.ep_size(), "train_step: the grid has ep=", grid.ep_size(),
           " but the model runs ep=", model.ep_size(), " (Gpt::set_expert_parallel(grid.ep()))");

  TP_CHECK_INPUT(
      global_batch.batch % dp == 0, "batch=", global_batch.batch, " is not divisible by dp=", dp,
      ": every DP rank takes batch/dp sequences; choose a batch that is a multiple of ", dp);
  TP_CHECK_INPUT(dp == 1 || model.config().dropout == 0.0f, "dropout=", model.config().dropout,
                 " with dp=", dp,
                 ": dropout masks are keyed by the row of the local batch, so dp > 1 would not "
                 "match dp = 1; use dropout 0 or dp 1");
  const std::vector<std::string> bad =
      step_option_problems(options, dp, global_batch.batch, model.config().dropout);
  TP_CHECK_INPUT(bad.empty(), bad.empty() ? "" : bad.front());
  TP_CHECK(options.zero == 0 || opt.sharded(),
           "train_step: --zero 1 needs the optimizer sharded over dp (AdamW::shard_over)");
  const int64_t local = global_batch.batch / dp;
  const Batch mine =
      dp == 1 ? global_batch : batch_slice(global_batch, grid.dp_rank() * local, local);
  StepResult r;
  model.zero_grad();
  // Gradient accumulation: micro-batch k is sequences [k·local/m, (k+1)·local/m) of mine; its
  // gradients add into Param::grad (+=), and 1/m makes the sum the gradient of the mean loss.
  const int m = options.micro_batches;
  const int64_t micro = local / m;
  double loss_sum = 0;
  // bf16: the compute copies once for the step's micro-batches (the same bits as once per forward).
  struct OneRefresh {
    Gpt& model;
    ~OneRefresh() { model.set_refresh_per_forward(true); }
  } one_refresh{model};
  refresh_compute_copies(device, model.params());
  model.set_refresh_per_forward(false);
  if (pp == 1) {
    for (int k = 0; k < m; ++k) {
      loss_sum += model.forward(m == 1 ? mine : batch_slice(mine, k * micro, micro), seed, step);
      model.backward();
    }
  } else {
    // The stages run the micro-batches in the schedule's order; the loss is the last stage's.
    std::vector<Batch> pieces;
    for (int k = 0; k < m; ++k)
      pieces.push_back(m == 1 ? mine : batch_slice(mine, k * micro, micro));
    GptStage stage(model, pieces, seed, step);
    run_schedule(grid.pp(), device, stage, options.schedule, m, options.record);
    Tensor l = Tensor::from_host(device, Shape{1}, {static_cast<float>(stage.loss_sum())});
    {
      CommLedger::Scope scope(grid.pp().ledger(), "pp_loss");
      grid.pp().all_reduce(l);  // the last stage's, plus the balancing losses of the others
    }
    loss_sum = l.to_host()[0];
  }
  r.loss = static_cast<float>(loss_sum / m);
  if (m > 1)
    for (Param& p : model.params()) device.scale(p.grad, 1.0f / static_cast<float>(m));
  model.finish_gradients();
  sum_embedding_gradients(grid.pp(), device, model);
  // Context parallelism: each CP rank's gradients are of the mean loss over its S/cp · B tokens
  // (the ring's dK, dV carry the other ranks' terms home), all token counts equal, so their
  // average over the CP group is the whole batch's gradient; the loss too.
  average_gradients(grid.cp(), device, model.params(), &r.loss, "context_parallel_grads");
  Tensor grad_shard;              // ZeRO-1: my 1/dp of the averaged, flattened gradients
  std::vector<Tensor> ep_shards;  // ZeRO-1 under EP: the rest's over dp, the experts' over edp
  if (options.zero == 1 && ep)
    ep_shards = reduce_scatter_expert_parallel(grid, device, model.params(), &r.loss);
  else if (options.zero == 1)
    grad_shard = reduce_scatter_gradients(grid.dp(), device, model.params(), &r.loss);
  else if (ep)
    average_expert_parallel(grid, device, model.params(), &r.loss);
  else
    average_gradients(grid.dp(), device, model.params(), &r.loss);
  if (after_backward) after_backward(r.loss);
  // Every DP replica now holds the same gradients (ZeRO-1: its shard of them): the norm is the
  // whole model's, as at dp = 1.
  // ZeRO-1 on a pipeline: each stage's DP group holds that stage's shards, so the stage's norm
  // comes from them and the stages' are summed as without ZeRO.
  r.grad_norm =
      options.zero == 1 && ep
          ? sum_over_stages(grid.pp(), device,
                            zero_expert_parallel_grad_norm(grid, device, model.params(), ep_shards,
                                                           counted_on_stage(model, pp)))
      : options.zero == 1
          ? sum_over_stages(grid.pp(), device,
                            zero_grad_norm(grid.dp(), grid.tp(), device, model.params(), grad_shard,
                                           counted_on_stage(model, pp)))
      : ep ? sum_over_stages(grid.pp(), device,
                             expert_parallel_grad_norm(grid, device, model.params(),
                                                       counted_on_stage(model, pp)))
           : pipeline_grad_norm(grid.tp(), grid.pp(), device, model);
  // The averaged loss and the norm are the same on every rank: every rank takes the same branch.
  if (!std::isfinite(r.loss))
    r.nonfinite = "loss";
  else if (!std::isfinite(r.grad_norm))
    r.nonfinite = first_nonfinite_gradient(grid.tp(), device, model.params());
  if (!r.nonfinite.empty()) return r;  // no update: the weights and AdamW's state stay as they were
  r.clip = clip_factor(r.grad_norm, max_grad_norm);
  if (options.zero == 1 && ep)
    opt.step_sharded(model.params(), ep_shards, lr, r.clip);
  else if (options.zero == 1)
    opt.step_sharded(model.params(), grad_shard, lr, r.clip);
  else
    opt.step(model.params(), lr, r.clip);
  return r;
}

}  // namespace tp
