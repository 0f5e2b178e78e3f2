# common.sh — sourced by the run scripts: how to call mpirun here.
MPIEXEC=${MPIEXEC:-mpirun}
BUILD=${BUILD:-build}
# Open MPI's oversubscription, root and binding settings, as environment variables (the same file a
# user sources to type the README's mpirun lines as they are); MPICH needs none.
. scripts/mpi-env.sh
# Extra mpirun flags; empty now that scripts/mpi-env.sh sets Open MPI's through the environment.
MPI_FLAGS=${MPI_FLAGS:-}
# Lessons and their rank counts, from lessons/lessons.txt ("NN_name np").
lesson_list() { grep -v '^#' lessons/lessons.txt | awk 'NF==2'; }
