#include "mpi_communicator.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/progress.h"
#include "mpi_tuning.h"
#include "mpi_util.h"
#include "mpi_wait.h"

namespace tp {

namespace {

using mpi::rank_of;
using mpi::size_of;

int count_of(const Tensor& t) {
  TP_CHECK(t.numel() <= INT_MAX, "a single MPI message holds at most ", INT_MAX,
           " elements; this tensor has ", t.numel());
  return static_cast<int>(t.numel());
}

// bf16 reductions. MPI has no bf16 type: a bf16 buffer travels as MPI_UINT16_T (its bits
// unchanged) and is summed by a user-defined MPI_Op that widens both operands to f32, adds, and
// rounds the sum to nearest even once per combine of two partial results: what NCCL does for
// ncclBfloat16, and half the bytes of converting around an f32 collective (measured in the header).
template <bool kMax>
void bf16_combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = bf16_bits_to_float(a[i]), y = bf16_bits_to_float(b[i]);
    b[i] = kMax ? (x > y ? a[i] : b[i]) : float_to_bf16_bits(x + y);
  }
}

MPI_Op make_op(MPI_User_function* f) {
  MPI_Op op = MPI_OP_NULL;
  mpi::check(MPI_Op_create(f, /*commute=*/1, &op), "MPI_Op_create");
  return op;
}

// Each op is made once, on first use (after MPI_Init), and lives until the process ends.
MPI_Op bf16_op(ReduceOp op) {
  if (op == ReduceOp::Max) {
    static const MPI_Op max = make_op(bf16_combine<true>);
    return max;
  }
  static const MPI_Op sum = make_op(bf16_combine<false>);
  return sum;
}

// The MPI datatype of one element of t: MPI_FLOAT, or the 2-byte MPI_UINT16_T for bf16.
MPI_Datatype type_of(const Tensor& t) {
  return t.dtype() == Dtype::bf16 ? MPI_UINT16_T : MPI_FLOAT;
}

// The reduction op for t's dtype.
MPI_Op op_of(const Tensor& t, ReduceOp op) {
  if (t.dtype() == Dtype::bf16) return bf16_op(op);
  return op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
}

// A host-addressable view of a tensor: the tensor itself on a CPU device, a staging copy otherwise.
class HostView {
 public:
  HostView(const Tensor& t, bool copy_in) : tensor_(t) {
    if (t.device().host_accessible()) {
      ptr_ = t.raw();
    } else {
      staging_.resize(t.bytes());
      if (copy_in && t.numel() > 0) t.device().copy_to_host(staging_.data(), t.raw(), t.bytes());
      ptr_ = staging_.data();
    }
  }
  void* ptr() const { return ptr_; }
  /// Copies a staged result back to the device (nothing to do when unstaged).
  void write_back() {
    if (!staging_.empty())
      tensor_.device().copy_from_host(tensor_.raw(), staging_.data(), tensor_.bytes());
  }

 private:
  Tensor tensor_;
  std::vector<unsigned char> staging_;
  void* ptr_ = nullptr;
};

// An operation in flight: its MPI requests and the host views it reads and writes. `in` is null for
// an in-place operation, whose output view then starts with the tensor's contents. Its Work owns
// it; the progress thread holds a pointer to it until it sets `done`, and the Work is not
// destroyed before that (its destructor waits), so the pointer never dangles and the tensors are
// released on the caller's thread.
struct Transfer {
  Transfer(const Tensor* in_tensor, const Tensor& out_tensor)
      : in(in_tensor ? std::make_unique<HostView>(*in_tensor, true) : nullptr),
        out(out_tensor, in_tensor == nullptr) {}
  std::unique_ptr<HostView> in;
  HostView out;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int count = 1;  // requests in use: 1 for a collective, a send or a receive, 2 for a send-recv
  bool sends_only = false;  // a send: `out` is only read, never written back
  std::vector<int> counts;  // all_to_all_v: counts and displacements MPI reads until completion
  // Completion, as the progress thread reports it; `waiting`: a caller is blocked in wait().
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // MPI's message, when testing the requests failed
  std::atomic<bool> waiting{false};
};

}  // namespace

namespace {
// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time it ran, without time it was preempted.
std::chrono::nanoseconds thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}
}  // namespace

// The progress thread of one communicator (see the header): tests what is outstanding, sleeps
// kPollInterval unless there is a reason to test again at once, and marks each Transfer done when
// all its requests have completed.
class ProgressThread {
 public:
  ProgressThread() : thread_([this] { run(); }) {}
  /// Finishes what is outstanding, then joins.
  ~ProgressThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  /// Takes over a Transfer whose requests the caller has started.
  void drive(Transfer* t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming_.push_back(t);
    }
    wake_.notify_one();
  }
  /// Ends the current sleep: a caller has just started waiting.
  void kick() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kicked_ = true;
    }
    wake_.notify_one();
  }

 private:
  static constexpr std::chrono::microseconds kPollInterval{50};
  // A test that found nothing to do returns in ~0.05 µs; one that took longer copied or summed a
  // chunk of data, and the next chunk is likely ready: test again at once.
  static constexpr std::chrono::microseconds kWorked{2};
  static constexpr std::chrono::microseconds kIdle{2000};
  static constexpr std::chrono::microseconds kWorkedAfterIdle{50};
  static constexpr std::chrono::microseconds kMaxPoll{2000};

  void run() {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "tp-progress");  // shows in top -H, /proc/self/task/*/comm
#endif
    std::vector<Transfer*> active;
    bool hurry = false;       // test again without sleeping: MPI just had work, or a caller waits
    uint8_t recent_slow = 0;  // the last eight tests, 1 = slow (took more than kWorked…)
    // Since when MPI has had nothing to do (no chunk moved, nothing completed or arrived): after
    // kIdle the sleeps grow, an eighth of that time up to kMaxPoll, and a waiting caller no longer
    // makes the thread hurry (a stopped peer must not keep a core busy: mpi_wait.h).
    auto idle_since = std::chrono::steady_clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        const auto idle = std::chrono::steady_clock::now() - idle_since;
        const auto interval =
            idle < kIdle
                ? std::chrono::steady_clock::duration(kPollInterval)
                : std::min<std::chrono::steady_clock::duration>(
                      std::max<std::chrono::steady_clock::duration>(idle / 8, kPollInterval),
                      kMaxPoll);
        if (active.empty())
          wake_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
        else if (!hurry)
          wake_.wait_for(lock, interval, [&] { return kicked_ || !incoming_.empty(); });
        kicked_ = false;
        if (!incoming_.empty()) idle_since = std::chrono::steady_clock::now();
        active.insert(active.end(), incoming_.begin(), incoming_.end());
        incoming_.clear();
        if (active.empty() && stop_) return;
      }
      hurry = false;
      const bool long_idle = std::chrono::steady_clock::now() - idle_since >= kIdle;
      for (size_t i = 0; i < active.size();) {
        Transfer* t = active[i];
        int flag = 0;
        // The test's length in this thread's CPU time, not wall time: a virtual machine's vCPU
        // may be descheduled for milliseconds in the middle of an empty test (steal), which in
        // wall time would read as work.
        const auto start = thread_cpu_now();
        const int rc = MPI_Testall(t->count, t->requests, &flag, MPI_STATUSES_IGNORE);
        const auto end = std::chrono::steady_clock::now();
        // After a long idle, only a test that clearly moved data counts as work: on a loaded
        // machine an empty test sometimes takes a few µs, and must not keep the thread spinning
        // for a stopped peer.
        // A slow test makes the thread test again at once; it restarts the idle clock only when
        // three of the last eight tests were slow. An interrupt or a page fault makes one empty
        // test in a few hundred slow (measured: 1 in 235 above 2 µs on a noisy host), and with a
        // caller waiting, each such test restarting the clock kept the thread spinning through a
        // 300 ms wait for a late peer; a transfer that moves data makes most tests slow.
        const bool slow = thread_cpu_now() - start > (long_idle ? kWorkedAfterIdle : kWorked);
        recent_slow = static_cast<uint8_t>(recent_slow << 1 | (slow ? 1 : 0));
        if (slow) hurry = true;
        if (slow && __builtin_popcount(recent_slow) >= 3) idle_since = end;
        if (rc == MPI_SUCCESS && !flag) {
          hurry = hurry || (t->waiting.load() && !long_idle);
          ++i;
          continue;
        }
        idle_since = end;
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
        // Notify under the lock: once it is released, the Work may be gone.
        std::lock_guard<std::mutex> lock(t->mu);
        if (rc != MPI_SUCCESS) t->error = mpi::error_string(rc);
        t->done = true;
        t->cv.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;  // work arrived, a caller waits, or stop
  std::vector<Transfer*> incoming_;
  bool kicked_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

namespace {

// The Work of an asynchronous call. Driven by a progress thread: wait() and test() read the
// Transfer's flag. Otherwise (no MPI_THREAD_MULTIPLE) they call MPI_Waitall / MPI_Testall
// themselves, and the transfer progresses only then. Either way the staged result is copied back
// here, on the caller's thread.
class MpiWork : public Work {
 public:
  /// `progress`: the thread that will drive it, or null (MPI without MPI_THREAD_MULTIPLE).
  /// `what` ("wait all_reduce") and `group_size`: how wait() shows in the progress monitor.
  MpiWork(const char* what, int group_size, const Tensor* in, const Tensor& out,
          ProgressThread* progress)
      : t_(in, out), progress_(progress), what_(what), group_size_(group_size) {}
  // Destroyed without wait(): the work still completes, as on the other communicators (the
  // tensor holds the result; a staged one is copied back). Never leaves MPI writing into freed
  // memory; never throws.
  ~MpiWork() override {
    if (!started_) return;  // the call that made it failed
    try {
      wait();
    } catch (...) {
    }
  }
  MpiWork(const MpiWork&) = delete;
  MpiWork& operator=(const MpiWork&) = delete;

  /// Where the caller starts the MPI call: the buffers and the requests.
  Transfer& transfer() { return t_; }
  /// After the MPI call has started: from now on the progress thread drives it.
  void start() {
    started_ = true;
    if (progress_) progress_->drive(&t_);
  }

  void wait() override {
    if (finished_) return;
    ProgressScope scope(what_, group_size_, "");
    if (progress_) {
      std::unique_lock<std::mutex> lock(t_.mu);
      if (!t_.done) {
        // While t_ is not done the thread is running (it finishes its work before it stops).
        t_.waiting = true;
        progress_->kick();
        // Asleep until done; every 50 ms the monitor hears that this rank still waits.
        while (!t_.cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return t_.done; })) {
          if (ProgressMonitor* monitor = progress_monitor()) {
            lock.unlock();
            monitor->waiting();
            lock.lock();
          }
        }
      }
    } else {
      mpi::wait_all(t_.count, t_.requests, "MPI_Waitall");
    }
    finish();
  }
  bool test() override {
    if (finished_) return true;
    if (progress_) {
      std::lock_guard<std::mutex> lock(t_.mu);
      if (!t_.done) return false;
    } else {
      int flag = 0;
      mpi::check(MPI_Testall(t_.count, t_.requests, &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (!flag) return false;
    }
    finish();
    return true;
  }

 private:
  void finish() {
    finished_ = true;
    TP_CHECK(t_.error.empty(), "an asynchronous MPI call failed: ", t_.error);
    if (!t_.sends_only) t_.out.write_back();
  }
  Transfer t_;
  ProgressThread* progress_;
  const char* what_;
  int group_size_;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  s = s.substr(0, s.find_first_of("\r\n,"));  // first line, before any ", package: ..."
  std::string out;                            // "MPICH Version:\t4.0.2" → "MPICH 4.0.2"
  for (char ch : s) {
    if (ch == '\t') ch = ' ';
    if (ch == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += ch;
  }
  const size_t v = out.find("Version: ");
  if (v != std::string::npos) out.erase(v, 9);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned)
    : Communicator(rank_of(comm), size_of(comm)), comm_(comm), owned_(owned) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  thread_multiple_ = provided == MPI_THREAD_MULTIPLE;
  mpi::tune_collectives();  // once per process (mpi_tuning.h)
}

MpiCommunicator::~MpiCommunicator() {
  progress_.reset();  // finishes what is outstanding on comm_ before it is freed
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

ProgressThread* MpiCommunicator::progress() {
  if (!thread_multiple_) {
    static std::once_flag said;
    std::call_once(said, [] {
      if (rank_of(MPI_COMM_WORLD) != 0) return;
      std::fprintf(stderr,
                   "note: MPI was started without MPI_THREAD_MULTIPLE: asynchronous collectives "
                   "complete in wait() (no overlap with compute)\n");
    });
    return nullptr;
  }
  if (!progress_) progress_ = std::make_unique<ProgressThread>();
  return progress_.get();
}

std::string mpi_collective_tuning() { return mpi::tune_collectives(); }

std::string MpiCommunicator::name() const { return "mpi (" + mpi_library_version() + ")"; }

// The blocking calls start the nonblocking variant and wait for it in mpi::wait_all, which backs off
// instead of spinning a core while a peer is late (mpi_wait.h).
void MpiCommunicator::do_all_reduce(Tensor& x, ReduceOp op) {
  HostView v(x, true);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(
      MPI_Iallreduce(MPI_IN_PLACE, v.ptr(), count_of(x), type_of(x), op_of(x, op), comm_, &req),
      "MPI_Iallreduce");
  mpi::wait_all(1, &req, "MPI_Iallreduce", x.bytes());
  v.write_back();
}

void MpiCommunicator::do_all_gather(const Tensor& shard, Tensor& full) {
  HostView in(shard, true), out(full, false);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Iallgather(in.ptr(), count_of(shard), type_of(shard), out.ptr(), count_of(shard),
                            type_of(shard), comm_, &req),
             "MPI_Iallgather");
  mpi::wait_all(1, &req, "MPI_Iallgather", full.bytes());
  out.write_back();
}

void MpiCommunicator::do_reduce_scatter(const Tensor& full, Tensor& shard) {
  HostView in(full, true), out(shard, false);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Ireduce_scatter_block(in.ptr(), out.ptr(), count_of(shard), type_of(shard),
                                       op_of(shard, ReduceOp::Sum), comm_, &req),
             "MPI_Ireduce_scatter_block");
  mpi::wait_all(1, &req, "MPI_Ireduce_scatter_block", full.bytes());
  out.write_back();
}

void MpiCommunicator::do_broadcast(Tensor& x, int root) {
  HostView v(x, true);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Ibcast(v.ptr(), count_of(x), type_of(x), root, comm_, &req), "MPI_Ibcast");
  mpi::wait_all(1, &req, "MPI_Ibcast", x.bytes());
  v.write_back();
}

void MpiCommunicator::do_send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  HostView in(send, true), out(recv, false);
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  mpi::check(MPI_Irecv(out.ptr(), count_of(recv), type_of(recv), from, 0, comm_, &reqs[0]),
             "MPI_Irecv");
  const int rc = MPI_Isend(in.ptr(), count_of(send), type_of(send), to, 0, comm_, &reqs[1]);
  if (rc != MPI_SUCCESS) {
    MPI_Cancel(&reqs[0]);  // no receive may stay posted into memory about to be freed
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    mpi::check(rc, "MPI_Isend");
  }
  mpi::wait_all(2, reqs, "MPI_Isend/MPI_Irecv", send.bytes());
  out.write_back();
}

// Point to point has its own tag, so a send never matches a ring step's receive. Both wait in
// mpi::wait_all, like the collectives (no spinning for a late peer).
constexpr int kP2pTag = 1;

void MpiCommunicator::do_send(const Tensor& x, int to) {
  HostView in(x, true);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Isend(in.ptr(), count_of(x), type_of(x), to, kP2pTag, comm_, &req), "MPI_Isend");
  mpi::wait_all(1, &req, "MPI_Isend", x.bytes());
}

void MpiCommunicator::do_recv(Tensor& x, int from) {
  HostView out(x, false);
  // Probe first (it waits like the collectives), so the size check sees what was sent before a
  // receive of the wrong size could truncate it.
  MPI_Message msg;
  MPI_Status status;
  mpi::wait_until([&] {
    int arrived = 0;
    mpi::check(MPI_Improbe(from, kP2pTag, comm_, &arrived, &msg, &status), "MPI_Improbe");
    return arrived != 0;
  });
  int got = 0;
  MPI_Get_count(&status, type_of(x), &got);
  TP_CHECK(got == count_of(x), "recv: rank ", from, " sent ", got, " elements, the receive buffer ",
           x.shape().str(), " holds ", x.numel());
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Imrecv(out.ptr(), count_of(x), type_of(x), &msg, &req), "MPI_Imrecv");
  mpi::wait_all(1, &req, "MPI_Imrecv", x.bytes());
  out.write_back();
}

namespace {
// all_to_all_v's counts and displacements in elements, as MPI's int: every block and every offset
// must fit, so a buffer over INT_MAX elements is refused (count_of's line) rather than wrapped.
// [0, t): send counts, [t, 2t): send displacements, [2t, 3t): receive counts, [3t, 4t): receive
// displacements (a nonblocking call reads them until it completes: the Work keeps them).
std::vector<int> alltoallv_counts(const Tensor& send, const std::vector<int64_t>& send_rows,
                                  const Tensor& recv, const std::vector<int64_t>& recv_rows) {
  count_of(send);
  count_of(recv);
  const size_t t = send_rows.size();
  std::vector<int> c(4 * t);
  int64_t send_at = 0, recv_at = 0;
  for (size_t p = 0; p < t; ++p) {
    c[p] = static_cast<int>(send_rows[p] * send.cols());
    c[t + p] = static_cast<int>(send_at);
    send_at += c[p];
    c[2 * t + p] = static_cast<int>(recv_rows[p] * recv.cols());
    c[3 * t + p] = static_cast<int>(recv_at);
    recv_at += c[2 * t + p];
  }
  return c;
}

int alltoallv_start(const void* in, void* out, const std::vector<int>& c, MPI_Datatype type,
                    MPI_Comm comm, MPI_Request* req) {
  const size_t t = c.size() / 4;
  return MPI_Ialltoallv(in, c.data(), c.data() + t, type, out, c.data() + 2 * t, c.data() + 3 * t,
                        type, comm, req);
}
}  // namespace

void MpiCommunicator::do_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                                      Tensor& recv, const std::vector<int64_t>& recv_rows) {
  const std::vector<int> c = alltoallv_counts(send, send_rows, recv, recv_rows);
  HostView in(send, true), out(recv, false);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(alltoallv_start(in.ptr(), out.ptr(), c, type_of(send), comm_, &req), "MPI_Ialltoallv");
  mpi::wait_all(1, &req, "MPI_Ialltoallv", send.bytes());
  out.write_back();
}

std::unique_ptr<Work> MpiCommunicator::do_all_to_all_v_async(
    const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
    const std::vector<int64_t>& recv_rows) {
  auto work = std::make_unique<MpiWork>("wait all_to_all_v", size(), &send, recv, progress());
  Transfer& t = work->transfer();
  t.counts = alltoallv_counts(send, send_rows, recv, recv_rows);
  mpi::check(
      alltoallv_start(t.in->ptr(), t.out.ptr(), t.counts, type_of(send), comm_, &t.requests[0]),
      "MPI_Ialltoallv");
  work->start();
  return work;
}

void MpiCommunicator::do_barrier() {
  MPI_Request req = MPI_REQUEST_NULL;
  mpi::check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
  mpi::wait_all(1, &req, "MPI_Ibarrier");
}

std::unique_ptr<Work> MpiCommunicator::do_all_reduce_async(Tensor& x) {
  auto work = std::make_unique<MpiWork>("wait all_reduce", size(), nullptr, x, progress());
  Transfer& t = work->transfer();
  mpi::check(MPI_Iallreduce(MPI_IN_PLACE, t.out.ptr(), count_of(x), type_of(x),
                            op_of(x, ReduceOp::Sum), comm_, &t.requests[0]),
             "MPI_Iallreduce");
  work->start();
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_all_gather_async(const Tensor& shard, Tensor& full) {
  auto work = std::make_unique<MpiWork>("wait all_gather", size(), &shard, full, progress());
  Transfer& t = work->transfer();
  mpi::check(MPI_Iallgather(t.in->ptr(), count_of(shard), type_of(shard), t.out.ptr(),
                            count_of(shard), type_of(shard), comm_, &t.requests[0]),
             "MPI_Iallgather");
  work->start();
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_reduce_scatter_async(const Tensor& full, Tensor& shard) {
  auto work = std::make_unique<MpiWork>("wait reduce_scatter", size(), &full, shard, progress());
  Transfer& t = work->transfer();
  mpi::check(MPI_Ireduce_scatter_block(t.in->ptr(), t.out.ptr(), count_of(shard), type_of(shard),
                                       op_of(shard, ReduceOp::Sum), comm_, &t.requests[0]),
             "MPI_Ireduce_scatter_block");
  work->start();
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                          int from) {
  auto work = std::make_unique<MpiWork>("wait send_recv", size(), &send, recv, progress());
  Transfer& t = work->transfer();
  t.count = 2;
  // The receive first, so the message from the left finds its buffer posted.
  mpi::check(MPI_Irecv(t.out.ptr(), count_of(recv), type_of(recv), from, 0, comm_, &t.requests[0]),
             "MPI_Irecv");
  const int rc =
      MPI_Isend(t.in->ptr(), count_of(send), type_of(send), to, 0, comm_, &t.requests[1]);
  if (rc != MPI_SUCCESS) {
    MPI_Cancel(&t.requests[0]);  // no receive may stay posted into memory about to be freed
    MPI_Wait(&t.requests[0], MPI_STATUS_IGNORE);
    mpi::check(rc, "MPI_Isend");
  }
  work->start();
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_send_async(const Tensor& x, int to) {
  auto work = std::make_unique<MpiWork>("wait send", size(), nullptr, x,
                                        progress());  // `out` staged with x's data
  Transfer& t = work->transfer();
  t.sends_only = true;
  mpi::check(MPI_Isend(t.out.ptr(), count_of(x), type_of(x), to, kP2pTag, comm_, &t.requests[0]),
             "MPI_Isend");
  work->start();
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_recv_async(Tensor& x, int from) {
  auto work = std::make_unique<MpiWork>("wait recv", size(), nullptr, x,
                                        progress());  // staged like an in-place op
  Transfer& t = work->transfer();
  mpi::check(MPI_Irecv(t.out.ptr(), count_of(x), type_of(x), from, kP2pTag, comm_, &t.requests[0]),
             "MPI_Irecv");
  work->start();
  return work;
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
  return std::make_unique<MpiCommunicator>(sub, true);
}

}  // namespace tp
