// fail_one_rank.cpp — a helper program for scripts/run-tests.sh: checks that a failure on one
// rank ends the whole job instead of leaving the other ranks blocked in a collective.
//
//   --mode=one-rank   rank 1 throws (TP_CHECK) while the others wait in an all-reduce: the job must
//                     abort with a non-zero exit, well before the test's timeout.
//   --mode=bad-input  every rank builds a ColumnParallelLinear with out = 7, which t = 2, 3, 4 do not
//                     divide: rank 0 prints the one-line divisibility error, every rank exits 2.
//   --mode=segfault   every rank runs "steps" of all-reduces; at step 3 the last rank dereferences
//                     a null pointer: it must say "rank R (pid P): fatal signal SIGSEGV at step 3"
//                     and every rank must be gone in seconds.
//   --mode=sigkill    the same, but the last rank SIGKILLs itself (it cannot say anything): the
//                     node's watchdog must name it (launcher/watchdog.h).
//   --mode=sigstop    the same, but the last rank stops itself (SIGSTOP) at step 3, outside any
//                     collective: with --stall-timeout S the node's watchdog must name it within
//                     about S seconds, while the others sleep in their all-reduce.
//   --mode=stop-watchdog, --mode=kill-watchdog
//                     rank 0 SIGSTOPs (or SIGKILLs) its node's watchdog at step 3; the job must still
//                     finish its --steps steps (default 20) and exit 0, with one warning line.
//   --async           the steps use all_reduce_async + wait instead of the blocking all-reduce.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "launcher.h"
#include "parallel/linear.h"

using namespace tp;

// The child processes of this one (the node's watchdog is local rank 0's only child).
std::vector<pid_t> children() {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string path = "/proc/" + std::string(e->d_name) + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char line[512] = {};
    const size_t got = std::fread(line, 1, sizeof line - 1, f);
    std::fclose(f);
    const char* close_paren = std::strrchr(line, ')');  // "pid (comm) state ppid ..."
    int ppid = 0;
    if (got > 0 && close_paren != nullptr && std::sscanf(close_paren + 2, "%*c %d", &ppid) == 1 &&
        ppid == ::getpid())
      found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

int main(int argc, char** argv) {
  Options opts("fail_one_rank", "Fails on purpose, to test that no rank is left hanging.");
  opts.text("mode", "one-rank", "which failure",
            {"one-rank", "bad-input", "segfault", "sigkill", "sigstop", "stop-watchdog",
             "kill-watchdog"});
  opts.flag("async", "the steps use asynchronous all-reduces");
  opts.integer("steps", 20, "steps of the watchdog modes").positive();
  return run_program(argc, argv, opts, [](Context& ctx) {
    const std::string mode = ctx.options.get_text("mode");
    if (mode == "bad-input") {
      ColumnParallelLinear fc1(ctx.device, ctx.world, "fc1", 4, 7, Bias::With, ColumnOutput::Split);
      return 0;  // reached only when t divides 7
    }
    if (mode != "one-rank") {
      const int victim = ctx.world.size() - 1;
      const bool watchdog = mode == "stop-watchdog" || mode == "kill-watchdog";
      Tensor x = Tensor::zeros(ctx.device, Shape{1024});
      for (int64_t step = 1;; ++step) {
        set_current_step(step);
        if (watchdog && step > ctx.options.get_int("steps")) return 0;
        if (step == 3 && watchdog && ctx.local_rank == 0)
          for (pid_t child : children()) ::kill(child, mode == "kill-watchdog" ? SIGKILL : SIGSTOP);
        if (step == 3 && !watchdog && ctx.world.rank() == victim) {
          if (mode == "sigkill") ::kill(::getpid(), SIGKILL);
          if (mode == "sigstop") ::raise(SIGSTOP);
          // SIGSEGV, as a stray pointer would raise it. (Not a store through a null pointer:
          // under SANITIZE=undefined UBSan would report that store before any signal.)
          ::raise(SIGSEGV);
        }
        if (ctx.options.get_flag("async"))
          ctx.world.all_reduce_async(x)->wait();
        else
          ctx.world.all_reduce(x);
        ::usleep(20000);
      }
    }
    TP_CHECK(ctx.world.rank() != 1, "rank 1 fails on purpose");
    Tensor x = Tensor::zeros(ctx.device, Shape{4});
    ctx.world.all_reduce(x);  // the other ranks wait here for rank 1, which never comes
    return 0;
  });
}
