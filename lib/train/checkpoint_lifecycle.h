// checkpoint_lifecycle.h — the checkpoints a training run writes while it runs: --save-every's
// periodic files, the end-of-run file, the emergency file after SIGINT/SIGTERM, each pruned to
// --keep; and the agreed write every output of the run goes through (a failure on any rank ends
// every rank with one line that says what is still intact).
//
// Where the files go and which to keep is model/checkpoint_series.h; choosing the checkpoint to
// start from is the run plan's (train/run_plan.h). This is the part that writes during the run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/communicator.h"
#include "core/device.h"
#include "core/options.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "parallel/process_grid.h"

namespace tp {

/// After a save at `step` into --save's series (model/checkpoint_series.h): rank 0 deletes what
/// --keep does not keep of this run's files, and names the files of later steps it deletes (an
/// abandoned longer attempt's, which a later --resume auto must not take) and, with
/// --replace-series, each file of another run. Never throws: a folder it cannot list is a warning.
void prune_series(Communicator& world, const Options& o, int64_t step,
                  const CheckpointOrigin& origin);

/// The checkpoints of one run: its ranks (`world`, `grid`), its flags (--save, --save-every,
/// --keep, --replace-series), the model and optimizer it saves, the run's origin (its id, written
/// into every file) and `load`, the checkpoint it started from ("" for none), which a failed save
/// names when it is still intact. Every method is collective over `world`.
class CheckpointLifecycle {
 public:
  CheckpointLifecycle(Communicator& world, Device& device, const Options& o, ProcessGrid& grid,
                      const Gpt& model, AdamW& opt, const CheckpointOrigin& origin,
                      std::string load);

  /// Runs `write` on DP rank 0's ranks (DP replicas hold the same weights and moments), then
  /// every rank agrees on its outcome (core/agreement.h): a failure on any rank ends every rank
  /// with that rank's line, "<flag> <value>: <what failed, errno>; <what is intact>", exit 2,
  /// instead of the failing rank alone while the others walk on into a collective nobody joins.
  void write_agreed(const std::string& flag, const std::function<void()>& write);

  /// --save-every N: after step `step` (steps done), when N divides it, the series' file of the
  /// step. Returns true when it wrote one.
  bool periodic_save(int64_t step);

  /// Every rank got (or was told of) SIGINT/SIGTERM and stands at the same step boundary: write
  /// an emergency checkpoint when --save is given, then end with 128 + the signal on every rank.
  [[noreturn]] void stop_after_signal(int64_t step, int sig);

  /// --save at the end of the run (a failed write names what is still intact: write_agreed).
  void save_at_end(int64_t step);

 private:
  /// One save into --save's series (periodic, end-of-run, emergency) at `step`, to `path`: rank 0
  /// first removes what killed saves left behind, then the file is written and agreed on, and
  /// rank 0 prunes what --keep does not keep.
  void save_to_series(int64_t step, const std::string& path);

  Communicator& world_;
  Device& device_;
  const Options& o_;
  ProcessGrid& grid_;
  const Gpt& model_;
  AdamW& opt_;
  const CheckpointOrigin origin_;
  const std::string load_;
};

}  // namespace tp
