#include "core/agreement.h"

#include <exception>
#include <vector>

namespace tp {

std::string agree_on_problem(Communicator& comm, Device& device, const std::string& mine) {
  CommLedger::Scope scope(comm.ledger(), "agree on problem");
  const int n = comm.size();
  // The lowest rank with a problem holds the largest n - rank (exact in f32: n < 2^24).
  Tensor who = Tensor::from_host(device, Shape{1},
                                 {mine.empty() ? 0.0f : static_cast<float>(n - comm.rank())});
  comm.all_reduce(who, ReduceOp::Max);
  const int top = static_cast<int>(who.to_host()[0]);
  if (top == 0) return "";
  const int root = n - top;
  // Its text, byte by byte (0..255 are exact in f32): first the length, so every rank's buffer of
  // the second broadcast has the same size.
  Tensor length = Tensor::from_host(device, Shape{1},
                                    {comm.rank() == root ? static_cast<float>(mine.size()) : 0.0f});
  comm.broadcast(length, root);
  const auto size = static_cast<int64_t>(length.to_host()[0]);
  std::vector<float> bytes(static_cast<size_t>(size), 0.0f);
  if (comm.rank() == root)
    for (size_t i = 0; i < mine.size(); ++i)
      bytes[i] = static_cast<float>(static_cast<unsigned char>(mine[i]));
  Tensor text = Tensor::from_host(device, Shape{size}, bytes);
  comm.broadcast(text, root);
  std::string out;
  for (float b : text.to_host()) out.push_back(static_cast<char>(static_cast<unsigned char>(b)));
  return out;
}

std::string agree_on_outcome(Communicator& comm, Device& device, bool take_part,
                             const std::function<void()>& action) {
  std::string problem;
  if (take_part) {
    try {
      action();
    } catch (const std::exception& e) {
      problem = e.what();
      if (problem.empty()) problem = "failed without a message";
    }
  }
  return agree_on_problem(comm, device, problem);
}

}  // namespace tp
