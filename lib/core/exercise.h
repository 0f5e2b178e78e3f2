// exercise.h — what turns one library function into an exercise (exercises/README.md).
//
// The library is the reference solution: each function an exercise asks for keeps its body in
// lib/, inside `#if TP_EXERCISE != N` (N, the exercise's number). A normal build has TP_EXERCISE
// 0 and compiles every body. `make exercise N=03` compiles that one library file again with
// -DTP_EXERCISE=3, so the body is left out, and links the learner's exercises/03_*.cpp in its
// place, ahead of libtp.a (whose own copy of the file is then never pulled in).
//
// An exercise not written yet calls TP_EXERCISE_TODO, which throws the same bad-input error on
// every rank: rank 0 prints one line, every rank exits 2, and no rank is left in a collective.
#pragma once

#include <string>

#include "core/error.h"

// Not given: the library's own build, every body compiled.
#ifndef TP_EXERCISE
#define TP_EXERCISE 0
#endif

namespace tp {

/// Throws the bad-input error "exercise 03 is not written yet: exercises/03_….cpp" (exit code 2,
/// printed once by rank 0). `file` is the exercise's path; its first two digits are its number.
[[noreturn]] inline void exercise_not_written(const std::string& file) {
  const size_t slash = file.rfind('/');
  const std::string name = slash == std::string::npos ? file : file.substr(slash + 1);
  throw Error(detail::str_cat("exercise ", name.substr(0, 2), " is not written yet: ", file), 2);
}

}  // namespace tp

/// The body of an exercise not written yet: TP_EXERCISE_TODO("exercises/03_row_parallel_forward.cpp").
#define TP_EXERCISE_TODO(file) ::tp::exercise_not_written(file)
