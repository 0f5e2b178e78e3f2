// gpu_entry.h — the one entry point into the GPU backend. The build links either the real GPU
// backend (gpu_backend/, when nvcc is found) or no_gpu.cpp, which says why there is none. No
// #ifdef: the choice is made at link time.
#pragma once

#include <memory>

#include "core/device.h"

namespace tp {
/// A CUDA device for the rank with node-local index `local_rank`.
std::unique_ptr<Device> make_gpu_device(int local_rank);
}  // namespace tp
