#include "model/recompute.h"

#include "core/error.h"

namespace tp {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  TP_CHECK_INPUT(false, "--recompute=", name, ": unknown; use none, selective or full");
  return Recompute::None;
}

const char* recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
    case Recompute::None:
      break;
  }
  return "none";
}

}  // namespace tp
