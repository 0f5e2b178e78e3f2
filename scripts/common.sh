# common.sh — sourced by the run scripts: how to call mpirun here.
MPIEXEC=${MPIEXEC:-mpirun}
SANITIZE=${SANITIZE:-}
if [ -n "$SANITIZE" ]; then BUILD=${BUILD:-build-san}; else BUILD=${BUILD:-build}; fi
# A sanitized build (make test SANITIZE=address,undefined; the Makefile's "Sanitizers"): every
# finding stops the program with a non-zero exit and a report on stderr (so in the test's log);
# leaks are checked at exit, with only MPI's, OpenMP's and OpenBLAS's own suppressed
# (tests/sanitizers/lsan.supp). allocator_may_return_null: an impossible allocation throws
# std::bad_alloc as it does without ASan (the out-of-memory check tests that message). Options the
# caller already set go last, so they win.
if [ -n "$SANITIZE" ]; then
  san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/sanitizers" && pwd)
  export ASAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export LSAN_OPTIONS="suppressions=$san_dir/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  # MPI_Init's hwloc PCI discovery leaks from a plugin it unloads, past any suppression (lsan.supp).
  export HWLOC_COMPONENTS=${HWLOC_COMPONENTS--pci}
fi
# Open MPI's oversubscription, root and binding settings, as environment variables (the same file a
# user sources to type the README's mpirun lines as they are); MPICH needs none.
. scripts/mpi-env.sh
# Extra mpirun flags; empty now that scripts/mpi-env.sh sets Open MPI's through the environment.
MPI_FLAGS=${MPI_FLAGS:-}
# Lessons and their rank counts, from lessons/lessons.txt ("NN_name np [launch]"), as "NN_name np".
lesson_list() { grep -v '^#' lessons/lessons.txt | awk 'NF==2 || NF==3 { print $1, $2 }'; }
# lesson_launch_flags NAME NP: the extra mpirun flags lesson NAME's launch column asks for (none
# when it has none). "two-nodes": NP/2 ranks on each of two simulated hosts of this machine, by
# MPICH's hydra (-launcher fork -hosts localhost:N,127.0.0.1:N: one proxy per "host", ranks 0..N-1
# on the first; scripts/tests/nodes.sh). Status 1, with the reason on stdout, when this mpirun
# cannot (Open MPI cannot make one machine two nodes): the caller skips the lesson with that line.
lesson_launch_flags() {
  local launch
  launch=$(grep -v '^#' lessons/lessons.txt | awk -v n="$1" '$1 == n { print $3 }')
  case "$launch" in
    "") ;;
    two-nodes)
      if "$MPIEXEC" --version 2>&1 | grep -q HYDRA; then
        echo "-launcher fork -hosts localhost:$(($2 / 2)),127.0.0.1:$(($2 / 2))"
      else
        echo "lesson $1 skipped: it runs on two nodes, which $MPIEXEC cannot simulate on one machine (MPICH's hydra can)"
        return 1
      fi ;;
    *) echo "lesson $1 skipped: lessons/lessons.txt gives it the unknown launch '$launch'"; return 1 ;;
  esac
}
