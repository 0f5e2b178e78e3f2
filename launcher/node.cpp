// node.cpp — node-local rank and the thread rule (see node.h).
#include "node.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <map>

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

void choose_omp_threads(int local_size) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env != nullptr && *env != '\0') return;
  omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, local_size)));
}

}  // namespace tp
