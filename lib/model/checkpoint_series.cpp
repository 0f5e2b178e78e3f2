#include "model/checkpoint_series.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>

#include "core/error.h"
#include "io/durable_write.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/checkpoint_meta.h"

namespace tp {

namespace {

const std::string kExt = ".safetensors";
const std::string kStepTag = "-step";

bool is_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The step and run id in the header of series file `path` (`name_step`: the step in its name).
SeriesEntry read_entry(const std::string& path, int64_t name_step) {
  SeriesEntry e{path, name_step, "", ""};
  try {
    const safetensors::File f = safetensors::File::open(path);
    if (f.metadata("format") != kCheckpointFormat) {
      e.unreadable = "it is not a checkpoint of tp_train";
      return e;
    }
    e.step = metadata_count(f, "step", 0);
    e.run_id = checkpoint_origin(f).run_id;
  } catch (const Error& err) {
    e.unreadable = err.what();
  }
  return e;
}

}  // namespace

std::string new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", &utc);
  char id[80];
  std::snprintf(id, sizeof id, "%s-%x-%04x", when, static_cast<unsigned>(::getpid()),
                static_cast<unsigned>(std::random_device{}() & 0xffff));
  return id;
}

CheckpointSeries::CheckpointSeries(const std::string& save) : save_(save) {
  if (save.empty()) return;
  if (ends_with(save, "/") || is_folder(save)) {
    folder_ = save;
    while (folder_.size() > 1 && folder_.back() == '/') folder_.pop_back();
    base_ = "checkpoint";
    stem_ = folder_ + "/" + base_;
    return;
  }
  save_is_file_ = true;
  stem_ = ends_with(save, kExt) ? save.substr(0, save.size() - kExt.size()) : save;
  const size_t slash = stem_.find_last_of('/');
  folder_ = slash == std::string::npos ? "." : slash == 0 ? "/" : stem_.substr(0, slash);
  base_ = slash == std::string::npos ? stem_ : stem_.substr(slash + 1);
}

void CheckpointSeries::create_folder() const {
  if (!save_is_file_ && !folder_.empty() && !is_folder(folder_)) ::mkdir(folder_.c_str(), 0777);
}

std::string CheckpointSeries::path_for(int64_t step) const {
  if (empty()) return "";  // no --save: nothing is written, so there is no path to check either
  char digits[32];
  std::snprintf(digits, sizeof digits, "%06" PRId64, step);
  return stem_ + kStepTag + digits + kExt;
}

std::string CheckpointSeries::final_path(int64_t step) const {
  return save_is_file_ ? save_ : path_for(step);
}

std::string CheckpointSeries::claim_path() const { return save_is_file_ ? save_ : stem_; }

int64_t CheckpointSeries::step_of(const std::string& name) const {
  const std::string head = base_ + kStepTag;
  if (name.size() <= head.size() + kExt.size() || name.compare(0, head.size(), head) != 0 ||
      !ends_with(name, kExt))
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - kExt.size());
  if (digits.size() < 6 || digits.size() > 18) return -1;  // 18 digits always fit int64
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::vector<SeriesEntry> CheckpointSeries::list() const {
  std::vector<SeriesEntry> out;
  if (empty()) return out;
  DIR* dir = ::opendir(folder_.c_str());
  if (dir == nullptr) {
    const int err = errno;
    TP_CHECK_INPUT(err == ENOENT, "--save ", save_, ": cannot list the folder ", folder_, ": ",
                   std::strerror(err), " (", ::strerrorname_np(err),
                   "); its checkpoints cannot be found or kept apart: fix the folder or give "
                   "another --save");
    return out;
  }
  std::vector<std::pair<std::string, int64_t>> named;
  while (const dirent* e = ::readdir(dir)) {
    const int64_t step = step_of(e->d_name);
    // The stem without its file name: "" (the working folder), "/", "runs/" ...
    const std::string path = stem_.substr(0, stem_.size() - base_.size()) + e->d_name;
    if (step >= 0 && is_regular_file(path)) named.emplace_back(path, step);
  }
  ::closedir(dir);
  for (const auto& [path, step] : named) out.push_back(read_entry(path, step));
  std::sort(out.begin(), out.end(), [](const SeriesEntry& a, const SeriesEntry& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return out;
}

bool CheckpointSeries::holds(const std::string& path) const {
  struct stat a {
  }, b{};
  if (::stat(path.c_str(), &a) != 0) return false;
  for (const SeriesEntry& e : candidates())
    if (::stat(e.path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      return true;
  return false;
}

std::vector<SeriesEntry> CheckpointSeries::candidates() const {
  std::vector<SeriesEntry> out = list();
  if (save_is_file_ && is_regular_file(save_)) {
    try {
      const safetensors::File f = safetensors::File::open(save_);
      out.push_back({save_, f.has_metadata("step") ? metadata_count(f, "step", 0) : 0,
                     checkpoint_origin(f).run_id, ""});
    } catch (const Error& e) {
      out.push_back({save_, -1, "", e.what()});  // named as skipped when nothing newer is valid
    }
  }
  // Newest first; at equal steps the series' file before the end-of-run file.
  std::stable_sort(out.begin(), out.end(),
                   [](const SeriesEntry& a, const SeriesEntry& b) { return a.step > b.step; });
  return out;
}

std::vector<std::string> CheckpointSeries::remove_dead_leftovers() const {
  if (empty()) return {};
  const std::string file = save_is_file_ ? save_.substr(save_.find_last_of('/') + 1) : "";
  auto member = [&](const std::string& name) {
    return step_of(name) >= 0 || (!file.empty() && name == file);
  };
  std::vector<std::string> out;
  for (const durable::Leftover& l :
       durable::remove_dead_leftovers(stem_.substr(0, stem_.size() - base_.size()), member))
    out.push_back(l.path + " (pid " + std::to_string(l.pid) + ")");
  return out;
}

std::string CheckpointSeries::intact_note(const std::string& load) const {
  SeriesEntry newest;
  try {
    newest = choose_resume(candidates()).chosen;
  } catch (const Error&) {  // a folder it cannot list (the save's own line says why)
  }
  if (!newest.path.empty())
    return "the newest checkpoint of this run, " + newest.path + " (step " +
           std::to_string(newest.step) + "), is intact; rerun with --resume auto or --load " +
           newest.path;
  if (!load.empty())
    return "the checkpoint this run started from, " + load + ", is intact; rerun with --load " +
           load;
  return "no checkpoint of this run exists; its steps are lost";
}

std::string checkpoint_file_problem(const std::string& path) {
  try {
    const safetensors::File f = safetensors::File::open(path);
    if (f.metadata("format") != kCheckpointFormat)
      return "it is not a checkpoint of tp_train (metadata format '" + f.metadata("format") + "')";
    if (!f.has_metadata("step")) return "it records no step";
    metadata_count(f, "step", 0);
    check_checkpoint_metadata(f);
    if (!f.checksums()) return "it carries no checksums, so it cannot be verified";
    for (const std::string& name : f.names()) {
      if (f.info(name).dtype == safetensors::DType::I32)
        f.read_i32(name);
      else
        f.read_as_f32(name);  // verifies the tensor's checksum
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ResumeChoice choose_resume(const std::vector<SeriesEntry>& candidates,
                           std::string (*problem)(const std::string&)) {
  ResumeChoice out;
  for (const SeriesEntry& c : candidates) {
    const std::string p = problem(c.path);
    if (p.empty()) {
      out.chosen = c;
      break;
    }
    out.skipped.push_back("skipped " + c.path + ": " + p);
  }
  return out;
}

ResumeDecision resume_decision(const std::string& mode, const std::string& save,
                               std::string (*problem)(const std::string&)) {
  ResumeDecision out;
  if (mode != "auto" && mode != "auto-or-fresh") {
    out.problem = "--resume=" + mode +
                  ": use auto (the newest valid checkpoint of --save) or auto-or-fresh (the same, "
                  "or a fresh start when there is none); --load F resumes from a file";
    return out;
  }
  if (save.empty()) {
    out.problem = "--resume " + mode +
                  " looks for checkpoints where --save writes them; give --save DIR/ or --save "
                  "FILE";
    return out;
  }
  const CheckpointSeries series(save);
  std::vector<SeriesEntry> candidates;
  try {
    candidates = series.candidates();
  } catch (const Error& e) {
    out.problem = e.what();  // an unlistable folder: not "no checkpoint", not a fresh start
    return out;
  }
  const ResumeChoice choice = choose_resume(candidates, problem);
  out.notes = choice.skipped;
  out.path = choice.chosen.path;
  if (!out.path.empty()) return out;
  if (candidates.empty() && mode == "auto-or-fresh") {
    out.notes.push_back("auto-or-fresh: no checkpoint of " + save + " yet; starting fresh");
    return out;
  }
  std::string pattern = series.path_for(0);
  pattern.replace(pattern.rfind("000000"), 6, "NNNNNN");
  if (candidates.empty())
    out.problem = "--resume auto: no checkpoint in " + series.folder() + " (no " + pattern +
                  (series.final_path(0) == series.path_for(0) ? "" : ", no " + save) +
                  "); start without --resume, or pass --resume auto-or-fresh to start fresh when "
                  "there is none";
  else
    out.problem = "--resume " + mode + ": none of the " + std::to_string(candidates.size()) +
                  " checkpoints of " + save + " is valid (" + choice.skipped.front() +
                  (candidates.size() > 1 ? "; ..." : "") +
                  "); remove them, or --load an older copy";
  return out;
}

SeriesOwnership check_series_owner(const std::string& save, const std::string& run_id,
                                   ForeignSeries mode) {
  SeriesOwnership out;
  std::vector<SeriesEntry> foreign;
  try {
    for (const SeriesEntry& e : CheckpointSeries(save).list())
      if (e.unreadable.empty() && (e.run_id.empty() || e.run_id != run_id)) foreign.push_back(e);
  } catch (const Error& e) {
    out.problem = e.what();
    return out;
  }
  if (foreign.empty()) return out;
  const SeriesEntry& newest = foreign.back();
  const std::string whose = newest.run_id.empty() ? "checkpoints written before run ids (no run_id)"
                                                  : "run " + newest.run_id;
  const std::string files = foreign.size() == 1
                                ? "1 file, step " + std::to_string(newest.step)
                                : std::to_string(foreign.size()) + " files, steps " +
                                      std::to_string(foreign.front().step) + ".." +
                                      std::to_string(newest.step);
  if (mode == ForeignSeries::Refuse)
    out.problem = "--save " + save + " holds " + whose + " up to step " +
                  std::to_string(newest.step) + " (" + files +
                  "); give --resume auto to continue it, --replace-series to delete it when "
                  "this run writes its first checkpoint, or another --save";
  else
    out.note = "--replace-series: the first checkpoint of this run deletes " + whose + " in " +
               save + " (" + files + ")";
  return out;
}

std::vector<SeriesEntry> series_to_delete(const std::vector<SeriesEntry>& entries,
                                          const PruneRule& rule,
                                          std::string (*problem)(const std::string&)) {
  std::vector<SeriesEntry> out, older;
  for (const SeriesEntry& e : entries) {
    if (!e.unreadable.empty()) continue;  // never: it may be anyone's
    const bool own = !rule.run_id.empty() && e.run_id == rule.run_id;
    if (!own) {
      if (rule.foreign == ForeignSeries::Replace) out.push_back(e);
    } else if (e.step <= rule.step) {
      older.push_back(e);
    } else if (problem(e.path).empty()) {
      out.push_back(e);  // a bad one is left for the reader: --resume auto names and skips it
    }
  }
  const size_t k = static_cast<size_t>(std::max(rule.keep, 0));
  if (older.size() > k) out.insert(out.end(), older.begin(), older.end() - static_cast<long>(k));
  return out;
}

}  // namespace tp
