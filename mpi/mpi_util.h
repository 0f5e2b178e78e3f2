// mpi_util.h — small MPI helpers shared by the MPI communicator and the NCCL communicator
// (gpu_backend/, which bootstraps over MPI).
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace tp::mpi {

inline int rank_of(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

inline int size_of(MPI_Comm c) {
  int s = 1;
  MPI_Comm_size(c, &s);
  return s;
}

/// MPI's own message for the error code `rc`.
inline std::string error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

/// Throws tp::Error naming `call` and MPI's own message when rc is not MPI_SUCCESS.
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  TP_CHECK(false, call, " failed: ", error_string(rc));
}

}  // namespace tp::mpi
