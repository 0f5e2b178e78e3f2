// attention.h — the instruction sets the CPU attention kernel (kernels/attention.cpp) is built
// for, and a switch between them, so that a test runs each variant on one machine.
#pragma once

#include <string>
#include <vector>

namespace tp::cpu {

/// The variants this CPU can run, the one used by default first: a subset of
/// {"avx512", "avx2", "base"} ("avx2" needs AVX2 and FMA; "base" is the build's baseline).
std::vector<std::string> attention_isas();

/// The variant the attention kernels run from now on (one of attention_isas(), else tp::Error).
/// Not for use while an attention kernel runs on another thread.
void set_attention_isa(const std::string& isa);

}  // namespace tp::cpu
