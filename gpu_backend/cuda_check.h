// cuda_check.h — every CUDA, cuBLAS and NCCL call checked; a failure throws tp::Error naming the
// call, the file and line, and the library's own message.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                               \
  do {                                                                                 \
    const cudaError_t err_ = (call);                                                   \
    TP_CHECK(err_ == cudaSuccess, #call, " failed at ", __FILE__, ":", __LINE__, ": ", \
             cudaGetErrorString(err_));                                                \
  } while (0)

/// After a kernel launch: launch errors (bad configuration) are reported at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                \
  do {                                                                                    \
    const cublasStatus_t st_ = (call);                                                    \
    TP_CHECK(st_ == CUBLAS_STATUS_SUCCESS, #call, " failed at ", __FILE__, ":", __LINE__, \
             ": cuBLAS status ", static_cast<int>(st_));                                  \
  } while (0)
