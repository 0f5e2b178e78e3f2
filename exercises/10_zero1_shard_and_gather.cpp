// Exercise 10 — ZeRO-1's shard and gather (lesson 12b).
//
// ZeRO-1 splits the optimizer's state over the dp data-parallel replicas: the parameters, flattened
// in order into one vector of `total` elements (padded with zeros to a multiple of dp), are cut into
// dp equal shards; replica d owns [begin, end) and steps only those. After its step every replica
// all-gathers the shards back into its whole parameters.
// Write the partition and the gather. Shapes: total = Σ numel; padded = ⌈total / dp⌉·dp; a shard is
// padded / dp elements; value_shard (padded/dp) → every params[i].value.
// Hint: for (const Param& p : params) total += p.value.numel(); begin = dp_rank · (padded / dp_size).
// Gather: Tensor flat(device, Shape{part.padded}); dp.all_gather(value_shard, flat) (at dp = 1, copy)
// inside CommLedger::Scope scope(dp.ledger(), "zero_params"); then each parameter copies its
// numel() elements from flat, in order (Tensor v = p.value; v.copy_from(flat.view(at, at + n))).
// TP_CHECK that the shard has part.shard() elements.
//
// solution: lib/parallel/data_parallel.cpp
// grader: test_mpi 2 --gtest_filter=*Zero1*
// if it fails: the replicas differ after a step: the gather overwrites every parameter, in order.
// if it fails: the last parameter is wrong: pad total up to ⌈total/dp⌉·dp, never down.
#include "core/exercise.h"
#include "parallel/data_parallel.h"

namespace tp {

ZeroPartition::ZeroPartition(const ParamList& params, int dp_size, int dp_rank) {
  TP_EXERCISE_TODO("exercises/10_zero1_shard_and_gather.cpp");
}

void all_gather_parameters(Communicator& dp, Device& device, ParamList& params,
                           const Tensor& value_shard) {
  TP_EXERCISE_TODO("exercises/10_zero1_shard_and_gather.cpp");
}

}  // namespace tp
