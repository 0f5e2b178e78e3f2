#include "mpi_communicator.h"

#include <climits>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "mpi_util.h"

namespace tp {

namespace {

using mpi::rank_of;
using mpi::size_of;

int count_of(const Tensor& t) {
  TP_CHECK(t.numel() <= INT_MAX, "a single MPI message holds at most ", INT_MAX,
           " elements; this tensor has ", t.numel());
  return static_cast<int>(t.numel());
}

// A host-addressable view of a tensor: the tensor itself on a CPU device, a staging copy otherwise.
class HostView {
 public:
  HostView(const Tensor& t, bool copy_in) : tensor_(t) {
    if (t.device().host_accessible()) {
      ptr_ = t.data();
    } else {
      staging_.resize(static_cast<size_t>(t.numel()));
      if (copy_in && t.numel() > 0) t.device().copy_to_host(staging_.data(), t.data(), t.bytes());
      ptr_ = staging_.data();
    }
  }
  float* ptr() const { return ptr_; }
  /// Copies a staged result back to the device (nothing to do when unstaged).
  void write_back() {
    if (!staging_.empty())
      tensor_.device().copy_from_host(tensor_.data(), staging_.data(), tensor_.bytes());
  }

 private:
  Tensor tensor_;
  std::vector<float> staging_;
  float* ptr_ = nullptr;
};

// An MPI request and the host views it reads and writes. `in` may be null for an in-place
// operation, whose output view then starts with the tensor's contents.
class MpiWork : public Work {
 public:
  MpiWork(const Tensor* in, const Tensor& out)
      : in_(in ? std::make_unique<HostView>(*in, true) : nullptr), out_(out, in == nullptr) {}
  // Destroyed without wait(): the work still completes, as on the other communicators (the
  // tensor holds the result; a staged one is copied back). Never leaves MPI writing into freed
  // memory; never throws.
  ~MpiWork() override {
    if (done_) return;
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    try {
      out_.write_back();
    } catch (...) {
    }
  }
  float* in() const { return in_->ptr(); }
  float* out() const { return out_.ptr(); }
  void wait() override {
    if (done_) return;
    mpi::check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
    finish();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    mpi::check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) finish();
    return done_;
  }
  MPI_Request request = MPI_REQUEST_NULL;

 private:
  void finish() {
    done_ = true;
    out_.write_back();
  }
  std::unique_ptr<HostView> in_;
  HostView out_;
  bool done_ = false;
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
    : Communicator(rank_of(comm), size_of(comm)), comm_(comm), owned_(owned) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::string MpiCommunicator::name() const { return "mpi (" + mpi_library_version() + ")"; }

void MpiCommunicator::do_all_reduce(Tensor& x, ReduceOp op) {
  HostView v(x, true);
  mpi::check(MPI_Allreduce(MPI_IN_PLACE, v.ptr(), count_of(x), MPI_FLOAT,
                           op == ReduceOp::Max ? MPI_MAX : MPI_SUM, comm_),
             "MPI_Allreduce");
  v.write_back();
}

void MpiCommunicator::do_all_gather(const Tensor& shard, Tensor& full) {
  HostView in(shard, true), out(full, false);
  mpi::check(MPI_Allgather(in.ptr(), count_of(shard), MPI_FLOAT, out.ptr(), count_of(shard),
                           MPI_FLOAT, comm_),
             "MPI_Allgather");
  out.write_back();
}

void MpiCommunicator::do_reduce_scatter(const Tensor& full, Tensor& shard) {
  HostView in(full, true), out(shard, false);
  mpi::check(
      MPI_Reduce_scatter_block(in.ptr(), out.ptr(), count_of(shard), MPI_FLOAT, MPI_SUM, comm_),
      "MPI_Reduce_scatter_block");
  out.write_back();
}

void MpiCommunicator::do_broadcast(Tensor& x, int root) {
  HostView v(x, true);
  mpi::check(MPI_Bcast(v.ptr(), count_of(x), MPI_FLOAT, root, comm_), "MPI_Bcast");
  v.write_back();
}

void MpiCommunicator::do_send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  HostView in(send, true), out(recv, false);
  mpi::check(MPI_Sendrecv(in.ptr(), count_of(send), MPI_FLOAT, to, 0, out.ptr(), count_of(recv),
                          MPI_FLOAT, from, 0, comm_, MPI_STATUS_IGNORE),
             "MPI_Sendrecv");
  out.write_back();
}

void MpiCommunicator::do_barrier() { mpi::check(MPI_Barrier(comm_), "MPI_Barrier"); }

std::unique_ptr<Work> MpiCommunicator::do_all_reduce_async(Tensor& x) {
  auto work = std::make_unique<MpiWork>(nullptr, x);
  mpi::check(MPI_Iallreduce(MPI_IN_PLACE, work->out(), count_of(x), MPI_FLOAT, MPI_SUM, comm_,
                            &work->request),
             "MPI_Iallreduce");
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_all_gather_async(const Tensor& shard, Tensor& full) {
  auto work = std::make_unique<MpiWork>(&shard, full);
  mpi::check(MPI_Iallgather(work->in(), count_of(shard), MPI_FLOAT, work->out(), count_of(shard),
                            MPI_FLOAT, comm_, &work->request),
             "MPI_Iallgather");
  return work;
}

std::unique_ptr<Work> MpiCommunicator::do_reduce_scatter_async(const Tensor& full, Tensor& shard) {
  auto work = std::make_unique<MpiWork>(&full, shard);
  mpi::check(MPI_Ireduce_scatter_block(work->in(), work->out(), count_of(shard), MPI_FLOAT, MPI_SUM,
                                       comm_, &work->request),
             "MPI_Ireduce_scatter_block");
  return work;
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
  return std::make_unique<MpiCommunicator>(sub, true);
}

}  // namespace tp
