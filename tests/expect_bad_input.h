// expect_bad_input.h — the check the tests make of a refusal: bad input (exit code 2, the same
// on every rank), its message naming what is wrong.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace tp::testing {

/// Runs `run` expecting a bad-input tp::Error whose message contains `needle`. `what` says in a
/// failure what should have been refused ("dp = np + 1"). Anything else `run` throws propagates.
template <typename Run>
void expect_bad_input(Run&& run, const std::string& needle, const std::string& what) {
  try {
    run();
    ADD_FAILURE() << what << " was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(e.is_bad_input()) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << what << ": \"" << e.what() << "\" does not say \"" << needle << "\"";
  }
}

}  // namespace tp::testing
