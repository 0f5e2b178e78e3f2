#include "parallel/ring_attention.h"

#include <memory>
#include <utility>

#include "core/error.h"

namespace tp {

namespace {
// The rows of one chunk in a sequence-major (n·B, ·) tensor.
Tensor chunk_rows(const Tensor& x, const CpChunk& c, int64_t batch) {
  return x.view(c.local_begin * batch, (c.local_begin + c.len) * batch);
}

// The shape of one (query chunk, key chunk) call: its query i sits at key position past + i.
AttentionShape pair_shape(const AttentionShape& local, const CpChunk& q, const CpChunk& k) {
  AttentionShape sh = local;
  sh.seq = q.len;
  sh.kv_seq = k.len;
  sh.past = q.global_begin - k.global_begin;  // Full: ≥ k.len; Diagonal: 0
  return sh;
}

// K and V side by side in one (2·n·B, nkv·hd) buffer, so that one send carries both: K in rows
// [0, n·B), V in [n·B, 2·n·B).
Tensor pack_kv(Device& device, const Tensor& k, const Tensor& v) {
  Tensor kv(device, Shape{2 * k.rows(), k.cols()}, k.dtype());
  kv.view(0, k.rows()).copy_from(k);
  kv.view(k.rows(), 2 * k.rows()).copy_from(v);
  return kv;
}
}  // namespace

RingAttention::RingAttention(Device& device, Communicator& cp, int64_t seq, CpLayout layout)
    : device_(device),
      cp_(cp),
      seq_(seq),
      layout_(layout),
      mine_(cp_chunks(seq, cp.size(), cp.rank(), layout)) {}

Shape RingAttention::lse_shape(int64_t batch, int64_t heads) const {
  return Shape{static_cast<int64_t>(mine_.size()) * batch, heads, mine_.front().len};
}

void RingAttention::forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                            const Tensor& v, const AttentionShape& shape) {
  const int cp = cp_.size(), r = cp_.rank();
  const int64_t B = shape.batch, n = q.rows() / B;
  TP_CHECK(n == seq_ / cp, "ring attention: ", n, " local positions, expected S/cp = ", seq_ / cp);
  full_pairs_ = diagonal_pairs_ = 0;
  if (cp == 1) {  // no ring: the whole sequence is here
    AttentionShape sh = shape;
    sh.seq = n;
    device_.attention_forward(out, lse, q, k, v, sh);
    diagonal_pairs_ = 1;
    return;
  }
  Tensor cur = pack_kv(device_, k, v), next(device_, cur.shape(), cur.dtype());
  std::vector<bool> started(mine_.size(), false);
  for (int i = 0; i < cp; ++i) {
    const int source = (r - i + cp) % cp;
    // 1. Start passing the held block on while this step computes on it.
    std::unique_ptr<Work> pass;
    if (i < cp - 1) {
      CommLedger::Scope scope(cp_.ledger(), "ring attention kv");
      pass = cp_.send_recv_async(cur, (r + 1) % cp, next, (r - 1 + cp) % cp);
    }
    const Tensor held_k = cur.view(0, n * B), held_v = cur.view(n * B, 2 * n * B);
    const std::vector<CpChunk> theirs = cp_chunks(seq_, cp, source, layout_);
    // 2. Every (my query chunk, their key chunk) pair the causal mask leaves anything of.
    for (size_t a = 0; a < mine_.size(); ++a)
      for (size_t b = 0; b < theirs.size(); ++b) {
        RingPair pair;
        pair.step = i;
        pair.source = source;
        pair.q_chunk = static_cast<int>(a);
        pair.kv_chunk = static_cast<int>(b);
        pair.q = mine_[a];
        pair.kv = theirs[b];
        pair.kind = classify_pair(mine_[a], theirs[b]);
        if (pair.kind == ChunkPair::Skipped) {
          if (observer_) observer_(pair);
          continue;
        }
        (pair.kind == ChunkPair::Full ? full_pairs_ : diagonal_pairs_) += 1;
        const AttentionShape sh = pair_shape(shape, mine_[a], theirs[b]);
        const Tensor qa = chunk_rows(q, mine_[a], B);
        const Tensor kb = chunk_rows(held_k, theirs[b], B), vb = chunk_rows(held_v, theirs[b], B);
        Tensor oa = chunk_rows(out, mine_[a], B), la = lse.view(a * B, (a + 1) * B);
        Tensor po(device_, qa.shape(), q.dtype()), pl(device_, la.shape());
        device_.attention_forward(po, pl, qa, kb, vb, sh);
        if (!started[a]) {  // the chunk's first partial is its running output
          oa.copy_from(po);
          la.copy_from(pl);
          started[a] = true;
        } else if (broken_merge_) {
          device_.axpy(1.0f, po, oa);  // wrong on purpose: no log-sum-exp weights
        } else {
          device_.attention_merge(oa, la, po, pl, sh);  // 3. the online softmax's merge
        }
        if (observer_) {
          pair.partial_out = po;
          pair.partial_lse = pl;
          pair.merged_out = oa;
          pair.merged_lse = la;
          observer_(pair);
        }
      }
    if (pass) {
      pass->wait();
      std::swap(cur, next);
    }
  }
  for (size_t a = 0; a < mine_.size(); ++a)
    TP_CHECK(started[a], "ring attention: query chunk ", a, " met no key (a layout bug)");
}

void RingAttention::backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionShape& shape) {
  const int cp = cp_.size(), r = cp_.rank();
  const int64_t B = shape.batch, n = q.rows() / B;
  if (cp == 1) {
    AttentionShape sh = shape;
    sh.seq = n;
    device_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, sh);
    return;
  }
  Tensor cur = pack_kv(device_, k, v), next(device_, cur.shape(), cur.dtype());
  // The travelling dK | dV of the held block: acc[held] (zero at its home). After a step adds its
  // part, it goes on to r + 1 while the next step computes, and the next block's arrives in the
  // other buffer; `part` is a step's own contribution, added once that has arrived.
  Tensor acc[2] = {Tensor(device_, cur.shape(), dk.dtype()),
                   Tensor(device_, cur.shape(), dk.dtype())};
  Tensor part(device_, cur.shape(), dk.dtype());
  device_.fill(acc[0], 0.0f);
  device_.fill(dq, 0.0f);
  std::unique_ptr<Work> carry;
  int held = 0;
  for (int i = 0; i < cp; ++i) {
    const int source = (r - i + cp) % cp;
    std::unique_ptr<Work> pass;
    if (i < cp - 1) {
      CommLedger::Scope scope(cp_.ledger(), "ring attention kv");
      pass = cp_.send_recv_async(cur, (r + 1) % cp, next, (r - 1 + cp) % cp);
    }
    Tensor& into = i == 0 ? acc[0] : part;  // step 0: straight into my own block's accumulator
    if (i > 0) device_.fill(part, 0.0f);
    const Tensor held_k = cur.view(0, n * B), held_v = cur.view(n * B, 2 * n * B);
    Tensor into_dk = into.view(0, n * B), into_dv = into.view(n * B, 2 * n * B);
    const std::vector<CpChunk> theirs = cp_chunks(seq_, cp, source, layout_);
    for (size_t a = 0; a < mine_.size(); ++a)
      for (size_t b = 0; b < theirs.size(); ++b) {
        if (classify_pair(mine_[a], theirs[b]) == ChunkPair::Skipped) continue;
        const AttentionShape sh = pair_shape(shape, mine_[a], theirs[b]);
        const Tensor qa = chunk_rows(q, mine_[a], B), oa = chunk_rows(out, mine_[a], B);
        const Tensor da = chunk_rows(dout, mine_[a], B), la = lse.view(a * B, (a + 1) * B);
        const Tensor kb = chunk_rows(held_k, theirs[b], B), vb = chunk_rows(held_v, theirs[b], B);
        Tensor pq(device_, qa.shape(), dq.dtype()), pk(device_, kb.shape(), dk.dtype()),
            pv(device_, vb.shape(), dv.dtype());
        // P and D from the merged out and lse: the softmax over every key, not this block's.
        device_.attention_backward(pq, pk, pv, da, qa, kb, vb, oa, la, sh);
        Tensor dqa = chunk_rows(dq, mine_[a], B);
        Tensor dkb = chunk_rows(into_dk, theirs[b], B), dvb = chunk_rows(into_dv, theirs[b], B);
        device_.axpy(1.0f, pq, dqa);
        device_.axpy(1.0f, pk, dkb);
        device_.axpy(1.0f, pv, dvb);
      }
    if (i > 0) {  // the held block's dK | dV from the ranks before, plus mine
      carry->wait();
      device_.axpy(1.0f, part, acc[held]);
    }
    {  // on to the next rank while the next step computes (the last hop takes them home)
      CommLedger::Scope scope(cp_.ledger(), "ring attention dkv");
      carry = cp_.send_recv_async(acc[held], (r + 1) % cp, acc[1 - held], (r - 1 + cp) % cp);
    }
    held = 1 - held;
    if (pass) {
      pass->wait();
      std::swap(cur, next);
    }
  }
  carry->wait();  // my own block's dK | dV, home from rank r − 1
  dk.copy_from(acc[held].view(0, n * B));
  dv.copy_from(acc[held].view(n * B, 2 * n * B));
}

}  // namespace tp
