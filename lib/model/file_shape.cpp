#include "model/file_shape.h"

#include <algorithm>

namespace tp {

GptConfig config_from_flags(const Options& o) {
  GptConfig c;
  c.layers = o.get_int("layers");
  c.hidden = o.get_int("hidden");
  c.heads = o.get_int("heads");
  c.kv_heads = o.get_int("kv-heads");
  c.ffn = o.get_int("ffn");
  c.vocab = o.get_int("vocab");
  c.seq = o.get_int("seq");
  c.act = parse_activation(o.get_text("act"));
  c.norm = parse_norm(o.get_text("norm"));
  c.dropout = static_cast<float>(o.get_real("dropout"));
  c.tied = !o.get_flag("untie");
  c.sp = o.get_flag("sp");
  c.overlap = parse_overlap(o.get_text("overlap"));
  c.recompute = parse_recompute(o.get_text("recompute"));
  c.pad_vocab_multiple = o.get_int("pad-vocab-multiple");
  if (o.declared("experts")) {  // tp_train's mixture-of-experts flags (model/moe.h)
    c.experts = o.get_int32("experts");
    c.top_k = o.get_int32("top-k");
    c.moe_every = o.get_int32("moe-every");
    c.aux_loss_coef = o.get_real("aux-loss-coef");
    c.z_loss_coef = o.get_real("z-loss-coef");
    c.capacity_factor = o.get_real("capacity-factor");
  }
  return c;
}

void shape_from_file(const ModelFile& f, const Options& o, FileShape rule, GptConfig& cfg,
                     int64_t& seq, std::vector<std::string>& problems) {
  const bool strict = rule == FileShape::FlagsMustAgree;
  const GptConfig& fc = f.config;
  auto take = [&](const char* flag, int64_t& mine, int64_t from_file, int64_t given_value) {
    if (o.given(flag) && strict && given_value != from_file)
      problems.push_back(std::string("--") + flag + "=" + std::to_string(given_value) +
                         " disagrees with " + f.path + " (" + std::to_string(from_file) +
                         "); drop --" + flag);
    if (!o.given(flag) || strict) mine = from_file;
  };
  take("layers", cfg.layers, fc.layers, cfg.layers);
  take("hidden", cfg.hidden, fc.hidden, cfg.hidden);
  take("heads", cfg.heads, fc.heads, cfg.heads);
  if (o.given("kv-heads") && strict && cfg.kv() != fc.kv())
    problems.push_back("--kv-heads=" + std::to_string(cfg.kv_heads) + " disagrees with " + f.path +
                       " (" + std::to_string(fc.kv()) + "); drop --kv-heads");
  if (!o.given("kv-heads") || strict)
    cfg.kv_heads = fc.kv() == fc.heads ? 0 : fc.kv();  // 0: = heads
  take("ffn", cfg.ffn, fc.inner(), cfg.ffn > 0 ? cfg.ffn : fc.inner());
  take("vocab", cfg.vocab, fc.vocab, cfg.vocab);
  auto take_kind = [&](const char* flag, auto& mine, auto theirs, auto name) {
    if (o.given(flag) && strict && mine != theirs)
      problems.push_back(std::string("--") + flag + "=" + name(mine) + " disagrees with " + f.path +
                         " (" + name(theirs) + "); drop --" + flag);
    if (!o.given(flag) || strict) mine = theirs;
  };
  take_kind("act", cfg.act, fc.act, activation_name);
  take_kind("norm", cfg.norm, fc.norm, norm_name);
  if (o.given("untie") && strict && cfg.tied != fc.tied)
    problems.push_back(std::string("--untie") + " disagrees with " + f.path +
                       (fc.tied ? " (its head is tied to wte)" : " (its head is untied)"));
  if (!o.given("untie") || strict) cfg.tied = fc.tied;
  cfg.eps = fc.eps;
  if (o.given("seq") && seq > fc.seq) {
    problems.push_back("--seq=" + std::to_string(seq) + " is larger than the position table of " +
                       std::to_string(fc.seq) + " in " + f.path);
  } else if (!o.given("seq")) {
    seq = f.hub ? std::min(seq, fc.seq) : fc.seq;
  }
  cfg.seq = fc.seq;
}

}  // namespace tp
