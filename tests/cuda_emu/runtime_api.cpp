// runtime_api.cpp — the CUDA emulator's runtime API outside memory and streams: errors
// (cudaGetLastError, and fatal, which reports what the emulator catches with a backtrace and
// aborts), devices and their properties. See include/cuda_emu.h for what is and is not modelled.
//
// Environment: TP_EMU_GPUS (devices per process, default 1), TP_EMU_SHARED_GPU=1 (every process
// sees the same GPU, as ranks sharing one card do; default: each process has its own),
// TP_EMU_MEMORY_MB (device memory, default 8192).
#include <execinfo.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_runtime.h"
#include "emu_internal.h"

namespace cuda_emu {

const char* g_work = "host code";  // what is running, for the diagnostics

namespace {

cudaError_t g_last_error = cudaSuccess;
int g_device = 0;

}  // namespace

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) g_last_error = e;
  return e;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

[[noreturn]] void fatal(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\ncuda-emu: ERROR in %s: %s\n", g_work, msg);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  std::fflush(stderr);
  std::abort();
}

}  // namespace cuda_emu

using namespace cuda_emu;

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
  }
  return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = env_int("TP_EMU_GPUS", 1);
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice);
  g_device = device;
  init_memory();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulator on the CPU");
  // Distinct GPUs per process unless TP_EMU_SHARED_GPU=1 (ranks sharing one card).
  const long id = env_int("TP_EMU_SHARED_GPU", 0) != 0 ? 0 : static_cast<long>(getpid());
  const int64_t uuid[2] = {id, device};
  std::memcpy(prop->uuid.bytes, uuid, sizeof uuid);
  prop->totalGlobalMem = static_cast<size_t>(env_int("TP_EMU_MEMORY_MB", 8192)) << 20;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  run_everything();
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}
