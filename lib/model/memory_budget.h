// memory_budget.h — fitting a per-rank memory budget (tp_train --memory-budget, lesson 14): the
// peak per rank of a run's choices (t, mixed precision, recomputation, micro-batches, ZeRO-1)
// from the preflight, and the cheapest change of them that fits, searched in the source articles'
// order.
//
// The order ([A2] §5.3: TP for the weights, then mixed precision, then recomputation, and a larger
// TP last, since every step up in t adds communication; [A3]: the smallest t that fits): the run's
// t as given, then --precision bf16 (it halves the activations but adds a 2-byte copy of the
// weights: 18 B per parameter of model states against fp32's 16, so it may not save), then
// --recompute selective, then full, then --micro-batches m (m ascending, dividing the batch per
// replica), then --zero 1 (only with dp > 1), then a larger t (the same ranks as fewer, larger TP
// groups: dp = world / t). One change of the run's choices is tried first, in that order, and the
// first that fits is the answer; when none does, the changes are stacked: each kind in the order
// above is tried at each of its values on top of the previous kinds at their most saving value
// (a larger t that leaves dp = 1 drops ZeRO-1). A candidate must be a valid run (the preflight's
// problems, step_option_problems, no dropout with dp > 1 as tp_train requires).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/memory.h"
#include "model/recompute.h"

namespace tp {

/// One set of the memory stack's choices for a run of `world` ranks.
struct MemoryChoice {
  int t = 1;   ///< TP group size
  int dp = 1;  ///< data-parallel replicas, world = t · dp
  Recompute recompute = Recompute::None;
  int micro_batches = 1;
  int zero = 0;  ///< ZeRO stage on the dp axis (0 or 1)
  Precision precision = Precision::Fp32;
  /// "t=2 dp=2 precision=bf16 recompute=selective micro-batches=4 zero=1" (every field).
  std::string str() const;
  /// The flags that turn `from` into this: "--dp 1 (t=4) --precision bf16 --recompute full" (""
  /// when equal).
  std::string flags_from(const MemoryChoice& from) const;
};

/// The peak per rank of `cfg` (its recompute and precision ignored: `c` decides) trained on `global_batch`
/// sequences of `seq` tokens with choices `c`: the preflight's MemoryPeak. Empty `problems` when
/// `c` is a valid run; else its problems (one line each) and a zero peak.
struct MemoryEstimate {
  MemoryChoice choice;
  MemoryPeak peak;
  std::vector<std::string> problems;
};
MemoryEstimate estimate_memory(const GptConfig& cfg, int64_t seq, int64_t global_batch,
                               const MemoryChoice& c);

/// The verdict on a budget: `fits` when `base` itself fits; else `found` with the cheapest
/// change (`best`), or neither (`best` then holds the smallest peak tried). `message` is the one
/// line tp_train stops with ("" when the base fits).
struct BudgetVerdict {
  bool fits = false, found = false;
  MemoryEstimate base, best;
  int tried = 0;  ///< valid candidates estimated
  std::string message;
};
BudgetVerdict fit_memory_budget(const GptConfig& cfg, int64_t seq, int64_t global_batch, int world,
                                const MemoryChoice& base, int64_t budget_bytes);

/// The memory-stack table (tp_preflight, lesson 14's formula column): `cfg` on `world` ranks
/// (0: not given), `batch` sequences per TP group, one row each and stacked:
/// t = 1, 2, 4, ... up to the `t` asked for (dp = world / t where the world is given), then at `t` --precision
/// bf16, --recompute selective, full, --micro-batches `m` (when m > 1), --zero 1 over dp (when dp > 1). Each row's
/// peak per rank (fp32 before the bf16 row, bf16 from it on), split into weights, gradients, optimizer state and activations; a row
/// that is no valid run shows its first problem instead.
std::string memory_stack_table(const GptConfig& cfg, int64_t batch, int t, int world, int m);

/// Bytes as MiB with one decimal ("12.5 MiB").
std::string mib(int64_t bytes);

}  // namespace tp
