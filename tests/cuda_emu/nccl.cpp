// nccl.cpp — the CUDA emulator's NCCL, over MPI: each collective's MPI exchange runs when it is
// enqueued (after the work its stream already holds), its result is written stream-ordered, so
// only work ordered after the collective sees it; point-to-point calls inside
// ncclGroupStart/End are posted together at ncclGroupEnd. Checks: the buffers lie inside device
// memory and are ncclFloat or ncclBfloat16 (ncclInvalidArgument otherwise); collectives inside a
// group are not emulated (ncclInvalidUsage).
//
// bf16 sums (ncclBfloat16 with ncclSum) follow NCCL's rounding: each combine of two partial sums
// widens both to f32, adds, and rounds the sum to bf16 (nearest even) once, as a ring step of
// NCCL's reduction kernel does. Here the combines are an MPI user op, so the order of the t − 1
// combines is MPI's (recursive doubling or reduce-scatter), not NCCL's ring; the number of
// roundings per element, and so the error bound, is the same.
#include <mpi.h>

#include <cstring>
#include <memory>
#include <vector>

#include "cuda_bf16.h"
#include "emu_internal.h"
#include "nccl.h"

using namespace cuda_emu;

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

namespace {

constexpr int kIdMagic = 0x454d5531;  // "EMU1"
int g_group_depth = 0;
struct P2p {
  bool send;
  const void* sbuf;
  void* rbuf;
  size_t count;
  ncclDataType_t type;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};
std::vector<P2p> g_pending;

ncclResult_t check_comm(ncclComm_t c) { return c == nullptr ? ncclInvalidArgument : ncclSuccess; }

bool supported(ncclDataType_t t) { return t == ncclFloat || t == ncclBfloat16; }

// Bytes per element of a supported type.
size_t size_of(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : 4; }

// The MPI type a buffer travels as: bf16 as its 16 bits.
MPI_Datatype mpi_type(ncclDataType_t t) { return t == ncclBfloat16 ? MPI_UINT16_T : MPI_FLOAT; }

// One combine of two bf16 partial results: f32 add (or max), one rounding (see the top).
template <bool kMax>
void bf16_combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const __nv_bfloat16*>(in);
  auto* b = static_cast<__nv_bfloat16*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    b[i] = kMax ? (x > y ? a[i] : b[i]) : __float2bfloat16_rn(x + y);
  }
}

MPI_Op make_op(MPI_User_function* f) {
  MPI_Op op = MPI_OP_NULL;
  MPI_Op_create(f, 1, &op);
  return op;
}

// The MPI reduction of (type, op); the bf16 ones are made once, on first use.
MPI_Op mpi_op(ncclDataType_t t, ncclRedOp_t op) {
  if (t != ncclBfloat16) return op == ncclMax ? MPI_MAX : MPI_SUM;
  static const MPI_Op sum = make_op(bf16_combine<false>), max = make_op(bf16_combine<true>);
  return op == ncclMax ? max : sum;
}

using Bytes = std::vector<unsigned char>;

// A collective: the MPI exchange runs now, after everything already queued on `stream` (so it
// reads its inputs as the stream would, and every rank's MPI calls stay in program order: real
// NCCL progresses on the GPU by itself, and running it lazily here could deadlock against host
// MPI calls), while writing its result is queued on the stream. So, as with NCCL, only work
// ordered after the collective (later on this stream, or waiting for an event recorded after it)
// sees the result: a missing cudaStreamWaitEvent reads stale data.
void collective(cudaStream_t stream, const char* what, void* recv,
                const std::function<Bytes()>& exchange) {
  flush_stream(stream);
  Bytes result;
  {
    DeviceMode mode(what);
    result = exchange();
  }
  auto buf = std::make_shared<Bytes>(std::move(result));
  enqueue_work(stream, what, [recv, buf] {
    if (!buf->empty()) std::memcpy(recv, buf->data(), buf->size());
  });
}

// A copy of n bytes at p.
Bytes take(const void* p, size_t n) {
  Bytes v(n);
  if (n != 0) std::memcpy(v.data(), p, n);
  return v;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (emulator)";
    case ncclInvalidUsage:
      return "invalid usage (emulator)";
    default:
      return "NCCL emulator error";
  }
}
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static int counter = 0;
  std::memset(id, 0, sizeof *id);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const int fields[3] = {kIdMagic, world, counter++};
  std::memcpy(id->internal, fields, sizeof fields);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int fields[3];
  std::memcpy(fields, id.internal, sizeof fields);
  if (fields[0] != kIdMagic || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  // Rendezvous at the id's creator (which must be a member): it learns every member's world rank
  // and sends the list back; then MPI_Comm_create_group over exactly those ranks, in rank order.
  const int creator = fields[1], tag = 31000 + fields[2] % 1000;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  std::vector<int> members(static_cast<size_t>(nranks), -1);
  if (world == creator) {
    members[static_cast<size_t>(rank)] = world;
    for (int i = 1; i < nranks; ++i) {
      int msg[2];
      MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      members[static_cast<size_t>(msg[0])] = msg[1];
    }
    for (int r = 0; r < nranks; ++r)
      if (members[static_cast<size_t>(r)] != world)
        MPI_Send(members.data(), nranks, MPI_INT, members[static_cast<size_t>(r)], tag,
                 MPI_COMM_WORLD);
  } else {
    const int msg[2] = {rank, world};
    MPI_Send(msg, 2, MPI_INT, creator, tag, MPI_COMM_WORLD);
    MPI_Recv(members.data(), nranks, MPI_INT, creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, nranks, members.data(), &group);
  auto* c = new ncclComm;
  MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->mpi);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  c->rank = rank;
  c->size = nranks;
  *comm = c;
  return ncclSuccess;
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t*) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(comm->mpi, color < 0 ? MPI_UNDEFINED : color, key, &sub);
  if (sub == MPI_COMM_NULL) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  auto* c = new ncclComm;
  c->mpi = sub;
  MPI_Comm_rank(sub, &c->rank);
  MPI_Comm_size(sub, &c->size);
  *newcomm = c;
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;  // its MPI communicator is left to MPI_Abort / MPI_Finalize
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (check_comm(comm) != ncclSuccess) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type) || (op != ncclSum && op != ncclMax))
    return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  const size_t n = count * size_of(type);
  if (!is_device_range(send, n) || !is_device_range(recv, n)) return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;  // collectives in a group: not emulated
  collective(stream, "ncclAllReduce", recv, [=] {
    Bytes in = take(send, n), out(n);
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), mpi_type(type), mpi_op(type, op),
                  comm->mpi);
    return out;
  });
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type)) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  const size_t n = count * size_of(type);
  if (!is_device_range(send, n) || !is_device_range(recv, n * comm->size))
    return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;
  collective(stream, "ncclAllGather", recv, [=] {
    Bytes in = take(send, n), out(n * comm->size);
    MPI_Allgather(in.data(), static_cast<int>(count), mpi_type(type), out.data(),
                  static_cast<int>(count), mpi_type(type), comm->mpi);
    return out;
  });
  return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type) || (op != ncclSum && op != ncclMax))
    return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  const size_t n = count * size_of(type);
  if (!is_device_range(send, n * comm->size) || !is_device_range(recv, n))
    return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;
  collective(stream, "ncclReduceScatter", recv, [=] {
    Bytes in = take(send, n * comm->size), out(n);
    MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(count), mpi_type(type),
                             mpi_op(type, op), comm->mpi);
    return out;
  });
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (check_comm(comm) != ncclSuccess || !supported(type) || root < 0 || root >= comm->size)
    return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  const size_t n = count * size_of(type);
  if ((comm->rank == root && !is_device_range(send, n)) || !is_device_range(recv, n))
    return ncclInvalidArgument;
  if (g_group_depth > 0) return ncclInvalidUsage;
  collective(stream, "ncclBroadcast", recv, [=] {
    Bytes buf = comm->rank == root ? take(send, n) : Bytes(n);
    MPI_Bcast(buf.data(), static_cast<int>(count), mpi_type(type), root, comm->mpi);
    return buf;
  });
  return ncclSuccess;
}

namespace {
// Sends read now and receives land stream-ordered, as for the collectives above.
void run_p2p(const std::vector<P2p>& ops) {
  for (const P2p& p : ops) flush_stream(p.stream);  // their inputs are ready
  std::vector<std::shared_ptr<Bytes>> bufs(ops.size());
  std::vector<MPI_Request> reqs(ops.size());
  {
    DeviceMode mode("ncclSend/ncclRecv");
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2p& p = ops[i];
      const size_t n = p.count * size_of(p.type);
      bufs[i] = std::make_shared<Bytes>(p.send ? take(p.sbuf, n) : Bytes(n));
      const int count = static_cast<int>(p.count);
      if (p.send)
        MPI_Isend(bufs[i]->data(), count, mpi_type(p.type), p.peer, 7, p.comm->mpi, &reqs[i]);
      else
        MPI_Irecv(bufs[i]->data(), count, mpi_type(p.type), p.peer, 7, p.comm->mpi, &reqs[i]);
    }
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].send || ops[i].count == 0) continue;
    void* dst = ops[i].rbuf;
    auto buf = bufs[i];
    enqueue_work(ops[i].stream, "ncclRecv",
                 [dst, buf] { std::memcpy(dst, buf->data(), buf->size()); });
  }
}
ncclResult_t p2p(const P2p& op) {
  if (check_comm(op.comm) != ncclSuccess || op.peer < 0 || op.peer >= op.comm->size)
    return ncclInvalidArgument;
  if (op.count != 0 && !is_device_range(op.send ? op.sbuf : op.rbuf, op.count * size_of(op.type)))
    return ncclInvalidArgument;
  if (g_group_depth > 0) {
    g_pending.push_back(op);
  } else {
    run_p2p({op});
  }
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  if (!supported(type)) return ncclInvalidArgument;
  return p2p({true, send, nullptr, count, type, peer, comm, stream});
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (!supported(type)) return ncclInvalidArgument;
  return p2p({false, nullptr, recv, count, type, peer, comm, stream});
}
ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(g_pending);
  if (!ops.empty()) run_p2p(ops);
  return ncclSuccess;
}
