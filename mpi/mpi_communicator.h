// mpi_communicator.h — the Communicator on MPI (MPICH or Open MPI).
//
//   all_reduce      → MPI_Allreduce(MPI_IN_PLACE, SUM | MAX) all_reduce_async    → MPI_Iallreduce
//   all_gather      → MPI_Allgather                         all_gather_async     → MPI_Iallgather
//   reduce_scatter  → MPI_Reduce_scatter_block (SUM)        reduce_scatter_async → MPI_Ireduce_scatter_block
//   broadcast       → MPI_Bcast      send_recv → MPI_Sendrecv      split → MPI_Comm_split
//
// Tensors on a device the host cannot address (a GPU) are staged through host buffers, so this
// communicator also serves several ranks sharing one GPU.
#pragma once

#include <mpi.h>

#include "core/communicator.h"

namespace tp {

class MpiCommunicator : public Communicator {
 public:
  /// Wraps `comm`. With `owned`, MPI_Comm_free is called on destruction (for split() results).
  MpiCommunicator(MPI_Comm comm, bool owned);
  ~MpiCommunicator() override;
  std::string name() const override;
  MPI_Comm handle() const { return comm_; }

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
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  MPI_Comm comm_;
  bool owned_;
};

/// The MPI library's own version line, e.g. "MPICH Version: 4.0.2".
std::string mpi_library_version();

}  // namespace tp
