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
# Lessons and their rank counts, from lessons/lessons.txt ("NN_name np").
lesson_list() { grep -v '^#' lessons/lessons.txt | awk 'NF==2'; }
