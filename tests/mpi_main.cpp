// mpi_main.cpp — GoogleTest main for tests that run under mpirun.
//
// Every rank runs every test. Rank 0 prints GoogleTest's usual report; other ranks print only
// their failures, prefixed with the rank. After the run the per-test results are combined across
// ranks (a test fails if it failed on any rank), rank 0 prints one summary line
//   tp-tests: np=3 passed=41 failed=0 skipped=0
// (read by scripts/run-tests.sh), and every rank exits 1 if any test failed anywhere. With
// TP_CHECK_COLLECTIVES=1 the world is a CheckedCommunicator (core/checked_communicator.h).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "core/checked_communicator.h"
#include "mpi_communicator.h"
#include "node.h"
#include "test_util.h"

namespace {

tp::Communicator* g_world = nullptr;

// On ranks other than 0: print failed assertions (with the rank), nothing else.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

namespace tp::testing {
Communicator& world() { return *g_world; }
}  // namespace tp::testing

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;  // MULTIPLE, as tp::run_program asks: the progress threads
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tp::node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  tp::choose_omp_threads(MPI_COMM_WORLD);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }

  int failed_anywhere = 0, passed = 0, failed = 0, skipped = 0;
  {
    // TP_CHECK_COLLECTIVES=1: every test's collectives on the world are checked
    // (core/checked_communicator.h), as run_program does for the programs.
    std::unique_ptr<tp::Communicator> world =
        std::make_unique<tp::MpiCommunicator>(MPI_COMM_WORLD, false);
    if (tp::check_collectives_from_environment())
      world = std::make_unique<tp::CheckedCommunicator>(std::move(world), tp::testing::device());
    g_world = world.get();
    const int local_rc = RUN_ALL_TESTS();  // per-test results are combined below
    (void)local_rc;
    g_world = nullptr;

    // Combine per-test results: 0 passed, 1 skipped, 2 failed; MAX over ranks.
    const auto* unit = ::testing::UnitTest::GetInstance();
    std::vector<int> status;
    for (int s = 0; s < unit->total_test_suite_count(); ++s) {
      const auto* suite = unit->GetTestSuite(s);
      for (int i = 0; i < suite->total_test_count(); ++i) {
        const auto* info = suite->GetTestInfo(i);
        if (!info->should_run()) continue;
        const auto* r = info->result();
        status.push_back(r->Failed() ? 2 : r->Skipped() ? 1 : 0);
      }
    }
    std::vector<int> combined(status.size());
    MPI_Allreduce(status.data(), combined.data(), static_cast<int>(status.size()), MPI_INT, MPI_MAX,
                  MPI_COMM_WORLD);
    for (int s : combined) (s == 2 ? failed : s == 1 ? skipped : passed)++;
    failed_anywhere = failed > 0;
  }
  if (rank == 0) {
    std::printf("tp-tests: np=%d passed=%d failed=%d skipped=%d\n", size, passed, failed, skipped);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return failed_anywhere ? 1 : 0;
}
