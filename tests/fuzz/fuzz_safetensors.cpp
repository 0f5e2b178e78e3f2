// fuzz_safetensors.cpp — libFuzzer target for the safetensors reader (make fuzz).
//
// Each input is written to a file and opened with tp::safetensors::File::open, then every tensor
// it declares is read. A bad file must end in a tp::Error (the one-line bad-input message); any
// other exception, a crash, a leak or an AddressSanitizer report is a finding. Seeds: real
// checkpoints written by tp_train and the writer (make fuzz creates them).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

namespace {

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/tp_fuzz_safetensors." +
           std::to_string(static_cast<long>(::getpid()));
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0 && std::fwrite(data, 1, size, f) != size) {
    std::fclose(f);
    return 0;
  }
  std::fclose(f);
  try {
    const tp::safetensors::File file = tp::safetensors::File::open(path);
    for (const std::string& name : file.names()) {
      const auto& info = file.info(name);
      if (info.numel() > (int64_t{1} << 24)) continue;  // a valid header may declare huge tensors
      if (info.dtype == tp::safetensors::DType::F32)
        (void)file.read_f32(name);
      else if (info.dtype == tp::safetensors::DType::I32)
        (void)file.read_i32(name);
    }
    (void)file.metadata("format");
  } catch (const tp::Error& e) {
    const std::string msg = e.what();
    if (msg.find('\n') != std::string::npos) __builtin_trap();  // messages are one line
  }
  return 0;
}
