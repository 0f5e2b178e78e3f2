// checkpoint_meta.h — a checkpoint's metadata checked against its own tensors, before anything is
// sized from it.
//
// A checkpoint of this project (model/checkpoint.h) records its configuration as metadata strings
// (layers, hidden, heads, kv_heads, ffn, vocab, seq, act, norm, tied) beside global tensors whose
// shapes say most of it again. The metadata is believed only where it agrees with the tensors,
// because a model and its optimizer are allocated from it: "layers": "1000000" in a file of two
// blocks would allocate a million blocks. What the tensors determine (T = "transformer."):
//
//   vocab, hidden    T.wte.weight (V, h)                 seq   T.wpe.weight (S, h)
//   layers           the blocks T.h.0 .. T.h.(L-1)       ffn   T.h.0.mlp.c_fc.weight (h, ffn)
//   act              swiglu exactly when T.h.0.mlp.c_gate.weight is there
//   norm             rmsnorm exactly when T.h.0.ln_1.bias is not
//   tied             false needs lm_head.weight
//   heads, kv_heads  T.h.0.attn.c_attn.weight (h, h + 2·kv_heads·h/heads): the shapes give only the
//                    ratio kv_heads/heads (and that heads divides h). For plain multi-head
//                    attention any divisor of h fits, so the heads a file was trained with is not
//                    in its shapes; it is bound by "config_crc32c", a CRC-32C of the configuration
//                    strings written with them: an edited heads (or any other value) no longer
//                    matches, and the message names the heads that does.
//
// Every problem is a bad-input error naming the file, the metadata key and its value, and the
// tensor that contradicts it. The optimizer's step count ("adam_steps") is checked against the
// moments the file holds (model/checkpoint.cpp reads them).
#pragma once

#include <cstdint>
#include <string>

#include "io/safetensors.h"
#include "model/config.h"

namespace tp {

/// The configuration a checkpoint written by save_checkpoint records, every value checked against
/// the tensors and config_crc32c (see above) before it is returned; a missing key is an error.
/// Training-only settings (dropout, sp, overlap) keep their defaults.
GptConfig checked_checkpoint_config(const safetensors::File& f);

/// The same checks for the configuration keys `f` has (a file may have none: tensors only).
void check_checkpoint_metadata(const safetensors::File& f);

/// The metadata a checkpoint of `c` records: name=value pairs in a fixed order, and the checksum
/// over them (config_crc32c).
std::string config_checksum(const GptConfig& c);

/// AdamW's step count of a checkpoint that holds moments (`step`: its training steps): metadata
/// adam_steps, which must be there, a count, and at most `step` (a skipped or weights-only step
/// does not step AdamW; nothing steps it more than once). A bad-input error names the file, the
/// key and the value: without it AdamW's bias correction would silently restart at step 1.
int64_t checked_adam_steps(const safetensors::File& f, int64_t step);

/// Metadata `key` as a count (digits only, no sign, fits int64); a bad-input error names the
/// file, the key and the value when it is missing or not a count, or below `at_least`.
int64_t metadata_count(const safetensors::File& f, const std::string& key, int64_t at_least);

}  // namespace tp
