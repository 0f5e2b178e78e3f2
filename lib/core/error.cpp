#include "core/error.h"

namespace tp {

void check_divisible(const std::string& what, long long value, int t) {
  TP_CHECK_INPUT(t >= 1, "the tensor-parallel size t=", t, " must be at least 1");
  if (value > 0 && value % t == 0) return;
  std::string valid;
  for (long long d = 1; d <= value && d <= 64; ++d) {
    if (value % d == 0) valid += (valid.empty() ? "" : ", ") + std::to_string(d);
  }
  TP_CHECK_INPUT(false, what, "=", value, " is not divisible by t=", t,
                 " (the number of ranks); run with t in {", valid.empty() ? "none" : valid,
                 "} or change ", what);
}

}  // namespace tp
