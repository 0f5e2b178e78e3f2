#include "model/audit.h"

#include <cstdio>
#include <map>

#include "core/host.h"

namespace tp {

namespace {
std::vector<float> scaled(const std::vector<float>& v, double s) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i] * s);
  return out;
}
}  // namespace

std::vector<std::string> audit_replicated_gradients(Communicator& comm, const Gpt& model,
                                                    const Gpt& reference, double rtol) {
  std::map<std::string, const Param*> ref;
  for (const Param& p : reference.params()) ref[p.name] = &p;
  const int t = comm.size();
  std::vector<std::string> problems;
  CommLedger::Scope scope(comm.ledger(), "audit");
  for (const Param& p : model.params()) {
    if (p.split != Split::Replicated) continue;
    const auto it = ref.find(p.name);
    if (it == ref.end()) {
      problems.push_back(p.name + ": no such parameter in the reference");
      continue;
    }
    const std::vector<float> want = it->second->grad.to_host();
    // Every rank's copy, on every rank.
    Tensor all(p.grad.device(), Shape{t, p.grad.numel()});
    comm.all_gather(p.grad.reshape(Shape{p.grad.numel()}), all);
    const std::vector<float> flat = all.to_host();
    const size_t n = want.size();
    std::vector<std::vector<float>> mine;
    std::vector<float> sum(n, 0.0f);
    bool same = true, all_right = true;
    for (int r = 0; r < t; ++r) {
      mine.emplace_back(flat.begin() + r * n, flat.begin() + (r + 1) * n);
      for (size_t i = 0; i < n; ++i) sum[i] += mine.back()[i];
      same = same && rel_error(mine.back(), mine.front()) <= rtol;
      all_right = all_right && rel_error(mine.back(), want) <= rtol;
    }
    if (all_right) continue;
    char err[64];
    std::snprintf(err, sizeof err, "%.3g", rel_error(mine.front(), want));
    std::string verdict;
    // Partial gradients differ between ranks; an averaged one is the same on every rank (and its
    // sum over ranks is the reference too, so `same` tells the two apart).
    if (t > 1 && !same && rel_error(sum, want) <= rtol)
      verdict =
          "the sum over ranks equals the reference: a missing all-reduce (each rank kept its "
          "partial gradient)";
    else if (t > 1 && same && rel_error(mine.front(), scaled(want, 1.0 / t)) <= rtol)
      verdict = "equals reference / t: averaged instead of summed";
    else if (t > 1 && same && rel_error(mine.front(), scaled(want, t)) <= rtol)
      verdict = "equals t × reference: summed once too often";
    else if (!same)
      verdict =
          std::string("differs between ranks, and from the reference (relative error ") + err + ")";
    else
      verdict =
          std::string("identical on every rank but differs from the reference (relative error ") +
          err + ")";
    problems.push_back(p.name + ": " + verdict);
  }
  return problems;
}

}  // namespace tp
