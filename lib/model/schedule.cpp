#include "model/schedule.h"

#include <algorithm>
#include <cmath>

namespace tp {

float learning_rate(const LrSchedule& s, int64_t step) {
  float f = 1.0f;
  if (s.warmup > 0 && step < s.warmup)
    f = static_cast<float>(step + 1) / static_cast<float>(s.warmup);
  if (s.decay > s.warmup && step >= s.warmup) {
    const double x = std::min(
        1.0, static_cast<double>(step - s.warmup) / static_cast<double>(s.decay - s.warmup));
    f *= static_cast<float>(0.1 + 0.9 * 0.5 * (1.0 + std::cos(3.141592653589793 * x)));
  }
  return s.lr * f;
}

}  // namespace tp
