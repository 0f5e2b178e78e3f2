// mpi_tuning.h — collective algorithms the MPI communicator asks MPICH for.
//
// The communicator starts every collective as its nonblocking variant (mpi_wait.h says why), and
// MPICH picks the algorithm of a nonblocking collective by its own table, not the blocking call's.
// Where the two differ and the nonblocking pick is slower, the library names the better algorithm
// through the MPI tool interface (MPI_T_cvar_write, after MPI_Init):
//
//   MPICH: MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM = sched_pairwise
//     MPICH 4.0.2's default for MPI_Ireduce_scatter_block is the generic-transport recursive
//     exchange (tsp_recexch) up to a few MiB: at np 2, 1 MiB took 2.0x MPI_Reduce_scatter_block
//     (182 vs 93 µs), which uses pairwise exchange from 512 KiB on. sched_pairwise is that
//     algorithm on the nonblocking schedule: 96 vs 99 µs at 1 MiB, and 22 vs 37 µs at 256 KiB
//     (the blocking call's recursive halving there is slower still). scripts/bench.py, the
//     collectives rows.
//   Open MPI: coll_libnbc_iallreduce_algorithm = ring
//     Open MPI 4.1's libnbc picks a binomial tree (a reduce, then a broadcast) for every in-place
//     MPI_Iallreduce and for any on fewer than 4 ranks: at np 2, 16 MiB took 1.4-1.6x the
//     blocking MPI_Allreduce; the ring, 0.9-1.0x (a loaded machine, medians of 9). The ring
//     starts each of its t segments at another rank, so at t >= 3 the order an element is summed
//     in depends on its place in the message: an all-reduce cut into row blocks (--overlap
//     chunked) then differs from the whole's in the last bits, which the binomial tree's one
//     order never does (tests/parallel/test_overlap_mpi.cpp probes it: all_reduce_rows_invariant).
//
// A choice the user made stands: when the variable is set in the environment (MPICH: the
// MPIR_CVAR_, MPICH_ or MPIR_PARAM_ prefix, `=auto` restores MPICH's own choice; Open MPI:
// OMPI_MCA_<name>, `=0` restores libnbc's), or is not at its default (an MCA parameter file),
// nothing is written.
#pragma once

#include <mpi.h>

#include <string>

namespace tp::mpi {

/// Applies the choices above once per process (MPI must be initialised); later calls return at
/// once. Returns what it set, e.g. "MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM=sched_pairwise"
/// or "coll_libnbc_iallreduce_algorithm=ring", or "" when it set nothing.
const std::string& tune_collectives();

/// An MPICH algorithm variable as the tool interface shows it.
struct AlgorithmVariable {
  int index = -1;                         // MPI_T's index of the control variable
  int value = -1;                         // its value now (0: auto)
  std::string description;                // what MPI_T_cvar_get_info gives
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;  // its choices (Open MPI); MPICH lists them in the text
};

/// Reads the int control variable `name` (bound to no object), initialising the tool interface on
/// first use (it stays initialised until MPI_Finalize: mpi_tuning.cpp says why); false when there
/// is no such variable (Open MPI).
bool read_algorithm_variable(const std::string& name, AlgorithmVariable& out);

/// The int value of the choice `name` of `v`: its MPI_T enum item, or (MPICH, no enum) its place in
/// the description (algorithm_value). -1 when there is no such choice.
int choice_value(const AlgorithmVariable& v, const std::string& name);

/// The int value of the choice `name` of an MPICH algorithm variable, from the variable's
/// description: MPICH's algorithm variables are plain ints (no MPI_T enum), numbered in the order
/// the description lists them, "auto - ... sched_auto - ... sched_pairwise - ...", auto = 0 (the
/// enum and the description are generated from one list, src/mpi/coll/cvars.txt). -1 when `name`
/// is not listed.
int algorithm_value(const std::string& description, const std::string& name);

}  // namespace tp::mpi
