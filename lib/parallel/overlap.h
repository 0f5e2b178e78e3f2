// overlap.h — the name of each way the TP layers overlap their collectives with compute
// (GptConfig::overlap, tp_train --overlap). What each one does: parallel/collective_matmul.h.
#pragma once

#include <string>

namespace tp {

/// How the TP layers overlap their collectives with compute (parallel/collective_matmul.h).
enum class Overlap { None, Async, Ring };

/// "none", "async" or "ring" → Overlap; anything else is a bad-input error naming the choices.
Overlap parse_overlap(const std::string& name);
/// The name parse_overlap takes.
const char* overlap_name(Overlap overlap);

}  // namespace tp
