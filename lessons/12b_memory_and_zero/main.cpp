// Lesson 12b — memory and ZeRO: the bytes per parameter of training, what ZeRO-1, -2 and -3 shard
// over the data-parallel group, this library's ZeRO-1 measured, and [A3]'s three walls.
//
// What it shows:
//   1. The bytes per parameter of the model states under the five accountings in use
//      (docs/model.md, "Memory accounting"): fp32 16 B; mixed precision 16 B as the ZeRO paper
//      counts it, 18 B as Megatron-LM's --bf16 and this library keep it, 20 B under Megatron-LM's
//      --fp16; and what "ZeRO-1" leaves on each rank in each (the paper shards the fp32 master
//      with the moments, this library the moments only).
//   2. A 70B model in the ZeRO paper's 16 B: what TP, DP and ZeRO-1/2/3 shard, the per-GPU
//      totals for (tp, dp) on 8 nodes of 8 GPUs, and the picture: what each DP rank holds under
//      no ZeRO / ZeRO-1 / 2 / 3 at tp 8 × dp 4.
//   3. This library's ZeRO-1 on these ranks, measured: AdamW::state_bytes before and after
//      shard_over, and the device's bytes in use.
//   4. [A3]'s three walls that ZeRO hits above 70B, computed.
//
// What is new since lesson 12: nothing in lib/. The memory arithmetic of lesson 12's grid, and
// AdamW::shard_over (lib/model/adamw.h), which tp_train --zero 1 uses.
//
// Run:  make lessons && mpirun -np 2 build/bin/lesson_12b_memory_and_zero [--step] [--svg FILE]
#include <cmath>
#include <cstdio>

#include "core/format.h"
#include "lesson.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "parallel/process_grid.h"
#include "pictures.h"

using namespace tp;

namespace {

std::string gb(double bytes) { return fixed(bytes / 1e9, 1) + " GB"; }
std::string bytes_str(double b) { return fixed(b, b == std::floor(b) ? 0 : 2); }

// The model states' bytes per parameter, as one accounting counts them.
struct Accounting {
  const char* name;
  double weights, grads, master, moments;  // master: fp32 weights beside 16-bit ones (0 in fp32)
  double sharded;                          // the bytes of these its ZeRO-1 shards over dp
  const char* what;                        // which they are
  double total() const { return weights + grads + master + moments; }
  /// Bytes per parameter a rank keeps under this accounting's ZeRO-1 over dp replicas.
  double zero1(int dp) const { return total() - sharded + sharded / dp; }
};

// The four schemes over dp replicas, in the ZeRO paper's 16 B (2 + 2 + 12): bytes a rank holds of
// the weights, gradients and optimizer state of a model of P parameters split over tp.
struct Held {
  double weights, grads, optimizer;
  double total() const { return weights + grads + optimizer; }
};
const char* kSchemes[] = {"no ZeRO (plain DP)", "ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)"};
Held held(int zero, double P, int tp, int dp) {
  const double w = 2 * P / tp, g = 2 * P / tp, o = 12 * P / tp;
  return {zero >= 3 ? w / dp : w, zero >= 2 ? g / dp : g, zero >= 1 ? o / dp : o};
}

// The picture: a bar per DP rank under each scheme, split into weights, gradients and optimizer
// state, as wide as the bytes it holds.
void draw_zero_picture(lesson::Lesson& L, const std::string& path, double P, int tp, int dp) {
  SvgDiagram d(820, 60,
               "What each DP rank holds: 70B, mixed-precision AdamW (16 B), tp " +
                   std::to_string(tp) + " × dp " + std::to_string(dp));
  const double x0 = 150, scale = 560 / held(0, P, tp, dp).total();  // units per byte
  const char* fill[] = {"#9ecae1", "#fdae6b", "#a1d99b"};
  const char* part[] = {"weights", "gradients", "optimizer state"};
  double x = 30;
  for (int k = 0; k < 3; ++k, x += 150) {
    d.box(x, 40, 14, 12, fill[k]);
    d.text(x + 20, 50, part[k]);
  }
  d.text(x, 50, "shard r of dp (÷dp): split over the DP group");
  double y = 70;
  for (int z = 0; z <= 3; ++z) {
    const Held h = held(z, P, tp, dp);
    d.text(30, y + 14, kSchemes[z], "start", 13);
    y += 22;
    for (int r = 0; r < dp; ++r, y += 20) {
      d.text(x0 - 8, y + 12, "dp rank " + std::to_string(r), "end", 11);
      double at = x0;
      const double parts[] = {h.weights, h.grads, h.optimizer};
      const bool split[] = {z >= 3, z >= 2, z >= 1};
      for (int k = 0; k < 3; ++k) {
        const double w = parts[k] * scale;
        const std::string shard = "shard " + std::to_string(r) + " of " + std::to_string(dp);
        d.box(at, y, w, 16, fill[k], split[k] ? (w > 70 ? shard : w > 24 ? "÷dp" : "") : "");
        at += w;
      }
      d.text(at + 6, y + 12, gb(h.total()), "start", 11);
    }
    y += 8;
  }
  lesson::draw_notes(
      d, y + 8,
      {"Widths are bytes, computed as step 2's table (there on 64 GPUs, here dp " +
           std::to_string(dp) + "). Plain DP keeps everything on",
       "every rank; ZeRO-1 "
       "shards the optimizer state, ZeRO-2 the gradients too, ZeRO-3 the weights too (gathered",
       "for each layer's forward and backward). Activations come on top; no ZeRO stage shards "
       "them."});
  lesson::write_picture(L, d, path);
}

}  // namespace

int main(int argc, char** argv) {
  return lesson::run(
      argc, argv, "lesson_12b_memory_and_zero",
      "Lesson 12b: bytes per parameter, what ZeRO-1/2/3 shard, and the three walls", {2, 4},
      [](lesson::Lesson& L) {
    Device& dev = L.device();
    Communicator& world = L.world();
    const int np = L.size();
    const std::string svg = lesson::svg_path(L);

    // 1. Bytes per parameter.
    L.step("Bytes per parameter of the model states, five accountings (docs/model.md).");
    const int dp8 = 8;
    const std::vector<Accounting> acc = {
        {"fp32 (this library's and Megatron-LM's)", 4, 4, 0, 8, 8, "m, v"},
        {"mixed, the ZeRO paper (16-bit gradients)", 2, 2, 4, 8, 12, "master, m, v"},
        {"mixed, Megatron-LM --bf16 (fp32 gradients)", 2, 4, 4, 8, 12, "master, m, v"},
        {"mixed, this library's --precision bf16", 2, 4, 4, 8, 8, "m, v (master whole)"},
        {"Megatron-LM --fp16 (+ fp32 main gradients)", 2, 6, 4, 8, 16,
         "main gradients, master, m, v"},
    };
    lesson::Table bpp({"accounting", "weights", "gradients", "fp32 master", "m, v", "total",
                       "ZeRO-1 at dp " + std::to_string(dp8), "ZeRO-1 shards"});
    std::vector<float> totals, zero1s;
    for (const Accounting& a : acc) {
      bpp.add({a.name, bytes_str(a.weights), bytes_str(a.grads), bytes_str(a.master),
               bytes_str(a.moments), bytes_str(a.total()), bytes_str(a.zero1(dp8)), a.what});
      totals.push_back(static_cast<float>(a.total()));
      zero1s.push_back(static_cast<float>(a.zero1(dp8)));
    }
    L.say(bpp.str());
    L.say(
        "  fp32 keeps 16 B per parameter and so does the ZeRO paper's mixed precision: bf16 does\n"
        "  not halve the model states, it halves the activations and the bytes on the wire.\n"
        "  Megatron-LM's --bf16 and this library keep fp32 gradients (18 B); this library's\n"
        "  ZeRO-1 shards the moments and keeps the fp32 master whole (it is the parameter).");
    L.check_fact("totals: 16, 16, 18, 18, 20 B", totals, {16, 16, 18, 18, 20}, 0);
    L.check_fact("ZeRO-1 at dp 8: 8 + 8/8, 4 + 12/8, 6 + 12/8, 10 + 8/8, 4 + 16/8", zero1s,
                 {9, 5.5f, 7.5f, 11, 6}, 1e-6);

    // 2. 70B: what each scheme shards, in the ZeRO paper's 16 B.
    L.step(
        "A 70B model in the ZeRO paper's 16 B: what TP, DP and ZeRO-1/2/3 shard, per GPU on 64.");
    const double P = 70e9;
    lesson::Table bytes({"state", "bytes per parameter", "70B model", "sharded by"});
    const Held whole = held(0, P, 1, 1);
    bytes.add({"weights (bf16)", "2", gb(whole.weights), "TP; ZeRO-3 (FSDP) also by dp"});
    bytes.add({"gradients (bf16)", "2", gb(whole.grads), "TP; ZeRO-2 and -3 also by dp"});
    bytes.add({"AdamW: fp32 master weights, m, v", "12", gb(whole.optimizer),
               "TP; ZeRO-1, -2 and -3 also by dp"});
    bytes.add({"total", "16", gb(whole.total()), ""});
    L.say(bytes.str());
    L.check_fact("70B × 16 B = 1120 GB", {static_cast<float>(whole.total() / 1e9)}, {1120}, 1e-6);
    const int gpus_per_node = 8, nodes = 8, gpus = gpus_per_node * nodes;
    L.say("  per GPU on ", nodes, " nodes × ", gpus_per_node, " GPUs = ", gpus,
          " GPUs (weights + gradients + AdamW; activations come on top):");
    lesson::Table per_gpu({"tp", "dp", "TP group", "DP only", "ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)",
                           "fits 80 GB (ZeRO-1)"});
    std::vector<float> z3_total, z1_at8;
    for (int t : {1, 2, 4, 8}) {
      const int dpn = gpus / t;
      std::vector<std::string> row = {std::to_string(t), std::to_string(dpn),
                                      t <= gpus_per_node ? "one node" : "spans nodes"};
      for (int z = 0; z <= 3; ++z) row.push_back(gb(held(z, P, t, dpn).total()));
      row.push_back(held(1, P, t, dpn).total() <= 80e9 ? "yes" : "no");
      per_gpu.add(row);
      z3_total.push_back(static_cast<float>(held(3, P, t, dpn).total() * gpus / 1e9));
      if (t == 8) z1_at8.push_back(static_cast<float>(held(1, P, t, dpn).total() / 1e9));
    }
    L.say(per_gpu.str());
    L.say(
        "  TP divides everything by tp (and the activations inside each layer too); ZeRO divides\n"
        "  the states by dp at the cost of communication: ZeRO-1/2 about what DP already sends,\n"
        "  ZeRO-3 half as much again (the weights are all-gathered in forward and in backward).");
    L.check_fact("ZeRO-3: 64 GPUs × per-GPU share = the whole 1120 GB", z3_total,
                 std::vector<float>(4, 1120.0f), 1e-6);
    L.check_fact("ZeRO-1 at tp 8 × dp 8: 4 Ψ/8 + 12 Ψ/64 = 35 + 13.125 GB", z1_at8, {48.125f},
                 1e-6);
    draw_zero_picture(L, svg, P, 8, 4);

    // 3. This library's ZeRO-1, measured on these ranks (dp = np, tp = 1).
    L.step("This library's ZeRO-1 on these " + std::to_string(np) + " ranks (dp " +
           std::to_string(np) + "): AdamW::shard_over, measured.");
    ProcessGrid grid(world, np);  // tp 1 × dp np: every rank holds the whole model
    const GptConfig g = lesson_gpt(/*layers=*/2, /*hidden=*/64, /*vocab=*/64, /*seq=*/16);
    const int64_t before = dev.memory().in_use;
    Gpt model(dev, grid.tp(), g);
    model.init(7);
    AdamWParams hp;
    hp.lr = 3e-3f;
    AdamW opt(dev, model.params(), hp);
    int64_t n = 0;
    for (const Param& p : model.params()) n += p.value.numel();
    const int64_t plain = opt.state_bytes(), held_plain = dev.memory().in_use - before;
    opt.shard_over(grid.dp(), model.params());
    const int64_t sharded = opt.state_bytes(), held_sharded = dev.memory().in_use - before;
    const int64_t shard = (n + np - 1) / np;
    const double per = static_cast<double>(n);
    lesson::Table z1(
        {"", "AdamW m, v (state_bytes)", "per parameter", "device in use", "per parameter"});
    z1.add({"without ZeRO", std::to_string(plain), fixed(static_cast<double>(plain) / per, 2),
            std::to_string(held_plain), fixed(static_cast<double>(held_plain) / per, 2)});
    z1.add({"ZeRO-1 (shard_over)", std::to_string(sharded),
            fixed(static_cast<double>(sharded) / per, 2), std::to_string(held_sharded),
            fixed(static_cast<double>(held_sharded) / per, 2)});
    L.say("  model: ", g.str(), ", ", n, " parameters on every rank");
    L.say(z1.str());
    L.say("  the moments fall from 8 B to 8/dp = ", fixed(8.0 / np, 2),
          " B per parameter (2 · 4 · ⌈P/dp⌉ = ", 8 * shard,
          " B); the fp32 values\n  (the master) and gradients stay whole: this library's ZeRO-1, "
          "not the paper's, which shards the master too.");
    L.check_value("unsharded: values, gradients, m, v ≈ 16 B per parameter on the device",
                  static_cast<double>(held_plain), 16.0 * n, 1e-2);
    L.check_value("unsharded moments = 2 · 4 · P", static_cast<double>(plain), 8.0 * n, 0);
    L.check_value("sharded moments = 2 · 4 · ⌈P/dp⌉", static_cast<double>(sharded), 8.0 * shard, 0);
    L.check_value("the device frees what the moments gave up",
                  static_cast<double>(held_plain - held_sharded),
                  static_cast<double>(plain - sharded), 0);
    // The same steps under ZeRO-1 and on one device: sharding the state changes no number.
    SerialCommunicator solo;
    ProcessGrid one_grid(solo, 1);
    Gpt one(dev, solo, g);
    one.init(7);
    AdamW one_opt(dev, one.params(), hp);
    MarkovSource data(g.vocab, 7);
    StepOptions zero1;
    zero1.zero = 1;
    std::vector<float> loss_z, loss_one;
    for (int64_t st = 0; st < 3; ++st) {
      const Batch b = data.batch(st, 2 * np, g.seq);
      loss_z.push_back(train_step(grid, dev, model, opt, b, 7, st, hp.lr, 1.0f, {}, zero1).loss);
      loss_one.push_back(train_step(one_grid, dev, one, one_opt, b, 7, st, hp.lr, 1.0f).loss);
    }
    L.say("  3 AdamW steps under ZeRO-1 (dp ", np, ") and on one device, losses ",
          lesson::fmt(loss_z), " and ", lesson::fmt(loss_one));
    L.check("loss under ZeRO-1 vs one device", loss_z, loss_one, 1e-5);
    L.check("weights after 3 steps under ZeRO-1 vs one device",
            gathered(grid.tp(), model.params(), ParamField::Value),
            gathered(solo, one.params(), ParamField::Value), 1e-5);

    // 4. The three walls.
    L.step("[A3]'s three walls that ZeRO alone hits above 70B.");
    // (a) Activations: ZeRO and DP do not split them. Korthikanti et al., 16-bit, FlashAttention
    // (no s² term): 34·s·b·h bytes per layer on one device; TP + SP divides it by t.
    const double s = 8192, h8 = 4096, layers8 = 36;
    const double act_layer = 34 * s * 1 * h8, act_model = act_layer * layers8;
    L.say(
        "  1. Activations are not sharded by DP or ZeRO. An 8B model (h = 4096, 36 layers) on\n"
        "     one 8K sequence keeps 34·s·h = ",
        fixed(act_layer / 1e9, 2), " GB per layer (16-bit, FlashAttention),\n     ", gb(act_model),
        " in all, at any dp; TP + SP at t = 8 divides it by 8: ", gb(act_model / 8), ".");
    L.check_fact("8B, 8K tokens: 1.14 GB per layer, 41 GB per model",
                 {static_cast<float>(act_layer / 1e9), static_cast<float>(act_model / 1e9)},
                 {1.1408f, 41.07f}, 1e-3);
    // (b) DP is capped by the batch: Llama 3 405B, ~16M tokens per batch, 8K tokens per sequence.
    const double batch_tokens = 16e6, seqs = batch_tokens / s, gpus405 = 16384;
    L.say("  2. DP is capped by the batch. Llama 3 405B's batch of ~16M tokens is ", fixed(seqs, 0),
          " sequences of 8K,\n     but it ran on ", fixed(gpus405, 0),
          " GPUs: each replica must span ≥ ", fixed(gpus405 / seqs, 1),
          " GPUs, so the model\n     itself has to be split (TP, PP).");
    L.check_fact("≈ 2000 sequences per batch; ≥ 8 GPUs per replica",
                 {static_cast<float>(seqs), static_cast<float>(gpus405 / seqs)},
                 {1953.125f, 8.388608f}, 1e-6);
    // (c) ZeRO-3 traffic vs compute: per step each GPU sends ~6Ψ bytes (bf16 all-gather of the
    // weights in forward and again in backward, reduce-scatter of the gradients: 3 × 2Ψ).
    const double ib = 50e9, flops = 400e12;
    const double z3_bytes = 6 * P, z3_time = z3_bytes / ib, compute = 6 * P * s / flops;
    L.say("  3. ZeRO-3's all-gathers are too slow. Each GPU sends 6Ψ = ", gb(z3_bytes),
          " per step (the bf16\n     weights gathered in forward and again in backward, the "
          "gradients reduce-scattered):\n     ",
          fixed(z3_time, 1),
          " s on InfiniBand (50 GB/s), while one 8K sequence takes\n"
          "     6 · 70B · 8192 / 400 TFLOPS = ",
          fixed(compute, 1), " s to compute: as long as the communication, hard to hide.");
    L.check_fact("ZeRO-3: 420 GB, 8.4 s on IB vs 8.6 s of compute",
                 {static_cast<float>(z3_bytes / 1e9), static_cast<float>(z3_time),
                  static_cast<float>(compute)},
                 {420.0f, 8.4f, 8.6016f}, 1e-4);
      },
      [](Options& o) {
    lesson::svg_option(o, "lesson_12b_zero.svg",
                       "what each DP rank holds under no ZeRO and ZeRO-1, -2, -3");
  });
}
