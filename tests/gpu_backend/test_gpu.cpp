// test_gpu.cpp — the GPU backend against the CPU backend, and the collectives on GPU tensors.
// Its own binary (build/bin/test_gpu, with tests/mpi_main.cpp), run by scripts/run-tests.sh under
// mpirun -np 1, 2, 3 (and by scripts/gpu-check.sh).
//
//   1. Every Device op on random inputs, the CUDA device against the CPU device (the reference):
//      memory and copies, fill / scale / axpy, gemm in all four transpose cases with alpha and beta,
//      bias, copy_columns, fill_random, mul, sum_squares, dropout_mask, GeLU, SwiGLU, LayerNorm,
//      RMSNorm, attention (MHA and GQA; also over a key/value cache), embedding and positions, the
//      vocabulary-parallel loss pieces and AdamW. 1b: the native bf16 kernels bit for bit against
//      the stand-in path (widen, f32 kernel, round once), with the model's dtype mixes.
//   2. A small Gpt forward / backward on the CUDA device against the CPU device at t = np, same
//      seed: the loss and every gathered gradient; also with --overlap async, and --sp with ring.
//   3. A 20-step training run (AdamW, dropout) on both: the loss curves. The memory stack on the GPU
//      alone: --recompute selective / full give none's gradients bit for bit, --micro-batches 2
//      within 1e-5 (plain TP and SP).
//   4. Every collective on GPU tensors: over NCCL (when each rank of the node has its own GPU: np =
//      1 on a one-GPU machine) and over MpiCommunicator, which stages GPU tensors through host
//      memory, so np = 2, 3 share one GPU (--comm mpi); point-to-point send / recv on both
//      (tests/test_util.cpp).
//
// Tolerances (relative error ‖gpu − cpu‖₂ / ‖cpu‖₂; both sides fp32 unless stated):
//   0       copies, fill, copy_columns, fill_random uniform, dropout masks: bit for bit (the same
//           Philox counters and the same float transform on both devices).
//   1e-6    fill_random normal (Box–Muller in double, rounded to float once) and sum_squares (a sum
//           in double on both sides, in different orders).
//   1e-5    gemm in fp32 (cuBLAS sums in another order) and every model kernel (different
//           reduction orders, fused multiply-adds, exp/tanh within a few ulps).
//   1e-3    gemm with --tf32: inputs rounded to a 10-bit mantissa (2⁻¹¹ ≈ 5e-4 per element).
//   2e-2    gemm with --dtype bf16: inputs rounded to an 8-bit mantissa (2⁻⁹ ≈ 2e-3 per element;
//           the bound leaves room for cancellation in short sums).
//   1e-4    the model: the loss and gradients of one step (a whole forward and backward of fp32
//           kernels, each within 1e-5) and each loss of the 20-step curve (rounding differences
//           fed back through AdamW).
//   exact   collectives on small integers (sums and maxima of integers are exact in fp32).
//   bitwise the native bf16 kernels against the Device front's stand-in path on the same GPU
//           (section 1b: the same f32 arithmetic, one rounding per stored element), kernel by
//           kernel and over a whole bf16 step.
//
// Without a GPU (or in a build without the GPU backend) every test skips with the reason
// make_gpu_device gave, and rank 0 prints one line "tp-gpu: skipped: <reason>" that run-tests.sh
// reports. The decision is agreed over all ranks, so no rank runs a collective the others skip.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "gpu_entry.h"
#include "model/adamw.h"
#include "model/config.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/memory.h"
#include "model/presets.h"
#include "model/train.h"
#include "mpi_communicator.h"
#include "node.h"
#include "parallel/param.h"
#include "parallel/process_grid.h"
#include "test_util.h"

namespace {

using namespace tp;
using tp::testing::random_vector;
using tp::testing::rel_error;
using tp::testing::world;

Device& cpu() { return tp::testing::device(); }

constexpr double kDouble = 1e-6;
constexpr double kFp32 = 1e-5;
constexpr double kTf32 = 1e-3;
constexpr double kBf16 = 2e-2;
constexpr double kModel = 1e-4;
constexpr uint64_t kSeed = 77;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- the GPU devices, created once for the whole run -------------------------------------------

struct GpuState {
  std::unique_ptr<Device> fp32, tf32, bf16;
  std::unique_ptr<Device> stand_in;  // native_bf16 false but for the GEMM (section 1b)
  std::unique_ptr<Communicator> nccl;
  bool nccl_tried = false;
  std::string nccl_skip;  // why NCCL is not tested here (several ranks share a GPU)
  std::string skip;       // why there is no GPU (bad input from make_gpu_device): tests skip
  std::string broken;     // a real failure creating the device: tests fail
  int local_rank = 0;
};
GpuState g;

std::unique_ptr<Device> make_gpu(bool tf32, const std::string& dtype) {
  DeviceOptions o;
  o.backend = "gpu";
  o.local_rank = g.local_rank;
  o.tf32 = tf32;
  o.dtype = dtype;
  return make_gpu_device(o);
}

class GpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int local_size = 1;
    node_local_rank(MPI_COMM_WORLD, &g.local_rank, &local_size);
    int kind = 0;  // 0 device, 1 skip (bad input: no GPU / no backend), 2 broken
    try {
      g.fp32 = make_gpu(false, "fp32");
    } catch (const Error& e) {
      kind = e.is_bad_input() ? 1 : 2;
      (kind == 1 ? g.skip : g.broken) = e.what();
    } catch (const std::exception& e) {
      kind = 2;
      g.broken = e.what();
    }
    int worst = kind;  // every rank takes the same decision
    MPI_Allreduce(&kind, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst != 0 && kind == 0) {
      g.fp32.reset();
      (worst == 1 ? g.skip : g.broken) = "another rank has no CUDA device";
    }
    if (world().rank() == 0) {
      if (g.fp32)
        std::printf("tp-gpu: device %s\n", g.fp32->name().c_str());
      else if (worst == 1)
        std::printf("tp-gpu: skipped: %s\n", g.skip.c_str());
      else
        std::printf("tp-gpu: broken: %s\n", g.broken.c_str());
      std::fflush(stdout);
    }
  }
  void TearDown() override {
    g.nccl.reset();  // before the device its streams belong to
    g.bf16.reset();
    g.stand_in.reset();
    g.tf32.reset();
    g.fp32.reset();
  }
};
[[maybe_unused]] const auto* const g_env = ::testing::AddGlobalTestEnvironment(new GpuEnvironment);

// Skips (no GPU) or fails (the device could not be created) the current test.
#define REQUIRE_GPU()                                                                 \
  do {                                                                                \
    if (!g.broken.empty()) FAIL() << "creating the CUDA device failed: " << g.broken; \
    if (!g.fp32) GTEST_SKIP() << g.skip;                                              \
  } while (0)

Device& gpu() { return *g.fp32; }

// ---- pairs of tensors: the same numbers on the CPU and on the GPU ------------------------------

struct Pair {
  Tensor cpu, gpu;
};

Pair both(const Shape& s, const std::vector<float>& v, Device* gdev = nullptr) {
  return {Tensor::from_host(cpu(), s, v), Tensor::from_host(gdev ? *gdev : gpu(), s, v)};
}
// Uniform in [-a, a), keyed by name.
Pair rnd(const std::string& name, const Shape& s, float a = 1.0f, Device* gdev = nullptr) {
  auto v = random_vector(name, s.numel());
  for (float& x : v) x *= a;
  return both(s, v, gdev);
}
Pair full(const Shape& s, float value, Device* gdev = nullptr) {
  return both(s, std::vector<float>(static_cast<size_t>(s.numel()), value), gdev);
}
// An output that must be written, not accumulated: NaN on both sides first.
Pair out(const Shape& s, Device* gdev = nullptr) { return full(s, kNaN, gdev); }

double err(const Pair& p) { return rel_error(p.gpu.to_host(), p.cpu.to_host()); }

#define EXPECT_CLOSE(pair, tol) EXPECT_LE(err(pair), (tol)) << #pair
#define EXPECT_SAME(pair) EXPECT_EQ((pair).gpu.to_host(), (pair).cpu.to_host()) << #pair

// ---- 1. Device ops ------------------------------------------------------------------------------

TEST(GpuMemory, CopiesViewsCloneAndMemoryStats) {
  REQUIRE_GPU();
  const auto v = random_vector("mem", 1000);
  const int64_t before = gpu().memory().in_use;
  {
    Tensor a = Tensor::from_host(gpu(), Shape{10, 100}, v);
    EXPECT_EQ(gpu().memory().in_use, before + 4000);
    EXPECT_EQ(a.to_host(), v);
    Tensor b = a.clone();
    EXPECT_EQ(b.to_host(), v);
    Tensor c(gpu(), Shape{10, 100});
    c.copy_from(a);
    EXPECT_EQ(c.to_host(), v);
    const auto rows = a.view(3, 5).to_host();
    EXPECT_EQ(rows, std::vector<float>(v.begin() + 300, v.begin() + 500));
    Tensor z = Tensor::zeros(gpu(), Shape{7, 3});
    EXPECT_EQ(z.to_host(), std::vector<float>(21, 0.0f));
    a.view(3, 5).copy_from_host(std::vector<float>(200, 2.0f));
    auto want = v;
    std::fill(want.begin() + 300, want.begin() + 500, 2.0f);
    EXPECT_EQ(a.to_host(), want);
    EXPECT_FALSE(gpu().host_accessible());
  }
  EXPECT_EQ(gpu().memory().in_use, before);
  // The caching allocator refuses a second free of the same block (it would hand it out twice).
  void* p = gpu().allocate(1000);
  gpu().deallocate(p);
  EXPECT_THROW(gpu().deallocate(p), Error);
}

// f32 → bf16 → f32 on the GPU gives the CPU's bits (both round to nearest even element by element),
// a bf16 tensor holds half the bytes, and an f32-only kernel names the GPU backend when refusing it.
TEST(GpuConvert, Bf16RoundTripBitForBitWithTheCpu) {
  REQUIRE_GPU();
  const int64_t n = 5000;
  std::vector<float> v = random_vector("convert", n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>(i % 40) - 20);
  Tensor gx = Tensor::from_host(gpu(), Shape{n}, v), gy(gpu(), Shape{n}, Dtype::bf16);
  Tensor cx = Tensor::from_host(cpu(), Shape{n}, v), cy(cpu(), Shape{n}, Dtype::bf16);
  EXPECT_EQ(gy.bytes(), static_cast<size_t>(2 * n));
  gpu().convert(gx, gy);
  cpu().convert(cx, cy);
  Tensor gb(gpu(), Shape{n}), cb(cpu(), Shape{n});
  gpu().convert(gy, gb);
  cpu().convert(cy, cb);
  EXPECT_EQ(gy.to_host(), cy.to_host());
  EXPECT_EQ(gb.to_host(), cb.to_host());
  EXPECT_EQ(gb.to_host(), gy.to_host());  // widening is exact
  // Every kernel takes bf16 but adamw_step, which updates the fp32 master weights only.
  Tensor m = Tensor::zeros(gpu(), Shape{n}), v2 = Tensor::zeros(gpu(), Shape{n});
  try {
    gpu().adamw_step(gy, gb, m, v2, AdamWParams{}, 1);
    ADD_FAILURE() << "adamw_step took bf16 on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(": adamw_step has no bf16 kernel"), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(gpu().backend(), 0), 0u) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
}

TEST(GpuElementwise, FillScaleAxpyMul) {
  REQUIRE_GPU();
  const Shape s{33, 65};
  Pair x = out(s);
  cpu().fill(x.cpu, 1.5f);
  gpu().fill(x.gpu, 1.5f);
  EXPECT_SAME(x);
  Pair y = rnd("scale", s);
  cpu().scale(y.cpu, -0.37f);
  gpu().scale(y.gpu, -0.37f);
  EXPECT_CLOSE(y, kFp32);
  Pair a = rnd("axpy.x", s), b = rnd("axpy.y", s);
  cpu().axpy(0.71f, a.cpu, b.cpu);
  gpu().axpy(0.71f, a.gpu, b.gpu);
  EXPECT_CLOSE(b, kFp32);
  Pair m = rnd("mul.m", s), p = out(s);
  cpu().mul(a.cpu, m.cpu, p.cpu);
  gpu().mul(a.gpu, m.gpu, p.gpu);
  EXPECT_CLOSE(p, kFp32);
  cpu().mul(a.cpu, m.cpu, a.cpu);  // y may alias x
  gpu().mul(a.gpu, m.gpu, a.gpu);
  EXPECT_CLOSE(a, kFp32);
  Pair q = rnd("sumsq", Shape{1001, 17}, 3.0f);
  const double sc = cpu().sum_squares(q.cpu), sg = gpu().sum_squares(q.gpu);
  EXPECT_LE(std::abs(sg - sc), kDouble * sc) << sg << " vs " << sc;
}

// gemm in all four transpose cases, with beta = 0 over NaN and with alpha, beta ≠ 0 and 1, at an
// odd small shape and at one large enough for the tensor-core paths.
void check_gemm(Device& dev, double tol) {
  struct Case {
    int64_t m, n, k;
  };
  for (const Case c : {Case{37, 53, 71}, Case{256, 384, 512}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const std::string tag = "gemm" + std::to_string(c.m) + (ta ? "T" : "N") + (tb ? "T" : "N");
        Pair a = rnd(tag + ".a", ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1.0f, &dev);
        Pair b = rnd(tag + ".b", tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 1.0f, &dev);
        Pair c0 = out(Shape{c.m, c.n}, &dev);  // beta = 0: NaN must be ignored
        cpu().gemm(ta, tb, 1.0f, a.cpu, b.cpu, 0.0f, c0.cpu);
        dev.gemm(ta, tb, 1.0f, a.gpu, b.gpu, 0.0f, c0.gpu);
        EXPECT_LE(err(c0), tol) << tag << " beta=0";
        Pair c1 = rnd(tag + ".c", Shape{c.m, c.n}, 1.0f, &dev);
        cpu().gemm(ta, tb, 0.5f, a.cpu, b.cpu, -1.25f, c1.cpu);
        dev.gemm(ta, tb, 0.5f, a.gpu, b.gpu, -1.25f, c1.gpu);
        EXPECT_LE(err(c1), tol) << tag << " alpha=0.5 beta=-1.25";
      }
    }
  }
}

TEST(GpuGemm, Fp32MatchesCpu) {
  REQUIRE_GPU();
  check_gemm(gpu(), kFp32);
}

TEST(GpuGemm, Tf32Within1e3) {
  REQUIRE_GPU();
  if (!g.tf32) g.tf32 = make_gpu(true, "fp32");
  check_gemm(*g.tf32, kTf32);
}

TEST(GpuGemm, Bf16Within2e2) {
  REQUIRE_GPU();
  if (!g.bf16) g.bf16 = make_gpu(false, "bf16");
  check_gemm(*g.bf16, kBf16);
}

TEST(GpuLayout, BiasAndCopyColumns) {
  REQUIRE_GPU();
  Pair y = rnd("bias.y", Shape{3, 7, 45}), bias = rnd("bias.b", Shape{45});
  cpu().add_bias(y.cpu, bias.cpu);
  gpu().add_bias(y.gpu, bias.gpu);
  EXPECT_CLOSE(y, kFp32);
  Pair db = rnd("bias.db", Shape{45}), dy = rnd("bias.dy", Shape{517, 45});
  cpu().add_bias_backward(db.cpu, dy.cpu);  // accumulates
  gpu().add_bias_backward(db.gpu, dy.gpu);
  EXPECT_CLOSE(db, kFp32);
  Pair src = rnd("cols.src", Shape{29, 40}), dst = rnd("cols.dst", Shape{29, 23});
  cpu().copy_columns(src.cpu, 11, dst.cpu, 5, 13);
  gpu().copy_columns(src.gpu, 11, dst.gpu, 5, 13);
  EXPECT_SAME(dst);
}

TEST(GpuRandom, FillRandomAndDropoutMaskBitForBit) {
  REQUIRE_GPU();
  const RngKey key = RngKey::from(kSeed, "transformer.h.0.mlp.c_fc.weight");
  // A column shard (cols 40..72 of a 96-column matrix) and a row shard: global indices differ
  // from local ones.
  for (const GlobalIndex idx :
       {GlobalIndex::whole(33), GlobalIndex::columns(96, 40), GlobalIndex::rows(33, 17)}) {
    Pair u = out(Shape{19, 33});
    cpu().fill_random(u.cpu, key, idx, Distribution::uniform(-0.5f, 2.0f));
    gpu().fill_random(u.gpu, key, idx, Distribution::uniform(-0.5f, 2.0f));
    EXPECT_SAME(u) << " offset " << idx.offset;
    Pair n = out(Shape{19, 33});
    cpu().fill_random(n.cpu, key, idx, Distribution::normal(0.1f, 0.02f));
    gpu().fill_random(n.gpu, key, idx, Distribution::normal(0.1f, 0.02f));
    EXPECT_CLOSE(n, kDouble);
    for (float p : {0.0f, 0.1f, 0.5f}) {
      Pair m = out(Shape{19, 33});
      cpu().dropout_mask(m.cpu, key, idx, p);
      gpu().dropout_mask(m.gpu, key, idx, p);
      EXPECT_SAME(m) << " p=" << p;
    }
  }
}

TEST(GpuActivations, GeluAndSwiglu) {
  REQUIRE_GPU();
  const Shape s{67, 96};
  Pair x = rnd("act.x", s, 4.0f), dy = rnd("act.dy", s), y = out(s), dx = out(s);
  cpu().gelu_forward(y.cpu, x.cpu);
  gpu().gelu_forward(y.gpu, x.gpu);
  EXPECT_CLOSE(y, kFp32);
  cpu().gelu_backward(dx.cpu, dy.cpu, x.cpu);
  gpu().gelu_backward(dx.gpu, dy.gpu, x.gpu);
  EXPECT_CLOSE(dx, kFp32);
  Pair gt = rnd("act.g", s, 4.0f), u = rnd("act.u", s, 2.0f), sy = out(s), dg = out(s), du = out(s);
  cpu().swiglu_forward(sy.cpu, gt.cpu, u.cpu);
  gpu().swiglu_forward(sy.gpu, gt.gpu, u.gpu);
  EXPECT_CLOSE(sy, kFp32);
  cpu().swiglu_backward(dg.cpu, du.cpu, dy.cpu, gt.cpu, u.cpu);
  gpu().swiglu_backward(dg.gpu, du.gpu, dy.gpu, gt.gpu, u.gpu);
  EXPECT_CLOSE(dg, kFp32);
  EXPECT_CLOSE(du, kFp32);
}

// The GPU runs the fused bias + GeLU through Device's default (add_bias, gelu, add_bias_backward);
// the CPU its one-pass kernel: the same numbers within the activations' bound.
TEST(GpuActivations, BiasGeluFused) {
  REQUIRE_GPU();
  const Shape s{67, 96};
  Pair x = rnd("bg.x", s, 4.0f), b = rnd("bg.b", Shape{96}), dy = rnd("bg.dy", s), y = out(s),
       dx = out(s), db = rnd("bg.db", Shape{96});
  cpu().bias_gelu_forward(y.cpu, x.cpu, b.cpu);
  gpu().bias_gelu_forward(y.gpu, x.gpu, b.gpu);
  EXPECT_CLOSE(y, kFp32);
  cpu().bias_gelu_backward(dx.cpu, db.cpu, dy.cpu, x.cpu, b.cpu);
  gpu().bias_gelu_backward(dx.gpu, db.gpu, dy.gpu, x.gpu, b.gpu);
  EXPECT_CLOSE(dx, kFp32);
  EXPECT_CLOSE(db, kFp32);
}

TEST(GpuNorms, LayerNormAndRmsNormForwardBackward) {
  REQUIRE_GPU();
  for (const int64_t h : {48, 257, 4096}) {
    const int64_t rows = h == 4096 ? 8 : 37;
    const Shape s{rows, h};
    Pair x = rnd("ln.x" + std::to_string(h), s, 3.0f), w = rnd("ln.w", Shape{h}),
         b = rnd("ln.b", Shape{h});
    Pair y = out(s), mean = out(Shape{rows}), rstd = out(Shape{rows});
    cpu().layernorm_forward(y.cpu, mean.cpu, rstd.cpu, x.cpu, w.cpu, b.cpu, 1e-5f);
    gpu().layernorm_forward(y.gpu, mean.gpu, rstd.gpu, x.gpu, w.gpu, b.gpu, 1e-5f);
    EXPECT_CLOSE(y, kFp32) << " h=" << h;
    EXPECT_CLOSE(mean, kFp32) << " h=" << h;
    EXPECT_CLOSE(rstd, kFp32) << " h=" << h;
    Pair dy = rnd("ln.dy", s), dx = out(s), dw = rnd("ln.dw", Shape{h}),
         db = rnd("ln.db", Shape{h});
    cpu().layernorm_backward(dx.cpu, dw.cpu, db.cpu, dy.cpu, x.cpu, w.cpu, mean.cpu, rstd.cpu);
    gpu().layernorm_backward(dx.gpu, dw.gpu, db.gpu, dy.gpu, x.gpu, w.gpu, mean.gpu, rstd.gpu);
    EXPECT_CLOSE(dx, kFp32) << " h=" << h;
    EXPECT_CLOSE(dw, kFp32) << " h=" << h;
    EXPECT_CLOSE(db, kFp32) << " h=" << h;

    Pair ry = out(s), rr = out(Shape{rows});
    cpu().rmsnorm_forward(ry.cpu, rr.cpu, x.cpu, w.cpu, 1e-5f);
    gpu().rmsnorm_forward(ry.gpu, rr.gpu, x.gpu, w.gpu, 1e-5f);
    EXPECT_CLOSE(ry, kFp32) << " h=" << h;
    EXPECT_CLOSE(rr, kFp32) << " h=" << h;
    Pair rdx = out(s), rdw = rnd("rms.dw", Shape{h});
    cpu().rmsnorm_backward(rdx.cpu, rdw.cpu, dy.cpu, x.cpu, w.cpu, rr.cpu);
    gpu().rmsnorm_backward(rdx.gpu, rdw.gpu, dy.gpu, x.gpu, w.gpu, rr.gpu);
    EXPECT_CLOSE(rdx, kFp32) << " h=" << h;
    EXPECT_CLOSE(rdw, kFp32) << " h=" << h;
  }
}

TEST(GpuAttention, CausalForwardBackwardMhaAndGqa) {
  REQUIRE_GPU();
  struct Case {
    int64_t seq, batch, heads, kv, hd;
  };
  for (const Case c :
       {Case{13, 2, 4, 4, 8}, Case{13, 2, 4, 2, 8}, Case{9, 3, 6, 2, 16}, Case{70, 1, 6, 2, 64}}) {
    AttentionShape sh;
    sh.seq = c.seq;
    sh.batch = c.batch;
    sh.heads = c.heads;
    sh.kv_heads = c.kv;
    sh.head_dim = c.hd;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int64_t n = c.seq * c.batch;
    const std::string tag = "attn" + std::to_string(c.seq) + "." + std::to_string(c.kv);
    Pair q = rnd(tag + ".q", Shape{n, c.heads * c.hd}, 2.0f),
         k = rnd(tag + ".k", Shape{n, c.kv * c.hd}, 2.0f),
         v = rnd(tag + ".v", Shape{n, c.kv * c.hd});
    Pair o = out(Shape{n, c.heads * c.hd}), lse = out(Shape{c.batch, c.heads, c.seq});
    cpu().attention_forward(o.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, sh);
    gpu().attention_forward(o.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, sh);
    EXPECT_CLOSE(o, kFp32) << tag;
    EXPECT_CLOSE(lse, kFp32) << tag;
    // Each backward from its own forward's out and lse (P recomputed from q, k and lse).
    Pair dout = rnd(tag + ".dout", Shape{n, c.heads * c.hd});
    Pair dq = out(q.cpu.shape()), dk = out(k.cpu.shape()), dv = out(v.cpu.shape());
    cpu().attention_backward(dq.cpu, dk.cpu, dv.cpu, dout.cpu, q.cpu, k.cpu, v.cpu, o.cpu, lse.cpu,
                             sh);
    gpu().attention_backward(dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu, o.gpu, lse.gpu,
                             sh);
    EXPECT_CLOSE(dq, kFp32) << tag;
    EXPECT_CLOSE(dk, kFp32) << tag;
    EXPECT_CLOSE(dv, kFp32) << tag;
  }
}

// Ring attention's pieces (parallel/ring_attention.h): one chunk of queries against another
// chunk's keys (kv_seq, past: the diagonal, a whole earlier chunk, keys longer than the queries),
// forward and backward, then the merge of two partial outputs by their log-sum-exps, against
// the CPU.
TEST(GpuAttention, ChunkPairsAndMerge) {
  REQUIRE_GPU();
  struct Case {
    int64_t n, keys, past, batch, heads, kv, hd;
  };
  for (const Case c : {Case{6, 6, 0, 2, 4, 2, 8}, Case{6, 6, 12, 2, 4, 2, 8},
                       Case{5, 9, 3, 1, 6, 3, 16}, Case{33, 33, 33, 1, 2, 1, 64}}) {
    AttentionShape sh;
    sh.seq = c.n;
    sh.kv_seq = c.keys;
    sh.past = c.past;
    sh.batch = c.batch;
    sh.heads = c.heads;
    sh.kv_heads = c.kv;
    sh.head_dim = c.hd;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int64_t rows = c.n * c.batch, krows = c.keys * c.batch;
    const std::string tag =
        "chunk" + std::to_string(c.n) + "." + std::to_string(c.keys) + "." + std::to_string(c.past);
    Pair q = rnd(tag + ".q", Shape{rows, c.heads * c.hd}, 2.0f),
         k = rnd(tag + ".k", Shape{krows, c.kv * c.hd}, 2.0f),
         v = rnd(tag + ".v", Shape{krows, c.kv * c.hd});
    Pair o = out(Shape{rows, c.heads * c.hd}), lse = out(Shape{c.batch, c.heads, c.n});
    cpu().attention_forward(o.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, sh);
    gpu().attention_forward(o.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, sh);
    EXPECT_CLOSE(o, kFp32) << tag;
    EXPECT_CLOSE(lse, kFp32) << tag;
    Pair dout = rnd(tag + ".dout", Shape{rows, c.heads * c.hd});
    Pair dq = out(q.cpu.shape()), dk = out(k.cpu.shape()), dv = out(v.cpu.shape());
    cpu().attention_backward(dq.cpu, dk.cpu, dv.cpu, dout.cpu, q.cpu, k.cpu, v.cpu, o.cpu, lse.cpu,
                             sh);
    gpu().attention_backward(dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu, o.gpu, lse.gpu,
                             sh);
    EXPECT_CLOSE(dq, kFp32) << tag;
    EXPECT_CLOSE(dk, kFp32) << tag;
    EXPECT_CLOSE(dv, kFp32) << tag;
    // Merge another partial (its own out and lse) into this one.
    Pair o2 = rnd(tag + ".o2", o.cpu.shape()), l2 = rnd(tag + ".l2", lse.cpu.shape(), 3.0f);
    cpu().attention_merge(o.cpu, lse.cpu, o2.cpu, l2.cpu, sh);
    gpu().attention_merge(o.gpu, lse.gpu, o2.gpu, l2.gpu, sh);
    EXPECT_CLOSE(o, kFp32) << tag << " merged";
    EXPECT_CLOSE(lse, kFp32) << tag << " merged";
  }
}

// Attention over a key/value cache (decoding): n new query positions after `past` cached ones,
// against the CPU; a prefill (past = 0), a block in the middle and one position at the end.
TEST(GpuAttention, CachedForwardMhaAndGqa) {
  REQUIRE_GPU();
  struct Case {
    int64_t past, n, batch, heads, kv, hd;
  };
  for (const Case c : {Case{0, 13, 2, 4, 4, 8}, Case{5, 4, 2, 4, 2, 8}, Case{69, 1, 1, 6, 2, 64},
                       Case{30, 1, 3, 6, 3, 16}}) {
    AttentionShape sh;
    sh.seq = c.n;
    sh.batch = c.batch;
    sh.heads = c.heads;
    sh.kv_heads = c.kv;
    sh.head_dim = c.hd;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int64_t rows = c.n * c.batch, keys = (c.past + c.n) * c.batch;
    const std::string tag = "cached" + std::to_string(c.past) + "." + std::to_string(c.n);
    Pair q = rnd(tag + ".q", Shape{rows, c.heads * c.hd}, 2.0f),
         k = rnd(tag + ".k", Shape{keys, c.kv * c.hd}, 2.0f),
         v = rnd(tag + ".v", Shape{keys, c.kv * c.hd});
    Pair o = out(Shape{rows, c.heads * c.hd});
    cpu().attention_cached_forward(o.cpu, q.cpu, k.cpu, v.cpu, c.past, sh);
    gpu().attention_cached_forward(o.gpu, q.gpu, k.gpu, v.gpu, c.past, sh);
    EXPECT_CLOSE(o, kFp32) << tag;
  }
}

// The tiled kernels (gpu_backend/kernels/attention_tiled.cu: blocks of 64 query or key rows,
// shared tiles of 64 rows at head dims ≤ 64 and 32 at 65…128) over several tiles on both sides,
// partial last tiles, GQA, keys ≠ queries with past, each of the three head-dim instances (≤ 32,
// ≤ 64, ≤ 128 with 1, 2, 4 threads per row), and a head dim past 128 (the cuBLAS path) — against
// the CPU; the backward run twice gives the same bits (fixed sum orders, no atomics); the cached
// forward (the same forward kernel, no lse) over several key tiles.
TEST(GpuAttention, TiledSeveralTilesGqaAndPast) {
  REQUIRE_GPU();
  struct Case {
    int64_t n, keys, past, batch, heads, kv, hd;
  };
  for (const Case c : {Case{150, 150, 0, 2, 4, 2, 40}, Case{150, 150, 0, 1, 2, 1, 128},
                       Case{130, 130, 0, 1, 3, 3, 5}, Case{70, 150, 80, 1, 6, 2, 24},
                       Case{100, 90, 20, 2, 4, 1, 64}, Case{20, 20, 0, 1, 2, 1, 136}}) {
    AttentionShape sh;
    sh.seq = c.n;
    sh.kv_seq = c.keys == c.n && c.past == 0 ? 0 : c.keys;
    sh.past = c.past;
    sh.batch = c.batch;
    sh.heads = c.heads;
    sh.kv_heads = c.kv;
    sh.head_dim = c.hd;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int64_t rows = c.n * c.batch, krows = c.keys * c.batch;
    const std::string tag = "tiled" + std::to_string(c.n) + "." + std::to_string(c.keys) + "." +
                            std::to_string(c.past) + ".hd" + std::to_string(c.hd);
    Pair q = rnd(tag + ".q", Shape{rows, c.heads * c.hd}, 2.0f),
         k = rnd(tag + ".k", Shape{krows, c.kv * c.hd}, 2.0f),
         v = rnd(tag + ".v", Shape{krows, c.kv * c.hd});
    Pair o = out(Shape{rows, c.heads * c.hd}), lse = out(Shape{c.batch, c.heads, c.n});
    cpu().attention_forward(o.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, sh);
    gpu().attention_forward(o.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, sh);
    EXPECT_CLOSE(o, kFp32) << tag;
    EXPECT_CLOSE(lse, kFp32) << tag;
    Pair dout = rnd(tag + ".dout", Shape{rows, c.heads * c.hd});
    Pair dq = out(q.cpu.shape()), dk = out(k.cpu.shape()), dv = out(v.cpu.shape());
    cpu().attention_backward(dq.cpu, dk.cpu, dv.cpu, dout.cpu, q.cpu, k.cpu, v.cpu, o.cpu, lse.cpu,
                             sh);
    gpu().attention_backward(dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu, o.gpu, lse.gpu,
                             sh);
    EXPECT_CLOSE(dq, kFp32) << tag;
    EXPECT_CLOSE(dk, kFp32) << tag;
    EXPECT_CLOSE(dv, kFp32) << tag;
    Pair dq2 = out(q.cpu.shape()), dk2 = out(k.cpu.shape()), dv2 = out(v.cpu.shape());
    gpu().attention_backward(dq2.gpu, dk2.gpu, dv2.gpu, dout.gpu, q.gpu, k.gpu, v.gpu, o.gpu,
                             lse.gpu, sh);
    EXPECT_EQ(dq2.gpu.to_host(), dq.gpu.to_host()) << tag;
    EXPECT_EQ(dk2.gpu.to_host(), dk.gpu.to_host()) << tag;
    EXPECT_EQ(dv2.gpu.to_host(), dv.gpu.to_host()) << tag;
  }
  // The cached forward: 70 new positions after 100 cached ones (3 key tiles of 64 at hd 40).
  AttentionShape sh;
  sh.seq = 70;
  sh.batch = 2;
  sh.heads = 4;
  sh.kv_heads = 2;
  sh.head_dim = 40;
  sh.scale = 1.0f / std::sqrt(40.0f);
  const int64_t past = 100, rows = sh.seq * sh.batch, keys = (past + sh.seq) * sh.batch;
  Pair q = rnd("tiled.cached.q", Shape{rows, 4 * 40}, 2.0f),
       k = rnd("tiled.cached.k", Shape{keys, 2 * 40}, 2.0f),
       v = rnd("tiled.cached.v", Shape{keys, 2 * 40});
  Pair o = out(Shape{rows, 4 * 40});
  cpu().attention_cached_forward(o.cpu, q.cpu, k.cpu, v.cpu, past, sh);
  gpu().attention_cached_forward(o.gpu, q.gpu, k.gpu, v.gpu, past, sh);
  EXPECT_CLOSE(o, kFp32) << "cached";
}

// Token ids as floats, some owned by the shard [first, first + rows) and some not.
std::vector<float> ids(int64_t n, int64_t vocab, const std::string& name) {
  std::vector<float> v(static_cast<size_t>(n));
  const auto r = random_vector(name, n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(
        std::min<int64_t>(vocab - 1, static_cast<int64_t>((r[i] + 1.0f) * 0.5f * vocab)));
  return v;
}

TEST(GpuEmbedding, ShardLookupAndPositionsForwardBackward) {
  REQUIRE_GPU();
  const int64_t vocab = 50, rows = 20, first = 15, h = 24, seq = 9, batch = 3, n = seq * batch;
  Pair id = both(Shape{n}, ids(n, vocab, "emb.ids"));
  Pair wte = rnd("emb.wte", Shape{rows, h}), o = out(Shape{n, h});
  cpu().embedding_shard_forward(o.cpu, id.cpu, wte.cpu, first);
  gpu().embedding_shard_forward(o.gpu, id.gpu, wte.gpu, first);
  EXPECT_CLOSE(o, kFp32);
  Pair dout = rnd("emb.dout", Shape{n, h}), dwte = rnd("emb.dwte", Shape{rows, h});
  cpu().embedding_shard_backward(dwte.cpu, dout.cpu, id.cpu, first);
  gpu().embedding_shard_backward(dwte.gpu, dout.gpu, id.gpu, first);
  EXPECT_CLOSE(dwte, kFp32);
  // Positions on rows [row0, row0 + 12) of the batch (a sequence-parallel shard).
  const int64_t row0 = 6, local = 12;
  Pair x = rnd("pos.x", Shape{local, h}), wpe = rnd("pos.wpe", Shape{seq, h});
  cpu().position_forward(x.cpu, wpe.cpu, batch, row0);
  gpu().position_forward(x.gpu, wpe.gpu, batch, row0);
  EXPECT_CLOSE(x, kFp32);
  Pair dwpe = rnd("pos.dwpe", Shape{seq, h}), dx = rnd("pos.dx", Shape{local, h});
  cpu().position_backward(dwpe.cpu, dx.cpu, batch, row0);
  gpu().position_backward(dwpe.gpu, dx.gpu, batch, row0);
  EXPECT_CLOSE(dwpe, kFp32);
}

TEST(GpuVocabLoss, MaxSumExpLossAndSoftmaxBackwardWithPadding) {
  REQUIRE_GPU();
  // The last shard of V = 50 padded to 3 · 17 = 51: one padding column.
  const int64_t n = 31, cols = 17;
  const VocabShard shard{34, 50};
  Pair logits = rnd("voc.logits", Shape{n, cols}, 6.0f);
  Pair targets = both(Shape{n}, ids(n, 50, "voc.targets"));
  Pair mx = out(Shape{n});
  cpu().vocab_max(mx.cpu, logits.cpu, shard);
  gpu().vocab_max(mx.gpu, logits.gpu, shard);
  EXPECT_SAME(mx);  // a maximum is exact
  Pair se = out(Shape{n}), tl = out(Shape{n});
  cpu().vocab_sum_exp_target(se.cpu, tl.cpu, logits.cpu, mx.cpu, targets.cpu, shard);
  gpu().vocab_sum_exp_target(se.gpu, tl.gpu, logits.gpu, mx.gpu, targets.gpu, shard);
  EXPECT_CLOSE(se, kFp32);
  EXPECT_SAME(tl);  // a copied logit (or 0)
  Pair loss = out(Shape{n});
  cpu().vocab_loss(loss.cpu, mx.cpu, se.cpu, tl.cpu);
  gpu().vocab_loss(loss.gpu, mx.gpu, se.gpu, tl.gpu);
  EXPECT_CLOSE(loss, kFp32);
  Pair dl = out(Shape{n, cols});
  cpu().vocab_softmax_backward(dl.cpu, logits.cpu, mx.cpu, se.cpu, targets.cpu, shard, 1.0f / n);
  gpu().vocab_softmax_backward(dl.gpu, logits.gpu, mx.gpu, se.gpu, targets.gpu, shard, 1.0f / n);
  EXPECT_CLOSE(dl, kFp32);
  cpu().vocab_softmax_backward(logits.cpu, logits.cpu, mx.cpu, se.cpu, targets.cpu, shard,
                               1.0f / n);  // aliased
  gpu().vocab_softmax_backward(logits.gpu, logits.gpu, mx.gpu, se.gpu, targets.gpu, shard,
                               1.0f / n);
  EXPECT_CLOSE(logits, kFp32);
}

TEST(GpuOptimizer, AdamWThreeSteps) {
  REQUIRE_GPU();
  const Shape s{41, 29};
  Pair p = rnd("adam.p", s), m = full(s, 0.0f), v = full(s, 0.0f);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 3; ++step) {
    Pair gr = rnd("adam.g" + std::to_string(step), s);
    cpu().adamw_step(p.cpu, gr.cpu, m.cpu, v.cpu, hp, step);
    gpu().adamw_step(p.gpu, gr.gpu, m.gpu, v.gpu, hp, step);
  }
  EXPECT_CLOSE(p, kFp32);
  EXPECT_CLOSE(m, kFp32);
  EXPECT_CLOSE(v, kFp32);
}

// ---- 1b. Native bf16 kernels against the stand-in path ------------------------------------------
// The GPU reads and writes bf16 in its kernels (native_bf16, kernels/kernel_util.cuh) instead of
// the Device front's stand-ins (widen every bf16 tensor, run the f32 kernel, round each bf16
// output once; core/device.h, "Dtypes"). The contract: the same f32 arithmetic and one rounding
// per stored element, so a native kernel's result is BITWISE the stand-in path's. The reference
// is the same CUDA device with native_bf16 false for every kernel but the GEMM
// (make_gpu_device_on_stand_ins). Inputs carry the dtypes the model gives them under --precision
// bf16 (bf16 activations, weight copies and activation gradients; f32 weight gradients,
// statistics, dropout masks and ids), and the other mixes too. Each native call must also
// allocate no tensor (no stand-in buffers: the transient bytes they cost are gone on the GPU),
// while the reference's call does.

Device& stand_in() {
  if (!g.stand_in) {
    DeviceOptions o;
    o.backend = "gpu";
    o.local_rank = g.local_rank;
    g.stand_in = make_gpu_device_on_stand_ins(o);
  }
  return *g.stand_in;
}

// The same bits on the native device (nat) and on the stand-in device (ref).
struct Twin {
  Tensor nat, ref;
};
Twin twin_of(const Shape& s, const std::vector<float>& v, Dtype d) {
  return {Tensor::from_host(gpu(), s, v, d), Tensor::from_host(stand_in(), s, v, d)};
}
// Uniform in [-a, a), keyed by name, stored in dtype d.
Twin twin(const std::string& name, const Shape& s, Dtype d, float a = 1.0f) {
  auto v = random_vector(name, s.numel());
  for (float& x : v) x *= a;
  return twin_of(s, v, d);
}
// An output that must be written: NaN first.
Twin nan_twin(const Shape& s, Dtype d) {
  return twin_of(s, std::vector<float>(static_cast<size_t>(s.numel()), kNaN), d);
}

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_host();  // bf16 widens exactly: equal floats = equal bf16 bits
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}
#define EXPECT_BITS(tw) EXPECT_EQ(bits((tw).nat), bits((tw).ref)) << #tw

constexpr Dtype kB = Dtype::bf16, kF = Dtype::f32;

// Runs fn(dev, pick) on the native device (pick(twin) = twin.nat) and then on the stand-in device
// (twin.ref); the native call must allocate nothing, the stand-in call its stand-ins.
template <class Fn>
void on_both(const char* what, Fn&& fn) {
  const int64_t before = gpu().memory().allocations;
  fn(gpu(), [](Twin& t) -> Tensor& { return t.nat; });
  EXPECT_EQ(gpu().memory().allocations, before) << what << ": the native kernel allocated";
  const int64_t ref_before = stand_in().memory().allocations;
  fn(stand_in(), [](Twin& t) -> Tensor& { return t.ref; });
  EXPECT_GT(stand_in().memory().allocations, ref_before) << what << ": no stand-in was made";
}

// Which kernels are native, as properties of the two devices' answers over every Kernel: each
// takes the model's bf16 kernels and runs natively only kernels it takes; the GPU runs every
// kernel of the bf16 step natively (the tests below compare each with the stand-in path), the
// reference only the GEMM.
TEST(GpuBf16Native, WhichKernelsAreNative) {
  REQUIRE_GPU();
  tp::testing::check_bf16_kernel_answers(gpu());
  tp::testing::check_bf16_kernel_answers(stand_in());
  for (const Kernel k : kAllKernels) {
    EXPECT_TRUE(!Gpt::bf16_kernels().contains(k) || gpu().native_bf16(k)) << kernel_name(k);
    EXPECT_EQ(stand_in().native_bf16(k), k == Kernel::gemm) << kernel_name(k);
  }
  EXPECT_FALSE(gpu().native_bf16(Kernel::attention_cached_forward));  // generation: stand-ins
  EXPECT_FALSE(gpu().takes_bf16(Kernel::adamw_step));                 // the fp32 master's update
}

TEST(GpuBf16Native, ElementwiseBiasColumnsAndRandomBitForBit) {
  REQUIRE_GPU();
  const Shape s{33, 65};
  for (const Dtype dx : {kB, kF}) {
    for (const Dtype dy : {kB, kF}) {
      if (dx == kF && dy == kF) continue;
      const std::string tag = std::string(dtype_name(dx)) + "+" + dtype_name(dy);
      Twin x = twin("n.x", s, dx, 3.0f), y = twin("n.y", s, dy, 2.0f), m = twin("n.m", s, kF);
      Twin p = nan_twin(s, dy), f = nan_twin(s, dy);
      on_both("elementwise", [&](Device& dev, auto&& T) {
        dev.fill(T(f), 1.3f);
        dev.scale(T(y), -0.37f);
        dev.axpy(0.71f, T(x), T(y));  // the residual add
        dev.mul(T(x), T(m), T(p));    // dropout: an f32 mask
        dev.mul(T(p), T(m), T(p));    // y may alias x
      });
      EXPECT_BITS(f) << tag;
      EXPECT_BITS(y) << tag;
      EXPECT_BITS(p) << tag;
    }
  }
  Twin q = twin("n.sumsq", Shape{1001, 17}, kB, 3.0f);
  double sn = 0, sr = 0;
  on_both("sum_squares",
          [&](Device& dev, auto&& T) { (&dev == &gpu() ? sn : sr) = dev.sum_squares(T(q)); });
  EXPECT_EQ(sn, sr);

  for (const Dtype dgrad : {kF, kB}) {  // an f32 bias gradient (the model's) and a bf16 one
    Twin y = twin("n.bias.y", Shape{3, 7, 45}, kB), bias = twin("n.bias.b", Shape{45}, kB);
    Twin db = twin("n.bias.db", Shape{45}, dgrad), dy = twin("n.bias.dy", Shape{517, 45}, kB);
    on_both("bias", [&](Device& dev, auto&& T) {
      dev.add_bias(T(y), T(bias));
      dev.add_bias_backward(T(db), T(dy));  // accumulates
    });
    EXPECT_BITS(y);
    EXPECT_BITS(db) << dtype_name(dgrad);
  }
  for (const Dtype ds : {kB, kF}) {
    for (const Dtype dd : {kB, kF}) {
      if (ds == kF && dd == kF) continue;
      Twin src = twin("n.cols.src", Shape{29, 40}, ds), dst = twin("n.cols.dst", Shape{29, 23}, dd);
      on_both("copy_columns",
              [&](Device& dev, auto&& T) { dev.copy_columns(T(src), 11, T(dst), 5, 13); });
      EXPECT_BITS(dst) << dtype_name(ds) << " -> " << dtype_name(dd);
    }
  }
  const RngKey key = RngKey::from(kSeed, "transformer.h.0.mlp.c_fc.weight");
  Twin u = nan_twin(Shape{19, 33}, kB), nrm = nan_twin(Shape{19, 33}, kB),
       mask = nan_twin(Shape{19, 33}, kB);
  on_both("random", [&](Device& dev, auto&& T) {
    dev.fill_random(T(u), key, GlobalIndex::columns(96, 40), Distribution::uniform(-0.5f, 2.0f));
    dev.fill_random(T(nrm), key, GlobalIndex::rows(33, 17), Distribution::normal(0.1f, 0.02f));
    dev.dropout_mask(T(mask), key, GlobalIndex::whole(33), 0.1f);
  });
  EXPECT_BITS(u);
  EXPECT_BITS(nrm);
  EXPECT_BITS(mask);
}

TEST(GpuBf16Native, ActivationsAndNormsBitForBit) {
  REQUIRE_GPU();
  const Shape s{67, 96};
  Twin x = twin("n.act.x", s, kB, 4.0f), dy = twin("n.act.dy", s, kB), y = nan_twin(s, kB),
       dx = nan_twin(s, kB);
  Twin gt = twin("n.act.g", s, kB, 4.0f), u = twin("n.act.u", s, kB, 2.0f), sy = nan_twin(s, kB),
       dg = nan_twin(s, kB), du = nan_twin(s, kB);
  on_both("activations", [&](Device& dev, auto&& T) {
    dev.gelu_forward(T(y), T(x));
    dev.gelu_backward(T(dx), T(dy), T(x));
    dev.swiglu_forward(T(sy), T(gt), T(u));
    dev.swiglu_backward(T(dg), T(du), T(dy), T(gt), T(u));
  });
  EXPECT_BITS(y);
  EXPECT_BITS(dx);
  EXPECT_BITS(sy);
  EXPECT_BITS(dg);
  EXPECT_BITS(du);

  for (const int64_t h : {48, 257}) {
    for (const Dtype dgrad : {kF, kB}) {  // f32 weight gradients (the model's), and bf16 ones
      const int64_t rows = 37;
      const Shape rs{rows, h};
      const std::string tag = "h=" + std::to_string(h) + " dw " + dtype_name(dgrad);
      Twin nx = twin("n.ln.x" + std::to_string(h), rs, kB, 3.0f), w = twin("n.ln.w", Shape{h}, kB),
           b = twin("n.ln.b", Shape{h}, kB), ndy = twin("n.ln.dy", rs, kB);
      Twin ny = nan_twin(rs, kB), mean = nan_twin(Shape{rows}, kF),
           rstd = nan_twin(Shape{rows}, kF);
      Twin ndx = nan_twin(rs, kB), dw = twin("n.ln.dw", Shape{h}, dgrad),
           db = twin("n.ln.db", Shape{h}, dgrad);
      Twin ry = nan_twin(rs, kB), rr = nan_twin(Shape{rows}, kF), rdx = nan_twin(rs, kB),
           rdw = twin("n.rms.dw", Shape{h}, dgrad);
      on_both("norms", [&](Device& dev, auto&& T) {
        dev.layernorm_forward(T(ny), T(mean), T(rstd), T(nx), T(w), T(b), 1e-5f);
        dev.layernorm_backward(T(ndx), T(dw), T(db), T(ndy), T(nx), T(w), T(mean), T(rstd));
        dev.rmsnorm_forward(T(ry), T(rr), T(nx), T(w), 1e-5f);
        dev.rmsnorm_backward(T(rdx), T(rdw), T(ndy), T(nx), T(w), T(rr));
      });
      EXPECT_BITS(ny) << tag;
      EXPECT_BITS(mean) << tag;
      EXPECT_BITS(rstd) << tag;
      EXPECT_BITS(ndx) << tag;
      EXPECT_BITS(dw) << tag;
      EXPECT_BITS(db) << tag;
      EXPECT_BITS(ry) << tag;
      EXPECT_BITS(rr) << tag;
      EXPECT_BITS(rdx) << tag;
      EXPECT_BITS(rdw) << tag;
    }
  }
}

TEST(GpuBf16Native, EmbeddingPositionsAndVocabLossBitForBit) {
  REQUIRE_GPU();
  const int64_t vocab = 50, rows = 20, first = 15, h = 24, seq = 9, batch = 3, n = seq * batch;
  for (const Dtype dgrad : {kF, kB}) {
    Twin id = twin_of(Shape{n}, ids(n, vocab, "emb.ids"), kF);
    Twin wte = twin("n.emb.wte", Shape{rows, h}, kB), o = nan_twin(Shape{n, h}, kB);
    Twin dout = twin("n.emb.dout", Shape{n, h}, kB),
         dwte = twin("n.emb.dwte", Shape{rows, h}, dgrad);
    const int64_t row0 = 6, local = 12;
    Twin x = twin("n.pos.x", Shape{local, h}, kB), wpe = twin("n.pos.wpe", Shape{seq, h}, kB);
    Twin dwpe = twin("n.pos.dwpe", Shape{seq, h}, dgrad),
         pdx = twin("n.pos.dx", Shape{local, h}, kB);
    on_both("embedding", [&](Device& dev, auto&& T) {
      dev.embedding_shard_forward(T(o), T(id), T(wte), first);
      dev.embedding_shard_backward(T(dwte), T(dout), T(id), first);
      dev.position_forward(T(x), T(wpe), batch, row0);
      dev.position_backward(T(dwpe), T(pdx), batch, row0);
    });
    EXPECT_BITS(o);
    EXPECT_BITS(dwte) << dtype_name(dgrad);
    EXPECT_BITS(x);
    EXPECT_BITS(dwpe) << dtype_name(dgrad);
  }
  // The last shard of V = 50 padded to 3 · 17 = 51; bf16 logits and gradient, f32 statistics.
  const int64_t rows2 = 31, cols = 17;
  const VocabShard shard{34, 50};
  Twin logits = twin("n.voc.logits", Shape{rows2, cols}, kB, 6.0f);
  Twin targets = twin_of(Shape{rows2}, ids(rows2, 50, "voc.targets"), kF);
  Twin mx = nan_twin(Shape{rows2}, kF), se = nan_twin(Shape{rows2}, kF),
       tl = nan_twin(Shape{rows2}, kF), loss = nan_twin(Shape{rows2}, kF),
       dl = nan_twin(Shape{rows2, cols}, kB);
  on_both("vocab", [&](Device& dev, auto&& T) {
    dev.vocab_max(T(mx), T(logits), shard);
    dev.vocab_sum_exp_target(T(se), T(tl), T(logits), T(mx), T(targets), shard);
    dev.vocab_loss(T(loss), T(mx), T(se), T(tl));
    dev.vocab_softmax_backward(T(dl), T(logits), T(mx), T(se), T(targets), shard, 1.0f / rows2);
    dev.vocab_softmax_backward(T(logits), T(logits), T(mx), T(se), T(targets), shard,
                               1.0f / rows2);  // aliased, as the model does
  });
  EXPECT_BITS(mx);
  EXPECT_BITS(se);
  EXPECT_BITS(tl);
  EXPECT_BITS(loss);
  EXPECT_BITS(dl);
  EXPECT_BITS(logits);
}

// ---- 2. and 3. The model: gradients of one step, a 20-step loss curve ---------------------------

GptConfig small_gpt(bool variant) {
  GptConfig c;
  c.layers = 2;
  c.hidden = 48;
  c.heads = 12;
  c.ffn = 96;
  c.vocab = 64;
  c.seq = 8;
  c.init_std = 0.1f;  // attention far from uniform
  if (variant) {      // the other code paths: untied head, SwiGLU, RMSNorm, GQA, dropout
    c.tied = false;
    c.act = Activation::SwiGlu;
    c.norm = NormKind::RmsNorm;
    c.heads = 24;
    c.kv_heads = 12;
    c.dropout = 0.1f;
  }
  return c;
}

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The GPU model uses the world communicator too: MpiCommunicator stages its tensors through the
// host, so np = 2, 3 run on one GPU. Gradients are gathered (collective, same order everywhere).
// tol: loss and gradients, relative; key_bias_tol: the key bias's gradient (zero in exact arithmetic)
// against the other attention biases' scale.
// Returns the largest relative gradient difference (the key bias aside).
double check_model(const GptConfig& cfg, double tol = kModel, double key_bias_tol = 1e-5) {
  Gpt on_gpu(gpu(), world(), cfg), on_cpu(cpu(), world(), cfg);
  on_gpu.init(kSeed);
  on_cpu.init(kSeed);
  const Batch b = MarkovSource(cfg.vocab, kSeed).batch(0, 3, cfg.seq);
  const float lg = on_gpu.forward(b, kSeed, 0), lc = on_cpu.forward(b, kSeed, 0);
  on_gpu.backward();
  on_cpu.backward();
  on_gpu.finish_gradients();
  on_cpu.finish_gradients();
  EXPECT_LE(std::abs(lg - lc), tol * std::abs(lc)) << lg << " vs " << lc;
  double worst = 0;
  const ParamList& pg = on_gpu.params();
  const ParamList& pc = on_cpu.params();
  EXPECT_EQ(pg.size(), pc.size());
  // The key bias has zero gradient in exact arithmetic (softmax ignores a constant per row): it is
  // compared to the scale of the other attention-bias gradients instead (see model_test_helpers.h).
  double bias_scale = 0;
  std::vector<std::vector<float>> gc(pc.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    gc[i] = gather_real(world(), pc[i], pc[i].grad);
    if (ends_with(pc[i].name, ".q.bias") || ends_with(pc[i].name, ".v.bias"))
      bias_scale = std::max(bias_scale, norm2(gc[i]));
  }
  for (size_t i = 0; i < std::min(pg.size(), pc.size()); ++i) {
    const auto gg = gather_real(world(), pg[i], pg[i].grad);
    EXPECT_EQ(pg[i].name, pc[i].name);
    if (ends_with(pc[i].name, ".k.bias")) {
      EXPECT_LE(norm2(gg), key_bias_tol * bias_scale) << pc[i].name;
      continue;
    }
    EXPECT_GT(norm2(gc[i]), 0.0) << pc[i].name;
    EXPECT_LE(rel_error(gg, gc[i]), tol) << pc[i].name;
    worst = std::max(worst, rel_error(gg, gc[i]));
  }
  return worst;
}

TEST(GpuModel, GptGradientsMatchCpuTiedGeluLayerNorm) {
  REQUIRE_GPU();
  check_model(small_gpt(false));
}

TEST(GpuModel, GptGradientsMatchCpuUntiedSwigluRmsNormGqaDropout) {
  REQUIRE_GPU();
  check_model(small_gpt(true));
}

// The overlap modes on the GPU device: async collectives, the collective matmul's ring steps
// (send_recv_async) and chunked's all-reduces of row blocks (views of one tensor) ordered against
// its kernels (both sides run the same mode).
TEST(GpuModel, GptGradientsMatchCpuWithOverlapAsyncAndSpRing) {
  REQUIRE_GPU();
  GptConfig cfg = small_gpt(false);
  cfg.seq = 12;  // divisible by t = 1 … 4 for SP
  cfg.overlap = Overlap::Async;
  check_model(cfg);
  cfg.sp = true;
  cfg.overlap = Overlap::Ring;
  check_model(cfg);
  cfg.sp = false;
  cfg.overlap =
      Overlap::Chunked;  // plain TP: the row blocks' all-reduces under the next block's GEMM
  check_model(cfg);
}

// --precision bf16 on both backends: the same rounding points (bf16 weight copies, activations
// and gradients of activations, each rounded once where a kernel stores it; GEMMs read bf16 and
// accumulate in f32), so they differ only where the backends' f32 kernels differ (sum orders,
// ~1e-6 relative) and a value that close to a rounding boundary rounds to the neighbouring bf16
// (one ulp, 2^-8 relative), which the following kernels carry on. The bound is
// tests/model/test_precision_mpi.cpp's kGradBound, 0.05 (for loss and gradients; its derivation is there);
// the key bias's gradient, zero in exact arithmetic, is rounding noise within u = 2^-8 of the
// other attention biases' scale.
TEST(GpuModel, Bf16GradientsMatchCpuBf16) {
  REQUIRE_GPU();
  constexpr double kBf16 = 0.05, kU = 1.0 / 256;
  double worst = 0;
  for (bool swiglu : {false, true}) {
    GptConfig cfg = small_gpt(swiglu);
    cfg.precision = Precision::Bf16;
    worst = std::max(worst, check_model(cfg, kBf16, kU));
  }
  GptConfig cfg = small_gpt(false);
  cfg.precision = Precision::Bf16;
  cfg.seq = 12;  // divisible by t = 1 … 4 for SP
  cfg.sp = true;
  cfg.overlap = Overlap::Ring;
  worst = std::max(worst, check_model(cfg, kBf16, kU));
  if (world().rank() == 0)
    std::printf("[ bf16     ] np %d: GPU bf16 vs CPU bf16, largest gradient difference %.2e\n",
                world().size(), worst);
}

// The attention: bf16 q, k, v, out, dout and gradients (the model's) with the f32 lse, and f32
// out and dout beside bf16 q, k, v; MHA and GQA (dk, dv summed over a group before their one
// rounding).
TEST(GpuBf16Native, AttentionForwardBackwardBitForBit) {
  REQUIRE_GPU();
  struct Case {
    int64_t seq, batch, heads, kv, hd;
    Dtype out;  // out and dout
  };
  for (const Case c :
       {Case{13, 2, 4, 4, 8, kB}, Case{13, 2, 4, 2, 8, kB}, Case{9, 3, 6, 2, 16, kF}}) {
    AttentionShape sh;
    sh.seq = c.seq;
    sh.batch = c.batch;
    sh.heads = c.heads;
    sh.kv_heads = c.kv;
    sh.head_dim = c.hd;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int64_t n = c.seq * c.batch;
    const std::string tag = "n.attn" + std::to_string(c.seq) + "." + std::to_string(c.kv);
    Twin q = twin(tag + ".q", Shape{n, c.heads * c.hd}, kB, 2.0f),
         k = twin(tag + ".k", Shape{n, c.kv * c.hd}, kB, 2.0f),
         v = twin(tag + ".v", Shape{n, c.kv * c.hd}, kB),
         dout = twin(tag + ".dout", q.nat.shape(), c.out);
    Twin o = nan_twin(q.nat.shape(), c.out), lse = nan_twin(Shape{c.batch, c.heads, c.seq}, kF);
    Twin dq = nan_twin(q.nat.shape(), kB), dk = nan_twin(k.nat.shape(), kB),
         dv = nan_twin(v.nat.shape(), kB);
    on_both("attention", [&](Device& dev, auto&& T) {
      dev.attention_forward(T(o), T(lse), T(q), T(k), T(v), sh);
      dev.attention_backward(T(dq), T(dk), T(dv), T(dout), T(q), T(k), T(v), T(o), T(lse), sh);
    });
    EXPECT_BITS(o) << tag;
    EXPECT_BITS(lse) << tag;
    EXPECT_BITS(dq) << tag;
    EXPECT_BITS(dk) << tag;
    EXPECT_BITS(dv) << tag;
  }
}

// --precision bf16 on the native kernels against the same model on the stand-in device (section
// 1b): the loss and every gradient of one step bit for bit — the contract over a whole forward and
// backward (both devices share the native GEMM), plain and with
// the variant's SwiGLU, RMSNorm, GQA, untied head and dropout, and with SP.
TEST(GpuBf16Native, GptStepBitForBitWithTheStandInPath) {
  REQUIRE_GPU();
  for (int c = 0; c < 3; ++c) {
    GptConfig cfg = small_gpt(c == 1);
    cfg.precision = Precision::Bf16;
    if (c == 2) {
      cfg.seq = 12;  // divisible by t = 1 … 4 for SP
      cfg.sp = true;
    }
    Gpt nat(gpu(), world(), cfg), ref(stand_in(), world(), cfg);
    nat.init(kSeed);
    ref.init(kSeed);
    const Batch b = MarkovSource(cfg.vocab, kSeed).batch(0, 3, cfg.seq);
    const float ln = nat.forward(b, kSeed, 0), lr = ref.forward(b, kSeed, 0);
    nat.backward();
    ref.backward();
    nat.finish_gradients();
    ref.finish_gradients();
    EXPECT_EQ(ln, lr) << "case " << c;
    const ParamList& pn = nat.params();
    const ParamList& pr = ref.params();
    ASSERT_EQ(pn.size(), pr.size());
    for (size_t i = 0; i < pn.size(); ++i)
      EXPECT_EQ(gather_real(world(), pn[i], pn[i].grad), gather_real(world(), pr[i], pr[i].grad))
          << pn[i].name << " case " << c;
  }
}

TEST(GpuModel, TwentyStepLossCurveMatchesCpu) {
  REQUIRE_GPU();
  GptConfig cfg = small_gpt(false);
  cfg.init_std = 0.02f;  // the default: the curve goes down within 20 steps
  cfg.dropout = 0.1f;
  AdamWParams hp;
  hp.lr = 1e-2f;
  const MarkovSource data(cfg.vocab, kSeed);
  Gpt mg(gpu(), world(), cfg), mc(cpu(), world(), cfg);
  mg.init(kSeed);
  mc.init(kSeed);
  AdamW og(gpu(), mg.params(), hp), oc(cpu(), mc.params(), hp);
  std::vector<float> lg, lc;
  for (int64_t s = 0; s < 20; ++s) {
    const Batch b = data.batch(s, 4, cfg.seq);
    lg.push_back(train_step(world(), gpu(), mg, og, b, kSeed, s, hp.lr, 1.0f).loss);
    lc.push_back(train_step(world(), cpu(), mc, oc, b, kSeed, s, hp.lr, 1.0f).loss);
  }
  for (size_t s = 0; s < lc.size(); ++s)
    EXPECT_LE(std::abs(lg[s] - lc[s]), kModel * lc[s])
        << "step " << s << ": " << lg[s] << " vs " << lc[s];
  EXPECT_LT(lc.back(), lc.front()) << "the model did not learn";
}

// The memory stack on the GPU device (issue 22): one train_step (no clipping) with --recompute
// selective and full against none, dropout on: every gradient BITWISE equal (the rerun uses the
// same kernels and counter-keyed masks on the same device); --micro-batches 2 against 1 (dropout
// off): within 1e-5 relative (the micro-batches' partial sums add in another order); plain TP with
// --overlap async, SP with ring. The memory ledger holds what block_activation_bytes says, at the
// micro-batch size.
std::vector<float> gpu_step_gradients(const GptConfig& cfg, int micro_batches) {
  Gpt model(gpu(), world(), cfg);
  model.init(kSeed);
  AdamW opt(gpu(), model.params(), AdamWParams{});
  StepOptions so;
  so.micro_batches = micro_batches;
  const int64_t B = 4;
  train_step(world(), gpu(), model, opt, MarkovSource(cfg.vocab, kSeed).batch(0, B, cfg.seq), kSeed,
             0, 1e-3f, 0.0f, {}, so);
  EXPECT_EQ(model.memory().layer_bytes(0),
            block_activation_bytes(cfg, cfg.seq, B / micro_batches, world().size()))
      << recompute_name(cfg.recompute) << " m " << micro_batches;
  std::vector<float> all;
  for (const Param& p : model.params()) {
    const std::vector<float> g = gather_real(world(), p, p.grad);
    all.insert(all.end(), g.begin(), g.end());
  }
  return all;
}

TEST(GpuModel, RecomputeAndMicroBatchesGiveTheGradientsOfNone) {
  REQUIRE_GPU();
  for (bool sp : {false, true}) {
    GptConfig cfg = small_gpt(false);
    cfg.seq = 12;  // divisible by t = 1 … 4 for SP
    cfg.sp = sp;
    cfg.overlap =
        sp ? Overlap::Ring : Overlap::Async;  // both overlap modes' collectives in the rerun
    cfg.dropout = 0.1f;
    const std::vector<float> none = gpu_step_gradients(cfg, 1);
    for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
      GptConfig r = cfg;
      r.recompute = mode;
      const std::vector<float> got = gpu_step_gradients(r, 1);
      ASSERT_EQ(got.size(), none.size());
      EXPECT_EQ(std::memcmp(got.data(), none.data(), got.size() * sizeof(float)), 0)
          << "--recompute " << recompute_name(mode) << (sp ? " --sp" : "") << ": not bitwise (rel "
          << rel_error(got, none) << ")";
    }
    cfg.dropout = 0.0f;  // micro-batches key the masks by the micro-batch's rows
    const std::vector<float> whole = gpu_step_gradients(cfg, 1);
    EXPECT_LE(rel_error(gpu_step_gradients(cfg, 2), whole), 1e-5) << (sp ? "--sp" : "");
  }
}

// ---- 4. Collectives on GPU tensors --------------------------------------------------------------

std::vector<float> iota(int64_t n, float start, float step) {
  return tp::testing::iota_vector(n, start, step);
}

// Every collective of `c`, on tensors of `dev`, with small integers (exact). Collective: every
// rank makes the same calls; only EXPECT_* after the first.
void check_collectives(Communicator& c, Device& dev) {
  const int t = c.size(), r = c.rank();
  const int64_t n = 12;
  auto tri = [&](int64_t count, int64_t first) {
    std::vector<float> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[i] = static_cast<float>((first + i + 1) * t * (t + 1) / 2);
    return v;
  };
  const size_t ledger0 = c.ledger().records().size();
  // all_reduce sum, max; sync and async. The input of the first is made by a kernel just before
  // the call (no host synchronisation between them): the collective must wait for it.
  Tensor x = Tensor::from_host(dev, Shape{n}, iota(n, 0.5f * (r + 1), 0.5f * (r + 1)));
  dev.scale(x, 2.0f);
  c.all_reduce(x);
  EXPECT_EQ(x.to_host(), tri(n, 0)) << c.name() << " all_reduce";
  Tensor mx = Tensor::from_host(dev, Shape{n}, iota(n, 10.0f * r, -1.0f));
  c.all_reduce(mx, ReduceOp::Max);
  EXPECT_EQ(mx.to_host(), iota(n, 10.0f * (t - 1), -1.0f)) << c.name() << " all_reduce max";
  Tensor xa = Tensor::from_host(dev, Shape{n}, iota(n, r + 1.0f, r + 1.0f));
  auto w = c.all_reduce_async(xa);
  Tensor other = Tensor::from_host(dev, Shape{n}, iota(n, 0.0f, 1.0f));
  dev.scale(other, 2.0f);  // compute while the all-reduce may still run
  w->wait();
  EXPECT_TRUE(w->test());
  EXPECT_EQ(xa.to_host(), tri(n, 0)) << c.name() << " all_reduce_async";
  EXPECT_EQ(other.to_host(), iota(n, 0.0f, 2.0f));
  // A Work destroyed without wait() still completes (the result lands in the tensor).
  Tensor xd = Tensor::from_host(dev, Shape{n}, iota(n, r + 1.0f, r + 1.0f));
  c.all_reduce_async(xd);
  EXPECT_EQ(xd.to_host(), tri(n, 0)) << c.name() << " all_reduce_async, Work dropped";
  // all_gather, reduce_scatter; sync and async.
  for (int async = 0; async < 2; ++async) {
    Tensor shard = Tensor::from_host(dev, Shape{2, 3}, iota(6, 100.0f * r, 1.0f));
    Tensor whole(dev, Shape{2 * t, 3});
    if (async) {
      auto wk = c.all_gather_async(shard, whole);
      while (!wk->test()) {
      }
      wk->wait();
    } else {
      c.all_gather(shard, whole);
    }
    std::vector<float> want;
    for (int q = 0; q < t; ++q)
      for (int i = 0; i < 6; ++i) want.push_back(100.0f * q + i);
    EXPECT_EQ(whole.to_host(), want) << c.name() << " all_gather async=" << async;
    Tensor fullv = Tensor::from_host(dev, Shape{3 * t}, iota(3 * t, r + 1.0f, r + 1.0f));
    Tensor part(dev, Shape{3});
    if (async)
      c.reduce_scatter_async(fullv, part)->wait();
    else
      c.reduce_scatter(fullv, part);
    EXPECT_EQ(part.to_host(), tri(3, 3 * r)) << c.name() << " reduce_scatter async=" << async;
  }
  // broadcast from every root.
  for (int root = 0; root < t; ++root) {
    Tensor bx = Tensor::from_host(dev, Shape{5}, iota(5, 7.0f * r, 1.0f));
    c.broadcast(bx, root);
    EXPECT_EQ(bx.to_host(), iota(5, 7.0f * root, 1.0f)) << c.name() << " broadcast root " << root;
  }
  // send_recv: one ring step to the right.
  Tensor s = Tensor::from_host(dev, Shape{4}, iota(4, 10.0f * r, 1.0f)), rv(dev, Shape{4});
  c.send_recv(s, (r + 1) % t, rv, (r + t - 1) % t);
  EXPECT_EQ(rv.to_host(), iota(4, 10.0f * ((r + t - 1) % t), 1.0f)) << c.name() << " send_recv";
  // send_recv_async: the step to the left in flight while a kernel runs; then one dropped.
  Tensor ra(dev, Shape{4}), rd(dev, Shape{4});
  auto ws = c.send_recv_async(s, (r + t - 1) % t, ra, (r + 1) % t);
  dev.scale(other, 0.5f);
  ws->wait();
  EXPECT_TRUE(ws->test());
  EXPECT_EQ(ra.to_host(), iota(4, 10.0f * ((r + 1) % t), 1.0f)) << c.name() << " send_recv_async";
  EXPECT_EQ(other.to_host(), iota(n, 0.0f, 1.0f));
  c.send_recv_async(s, (r + 1) % t, rd, (r + t - 1) % t);
  EXPECT_EQ(rd.to_host(), iota(4, 10.0f * ((r + t - 1) % t), 1.0f))
      << c.name() << " send_recv_async, Work dropped";
  c.barrier();
  // split: even and odd ranks, reversed order; an all-reduce of the rank in each group.
  auto sub = c.split(r % 2, -r);
  const int size = (t + 1 - r % 2) / 2;
  EXPECT_EQ(sub->size(), size);
  Tensor sr = Tensor::from_host(dev, Shape{1}, {static_cast<float>(r)});
  sub->all_reduce(sr);
  float want_sum = 0;
  for (int q = r % 2; q < t; q += 2) want_sum += static_cast<float>(q);
  EXPECT_EQ(sr.to_host(), std::vector<float>{want_sum}) << c.name() << " split";
  EXPECT_EQ(sub->rank(), (size - 1) - r / 2) << "ordered by key = -rank";
  sub->barrier();
  // The ledger recorded every call (barrier excluded), with its op.
  const auto& rec = c.ledger().records();
  EXPECT_EQ(rec.size() - ledger0, 4u + 4u + static_cast<size_t>(t) + 3u);
  if (rec.size() > ledger0 + 1) {
    EXPECT_EQ(rec[ledger0].op, "all_reduce");
    EXPECT_EQ(rec[ledger0 + 1].op, "all_reduce_max");
  }
}

// The NCCL communicator over the world, made once; null (with g.nccl_skip saying why) when the
// ranks share a GPU.
Communicator* nccl_world() {
  if (!g.nccl_tried) {
    g.nccl_tried = true;
    try {
      g.nccl = make_nccl_communicator(MPI_COMM_WORLD, gpu());
    } catch (const Error& e) {
      if (!e.is_bad_input()) throw;
      g.nccl_skip = e.what();  // raised on every rank alike (the check is agreed over the group)
    }
  }
  return g.nccl.get();
}

TEST(GpuCollectives, NcclEveryCollective) {
  REQUIRE_GPU();
  if (!nccl_world()) GTEST_SKIP() << g.nccl_skip;
  EXPECT_EQ(g.nccl->name().rfind("nccl", 0), 0u) << g.nccl->name();
  check_collectives(*g.nccl, gpu());
}

TEST(GpuCollectives, NcclPointToPoint) {
  REQUIRE_GPU();
  if (!nccl_world()) GTEST_SKIP() << g.nccl_skip;
  tp::testing::check_point_to_point(*g.nccl, gpu());
}

TEST(GpuCollectives, MpiHostStagedEveryCollective) {
  REQUIRE_GPU();
  MpiCommunicator c(MPI_COMM_WORLD, false);
  check_collectives(c, gpu());
  tp::testing::check_point_to_point(c, gpu());
}

// all_to_all_v with uneven counts, f32 and bf16 (tp::testing::check_all_to_all_v): NCCL's grouped
// ncclSend/ncclRecv with the self-block a device copy, and MPI_Ialltoallv on host-staged copies.
TEST(GpuCollectives, NcclAllToAllV) {
  REQUIRE_GPU();
  if (!nccl_world()) GTEST_SKIP() << g.nccl_skip;
  for (unsigned seed : {1u, 2u}) tp::testing::check_all_to_all_v(*g.nccl, gpu(), seed);
}

TEST(GpuCollectives, MpiHostStagedAllToAllV) {
  REQUIRE_GPU();
  MpiCommunicator c(MPI_COMM_WORLD, false);
  tp::testing::check_all_to_all_v(c, gpu(), 3);
}

// bf16 collectives (ncclBfloat16; MPI's user op on the host-staged copy): the bound and the checks
// of tp::testing::check_bf16_collectives (test_util.h).
TEST(GpuCollectives, NcclBf16WithinTheRoundingBound) {
  REQUIRE_GPU();
  if (!nccl_world()) GTEST_SKIP() << g.nccl_skip;
  tp::testing::check_bf16_collectives(*g.nccl, gpu());
}

TEST(GpuCollectives, MpiHostStagedBf16WithinTheRoundingBound) {
  REQUIRE_GPU();
  MpiCommunicator c(MPI_COMM_WORLD, false);
  tp::testing::check_bf16_collectives(c, gpu());
}

TEST(GpuCollectives, NcclRejectsACpuDevice) {
  REQUIRE_GPU();
  try {
    make_nccl_communicator(MPI_COMM_WORLD, cpu());
    ADD_FAILURE() << "make_nccl_communicator accepted a CPU device";
  } catch (const Error& e) {
    EXPECT_TRUE(e.is_bad_input()) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
  }
}

// Context parallelism on the GPU (issue 42): cp = np, the ring's K, V and dK, dV on the NCCL
// communicator (where the ranks have a GPU each; else the host-staged MPI one), 3 training steps
// in both layouts against one CPU device on the whole batch: the losses within kModel.
TEST(GpuModel, ContextParallelRingMatchesOneCpuDevice) {
  REQUIRE_GPU();
  if (world().size() == 1) GTEST_SKIP() << "no ring at cp = 1";
  Communicator& comm = nccl_world() ? *nccl_world() : world();
  GptConfig cfg = gpt_shape(2, 24, 4, 2, 48, 32, 24);  // S = 24 splits for cp = 2, 3, 4
  cfg.init_std = 0.1f;
  AdamWParams hp;
  hp.lr = 1e-2f;
  const MarkovSource data(cfg.vocab, kSeed);
  for (CpLayout layout : {CpLayout::Zigzag, CpLayout::Contiguous}) {
    ProcessGrid grid(comm, GridAxes{1, 1, comm.size()});
    SerialCommunicator solo;
    Gpt mg(gpu(), grid.tp(), cfg), mc(cpu(), solo, cfg);
    mg.set_context_parallel(grid.cp(), layout);
    mg.init(kSeed);
    mc.init(kSeed);
    AdamW og(gpu(), mg.params(), hp), oc(cpu(), mc.params(), hp);
    ProcessGrid one(solo, 1);
    for (int64_t s = 0; s < 3; ++s) {
      const Batch b = data.batch(s, 2, cfg.seq);
      const float lg = train_step(grid, gpu(), mg, og, b, kSeed, s, hp.lr, 1.0f).loss;
      const float lc = train_step(one, cpu(), mc, oc, b, kSeed, s, hp.lr, 1.0f).loss;
      EXPECT_LE(std::abs(lg - lc), kModel * lc)
          << cp_layout_name(layout) << " step " << s << ": " << lg << " vs " << lc;
    }
  }
}

// Expert parallelism on the GPU (issue 43): ep = dp = np, 12 experts (E/ep whole on each rank),
// the tokens dispatched and combined by all_to_all_v on the NCCL communicator (where the ranks
// have a GPU each; else the host-staged MPI one), 3 training steps against one CPU device running
// every expert on the whole batch: the losses within kModel.
TEST(GpuModel, ExpertParallelMatchesOneCpuDevice) {
  REQUIRE_GPU();
  if (world().size() == 1) GTEST_SKIP() << "no all-to-all at ep = 1";
  Communicator& comm = nccl_world() ? *nccl_world() : world();
  const int ep = comm.size();
  GptConfig cfg = gpt_shape(2, 24, 4, 2, 48, 32, 16);
  cfg.init_std = 0.1f;
  cfg.experts = 12;  // divisible by ep = 2, 3, 4
  cfg.top_k = 2;
  cfg.aux_loss_coef = 0.05;
  AdamWParams hp;
  hp.lr = 1e-2f;
  const MarkovSource data(cfg.vocab, kSeed);
  ProcessGrid grid(comm, GridAxes{ep, 1, 1, ep});
  SerialCommunicator solo;
  Gpt mg(gpu(), grid.tp(), cfg), mc(cpu(), solo, cfg);
  mg.set_expert_parallel(grid.ep());
  mg.init(kSeed);
  mc.init(kSeed);
  AdamW og(gpu(), mg.params(), hp), oc(cpu(), mc.params(), hp);
  ProcessGrid one(solo, 1);
  for (int64_t s = 0; s < 3; ++s) {
    const Batch b = data.batch(s, 12, cfg.seq);
    const float lg = train_step(grid, gpu(), mg, og, b, kSeed, s, hp.lr, 1.0f).loss;
    const float lc = train_step(one, cpu(), mc, oc, b, kSeed, s, hp.lr, 1.0f).loss;
    EXPECT_LE(std::abs(lg - lc), kModel * lc)
        << "ep " << ep << " step " << s << ": " << lg << " vs " << lc;
  }
}

}  // namespace
