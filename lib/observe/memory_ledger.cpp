#include "observe/memory_ledger.h"

#include "observe/activation_stash.h"

namespace tp {

void MemoryLedger::save(const std::string& name, int64_t layer, const Tensor& t,
                        SavedTensor* slot) {
  if (!t.defined()) return;
  if (slot) slots_.push_back(slot);
  for (const Tensor& k : kept_)
    if (k.raw() == t.raw() && k.numel() == t.numel()) return;  // already counted (a shared input)
  records_.push_back({name, t.shape(), static_cast<int64_t>(t.bytes()), layer, t.dtype()});
  kept_.push_back(t);
}

void MemoryLedger::release() {
  for (SavedTensor* s : slots_) s->reset();
  clear();
}

KeptActivations MemoryLedger::take() {
  KeptActivations out;
  for (SavedTensor* s : slots_)
    if (s->value_.has_value()) {
      out.values.emplace_back(s, *s->value_);
      s->reset();
    }
  out.records = std::move(records_);
  out.kept = std::move(kept_);
  clear();
  return out;
}

void MemoryLedger::restore(KeptActivations kept) {
  clear();
  for (auto& [slot, value] : kept.values) {
    slot->value_ = std::move(value);
    slots_.push_back(slot);
  }
  records_ = std::move(kept.records);
  kept_ = std::move(kept.kept);
}

int64_t KeptActivations::bytes() const {
  int64_t sum = 0;
  for (const auto& r : records) sum += r.bytes;
  return sum;
}

int64_t MemoryLedger::layer_bytes(int64_t layer) const {
  int64_t sum = 0;
  for (const auto& r : records_)
    if (r.layer == layer) sum += r.bytes;
  return sum;
}

int64_t MemoryLedger::layer_bytes(int64_t layer, Dtype dtype) const {
  int64_t sum = 0;
  for (const auto& r : records_)
    if (r.layer == layer && r.dtype == dtype) sum += r.bytes;
  return sum;
}

int64_t MemoryLedger::total_bytes() const {
  int64_t sum = 0;
  for (const auto& r : records_) sum += r.bytes;
  return sum;
}

}  // namespace tp
