// pipeline_parallel.h — pipeline parallelism over the PP axis of a ProcessGrid
// (parallel/process_grid.h): the blocks cut into N stages, micro-batches flowing through them.
//
// Stage s holds a contiguous range of blocks (an even split by default, `--pp-layers 3,5` to
// choose); the first stage also the embeddings (wte's lookup, wpe), the last ln_f, the head and the
// loss. A tied head needs wte on the last stage too: both stages hold a copy, initialised alike,
// and after backward their gradients are summed between the two (sum_embedding_gradients: what
// Megatron calls the embedding group), so both take the same AdamW step and stay equal. Untied,
// wte lives on the first stage and lm_head on the last.
//
// A micro-batch's activation (S·B/m rows, h; under SP this rank's 1/t of the rows) goes from stage
// s to s + 1 by send/recv on the PP group, its gradient back from s + 1 to s. Each stage runs its
// part as forward / backward ops in the order of a schedule:
//
//   AFAB (GPipe)  F0 F1 … F(m−1)  B0 B1 … B(m−1)             keeps m micro-batches in flight
//   1F1B          warm-up: N − s − 1 forwards; steady: one forward, one backward; cool-down: the
//                 remaining backwards                         keeps at most N − s in flight
//
// Both leave the same idle time at the ends of the step, the bubble: with forward and backward
// times F and B per micro-batch and stage, the step lasts (m + N − 1)(F + B) of which each stage
// works m(F + B), so the idle share is (N − 1)/(m + N − 1). 1F1B does not shrink the bubble, it
// bounds the activations a stage keeps: the first stage keeps N micro-batches instead of m.
//
// Which model a stage runs is not this file's business: run_schedule drives a PipelineStage, and
// model/train.cpp implements one for the Gpt (its stage's blocks, a stash of activations per
// micro-batch in flight). The tied embedding's gradient sum and the norm over the stages are
// there too (model/train.h).
//
// Transfers block (send / recv on the PP group). Where two neighbours would each send first — 1F1B's
// steady state, stage s sending an activation up while s + 1 sends a gradient down — both sides
// make the pair one send_recv (grouped on NCCL), as Megatron's send_forward_recv_backward does, so
// no backend, whether its sends wait for their receive or not, can deadlock. The gradients of a stage accumulate over its micro-batches (+=), then
// train_step (model/train.h) scales, sums and averages them as for pp = 1.
//
// Shape legend: N = stages (pp), s = stage, m = micro-batches, L = blocks; S, B, h as everywhere.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace tp {

/// The order a stage runs its micro-batches in (--schedule).
enum class Schedule { Afab, OneFOneB };
/// "afab" | "1f1b"; anything else is bad input (one line naming the choices).
Schedule parse_schedule(const std::string& name);
/// The name parse_schedule takes.
const char* schedule_name(Schedule s);

/// Blocks per stage: `chosen` when given (--pp-layers), else an even split of `layers` over
/// `stages` (the first layers % stages stages one more). Call pipeline_problems() first.
std::vector<int64_t> stage_layer_counts(int64_t layers, int stages,
                                        const std::vector<int64_t>& chosen = {});
/// "3,5" → {3, 5} (--pp-layers); "" → {}. Anything but positive integers and commas is bad input.
std::vector<int64_t> parse_pp_layers(const std::string& text);
/// Every bad-input problem of a pipeline of `stages` over `layers` blocks with m micro-batches,
/// each one line naming the value and the fix; empty when fine.
std::vector<std::string> pipeline_problems(int64_t layers, int stages, int micro_batches,
                                           Schedule schedule,
                                           const std::vector<int64_t>& chosen = {});

/// One op of a schedule: the forward or the backward of micro-batch `micro`.
struct PipelineOp {
  bool forward = true;
  int micro = 0;
  /// "F3" or "B3".
  std::string label() const;
};
/// The ops stage `stage` of `stages` runs, in order, for m micro-batches.
std::vector<PipelineOp> schedule_ops(Schedule schedule, int stages, int stage, int micro_batches);
/// The most micro-batches the stage keeps activations for: m (AFAB), min(N − stage, m) (1F1B).
int in_flight_formula(Schedule schedule, int stages, int stage, int micro_batches);
/// The idle share of a step: (N − 1)/(m + N − 1).
double bubble_formula(int stages, int micro_batches);

/// What one stage's step did: each op as it ran, with its start and end (seconds since the
/// step's start: a barrier over the PP group), and the activations it kept.
struct PipelineRecord {
  struct Span {
    PipelineOp op;
    double start = 0, end = 0;
  };
  std::vector<Span> ops;
  double seconds = 0;                 ///< the step, from the first barrier to the last
  int64_t peak_activation_bytes = 0;  ///< the most the stage's ledger held at once
  int peak_in_flight = 0;             ///< the most micro-batches kept at once
  /// The stage's idle share of the step: 1 − Σ op time / seconds.
  double bubble() const;
  /// "F0 F1 … B0 …": the ops in the order they ran.
  std::string row() const;
};

/// What a stage computes; the schedule (run_schedule) decides when. The model's side lives in
/// model/train.cpp (a Gpt stage), so this file knows no model.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  /// The forward of micro-batch k from `input`, the previous stage's output (undefined on the
  /// first stage); returns the output for the next stage (ignored on the last).
  virtual Tensor forward(int micro, const Tensor& input) = 0;
  /// The backward of micro-batch k from `dout`, the gradient of its output (undefined on the last
  /// stage); returns the gradient of its input (ignored on the first).
  virtual Tensor backward(int micro, const Tensor& dout) = 0;
  /// The activation between two stages, for the receive buffers: (S·B/m, h), under SP /t rows.
  virtual Shape activation_shape() const = 0;
  /// The dtype of that activation and of its gradient (bf16 under --precision bf16, so a
  /// transfer moves 2 B per element); the receive buffers take it, the sends are checked for it.
  virtual Dtype activation_dtype() const { return Dtype::f32; }
  /// Bytes of activations the stage keeps for backward now (the ledgers of its micro-batches).
  virtual int64_t kept_bytes() const = 0;
  /// Micro-batches whose activations the stage keeps now.
  virtual int in_flight() const = 0;
};

/// Runs one step's m forwards and backwards on this stage (`pp`: the PP group, stage = its rank)
/// in the order of `schedule`: receives each input from stage − 1 and each output gradient from
/// stage + 1, sends outputs up and input gradients down (1F1B's crossing pairs as one send_recv). Collective over `pp`. With `record`, the step starts and ends with a
/// barrier over `pp` and every op is timed. With a Timeline set on `device`, every op is also a
/// Phase span ("F3", "B3") around its kernels (observe/timeline.h).
void run_schedule(Communicator& pp, Device& device, PipelineStage& stage, Schedule schedule,
                  int micro_batches, PipelineRecord* record = nullptr);

/// A named tensor on the host (a checkpoint's global tensor).
struct NamedHostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
/// Pipeline checkpoints: every stage's tensors to stage 0, which returns them all in stage order
/// (its own first); the other stages return theirs. Collective over `pp` (two sends per stage:
/// the length, then names, shapes and values encoded as floats).
std::vector<NamedHostTensor> gather_to_first_stage(Communicator& pp, Device& device,
                                                   const std::vector<NamedHostTensor>& mine);

}  // namespace tp
