// test_node_mpi.cpp — the thread rule (launcher/node.h): how many OpenMP threads each rank runs, under
// mpirun on a laptop, under srun's binding (simulated: the masks and the SLURM_* variables srun
// sets), in a container's cpuset; and, live, that this run applied the rule. And, when the launcher
// was told to make one machine look like several nodes (scripts/tests/nodes.sh), that every rank
// sees the node, the node-local rank and the thread count that placement implies.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "node.h"

namespace {

using tp::CpuShare;
using tp::threads_per_rank;

CpuShare share(int mask, int sharing, const char* omp = nullptr, const char* slurm = nullptr) {
  CpuShare s;
  s.mask_cpus = mask;
  s.sharing_ranks = sharing;
  s.omp_num_threads = omp;
  s.slurm_cpus_per_task = slurm;
  return s;
}

TEST(ThreadRule, LaptopMpirunDividesTheCores) {
  EXPECT_EQ(threads_per_rank(share(2, 4)), 1);  // mpirun -np 4 on 2 cores: never 0
  EXPECT_EQ(threads_per_rank(share(2, 2)), 1);
  EXPECT_EQ(threads_per_rank(share(2, 1)), 2);
  EXPECT_EQ(threads_per_rank(share(16, 3)), 5);
}

TEST(ThreadRule, OmpNumThreadsWins) {
  EXPECT_EQ(threads_per_rank(share(16, 4, "7")), 0);
  EXPECT_EQ(threads_per_rank(share(16, 4, "")), 4);  // set but empty: ignored
}

// srun -n 4 -c 4 on a 16-CPU node (binding on, its default): each task's mask holds its own 4 CPUs,
// shared with no other rank; SLURM_CPUS_PER_TASK=4.
TEST(ThreadRule, SrunBindsEachTaskToItsOwnCpus) {
  EXPECT_EQ(threads_per_rank(share(4, 1, nullptr, "4")), 4);
  // srun --cpu-bind=none -n 4 -c 4: every task sees all 16 CPUs, shared four ways.
  EXPECT_EQ(threads_per_rank(share(16, 4, nullptr, "4")), 4);
  // srun -n 4 -c 2 --cpu-bind=none on 16 CPUs: srun promised 2 per task; that caps the share of 4.
  EXPECT_EQ(threads_per_rank(share(16, 4, nullptr, "2")), 2);
  EXPECT_EQ(threads_per_rank(share(16, 4, nullptr, "garbage")), 4);  // unreadable: ignored
}

TEST(ThreadRule, ContainerCpusetIsSharedLikeALaptop) {
  // docker --cpuset-cpus=0-3 on a 64-core host, 4 ranks: the mask (4 CPUs) is the same for all.
  EXPECT_EQ(threads_per_rank(share(4, 4)), 1);
}

// Live: this process's OpenMP thread count is the rule applied to its real mask and neighbours
// (the ranks of this run all share one node here, unbound: the same mask).
TEST(ThreadRule, ThisRunFollowsTheRule) {
  if (const char* e = std::getenv("OMP_NUM_THREADS"); e != nullptr && *e != '\0')
    GTEST_SKIP() << "OMP_NUM_THREADS is set: the rule leaves OpenMP alone";
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int local_rank = 0, local_size = 1;
  tp::node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  int same_mask = 0;
  std::vector<cpu_set_t> all(static_cast<size_t>(local_size));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, node);
  MPI_Comm_free(&node);
  for (const auto& m : all) same_mask += CPU_EQUAL(&m, &mine) ? 1 : 0;
  const int want = threads_per_rank(
      share(CPU_COUNT(&mine), same_mask, nullptr, std::getenv("SLURM_CPUS_PER_TASK")));
  EXPECT_EQ(omp_get_max_threads(), want)
      << CPU_COUNT(&mine) << " CPUs in the mask, " << same_mask << " ranks share it";
}

// Live, against a placement the caller states: TP_EXPECT_NODES="0 0 1 1" is the node of each rank
// (MPICH: `mpirun -launcher fork -hosts localhost:2,127.0.0.1:2 -np 4` gives 0 0 1 1,
// `MPIR_CVAR_ODD_EVEN_CLIQUES=1 mpirun -np 4` gives 0 1 0 1). The expectation is built from that
// list and the masks alone, not from MPI_COMM_TYPE_SHARED: node_of_each_rank, node_local_rank
// (rank among the ranks of its node, in rank order) and the thread rule with the ranks of this node
// that share this rank's mask. Rank 0 prints one "tp-nodes:" line with what each rank saw.
TEST(NodeLayout, EveryRankSeesTheStatedNodes) {
  const char* stated = std::getenv("TP_EXPECT_NODES");
  if (stated == nullptr || *stated == '\0')
    GTEST_SKIP() << "TP_EXPECT_NODES is not set (scripts/tests/nodes.sh sets it)";
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> want_node;
  std::istringstream in(stated);
  for (int n = 0; in >> n;) want_node.push_back(n);
  ASSERT_EQ(static_cast<int>(want_node.size()), size) << "TP_EXPECT_NODES=\"" << stated << "\"";

  // 1. The node of every rank, as ProcessGrid's placement check reads it.
  EXPECT_EQ(tp::node_of_each_rank(MPI_COMM_WORLD), want_node);
  // 2. This rank's place on its node: the ranks of its node before it, and how many there are.
  const int node = want_node[static_cast<size_t>(rank)];
  int want_local_rank = 0, want_local_size = 0;
  for (int r = 0; r < size; ++r) {
    if (want_node[static_cast<size_t>(r)] != node) continue;
    want_local_rank += r < rank ? 1 : 0;
    ++want_local_size;
  }
  int local_rank = -1, local_size = -1;
  tp::node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  EXPECT_EQ(local_rank, want_local_rank);
  EXPECT_EQ(local_size, want_local_size);
  // 3. The thread rule with the ranks of this node (by the stated list) whose mask equals mine.
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  std::vector<cpu_set_t> masks(static_cast<size_t>(size));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, masks.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  int sharing = 0;
  for (int r = 0; r < size; ++r)
    sharing += want_node[static_cast<size_t>(r)] == node &&
                       CPU_EQUAL(&masks[static_cast<size_t>(r)], &mine)
                   ? 1
                   : 0;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int rule =
      threads_per_rank(share(CPU_COUNT(&mine), sharing, omp, std::getenv("SLURM_CPUS_PER_TASK")));
  const int threads = omp_get_max_threads();
  if (rule > 0) {  // 0: OMP_NUM_THREADS decides, the rule leaves OpenMP alone
    EXPECT_EQ(threads, rule) << CPU_COUNT(&mine) << " CPUs in the mask, " << sharing
                             << " ranks of node " << node << " share it";
  }
  // 4. What every rank saw, on one line from rank 0.
  const int seen[4] = {node, local_rank, local_size, threads};
  std::vector<int> all(4 * static_cast<size_t>(size));
  MPI_Gather(seen, 4, MPI_INT, all.data(), 4, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::string line = "tp-nodes: " + std::to_string(CPU_COUNT(&mine)) + " CPUs in each mask;";
    for (int r = 0; r < size; ++r) {
      const int* a = &all[4 * static_cast<size_t>(r)];
      line += std::string(r ? "," : "") + " rank " + std::to_string(r) + ": node " +
              std::to_string(a[0]) + ", local rank " + std::to_string(a[1]) + " of " +
              std::to_string(a[2]) + ", " + std::to_string(a[3]) + " thread" +
              (a[3] == 1 ? "" : "s");
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace
