// run_outputs.cpp — the files a run writes besides its checkpoints (run_outputs.h).
#include "train/run_outputs.h"

#include <sys/stat.h>

#include <cmath>

#include "core/log.h"
#include "model/checkpoint_series.h"
#include "observe/step_log.h"
#include "observe/svg_plot.h"

namespace tp {

std::string svg_path(const std::string& json_path) {
  const std::string ext = ".json";
  if (json_path.size() > ext.size() &&
      json_path.compare(json_path.size() - ext.size(), ext.size(), ext) == 0)
    return json_path.substr(0, json_path.size() - ext.size()) + ".svg";
  return json_path + ".svg";
}

std::string export_probe(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return dir + "/config.json";
  for (;;) {
    const size_t slash = dir.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "."
                               : slash == 0               ? "/"
                                                          : dir.substr(0, slash);
    if (parent == dir || ::stat(parent.c_str(), &st) == 0) return dir;
    dir = parent;
  }
}

OutputFile open_outputs(Communicator& world, const std::string& log_json, const std::string& plot,
                        const std::string& trace, int64_t steps, int64_t resumed_at) {
  OutputFile json;
  if (world.rank() == 0) {
    const std::string what = "--log-json " + log_json;
    if (!log_json.empty() && resumed_at >= 0)
      if (const LogCut cut = cut_step_log(log_json, resumed_at, what); cut.cut > 0)
        log0(world, what, ": cut ", cut.cut, " line", cut.cut == 1 ? "" : "s", " past step ",
             resumed_at,
             ", the checkpoint this run resumes (the interrupted run's steps, done again now)");
    if (!log_json.empty()) json = OutputFile(log_json, what, OutputFile::Mode::Append);
    const std::string note =
        svg_placeholder("tp_train writes this file when it ends (it stays so if the run stopped)");
    if (!plot.empty() && steps > 0) write_text_file(plot, note, "--plot " + plot);
    if (!trace.empty() && steps > 0) {
      write_text_file(trace, "{\"traceEvents\": []}\n", "--trace " + trace);
      write_text_file(svg_path(trace), note, "--trace (its SVG) " + svg_path(trace));
    }
  }
  return json;
}

void write_plot(Communicator& world, const std::string& plot, const TokenSource& source,
                const std::vector<double>& plot_steps, const std::vector<double>& plot_losses,
                const std::vector<double>& val_steps, const std::vector<double>& val_losses) {
  if (!plot.empty() && !plot_steps.empty()) {  // (every step skipped: no curve)
    if (world.rank() == 0) {
      std::vector<PlotSeries> series = {{(val_steps.empty() ? "" : "train, ") +
                                             std::string("t = ") + std::to_string(world.size()),
                                         plot_steps, plot_losses, "#1f77b4", false}};
      if (!val_steps.empty())
        series.push_back({"validation (held out)", val_steps, val_losses, "#d62728", false});
      if (std::isfinite(source.loss_floor()))
        series.push_back({"loss floor",
                          {plot_steps.front(), plot_steps.back()},
                          {source.loss_floor(), source.loss_floor()},
                          "#888888",
                          true});
      write_text_file(plot,
                      svg_line_plot("tp_train: training loss, t = " + std::to_string(world.size()),
                                    "step", "loss (nats)", series),
                      "--plot " + plot);
    }
    log0(world, "loss curve of steps ", plot_steps.front(), "..", plot_steps.back(), ": ", plot);
  }
}

void write_trace(Device& device, Communicator& world, Timeline& timeline, const std::string& trace,
                 const std::string& title, int64_t step, int64_t traced) {
  timeline.gather(world, device);
  if (world.rank() == 0) {
    timeline.write_trace_json(trace, "--trace " + trace);
    timeline.set_title(title);
    timeline.write_svg(svg_path(trace), "--trace (its SVG) " + svg_path(trace));
  }
  log0(world, "trace of steps ", step - traced + 1, "..", step, " (", timeline.spans().size(),
       " spans of ", world.size(), " ranks): ", trace, " (open in https://ui.perfetto.dev) and ",
       svg_path(trace));
}

std::vector<std::pair<std::string, std::string>> run_output_paths(const Options& o,
                                                                  const std::string& trace,
                                                                  const std::string& export_dir) {
  return {{"--save", CheckpointSeries(o.get_text("save")).final_path(0)},
          {"--dump-grads", o.get_text("dump-grads")},
          {"--log-json", o.get_text("log-json")},
          {"--trace", trace},
          {"--trace (its SVG)", trace.empty() ? "" : svg_path(trace)},
          {"--plot", o.get_text("plot")},
          {"--export-hf", export_dir.empty() ? "" : export_probe(export_dir)}};
}

}  // namespace tp
