// emu_internal.h — what the CUDA emulator's runtime files (tests/cuda_emu/*.cpp) share among
// themselves beyond the CUDA API. The emulated code never sees it: its interface is include/.
#pragma once

#include "cuda_runtime.h"

namespace cuda_emu {

// ---- runtime_api.cpp ----
/// What is running ("host code", or the queued work in device mode), for the diagnostics.
extern const char* g_work;
/// Records e (unless cudaSuccess) for cudaGetLastError; returns e.
cudaError_t fail(cudaError_t e);
/// The environment variable `name` as an int; fallback when it is unset or empty.
int env_int(const char* name, int fallback);

// ---- memory.cpp ----
/// Reserves the device arena and installs the fault handler that guards it (once).
void init_memory();

/// Device mode: entered around every piece of queued work; leaving the outermost level closes
/// what the work opened.
struct DeviceMode {
  const char* saved;
  explicit DeviceMode(const char* what);
  ~DeviceMode();
};

// ---- streams.cpp ----
/// Runs everything queued, on the NULL stream and then on every other stream.
void run_everything();

}  // namespace cuda_emu
