// ring_timing.cpp — a ring attention forward's steps from the timeline (ring_timing.h).
#include "ring_timing.h"

#include <algorithm>
#include <cmath>

#include "observe/simulated_link.h"
#include "observe/timeline.h"
#include "observe/timer.h"

namespace tp::lesson {

RingStepTimes time_ring(Device& dev, Communicator& comm, RingAttention& ring, const Tensor& q,
                        const Tensor& k, const Tensor& v, const AttentionShape& sh, int repeats,
                        std::vector<float>& out_host) {
  Tensor out(dev, q.shape()), lse(dev, ring.lse_shape(sh.batch, sh.heads));
  Timeline tl(comm.rank());
  dev.set_timeline(&tl);
  comm.set_timeline(&tl);
  RingStepTimes st;
  for (int i = 0; i <= repeats; ++i) {
    comm.barrier();
    tl.clear();
    ring.forward(out, lse, q, k, v, sh);
    if (i == 0) continue;  // the warm-up pays for first allocations
    double issue = -1;
    for (const Span& s : tl.spans()) {
      if (s.kind != SpanKind::Wait) continue;
      if (s.name.rfind("issue ", 0) == 0) issue = s.start;
      if (s.name.rfind("wait ", 0) == 0 && issue >= 0) {
        st.window.push_back(s.start - issue);
        st.exposed.push_back(s.seconds());
        st.ready.push_back(s.end - issue);
        issue = -1;
      }
    }
  }
  dev.set_timeline(nullptr);
  comm.set_timeline(nullptr);
  out_host = out.to_host();
  return st;
}

// Step 5's timing on the pair of ranks 0 and 1 (`pair`): the ring's compute on the real
// transport, then the two links, each sized by that compute. Fills `links` (fast, slow).
std::vector<LinkTimes> time_links(Device& dev, Communicator& pair, int repeats, double& compute,
                                  bool& same_numbers) {
  std::vector<LinkTimes> links;
  const int cp = pair.size();
  const int64_t c = 256, S = 2 * c * cp, B = 1, nh = 4, hd = 64, n = S / cp;
  const AttentionShape sh{S, B, nh, nh, hd, 1.0f / std::sqrt(float(hd))};
  auto random = [&](const char* name) {
    Tensor t(dev, Shape{n * B, nh * hd});
    dev.fill_random(t, RngKey::from(8, name), GlobalIndex::rows(nh * hd, pair.rank() * n * B),
                    Distribution::normal(0, 1));
    return t;
  };
  const Tensor q = random("q"), k = random("k"), v = random("v");
  const double bytes = 2.0 * n * B * nh * hd * 4;  // one K, V block
  std::vector<float> out_real;
  RingAttention real_ring(dev, pair, S, CpLayout::Zigzag);
  const RingStepTimes real = time_ring(dev, pair, real_ring, q, k, v, sh, repeats, out_real);
  // The links must be the same on both ranks: sized by the slower rank's median compute.
  Tensor slower = Tensor::from_host(dev, Shape{1}, {float(median(real.window))});
  pair.all_reduce(slower, ReduceOp::Max);
  compute = slower.to_host()[0];
  same_numbers = true;
  for (double factor : {0.5, 2.0}) {
    AlphaBeta ab;
    ab.alpha = 5e-6;
    const double T = factor * compute;
    ab.beta = bytes / (T - ab.alpha);
    SimulatedLink link(pair.split(0, pair.rank()), Link{factor < 1 ? "fast" : "slow", ab});
    RingAttention ring(dev, link, S, CpLayout::Zigzag);
    std::vector<float> out_link;
    const RingStepTimes st = time_ring(dev, link, ring, q, k, v, sh, repeats, out_link);
    same_numbers = same_numbers && out_link == out_real;
    // The model, forward by forward: this step's compute hides min(compute, T) of the transfer.
    std::vector<double> hidden, predicted;
    for (size_t i = 0; i < st.exposed.size(); ++i) {
      hidden.push_back(std::max(0.0, 1.0 - st.exposed[i] / T));
      predicted.push_back(std::min(1.0, st.window[i] / T));
    }
    LinkTimes lt;
    lt.link = std::string(factor < 1 ? "fast" : "slow") + " (" + ab.str() + ")";
    lt.transfer = T, lt.ready = median(st.ready), lt.window = median(st.window);
    lt.earliest = *std::min_element(st.ready.begin(), st.ready.end());
    lt.predicted = median(predicted), lt.hidden = median(hidden);
    lt.lo = *std::min_element(hidden.begin(), hidden.end());
    lt.hi = *std::max_element(hidden.begin(), hidden.end());
    links.push_back(lt);
  }
  return links;
}

}  // namespace tp::lesson
