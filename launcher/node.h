// node.h — the ranks of one node: which one am I, and how many threads may each run.
#pragma once

#include <mpi.h>

#include <vector>

namespace tp {

/// Rank and size of this process among the ranks on the same node (MPI_COMM_TYPE_SHARED).
void node_local_rank(MPI_Comm comm, int* local_rank, int* local_size);

/// The node of every rank of `comm`, in rank order: nodes are numbered 0, 1, … in the order of
/// their lowest rank (ranks that share memory, MPI_COMM_TYPE_SHARED, are one node). Collective.
/// ProcessGrid (lib/parallel/process_grid.h) reads it to tell whether a TP group spans nodes.
std::vector<int> node_of_each_rank(MPI_Comm comm);

/// OpenMP threads per rank: the cores of this node shared among its `local_size` ranks, at least
/// one, so `mpirun -np 4` on a 2-core laptop runs 4 threads in all, not 8. OMP_NUM_THREADS, when
/// set, wins. An MpiCommunicator's progress thread (mpi_communicator.h) is counted as no core: it
/// runs only while a transfer is in flight, and then sleeps between polls: ~15% of a core while it
/// waits for a peer (the wake-ups), otherwise MPI moving the data the caller's wait() would move;
/// with nothing in flight it sleeps.
void choose_omp_threads(int local_size);

}  // namespace tp
