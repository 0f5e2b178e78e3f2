// lse_merge.cpp — the log-sum-exp merge on the host (lse_merge.h).
#include "parallel/lse_merge.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/exercise.h"

namespace tp {

#if TP_EXERCISE != 12  // exercises/12_lse_merge.cpp
void lse_merge_rows(std::vector<float>& out, std::vector<float>& lse,
                    const std::vector<float>& out_part, const std::vector<float>& lse_part,
                    const AttentionShape& shape) {
  const int64_t S = shape.seq, B = shape.batch, nh = shape.heads, hd = shape.head_dim;
  const size_t outs = static_cast<size_t>(S * B * nh * hd), rows = static_cast<size_t>(B * nh * S);
  TP_CHECK(out.size() == outs && out_part.size() == outs, "lse_merge_rows: outputs of ", out.size(),
           " and ", out_part.size(), " values, expected S·B·nh·hd = ", outs);
  TP_CHECK(lse.size() == rows && lse_part.size() == rows, "lse_merge_rows: lse of ", lse.size(),
           " and ", lse_part.size(), " values, expected B·nh·S = ", rows);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nh; ++j)
      for (int64_t s = 0; s < S; ++s) {
        const size_t r = static_cast<size_t>((b * nh + j) * S + s);
        const double a = lse[r], p = lse_part[r], m = std::max(a, p);
        if (std::isinf(m) && m < 0) continue;  // neither side saw a key: nothing to merge
        const double L = m + std::log(std::exp(a - m) + std::exp(p - m));
        const double wa = std::exp(a - L), wp = std::exp(p - L);
        float* o = out.data() + (s * B + b) * nh * hd + j * hd;
        const float* op = out_part.data() + (s * B + b) * nh * hd + j * hd;
        for (int64_t e = 0; e < hd; ++e) o[e] = static_cast<float>(wa * o[e] + wp * op[e]);
        lse[r] = static_cast<float>(L);
      }
}
#endif

}  // namespace tp
