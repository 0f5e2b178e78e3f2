// layers.h — the parts of a transformer block under tensor parallelism, one file per concept:
//
//   model/norm.h        Norm: LayerNorm / RMSNorm, replicated (SP: on this rank's tokens)
//   model/dropout.h     Dropout: a counter-based mask keyed by global positions
//   model/mlp.h         ParallelMLP: column-parallel up (and gate) → activation → row-parallel down
//   model/attention.h   ParallelAttention (split by heads) and LayerKvCache
//
// The block is model/block.h, the whole model model/gpt.h. Each part has forward (saving what
// backward needs) beside backward (returning dX, accumulating parameter gradients with +=).
#pragma once

#include "model/attention.h"
#include "model/dropout.h"
#include "model/mlp.h"
#include "model/norm.h"
