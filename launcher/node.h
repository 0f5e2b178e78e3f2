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

/// What decides one rank's OpenMP thread count (threads_per_rank), read from the system.
struct CpuShare {
  int mask_cpus = 1;  ///< CPUs in this rank's affinity mask (what the launcher or cgroup allows)
  int sharing_ranks = 1;  ///< ranks on this node whose affinity mask equals this one's (>= 1)
  const char* omp_num_threads = nullptr;      ///< $OMP_NUM_THREADS, or nullptr
  const char* slurm_cpus_per_task = nullptr;  ///< $SLURM_CPUS_PER_TASK (srun -c), or nullptr
};

/// The thread rule. 0 when OMP_NUM_THREADS is set (it wins: leave OpenMP alone). Otherwise the
/// CPUs of this rank's affinity mask divided among the ranks that share that same mask, at least
/// one: `mpirun -np 4` unbound on a 2-core laptop gives 4 ranks × 1 thread, not 4 × 2; a launcher
/// that binds each rank to its own cores (srun's default, `mpirun --bind-to core`) gives each rank
/// its whole mask; a container's cpuset shared by all ranks is divided like a laptop's cores. Under
/// Slurm, SLURM_CPUS_PER_TASK (srun -c N) caps it: srun promised N CPUs to each task.
int threads_per_rank(const CpuShare& share);

/// Applies threads_per_rank() to OpenMP, with the affinity masks of the ranks of `comm` that share
/// this node compared through MPI (collective over `comm`). An MpiCommunicator's progress thread
/// (mpi_communicator.h) is counted as no core: it runs only while a transfer is in flight, and
/// then sleeps between polls: ~1% of a core while it waits for a late peer (the wake-ups), otherwise
/// MPI moving the data the caller's wait() would move; with nothing in flight it sleeps.
void choose_omp_threads(MPI_Comm comm);

}  // namespace tp
