// test_util.h — shared test helpers: the device, random host data, relative error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/host.h"

namespace tp::testing {

/// The CPU device every test uses.
Device& device();
/// All ranks of the job (defined by mpi_main.cpp; MPI tests only).
Communicator& world();

/// n values from the counter-based RNG keyed by (seed, name): uniform in [-1, 1).
std::vector<float> random_vector(const std::string& name, int64_t n, uint64_t seed = 1234);

/// ‖got − want‖₂ / ‖want‖₂ (or ‖got − want‖₂ when want is zero); infinity on a size mismatch.
using tp::rel_error;

/// {f(i), f(i) + … } helpers for closed-form expectations.
std::vector<float> iota_vector(int64_t n, float start = 0.0f, float step = 1.0f);

/// Point-to-point send / recv on `c` with tensors on `dev` (every rank calls it; nothing at t = 1;
/// EXPECT_* only): a token passed around the ring with blocking calls, a pairwise exchange of a
/// 3-d tensor, rank 0's asynchronous sends to every peer in flight at once while it computes,
/// the ledger's records, and peers that are not another rank of the group rejected before
/// anything moves. Shared by the MPI tests (CPU) and the GPU tests (NCCL, host-staged MPI).
void check_point_to_point(Communicator& c, Device& dev);

}  // namespace tp::testing
