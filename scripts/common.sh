# common.sh — sourced by the run scripts: how to call mpirun here.
MPIEXEC=${MPIEXEC:-mpirun}
BUILD=${BUILD:-build}
# Open MPI refuses more ranks than cores, and refuses root, unless told; MPICH needs neither flag.
mpi_flags() {
  if "$MPIEXEC" --version 2>&1 | grep -qi 'open mpi\|openrte'; then
    printf '%s' "--oversubscribe"
    [ "$(id -u)" = 0 ] && printf ' %s' "--allow-run-as-root"
  fi
  return 0
}
MPI_FLAGS=$(mpi_flags)
# Lessons and their rank counts, from lessons/lessons.txt ("NN_name np").
lesson_list() { grep -v '^#' lessons/lessons.txt | awk 'NF==2'; }
