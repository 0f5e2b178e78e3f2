// onednn_gemm.cpp — bf16 and f32 matmuls through oneDNN with a primitive cache, the f32 matmul on a
// B packed once, and oneDNN's ISA (onednn_gemm.h). Without TP_HAVE_ONEDNN each entry answers
// "not here" (false, nullptr, ""), so the callers stay on OpenBLAS.
#include "onednn_gemm.h"

#include <string>

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

// What makes one primitive: transposes, sizes, strides, the dtypes (bf16 A and B into an f32 or
// bf16 C, or all f32), alpha and beta (bit patterns), and the thread count it was made for.
enum class Types { bf16_f32, bf16_bf16, f32 };
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, Types,
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

// alpha as oneDNN's output scale, beta as its sum post-op.
dnnl::primitive_attr scaling(float alpha, float beta) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return attr;
}

// The matmul of e.a, e.b (or weights `any` when given: oneDNN picks their layout), e.c into e;
// false when oneDNN refuses the case or offers only its reference kernel, a triple loop that the
// stand-in (OpenBLAS) beats by far. Returns pd's weights desc in *chosen when asked.
bool make_matmul(Entry& e, float alpha, float beta, const dnnl::memory::desc* weights,
                 dnnl::memory::desc* chosen = nullptr) {
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, weights ? *weights : e.b, e.c),
                                          scaling(alpha, beta), onednn().engine);
    e.impl = pd.impl_info_str();
    if (e.impl.rfind("ref", 0) == 0) return false;
    if (chosen != nullptr) *chosen = pd.weights_desc();
    e.prim = dnnl::matmul(pd);
    e.ok = true;
  } catch (const dnnl::error&) {
    e.impl.clear();
  }
  return e.ok;
}

Entry make_entry(const Key& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, types, alpha, beta, threads] = key;
  (void)threads;
  using dt = dnnl::memory::data_type;
  const dt ab = types == Types::f32 ? dt::f32 : dt::bf16;
  Entry e;
  e.a = matrix(m, k, lda, ta, ab);
  e.b = matrix(k, n, ldb, tb, ab);
  e.c = matrix(m, n, ldc, false, types == Types::bf16_bf16 ? dt::bf16 : dt::f32);
  make_matmul(e, alpha, beta, nullptr);
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
           float beta, Types types, int64_t ldc) {
  return Key{ta, tb, m, n, k, lda, ldb, ldc, types, alpha, beta, omp_get_max_threads()};
}

Types bf16_types(bool c_bf16) { return c_bf16 ? Types::bf16_bf16 : Types::bf16_f32; }

// C = alpha op(A) op(B) + beta C for the entry; false when oneDNN refused it.
bool execute(const Entry& e, const void* a, const void* b, void* c) {
  if (!e.ok) return false;
  Onednn& o = onednn();
  dnnl::memory am(e.a, o.engine, const_cast<void*>(a));
  dnnl::memory bm(e.b, o.engine, const_cast<void*>(b));
  dnnl::memory cm(e.c, o.engine, c);
  e.prim.execute(o.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  o.stream.wait();
  return true;
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

OnednnIsa onednn_isa() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  OnednnIsa o;
  o.name = isa_name(isa);
  o.avx512 = (static_cast<unsigned>(isa) & avx512) == avx512;
  o.native_bf16 = native_bf16_isa(isa);
  o.amx = isa == dnnl::cpu_isa::avx512_core_amx;
  return o;
}

bool onednn_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      void* c, bool c_bf16, int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  if (k <= 0) return false;
  return execute(*entry(key_of(ta, tb, m, n, k, alpha, lda, ldb, beta, bf16_types(c_bf16), ldc)), a,
                 b, c);
}

bool onednn_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  return execute(*entry(key_of(ta, tb, m, n, k, alpha, lda, ldb, beta, Types::f32, ldc)), a, b, c);
}

std::string onednn_gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                             int64_t lda, int64_t ldb, float beta, bool c_bf16, int64_t ldc) {
  const auto e = entry(key_of(ta, tb, m, n, k, alpha, lda, ldb, beta, bf16_types(c_bf16), ldc));
  return e->ok ? e->impl : "";
}

// ---- f32 with B packed once ----------------------------------------------------------------------

struct F32PackedLayout {
  int64_t n = 0, k = 0;
  dnnl::memory::desc plain, packed;  // B as stored, and in the layout oneDNN chose
  dnnl::reorder reorder;             // plain → packed
  // The matmuls that read B in this layout: (trans_a, m, lda, ldc, alpha, beta, threads) → entry.
  using GemmKey = std::tuple<bool, int64_t, int64_t, int64_t, float, float, int>;
  mutable std::map<GemmKey, std::shared_ptr<const Entry>> gemms;
  mutable std::mutex mutex;
};

namespace {
using LayoutKey = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int>;
struct Layouts {
  std::map<LayoutKey, std::shared_ptr<const F32PackedLayout>> cache;  // nullptr: not packed
  std::map<LayoutKey, std::string> impl;
  std::mutex mutex;
};
Layouts& layouts() {
  static Layouts l;
  return l;
}

std::shared_ptr<const F32PackedLayout> make_layout(const LayoutKey& key, std::string& impl) {
  const auto [tb, m, n, k, ldb, threads] = key;
  (void)threads;
  using dt = dnnl::memory::data_type;
  Entry probe;
  probe.a = matrix(m, k, k, false, dt::f32);
  probe.c = matrix(m, n, n, false, dt::f32);
  const dnnl::memory::desc any(dnnl::memory::dims{k, n}, dt::f32, dnnl::memory::format_tag::any);
  auto layout = std::make_shared<F32PackedLayout>();
  layout->n = n;
  layout->k = k;
  layout->plain = matrix(k, n, ldb, tb, dt::f32);
  const bool ok = make_matmul(probe, 1.0f, 0.0f, &any, &layout->packed);
  impl = probe.impl;
  // Only a brgemm kernel reads a layout of its own; a plain one gains nothing from a reorder.
  if (!ok || impl.rfind("brg", 0) != 0 || layout->packed == layout->plain) return nullptr;
  const Onednn& o = onednn();
  layout->reorder = dnnl::reorder(
      dnnl::reorder::primitive_desc(o.engine, layout->plain, o.engine, layout->packed));
  return layout;
}
}  // namespace

std::shared_ptr<const F32PackedLayout> onednn_f32_layout(bool tb, int64_t m, int64_t n, int64_t k,
                                                         int64_t ldb, std::string* impl) {
  if (m <= 0 || n <= 0 || k <= 0) return nullptr;
  const LayoutKey key{tb, m, n, k, ldb, omp_get_max_threads()};
  Layouts& l = layouts();
  const std::lock_guard<std::mutex> lock(l.mutex);
  auto it = l.cache.find(key);
  if (it == l.cache.end()) {
    if (l.cache.size() >= kMaxPrimitives) {
      l.cache.clear();
      l.impl.clear();
    }
    std::string name;
    it = l.cache.emplace(key, make_layout(key, name)).first;
    l.impl[key] = name;
  }
  if (impl != nullptr) *impl = l.impl[key];
  return it->second;
}

size_t onednn_f32_packed_bytes(const F32PackedLayout& layout) { return layout.packed.get_size(); }

void onednn_f32_pack(const F32PackedLayout& layout, const float* b, void* packed) {
  Onednn& o = onednn();
  dnnl::memory from(layout.plain, o.engine, const_cast<float*>(b));
  dnnl::memory to(layout.packed, o.engine, packed);
  layout.reorder.execute(o.stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  o.stream.wait();
}

bool onednn_f32_gemm_packed(const F32PackedLayout& layout, bool ta, int64_t m, float alpha,
                            const float* a, int64_t lda, const void* packed, float beta, float* c,
                            int64_t ldc) {
  if (m <= 0) return true;
  const F32PackedLayout::GemmKey key{ta, m, lda, ldc, alpha, beta, omp_get_max_threads()};
  std::shared_ptr<const Entry> e;
  {
    const std::lock_guard<std::mutex> lock(layout.mutex);
    auto it = layout.gemms.find(key);
    if (it == layout.gemms.end()) {
      using dt = dnnl::memory::data_type;
      auto made = std::make_shared<Entry>();
      made->a = matrix(m, layout.k, lda, ta, dt::f32);
      made->c = matrix(m, layout.n, ldc, false, dt::f32);
      const dnnl::memory::desc any(dnnl::memory::dims{layout.k, layout.n}, dt::f32,
                                   dnnl::memory::format_tag::any);
      dnnl::memory::desc chosen;
      // This A's kernel must read B in the layout it was packed in.
      made->ok = make_matmul(*made, alpha, beta, &any, &chosen) && chosen == layout.packed;
      if (layout.gemms.size() >= kMaxPrimitives) layout.gemms.clear();
      it = layout.gemms.emplace(key, std::move(made)).first;
    }
    e = it->second;
  }
  if (!e->ok) return false;
  Onednn& o = onednn();
  dnnl::memory am(e->a, o.engine, const_cast<float*>(a));
  dnnl::memory bm(layout.packed, o.engine, const_cast<void*>(packed));
  dnnl::memory cm(e->c, o.engine, c);
  e->prim.execute(o.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  o.stream.wait();
  return true;
}

#else  // no oneDNN in this build

struct F32PackedLayout {};
std::shared_ptr<const F32PackedLayout> onednn_f32_layout(bool, int64_t, int64_t, int64_t, int64_t,
                                                         std::string* impl) {
  if (impl != nullptr) impl->clear();
  return nullptr;
}
size_t onednn_f32_packed_bytes(const F32PackedLayout&) { return 0; }
void onednn_f32_pack(const F32PackedLayout&, const float*, void*) {}
bool onednn_f32_gemm_packed(const F32PackedLayout&, bool, int64_t, float, const float*, int64_t,
                            const void*, float, float*, int64_t) {
  return false;
}

bool have_onednn() { return false; }
OnednnIsa onednn_isa() { return {}; }
bool onednn_gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                      const uint16_t*, int64_t, float, void*, bool, int64_t) {
  return false;
}
std::string onednn_gemm_impl(bool, bool, int64_t, int64_t, int64_t, float, int64_t, int64_t, float,
                             bool, int64_t) {
  return "";
}
bool onednn_gemm_f32(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                     const float*, int64_t, float, float*, int64_t) {
  return false;
}

#endif

}  // namespace tp::cpu
