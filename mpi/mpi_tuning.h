// mpi_tuning.h — collective algorithms the MPI communicator asks MPICH for.
//
// The communicator starts every collective as its nonblocking variant (mpi_wait.h says why), and
// MPICH picks the algorithm of a nonblocking collective by its own table, not the blocking call's.
// Where the two differ and the nonblocking pick is slower, the library names the algorithm the
// blocking call uses, through the MPI tool interface (MPI_T_cvar_write, after MPI_Init):
//
//   MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM = sched_pairwise
//     MPICH 4.0.2's default for MPI_Ireduce_scatter_block is the generic-transport recursive
//     exchange (tsp_recexch) up to a few MiB: at np 2, 1 MiB took 2.0x MPI_Reduce_scatter_block
//     (182 vs 93 µs), which uses pairwise exchange from 512 KiB on. sched_pairwise is that
//     algorithm on the nonblocking schedule: 96 vs 99 µs at 1 MiB, and 22 vs 37 µs at 256 KiB
//     (the blocking call's recursive halving there is slower still). scripts/bench.py, the
//     collectives rows.
//
// A choice the user made stands: when the variable is set in the environment (MPIR_CVAR_,
// MPICH_ or MPIR_PARAM_ prefix; `=auto` restores MPICH's own choice), or is not at its default,
// nothing is written. Under Open MPI (no such variable) nothing happens.
#pragma once

#include <string>

namespace tp::mpi {

/// Applies the choices above once per process (MPI must be initialised); later calls return at
/// once. Returns what it set, e.g. "MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM=sched_pairwise",
/// or "" when it set nothing.
const std::string& tune_collectives();

/// An MPICH algorithm variable as the tool interface shows it.
struct AlgorithmVariable {
  int index = -1;           // MPI_T's index of the control variable
  int value = -1;           // its value now (0: auto)
  std::string description;  // what MPI_T_cvar_get_info gives, the list of choices in it
};

/// Reads the int control variable `name` (bound to no object), initialising the tool interface on
/// first use (it stays initialised until MPI_Finalize: mpi_tuning.cpp says why); false when there
/// is no such variable (Open MPI).
bool read_algorithm_variable(const std::string& name, AlgorithmVariable& out);

/// The int value of the choice `name` of an MPICH algorithm variable, from the variable's
/// description: MPICH's algorithm variables are plain ints (no MPI_T enum), numbered in the order
/// the description lists them, "auto - ... sched_auto - ... sched_pairwise - ...", auto = 0 (the
/// enum and the description are generated from one list, src/mpi/coll/cvars.txt). -1 when `name`
/// is not listed.
int algorithm_value(const std::string& description, const std::string& name);

}  // namespace tp::mpi
