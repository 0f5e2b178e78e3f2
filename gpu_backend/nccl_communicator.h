// nccl_communicator.h — the Communicator on NCCL, for tensors on a CudaDevice (one GPU per rank).
//
//   all_reduce      → ncclAllReduce (ncclSum | ncclMax)     all_reduce_async     → the same, Work
//   all_gather      → ncclAllGather                         all_gather_async     → the same, Work
//   reduce_scatter  → ncclReduceScatter (ncclSum)           reduce_scatter_async → the same, Work
//   broadcast       → ncclBroadcast (in place)
//   send_recv       → ncclSend + ncclRecv in one group      send_recv_async      → the same, Work
//   send / recv     → ncclSend / ncclRecv (no group)        send_async / recv_async → the same, Work
//   barrier         → both streams synchronised, then MPI_Barrier
//   all_to_all_v    → ncclSend + ncclRecv to every other peer in one group (empty blocks skipped),
//                     the block to itself a cudaMemcpyAsync on the communication stream
//                                                           all_to_all_v_async   → the same, Work
//   split           → MPI_Comm_split, then ncclCommSplit (NCCL ≥ 2.18) or a new unique id per group
//
// Dtypes: an f32 tensor travels as ncclFloat, a bf16 one as ncclBfloat16, whose sum NCCL adds in
// f32 and rounds to bf16 once per reduction step (per ring hop). The ledger counts 2 B per bf16
// element.
//
// Bootstrap: NCCL needs every rank to agree on one ncclUniqueId. Rank 0 of the MPI communicator
// creates it (ncclGetUniqueId), MPI_Bcast hands it to the others, and every rank calls
// ncclCommInitRank with it. MPI stays the launcher and the control plane (bootstrap, barrier,
// split); NCCL moves the tensors, GPU to GPU, without touching host memory.
//
// Streams and events. Every kernel of a CudaDevice runs on its compute stream; the collectives run
// on this communicator's own communication stream, so that an asynchronous collective can overlap
// later kernels. The two streams are tied together by events, never by host synchronisation:
//
//   compute: ... kernel(x) ─ record(ready) ──────────────────── wait(done) ─ kernel reading x ...
//                                  │                                ▲
//   comm:                     wait(ready) ─ ncclAllReduce(x) ─ record(done)
//
//   - Before a collective, an event recorded on the compute stream after the last kernel that
//     wrote its input is made a dependency of the communication stream (cudaStreamWaitEvent), so
//     NCCL reads finished data.
//   - A blocking call (all_reduce, ...) returns once the collective is *enqueued*, after making the
//     compute stream wait for the event recorded after it: every kernel launched afterwards, and
//     every copy to the host (Tensor::to_host synchronises the device), sees the result. The host
//     thread does not wait, which is the CUDA meaning of "done" — and why the CommLedger's wall
//     time per call measures the enqueue here, not the transfer.
//   - An `*_async` call enqueues the same way but does not make the compute stream wait; it
//     returns a Work. Work::wait() makes the compute stream wait for the collective's event (so
//     kernels launched after wait() see the output, while kernels launched between the call and
//     wait() overlap with it); Work::test() asks the event without blocking (and is true after
//     wait(), whose stream-ordered meaning is "the output may be used from here on"). Until
//     wait() the output must not be read and the input must not be written. A Work keeps the
//     tensors' storage alive, and one destroyed without wait() still orders the compute stream
//     after the collective, so freed memory is never reused while NCCL may still use it.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"

/// Checks an NCCL call; a failure throws tp::Error naming the call, the file and line, and NCCL's
/// own message (like CUDA_CHECK in cuda_check.h).
#define NCCL_CHECK(call)                                                                   \
  do {                                                                                     \
    const ncclResult_t nccl_rc_ = (call);                                                  \
    TP_CHECK(nccl_rc_ == ncclSuccess, #call, " failed at ", __FILE__, ":", __LINE__, ": ", \
             ncclGetErrorString(nccl_rc_));                                                \
  } while (0)

namespace tp {

class CudaDevice;

class NcclCommunicator : public Communicator {
 public:
  /// Collective over the ranks of `comm`: duplicates it (the duplicate is freed on destruction),
  /// checks that no two ranks of a node share a GPU (bad input otherwise, suggesting --comm mpi)
  /// and bootstraps an NCCL communicator through MPI.
  NcclCommunicator(MPI_Comm comm, CudaDevice& device);
  ~NcclCommunicator() override;
  /// "nccl 2.28.9"
  std::string name() const override;
  ncclComm_t handle() const { return nccl_; }
  cudaStream_t stream() const { return comm_stream_; }  ///< where the collectives run

 protected:
  void do_all_reduce(Tensor& x, ReduceOp op) override;
  void do_all_gather(const Tensor& shard, Tensor& full) override;
  void do_reduce_scatter(const Tensor& full, Tensor& shard) override;
  void do_broadcast(Tensor& x, int root) override;
  void do_send_recv(const Tensor& send, int to, Tensor& recv, int from) override;
  void do_barrier() override;
  std::unique_ptr<Work> do_all_reduce_async(Tensor& x) override;
  std::unique_ptr<Work> do_all_gather_async(const Tensor& shard, Tensor& full) override;
  std::unique_ptr<Work> do_reduce_scatter_async(const Tensor& full, Tensor& shard) override;
  std::unique_ptr<Work> do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                           int from) override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  void do_send(const Tensor& x, int to) override;
  void do_recv(Tensor& x, int from) override;
  std::unique_ptr<Work> do_send_async(const Tensor& x, int to) override;
  std::unique_ptr<Work> do_recv_async(Tensor& x, int from) override;
  void do_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                       const std::vector<int64_t>& recv_rows) override;
  std::unique_ptr<Work> do_all_to_all_v_async(const Tensor& send,
                                              const std::vector<int64_t>& send_rows, Tensor& recv,
                                              const std::vector<int64_t>& recv_rows) override;

 private:
  /// For split(): wraps an NCCL communicator already created over the MPI communicator `comm`
  /// (owned: both are freed on destruction).
  NcclCommunicator(MPI_Comm comm, ncclComm_t nccl, CudaDevice& device);
  void create_streams();
  /// Frees what exists (the destructor, or a constructor that throws midway); `failing` aborts
  /// the NCCL communicator instead of waiting for its queued work.
  void release(bool failing) noexcept;
  /// The send and the receive of one ring step, in one NCCL group on the communication stream.
  void enqueue_send_recv(const Tensor& send, int to, Tensor& recv, int from);
  /// all_to_all_v's sends, receives and local copy on the communication stream.
  void enqueue_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                            const std::vector<int64_t>& recv_rows);
  /// Makes the communication stream wait for everything enqueued so far on the compute stream.
  void begin();
  /// Blocking call, after the collective is enqueued: records done_ on the communication stream
  /// and makes the compute stream wait for it.
  void finish();
  /// Asynchronous call, after the collective is enqueued: a Work with its own event (several may
  /// be outstanding), holding `keep` (the tensors' storage) until it is destroyed.
  std::unique_ptr<Work> finish_async(std::initializer_list<Tensor> keep);

  MPI_Comm mpi_ = MPI_COMM_NULL;
  ncclComm_t nccl_ = nullptr;
  CudaDevice& device_;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the compute stream before each collective
  cudaEvent_t done_ = nullptr;   // recorded on the comm stream after each blocking collective
};

}  // namespace tp
