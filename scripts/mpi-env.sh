# mpi-env.sh — source it once per shell (`. scripts/mpi-env.sh`) and the README's plain
# `mpirun -np N build/bin/...` lines work as typed with Open MPI on a laptop, as root or as a user.
# With MPICH (the default here) it sets nothing: MPICH needs none of it.
#
# Open MPI (4.1 tested) refuses, unless told otherwise:
#   - more ranks than cores ("not enough slots"): OMPI_MCA_rmaps_base_oversubscribe=1, the
#     environment form of --oversubscribe;
#   - to run as root: OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (only when you
#     are root), the environment form of --allow-run-as-root;
# and at np <= 2 it pins each rank to one core, where the rank's OpenMP/BLAS threads would then
# share that core: OMPI_MCA_hwloc_base_binding_policy=none (--bind-to none) leaves placement to the
# OS, and the launcher's thread rule (launcher/node.h) divides the cores among the ranks.
# Every variable is Open MPI's own (OMPI_MCA_<param> is how Open MPI reads any MCA parameter from
# the environment); the scripts under scripts/ source this file, so `make run/test/bench` use it too.
# MPIEXEC (default mpirun) names the launcher to ask, e.g. MPIEXEC=mpirun.openmpi.
if "${MPIEXEC:-mpirun}" --version 2>&1 | grep -qi 'open mpi\|openrte'; then
  export OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_hwloc_base_binding_policy=none
  if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
fi
