// log.h — rank-0 logging: every rank calls it, only rank 0 of the communicator prints.
#pragma once

#include <cstdio>
#include <string>

#include "core/communicator.h"
#include "core/error.h"

namespace tp {

/// Prints the concatenated arguments and a newline on rank 0 of `comm` (stdout, flushed).
template <typename... Args>
void log0(const Communicator& comm, Args&&... args) {
  if (comm.rank() != 0) return;
  const std::string line = detail::str_cat(std::forward<Args>(args)...);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace tp
