// run_outputs.h — the files a training run writes besides its checkpoints: --log-json (a line per
// step), --plot (the loss curve), --trace (a timeline for Perfetto and its SVG), and the paths of
// every output, checked before the run (with --save, --dump-grads and --export-hf).
//
// Rank 0 writes them; every write is checked (core/output_file.h): a full disk or a read-only file
// system stops the run at once with errno, not silently, and not after training. --plot and
// --trace are written at the end, so their files get a placeholder first, which finds those faults
// before the first step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/options.h"
#include "core/output_file.h"
#include "model/data.h"
#include "observe/timeline.h"

namespace tp {

/// run.json → run.svg (any other name gets ".svg" appended).
std::string svg_path(const std::string& json_path);

/// What to check up front for --export-hf DIR (launcher.h's check_output_paths checks files): its
/// config.json when DIR exists, else the first missing folder on the way to DIR, which export_hf
/// creates; a read-only or missing parent is found before training, not after.
std::string export_probe(std::string dir);

/// Every output path of the run, as (flag, path) for launcher.h's check_output_paths, which every
/// rank runs before anything is allocated or trained: a bad path costs seconds, not the run.
std::vector<std::pair<std::string, std::string>> run_output_paths(const Options& o,
                                                                  const std::string& trace,
                                                                  const std::string& export_dir);

/// Rank 0's output files, opened (--log-json) or given a placeholder (--plot, --trace: written at
/// the end) before the first step, so that a full disk or a read-only file system stops the run
/// now. A resumed run (`resumed_at` >= 0) first cuts the log back to its checkpoint
/// (observe/step_log.h).
OutputFile open_outputs(Communicator& world, const std::string& log_json, const std::string& plot,
                        const std::string& trace, int64_t steps, int64_t resumed_at);

/// --plot: the loss curve (and the data's floor), written by rank 0.
void write_plot(Communicator& world, const std::string& plot, const TokenSource& source,
                const std::vector<double>& plot_steps, const std::vector<double>& plot_losses,
                const std::vector<double>& val_steps, const std::vector<double>& val_losses);

/// --trace: every rank's spans to rank 0, one trace for Perfetto and one chart, of the steps
/// (step - traced) + 1 .. step.
void write_trace(Device& device, Communicator& world, Timeline& timeline, const std::string& trace,
                 const std::string& title, int64_t step, int64_t traced);

}  // namespace tp
