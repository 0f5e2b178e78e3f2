// ring_all_reduce.h — the ring all-reduce built from send_recv alone (lesson 10, exercise 11).
//
// A buffer of t chunks is summed over the t ranks of `comm` in two halves of t − 1 steps each.
// The ranks stand in a circle: rank r sends to r + 1 and receives from r − 1 (mod t).
//
//   reduce-scatter, step s:  send chunk (r − s) mod t; receive chunk (r − s − 1) mod t into the
//                            scratch and add it to this rank's copy. Afterwards rank r holds the
//                            finished sum of chunk (r + 1) mod t.
//   all-gather, step s:      send the finished chunk (r + 1 − s) mod t; the finished chunk
//                            (r − s) mod t arrives in place of this rank's copy.
//
// Each of the 2(t − 1) steps sends N/t bytes, so each rank sends 2(t − 1)/t · N in all: the
// CommLedger's ring model of Communicator::all_reduce, and the least any all-reduce can send.
// The library's own collectives are the communicator's (MPI_Allreduce, ncclAllReduce); this is
// the algorithm beneath them, written out to be read and checked step by step.
#pragma once

#include <functional>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace tp {

/// Runs on every rank after step s (0 … t − 2) of a ring half: lesson 10 prints and checks the
/// buffers there.
using RingObserver = std::function<void(int s)>;

/// Chunk c mod t of `buf` (t, c): a view of one row, (1, c).
Tensor ring_chunk(const Tensor& buf, int c);

/// The reduce-scatter half: buf (t, c) on every rank, scratch (1, c). Records are labelled
/// "ring reduce-scatter" in the ledger.
void ring_reduce_scatter(Communicator& comm, Device& dev, Tensor& buf, Tensor& scratch,
                         const RingObserver& after_step = {});

/// The all-gather half: buf (t, c), rank r holding the finished chunk (r + 1) mod t. Records are
/// labelled "ring all-gather".
void ring_all_gather(Communicator& comm, Tensor& buf, const RingObserver& after_step = {});

/// Both halves: buf (t, c) summed in place over the ranks (scratch (1, c)).
void ring_all_reduce(Communicator& comm, Device& dev, Tensor& buf, Tensor& scratch);

}  // namespace tp
