#include "parallel/overlap.h"

#include "core/error.h"

namespace tp {

Overlap parse_overlap(const std::string& name) {
  if (name == "none") return Overlap::None;
  if (name == "async") return Overlap::Async;
  if (name == "ring") return Overlap::Ring;
  TP_CHECK_INPUT(false, "--overlap=", name, ": unknown; use none, async or ring");
  return Overlap::None;
}

const char* overlap_name(Overlap overlap) {
  switch (overlap) {
    case Overlap::Async:
      return "async";
    case Overlap::Ring:
      return "ring";
    case Overlap::None:
      break;
  }
  return "none";
}

}  // namespace tp
