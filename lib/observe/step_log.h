// step_log.h — tp_train's --log-json file: one JSON object per line, one line per step, appended.
//
// A run that resumes from a checkpoint continues the file of the run it resumes, but the run it
// resumes may have gone on past that checkpoint before it was killed: its lines of the steps after
// the checkpoint are those of steps the resumed run does again. So the resumed run first cuts them
// off, and the file then reads as one run, each step once, in order (a plot of it does not double
// back). A last line without its newline (a write the kill cut short) is cut off too.
#pragma once

#include <cstdint>
#include <string>

namespace tp {

/// The value of "step" in one line of the log ({"step": 12, ...}), or -1 when it has none.
int64_t step_of_log_line(const std::string& line);

/// What cut_step_log did: the lines it kept and cut.
struct LogCut {
  int64_t kept = 0, cut = 0;
};

/// Removes from the log at `path` every line of a step above `step`, and a last line that has no
/// newline; keeps the rest (lines without a step too) in their order. The file is replaced
/// atomically, and only when something is cut; no file, or one that is not a regular file
/// (/dev/stdout, a FIFO), is nothing to cut. Only the rank that writes the log calls it: a failure
/// is a rank-local tp::Error (exit 1). `what` heads the
/// messages of a failed read or write ("--log-json run.jsonl").
LogCut cut_step_log(const std::string& path, int64_t step, const std::string& what);

}  // namespace tp
