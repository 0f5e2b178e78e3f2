#include "sequence_parallel.h"

namespace tp::lesson {

SpPair sp_pair(const GptConfig& c) {
  SpPair p{c, c};
  p.tp.sp = false;
  p.sp.sp = true;
  return p;
}

std::string layer0_name(std::string name) {
  for (const std::string prefix : {"transformer.", "h.0."})
    if (name.compare(0, prefix.size(), prefix) == 0) name = name.substr(prefix.size());
  return name;
}

}  // namespace tp::lesson
