#include "parallel/context_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace tp {

const char* cp_layout_name(CpLayout layout) {
  return layout == CpLayout::Zigzag ? "zigzag" : "contiguous";
}

bool parse_cp_layout(const std::string& name, CpLayout& out) {
  if (name == "zigzag") {
    out = CpLayout::Zigzag;
  } else if (name == "contiguous") {
    out = CpLayout::Contiguous;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string> cp_problems(int64_t seq, int cp, CpLayout layout) {
  std::vector<std::string> p;
  if (cp < 1) {
    p.push_back("--cp " + std::to_string(cp) + " must be at least 1");
    return p;
  }
  if (cp == 1) return p;
  const int64_t parts = layout == CpLayout::Zigzag ? 2 * cp : cp;
  if (seq % parts != 0)
    p.push_back("--cp " + std::to_string(cp) + " with --cp-layout " + cp_layout_name(layout) +
                " cuts the sequence into " + std::to_string(parts) + " chunks, and --seq " +
                std::to_string(seq) + " is not divisible by " + std::to_string(parts) +
                ": use a --seq that is" +
                (layout == CpLayout::Zigzag ? " (or --cp-layout contiguous: cp chunks)" : ""));
  return p;
}

std::vector<CpChunk> cp_chunks(int64_t seq, int cp, int rank, CpLayout layout) {
  TP_CHECK(cp >= 1 && rank >= 0 && rank < cp, "cp_chunks: rank ", rank, " of cp ", cp);
  TP_CHECK(cp_problems(seq, cp, layout).empty(), "cp_chunks: --seq ", seq,
           " does not split over cp ", cp, " (", cp_layout_name(layout), ")");
  if (cp == 1) return {CpChunk{0, 0, seq}};
  if (layout == CpLayout::Contiguous) {
    const int64_t n = seq / cp;
    return {CpChunk{0, rank * n, n}};
  }
  const int64_t c = seq / (2 * cp);
  return {CpChunk{0, rank * c, c}, CpChunk{c, (2 * cp - 1 - rank) * c, c}};
}

std::vector<int64_t> cp_positions(int64_t seq, int cp, int rank, CpLayout layout) {
  std::vector<int64_t> pos;
  for (const CpChunk& ch : cp_chunks(seq, cp, rank, layout))
    for (int64_t i = 0; i < ch.len; ++i) pos.push_back(ch.global_begin + i);
  return pos;
}

std::vector<RowRun> cp_row_runs(int64_t seq, int64_t batch, int cp, int rank, CpLayout layout,
                                int64_t first_row, int64_t rows) {
  if (cp == 1) return {RowRun{0, first_row, rows}};
  std::vector<RowRun> runs;
  for (const CpChunk& ch : cp_chunks(seq, cp, rank, layout)) {
    // The chunk's local rows [begin, end), cut to the tensor's [first_row, first_row + rows).
    const int64_t begin = std::max(ch.local_begin * batch, first_row);
    const int64_t end = std::min((ch.local_begin + ch.len) * batch, first_row + rows);
    if (begin >= end) continue;
    runs.push_back(RowRun{begin - first_row,
                          ch.global_begin * batch + (begin - ch.local_begin * batch), end - begin});
  }
  return runs;
}

ChunkPair classify_pair(const CpChunk& q, const CpChunk& k) {
  if (k.global_begin > q.global_begin + q.len - 1) return ChunkPair::Skipped;
  if (k.global_begin + k.len - 1 <= q.global_begin) return ChunkPair::Full;
  TP_CHECK(k.global_begin == q.global_begin && k.len == q.len, "classify_pair: chunks at ",
           q.global_begin, " and ", k.global_begin,
           " overlap without being the same (chunks of one layout are aligned)");
  return ChunkPair::Diagonal;
}

std::vector<double> ring_work(int64_t seq, int cp, CpLayout layout) {
  std::vector<double> work(static_cast<size_t>(cp), 0.0);
  const double tile = static_cast<double>(seq) / (2 * cp);  // c
  for (int r = 0; r < cp; ++r)
    for (const CpChunk& q : cp_chunks(seq, cp, r, layout))
      for (int s = 0; s < cp; ++s)
        for (const CpChunk& k : cp_chunks(seq, cp, s, layout)) {
          const ChunkPair kind = classify_pair(q, k);
          if (kind == ChunkPair::Skipped) continue;
          const double block = static_cast<double>(q.len) * k.len / (tile * tile);
          work[r] += kind == ChunkPair::Full ? block : block / 2;
        }
  return work;
}

}  // namespace tp
