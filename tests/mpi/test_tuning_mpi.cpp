// test_tuning_mpi.cpp — the collective algorithms the MPI communicator asks MPICH and Open MPI
// for (mpi/mpi_tuning.h): the variable really holds the choice, and the reduce-scatter it selects sums
// correctly on both sides of MPICH's 512 KiB switch, fp32 and bf16, blocking and async, on the
// world and on split groups. Runs under mpirun -np 1, 2, 3, 4; values are small integers, exact.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "mpi_communicator.h"
#include "mpi_tuning.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::device;
using tp::testing::world;

constexpr const char* kVariable = "MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM";

bool is_mpich() { return mpi_library_version().rfind("MPICH", 0) == 0; }

TEST(MpiTuning, ChoiceValuesFollowTheDescription) {
  // MPICH 4.0.2's description of the variable, as MPI_T_cvar_get_info gives it (no line breaks).
  const std::string d =
      "Variable to select ireduce_scatter_block algorithmauto - Internal algorithm selection (can "
      "be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)sched_auto - Internal "
      "algorithm selection for sched-based algorithmssched_noncommutative     - Force "
      "noncommutative algorithmsched_recursive_doubling - Force recursive doubling "
      "algorithmsched_pairwise           - Force pairwise algorithmsched_recursive_halving  - "
      "Force recursive halving algorithmtsp_recexch          - Force generic transport recursive "
      "exchange algorithm";
  EXPECT_EQ(mpi::algorithm_value(d, "auto"), 0);
  EXPECT_EQ(mpi::algorithm_value(d, "sched_auto"), 1);
  EXPECT_EQ(mpi::algorithm_value(d, "sched_pairwise"), 4);  // MPICH's enum: mpir_cvars.h
  EXPECT_EQ(mpi::algorithm_value(d, "tsp_recexch"), 6);
  EXPECT_EQ(mpi::algorithm_value(d, "ring"), -1);
}

// With nothing in the environment the variable holds the choice once a communicator exists (the
// test main made the world): under MPICH sched_pairwise for MPI_Ireduce_scatter_block, under
// Open MPI libnbc's ring for MPI_Iallreduce.
TEST(MpiTuning, TheVariableHoldsTheChoice) {
  world();
  const bool mpich = is_mpich();
  const char* variable = mpich ? kVariable : "coll_libnbc_iallreduce_algorithm";
  const char* choice = mpich ? "sched_pairwise" : "ring";
  const std::string env = mpich ? variable : std::string("OMPI_MCA_") + variable;
  if (std::getenv(env.c_str()) != nullptr) GTEST_SKIP() << env << " is set in the environment";
  EXPECT_EQ(mpi_collective_tuning(), std::string(variable) + "=" + choice);
  mpi::AlgorithmVariable v;
  ASSERT_TRUE(mpi::read_algorithm_variable(variable, v));
  EXPECT_EQ(v.value, mpi::choice_value(v, choice));
  EXPECT_GT(v.value, 0);
}

// The tool interface keeps the thread level MPI runs at: Open MPI 4.1 takes MPI_T_init_thread's
// level as the process's own, and MPI_T_init_thread(MPI_THREAD_SINGLE) once made MPI_Query_thread
// answer SINGLE after the test main's (and tp::run_program's) MPI_Init_thread(MULTIPLE): every
// communicator made afterwards (MpiCommunicator reads the level) ran without its progress thread,
// and MPI stopped guarding itself for the one running. MPICH and Open MPI both provide MULTIPLE.
TEST(MpiTuning, TheToolInterfaceKeepsTheThreadLevel) {
  world();
  mpi_collective_tuning();  // the tool interface is initialised by now
  mpi::AlgorithmVariable v;
  mpi::read_algorithm_variable(kVariable, v);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  EXPECT_EQ(level, MPI_THREAD_MULTIPLE) << mpi_library_version();
}

// full[i] = (rank + 1) · (i mod 7 + 1): the sum over t ranks is (i mod 7 + 1) · t(t + 1)/2 (at most
// 70 at t = 4, exact in bf16 too). Sizes below and above MPICH's 512 KiB switch between recursive
// halving and pairwise, and one whose shards are not a multiple of anything round.
void check_large_reduce_scatter(Communicator& c, Dtype dtype, bool async) {
  const int t = c.size(), r = c.rank();
  for (const int64_t n : {int64_t{1000}, int64_t{40000}, int64_t{262147}}) {
    std::vector<float> in(static_cast<size_t>(n * t));
    for (size_t i = 0; i < in.size(); ++i) in[i] = (r + 1.0f) * static_cast<float>(i % 7 + 1);
    Tensor full = Tensor::from_host(device(), Shape{n * t}, in, dtype);
    Tensor shard(device(), Shape{n}, dtype);
    if (async)
      c.reduce_scatter_async(full, shard)->wait();
    else
      c.reduce_scatter(full, shard);
    const std::vector<float> got = shard.to_host();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      wrong += got[i] != static_cast<float>((r * n + i) % 7 + 1) * t * (t + 1) / 2.0f;
    EXPECT_EQ(wrong, 0) << "n " << n << " per rank, " << dtype_name(dtype)
                        << (async ? ", async" : "");
  }
}

TEST(MpiTuning, LargeReduceScatterIsExact) {
  for (const Dtype dtype : {Dtype::f32, Dtype::bf16})
    for (const bool async : {false, true}) check_large_reduce_scatter(world(), dtype, async);
}

TEST(MpiTuning, LargeReduceScatterOnSplitGroupsIsExact) {
  Communicator& w = world();
  auto sub = w.split(w.rank() % 2, w.rank());
  for (const Dtype dtype : {Dtype::f32, Dtype::bf16})
    check_large_reduce_scatter(*sub, dtype, false);
}

}  // namespace
