// test_util.h — shared test helpers: the device, random host data, relative error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/host.h"

namespace tp {
class CpuDevice;
}

namespace tp::testing {

/// The CPU device every test uses.
Device& device();
/// A fresh CPU device made while the environment variable `name` is `value` (nullptr: unset),
/// restored afterwards: the backend's choices it reads when made (TP_CPU_BF16_GEMM,
/// TP_CPU_PACKED_GEMM). Throws what the constructor throws.
std::unique_ptr<CpuDevice> cpu_device_with_env(const char* name, const char* value);
/// All ranks of the job (defined by mpi_main.cpp; MPI tests only).
Communicator& world();

/// An empty folder of the running test's own under GoogleTest's TempDir, "<prefix><test name>/"
/// (with the slash: a --save folder), emptied first when an earlier run left it.
std::string empty_test_folder(const std::string& prefix);

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

/// all_to_all_v on `c` with tensors on `dev` (every rank calls it; EXPECT_* only), in f32 and bf16:
/// a count matrix from `seed` (0-4 rows per pair, with zeros: some self-blocks, one rank that
/// sends nothing, one pair both ways), rows whose values name (source, destination, row, col)
/// so the result is compared with the definition exactly (ids < 256: exact in bf16 too), blocking
/// and asynchronous;
/// exchange_counts gives each rank its column of the matrix; the ledger's record (elements,
/// bytes, wire bytes without the self-block); bad shapes and counts refused with their line
/// before anything moves. Shared by the MPI tests (CPU) and the GPU tests (NCCL, host-staged).
void check_all_to_all_v(Communicator& c, Device& dev, unsigned seed);

/// bf16 collectives on `c` with tensors on `dev` (every rank calls it; EXPECT_* only). Rank r holds
/// bf16 partial sums p_r (random, full 8-bit significands, mixed signs); the bf16 all-reduce and
/// reduce-scatter are compared with the exact sum in double and with the f32 collective of the
/// same bf16 values, under the bound of t − 1 combines that each round once (bf16_sum_bound);
/// every rank holds the same bits; all-gather, broadcast and send-recv of bf16 move the bits
/// unchanged; every bf16 ledger record counts 2 B per element, half of its f32 twin.
void check_bf16_collectives(Communicator& c, Device& dev);

/// What a backend answers about its bf16 kernels, checked as properties over every Kernel
/// (core/kernel.h; EXPECT_* only): a kernel it runs natively in bf16 is one it takes in bf16, and
/// it takes every kernel a --precision bf16 step calls with bf16 tensors (Gpt::bf16_kernels), so
/// that a backend's list cannot drift from the model's.
void check_bf16_kernel_answers(const Device& dev);

/// The error bound of a sum of `terms` values computed by terms − 1 combines, each of which adds
/// exactly (f32 holds the sum of two bf16 values to within f32's own rounding) and rounds once to
/// a format of unit roundoff u (bf16: u = 2^−8, half an ulp relative to a value in [1, 2)):
///   |ŝ − s| ≤ γ_{terms−1} Σ|p_r|,   γ_k = k u / (1 − k u)
/// (Higham, "Accuracy and Stability of Numerical Algorithms", §4.2: any order of pairwise sums).
/// The f32 rounding inside each combine adds at most 2^−24 relative, well inside the slack of γ
/// over k u; bf16_sum_bound adds it explicitly anyway.
double bf16_sum_bound(int terms, double sum_abs);

}  // namespace tp::testing
