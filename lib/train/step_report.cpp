// step_report.cpp — the lines tp_train prints about its steps (step_report.h).
#include "train/step_report.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/recompute.h"

namespace tp {

// The line an evaluation step prints: the held-out loss beside the step's training loss and the
// data's floor.
std::string validation_line(const StepNumbers& n, const TokenSource& source, int64_t batches,
                            int64_t batch) {
  char line[200];
  std::snprintf(line, sizeof line,
                "step %5lld | val loss %.6f | train loss %.6f | floor %s | %lld held-out batches "
                "of %lld",
                static_cast<long long>(n.step), n.val_loss, n.loss,
                std::isfinite(source.loss_floor()) ? fmt_g(source.loss_floor()).c_str() : "unknown",
                static_cast<long long>(batches), static_cast<long long>(batch));
  return line;
}

// The step's FLOP/s per rank, MFU and HFU (model/flops.h) into `n`.
void set_utilisation(StepNumbers& n, const TokenFlops& f, double tokens, int ranks, double peak) {
  n.flops_rank = flops_per_rank(f.model, tokens, n.secs, ranks);
  n.mfu = peak > 0 ? n.flops_rank / peak : 0;
  n.hfu = f.hardware != f.model && peak > 0
              ? flops_per_rank(f.hardware, tokens, n.secs, ranks) / peak
              : -1;
}

std::string progress_line(const StepNumbers& n, bool simulated) {
  char line[200], mfu[96];
  std::snprintf(line, sizeof line,
                "step %5lld | loss %.6f | grad norm %.4f | lr %.3g | %.0f tok/s | exposed comm "
                "%4.1f%%%s",
                static_cast<long long>(n.step), n.loss, n.norm, n.lr, n.tok_s,
                100.0 * n.exposed / n.secs, simulated ? " (simulated link)" : "");
  std::snprintf(mfu, sizeof mfu, " | %.3g GFLOP/s/rank, MFU %.3g%%", n.flops_rank / 1e9,
                100.0 * n.mfu);
  std::string out = std::string(line) + mfu;
  if (n.hfu >= 0) {
    std::snprintf(mfu, sizeof mfu, ", HFU %.3g%%", 100.0 * n.hfu);
    out += mfu;
  }
  return out;
}

std::string json_line(const StepNumbers& n) {
  char line[400];
  std::snprintf(line, sizeof line,
                "{\"step\": %lld, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                "\"tokens_per_s\": %.6g, "
                "\"comm_s\": %.6g, \"exposed_s\": %.6g, \"compute_s\": %.6g, \"t\": %d, "
                "\"dp\": %d, \"flops_per_rank\": %.6g, \"mfu\": %.6g, \"hfu\": %.6g",
                static_cast<long long>(n.step), n.loss, n.norm, n.lr, n.tok_s, n.comm, n.exposed,
                n.secs - n.comm, n.t, n.dp, n.flops_rank, n.mfu, n.hfu >= 0 ? n.hfu : n.mfu);
  std::string out = line;
  if (std::isfinite(n.val_loss)) {
    std::snprintf(line, sizeof line, ", \"val_loss\": %.9g", n.val_loss);
    out += line;
  }
  return out + "}";
}

std::string flops_line(const GptConfig& cfg, int64_t seq, int ranks, double peak_flops,
                       const std::string& peak_what) {
  const TokenFlops f = token_flops(cfg, seq);
  return detail::str_cat("MFU: model FLOPs per token 6·N + 12·L·h·S = ", fmt_g(f.model),
                         " (PaLM, appendix B; N = ", f.n, ": the blocks, ln_f and the LM head",
                         cfg.tied ? " (tied wte)" : "", ", not wpe",
                         cfg.tied ? "" : " nor wte's lookup", "), of the global model over ", ranks,
                         " rank(s)",
                         "; HFU adds what is computed again (attention's scores in backward",
                         cfg.recompute == Recompute::Full ? ", --recompute full's forward" : "",
                         "): ", fmt_g(f.hardware), "; peak per rank ", fmt_g(peak_flops / 1e9),
                         " GFLOP/s = ", peak_what);
}

std::string moe_line(const Gpt& model) {
  const std::vector<const MoeLayer*> moe = model.moe_layers();
  if (moe.empty()) return "";
  const RouterStats& s = moe.front()->stats();
  std::string counts;
  for (double c : s.choices) counts += " " + fmt_g(c);
  double aux = 0, z = 0;
  int64_t dropped = 0;
  for (const MoeLayer* m : moe) {
    aux += m->losses().aux;
    z += m->losses().z_loss;
    dropped += m->dropped();
  }
  return "  moe: tokens per expert (first MoE block, of " +
         fmt_g(s.tokens * moe.front()->config().top_k) + ")" + counts + " | balancing loss " +
         fmt_g(aux) + ", z-loss " + fmt_g(z) + " | dropped " + std::to_string(dropped) +
         " (this rank)";
}

}  // namespace tp
