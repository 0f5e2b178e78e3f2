// evaluate.h — the validation loss: the model's mean loss on held-out data (tp_train --eval-every).
//
// A fixed set of held-out batches (TokenSource::held_out_batch 0 .. K-1, the same at every
// evaluation of a run and for every t), forward only, dropout off; the mean of their mean losses.
// Collective over the model's TP group (every rank of it calls it with the same arguments); the
// result is the same on every rank, and for every t up to fp32 rounding.
#pragma once

#include <cstdint>
#include <functional>

#include "model/data.h"
#include "model/gpt.h"

namespace tp {

/// Which part of each held-out batch this TP group runs, and in how many forwards: a DP replica
/// takes sequences [first, first + count) (count 0: all), as `micro` forwards of count/micro
/// sequences, so that evaluation needs no more activation memory than a training micro-batch.
/// The replicas' results are then averaged over the DP group (equal token counts).
struct EvalSlice {
  int64_t first = 0, count = 0;
  int micro = 1;
};

/// Asked after each held-out batch whether to stop (tp_train: a SIGTERM agreed by every rank, so a
/// long evaluation does not keep the job waiting); true ends the evaluation, which returns NaN.
/// Every rank of the call must get the same answer after the same batch (a collective answer).
using StopEvaluation = std::function<bool()>;

/// Mean loss of `model` over held-out batches 0 .. batches-1 of `source` (B = batch, S = seq), or
/// over `slice` of each. Nothing is updated: the gradients are left as they were (no backward
/// runs); dropout is off during it and on again after.
double held_out_loss(Gpt& model, const TokenSource& source, int64_t batches, int64_t batch,
                     int64_t seq, uint64_t seed, const EvalSlice& slice = {},
                     const StopEvaluation& stop = {});

/// The same for one pipeline stage (`model` built with this rank's StageLayout, `pp` its PP
/// group): each held-out (micro-)batch goes forward through the stages, stage s receiving stage
/// s − 1's output and sending its own to s + 1 (no backward, nothing kept), and the last stage's
/// mean loss is broadcast over `pp`. Collective over the TP group and `pp`; with pp.size() = 1 it
/// is the call above. Equal to it on the whole model up to fp32 rounding (the same forward, cut).
double held_out_loss(Gpt& model, Communicator& pp, const TokenSource& source, int64_t batches,
                     int64_t batch, int64_t seq, uint64_t seed, const EvalSlice& slice = {},
                     const StopEvaluation& stop = {});

}  // namespace tp
