// context_parallel.h — which tokens of every sequence a context-parallel (CP) rank holds.
//
// Context parallelism splits the sequence over the cp ranks of a CP group everywhere, attention
// included (ring attention: parallel/ring_attention.h). A rank holds S/cp positions of every
// sequence of the batch, in one of two layouts:
//
//   contiguous   rank r holds positions [r·S/cp, (r + 1)·S/cp): one chunk.
//   zigzag       the sequence is cut into 2·cp chunks of c = S/(2·cp); rank r holds chunks r and
//                2·cp − 1 − r (one early, one late), in that order.
//
// Under the causal mask a query attends only to keys at or before it, so with contiguous chunks
// the last rank's queries see every key and the first rank's see only their own: rank r computes
// r whole (S/cp)² products and one half (the diagonal's triangle), r + ½. Zigzag pairs an early
// chunk with a late one: chunk r sees r earlier chunks and its own triangle, chunk 2·cp − 1 − r
// sees 2·cp − 1 − r and its triangle, 2·cp tiles of c² on every rank (the same total: contiguous
// rank r's r + ½ blocks of (2c)² are 4r + 2 tiles).
//
// Local rows are sequence-major like every activation (row s·B + b is local position s of
// sequence b), so a chunk of a rank is a contiguous block of rows: chunk i of the local tensor is
// rows [local_begin·B, (local_begin + len)·B).
//
// Shape legend: S = sequence (global), B = batch, cp = CP size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tp {

enum class CpLayout { Zigzag, Contiguous };

/// "zigzag" or "contiguous".
const char* cp_layout_name(CpLayout layout);
/// The layout named `name`; false when there is none of that name.
bool parse_cp_layout(const std::string& name, CpLayout& out);

/// One chunk of consecutive positions a CP rank holds.
struct CpChunk {
  int64_t local_begin = 0;   ///< first local position (rows local_begin·B …)
  int64_t global_begin = 0;  ///< its position in the whole sequence
  int64_t len = 0;           ///< positions
};

/// Every problem with this split (empty when fine): cp ≥ 1, S divisible by 2·cp (zigzag) or cp
/// (contiguous). Each a line naming the fix.
std::vector<std::string> cp_problems(int64_t seq, int cp, CpLayout layout);

/// The chunks of CP rank `rank` of `cp` for a sequence of `seq` positions, in local order.
std::vector<CpChunk> cp_chunks(int64_t seq, int cp, int rank, CpLayout layout);

/// The global position of every local position of `rank` (S/cp of them, in local order).
std::vector<int64_t> cp_positions(int64_t seq, int cp, int rank, CpLayout layout);

/// A run of local token rows whose global rows are consecutive too: local rows
/// [local_row, local_row + rows) are global rows [global_row, global_row + rows) of the whole
/// (S·B, ·) activations. Position tables and dropout masks are keyed by global rows, so they are
/// applied run by run.
struct RowRun {
  int64_t local_row = 0, global_row = 0, rows = 0;
};

/// The runs of local rows [first_row, first_row + rows) of `rank` (the rows one tensor holds: all
/// S/cp · B of them, or a sequence-parallel shard of them), relative to first_row. cp = 1 gives one
/// run (first_row itself is then the global row: sequence parallelism's offset).
std::vector<RowRun> cp_row_runs(int64_t seq, int64_t batch, int cp, int rank, CpLayout layout,
                                int64_t first_row, int64_t rows);

/// How a (query chunk, key chunk) pair meets the causal mask.
enum class ChunkPair { Full, Diagonal, Skipped };

/// Full: every key is at or before every query; Diagonal: the same positions (the causal
/// triangle); Skipped: every key after every query. Chunks of one layout are aligned and of one
/// length, so no pair is partly masked otherwise.
ChunkPair classify_pair(const CpChunk& q, const CpChunk& k);

/// The score tiles each CP rank computes in one ring forward, in units of one c × c tile
/// (c = S/(2·cp)), a diagonal's triangle counted as ½ of its block: contiguous rank r 4r + 2,
/// zigzag 2·cp on every rank.
std::vector<double> ring_work(int64_t seq, int cp, CpLayout layout);

}  // namespace tp
