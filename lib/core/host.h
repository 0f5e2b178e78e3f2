// host.h — small host-side matrix helpers (row-major std::vector<float>): for expected values in
// lessons and tests, and for cutting a shard out of a global matrix on load. Never on a hot path.
#pragma once

#include <cstdint>
#include <vector>

namespace tp {

/// (m × k) · (k × n), double accumulation.
std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                               int64_t k, int64_t n);
/// The transpose of an (m × n) matrix.
std::vector<float> host_transpose(const std::vector<float>& a, int64_t m, int64_t n);
/// Rows [r0, r0 + rows) × columns [c0, c0 + cols) of a matrix with `ld` columns.
std::vector<float> host_block(const std::vector<float>& a, int64_t ld, int64_t r0, int64_t rows,
                              int64_t c0, int64_t cols);

}  // namespace tp
