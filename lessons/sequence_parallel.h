// sequence_parallel.h — what lessons 08b and 08c share: the two models they compare (one GPT
// configuration with sequence parallelism off and on, TP's layers alike) and the short names of
// what layer 0 keeps or learns, for their tables and pictures.
#pragma once

#include <string>

#include "model/gpt.h"

namespace tp::lesson {

/// One configuration under plain TP (`tp`) and under TP + SP (`sp`): the same model otherwise.
struct SpPair {
  GptConfig tp, sp;
};

/// `c` with GptConfig::sp off and on.
SpPair sp_pair(const GptConfig& c);

/// "attn.q" from "transformer.h.0.attn.q" (or from "h.0.attn.q"), "wte.weight" from
/// "transformer.wte.weight": the name inside layer 0 or the model.
std::string layer0_name(std::string name);

}  // namespace tp::lesson
