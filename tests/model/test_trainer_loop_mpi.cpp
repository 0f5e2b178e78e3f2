// test_trainer_loop_mpi.cpp — what tp_train's loop is built from (issue 24): the periodic checkpoints'
// series (names, listing, the newest valid one, pruning), the held-out data and its loss, the
// model FLOPs per token behind MFU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/checkpoint_series.h"
#include "model/data.h"
#include "model/evaluate.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "model_test_helpers.h"
#include "peak_cache.h"
#include "test_util.h"

namespace fs = std::filesystem;
using tp::testing::device;
using tp::testing::world;

namespace tp {
namespace {

// A folder of this test and this rank (every rank of test_mpi runs every test).
std::string fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(::testing::TempDir()) /
                       (std::string("tp_trainer_") + info->name() + "_rank" +
                        std::to_string(world().rank()) + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void touch(const std::string& path, const std::string& text = "x") { std::ofstream(path) << text; }

std::vector<int64_t> steps_of(const std::vector<SeriesEntry>& entries) {
  std::vector<int64_t> out;
  for (const SeriesEntry& e : entries) out.push_back(e.step);
  return out;
}

TEST(CheckpointSeries, NamesForAFolderAndForAFile) {
  const std::string dir = fresh_dir();
  const CheckpointSeries in_folder(dir);
  EXPECT_EQ(in_folder.path_for(200), dir + "/checkpoint-step000200.safetensors");
  EXPECT_EQ(in_folder.final_path(7), dir + "/checkpoint-step000007.safetensors");
  EXPECT_EQ(in_folder.path_for(12345678), dir + "/checkpoint-step12345678.safetensors");
  EXPECT_EQ(CheckpointSeries(dir + "/new/").path_for(1),
            dir + "/new/checkpoint-step000001.safetensors");
  const CheckpointSeries file(dir + "/run.safetensors");
  EXPECT_EQ(file.path_for(200), dir + "/run-step000200.safetensors");
  EXPECT_EQ(file.final_path(200), dir + "/run.safetensors");
  EXPECT_EQ(file.claim_path(), dir + "/run.safetensors");
  const CheckpointSeries bare("run");
  EXPECT_EQ(bare.path_for(3), "run-step000003.safetensors");
  EXPECT_EQ(bare.folder(), ".");
  EXPECT_TRUE(CheckpointSeries("").empty());
}

TEST(CheckpointSeries, ListsOnlyItsOwnFilesByStep) {
  const std::string dir = fresh_dir();
  for (const char* name : {"checkpoint-step000200.safetensors", "checkpoint-step000010.safetensors",
                           "checkpoint-step1000000.safetensors",
                           "checkpoint-step000300.safetensors.tmp.123",  // a write that was killed
                           "checkpoint-step00030.safetensors",  // fewer than six digits: not ours
                           "checkpoint-step0003x0.safetensors", "other-step000400.safetensors",
                           "checkpoint.safetensors"})
    touch(dir + "/" + name);
  fs::create_directories(dir + "/checkpoint-step000500.safetensors");  // a folder: not a file
  const auto listed = CheckpointSeries(dir).list();
  EXPECT_EQ(steps_of(listed), (std::vector<int64_t>{10, 200, 1000000}));
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[1].path, dir + "/checkpoint-step000200.safetensors");
  // A file stem has its own series; the end-of-run file joins the candidates (step -1 when it
  // does not open), newest first.
  touch(dir + "/other.safetensors", "not a checkpoint");
  const auto cands = CheckpointSeries(dir + "/other.safetensors").candidates();
  EXPECT_EQ(steps_of(cands), (std::vector<int64_t>{400, -1}));
}

TEST(CheckpointSeries, PruningKeepsTheNewestAndDropsLaterSteps) {
  std::vector<SeriesEntry> all;
  for (int64_t step : {100, 200, 300, 400, 500}) all.push_back({"f", step, "r", ""});
  const auto valid = [](const std::string&) -> std::string { return ""; };
  EXPECT_EQ(steps_of(series_to_delete(all, {500, 3, "r"}, +valid)),
            (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(steps_of(series_to_delete(all, {500, 10, "r"}, +valid)), (std::vector<int64_t>{}));
  // Resumed at 300 (400 and 500 were bad) and saved 300 again: the later steps go.
  EXPECT_EQ(steps_of(series_to_delete(all, {300, 2, "r"}, +valid)),
            (std::vector<int64_t>{400, 500, 100}));
}

// Issue 39: a run deletes only its own files. Another run's (or one without a run id, written
// before run ids) stay unless --replace-series (Replace); a file whose header could not be read
// stays always; a later step of this run that is not valid stays for --resume auto to name.
TEST(CheckpointSeries, PruningDeletesOnlyThisRunsReadableFiles) {
  const std::vector<SeriesEntry> all = {{"theirs", 2, "other", ""},  {"old", 4, "", ""},
                                        {"mine1", 5, "me", ""},      {"mine2", 6, "me", ""},
                                        {"locked", 7, "", "EACCES"}, {"mine_bad", 9, "me", ""},
                                        {"mine_later", 8, "me", ""}};
  const auto bad = [](const std::string& p) -> std::string {
    return p == "mine_bad" ? "it fails its checksum" : "";
  };
  std::vector<std::string> paths;
  for (const SeriesEntry& e : series_to_delete(all, {6, 1, "me"}, +bad)) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"mine_later", "mine1"}));
  paths.clear();
  for (const SeriesEntry& e : series_to_delete(all, {6, 1, "me", ForeignSeries::Replace}, +bad))
    paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"theirs", "old", "mine_later", "mine1"}));
  // A run without an id (none can be: tp_train always has one) deletes nothing of anyone's.
  EXPECT_TRUE(series_to_delete(all, {6, 0, ""}, +bad).empty());
}

TEST(CheckpointSeries, ResumeTakesTheNewestValidAndNamesTheSkipped) {
  const std::vector<SeriesEntry> cands = {
      {"n3", 300, "", ""}, {"n2", 200, "", ""}, {"n1", 100, "", ""}};
  const auto bad_n3 = [](const std::string& p) -> std::string {
    return p == "n3" ? "it is cut short" : "";
  };
  ResumeChoice c = choose_resume(cands, +bad_n3);
  EXPECT_EQ(c.chosen.path, "n2");
  EXPECT_EQ(c.chosen.step, 200);
  ASSERT_EQ(c.skipped.size(), 1u);
  EXPECT_EQ(c.skipped[0], "skipped n3: it is cut short");
  const auto all_bad = [](const std::string&) -> std::string { return "bad"; };
  c = choose_resume(cands, +all_bad);
  EXPECT_TRUE(c.chosen.path.empty());
  EXPECT_EQ(c.skipped.size(), 3u);
  EXPECT_TRUE(choose_resume({}).chosen.path.empty());
}

// --resume's decision: auto on nothing is a problem, auto-or-fresh starts fresh there; the newest
// valid file wins over a bad newer one (named); only bad files is a problem for both modes.
TEST(CheckpointSeries, ResumeDecisionForEachMode) {
  const std::string dir = fresh_dir() + "/";
  ResumeDecision d = resume_decision("auto", dir);
  EXPECT_EQ(d.path, "");
  EXPECT_NE(d.problem.find("--resume auto: no checkpoint in " + dir.substr(0, dir.size() - 1) +
                           " (no " + dir + "checkpoint-stepNNNNNN.safetensors)"),
            std::string::npos)
      << d.problem;
  d = resume_decision("auto-or-fresh", dir);
  EXPECT_EQ(d.path, "");
  EXPECT_EQ(d.problem, "");
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("starting fresh"), std::string::npos);
  EXPECT_NE(resume_decision("latest", dir).problem.find("--resume=latest: use auto"),
            std::string::npos);
  EXPECT_NE(resume_decision("auto", "").problem.find("give --save DIR/"), std::string::npos);
  touch(dir + "checkpoint-step000010.safetensors");
  touch(dir + "checkpoint-step000020.safetensors");
  const auto newest_bad = [](const std::string& p) -> std::string {
    return p.find("step000020") != std::string::npos ? "it is cut short" : "";
  };
  for (const char* mode : {"auto", "auto-or-fresh"}) {
    d = resume_decision(mode, dir, +newest_bad);
    EXPECT_EQ(d.path, dir + "checkpoint-step000010.safetensors") << mode;
    EXPECT_EQ(d.problem, "") << mode;
    ASSERT_EQ(d.notes.size(), 1u) << mode;
    EXPECT_EQ(d.notes[0], "skipped " + dir + "checkpoint-step000020.safetensors: it is cut short");
    const auto all_bad = [](const std::string&) -> std::string { return "bad"; };
    d = resume_decision(mode, dir, +all_bad);
    EXPECT_EQ(d.path, "") << mode;
    EXPECT_NE(d.problem.find("none of the 2 checkpoints of " + dir + " is valid"),
              std::string::npos)
        << d.problem;
  }
}

// A real checkpoint is valid; the same file cut short, or with one flipped byte in a tensor, is
// not, and the problem names the file.
TEST(CheckpointSeries, AFileProblemNamesTruncationAndCorruption) {
  const std::string dir = fresh_dir();
  SerialCommunicator solo;
  GptConfig cfg = tp::tiny_gpt(1);
  Gpt model(device(), solo, cfg);
  model.init(5);
  AdamW opt(device(), model.params(), AdamWParams{});
  const std::string good = dir + "/checkpoint-step000004.safetensors";
  save_checkpoint(good, solo, model, opt, 4);
  EXPECT_EQ(checkpoint_file_problem(good), "");
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 1000u);
  const std::string cut = dir + "/cut.safetensors", flipped = dir + "/flipped.safetensors";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::string changed = bytes;
  changed[changed.size() - 3] ^= 0x40;  // the last tensor's data
  std::ofstream(flipped, std::ios::binary) << changed;
  const std::string p_cut = checkpoint_file_problem(cut), p_flip = checkpoint_file_problem(flipped);
  EXPECT_NE(p_cut, "");
  EXPECT_NE(p_cut.find(cut), std::string::npos) << p_cut;
  EXPECT_NE(p_flip.find("checksum"), std::string::npos) << p_flip;
  EXPECT_NE(checkpoint_file_problem(dir + "/missing.safetensors"), "");
}

// A tiny real checkpoint at `path` holding `step`, written by run `run_id`.
void save_tiny(const std::string& path, int64_t step, const std::string& run_id) {
  SerialCommunicator solo;
  Gpt model(device(), solo, tp::tiny_gpt(1));
  model.init(5);
  AdamW opt(device(), model.params(), AdamWParams{});
  save_checkpoint(path, solo, model, opt, step, {run_id, "bytes"});
}

// Issue 39: the series is ordered by the step in each file's metadata, not by its name; a file
// whose header cannot be read keeps its name's step, is marked, and --resume auto skips it.
TEST(CheckpointSeries, OrdersByTheMetadataStepAndMarksUnreadableFiles) {
  const std::string dir = fresh_dir();
  const CheckpointSeries series(dir);
  save_tiny(series.path_for(50), 2, "r1");  // named step 50, holds step 2
  save_tiny(series.path_for(6), 6, "r1");
  touch(series.path_for(90), "not a checkpoint");
  EXPECT_EQ(checkpoint_origin(series.path_for(6)).run_id, "r1");
  EXPECT_EQ(checkpoint_origin(series.path_for(6)).tokens, "bytes");
  const auto listed = series.list();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(steps_of(listed), (std::vector<int64_t>{2, 6, 90}));
  EXPECT_EQ(listed[0].path, series.path_for(50));
  EXPECT_EQ(listed[0].run_id, "r1");
  EXPECT_EQ(listed[1].unreadable, "");
  EXPECT_NE(listed[2].unreadable, "");
  const ResumeDecision d = resume_decision("auto", dir);
  EXPECT_EQ(d.path, series.path_for(6)) << d.problem;
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0].rfind("skipped " + series.path_for(90), 0), 0u) << d.notes[0];
  // After this run (r1) saves step 6 again, neither the unreadable file nor the misnamed one of
  // step 2 (kept by --keep 2) is deleted.
  EXPECT_TRUE(series_to_delete(listed, {6, 2, "r1"}).empty());
}

// Issue 39: a folder that cannot be listed is an error naming the errno, for the listing and for
// --resume (auto-or-fresh does not start fresh beside files it cannot see).
TEST(CheckpointSeries, AFolderThatCannotBeListedIsAnErrorNamingTheErrno) {
  const std::string dir = fresh_dir();
  touch(dir + "/plain");  // --save plain/: a file where the folder should be
  fs::create_symlink("loop", dir + "/loop");
  std::vector<std::pair<std::string, std::string>> cases = {{dir + "/plain/", "ENOTDIR"},
                                                            {dir + "/loop/", "ELOOP"}};
  if (::geteuid() != 0) {  // root lists any folder
    fs::create_directories(dir + "/locked");
    fs::permissions(dir + "/locked", fs::perms::none);
    cases.push_back({dir + "/locked", "EACCES"});
  }
  for (const auto& [save, errno_name] : cases) {
    try {
      (void)CheckpointSeries(save).list();
      ADD_FAILURE() << "no error listing " << save;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot list the folder"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(errno_name), std::string::npos) << e.what();
    }
    for (const char* mode : {"auto", "auto-or-fresh"}) {
      const ResumeDecision d = resume_decision(mode, save);
      EXPECT_NE(d.problem.find(errno_name), std::string::npos) << mode << ": " << d.problem;
      EXPECT_TRUE(d.notes.empty()) << mode;
    }
    EXPECT_NE(check_series_owner(save, "me", ForeignSeries::Refuse).problem.find(errno_name),
              std::string::npos);
  }
  if (::geteuid() != 0) fs::permissions(dir + "/locked", fs::perms::owner_all);
  EXPECT_TRUE(CheckpointSeries(dir + "/missing/").list().empty());  // not there yet: no files
}

// Issue 39: a fresh run on another run's series is refused with one line naming the run and its
// newest step; --replace-series (Replace) turns it into a note; its own files, and files it cannot
// read, refuse nothing.
TEST(CheckpointSeries, AnotherRunsSeriesIsRefusedUnlessReplaced) {
  const std::string dir = fresh_dir() + "/";
  const CheckpointSeries series(dir);
  save_tiny(series.path_for(2), 2, "theirs");
  save_tiny(series.path_for(4), 4, "theirs");
  touch(series.path_for(8), "unreadable");
  SeriesOwnership own = check_series_owner(dir, "mine", ForeignSeries::Refuse);
  EXPECT_EQ(own.problem, "--save " + dir +
                             " holds run theirs up to step 4 (2 files, steps 2..4); give --resume "
                             "auto to continue it, --replace-series to delete it when this run "
                             "writes its first checkpoint, or another --save");
  own = check_series_owner(dir, "mine", ForeignSeries::Replace);
  EXPECT_EQ(own.problem, "");
  EXPECT_NE(own.note.find("deletes run theirs in " + dir + " (2 files, steps 2..4)"),
            std::string::npos)
      << own.note;
  own = check_series_owner(dir, "theirs", ForeignSeries::Refuse);
  EXPECT_EQ(own.problem + own.note, "");
  fs::create_directories(dir + "one");
  save_tiny(CheckpointSeries(dir + "one/").path_for(3), 3, "theirs");
  own = check_series_owner(dir + "one/", "mine", ForeignSeries::Refuse);
  EXPECT_NE(own.problem.find("holds run theirs up to step 3 (1 file, step 3);"), std::string::npos)
      << own.problem;
  save_tiny(series.path_for(6), 6, "");  // written before run ids
  own = check_series_owner(dir, "theirs", ForeignSeries::Refuse);
  EXPECT_NE(own.problem.find("holds checkpoints written before run ids (no run_id) up to step 6"),
            std::string::npos)
      << own.problem;
  EXPECT_TRUE(series.holds(series.path_for(4)));
  EXPECT_TRUE(series.holds(dir + "./" + fs::path(series.path_for(4)).filename().string()));
  EXPECT_FALSE(series.holds(dir + "elsewhere.safetensors"));
  // An edited run_id that is not of the kind written here is none: never printed, never matched.
  save_tiny(dir + "odd.safetensors", 1, "two\nlines");
  EXPECT_EQ(checkpoint_origin(dir + "odd.safetensors").run_id, "");
  EXPECT_EQ(checkpoint_origin(dir + "missing.safetensors").run_id, "");
}

// N counts what token_flops says: every parameter of a t = 1 model but wpe (and, untied, wte's
// lookup table), for each activation and norm; the FLOPs follow 6·N + 12·L·h·S, and the HFU terms.
TEST(Flops, NIsTheModelsMatrixParametersAndThePaLMFormula) {
  SerialCommunicator solo;
  for (Activation act : {Activation::Gelu, Activation::SwiGlu})
    for (NormKind norm : {NormKind::LayerNorm, NormKind::RmsNorm})
      for (bool tied : {true, false}) {
        GptConfig cfg = tp::tiny_gpt(2);
        cfg.act = act;
        cfg.norm = norm;
        cfg.tied = tied;
        cfg.kv_heads = 4;  // GQA: c_attn is h + 2·kv·hd wide
        Gpt model(device(), solo, cfg);
        int64_t all = 0;
        for (const Param& p : model.params()) all += p.shape.numel();
        const int64_t lookups = cfg.seq * cfg.hidden + (tied ? 0 : cfg.vocab * cfg.hidden);
        const TokenFlops f = token_flops(cfg, 10);
        EXPECT_EQ(f.n, all - lookups)
            << activation_name(act) << " " << norm_name(norm) << " tied " << tied;
        EXPECT_DOUBLE_EQ(f.model, 6.0 * static_cast<double>(f.n) + 12.0 * 2 * 24 * 10);
        EXPECT_DOUBLE_EQ(f.hardware, f.model);
      }
  GptConfig cfg = tp::tiny_gpt(3);
  const TokenFlops none = token_flops(cfg, 12);
  cfg.recompute = Recompute::Selective;
  EXPECT_DOUBLE_EQ(token_flops(cfg, 12).hardware, none.model + 4.0 * 3 * 24 * 12);
  cfg.recompute = Recompute::Full;
  const TokenFlops full = token_flops(cfg, 12);
  EXPECT_DOUBLE_EQ(full.model, none.model);  // MFU does not count the implementation's rerun
  EXPECT_DOUBLE_EQ(full.hardware,
                   none.model + 2.0 * static_cast<double>(none.n_blocks) + 4.0 * 3 * 24 * 12);
  EXPECT_LT(none.n_blocks, none.n);
}

// The global model's FLOPs are divided over the ranks: t ranks doing 1/t of the work each in the
// same time as one rank doing all of it have the same FLOP/s per rank... divided by t.
TEST(Flops, PerRankDividesTheGlobalModelsWork) {
  EXPECT_DOUBLE_EQ(flops_per_rank(1e6, 512, 2.0, 1), 2.56e8);
  EXPECT_DOUBLE_EQ(flops_per_rank(1e6, 512, 2.0, 4), 6.4e7);
  EXPECT_DOUBLE_EQ(flops_per_rank(1e6, 512, 0.0, 4), 0.0);
}

// The peak cache keeps one line per key, replaces a key's value, and reads 0 for what it lacks.
TEST(PeakCache, StoresOneValuePerMachineKey) {
  const std::string path = fresh_dir() + "/sub/sgemm-peak.txt";
  const std::string a = peak_cache_key("Xeon\tGold", "SkylakeX"),
                    b = peak_cache_key("Xeon", "Haswell");
  EXPECT_EQ(a, "Xeon Gold | openblas SkylakeX");
  EXPECT_EQ(cached_peak(path, a), 0.0);
  EXPECT_TRUE(store_peak(path, a, 150.5));
  EXPECT_TRUE(store_peak(path, b, 70.25));
  EXPECT_TRUE(store_peak(path, a, 148.0));
  EXPECT_DOUBLE_EQ(cached_peak(path, a), 148.0);
  EXPECT_DOUBLE_EQ(cached_peak(path, b), 70.25);
  EXPECT_EQ(cached_peak(path, "Xeon"), 0.0);  // a prefix of a key is not the key
  EXPECT_FALSE(store_peak("", a, 1.0));
  EXPECT_NE(cpu_model_name(), "");
}

// --data's held-out tail: a file whose first 900 bytes are lower-case letters and whose last 100
// (10 %) are upper-case. No training row holds an upper-case byte and every held-out row holds only
// upper-case ones, over many steps.
TEST(HeldOut, TextRowsNeverCrossTheSplit) {
  const std::string path = fresh_dir() + "/text.txt";
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>((i < 900 ? 'a' : 'A') + (i * 7) % 26);
  std::ofstream(path, std::ios::binary) << text;
  const TextSource src(path, 16, 3, 0.1);
  ASSERT_TRUE(src.has_held_out());
  EXPECT_NE(src.describe().find("the last 100 held out"), std::string::npos) << src.describe();
  int64_t train_upper = 0, held_lower = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const Batch t = src.batch(i, 8, 16), h = src.held_out_batch(i, 8, 16);
    for (size_t k = 0; k < t.ids.size(); ++k) {
      train_upper += (t.ids[k] < 'a') + (t.targets[k] < 'a');
      held_lower += (h.ids[k] >= 'a') + (h.targets[k] >= 'a');
    }
  }
  EXPECT_EQ(train_upper, 0);
  EXPECT_EQ(held_lower, 0);
  // Without a fraction (or with one too small for a row) nothing is held out, and training
  // reaches the end of the file.
  const TextSource all(path, 16, 3, 0.0);
  EXPECT_FALSE(all.has_held_out());
  int64_t upper = 0;
  for (int64_t i = 0; i < 200; ++i)
    for (int32_t id : all.batch(i, 8, 16).ids) upper += id < 'a';
  EXPECT_GT(upper, 0);
  const TextSource tiny(path, 16, 3, 0.01);  // 10 bytes < seq + 1
  EXPECT_FALSE(tiny.has_held_out());
  EXPECT_NE(tiny.describe().find("nothing held out"), std::string::npos) << tiny.describe();
  EXPECT_THROW(tiny.held_out_batch(0, 1, 16), Error);
}

// The Markov data's held-out stream: the same chain (every transition one of the table's), other
// sequences than any of the first 100 training steps'.
TEST(HeldOut, MarkovHeldOutStreamIsTheChainButNotTheTrainingSequences) {
  const MarkovSource src(64, 9);
  ASSERT_TRUE(src.has_held_out());
  const int64_t seq = 24, batch = 4;
  std::set<std::vector<int32_t>> training;
  auto rows = [&](const Batch& b) {
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(batch));
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t r = 0; r < batch; ++r) out[r].push_back(b.ids[s * batch + r]);
    return out;
  };
  for (int64_t i = 0; i < 100; ++i)
    for (const auto& r : rows(src.batch(i, batch, seq))) training.insert(r);
  for (int64_t i = 0; i < 10; ++i) {
    const Batch h = src.held_out_batch(i, batch, seq);
    for (size_t k = 0; k < h.ids.size(); ++k) {
      const auto& succ = src.successors(h.ids[k]);
      EXPECT_NE(std::find(succ.begin(), succ.end(), h.targets[k]), succ.end());
    }
    for (const auto& r : rows(h)) EXPECT_EQ(training.count(r), 0u);
  }
  EXPECT_NE(src.held_out_batch(0, batch, seq).ids, src.batch(0, batch, seq).ids);
}

// The validation loss at t = np equals t = 1 (the model tests' loss tolerance), with dropout off:
// a model built with dropout 0.1 evaluates as one built without it, and its training forward
// still drops (the loss differs).
TEST(HeldOut, ValidationLossMatchesSingleDeviceWithoutDropout) {
  GptConfig cfg = tp::tiny_gpt(2);
  cfg.dropout = 0.1f;
  GptConfig plain = cfg;
  plain.dropout = 0.0f;
  const MarkovSource src(cfg.vocab, 4);
  SerialCommunicator solo;
  Gpt tp_model(device(), world(), cfg), one(device(), solo, plain), one_drop(device(), solo, cfg);
  for (Gpt* m : {&tp_model, &one, &one_drop}) m->init(tp::testing::kSeed);
  const double at_t = held_out_loss(tp_model, src, 3, 4, cfg.seq, tp::testing::kSeed);
  const double ref = held_out_loss(one, src, 3, 4, cfg.seq, tp::testing::kSeed);
  EXPECT_NEAR(at_t, ref, tp::testing::kLossTol * std::abs(ref)) << "t = " << world().size();
  EXPECT_EQ(held_out_loss(one_drop, src, 3, 4, cfg.seq, tp::testing::kSeed), ref);
  const Batch b = src.held_out_batch(0, 4, cfg.seq);
  EXPECT_NE(one_drop.forward(b, tp::testing::kSeed, 0), one.forward(b, tp::testing::kSeed, 0));
  // A DP replica's slice in micro-batches: the two halves average to the whole.
  const double halves = (held_out_loss(one, src, 3, 4, cfg.seq, 1, {0, 2, 2}) +
                         held_out_loss(one, src, 3, 4, cfg.seq, 1, {2, 2, 1})) /
                        2;
  EXPECT_NEAR(halves, ref, 1e-6 * std::abs(ref));
}

// issue 39: the stop question is asked after each held-out batch; a yes ends the evaluation at
// once (a SIGTERM need not wait for --eval-batches batches) and the loss is NaN, not a mean of part.
TEST(HeldOut, AStopEndsTheEvaluationAfterTheBatchThatAskedIt) {
  const GptConfig cfg = tp::tiny_gpt(2);
  const MarkovSource src(cfg.vocab, 4);
  Gpt model(device(), world(), cfg);
  model.init(tp::testing::kSeed);
  int asked = 0;
  const double stopped = held_out_loss(model, src, 1000, 4, cfg.seq, tp::testing::kSeed, {},
                                       [&asked] { return ++asked == 2; });
  EXPECT_EQ(asked, 2);
  EXPECT_TRUE(std::isnan(stopped));
  asked = 0;
  const double whole = held_out_loss(model, src, 3, 4, cfg.seq, tp::testing::kSeed, {},
                                     [&asked] { return ++asked > 3; });
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(whole, held_out_loss(model, src, 3, 4, cfg.seq, tp::testing::kSeed));
}

}  // namespace
}  // namespace tp
