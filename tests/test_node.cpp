// test_node.cpp — the thread rule (launcher/node.h): how many OpenMP threads each rank runs, under
// mpirun on a laptop, under srun's binding (simulated: the masks and the SLURM_* variables srun
// sets), in a container's cpuset; and, live, that this run applied the rule.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

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

}  // namespace
