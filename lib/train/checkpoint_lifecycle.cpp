// checkpoint_lifecycle.cpp — the checkpoints a run writes while it runs (checkpoint_lifecycle.h).
#include "train/checkpoint_lifecycle.h"

#include <csignal>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/agreement.h"
#include "core/error.h"
#include "core/log.h"
#include "model/checkpoint_series.h"

namespace tp {

void prune_series(Communicator& world, const Options& o, int64_t step,
                  const CheckpointOrigin& origin) {
  const CheckpointSeries series(o.get_text("save"));
  if (series.empty() || world.rank() != 0) return;
  const PruneRule rule{
      step, o.get_int32("keep"), origin.run_id,
      o.get_flag("replace-series") ? ForeignSeries::Replace : ForeignSeries::Refuse};
  std::vector<SeriesEntry> entries;
  try {
    entries = series.list();
  } catch (const Error& e) {
    log0(world, "warning: nothing pruned: ", e.what());
    return;
  }
  for (const SeriesEntry& e : series_to_delete(entries, rule)) {
    if (e.run_id != origin.run_id)
      log0(world, "removed ", e.path, ": step ", e.step, " of ",
           e.run_id.empty() ? "a run without a run id" : "run " + e.run_id, " (--replace-series)");
    else if (e.step > step)
      log0(world, "removed ", e.path, ": step ", e.step, " is past this run's step ", step,
           " (a run that went further before this one resumed earlier)");
    std::remove(e.path.c_str());
  }
}

CheckpointLifecycle::CheckpointLifecycle(Communicator& world, Device& device, const Options& o,
                                         ProcessGrid& grid, const Gpt& model, AdamW& opt,
                                         const CheckpointOrigin& origin, std::string load)
    : world_(world),
      device_(device),
      o_(o),
      grid_(grid),
      model_(model),
      opt_(opt),
      origin_(origin),
      load_(std::move(load)) {}

void CheckpointLifecycle::write_agreed(const std::string& flag,
                                       const std::function<void()>& write) {
  // One replica writes: DP rank 0, and of its CP ranks (which hold the same weights) the first;
  // under expert parallelism the EP group of DP rank 0 (it holds every expert between its ranks).
  const bool writes = grid_.dp_rank() < grid_.ep_size() && grid_.cp_rank() == 0;
  const std::string failed = agree_on_outcome(world_, device_, writes, write);
  if (failed.empty()) return;
  // Only rank 0's line is printed: only rank 0 looks for what survived (a checkpoint, when what
  // failed was one, or an export of one).
  const std::string intact = world_.rank() == 0 && flag != "--dump-grads"
                                 ? "; " + CheckpointSeries(o_.get_text("save")).intact_note(load_)
                                 : "";
  throw Error(flag + " " + o_.get_text(flag.substr(2)) + ": " + failed + intact, 2);
}

void CheckpointLifecycle::save_to_series(int64_t step, const std::string& path) {
  if (world_.rank() == 0) {
    std::vector<std::string> gone;
    try {
      gone = CheckpointSeries(o_.get_text("save")).remove_dead_leftovers();
    } catch (const Error&) {  // rank 0 alone: the save's agreed outcome says what is wrong
    }
    std::string names;
    for (const std::string& g : gone) names += (names.empty() ? "" : ", ") + g;
    if (!gone.empty()) log0(world_, "removed what killed saves left behind: ", names);
  }
  const bool sharded = opt_.sharded();
  if (sharded) opt_.unshard(model_.params());  // --zero 1: the file holds them whole
  write_agreed("--save", [&] {
    save_checkpoint(path, grid_.tp(), grid_.pp(), model_, opt_, step, origin_, &grid_.ep());
  });
  if (sharded) opt_.reshard(model_.params());  // and training goes on sharded
  prune_series(world_, o_, step, origin_);
  log0(world_, "saved ", path, " at step ", step);
}

bool CheckpointLifecycle::periodic_save(int64_t step) {
  const int64_t every = o_.get_int("save-every");
  if (every <= 0 || step % every != 0) return false;
  save_to_series(step, CheckpointSeries(o_.get_text("save")).path_for(step));
  return true;
}

void CheckpointLifecycle::stop_after_signal(int64_t step, int sig) {
  const std::string name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
  const std::string save = CheckpointSeries(o_.get_text("save")).final_path(step);
  std::string said = "no --save: nothing written";
  if (!save.empty()) {
    save_to_series(step, save);
    said = "emergency checkpoint " + save + " saved at step " + std::to_string(step) +
           " (resume with --load " + save + " or --resume auto)";
  }
  throw Error(detail::str_cat("stopped by ", name, " before step ", step + 1, ": ", said),
              128 + sig);
}

void CheckpointLifecycle::save_at_end(int64_t step) {
  const std::string save = CheckpointSeries(o_.get_text("save")).final_path(step);
  if (!save.empty()) save_to_series(step, save);
}

}  // namespace tp
