// audit.h — the replicated-parameter gradient audit.
//
// A replicated parameter (norm weights, row-parallel biases, wpe) must end every backward pass with
// the same gradient on every rank of the TP group, equal to the single-device gradient. The two
// classic bugs break that in recognisable ways: under sequence parallelism each rank only sees its
// own tokens, so a gradient that is never summed over the group is a partial sum (their sum is
// the reference), and one that is averaged instead of summed is the reference divided by t.
#pragma once

#include <string>
#include <vector>

#include "core/communicator.h"
#include "model/gpt.h"

namespace tp {

/// Compares every replicated gradient of `model` (after backward and finish_gradients) across the
/// ranks of `comm` and with `reference`, the same model at t = 1 after the same step. Returns one
/// line per parameter that fails, naming the likely bug; empty when every gradient passes.
/// `rtol`: relative tolerance ‖a − b‖ / ‖b‖ (fp32 rounding of a different summation order; under
/// --precision bf16 tp_train passes 0.05, the bound of tests/model/test_precision_mpi.cpp).
std::vector<std::string> audit_replicated_gradients(Communicator& comm, const Gpt& model,
                                                    const Gpt& reference, double rtol = 1e-4);

}  // namespace tp
