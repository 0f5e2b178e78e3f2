// node.h — the ranks of one node: which one am I, and how many threads may each run.
#pragma once

#include <mpi.h>

namespace tp {

/// Rank and size of this process among the ranks on the same node (MPI_COMM_TYPE_SHARED).
void node_local_rank(MPI_Comm comm, int* local_rank, int* local_size);

/// OpenMP threads per rank: the cores of this node shared among its `local_size` ranks, at least
/// one, so `mpirun -np 4` on a 2-core laptop runs 4 threads in all, not 8. OMP_NUM_THREADS, when
/// set, wins. An MpiCommunicator's progress thread (mpi_communicator.h) is counted as no core: it
/// sleeps between polls and only while a transfer is in flight, ~15% of a core when it has nothing
/// to move (most of it the wake-ups), the rest of its time MPI moving data the caller would
/// otherwise move in wait(); idle, nothing.
void choose_omp_threads(int local_size);

}  // namespace tp
