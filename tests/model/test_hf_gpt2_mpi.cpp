// test_hf_gpt2_mpi.cpp — GPT-2 files in the Hugging Face layout (lib/model/hf_gpt2.h): a hub-layout
// file (with and without the "transformer." prefix, F32 / F16 / BF16, with and without config.json,
// with the hub's attention-mask buffers) loads into a model at t = np with the shape taken from
// the file, holding exactly the file's values and giving the t = 1 loss; an export loads back
// bit for bit with the same loss; every bad file is one bad-input line naming the problem.
// Runs under mpirun -np 1, 2, 3, 4.
//
// Tolerances: weights are copies (bit for bit, after the F16/BF16 → F32 conversion, which is
// exact); the loss of t = np against t = 1 on the same weights within kLossTol (1e-6 relative: the
// split sums are added in another order); the loss of a model and of its export bit for bit at the
// same t (the same numbers in the same order).
//
// Collectives: every rank runs every test; files are written by rank 0 between barriers, and every
// rank reads them, so a bad file throws the same error on every rank with nothing pending.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/hf_gpt2.h"
#include "model_test_helpers.h"
#include "test_util.h"

namespace {

using namespace tp;
namespace fs = std::filesystem;
using tp::testing::device;
using tp::testing::kLossTol;
using tp::testing::kSeed;
using tp::testing::markov_batch;
using tp::testing::rel_error;
using tp::testing::world;

// A GPT-2 in miniature: every size divides by 1..4 (heads 12 → 3 per rank at t = 4), ffn = 4h as
// in GPT-2 (config.json's n_inner null), 16 positions of which the batches use 8, V = 64 (padded
// to 66 at t = 3).
GptConfig gpt2_config() {
  GptConfig c = small_gpt(16);  // L = 2, h = 48, nh = 12, V = 64
  c.ffn = 0;                    // 4h
  return c;
}
constexpr int64_t kBatchSeq = 8, kBatch = 2;

// A fresh folder unique to this job (rank 0's pid, broadcast), np and `tag`; created by rank 0.
std::string temp_dir(const std::string& tag) {
  Tensor pid = Tensor::from_host(device(), Shape{1}, {static_cast<float>(getpid())});
  world().broadcast(pid, 0);
  const std::string dir = ::testing::TempDir() + "tp_test_hf_" + tag + "_np" +
                          std::to_string(world().size()) + "_" +
                          std::to_string(static_cast<long>(pid.to_host()[0]));
  if (world().rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world().barrier();
  return dir;
}

void remove_dir(const std::string& dir) {
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

// The weights of a t = 1 model of `cfg` from `seed`, as a file stores them (lib/model/checkpoint.h
// names, "transformer." prefix), with every bias and norm drawn at random too, so a weight loaded
// into the wrong place changes the loss.
std::map<std::string, StoredTensor> reference_weights(const GptConfig& cfg, uint64_t seed) {
  SerialCommunicator solo;
  Gpt model(device(), solo, cfg);
  for (Param& p : model.params()) p.init = Init::Normal, p.init_std = 0.1f;
  model.init(seed);
  return gather_stored_weights(solo, model);
}

struct HubOptions {
  std::string prefix;  // "" (the hub's GPT2Model) or "transformer." (GPT2LMHeadModel)
  safetensors::DType dtype = safetensors::DType::F32;
  bool masks = false;    // the hub's h.N.attn.bias / masked_bias buffers
  bool lm_head = false;  // a tied head written out again
  std::string config;    // config.json beside the file ("" = none)
};

// Writes `weights` in the hub layout to dir/model.safetensors (rank 0), and config.json.
std::string write_hub(const std::string& dir, const std::map<std::string, StoredTensor>& weights,
                      const HubOptions& h) {
  const std::string path = dir + "/model.safetensors";
  if (world().rank() == 0) {
    safetensors::Writer w;
    const std::string body = "transformer.";
    for (const auto& [name, t] : weights) {
      const std::string file_name =
          name.compare(0, body.size(), body) == 0 ? h.prefix + name.substr(body.size()) : name;
      w.add_float(file_name, h.dtype, t.shape, t.values);
    }
    if (h.lm_head) {
      const StoredTensor& wte = weights.at("transformer.wte.weight");
      w.add_float("lm_head.weight", h.dtype, wte.shape, wte.values);
    }
    if (h.masks)
      for (int l = 0; l < 2; ++l) {
        const std::string b = h.prefix + "h." + std::to_string(l) + ".attn.";
        std::vector<float> causal(16 * 16);
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j <= i; ++j) causal[i * 16 + j] = 1.0f;
        w.add_float(b + "bias", h.dtype, {1, 1, 16, 16}, causal);
        w.add_float(b + "masked_bias", h.dtype, {}, {-1e4f});
      }
    w.set_metadata("format", "pt");
    w.write(path);
    if (!h.config.empty()) std::ofstream(dir + "/config.json") << h.config;
  }
  world().barrier();
  return path;
}

const char* kConfigJson = R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 48, "n_head": 12,
  "n_inner": null, "n_positions": 16, "vocab_size": 64, "activation_function": "gelu_new",
  "layer_norm_epsilon": 1e-05, "tie_word_embeddings": true})";

// The loss of a model of file.config at t = comm.size() loaded from `file`, on the fixed batch.
float loss_of(const ModelFile& file, Communicator& comm) {
  Gpt model(device(), comm, file.config);
  load_model_file(file, comm, model);
  return model.forward(markov_batch(file.config.vocab, 0, kBatch, kBatchSeq), kSeed, 0);
}

// ---- 1. A hub file loads at every t, with the shape from the file ------------------------------

TEST(HfGpt2Import, HubLayoutsAndDtypesLoadAtEveryTWithTheSingleDeviceLoss) {
  const GptConfig cfg = gpt2_config();
  const auto weights = reference_weights(cfg, kSeed);
  using safetensors::DType;
  const HubOptions variants[] = {
      {"", DType::F32, true, false, kConfigJson},              // the hub's own gpt2 file
      {"transformer.", DType::F32, false, true, kConfigJson},  // save_pretrained, head written
      {"", DType::F16, true, false, ""},                       // no config.json: --heads
      {"transformer.", DType::BF16, false, false, kConfigJson},
  };
  float f32_loss = 0;
  for (const HubOptions& h : variants) {
    const std::string dir = temp_dir("import");
    const std::string path = write_hub(dir, weights, h);
    const std::string what = path + " prefix '" + h.prefix + "' " + dtype_name(h.dtype);
    const ModelFile file = inspect_model_file(path, h.config.empty() ? 12 : 0);
    EXPECT_TRUE(file.hub) << what;
    EXPECT_EQ(file.prefix, h.prefix) << what;
    EXPECT_EQ(file.heads_from, h.config.empty() ? "--heads" : "config.json") << what;
    EXPECT_EQ(file.ignored, h.masks ? 4 : 0) << what;
    EXPECT_EQ(file.dtype, dtype_name(h.dtype)) << what;
    const GptConfig& c = file.config;
    EXPECT_EQ(c.layers, 2);
    EXPECT_EQ(c.hidden, 48);
    EXPECT_EQ(c.heads, 12);
    EXPECT_EQ(c.kv(), 12);
    EXPECT_EQ(c.inner(), 192);
    EXPECT_EQ(c.vocab, 64);
    EXPECT_EQ(c.seq, 16);  // the position table; the batches below use 8 of it
    EXPECT_TRUE(c.tied);
    EXPECT_EQ(c.act, Activation::Gelu);
    EXPECT_EQ(c.norm, NormKind::LayerNorm);

    // Every rank's shard holds the file's values (converted to F32) bit for bit.
    Gpt model(device(), world(), c);
    load_model_file(file, world(), model);
    const auto loaded = gather_stored_weights(world(), model);  // collective
    const safetensors::File f = safetensors::File::open(path);
    for (const auto& [name, t] : loaded) {
      const std::string file_name =
          name.compare(0, 12, "transformer.") == 0 ? h.prefix + name.substr(12) : name;
      EXPECT_EQ(t.values, f.read_as_f32(file_name)) << what << ": " << name;
    }
    // The loss at t = np equals t = 1 on the same file; F32 equals the source model's.
    SerialCommunicator solo;
    const float one = loss_of(file, solo), mine = loss_of(file, world());
    EXPECT_LE(std::fabs(mine - one), kLossTol * std::fabs(one)) << what;
    if (h.dtype == DType::F32) {
      if (f32_loss == 0) f32_loss = one;
      EXPECT_EQ(one, f32_loss) << what << ": the prefix and the extra tensors change nothing";
    } else {
      // Rounded weights: close to the F32 loss, but not equal (the conversion did something).
      EXPECT_NE(one, f32_loss) << what;
      EXPECT_LE(std::fabs(one - f32_loss), 0.05 * f32_loss) << what;
    }
    remove_dir(dir);
  }
}

// The q | k | v columns of c_attn are head-major: under TP, rank r must get heads
// [r·nh/t, (r+1)·nh/t) of each. A model whose heads all differ and whose per-head outputs are
// distinct would lose the t = 1 loss if the split were wrong; the loss check above covers it, and
// here the shard of q on each rank is checked against the file's columns directly.
TEST(HfGpt2Import, EachRankHoldsItsHeadsOfQKV) {
  const GptConfig cfg = gpt2_config();
  const auto weights = reference_weights(cfg, kSeed + 1);
  const std::string dir = temp_dir("heads");
  const std::string path =
      write_hub(dir, weights, {"", safetensors::DType::F32, false, false, kConfigJson});
  const ModelFile file = inspect_model_file(path, 0);
  Gpt model(device(), world(), file.config);
  load_model_file(file, world(), model);
  const int t = world().size(), r = world().rank();
  const int64_t h = cfg.hidden, per = h / t;  // columns of q (and k, v) per rank
  const std::vector<float> c_attn = weights.at("transformer.h.1.attn.c_attn.weight").values;
  const char* parts[] = {".q.weight", ".k.weight", ".v.weight"};
  for (int part = 0; part < 3; ++part) {
    const Param* p = nullptr;
    for (const Param& q : model.params())
      if (q.name == std::string("transformer.h.1.attn") + parts[part]) p = &q;
    ASSERT_NE(p, nullptr) << parts[part];
    const std::vector<float> mine = p->value.to_host();  // (h, h/t)
    std::vector<float> want(static_cast<size_t>(h * per));
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < per; ++j)
        want[i * per + j] = c_attn[i * 3 * h + part * h + r * per + j];
    EXPECT_EQ(mine, want) << parts[part] << " on rank " << r;
  }
  remove_dir(dir);
}

// ---- 2. Export, then import: the same weights and the same loss --------------------------------

TEST(HfGpt2Export, ExportLoadsBackBitForBitWithTheSameLoss) {
  for (bool tied : {true, false}) {
    GptConfig cfg = gpt2_config();
    cfg.tied = tied;
    cfg.ffn = 96;  // not 4h: config.json's n_inner says so
    Gpt model(device(), world(), cfg);
    for (Param& p : model.params()) p.init = Init::Normal, p.init_std = 0.1f;
    model.init(kSeed);
    const Batch batch = markov_batch(cfg.vocab, 0, kBatch, kBatchSeq);
    const float want = model.forward(batch, kSeed, 0);
    const auto original = gather_stored_weights(world(), model);  // collective

    const std::string dir = temp_dir(tied ? "export_tied" : "export_untied");
    export_hf(dir, world(), model);

    // The file: GPT2LMHeadModel's names, F32, no padding rows, no optimizer, format pt.
    const safetensors::File f = safetensors::File::open(dir + "/model.safetensors");
    EXPECT_EQ(f.metadata("format"), "pt");
    EXPECT_EQ(f.has("lm_head.weight"), !tied);
    EXPECT_EQ(f.names().size(), 2 + 12 * 2 + 2 + (tied ? 0 : 1));  // wte, wpe, blocks, ln_f
    EXPECT_EQ(f.info("transformer.wte.weight").shape, (std::vector<int64_t>{64, 48}));
    EXPECT_EQ(f.info("transformer.h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{48, 144}));
    EXPECT_EQ(f.info("transformer.h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{96, 48}));
    for (const auto& name : f.names()) EXPECT_EQ(f.info(name).dtype, safetensors::DType::F32);
    std::ifstream in(dir + "/config.json");
    const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const std::string& needle :
         {std::string("\"model_type\": \"gpt2\""), std::string("\"n_layer\": 2"),
          std::string("\"n_embd\": 48"), std::string("\"n_head\": 12"),
          std::string("\"n_inner\": 96"), std::string("\"n_positions\": 16"),
          std::string("\"vocab_size\": 64"), std::string("\"activation_function\": \"gelu_new\""),
          std::string("\"layer_norm_epsilon\": 1e-05"),
          std::string("\"tie_word_embeddings\": ") + (tied ? "true" : "false")})
      EXPECT_NE(json.find(needle), std::string::npos) << needle << " in " << json;

    // Import: the shape from the file; the same weights bit for bit and the same loss.
    const ModelFile file = inspect_model_file(dir + "/model.safetensors", 0);
    EXPECT_EQ(file.config.tied, tied);
    EXPECT_EQ(file.config.inner(), 96);
    Gpt back(device(), world(), file.config);
    load_model_file(file, world(), back);
    const auto again = gather_stored_weights(world(), back);  // collective
    EXPECT_EQ(again.size(), original.size());
    for (const auto& [name, t] : original) {
      ASSERT_TRUE(again.count(name)) << name;
      EXPECT_EQ(again.at(name).values, t.values) << name;
    }
    EXPECT_EQ(back.forward(batch, kSeed, 0), want) << "tied " << tied;
    SerialCommunicator solo;
    const float one = loss_of(file, solo);
    EXPECT_LE(std::fabs(one - want), kLossTol * std::fabs(want)) << "t = 1, tied " << tied;
    remove_dir(dir);
  }
}

// --export-dtype bf16: every tensor BF16, each the fp32 weight rounded to nearest even once;
// config.json says bfloat16; --init-from of the file reads it back as those values.
TEST(HfExport, Bf16FileHoldsTheRoundedWeights) {
  GptConfig cfg = gpt2_config();
  Gpt model(device(), world(), cfg);
  for (Param& p : model.params()) p.init = Init::Normal, p.init_std = 0.1f;
  model.init(kSeed);
  const auto original = gather_stored_weights(world(), model);  // collective
  const std::string dir = temp_dir("export_bf16");
  export_hf(dir, world(), model, Dtype::bf16);
  const safetensors::File f = safetensors::File::open(dir + "/model.safetensors");
  for (const auto& name : f.names()) EXPECT_EQ(f.info(name).dtype, safetensors::DType::BF16);
  std::ifstream in(dir + "/config.json");
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"torch_dtype\": \"bfloat16\""), std::string::npos) << json;
  const ModelFile file = inspect_model_file(dir + "/model.safetensors", 0);
  EXPECT_EQ(file.dtype, "BF16");
  Gpt back(device(), world(), file.config);
  load_model_file(file, world(), back);
  const auto again = gather_stored_weights(world(), back);  // collective
  int64_t rounded = 0;
  for (const auto& [name, t] : original) {
    ASSERT_TRUE(again.count(name)) << name;
    const std::vector<float>& got = again.at(name).values;
    ASSERT_EQ(got.size(), t.values.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], round_to_bf16(t.values[i])) << name << "[" << i << "]";
      rounded += got[i] != t.values[i];
    }
  }
  EXPECT_GT(rounded, 0) << "nothing was rounded: the test data is too easy";
  remove_dir(dir);
}

// ---- 3. Bad files: one line naming the problem -------------------------------------------------

void expect_bad(const std::string& path, int64_t heads, const std::string& needle) {
  try {
    (void)inspect_model_file(path, heads);
    ADD_FAILURE() << "no error for " << path << " (wanted '" << needle << "')";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  }
}

TEST(HfGpt2Import, BadFilesAreOneLineNamingTheProblem) {
  const GptConfig cfg = gpt2_config();
  const auto weights = reference_weights(cfg, kSeed);
  auto without = [&](const std::string& name) {
    auto w = weights;
    w.erase(name);
    return w;
  };
  auto with = [&](const std::string& name, std::vector<int64_t> shape) {
    auto w = weights;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    w[name] = StoredTensor{shape, std::vector<float>(static_cast<size_t>(n), 0.5f)};
    return w;
  };
  auto config = [&](const std::string& from, const std::string& to) {
    std::string s = kConfigJson;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::string cj = kConfigJson;
  const struct {
    std::map<std::string, StoredTensor> weights;
    std::string config;
    int64_t heads;
    std::string needle;
  } cases[] = {
      {{{"foo.weight", {{2}, {1.0f, 2.0f}}}},
       "",
       12,
       "is neither a checkpoint of this project (no \"format\": \"tp-from-scratch-gpt/1\" "
       "metadata) nor a GPT-2 file in the Hugging Face layout (no wte.weight or "
       "transformer.wte.weight); it has 1 tensor: foo.weight"},
      {without("transformer.h.1.mlp.c_fc.bias"), cj, 0,
       "has no tensor h.1.mlp.c_fc.bias (a GPT-2 of 2 layers needs it)"},
      {without("transformer.wpe.weight"), cj, 0, "has no tensor wpe.weight"},
      {with("transformer.h.0.attn.c_attn.weight", {48, 96}), cj, 0,
       "tensor h.0.attn.c_attn.weight has shape [48, 96] but a GPT-2 with hidden 48, ffn 192, "
       "vocab 64 and 16 positions needs [48, 144]"},
      {with("transformer.h.7.mlp.c_fc.weight", {48, 192}), cj, 0,
       "tensor h.7.mlp.c_fc.weight is not part of a GPT-2 of 2 layers"},
      {weights, config("\"n_embd\": 48", "\"n_embd\": 64"), 0, "says n_embd=64 but model file"},
      {weights, config("\"n_positions\": 16", "\"n_positions\": 1024"), 0,
       "says n_positions=1024 but model file"},
      {weights, config("\"n_head\": 12", "\"n_head\": 6"), 12, "--heads=12 disagrees with"},
      {weights, config("gelu_new", "relu"), 0,
       "activation_function \"relu\" is not the tanh-approximated GeLU"},
      {weights, config("\"gpt2\"", "\"llama\""), 0, "describes a \"llama\" model"},
      {weights, "{\"n_head\": ", 0, "config.json is not valid JSON"},
      {weights, "", 0, "does not say how many attention heads it has"},
  };
  for (const auto& c : cases) {
    const std::string dir = temp_dir("bad");
    const std::string path =
        write_hub(dir, c.weights, {"", safetensors::DType::F32, false, false, c.config});
    expect_bad(path, c.heads, c.needle);
    remove_dir(dir);
  }

  // An I32 tensor in the file.
  const std::string dir = temp_dir("bad_i32");
  const std::string path = dir + "/model.safetensors";
  if (world().rank() == 0) {
    safetensors::Writer w;
    for (const auto& [name, t] : weights)
      w.add_f32(name.substr(12 * (name[0] == 't')), t.shape, t.values);
    w.add_i32("h.0.attn.masked_bias", {}, {1});
    w.write(path);
  }
  world().barrier();
  expect_bad(path, 12, "tensor h.0.attn.masked_bias is I32; a GPT-2 file holds F32, F16 or BF16");
  remove_dir(dir);

  // A model GPT-2 cannot hold is refused before anything is written.
  GptConfig swiglu = cfg;
  swiglu.act = Activation::SwiGlu;
  Gpt model(device(), world(), swiglu);
  const std::string out = temp_dir("bad_export");
  try {
    export_hf(out + "/x", world(), model);
    ADD_FAILURE() << "exported a SwiGLU model";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("--act swiglu (GPT-2 has a GeLU MLP)"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out + "/x/model.safetensors"));
  remove_dir(out);
}

}  // namespace
