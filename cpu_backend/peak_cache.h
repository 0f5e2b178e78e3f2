// peak_cache.h — the peak FLOP/s that MFU divides by, remembered per machine.
//
// On the CPU the peak is the one-thread sgemm ceiling (measured once: CpuDevice::measure_peak,
// peak_probe.cpp) times the threads a rank runs. The measurement takes a second or two, so it is
// kept in a small text file, $XDG_CACHE_HOME/tp-from-scratch/sgemm-peak.txt (or ~/.cache/…),
// one line per machine:
//   <key> TAB <GFLOP/s>
// keyed by the CPU's model name and the OpenBLAS kernels in use (openblas_get_corename(): the
// same CPU under OPENBLAS_CORETYPE=Haswell has another ceiling). No cache folder (no HOME), an
// unreadable or unwritable file: measured again, never an error. A value measured while the
// machine was busy reads low; tp_train measures again after a run whose MFU passed 100 % and
// stores the higher one (CpuDevice::remeasure_peak).
#pragma once

#include <string>

namespace tp {

/// "model name" of /proc/cpuinfo ("unknown cpu" where there is none).
std::string cpu_model_name();

/// The cache file's path, "" when neither XDG_CACHE_HOME nor HOME is set.
std::string peak_cache_path();

/// The key of this machine: "<cpu model> | openblas <core>" (tabs and newlines made spaces).
std::string peak_cache_key(const std::string& cpu_model, const std::string& blas_core);

/// The GFLOP/s stored under `key` in `path`, or 0 when there is none (or no file).
double cached_peak(const std::string& path, const std::string& key);

/// Stores `gflops` under `key` in `path` (replacing that key's line), creating the folder; false
/// when it could not (the caller measures again next time).
bool store_peak(const std::string& path, const std::string& key, double gflops);

}  // namespace tp
