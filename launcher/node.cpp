// node.cpp — node-local rank and the thread rule (see node.h).
#include "node.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>

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

void choose_omp_threads(int local_size) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env != nullptr && *env != '\0') return;
  omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, local_size)));
}

}  // namespace tp
