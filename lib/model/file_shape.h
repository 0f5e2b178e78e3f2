// file_shape.h — the model the shape flags ask for, and its shape when a file gives it
// (--init-from F, --load F), merged with the shape flags of the command line.
//
// Shape letters as in core/device.h: h = hidden, nh = heads, nkv = KV heads, ffn = the MLP's inner
// width, V = vocabulary, S = positions (cfg.seq: the file's position table) and the length of a
// training sequence (`seq`, at most S).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "model/config.h"
#include "model/hf_gpt2.h"

namespace tp {

/// The model the flags ask for: --layers, --hidden, --heads, --kv-heads, --ffn, --vocab, --seq,
/// --act, --norm, --dropout, --untie, --sp, --overlap and --pad-vocab-multiple (tp_train's).
GptConfig config_from_flags(const Options& o);

/// How a shape flag given on the command line meets the file's shape.
enum class FileShape {
  FlagsMustAgree,  ///< --init-from, or a Hugging Face file: a flag that differs is a problem
  FlagsOverride,   ///< --load of a checkpoint: a flag given wins (load_checkpoint names the rest)
};

/// Sets cfg's shape (layers, hidden, heads, kv_heads, ffn, vocab, act, norm, tied, eps, seq) from
/// `f`, flag by flag under `rule` (flags from `o`, whose values cfg holds already), and `seq`,
/// the length of a training sequence: --seq when given (a problem when it is longer than the
/// file's S), else the file's S for a checkpoint, min(seq, S) for a Hugging Face file. The model
/// keeps the file's whole position table (cfg.seq = S). Each problem is one line appended to
/// `problems`, naming the flag, the file and the fix ("drop --heads").
void shape_from_file(const ModelFile& f, const Options& o, FileShape rule, GptConfig& cfg,
                     int64_t& seq, std::vector<std::string>& problems);

}  // namespace tp
