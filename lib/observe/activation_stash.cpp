#include "observe/activation_stash.h"

#include "core/error.h"

namespace tp {

const Tensor& SavedTensor::get() const {
  TP_CHECK(value_.has_value(), name_,
           " was not kept by forward (backward before forward, or a variant",
           " that does not keep it)");
  return *value_;
}

const Tensor& ActivationStash::keep(SavedTensor& slot, const Tensor& t) {
  TP_CHECK(t.defined(), "keeping ", slot.name(), " for backward: the tensor is empty");
  if (ledger_ && !ledger_->keeping()) {
    slot.value_.reset();  // full recomputation: backward reruns the forward that fills it
    return t;
  }
  slot.value_ = t;
  if (ledger_) ledger_->save(slot.name(), layer_, t, &slot);
  return *slot.value_;
}

}  // namespace tp
