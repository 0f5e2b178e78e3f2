// onednn_gemm.cpp — bf16 matmul through oneDNN with a primitive cache, and the choice of the CPU's
// bf16 GEMM (onednn_gemm.h). Without TP_HAVE_ONEDNN only the choice is compiled (always sgemm).
#include "onednn_gemm.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

#ifdef TP_HAVE_ONEDNN
#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#endif

namespace tp::cpu {

#ifdef TP_HAVE_ONEDNN
namespace {

// What makes one primitive: transposes, sizes, strides, C's dtype, alpha and beta (bit patterns),
// and the thread count it was made for.
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                       float, float, int>;

struct Entry {
  bool ok = false;  // false: oneDNN refused (no kernel, or only its reference one)
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
  std::string impl;
};

struct Onednn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, std::shared_ptr<const Entry>> cache;
  std::mutex mutex;
};

Onednn& onednn() {
  static Onednn o;
  return o;
}

// A row-major (rows, cols) matrix read transposed or not from storage with row stride ld.
dnnl::memory::desc matrix(int64_t rows, int64_t cols, int64_t ld, bool trans,
                          dnnl::memory::data_type dt) {
  using dims = dnnl::memory::dims;
  return dnnl::memory::desc(dims{rows, cols}, dt, trans ? dims{1, ld} : dims{ld, 1});
}

Entry make_entry(const Key& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, c_bf16, alpha, beta, threads] = key;
  (void)threads;
  using dt = dnnl::memory::data_type;
  Entry e;
  e.a = matrix(m, k, lda, ta, dt::bf16);
  e.b = matrix(k, n, ldb, tb, dt::bf16);
  e.c = matrix(m, n, ldc, false, c_bf16 ? dt::bf16 : dt::f32);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attr, onednn().engine);
    e.impl = pd.impl_info_str();
    // The reference kernel is a triple loop: the stand-in (OpenBLAS) is far faster.
    if (e.impl.rfind("ref", 0) == 0) return e;
    e.prim = dnnl::matmul(pd);
    e.ok = true;
  } catch (const dnnl::error&) {
    e.impl.clear();
  }
  return e;
}

// A program has a few dozen GEMM shapes; one that keeps making new ones (a growing sequence)
// starts the cache afresh past this many, rather than holding every primitive forever.
constexpr size_t kMaxPrimitives = 512;

std::shared_ptr<const Entry> entry(const Key& key) {
  Onednn& o = onednn();
  const std::lock_guard<std::mutex> lock(o.mutex);
  auto it = o.cache.find(key);
  if (it == o.cache.end()) {
    if (o.cache.size() >= kMaxPrimitives) o.cache.clear();
    it = o.cache.emplace(key, std::make_shared<const Entry>(make_entry(key))).first;
  }
  return it->second;
}

Key key_of(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda, int64_t ldb,
           float beta, bool c_bf16, int64_t ldc) {
  return Key{ta, tb, m, n, k, lda, ldb, ldc, c_bf16, alpha, beta, omp_get_max_threads()};
}

std::string isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    default:
      return "isa " + std::to_string(static_cast<unsigned>(isa));
  }
}

// At or above avx512_core_bf16: oneDNN's ISA values are nested bit sets.
bool native_bf16_isa(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (static_cast<unsigned>(isa) & want) == want;
}
}  // namespace

bool have_onednn() { return true; }

bool onednn_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      void* c, bool c_bf16, int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  if (k <= 0) return false;
  const auto e = entry(key_of(ta, tb, m, n, k, alpha, lda, ldb, beta, c_bf16, ldc));
  if (!e->ok) return false;
  Onednn& o = onednn();
  dnnl::memory am(e->a, o.engine, const_cast<uint16_t*>(a));
  dnnl::memory bm(e->b, o.engine, const_cast<uint16_t*>(b));
  dnnl::memory cm(e->c, o.engine, c);
  e->prim.execute(o.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  o.stream.wait();
  return true;
}

std::string onednn_gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                             int64_t lda, int64_t ldb, float beta, bool c_bf16, int64_t ldc) {
  const auto e = entry(key_of(ta, tb, m, n, k, alpha, lda, ldb, beta, c_bf16, ldc));
  return e->ok ? e->impl : "";
}

#else  // no oneDNN in this build

bool have_onednn() { return false; }
bool onednn_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                      const uint16_t*, int64_t, float, void*, bool, int64_t) {
  return false;
}
std::string onednn_gemm_impl(bool, bool, int64_t, int64_t, int64_t, float, int64_t, int64_t, float,
                             bool, int64_t) {
  return "";
}

#endif

Bf16GemmChoice choose_bf16_gemm() {
  const char* env = std::getenv("TP_CPU_BF16_GEMM");
  const std::string want = env && *env ? env : "auto";
  TP_CHECK_INPUT(want == "auto" || want == "onednn" || want == "sgemm", "TP_CPU_BF16_GEMM=", want,
                 " is not a CPU bf16 GEMM; use onednn, sgemm or auto");
  const std::string standin = "sgemm on f32 stand-ins";
  if (want == "sgemm") return {Bf16Gemm::sgemm, standin + " (TP_CPU_BF16_GEMM=sgemm)"};
#ifdef TP_HAVE_ONEDNN
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (want == "onednn")
    return {Bf16Gemm::onednn, "oneDNN (" + isa_name(isa) + ", TP_CPU_BF16_GEMM=onednn)"};
  if (native_bf16_isa(isa)) return {Bf16Gemm::onednn, "oneDNN (" + isa_name(isa) + ")"};
  return {Bf16Gemm::sgemm,
          standin + " (oneDNN's ISA " + isa_name(isa) + " has no native bf16: it would emulate)"};
#else
  TP_CHECK_INPUT(
      want != "onednn",
      "TP_CPU_BF16_GEMM=onednn, but this build has no oneDNN; install libdnnl-dev and rebuild "
      "(make), or use TP_CPU_BF16_GEMM=sgemm");
  return {Bf16Gemm::sgemm, standin + " (built without oneDNN)"};
#endif
}

}  // namespace tp::cpu
