// memory.cpp — tp_bench's memory-bound kernels suite (the driver: main.cpp).
//
// Memory-bound kernels (--suite memory): LayerNorm, GeLU and add (axpy) forward, and their
// backward, in GB/s of compulsory traffic, against Device::copy (device-to-device) bandwidth
// measured on the same buffers.
#include <cstdio>
#include <functional>
#include <string>

#include "bench.h"
#include "core/log.h"

namespace tp::bench {
namespace {

void bench_memory(Context& ctx) {
  Device& dev = ctx.device;
  const int64_t rows = ctx.options.get_int("tokens"), h = ctx.options.get_int("hidden"),
                n = rows * h;
  const double bytes = 4.0 * static_cast<double>(n);  // one pass over one (rows, h) tensor
  Tensor x(dev, Shape{rows, h}), y(dev, Shape{rows, h}), dy(dev, Shape{rows, h}),
      dx(dev, Shape{rows, h});
  Tensor w(dev, Shape{h}), b(dev, Shape{h}), dw(dev, Shape{h}), db(dev, Shape{h}),
      mean(dev, Shape{rows}), rstd(dev, Shape{rows});
  for (Tensor* t : {&x, &dy, &w, &b})
    dev.fill_random(*t, RngKey::from(3, "m"), GlobalIndex::whole(t->cols()),
                    Distribution::uniform(-1, 1));
  dev.fill(dw, 0.0f);
  dev.fill(db, 0.0f);
  const double copy =
      bytes * 2 / device_time(dev, 10, [&] { dev.copy(y.data(), x.data(), x.bytes()); }) / 1e9;
  log0(ctx.world, "# memory-bound kernels on ", dev.name(), ", (", rows, ", ", h,
       ") fp32 = ", bytes / (1 << 20),
       " MiB per tensor; GB/s of compulsory traffic vs device-to-device copy (", copy, " GB/s)");
  result(ctx, "memory", "copy", copy, "GB/s", copy, 1.0);
  struct Kernel {
    const char* name;
    double passes;  // tensors of (rows, h) read + written
    std::function<void()> run;
  };
  const Kernel kernels[] = {
      {"layernorm.fwd", 2, [&] { dev.layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); }},
      {"layernorm.bwd", 3, [&] { dev.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd); }},
      {"gelu.fwd", 2, [&] { dev.gelu_forward(y, x); }},
      {"gelu.bwd", 3, [&] { dev.gelu_backward(dx, dy, x); }},
      {"add", 3, [&] { dev.axpy(1.0f, x, y); }},
  };
  log0(ctx.world, "#            kernel     GB/s   of copy");
  for (const Kernel& k : kernels) {
    const double gbs = k.passes * bytes / device_time(dev, 10, k.run) / 1e9;
    char line[120];
    std::snprintf(line, sizeof line, "%19s %8.0f %8.0f%%", k.name, gbs, 100.0 * gbs / copy);
    log0(ctx.world, line);
    result(ctx, "memory", k.name, gbs, "GB/s", copy, gbs / copy);
  }
}

// Which --suite values run it (bench.h, Suite), on either backend.
bool selected(const std::string& suite, bool /*gpu*/) {
  return suite == "all" || suite == "memory";
}

const bool registered = register_suite({4, selected, bench_memory});

}  // namespace
}  // namespace tp::bench
