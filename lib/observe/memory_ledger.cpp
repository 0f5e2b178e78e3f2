#include "observe/memory_ledger.h"

namespace tp {

void MemoryLedger::save(const std::string& name, int64_t layer, const Tensor& t) {
  if (!t.defined()) return;
  for (const Tensor& k : kept_)
    if (k.raw() == t.raw() && k.numel() == t.numel()) return;  // already counted (a shared input)
  records_.push_back({name, t.shape(), static_cast<int64_t>(t.bytes()), layer});
  kept_.push_back(t);
}

int64_t MemoryLedger::layer_bytes(int64_t layer) const {
  int64_t sum = 0;
  for (const auto& r : records_)
    if (r.layer == layer) sum += r.bytes;
  return sum;
}

int64_t MemoryLedger::total_bytes() const {
  int64_t sum = 0;
  for (const auto& r : records_) sum += r.bytes;
  return sum;
}

}  // namespace tp
