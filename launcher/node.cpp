// node.cpp — node-local rank and the thread rule (see node.h).
#include "node.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace tp {

void node_local_rank(MPI_Comm comm, int* local_rank, int* local_size) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
}

std::vector<int> node_of_each_rank(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  // The node's name: the lowest rank on it (rank 0 of `node`, whose key is the rank in comm).
  int leader = rank;
  MPI_Bcast(&leader, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
  std::vector<int> leaders(static_cast<size_t>(size), 0);
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm);
  std::map<int, int> index;  // leader → node number, in the order of the leaders' ranks
  for (int l : leaders) index.emplace(l, 0);
  int n = 0;
  for (auto& [l, i] : index) i = n++;
  std::vector<int> out;
  for (int l : leaders) out.push_back(index[l]);
  return out;
}

int threads_per_rank(const CpuShare& s) {
  if (s.omp_num_threads != nullptr && *s.omp_num_threads != '\0') return 0;
  int n = std::max(1, s.mask_cpus / std::max(1, s.sharing_ranks));
  if (s.slurm_cpus_per_task != nullptr) {
    const int c = std::atoi(s.slurm_cpus_per_task);
    if (c > 0) n = std::min(n, c);
  }
  return n;
}

void choose_omp_threads(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_size(node, &local_size);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  CpuShare share;
  if (sched_getaffinity(0, sizeof mine, &mine) == 0) {
    share.mask_cpus = CPU_COUNT(&mine);
  } else {  // no affinity call: treat every rank as sharing all the node's processors
    share.mask_cpus = omp_get_num_procs();
    CPU_ZERO(&mine);
  }
  std::vector<cpu_set_t> all(static_cast<size_t>(local_size));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, node);
  MPI_Comm_free(&node);
  share.sharing_ranks = 0;
  for (const cpu_set_t& other : all) share.sharing_ranks += CPU_EQUAL(&other, &mine) ? 1 : 0;
  share.omp_num_threads = std::getenv("OMP_NUM_THREADS");
  share.slurm_cpus_per_task = std::getenv("SLURM_CPUS_PER_TASK");
  const int n = threads_per_rank(share);
  if (n > 0) omp_set_num_threads(n);
}

}  // namespace tp
