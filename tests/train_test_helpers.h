// train_test_helpers.h — tp_train's flags for the tests of lib/train/.
#pragma once

#include <string>
#include <vector>

#include "core/options.h"
#include "train/train_options.h"

namespace tp::testing {

/// tp_train's options (and the launcher's --backend, which the host-memory check reads), parsed
/// from `args` (without the program name).
inline Options train_options(std::vector<const char*> args) {
  Options o("tp_train", "test");
  declare_train_options(o);
  o.text("backend", "cpu", "device backend", {"cpu", "gpu"});
  args.insert(args.begin(), "tp_train");
  o.parse(static_cast<int>(args.size()), args.data());
  return o;
}

}  // namespace tp::testing
