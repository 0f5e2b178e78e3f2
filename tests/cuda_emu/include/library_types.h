// library_types.h (CUDA emulator) — the data-type enumeration shared by the CUDA libraries.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
};
typedef cudaDataType_t cudaDataType;
