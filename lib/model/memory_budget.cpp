#include "model/memory_budget.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "model/preflight.h"
#include "model/train.h"

namespace tp {

std::string mib(int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

std::string MemoryChoice::str() const {
  return "t=" + std::to_string(t) + " dp=" + std::to_string(dp) +
         " precision=" + precision_name(precision) + " recompute=" + recompute_name(recompute) +
         " micro-batches=" + std::to_string(micro_batches) + " zero=" + std::to_string(zero);
}

std::string MemoryChoice::flags_from(const MemoryChoice& from) const {
  std::string s;
  auto add = [&](const std::string& flag) { s += (s.empty() ? "" : " ") + flag; };
  if (dp != from.dp) add("--dp " + std::to_string(dp) + " (t=" + std::to_string(t) + ")");
  if (precision != from.precision) add(std::string("--precision ") + precision_name(precision));
  if (recompute != from.recompute) add(std::string("--recompute ") + recompute_name(recompute));
  if (micro_batches != from.micro_batches) add("--micro-batches " + std::to_string(micro_batches));
  if (zero != from.zero) add("--zero " + std::to_string(zero));
  return s;
}

MemoryEstimate estimate_memory(const GptConfig& cfg, int64_t seq, int64_t global_batch,
                               const MemoryChoice& c) {
  MemoryEstimate e;
  e.choice = c;
  if (c.dp < 1 || c.t < 1 || global_batch % c.dp != 0) {
    e.problems.push_back("--batch=" + std::to_string(global_batch) +
                         " is not divisible by --dp=" + std::to_string(c.dp));
    return e;
  }
  if (c.dp > 1 && cfg.dropout != 0.0f) e.problems.push_back("dropout with dp > 1");
  for (const std::string& p :
       step_option_problems({c.micro_batches, c.zero}, c.dp, global_batch, cfg.dropout))
    e.problems.push_back(p);
  PreflightInput in;
  in.model = cfg;
  in.model.recompute = c.recompute;
  in.model.precision = c.precision;
  in.dtype_bytes = dtype_size(in.model.compute_dtype());
  in.batch = global_batch / c.dp;
  in.t = c.t;
  in.zero_dp = c.zero == 1 ? c.dp : 1;
  in.micro_batches = e.problems.empty() ? c.micro_batches : 1;
  const Preflight p = preflight(in);
  for (const std::string& m : p.problems) e.problems.push_back(m);
  if (!e.problems.empty()) return e;
  // seq may be shorter than the position table (tp_train --init-from): the activations use it.
  e.peak = memory_peak(p.cfg, seq, in.batch / c.micro_batches, c.t, p.params_per_rank, in.zero_dp);
  return e;
}

BudgetVerdict fit_memory_budget(const GptConfig& cfg, int64_t seq, int64_t global_batch, int world,
                                const MemoryChoice& base, int64_t budget) {
  BudgetVerdict v;
  v.base = estimate_memory(cfg, seq, global_batch, base);
  v.fits = v.base.problems.empty() && v.base.peak.total() <= budget;
  if (v.fits || !v.base.problems.empty()) return v;

  // Each kind's candidate values, the least change first, the kinds in [A2] §5.3's order: bf16,
  // selective then full, m ascending (the divisors of the batch), ZeRO-1, and a larger t of this
  // world (dp = world / t) last: each step up in t adds communication on the critical path
  // ([A3]: the smallest t that fits).
  using Apply = MemoryChoice (*)(MemoryChoice, int);
  struct Kind {
    std::vector<int> values;
    Apply apply;
  };
  std::vector<Kind> kinds(5);
  if (base.precision == Precision::Fp32) kinds[0].values.push_back(1);
  kinds[0].apply = [](MemoryChoice c, int) {
    c.precision = Precision::Bf16;
    return c;
  };
  for (Recompute r : {Recompute::Selective, Recompute::Full})
    if (r > base.recompute) kinds[1].values.push_back(static_cast<int>(r));
  kinds[1].apply = [](MemoryChoice c, int r) {
    c.recompute = static_cast<Recompute>(r);
    return c;
  };
  for (int m = base.micro_batches + 1; m <= global_batch && m <= 1 << 20; ++m)
    if (global_batch % m == 0) kinds[2].values.push_back(m);  // (a replica's batch divides it)
  kinds[2].apply = [](MemoryChoice c, int m) {
    c.micro_batches = m;
    return c;
  };
  if (base.zero == 0) kinds[3].values.push_back(1);
  kinds[3].apply = [](MemoryChoice c, int z) {
    c.zero = z;
    return c;
  };
  for (int t = base.t + 1; t <= world; ++t)
    if (world % t == 0) kinds[4].values.push_back(t);
  kinds[4].apply = [](MemoryChoice c, int t) {
    c.dp = c.t * c.dp / t;
    c.t = t;
    if (c.dp == 1) c.zero = 0;  // stacked on ZeRO-1: nothing left to shard it over
    return c;
  };

  bool have_smallest = false;
  auto fits = [&](const MemoryChoice& c) {
    const MemoryEstimate e = estimate_memory(cfg, seq, global_batch, c);
    if (!e.problems.empty()) return false;
    ++v.tried;
    if (!have_smallest || e.peak.total() < v.best.peak.total()) {
      v.best = e;
      have_smallest = true;
    }
    if (e.peak.total() > budget) return false;
    v.best = e;
    v.found = true;
    return true;
  };
  // 1. One change.
  for (const Kind& k : kinds)
    for (int x : k.values)
      if (!v.found && fits(k.apply(base, x))) break;
  // 2. Stacked: each kind on top of the previous ones at their most saving valid value.
  if (!v.found) {
    MemoryChoice stack = base;
    for (const Kind& k : kinds) {
      MemoryChoice most = stack;
      int64_t least = estimate_memory(cfg, seq, global_batch, stack).peak.total();
      for (int x : k.values) {
        const MemoryChoice c = k.apply(stack, x);
        if (fits(c)) break;
        const MemoryEstimate e = estimate_memory(cfg, seq, global_batch, c);
        if (e.problems.empty() && e.peak.total() < least) {
          least = e.peak.total();
          most = c;
        }
      }
      if (v.found) break;
      stack = most;
    }
  }
  const MemoryPeak& p = v.base.peak;
  const std::string parts = "weights " + mib(p.weights) + ", gradients " + mib(p.grads) +
                            ", optimizer state " + mib(p.optimizer) + ", activations " +
                            mib(p.activations);
  const std::string head = "--memory-budget=" + mib(budget) + " per rank: this run (" + base.str() +
                           ") peaks at " + mib(p.total()) + " per rank, " + p.largest() +
                           " the largest (" + parts + "); ";
  if (v.found)
    v.message = head + "the cheapest option that fits: " + v.best.choice.flags_from(base) + " (" +
                mib(v.best.peak.total()) + ")";
  else
    v.message = head + "no option fits (the smallest of " + std::to_string(v.tried) + " tried: " +
                (have_smallest ? v.best.choice.flags_from(base) + ", " + mib(v.best.peak.total())
                               : std::string("none valid")) +
                "); raise the budget, add ranks or shrink the model";
  return v;
}

namespace {
// MiB below 1 GiB, GiB above (the table holds 70B-parameter models too).
std::string size_str(int64_t bytes) {
  if (bytes < (int64_t{1} << 30)) return mib(bytes);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}
}  // namespace

std::string memory_stack_table(const GptConfig& cfg, int64_t batch, int t, int world, int m) {
  std::vector<std::pair<std::string, MemoryChoice>> rows;
  auto dp_of = [&](int tt) { return world > 0 && world % tt == 0 ? world / tt : 1; };
  for (int tt = 1; tt < t; tt *= 2) rows.push_back({"t = " + std::to_string(tt), {tt, dp_of(tt)}});
  MemoryChoice c{t, dp_of(t)};
  rows.push_back({"t = " + std::to_string(t), c});
  c.precision = Precision::Bf16;
  rows.push_back({"+ --precision bf16", c});
  c.recompute = Recompute::Selective;
  rows.push_back({"+ --recompute selective", c});
  c.recompute = Recompute::Full;
  rows.push_back({"+ --recompute full", c});
  if (m > 1) {
    c.micro_batches = m;
    rows.push_back({"+ --micro-batches " + std::to_string(m), c});
  }
  if (c.dp > 1) {
    c.zero = 1;
    rows.push_back({"+ --zero 1 (dp = " + std::to_string(c.dp) + ")", c});
  }
  char line[256];
  std::string out =
      "# memory stack: peak per rank (this implementation: fp32, then bf16 from its row on), "
      "batch " +
      std::to_string(batch) + " per TP group" +
      (world > 0 ? ", " + std::to_string(world) + " ranks (dp = ranks / t)" : std::string()) + "\n";
  std::snprintf(line, sizeof line, "  %-28s %4s %4s %11s %11s %11s %11s %12s\n", "step", "t", "dp",
                "weights", "gradients", "optimizer", "activations", "peak");
  out += line;
  for (const auto& [name, choice] : rows) {
    MemoryEstimate e;
    if (batch > GptConfig::kMaxSize / choice.dp)
      e.problems.push_back("batch " + std::to_string(batch) + " x dp " + std::to_string(choice.dp) +
                           " sequences is more than any job runs");
    else
      e = estimate_memory(cfg, cfg.seq, batch * choice.dp, choice);
    if (!e.problems.empty()) {
      std::snprintf(line, sizeof line, "  %-28s %4d %4d  ", name.c_str(), choice.t, choice.dp);
      out += line + e.problems.front() + "\n";
      continue;
    }
    const MemoryPeak& p = e.peak;
    std::snprintf(line, sizeof line, "  %-28s %4d %4d %11s %11s %11s %11s %12s\n", name.c_str(),
                  choice.t, choice.dp, size_str(p.weights).c_str(), size_str(p.grads).c_str(),
                  size_str(p.optimizer).c_str(), size_str(p.activations).c_str(),
                  size_str(p.total()).c_str());
    out += line;
  }
  return out;
}

}  // namespace tp
