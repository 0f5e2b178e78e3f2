// cpu_direct.h — the CPU beneath the Device, for the programs that measure it (tools/tp_bench):
// OpenBLAS's sgemm called directly, the yardstick Device::gemm is timed against, the OpenMP
// thread count the kernels run on, and which OpenBLAS this is. The only cpu_backend header besides cpu_device.h that the layers
// above may include, so that no program outside cpu_backend/ needs <cblas.h> or <omp.h>.
//
//   C = alpha · op(A) op(B) + beta · C      op(A): (m, k), op(B): (k, n), C: (m, n), row-major f32
#pragma once

#include <cstdint>

namespace tp::cpu {

/// C = alpha op(A) op(B) + beta C straight through cblas_sgemm: never oneDNN (which cpu::sgemm,
/// blas.h, may choose), no handling of empty shapes. lda, ldb, ldc are row strides; every size
/// must fit CBLAS's int.
void direct_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc);

/// The threads an OpenMP kernel of this process runs on (omp_get_max_threads(): the launcher's
/// thread rule, launcher/node.h), also OpenBLAS's count (blas.h, set_blas_threads).
int openmp_threads();

/// The kernels OpenBLAS picked for this CPU (openblas_get_corename(): "Haswell", "SkylakeX"; or
/// what OPENBLAS_CORETYPE forced).
const char* openblas_core();

/// How this OpenBLAS was built (openblas_get_config()).
const char* openblas_config();

}  // namespace tp::cpu
