// tp_flight — reads the flight recorder's dumps of one job (a run's --flight-dir: one
// flight-rank-R.jsonl per rank, observe/flight_recorder.h) and says what held the job up: the
// diagnosis first (observe/flight_analysis.h: a mismatch, a rank that never entered a collective
// the others wait in, a rank without a dump, or "all ranks completed everything"), then the last
// calls of each group aligned across ranks.
//
//   build/bin/tp_flight DIR             the diagnosis and the aligned tail
//   build/bin/tp_flight DIR --json      the diagnosis as one JSON object
//   build/bin/tp_flight DIR --rows 20   a longer tail (default 8 calls per group)
//
// Bad input (no folder, no dump, a truncated file, two jobs' dumps): one line, exit 2. It runs
// on one process, without mpirun (it only reads files).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "observe/flight_analysis.h"

using namespace tp;

namespace {

const char* kUsage =
    "usage: tp_flight DIR [--json] [--rows N]\n"
    "  DIR       the run's --flight-dir (flight-rank-R.jsonl files)\n"
    "  --json    print the diagnosis as one JSON object\n"
    "  --rows N  calls per group in the aligned tail (default 8)\n";

struct Args {
  std::string dir;
  bool json = false;
  int rows = 8;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--rows") {
      TP_CHECK_INPUT(i + 1 < argc, "--rows needs a number (calls per group, e.g. --rows 20)");
      char* end = nullptr;
      const long rows = std::strtol(argv[++i], &end, 10);
      TP_CHECK_INPUT(*end == '\0' && rows >= 1 && rows <= 100000, "--rows ", argv[i],
                     ": give a whole number of calls from 1 to 100000");
      a.rows = static_cast<int>(rows);
    } else {
      TP_CHECK_INPUT(arg.rfind("--", 0) != 0, "unknown option ", arg, "; see --help");
      TP_CHECK_INPUT(a.dir.empty(), "two folders (", a.dir, ", ", arg,
                     "); give one run's --flight-dir");
      a.dir = arg;
    }
  }
  TP_CHECK_INPUT(!a.dir.empty(), "no folder given; usage: tp_flight DIR (the run's --flight-dir)");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    const std::vector<FlightDump> dumps = read_flight_dumps(args.dir);
    const FlightDiagnosis d = diagnose_flight(dumps);
    if (args.json) {
      std::printf("%s\n", flight_json(d).c_str());
      return 0;
    }
    std::printf("%s\n", d.line.c_str());
    std::printf("\n# %zu dump(s) of job %s:", dumps.size(), d.job.c_str());
    for (const FlightDump& dump : dumps)
      std::printf(" rank %d (host %s, step %lld, %s)%s", dump.rank, dump.host.c_str(),
                  static_cast<long long>(dump.step), dump.reason.c_str(),
                  &dump == &dumps.back() ? "" : ";");
    std::printf("\n%s", flight_tail(dumps, d, args.rows).c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
}
