#include "train_runs.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>

#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/schedule.h"
#include "model/train.h"
#include "observe/timer.h"
#include "sleeping_waits.h"

namespace tp::lesson {

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

Run train_at(Device& dev, Communicator& world, Communicator& sync, const Setup& s, int t, bool sp,
             int64_t steps) {
  Run run;
  run.t = t;
  run.sp = sp;
  run.member = world.rank() < t;
  std::unique_ptr<Communicator> group = world.split(run.member ? 0 : 1, world.rank());
  if (!s.spin) group = std::make_unique<SleepingWaits>(std::move(group));
  const double t0 = now(), c0 = cpu_seconds();
  if (run.member) {
    GptConfig cfg = s.cfg;
    cfg.sp = sp;
    MarkovSource data(cfg.vocab, s.seed);
    dev.reset_peak();
    const int64_t base = dev.memory().in_use;
    {
      Gpt model(dev, *group, cfg);
      model.init(s.seed);
      AdamWParams hp;
      hp.lr = s.lr;
      AdamW opt(dev, model.params(), hp);
      for (const Param& p : model.params()) run.local_params += p.value.numel();
      run.states = 16 * run.local_params;  // value, gradient, exp_avg, exp_avg_sq: 4 B each
      group->barrier();                    // start together (every rank of the group trains)
      const double start = now(), cpu_start = cpu_seconds();
      for (int64_t i = 0; i < steps; ++i) {
        const Batch b = data.batch(i, s.batch, cfg.seq);
        const size_t mark = group->ledger().size();
        const double a = now();
        const StepResult r = train_step(*group, dev, model, opt, b, s.seed, i,
                                        learning_rate(LrSchedule{s.lr, s.warmup, 0}, i), 1.0f);
        dev.synchronize();
        run.step_s.push_back(now() - a);
        run.loss.push_back(r.loss);
        if (i + 1 == steps) {
          run.wire_per_step = group->ledger().wire_bytes_since(mark);
          for (size_t k = mark; k < group->ledger().size(); ++k) {
            ++run.ops_per_step[group->ledger().records()[k].op];
            run.step_records.push_back(group->ledger().records()[k]);
          }
          run.activations = model.memory().total_bytes();
          run.block_formula_ok =
              model.memory().layer_bytes(0) == block_activation_bytes(cfg, cfg.seq, s.batch, t);
        }
      }
      run.wall = now() - start;
      run.cpu = cpu_seconds() - cpu_start;
    }
    run.peak = dev.memory().peak - base;
  }
  quiet_barrier(dev, sync);
  if (!run.member) {
    run.idle_wall = now() - t0;
    run.idle_cpu = cpu_seconds() - c0;
  }
  return run;
}

// The steps two loss curves share, as floats for L.check: {a's, b's}.
std::pair<std::vector<float>, std::vector<float>> common_steps(const std::vector<double>& a,
                                                               const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  return {std::vector<float>(a.begin(), a.begin() + n),
          std::vector<float>(b.begin(), b.begin() + n)};
}

// The largest relative difference |a − b| / |b| over the steps.
double worst_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    w = std::max(w, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return w;
}

Setup a1_setup(const Options& o) {
  Setup s;
  s.steps = o.get_int("steps");
  s.batch = o.get_int("batch");
  s.cfg.layers = 12;
  s.cfg.hidden = 512;
  s.cfg.heads = 8;
  s.cfg.ffn = 2048;
  s.cfg.vocab = 256;
  s.cfg.seq = o.get_int("seq");
  return s;
}

void a1_options(Options& o, int64_t steps, const std::string& steps_help) {
  o.integer("steps", steps, steps_help)
      .min(2)
      .max(100000)
      .integer("seq", 64, "sequence length S (divisible by t under SP)")
      .min(1)
      .max(1 << 16)
      .integer("batch", 4, "sequences per step")
      .min(1)
      .max(1 << 16);
}

double median_step(const Run& r) {
  return median(std::vector<double>(r.step_s.begin() + 1, r.step_s.end()));
}

}  // namespace tp::lesson
