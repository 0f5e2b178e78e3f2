// checkpoint_series.h — periodic checkpoints of one run: where they go, which to keep, which to
// resume from (tp_train's --save-every, --keep, --resume auto).
//
// A series lives beside --save PATH:
//   PATH a folder (it exists, or ends in '/'):  PATH/checkpoint-step000200.safetensors
//   PATH a file  (run.safetensors, or run):     run-step000200.safetensors, beside run.safetensors
// The step has at least six digits (more when it needs them), so the names also sort by step.
// Each file is a complete checkpoint (model/checkpoint.h) written atomically (a temporary file,
// then rename: safetensors::Writer), so a run killed mid-write leaves "….safetensors.tmp", which
// is not a member of the series. A file that is a member can still be bad (cut short by a copy, a
// flipped bit): the resume takes the newest file that opens, whose metadata agrees with its tensors
// and whose every tensor matches its checksum, and names each newer one it skipped.
//
// Whose files: every file records the run that wrote it (metadata run_id, model/checkpoint.h); a
// resumed run (--resume, --load) keeps the id of the file it resumed. A run deletes only files of
// its own id (--keep, and the steps past its own of a longer attempt it resumed before the end of);
// files of other runs, files without an id (written before run ids existed) and files whose
// header cannot be read are never deleted. A fresh run whose --save holds such a series refuses to
// start, unless told to replace it (ForeignSeries::Replace: --replace-series), and then deletes
// them only after its own first checkpoint is written. Files are ordered by the step in their
// metadata, not by their names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tp {

/// One checkpoint of a series (or the end-of-run file), with the step it holds.
struct SeriesEntry {
  std::string path;
  int64_t step = 0;        ///< from its metadata; from its name when `unreadable`
  std::string run_id;      ///< metadata run_id ("" for none)
  std::string unreadable;  ///< why its header gave no step, or "" (it did)
};

/// A new run id: the start time, the process id and a random part ("20261206-014215-1a2b-9f3c").
std::string new_run_id();

class CheckpointSeries {
 public:
  /// `save`: tp_train's --save (a folder or a file path; see above). Empty: no series.
  explicit CheckpointSeries(const std::string& save);

  bool empty() const { return stem_.empty(); }
  /// A folder PATH ending in '/' that does not exist yet is created (its parent must exist; a
  /// failure is left to the output-path check, which names it).
  void create_folder() const;
  /// The folder: PATH itself when it is a folder, else the folder of the file ("." for none).
  const std::string& folder() const { return folder_; }
  /// The path of step `step`'s file: "<stem>-step000200.safetensors"; "" without --save.
  std::string path_for(int64_t step) const;
  /// Where the end-of-run and emergency saves go: PATH itself when it names a file, else the
  /// series' file of `step`; "" without --save (nothing is written, nothing checked).
  std::string final_path(int64_t step) const;
  /// The lock tp_train holds on the series for the run (CheckpointClaim): PATH for a file,
  /// "<folder>/checkpoint" for a folder.
  std::string claim_path() const;
  /// The step in a series file's name, or -1 when `name` (a file name, no folder) is not one.
  int64_t step_of(const std::string& name) const;
  /// The series' files in the folder, by the step in their metadata, oldest first (only regular
  /// files named exactly "<stem base>-step<digits>.safetensors"; each one's header is read). A
  /// folder that exists but cannot be listed is a bad-input error naming the errno; a folder
  /// that does not exist (yet) has no files.
  std::vector<SeriesEntry> list() const;
  /// Whether `path` is one of the candidates() (the same file, however it is spelled).
  bool holds(const std::string& path) const;
  /// Removes the leftovers of saves to the series (any step) or to PATH that a kill left behind,
  /// "<file>.tmp.<pid>" and "<file>.lock" of processes that have ended
  /// (durable::remove_dead_leftovers); returns "<path> (pid P)" for each. A pid is looked up
  /// on this host only; what keeps a live run on another host out is the run's claim on the
  /// series (CheckpointClaim): no second run saves into it.
  std::vector<std::string> remove_dead_leftovers() const;
  /// What a failed save leaves to resume from, as one phrase for its error line: the newest valid
  /// checkpoint of the series or PATH ("the newest checkpoint of this run, F (step N), is intact;
  /// rerun with --resume auto or --load F"), else `load` (the file this run started from), else
  /// that there is none.
  std::string intact_note(const std::string& load) const;
  /// The resume candidates, newest first: the series, and PATH itself when it names an existing
  /// file (its step from its metadata; left out when it does not open).
  std::vector<SeriesEntry> candidates() const;

 private:
  std::string save_, folder_, stem_, base_;  // base_: the stem's file name ("checkpoint", "run")
  bool save_is_file_ = false;
};

/// What a checkpoint file is wrong with, in one phrase, or "" when it is a valid checkpoint: it
/// opens (a complete header), has this project's format and a step, its metadata agrees with its
/// tensors (model/checkpoint_meta.h), and every tensor is read and matches its checksum.
std::string checkpoint_file_problem(const std::string& path);

/// The newest valid entry of `candidates` (newest first) and, for each newer one that is not
/// valid, one line naming it and its problem ("skipped"). `valid` is checkpoint_file_problem.
struct ResumeChoice {
  SeriesEntry chosen;  ///< path empty: none is valid (or there are none)
  std::vector<std::string> skipped;
};
ResumeChoice choose_resume(const std::vector<SeriesEntry>& candidates,
                           std::string (*problem)(const std::string&) = checkpoint_file_problem);

/// What tp_train's --resume MODE (with --save `save`) starts from: `path` (empty: fresh), the
/// lines to log (each skipped newer file; a fresh start of auto-or-fresh), and `problem`, one
/// bad-input line, or "" when there is none. MODE "auto": the newest valid candidate, and a problem
/// when there is no candidate; "auto-or-fresh": the same, but no candidate is a fresh start. When
/// there are candidates and none is valid, both are a problem (starting fresh would overwrite the
/// series). Any other MODE, or no `save`, is a problem.
struct ResumeDecision {
  std::string path;
  std::vector<std::string> notes;
  std::string problem;
};
ResumeDecision resume_decision(
    const std::string& mode, const std::string& save,
    std::string (*problem)(const std::string&) = checkpoint_file_problem);

/// What a run does with files of other runs in its --save series (see the top).
enum class ForeignSeries { Refuse, Replace };

/// Whether a run `run_id` may save to `save`: `problem`, the one line that refuses it when the
/// series holds readable files of another run (or of none: older files) and `mode` is Refuse (or
/// the folder cannot be listed); with Replace, `note`, the line that says which files its first
/// checkpoint will delete. Both "" when the series holds none.
struct SeriesOwnership {
  std::string problem, note;
};
SeriesOwnership check_series_owner(const std::string& save, const std::string& run_id,
                                   ForeignSeries mode);

/// The pruning after step `step` was saved by run `run_id`.
struct PruneRule {
  int64_t step = 0;
  int keep = 0;  ///< --keep: how many of this run's files at or below `step` stay
  std::string run_id;
  ForeignSeries foreign = ForeignSeries::Refuse;  ///< Replace: other runs' readable files go too
};

/// The files of `entries` (oldest first, as list() gives them) to delete: of this run's files, those
/// of a step above rule.step (left by an abandoned longer attempt, which a later --resume auto
/// must not take; only when they are valid: `problem` is checkpoint_file_problem) and all but the
/// `keep` newest of the others; with Replace, every readable file of another run. Unreadable files
/// and (with Refuse) other runs' files are never in it.
std::vector<SeriesEntry> series_to_delete(
    const std::vector<SeriesEntry>& entries, const PruneRule& rule,
    std::string (*problem)(const std::string&) = checkpoint_file_problem);

}  // namespace tp
