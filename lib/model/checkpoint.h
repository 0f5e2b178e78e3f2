// checkpoint.h — save and load a Gpt (and its AdamW state) as a safetensors file of *global*
// tensors under Hugging Face GPT-2 names and layouts, so a run saved at t = 2 resumes at t = 1, 3
// or 4.
//
// Tensors (weights stored (in, out), as GPT-2's Conv1D):
//   transformer.wte.weight (V, h)            transformer.wpe.weight (S, h)
//   transformer.h.N.ln_1.weight / .bias (h)  (RMSNorm: no .bias)
//   transformer.h.N.attn.c_attn.weight (h, (nh + 2 nkv)·hd) = [q | k | v], .bias likewise
//   transformer.h.N.attn.c_proj.weight (h, h), .bias (h)
//   transformer.h.N.ln_2.weight / .bias (h)
//   transformer.h.N.mlp.c_fc.weight (h, ffn), .bias (ffn)        (the "up" projection)
//   transformer.h.N.mlp.c_gate.weight (h, ffn), .bias (ffn)      (SwiGLU only; not in GPT-2)
//   transformer.h.N.mlp.c_proj.weight (ffn, h), .bias (h)
//   transformer.ln_f.weight / .bias (h)
//   lm_head.weight (V, h)                                        (untied head only)
//   optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>        (AdamW moments, same shapes)
// Metadata: format, step (training steps done), adam_steps, the model configuration and
// config_crc32c (its checksum; model/checkpoint_meta.h), crc32c.<tensor> (each tensor's checksum),
// and who wrote it (CheckpointOrigin): run_id, tokens. Files written before run_id existed have
// none; model/checkpoint_series.h treats them as another run's.
//
// Saving gathers every shard (an all-gather per split tensor) and rank 0 writes the file atomically
// (temporary file, then rename). Loading: every rank reads the file, checks it against the
// configuration (every mismatch is a bad-input error naming the tensor and both shapes) and keeps
// its own shard.
//
// Shape legend: V = vocabulary, S = sequence, h = hidden, nh / nkv = query / key-value heads,
// hd = h / nh, ffn = MLP inner size; the tensors are global (every t).
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "io/durable_write.h"
#include "io/safetensors.h"
#include "model/adamw.h"
#include "model/gpt.h"

namespace tp {

/// The "format" metadata of this project's checkpoints.
inline constexpr const char* kCheckpointFormat = "tp-from-scratch-gpt/1";

/// A run's claim on its --save path, held from the start of the run to its end (collective over
/// `comm`): rank 0 takes a durable::SaveLock on it, and when another process holds it (a second
/// run saving to the same file) every rank throws the same bad-input error at once; rank 0's names
/// the other process. The claim also covers the saves the run makes itself.
class CheckpointClaim {
 public:
  CheckpointClaim(const std::string& path, Communicator& comm, Device& device);

 private:
  std::unique_ptr<durable::SaveLock> lock_;
};

/// Who wrote a checkpoint, in its metadata (an empty value is not written):
///   run_id  the run: new for a fresh run, inherited from the checkpoint a run resumes; tp_train
///           deletes only files of its own run (model/checkpoint_series.h)
///   tokens  what the ids were: "bytes" (--data), "gpt2-bpe" (--data --tokenizer), "markov"
struct CheckpointOrigin {
  std::string run_id, tokens;
};

/// The origin recorded in `f`'s metadata; empty values where it records none (a file of an
/// older version) or one that is not of the kind written here (up to 64 of [0-9A-Za-z._-]: a
/// value from an edited file is never printed or matched).
CheckpointOrigin checkpoint_origin(const safetensors::File& f);
/// The same for the file `path`; empty values when its header cannot be read.
CheckpointOrigin checkpoint_origin(const std::string& path);

/// Writes `path` (collective: every rank must call it). `step` = training steps done. A failed
/// write throws on the writing rank only, after it joined the barrier the others wait in: the
/// caller agrees on the outcome (core/agreement.h).
void save_checkpoint(const std::string& path, Communicator& comm, const Gpt& model,
                     const AdamW& opt, int64_t step, const CheckpointOrigin& origin = {});

/// The same for one stage of a pipeline (`pp` its PP group): every stage's tensors go to the first
/// stage, whose TP rank 0 writes the one global file; collective over `tp` and, on the TP rank 0s,
/// over `pp`. Under expert parallelism (`ep` of more than one rank) the EP group's experts go
/// to its rank 0 first, likewise, so the file holds every expert whole, whatever ep. Loading needs
/// nothing of the kind: each rank reads its own tensors (its stage's, its experts).
void save_checkpoint(const std::string& path, Communicator& tp, Communicator& pp, const Gpt& model,
                     const AdamW& opt, int64_t step, const CheckpointOrigin& origin = {},
                     Communicator* ep = nullptr);

/// What load_checkpoint found.
struct LoadedCheckpoint {
  int64_t step = 0;              ///< training steps done when it was saved (0 without metadata)
  bool optimizer_state = false;  ///< AdamW moments were present and loaded
  bool checksums = false;        ///< every tensor was verified against its checksum
};

/// The one-line note a tool prints when a file has no checksums (LoadedCheckpoint::checksums,
/// ModelFile::checksums false): "note: F carries no checksums (...): its tensors are read
/// unverified".
std::string unverified_note(const std::string& path);

/// The size of the file save_checkpoint writes for `model`, in bytes (its tensors exactly, the
/// header generously).
int64_t checkpoint_bytes(const Gpt& model);

/// Checks, before training, that `path` (--save; "" = nothing to check) can take `files`
/// checkpoints of `model` (--save-every's --keep + 1: a save writes the new file before it prunes
/// the oldest): durable::check_save_target with files × checkpoint_bytes (statvfs of its
/// folder), so the folder exists and can be written. Collective over `comm`: rank 0 looks, and
/// every rank throws the same bad-input error, "--save: ..." naming the path, size and free space.
void check_save_space(const std::string& path, Communicator& comm, Device& device, const Gpt& model,
                      int64_t files = 1);

/// Loads `path` into `model` (and `opt`, when the file holds optimizer state). The file is first
/// checked against itself (model/checkpoint_meta.h: the metadata against the tensors, adam_steps
/// against the moments), then against the model (shapes, recorded configuration); every value
/// must be finite, exp_avg_sq non-negative, and every tensor must match its checksum (when the
/// file has them). Each problem is a bad-input error naming the file and the tensor or key.
LoadedCheckpoint load_checkpoint(const std::string& path, Communicator& comm, Gpt& model,
                                 AdamW& opt);

/// One tensor as a file stores it: global, row-major, without vocabulary padding rows.
struct StoredTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// Every weight of `model` under its stored name (the names above, q | k | v packed into c_attn),
/// gathered from the shards (collective: an all-gather per split parameter; every rank gets all).
std::map<std::string, StoredTensor> gather_stored_weights(Communicator& comm, const Gpt& model);

/// Loads only the weights of `file` into `model`: stored tensor `n` is read from the file's tensor
/// `file_name(n)`, as F32, F16 or BF16 (converted to F32), and must have the stored shape; each
/// rank keeps its shard. Optimizer state and metadata are not looked at. A missing tensor or a
/// wrong shape is a bad-input error naming the file's tensor (and both shapes).
void load_stored_weights(const safetensors::File& file,
                         const std::function<std::string(const std::string&)>& file_name,
                         Communicator& comm, Gpt& model);

/// The model configuration recorded in the metadata of a checkpoint written by save_checkpoint
/// (layers, hidden, heads, kv_heads, ffn, vocab, seq, act, norm, tied), each value checked against
/// the tensors before it is returned (checked_checkpoint_config); training-only settings
/// (dropout, sp, overlap) keep their defaults. A bad-input error names the file and the entry.
GptConfig config_from_checkpoint(const std::string& path);

/// Writes every global gradient (names prefixed "grad."), the batch ("batch.input_ids",
/// "batch.labels": int32 (B, S)) and the loss ("loss": f32 (1)) to `path` (collective). A failed
/// write throws on the writing rank only, after the barriers: the caller agrees on the outcome.
void dump_gradients(const std::string& path, Communicator& comm, const Gpt& model,
                    const Batch& batch, float loss);

/// The same for one stage of a pipeline (`pp` its PP group): every stage's gradients go to the
/// first stage, whose TP rank 0 writes the one file (the tied wte's gradient, summed between the
/// first and last stage and the same on both, once). Collective over `tp` and, on the TP rank 0s,
/// over `pp`; with pp.size() = 1 it is the call above.
void dump_gradients(const std::string& path, Communicator& tp, Communicator& pp, const Gpt& model,
                    const Batch& batch, float loss);

}  // namespace tp
