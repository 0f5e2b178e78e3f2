#include "test_util.h"

#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "cpu_device.h"

namespace tp::testing {

Device& device() {
  static CpuDevice dev;
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
