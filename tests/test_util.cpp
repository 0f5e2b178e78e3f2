#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "cpu_device.h"
#include "model/gpt.h"

namespace tp::testing {

Device& device() {
  static CpuDevice dev;
  return dev;
}

std::string empty_test_folder(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / (prefix + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string() + "/";
}

std::unique_ptr<CpuDevice> cpu_device_with_env(const char* name, const char* value) {
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  auto restore = [&] { old ? setenv(name, saved.c_str(), 1) : unsetenv(name); };
  value ? setenv(name, value, 1) : unsetenv(name);
  std::unique_ptr<CpuDevice> dev;
  try {
    dev = std::make_unique<CpuDevice>();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return dev;
}

std::vector<float> random_vector(const std::string& name, int64_t n, uint64_t seed) {
  const RngKey key = RngKey::from(seed, name);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = random_value(key, i, Distribution::uniform(-1.0f, 1.0f));
  return v;
}

std::vector<float> iota_vector(int64_t n, float start, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

namespace {
// The message of the tp::Error `call` throws, or "" (then a failure is added).
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}
}  // namespace

void check_all_to_all_v(Communicator& c, Device& dev, unsigned seed) {
  const int t = c.size(), r = c.rank();
  constexpr int64_t kCols = 3, kMaxRows = 4;
  // counts[s][d]: rows rank s sends rank d, the same matrix on every rank.
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> rows_of(0, kMaxRows);
  std::vector<std::vector<int64_t>> counts(t, std::vector<int64_t>(t));
  for (auto& row : counts)
    for (auto& n : row) n = rows_of(gen);
  counts[0][0] = 0;                                       // an empty self-block
  if (t > 1) counts[t - 1] = std::vector<int64_t>(t, 0);  // a rank that sends nothing
  if (t > 2) counts[1][2] = counts[2][1] = 0;             // a pair with nothing either way
  // Row k of the block s → d, column j: a distinct small integer (exact in bf16).
  auto id = [&](int s, int d, int64_t k, int64_t j) {
    return static_cast<float>(((s * t + d) * kMaxRows + k) * kCols + j);
  };
  std::vector<int64_t> recv_rows(t);
  std::vector<float> sent, expected;
  for (int d = 0; d < t; ++d)
    for (int64_t k = 0; k < counts[r][d]; ++k)
      for (int64_t j = 0; j < kCols; ++j) sent.push_back(id(r, d, k, j));
  for (int s = 0; s < t; ++s) {
    recv_rows[s] = counts[s][r];
    for (int64_t k = 0; k < counts[s][r]; ++k)
      for (int64_t j = 0; j < kCols; ++j) expected.push_back(id(s, r, k, j));
  }
  EXPECT_EQ(exchange_counts(c, dev, counts[r]), recv_rows) << c.name() << " exchange_counts";
  const int64_t rows_out = static_cast<int64_t>(sent.size()) / kCols;
  const int64_t rows_in = static_cast<int64_t>(expected.size()) / kCols;
  for (Dtype dtype : {Dtype::f32, Dtype::bf16}) {
    const Tensor send = Tensor::from_host(dev, Shape{rows_out, kCols}, sent, dtype);
    Tensor recv = Tensor::from_host(dev, Shape{rows_in, kCols},
                                    std::vector<float>(expected.size(), -1.0f), dtype);
    const size_t before = c.ledger().size();
    c.all_to_all_v(send, counts[r], recv, recv_rows);
    EXPECT_EQ(recv.to_host(), expected) << c.name() << " " << dtype_name(dtype);
    ASSERT_EQ(c.ledger().size(), before + 1);
    const CommRecord rec = c.ledger().records().back();
    EXPECT_EQ(rec.op, "all_to_all_v");
    EXPECT_EQ(rec.elements, rows_out * kCols);
    EXPECT_EQ(rec.bytes, rows_out * kCols * send.element_size());
    EXPECT_DOUBLE_EQ(rec.wire_bytes,
                     static_cast<double>((rows_out - counts[r][r]) * kCols * send.element_size()))
        << c.name() << " wire bytes leave out the self-block";
    // The same in flight: the counts may go out of scope before wait().
    Tensor later = Tensor::zeros(dev, Shape{rows_in, kCols}, dtype);
    std::unique_ptr<Work> work;
    {
      const std::vector<int64_t> send_rows = counts[r], expect_rows = recv_rows;
      work = c.all_to_all_v_async(send, send_rows, later, expect_rows);
    }
    work->wait();
    EXPECT_EQ(later.to_host(), expected) << c.name() << " async " << dtype_name(dtype);
    EXPECT_TRUE(c.ledger().records().back().async);
    EXPECT_EQ(c.ledger().records().back().wire_bytes, rec.wire_bytes);
  }
  // Bad calls, refused on every rank alike before anything moves.
  const std::vector<int64_t> none(t, 0);
  Tensor empty = Tensor::zeros(dev, Shape{0, kCols});
  Tensor two = Tensor::zeros(dev, Shape{2, kCols}), wide = Tensor::zeros(dev, Shape{0, kCols + 1});
  std::vector<int64_t> two_to_last = none;
  two_to_last[t - 1] = 2;
  auto expect_line = [&](const std::function<void()>& call, const std::string& part) {
    const std::string line = error_of(call);
    EXPECT_NE(line.find(part), std::string::npos) << c.name() << ": " << line;
  };
  expect_line([&] { c.all_to_all_v(empty, std::vector<int64_t>(t + 1, 0), empty, none); },
              "send_rows has " + std::to_string(t + 1) + " counts; give one per rank of the " +
                  "group of " + std::to_string(t));
  expect_line([&] { c.all_to_all_v(two, none, empty, none); },
              "send_rows adds up to 0 rows but send [2, 3] has 2");
  expect_line([&] { c.all_to_all_v(empty, none, empty, two_to_last); },
              "recv_rows adds up to 2 rows but recv [0, 3] has 0");
  std::vector<int64_t> negative = none;
  negative[0] = -1;
  expect_line([&] { c.all_to_all_v(empty, negative, empty, none); }, "a row count is 0 or more");
  expect_line([&] { c.all_to_all_v(empty, none, wide, none); }, "send has 3 cols and recv 4");
  Tensor flat = Tensor::zeros(dev, Shape{0});
  expect_line([&] { c.all_to_all_v(flat, none, flat, none); }, "must both be 2-D");
  Tensor half = Tensor::zeros(dev, Shape{0, kCols}, Dtype::bf16);
  expect_line([&] { c.all_to_all_v(empty, none, half, none); }, "a f32 and a bf16 buffer");
  // Nothing at all to move still completes.
  c.all_to_all_v(empty, none, empty, none);
}

void check_point_to_point(Communicator& c, Device& dev) {
  const int t = c.size(), r = c.rank();
  if (t == 1) return;
  const size_t ledger0 = c.ledger().size();
  // 1. A ring pass with blocking calls: rank 0 sends the token first, every other rank receives
  //    it from the left, adds rank + 1 to each element and sends it right; rank 0 gets it back.
  const Shape token_shape{2, 3};
  Tensor token = Tensor::from_host(dev, token_shape, iota_vector(6));
  if (r == 0) {
    c.send(token, 1);
    c.recv(token, t - 1);
  } else {
    c.recv(token, r - 1);
    EXPECT_EQ(token.to_host(), iota_vector(6, 1.0f * r * (r + 1) / 2 - 1.0f))
        << c.name() << " ring in";
    dev.axpy(1.0f, Tensor::from_host(dev, token_shape, std::vector<float>(6, r + 1.0f)), token);
    c.send(token, (r + 1) % t);
  }
  if (r == 0) {
    EXPECT_EQ(token.to_host(), iota_vector(6, 1.0f * t * (t + 1) / 2 - 1.0f))
        << c.name() << " ring pass";
  }
  // 2. A pairwise exchange (0 ↔ 1, 2 ↔ 3; an odd last rank sits out): the lower rank sends
  //    first, the higher receives first, so no rank waits on a peer that waits on it.
  const int peer = r % 2 == 0 ? r + 1 : r - 1;
  if (peer < t) {
    Tensor mine = Tensor::from_host(dev, Shape{3, 2, 2}, iota_vector(12, 100.0f * r));
    Tensor theirs = Tensor::zeros(dev, Shape{3, 2, 2});
    if (r < peer) {
      c.send(mine, peer);
      c.recv(theirs, peer);
    } else {
      c.recv(theirs, peer);
      c.send(mine, peer);
    }
    EXPECT_EQ(theirs.to_host(), iota_vector(12, 100.0f * peer)) << c.name() << " exchange";
  }
  // 3. Rank 0 has two sends to every peer in flight at once and computes meanwhile; each peer
  //    has its two receives in flight. Messages between two ranks arrive in the order sent.
  const int64_t n = 5;
  Tensor busy = Tensor::from_host(dev, Shape{n}, iota_vector(n));
  std::vector<Tensor> bufs;
  std::vector<std::unique_ptr<Work>> works;
  for (int k = 0; k < 2; ++k)
    for (int q = 1; q < t; ++q) {
      if (r == 0) {
        bufs.push_back(Tensor::from_host(dev, Shape{n}, iota_vector(n, 1000.0f * k + 10.0f * q)));
        works.push_back(c.send_async(bufs.back(), q));
      } else if (r == q) {
        bufs.push_back(Tensor::zeros(dev, Shape{n}));
        works.push_back(c.recv_async(bufs.back(), 0));
      }
    }
  dev.scale(busy, 2.0f);  // compute while the messages are in flight
  for (size_t i = works.size(); i-- > 0;) works[i]->wait();  // in reverse order
  for (const auto& w : works) EXPECT_TRUE(w->test());
  EXPECT_EQ(busy.to_host(), iota_vector(n, 0.0f, 2.0f));
  for (int k = 0; r != 0 && k < 2; ++k) {
    EXPECT_EQ(bufs[static_cast<size_t>(k)].to_host(), iota_vector(n, 1000.0f * k + 10.0f * r))
        << c.name() << " async message " << k;
  }
  // 4. The ledger: a send counts its bytes on the wire, a receive none.
  const auto& rec = c.ledger().records();
  const size_t calls = 2 + (peer < t ? 2 : 0) + (r == 0 ? 2 * (t - 1) : 2);
  ASSERT_EQ(rec.size() - ledger0, calls) << c.name();
  const CommRecord& first = rec[ledger0];  // rank 0's ring send, everyone else's ring receive
  EXPECT_EQ(first.op, r == 0 ? "send" : "recv");
  EXPECT_EQ(first.elements, 6);
  EXPECT_EQ(first.wire_bytes, r == 0 ? 24.0 : 0.0);
  EXPECT_TRUE(rec.back().async);
  // 5. A peer that is not another rank of the group: one clear error, on every rank alike, before
  //    anything moves.
  const size_t before = c.ledger().size();
  for (int bad : {r, t, -1}) {
    try {
      c.send(token, bad);
      ADD_FAILURE() << c.name() << ": send to " << bad << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(bad == r ? "is this rank" : "outside the group"), std::string::npos)
          << what;
    }
    EXPECT_THROW(c.recv_async(token, bad), Error);
  }
  EXPECT_EQ(c.ledger().size(), before);
  c.barrier();
}

}  // namespace tp::testing

namespace tp::testing {

double bf16_sum_bound(int terms, double sum_abs) {
  const double u = std::ldexp(1.0, -8), u32 = std::ldexp(1.0, -24);
  const double k = terms - 1;
  return (k * u / (1.0 - k * u) + k * u32) * sum_abs;
}

namespace {
// Rank q's bf16 partial sums: random in [-1, 1) scaled by 2^(i mod 5), rounded to bf16, so the
// terms have different exponents and the sums need more bits than bf16 keeps.
std::vector<float> bf16_partials(int q, int64_t n) {
  std::vector<float> v = random_vector("bf16 partial " + std::to_string(q), n, 77);
  for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(std::ldexp(v[i], static_cast<int>(i % 5)));
  return v;
}

// The same numbers on every rank, bit for bit: max and min over the group agree.
void expect_same_on_every_rank(Communicator& c, Device& dev, const std::vector<float>& v,
                               const char* what) {
  Tensor hi = Tensor::from_host(dev, Shape{static_cast<int64_t>(v.size())}, v), lo = hi.clone();
  dev.scale(lo, -1.0f);
  c.all_reduce(hi, ReduceOp::Max);
  c.all_reduce(lo, ReduceOp::Max);
  const std::vector<float> h = hi.to_host(), l = lo.to_host();
  for (size_t i = 0; i < v.size(); ++i)
    if (h[i] != -l[i]) {
      ADD_FAILURE() << what << ": ranks disagree at " << i << " (" << -l[i] << " .. " << h[i]
                    << ")";
      return;
    }
}
}  // namespace

void check_bf16_collectives(Communicator& c, Device& dev) {
  const int t = c.size(), r = c.rank();
  const int64_t n = 4096 * t;  // big enough for MPI's large-message algorithms too
  const std::vector<float> mine = bf16_partials(r, n);
  std::vector<double> exact(static_cast<size_t>(n), 0.0), sum_abs(static_cast<size_t>(n), 0.0);
  for (int q = 0; q < t; ++q) {
    const std::vector<float> p = bf16_partials(q, n);
    for (int64_t i = 0; i < n; ++i) {
      exact[i] += p[i];
      sum_abs[i] += std::fabs(p[i]);
    }
  }
  const size_t ledger0 = c.ledger().size();

  // 1. All-reduce: bf16 against the exact sum and against f32 (whose own error is ≤ (t − 1) 2^−24
  //    Σ|p|, so bf16 − f32 is within the bf16 bound plus that).
  Tensor x16 = Tensor::from_host(dev, Shape{n}, mine, Dtype::bf16);
  Tensor x32 = Tensor::from_host(dev, Shape{n}, mine);
  EXPECT_EQ(x16.to_host(), mine);  // the partials are bf16 values: no rounding on the way in
  c.all_reduce(x16);
  c.all_reduce(x32);
  const std::vector<float> s16 = x16.to_host(), s32 = x32.to_host();
  double worst = 0.0, worst_vs_f32 = 0.0;
  int64_t rounded = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double bound = bf16_sum_bound(t, sum_abs[i]);
    const double f32_bound = (t - 1) * std::ldexp(1.0, -24) * sum_abs[i];
    ASSERT_LE(std::fabs(s16[i] - exact[i]), bound) << "all_reduce element " << i << " at t=" << t;
    ASSERT_LE(std::fabs(s32[i] - exact[i]), f32_bound) << "f32 all_reduce element " << i;
    ASSERT_LE(std::fabs(s16[i] - static_cast<double>(s32[i])), bound + f32_bound) << i;
    if (sum_abs[i] > 0) {
      worst = std::max(worst, std::fabs(s16[i] - exact[i]) / bound);
      worst_vs_f32 = std::max(worst_vs_f32, std::fabs(s16[i] - exact[i]) / sum_abs[i]);
    }
    rounded += s16[i] != exact[i];
  }
  if (t > 1) {
    EXPECT_GT(rounded, 0) << "no bf16 sum was rounded: is the test data too easy?";
  }
  expect_same_on_every_rank(c, dev, s16, "bf16 all_reduce");
  if (r == 0)
    std::printf(
        "[ bf16     ] %s t=%d: all-reduce of %lld bf16 partial sums, max |err|/bound %.3f, "
        "max |err|/sum|p| %.2e, %lld of them rounded\n",
        c.name().c_str(), t, static_cast<long long>(n), worst, worst_vs_f32,
        static_cast<long long>(rounded));

  // 2. Reduce-scatter: this rank's block of the same sums, the same bound.
  const int64_t block = n / t;
  Tensor full16 = Tensor::from_host(dev, Shape{n}, mine, Dtype::bf16);
  Tensor shard16(dev, Shape{block}, Dtype::bf16);
  c.reduce_scatter(full16, shard16);
  const std::vector<float> rs = shard16.to_host();
  for (int64_t i = 0; i < block; ++i) {
    const int64_t g = r * block + i;
    ASSERT_LE(std::fabs(rs[i] - exact[g]), bf16_sum_bound(t, sum_abs[g]))
        << "reduce_scatter element " << g;
  }

  // 3. Moves without arithmetic keep the bits: all-gather, broadcast, send-recv, async too.
  Tensor part16 = Tensor::from_host(dev, Shape{block}, bf16_partials(r, block), Dtype::bf16);
  Tensor gathered(dev, Shape{block * t}, Dtype::bf16);
  c.all_gather_async(part16, gathered)->wait();
  const std::vector<float> got = gathered.to_host();
  for (int q = 0; q < t; ++q) {
    const std::vector<float> want = bf16_partials(q, block);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + q * block)) << "block " << q;
  }
  Tensor b16 = Tensor::from_host(dev, Shape{block}, bf16_partials(r, block), Dtype::bf16);
  c.broadcast(b16, t - 1);
  EXPECT_EQ(b16.to_host(), bf16_partials(t - 1, block));
  Tensor recv16(dev, Shape{block}, Dtype::bf16);
  c.send_recv(part16, (r + 1) % t, recv16, (r + t - 1) % t);
  EXPECT_EQ(recv16.to_host(), bf16_partials((r + t - 1) % t, block));

  // 4. The ledger: every bf16 record is 2 B per element, half of the same call in f32.
  const auto& rec = c.ledger().records();
  ASSERT_GE(rec.size(), ledger0 + 2);
  EXPECT_EQ(rec[ledger0].op, "all_reduce");
  EXPECT_EQ(rec[ledger0].bytes, 2 * n);      // bf16
  EXPECT_EQ(rec[ledger0 + 1].bytes, 4 * n);  // f32, the same elements
  EXPECT_DOUBLE_EQ(2 * rec[ledger0].wire_bytes, rec[ledger0 + 1].wire_bytes);
  for (size_t i = ledger0 + 2; i < rec.size(); ++i)
    if (rec[i].op != "all_reduce_max") {  // expect_same_on_every_rank's f32 checks
      EXPECT_EQ(rec[i].bytes, 2 * rec[i].elements) << rec[i].op;
    }
}

void check_bf16_kernel_answers(const Device& dev) {
  for (const Kernel k : kAllKernels) {
    EXPECT_TRUE(!dev.native_bf16(k) || dev.takes_bf16(k))
        << kernel_name(k) << ": native, not taken";
    EXPECT_TRUE(!Gpt::bf16_kernels().contains(k) || dev.takes_bf16(k))
        << dev.name() << " lacks " << kernel_name(k) << " in bf16";
  }
}

}  // namespace tp::testing
