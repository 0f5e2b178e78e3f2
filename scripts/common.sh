# common.sh — sourced by the run scripts: how to call mpirun here.
MPIEXEC=${MPIEXEC:-mpirun}
BUILD=${BUILD:-build}
# Open MPI refuses more ranks than cores, and refuses root, unless told; MPICH needs neither flag.
# Open MPI also binds each rank to one core when np ≤ 2, so a rank's OpenMP/BLAS threads would share
# that core: --bind-to none leaves placement to the OS (the thread rule already divides the cores).
mpi_flags() {
  if "$MPIEXEC" --version 2>&1 | grep -qi 'open mpi\|openrte'; then
    printf '%s' "--oversubscribe --bind-to none"
    [ "$(id -u)" = 0 ] && printf ' %s' "--allow-run-as-root"
  fi
  return 0
}
MPI_FLAGS=$(mpi_flags)
# Lessons and their rank counts, from lessons/lessons.txt ("NN_name np").
lesson_list() { grep -v '^#' lessons/lessons.txt | awk 'NF==2'; }
