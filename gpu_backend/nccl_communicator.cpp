// nccl_communicator.cpp — NcclCommunicator (see nccl_communicator.h for the stream/event protocol)
// and tp::make_nccl_communicator, the GPU backend's entry point for `--comm nccl` / `auto`.
#include "nccl_communicator.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "cuda_device.h"
#include "gpu_entry.h"
#include "mpi_util.h"

namespace tp {

namespace {

using mpi::rank_of;
using mpi::size_of;

// NCCL cannot put two ranks of one communicator on the same GPU. Every rank of `comm` learns
// whether any node has two ranks on one physical GPU, so the bad-input error is raised on every
// rank alike and the launcher exits 2 cleanly instead of hanging. The GPU is identified by its
// UUID, not by its ordinal or the visible count: with a per-rank CUDA_VISIBLE_DEVICES (one GPU per
// task, as batch schedulers set it) every rank sees its own, different GPU as ordinal 0 of 1.
void check_one_gpu_per_rank(MPI_Comm comm, int ordinal) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  constexpr int kUuid = static_cast<int>(sizeof prop.uuid.bytes);
  MPI_Comm node = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank_of(comm), MPI_INFO_NULL, &node),
             "MPI_Comm_split_type");
  const int local_size = size_of(node);
  std::vector<char> all(static_cast<size_t>(local_size) * kUuid);
  mpi::check(MPI_Allgather(prop.uuid.bytes, kUuid, MPI_BYTE, all.data(), kUuid, MPI_BYTE, node),
             "MPI_Allgather");
  MPI_Comm_free(&node);
  std::vector<std::string> uuids;
  for (int i = 0; i < local_size; ++i)
    uuids.emplace_back(all.data() + static_cast<size_t>(i) * kUuid, kUuid);
  std::sort(uuids.begin(), uuids.end());
  const int gpus = static_cast<int>(std::unique(uuids.begin(), uuids.end()) - uuids.begin());
  const bool shared = gpus < local_size;
  int mine[3] = {shared ? 1 : 0, shared ? local_size : 0, shared ? gpus : 0};
  int worst[3] = {0, 0, 0};
  mpi::check(MPI_Allreduce(mine, worst, 3, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  TP_CHECK_INPUT(worst[0] == 0, "NCCL needs one GPU per rank: ", worst[1], " ranks share ",
                 worst[2], worst[2] == 1 ? " GPU" : " GPUs",
                 " on this node; run with --comm mpi to stage through host memory, or fewer ranks");
}

// Rank 0 of `comm` creates the unique id, MPI_Bcast hands it to every rank, and every rank joins.
ncclComm_t init_over(MPI_Comm comm) {
  ncclUniqueId id;
  if (rank_of(comm) == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  mpi::check(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm), "MPI_Bcast");
  ncclComm_t nccl = nullptr;
  NCCL_CHECK(ncclCommInitRank(&nccl, size_of(comm), id, rank_of(comm)));
  return nccl;
}

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

// The NCCL type of t's elements: ncclBfloat16 sums in f32 and rounds once per reduction step.
ncclDataType_t type_of(const Tensor& t) {
  return t.dtype() == Dtype::bf16 ? ncclBfloat16 : ncclFloat;
}

size_t count(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// The Work of an asynchronous collective: an event recorded on the communication stream right
// after the collective, and the tensors it reads and writes (kept alive until the Work goes).
class NcclWork : public Work {
 public:
  NcclWork(cudaStream_t compute, std::initializer_list<Tensor> keep)
      : compute_(compute), keep_(keep) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~NcclWork() override {
    // Never let later kernels reuse this memory while NCCL may still use it: without wait(), the
    // compute stream is ordered after the collective here (no throwing from a destructor).
    if (!joined_) cudaStreamWaitEvent(compute_, event_, 0);
    cudaEventDestroy(event_);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;
  cudaEvent_t event() const { return event_; }

  // Stream-ordered: kernels launched on the compute stream after wait() see the output (and
  // Tensor::to_host, which synchronises the device, too). The host does not block.
  void wait() override {
    if (joined_) return;
    CUDA_CHECK(cudaStreamWaitEvent(compute_, event_, 0));
    joined_ = true;
  }
  // True once the output may be used: the collective has finished on the GPU, or wait() has
  // ordered the compute stream after it (so test() after wait() is true, as for every Work).
  // Never blocks.
  bool test() override {
    if (joined_) return true;
    const cudaError_t st = cudaEventQuery(event_);
    if (st == cudaErrorNotReady) return false;
    CUDA_CHECK(st);
    return true;
  }

 private:
  cudaStream_t compute_;
  cudaEvent_t event_ = nullptr;
  std::vector<Tensor> keep_;
  bool joined_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, CudaDevice& device)
    : Communicator(rank_of(comm), size_of(comm)), device_(device) {
  try {
    CUDA_CHECK(cudaSetDevice(device_.ordinal()));
    check_one_gpu_per_rank(comm, device_.ordinal());
    // A private duplicate: the bootstrap, barrier and split traffic cannot match the program's
    // own messages on `comm`.
    mpi::check(MPI_Comm_dup(comm, &mpi_), "MPI_Comm_dup");
    nccl_ = init_over(mpi_);
    create_streams();
  } catch (...) {
    release(true);  // the destructor does not run for a half-built object
    throw;
  }
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, ncclComm_t nccl, CudaDevice& device)
    : Communicator(rank_of(comm), size_of(comm)), mpi_(comm), nccl_(nccl), device_(device) {
  try {
    int nccl_rank = -1;
    NCCL_CHECK(ncclCommUserRank(nccl_, &nccl_rank));
    TP_CHECK(nccl_rank == rank(), "split: NCCL rank ", nccl_rank, " differs from MPI rank ",
             rank());
    create_streams();
  } catch (...) {
    release(true);
    throw;
  }
}

void NcclCommunicator::create_streams() {
  int least = 0, greatest = 0;  // a high-priority stream: collectives overtake queued compute work
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
  CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

NcclCommunicator::~NcclCommunicator() { release(std::uncaught_exceptions() > 0); }

void NcclCommunicator::release(bool failing) noexcept {
  // No throwing here. When the program is failing (an exception is unwinding the launcher, or a
  // constructor failed), peers may never reach a matching call: abort the NCCL communicator
  // instead of draining it.
  if (nccl_ != nullptr) {
    if (failing) {
      ncclCommAbort(nccl_);
    } else {
      if (comm_stream_ != nullptr) cudaStreamSynchronize(comm_stream_);
      ncclCommDestroy(nccl_);
    }
    nccl_ = nullptr;
  }
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  ready_ = done_ = nullptr;
  comm_stream_ = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (mpi_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&mpi_);
  mpi_ = MPI_COMM_NULL;
}

std::string NcclCommunicator::name() const {
  int v = 0;
  ncclGetVersion(&v);  // major·10000 + minor·100 + patch (NCCL ≥ 2.9)
  return "nccl " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void NcclCommunicator::begin() {
  CUDA_CHECK(cudaEventRecord(ready_, device_.stream()));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
}

void NcclCommunicator::finish() {
  CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(device_.stream(), done_, 0));
}

std::unique_ptr<Work> NcclCommunicator::finish_async(std::initializer_list<Tensor> keep) {
  auto work = std::make_unique<NcclWork>(device_.stream(), keep);
  CUDA_CHECK(cudaEventRecord(work->event(), comm_stream_));
  return work;
}

void NcclCommunicator::do_all_reduce(Tensor& x, ReduceOp op) {
  begin();
  NCCL_CHECK(
      ncclAllReduce(x.raw(), x.raw(), count(x), type_of(x), to_nccl(op), nccl_, comm_stream_));
  finish();
}

void NcclCommunicator::do_all_gather(const Tensor& shard, Tensor& full) {
  begin();
  NCCL_CHECK(
      ncclAllGather(shard.raw(), full.raw(), count(shard), type_of(shard), nccl_, comm_stream_));
  finish();
}

void NcclCommunicator::do_reduce_scatter(const Tensor& full, Tensor& shard) {
  begin();
  NCCL_CHECK(ncclReduceScatter(full.raw(), shard.raw(), count(shard), type_of(full), ncclSum, nccl_,
                               comm_stream_));
  finish();
}

void NcclCommunicator::do_broadcast(Tensor& x, int root) {
  begin();
  NCCL_CHECK(ncclBroadcast(x.raw(), x.raw(), count(x), type_of(x), root, nccl_, comm_stream_));
  finish();
}

void NcclCommunicator::do_send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  begin();
  enqueue_send_recv(send, to, recv, from);
  finish();
}

void NcclCommunicator::enqueue_send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  // One group: NCCL posts both sides together, so a ring step (everyone sends right, receives
  // from the left) cannot deadlock.
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(send.raw(), count(send), type_of(send), to, nccl_, comm_stream_));
  NCCL_CHECK(ncclRecv(recv.raw(), count(recv), type_of(recv), from, nccl_, comm_stream_));
  NCCL_CHECK(ncclGroupEnd());
}

// Point to point: one ncclSend or ncclRecv on the communication stream, outside a group. NCCL
// matches it with the peer's call in order; as a GPU operation it may wait until the peer's side
// is posted (see "Point to point" in core/communicator.h).
void NcclCommunicator::do_send(const Tensor& x, int to) {
  begin();
  NCCL_CHECK(ncclSend(x.raw(), count(x), type_of(x), to, nccl_, comm_stream_));
  finish();
}

void NcclCommunicator::do_recv(Tensor& x, int from) {
  begin();
  NCCL_CHECK(ncclRecv(x.raw(), count(x), type_of(x), from, nccl_, comm_stream_));
  finish();
}

std::unique_ptr<Work> NcclCommunicator::do_send_async(const Tensor& x, int to) {
  begin();
  NCCL_CHECK(ncclSend(x.raw(), count(x), type_of(x), to, nccl_, comm_stream_));
  return finish_async({x});
}

std::unique_ptr<Work> NcclCommunicator::do_recv_async(Tensor& x, int from) {
  begin();
  NCCL_CHECK(ncclRecv(x.raw(), count(x), type_of(x), from, nccl_, comm_stream_));
  return finish_async({x});
}

// One NCCL group: a send and a receive per other peer, posted together (so no order of peers can
// deadlock); the block to itself is a device-to-device copy on the same stream.
void NcclCommunicator::do_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                                       Tensor& recv, const std::vector<int64_t>& recv_rows) {
  begin();
  enqueue_all_to_all_v(send, send_rows, recv, recv_rows);
  finish();
}

std::unique_ptr<Work> NcclCommunicator::do_all_to_all_v_async(
    const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
    const std::vector<int64_t>& recv_rows) {
  begin();
  enqueue_all_to_all_v(send, send_rows, recv, recv_rows);
  return finish_async({send, recv});
}

void NcclCommunicator::enqueue_all_to_all_v(const Tensor& send,
                                            const std::vector<int64_t>& send_rows, Tensor& recv,
                                            const std::vector<int64_t>& recv_rows) {
  const size_t row_bytes = static_cast<size_t>(send.cols() * send.element_size());
  const auto* from = static_cast<const char*>(send.raw());
  auto* to = static_cast<char*>(recv.raw());
  NCCL_CHECK(ncclGroupStart());
  size_t send_at = 0, recv_at = 0;  // in rows
  for (int p = 0; p < size(); ++p) {
    const size_t s = static_cast<size_t>(send_rows[p]), r = static_cast<size_t>(recv_rows[p]);
    const size_t cols = static_cast<size_t>(send.cols());
    if (p == rank()) {
      if (s > 0)
        CUDA_CHECK(cudaMemcpyAsync(to + recv_at * row_bytes, from + send_at * row_bytes,
                                   s * row_bytes, cudaMemcpyDeviceToDevice, comm_stream_));
    } else {
      if (s > 0)
        NCCL_CHECK(
            ncclSend(from + send_at * row_bytes, s * cols, type_of(send), p, nccl_, comm_stream_));
      if (r > 0)
        NCCL_CHECK(
            ncclRecv(to + recv_at * row_bytes, r * cols, type_of(recv), p, nccl_, comm_stream_));
    }
    send_at += s;
    recv_at += r;
  }
  NCCL_CHECK(ncclGroupEnd());
}

void NcclCommunicator::do_barrier() {
  // Everything this rank has queued (compute and communication) is finished before it arrives.
  device_.synchronize();
  CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
  mpi::check(MPI_Barrier(mpi_), "MPI_Barrier");
}

std::unique_ptr<Work> NcclCommunicator::do_all_reduce_async(Tensor& x) {
  begin();
  NCCL_CHECK(ncclAllReduce(x.raw(), x.raw(), count(x), type_of(x), ncclSum, nccl_, comm_stream_));
  return finish_async({x});
}

std::unique_ptr<Work> NcclCommunicator::do_all_gather_async(const Tensor& shard, Tensor& full) {
  begin();
  NCCL_CHECK(
      ncclAllGather(shard.raw(), full.raw(), count(shard), type_of(shard), nccl_, comm_stream_));
  return finish_async({shard, full});
}

std::unique_ptr<Work> NcclCommunicator::do_reduce_scatter_async(const Tensor& full, Tensor& shard) {
  begin();
  NCCL_CHECK(ncclReduceScatter(full.raw(), shard.raw(), count(shard), type_of(full), ncclSum, nccl_,
                               comm_stream_));
  return finish_async({full, shard});
}

std::unique_ptr<Work> NcclCommunicator::do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                           int from) {
  begin();
  enqueue_send_recv(send, to, recv, from);
  return finish_async({send, recv});
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(mpi_, color, key, &sub), "MPI_Comm_split");
  ncclComm_t child = nullptr;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  // Collective over this communicator; ranks are ordered by (key, old rank), as MPI_Comm_split
  // orders them. Work already queued on the parent comes first (stream order).
  NCCL_CHECK(ncclCommSplit(nccl_, color, key, &child, nullptr));
#else
  // Older NCCL: a fresh communicator per group, bootstrapped over the MPI sub-communicator.
  child = init_over(sub);
#endif
  return std::unique_ptr<Communicator>(new NcclCommunicator(sub, child, device_));
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  TP_CHECK_INPUT(cuda != nullptr,
                 "--comm nccl needs tensors on a CUDA device (--backend gpu); this device is ",
                 device.name());
  return std::make_unique<NcclCommunicator>(comm, *cuda);
}

}  // namespace tp
