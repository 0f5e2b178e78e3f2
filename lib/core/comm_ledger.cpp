#include "core/comm_ledger.h"

#include "core/error.h"

namespace tp {

double ring_wire_bytes(const std::string& op, int t, int64_t bytes) {
  if (t <= 1) return 0.0;
  const double n = static_cast<double>(bytes);
  const double share = static_cast<double>(t - 1) / t;
  if (op == "all_reduce" || op == "all_reduce_max") return 2.0 * share * n;
  if (op == "all_gather" || op == "reduce_scatter") return share * n;
  if (op == "all_to_all_v") return share * n;  // an even split; the call sets the exact bytes
  if (op == "broadcast" || op == "send_recv" || op == "send") return n;
  if (op == "recv") return 0.0;  // the sender counts the message
  TP_CHECK(false, "ring_wire_bytes: unknown op '", op, "'");
  return 0.0;
}

size_t CommLedger::record(const std::string& op, int group_size, int64_t elements, bool async,
                          int64_t element_size) {
  CommRecord r;
  r.op = op;
  r.group_size = group_size;
  r.elements = elements;
  r.bytes = elements * element_size;
  r.wire_bytes = ring_wire_bytes(op, group_size, r.bytes);
  r.async = async;
  for (size_t i = 0; i < labels_.size(); ++i) r.label += (i ? "/" : "") + labels_[i];
  records_.push_back(std::move(r));
  return records_.size() - 1;
}

double CommLedger::wire_bytes_since(size_t from) const {
  double sum = 0.0;
  for (size_t i = from; i < records_.size(); ++i) sum += records_[i].wire_bytes;
  return sum;
}

double CommLedger::seconds_since(size_t from) const {
  double sum = 0.0;
  for (size_t i = from; i < records_.size(); ++i) sum += records_[i].seconds;
  return sum;
}

CommLedger::Scope::Scope(CommLedger& ledger, const std::string& label) : ledger_(ledger) {
  ledger_.labels_.push_back(label);
}

CommLedger::Scope::~Scope() { ledger_.labels_.pop_back(); }

}  // namespace tp
