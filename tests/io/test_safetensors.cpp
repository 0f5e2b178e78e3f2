// test_safetensors.cpp — the safetensors reader/writer (serial): round trips, the byte layout, the
// atomic write, every validation error of the untrusted header, and garbage that must not crash;
// the CRC-32C checksums of the tensors, and a checkpoint's metadata checked against its tensors
// (model/checkpoint_meta.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"
#include "io/crc32c.h"
#include "io/durable_write.h"
#include "io/safetensors.h"
#include "model/checkpoint_meta.h"
#include "model/presets.h"

namespace {

namespace fs = std::filesystem;
namespace st = tp::safetensors;

// A fresh, empty folder for the current test under ::testing::TempDir().
std::string fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir =
      fs::path(::testing::TempDir()) /
      (std::string("tp_safetensors_") + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The 8-byte little-endian length, written byte by byte (independent of the host).
std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A whole file: length prefix, header as given, data.
std::string craft(const std::string& header, const std::string& data = "") {
  return u64le(header.size()) + header + data;
}

// Opens `path` (and reads every tensor) expecting a bad-input error containing `needle`, on one line.
void expect_bad_input(const std::string& path, const std::string& needle) {
  try {
    st::File f = st::File::open(path);
    for (const auto& name : f.names()) {
      if (f.info(name).dtype == st::DType::F32)
        f.read_f32(name);
      else
        f.read_i32(name);
    }
    ADD_FAILURE() << "no error for " << path << " (wanted '" << needle << "')";
  } catch (const tp::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "the message should name the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  }
}

// Writes `bytes` to a file in `dir` and expects a bad-input error containing `needle`.
void expect_bad_file(const std::string& dir, const std::string& bytes, const std::string& needle) {
  static int counter = 0;
  const std::string path = dir + "/bad_" + std::to_string(counter++) + ".safetensors";
  write_bytes(path, bytes);
  expect_bad_input(path, needle);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A small valid file with two tensors of each dtype and metadata.
st::Writer sample_writer() {
  st::Writer w;
  w.add_f32("wte", {3, 2}, {0.5f, -1.0f, 2.0f, 3.25f, -0.0f, 1e-3f});
  w.add_i32("tokens", {4}, {1, -2, 50256, 0});
  w.add_f32("ln.bias", {2}, {0.125f, 7.0f});
  w.add_i32("step", {}, {42});
  w.set_metadata("format", "tp");
  return w;
}

TEST(SafetensorsRoundTrip, SeveralTensorsScalarEmptyAndMetadata) {
  const std::string dir = fresh_dir(), path = dir + "/ckpt.safetensors";
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> w1 = {1.0f, -2.5f, 3.0e38f, -inf, inf, 1.0e-45f, -0.0f, 0.1f};
  const std::vector<int32_t> ids = {
      0, 1, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 12345};
  st::Writer w;
  w.add_f32("h.0.attn.c_attn.weight", {2, 4}, w1);
  w.add_i32("ids", {2, 3}, ids);
  w.add_f32("scale", {}, {3.5f});
  w.add_f32("empty", {0}, {});
  w.add_i32("empty_i32", {2, 0, 3}, {});
  w.add_f32("nan", {1}, {std::nanf("")});
  w.set_metadata("step", "1000");
  w.set_metadata("note", "héllo \"quoted\"\nsecond line");
  w.write(path);

  const st::File f = st::File::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"empty", "empty_i32", "h.0.attn.c_attn.weight",
                                                 "ids", "nan", "scale"}));
  EXPECT_TRUE(f.has("ids"));
  EXPECT_FALSE(f.has("missing"));
  EXPECT_FALSE(f.has("__metadata__"));

  EXPECT_EQ(f.info("h.0.attn.c_attn.weight").dtype, st::DType::F32);
  EXPECT_EQ(f.info("h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(same_bits(f.read_f32("h.0.attn.c_attn.weight"), w1));
  EXPECT_EQ(f.info("ids").dtype, st::DType::I32);
  EXPECT_EQ(f.read_i32("ids"), ids);

  EXPECT_TRUE(f.info("scale").shape.empty());
  EXPECT_EQ(f.info("scale").numel(), 1);
  EXPECT_EQ(f.read_f32("scale"), std::vector<float>{3.5f});
  EXPECT_EQ(f.info("empty").shape, std::vector<int64_t>{0});
  EXPECT_EQ(f.info("empty").numel(), 0);
  EXPECT_TRUE(f.read_f32("empty").empty());
  EXPECT_EQ(f.info("empty_i32").numel(), 0);
  EXPECT_TRUE(f.read_i32("empty_i32").empty());
  EXPECT_TRUE(std::isnan(f.read_f32("nan").at(0)));

  EXPECT_TRUE(f.has_metadata("step"));
  EXPECT_EQ(f.metadata("step"), "1000");
  EXPECT_EQ(f.metadata("note"), "héllo \"quoted\"\nsecond line");
  EXPECT_FALSE(f.has_metadata("absent"));
  EXPECT_EQ(f.metadata("absent"), "");
  EXPECT_EQ(f.metadata("absent", "dflt"), "dflt");
}

TEST(SafetensorsRoundTrip, NoTensorsNoMetadata) {
  const std::string path = fresh_dir() + "/empty.safetensors";
  st::Writer().write(path);
  const st::File f = st::File::open(path);
  EXPECT_TRUE(f.names().empty());
  EXPECT_FALSE(f.has_metadata("format"));
}

TEST(SafetensorsLayout, HeaderIsPaddedToEightBytesAndDataIsPacked) {
  const std::string dir = fresh_dir();
  // Vary the name length so the unpadded header length takes every residue mod 8.
  for (int extra = 0; extra < 8; ++extra) {
    const std::string path = dir + "/a" + std::to_string(extra) + ".safetensors";
    st::Writer w;
    w.add_f32("x" + std::string(extra, 'y'), {3}, {1.0f, 2.0f, 3.0f});
    w.add_i32("z", {2}, {7, 8});
    w.write(path);
    const std::string bytes = read_bytes(path);
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    EXPECT_EQ(n % 8, 0u) << "header length " << n;
    EXPECT_EQ(bytes.size(), 8 + n + 3 * 4 + 2 * 4);
    const std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.front(), '{');
    EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1).back(), '}');
    // Name order: "x..." at offset 0, then "z"; the data is the raw little-endian elements.
    const unsigned char one_le[4] = {0x00, 0x00, 0x80, 0x3f};  // 1.0f
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, one_le, 4), 0);
    const unsigned char seven_le[4] = {0x07, 0x00, 0x00, 0x00};
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 12, seven_le, 4), 0);
    EXPECT_EQ(st::File::open(path).read_i32("z"), (std::vector<int32_t>{7, 8}));
  }
}

TEST(SafetensorsLayout, ReadsAHandWrittenPythonStyleFile) {
  // What Python's safetensors writes: compact JSON, keys not sorted, data in another order than
  // the names, "__metadata__" first, header padded with spaces.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[3],"data_offsets":[0,12]},)"
      R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[12,28]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const unsigned char data[] = {0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff,
                                0x07, 0x00, 0x00, 0x00,                           // b = 1, -2, 7
                                0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0,   // a = 1.0, -2.0,
                                0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x40, 0x40};  //     0.5, 3.0
  const std::string path = fresh_dir() + "/python.safetensors";
  write_bytes(path, craft(header, std::string(reinterpret_cast<const char*>(data), sizeof data)));

  const st::File f = st::File::open(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.info("a").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f.read_f32("a"), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  EXPECT_EQ(f.read_i32("b"), (std::vector<int32_t>{1, -2, 7}));
  EXPECT_EQ(f.metadata("format"), "pt");
}

TEST(SafetensorsWrite, AtomicReplaceLeavesNoTempFile) {
  const std::string dir = fresh_dir(), path = dir + "/ckpt.safetensors";
  write_bytes(path, "old contents that are not a checkpoint");
  sample_writer().write(path);
  st::Writer w2;
  w2.add_f32("only", {1}, {9.0f});
  w2.write(path);
  const st::File f = st::File::open(path);
  EXPECT_EQ(f.names(), std::vector<std::string>{"only"});
  EXPECT_EQ(f.read_f32("only"), std::vector<float>{9.0f});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"ckpt.safetensors"});
}

TEST(SafetensorsWrite, FailureRemovesTempFileAndNamesThePath) {
  const std::string dir = fresh_dir();
  // The target is a directory: refused before anything is written (bad input: the user's path).
  const std::string target = dir + "/is_a_dir";
  fs::create_directories(target + "/inside");
  try {
    sample_writer().write(target);
    ADD_FAILURE() << "no error writing onto a directory";
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find(target), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
  }
  // A folder that does not exist: the temp file cannot be created.
  const std::string missing = dir + "/no/such/ckpt.safetensors";
  try {
    sample_writer().write(missing);
    ADD_FAILURE() << "no error writing into a missing folder";
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"is_a_dir"});
}

// A save that fails midway never touches the previous checkpoint at the path (tp_train relies on
// it to name the newest checkpoint of the run as intact): here the temporary file
// cannot be created because a folder squats on its name.
TEST(SafetensorsWrite, FailedSaveLeavesThePreviousFileIntact) {
  const std::string dir = fresh_dir(), path = dir + "/ckpt.safetensors";
  sample_writer().write(path);
  std::ifstream before_in(path, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(before_in)),
                           std::istreambuf_iterator<char>());
  fs::create_directories(path + ".tmp." + std::to_string(static_cast<long>(::getpid())) + "/x");
  st::Writer w2;
  w2.add_f32("only", {1}, {9.0f});
  EXPECT_THROW(w2.write(path), tp::Error);
  std::ifstream after_in(path, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(after_in)),
                          std::istreambuf_iterator<char>());
  EXPECT_EQ(after, before);
  EXPECT_TRUE(st::File::open(path).has("wte"));
}

TEST(SafetensorsWrite, ProgrammingErrorsAreNotBadInput) {
  auto expect_failure = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error (wanted '" << needle << "')";
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 1) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_failure(
      [] {
    st::Writer w;
    w.add_f32("x", {1}, {1.0f});
    w.add_i32("x", {1}, {1});
      },
      "'x' was added twice");
  expect_failure(
      [] {
    st::Writer().add_f32("x", {2, 3}, {1.0f});
      },
      "has 1 values but its shape holds 6");
  expect_failure([] { st::Writer().add_i32("x", {-1}, {}); }, "negative dim -1");
  expect_failure([] { st::Writer().add_f32("__metadata__", {}, {1.0f}); }, "is reserved");
  expect_failure([] { st::Writer().add_f32("bad\xff", {}, {1.0f}); }, "not valid UTF-8");
}

TEST(SafetensorsErrors, MissingShortOrAbsurdFiles) {
  const std::string dir = fresh_dir();
  expect_bad_input(dir + "/nope.safetensors", "cannot open checkpoint " + dir +
                                                  "/nope.safetensors: No such file or directory");
  expect_bad_input(dir, "not a regular file");
  expect_bad_file(dir, "", "is 0 bytes, shorter than the 8-byte header length");
  expect_bad_file(dir, "abc", "is 3 bytes, shorter than the 8-byte header length");
  expect_bad_file(dir, u64le(100) + "{}", "header length 100 is larger than the 2 bytes after it");
  expect_bad_file(dir, u64le(uint64_t{1} << 40) + "{}", "header length 1099511627776 is absurd");
  expect_bad_file(dir, u64le(~uint64_t{0}) + "{}", "is absurd");
}

TEST(SafetensorsErrors, HeaderNotJsonOrNotAnObject) {
  const std::string dir = fresh_dir();
  expect_bad_file(dir, craft("{\"a\": "), "the header is not valid JSON: parse error");
  expect_bad_file(dir, craft("not json"), "the header is not valid JSON");
  expect_bad_file(dir, craft(std::string("{\"\xff\": 1}")), "the header is not valid JSON");
  expect_bad_file(dir, craft(std::string(16, '\0')), "the header is not valid JSON");
  expect_bad_file(dir, craft(""), "the header is not valid JSON");
  expect_bad_file(dir, craft("[1, 2]"), "the header is a JSON array, not an object");
  expect_bad_file(dir, craft("\"text\"   "), "the header is a JSON string, not an object");
}

TEST(SafetensorsErrors, EntriesWithMissingOrWrongFields) {
  const std::string dir = fresh_dir();
  const std::string d12(12, '\0');
  expect_bad_file(dir, craft(R"({"w": 5})"), "tensor 'w': entry is a JSON number, not an object");
  expect_bad_file(dir, craft(R"({"w": {"shape": [3], "data_offsets": [0, 12]}})", d12),
                  "tensor 'w': entry lacks \"dtype\"");
  expect_bad_file(dir, craft(R"({"w": {"dtype": "F32", "data_offsets": [0, 12]}})", d12),
                  "entry lacks \"shape\"");
  expect_bad_file(dir, craft(R"({"w": {"dtype": "F32", "shape": [3]}})", d12),
                  "entry lacks \"data_offsets\"");
  expect_bad_file(dir, craft(R"({"w": {"dtype": 32, "shape": [3], "data_offsets": [0, 12]}})", d12),
                  "dtype is a JSON number, not a string");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": "3", "data_offsets": [0, 12]}})", d12),
                  "shape is a JSON string, not an array");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": [3.0], "data_offsets": [0, 12]}})", d12),
                  "holds a JSON number, not an integer");
  expect_bad_file(
      dir, craft(R"({"w": {"dtype": "F32", "shape": [null], "data_offsets": [0, 12]}})", d12),
      "holds a JSON null, not an integer");
  expect_bad_file(dir, craft(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [12]}})", d12),
                  "data_offsets [12] is not an array [begin, end]");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": {"a": 1}}})", d12),
                  "is not an array [begin, end]");
  expect_bad_file(
      dir, craft(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": ["0", "12"]}})", d12),
      "must be two non-negative integers");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [-4, 8]}})", d12),
                  "must be two non-negative integers");
}

TEST(SafetensorsErrors, DtypeShapeAndOffsets) {
  const std::string dir = fresh_dir();
  const std::string d12(12, '\0');
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F64", "shape": [3], "data_offsets": [0, 24]}})", d12),
                  "tensor 'w': dtype 'F64' is not supported (supported: F32, F16, BF16, I32)");
  expect_bad_file(
      dir, craft(R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 12]}})", d12),
      "shape [2,-3] has a negative dim");
  expect_bad_file(
      dir,
      craft(
          R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 12]}})",
          d12),
      "overflows the element count");
  expect_bad_file(
      dir,
      craft(R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 12]}})",
            d12),
      "overflows the element count");
  expect_bad_file(
      dir,
      craft(R"({"w": {"dtype": "I32", "shape": [4611686018427387904], "data_offsets": [0, 12]}})",
            d12),
      "overflows the byte count");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", d12),
                  "data_offsets [8, 4] have begin > end");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", d12),
                  "data_offsets [0, 8] span 8 bytes, but F32 shape [3] needs 12");
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "I32", "shape": [], "data_offsets": [0, 0]}})", d12),
                  "needs 4");
  // The exact wording for a truncated data section.
  const std::string path = dir + "/truncated.safetensors";
  write_bytes(path, craft(R"({"w": {"dtype": "F32", "shape": [30], "data_offsets": [0, 120]}})",
                          std::string(100, '\0')));
  expect_bad_input(
      path, "tensor 'w': data_offsets [0, 120] lie outside the 100-byte data section of file " +
                path + " (truncated?)");
}

// The strict rules: one name once, and tensors that tile the data section exactly.
TEST(SafetensorsErrors, DuplicatesGapsOverlapsAndShiftedHeaders) {
  const std::string dir = fresh_dir();
  const std::string d8(8, '\0');
  expect_bad_file(dir,
                  craft(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                        R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                        d8),
                  "the header names 'w' twice");
  expect_bad_file(dir,
                  craft(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                        R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                        d8),
                  "tensor 'b' (data_offsets [4, 8]) overlaps tensor 'a', which ends at 8");
  expect_bad_file(dir,
                  craft(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", d8),
                  "4 bytes of the data section between its start and tensor 'a' belong to no "
                  "tensor");
  expect_bad_file(dir,
                  craft(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", d8),
                  "the data section has 4 bytes after the last tensor 'a'");
  // A valid file whose length prefix is one byte short: the header still parses (its last byte
  // is padding), but every tensor would be read one byte early. Refused.
  const std::string good = dir + "/good.safetensors";
  sample_writer().write(good);
  std::string bytes = read_bytes(good);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  ASSERT_EQ(bytes[8 + n - 1], ' ') << "the sample's header should end in padding";
  expect_bad_file(
      dir, u64le(n - 1) + bytes.substr(8),
      "the header length (" + std::to_string(n - 1) + ") is wrong or the file was appended to");
  expect_bad_file(dir, bytes + "x", "1 bytes after the last tensor");
}

// Where a save may go: a FIFO or a directory is refused, a symbolic link is followed (the link
// stays and names the new file), and leftovers of a killed save are removed and named.
TEST(SafetensorsWrite, NotARegularFileSymlinksAndLeftovers) {
  const std::string dir = fresh_dir();
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    sample_writer().write(fifo);
    ADD_FAILURE() << "no error writing onto a FIFO";
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("is a FIFO (named pipe); give the path of a file"),
              std::string::npos)
        << e.what();
  }
  const std::string real = dir + "/real.safetensors", link = dir + "/link.safetensors";
  fs::create_symlink("real.safetensors", link);  // dangling until the first save
  sample_writer().write(link);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(real)));
  EXPECT_EQ(st::File::open(link).read_f32("ln.bias"), (std::vector<float>{0.125f, 7.0f}));
  st::Writer w2;
  w2.add_f32("only", {1}, {9.0f});
  w2.write(link);  // replaces the target, keeps the link
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(st::File::open(real).read_f32("only"), std::vector<float>{9.0f});

  // A leftover of a process that no longer exists (a child that has exited and been reaped).
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = real + ".tmp." + std::to_string(child);
  const std::string alive = real + ".tmp." + std::to_string(::getppid());  // a live process
  write_bytes(dead, "half a checkpoint");
  write_bytes(alive, "a save in progress elsewhere");
  ::testing::internal::CaptureStderr();
  w2.write(real);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive)) << "a live process's temporary file must be left alone";
  EXPECT_NE(said.find("removed " + dead + ", left behind by a save that was killed"),
            std::string::npos)
      << said;
  fs::remove(alive);
}

// Two processes saving to one path: the second is told, not silently overwritten.
TEST(SafetensorsWrite, ASecondSaverIsRefused) {
  const std::string dir = fresh_dir();
  const std::string path = dir + "/ckpt.safetensors";
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // holds the lock until the parent says so
    const tp::durable::SaveLock lock(path);
    char c = 'x';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    if (::read(done[0], &c, 1) != 1) ::_exit(1);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  try {
    sample_writer().write(path);
    ADD_FAILURE() << "no error while another process holds the save path";
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("another process (pid " + std::to_string(child) +
                                         ") is saving to " + path),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  ASSERT_EQ(::write(done[1], &c, 1), 1);
  ::waitpid(child, nullptr, 0);
  sample_writer().write(path);  // free again: the lock file went with its holder
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".lock"));
  {
    const tp::durable::SaveLock mine(path);
    sample_writer().write(path);  // the same process may save under its own lock
  }
}

// F16 and BF16: the conversions against values worked out by hand, and a file of each read as F32.
TEST(SafetensorsHalf, ConversionsRoundToNearestEvenAndReadAsF32) {
  // binary16: 1 = 0x3c00, -2 = 0xc000, 65504 (the largest) = 0x7bff, 2^-14 (smallest normal) =
  // 0x0400, 2^-24 (smallest subnormal) = 0x0001, inf = 0x7c00.
  const std::pair<float, uint16_t> f16[] = {{1.0f, 0x3c00},
                                            {-2.0f, 0xc000},
                                            {65504.0f, 0x7bff},
                                            {0.00006103515625f, 0x0400},
                                            {5.960464477539063e-8f, 0x0001},
                                            {0.0f, 0x0000}};
  for (const auto& [f, bits] : f16) {
    EXPECT_EQ(st::f32_to_f16(f), bits) << f;
    EXPECT_EQ(st::f16_to_f32(bits), f) << bits;
  }
  EXPECT_EQ(st::f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway: to even (down)
  EXPECT_EQ(st::f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // halfway: to even (up)
  EXPECT_EQ(st::f32_to_f16(1.0f + 1.5f / 2048), 0x3c01);  // above halfway: up
  EXPECT_EQ(st::f32_to_f16(65520.0f), 0x7c00);            // halfway past the largest: inf
  EXPECT_EQ(st::f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(st::f32_to_f16(3.0f * 5.960464477539063e-8f / 2), 0x0002);  // subnormal 1.5: even 2
  EXPECT_TRUE(std::isnan(st::f16_to_f32(st::f32_to_f16(std::nanf("")))));
  // bfloat16: the top half of the F32 bits.
  EXPECT_EQ(st::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(st::bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(st::f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // halfway: to even (down)
  EXPECT_EQ(st::f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);  // halfway: to even (up)

  const std::string path = fresh_dir() + "/half.safetensors";
  const std::vector<float> v = {0.5f, -1.25f, 3.0f, 1.0f + 1.0f / 1024};
  st::Writer w;
  w.add_float("a", st::DType::F16, {2, 2}, v);
  w.add_float("b", st::DType::BF16, {4}, v);
  w.add_float("c", st::DType::F32, {4}, v);
  w.write(path);
  const st::File f = st::File::open(path);
  EXPECT_EQ(f.info("a").dtype, st::DType::F16);
  EXPECT_EQ(f.info("b").dtype, st::DType::BF16);
  EXPECT_EQ(f.read_as_f32("a"), v);  // every value is exact in F16
  EXPECT_EQ(f.read_as_f32("b"), (std::vector<float>{0.5f, -1.25f, 3.0f, 1.0f}));  // 8 bits
  EXPECT_EQ(f.read_as_f32("c"), v);
  try {
    f.read_f32("a");
    ADD_FAILURE() << "read_f32 of an F16 tensor";
  } catch (const tp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'a' is F16, not F32"), std::string::npos)
        << e.what();
  }
}

TEST(SafetensorsErrors, MetadataMustBeStrings) {
  const std::string dir = fresh_dir();
  expect_bad_file(dir, craft(R"({"__metadata__": {"step": 1000}})"),
                  "__metadata__ value 'step' is a JSON number, not a string");
  expect_bad_file(dir, craft(R"({"__metadata__": ["a"]})"),
                  "__metadata__ is a JSON array, not an object of strings");
}

TEST(SafetensorsErrors, MissingTensorAndWrongDtype) {
  const std::string path = fresh_dir() + "/ckpt.safetensors";
  sample_writer().write(path);
  const st::File f = st::File::open(path);
  auto expect = [&](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error (wanted '" << needle << "')";
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect([&] { f.info("wpe"); },
         "has no tensor 'wpe' (it has 4 tensors: ln.bias, step, tokens, wte)");
  expect([&] { f.read_f32("wpe"); }, "has no tensor 'wpe'");
  expect([&] { f.read_f32("tokens"); }, "tensor 'tokens' is I32, not F32");
  expect([&] { f.read_i32("wte"); }, "tensor 'wte' is F32, not I32");
  expect([&] { f.info("line\nbreak"); }, "has no tensor 'line\\nbreak'");
}

TEST(SafetensorsErrors, FileShrunkAfterOpen) {
  const std::string path = fresh_dir() + "/ckpt.safetensors";
  sample_writer().write(path);
  const st::File f = st::File::open(path);
  fs::resize_file(path, fs::file_size(path) - 4);
  try {
    f.read_f32("wte");
    ADD_FAILURE() << "no error reading past the end";
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find("the file ended before its data"), std::string::npos)
        << e.what();
  }
}

// Opens `path` and reads every tensor; returns true when it parsed, false on a tp::Error. Any other
// exception escapes and fails the test.
bool try_open_and_read(const std::string& path) {
  try {
    const st::File f = st::File::open(path);
    for (const auto& name : f.names()) {
      const auto& info = f.info(name);
      if (info.dtype == st::DType::F32)
        EXPECT_EQ(static_cast<int64_t>(f.read_f32(name).size()), info.numel());
      else
        EXPECT_EQ(static_cast<int64_t>(f.read_i32(name).size()), info.numel());
    }
    return true;
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return false;
  }
}

TEST(SafetensorsFuzz, EveryTruncationOfAValidFileIsRejected) {
  const std::string dir = fresh_dir(), good = dir + "/good.safetensors",
                    cut = dir + "/cut.safetensors";
  sample_writer().write(good);
  const std::string bytes = read_bytes(good);
  ASSERT_TRUE(try_open_and_read(good));
  for (size_t len = 0; len < bytes.size(); ++len) {
    write_bytes(cut, bytes.substr(0, len));
    EXPECT_FALSE(try_open_and_read(cut))
        << "a " << len << "-byte prefix of " << bytes.size() << " parsed";
  }
}

TEST(SafetensorsFuzz, RandomGarbageNeverCrashes) {
  const std::string dir = fresh_dir(), good = dir + "/good.safetensors",
                    path = dir + "/garbage.safetensors";
  sample_writer().write(good);
  const std::string valid = read_bytes(good);
  const std::string json_chars = "{}[]\":,0123456789-.eE FI32dtypeshapedata_offsets__metadata__\\u";
  std::mt19937 rng(20240611);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int parsed = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes;
    switch (i % 4) {
      case 0: {  // pure random bytes
        bytes.resize(pick(300));
        for (char& c : bytes) c = static_cast<char>(pick(256));
        break;
      }
      case 1: {  // a plausible length, then JSON-ish characters
        std::string header(pick(120), ' ');
        for (char& c : header) c = json_chars[pick(json_chars.size())];
        bytes = craft(header, std::string(pick(64), '\x01'));
        break;
      }
      case 2: {  // a valid file with a few random bytes changed
        bytes = valid;
        for (size_t k = 0, n = 1 + pick(4); k < n; ++k)
          bytes[pick(bytes.size())] = static_cast<char>(pick(256));
        break;
      }
      default: {  // a valid file with a random JSON-ish character changed inside the header
        bytes = valid;
        bytes[8 + pick(valid.size() - 8 - 52)] = json_chars[pick(json_chars.size())];
        break;
      }
    }
    write_bytes(path, bytes);
    parsed += try_open_and_read(path) ? 1 : 0;
  }
  // Some mutations only touch the data or the padding, so a few files still parse.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 400);
}

// ---------------------------------------------------------------------------------------------
// Checksums (io/crc32c.h) and checkpoints that cannot lie (model/checkpoint_meta.h)

TEST(Crc32c, KnownValuesAndBothImplementationsAgree) {
  // The check value of CRC-32C, and RFC 3720's examples (32 bytes of 0x00, of 0xFF, 0..31).
  EXPECT_EQ(tp::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(tp::crc32c_portable("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string up(32, '\0');
  for (int i = 0; i < 32; ++i) up[i] = static_cast<char>(i);
  EXPECT_EQ(tp::crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(tp::crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(tp::crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(tp::crc32c(nullptr, 0), 0u);
  // Every alignment and length near the 8-byte steps, and a large buffer: hardware = portable,
  // and a CRC continued over two pieces = the CRC of the whole.
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(1 << 20);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t off = 0; off < 9; ++off)
    for (size_t n = 0; n < 70; ++n)
      ASSERT_EQ(tp::crc32c(buf.data() + off, n), tp::crc32c_portable(buf.data() + off, n))
          << "offset " << off << ", " << n << " bytes";
  EXPECT_EQ(tp::crc32c(buf.data(), buf.size()), tp::crc32c_portable(buf.data(), buf.size()));
  const uint32_t first = tp::crc32c(buf.data(), 12345);
  EXPECT_EQ(tp::crc32c(buf.data() + 12345, buf.size() - 12345, first),
            tp::crc32c(buf.data(), buf.size()));
  uint32_t parsed = 0;
  EXPECT_EQ(tp::crc32c_hex(0xE3069283u), "e3069283");
  EXPECT_TRUE(tp::parse_crc32c_hex("E3069283", parsed));
  EXPECT_EQ(parsed, 0xE3069283u);
  EXPECT_FALSE(tp::parse_crc32c_hex("e306928", parsed));
  EXPECT_FALSE(tp::parse_crc32c_hex("e306928g", parsed));
}

TEST(SafetensorsChecksums, WrittenForEveryTensorAndAFlippedBitIsNamed) {
  const std::string dir = fresh_dir(), path = dir + "/ckpt.safetensors";
  sample_writer().write(path);
  {
    const st::File f = st::File::open(path);
    EXPECT_TRUE(f.checksums());
    for (const auto& name : f.names()) EXPECT_TRUE(f.has_metadata("crc32c." + name)) << name;
    EXPECT_EQ(f.metadata("crc32c.wte").size(), 8u);
  }
  // Every single bit of the data section, flipped, is caught by the read of its tensor.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const std::string flipped = dir + "/flipped.safetensors";
  for (size_t at = 8 + n; at < bytes.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = bytes;
      b[at] = static_cast<char>(b[at] ^ (1 << bit));
      write_bytes(flipped, b);
      ASSERT_FALSE(try_open_and_read(flipped)) << "byte " << at << " bit " << bit;
    }
  // The message names the tensor, both checksums and the file.
  std::string b = bytes;
  b[8 + n] = static_cast<char>(b[8 + n] ^ 1);  // the first tensor in name order: "ln.bias"
  write_bytes(flipped, b);
  expect_bad_input(flipped, "tensor 'ln.bias' fails its checksum (crc32c ");
  // The writer keeps the checksum keys to itself.
  EXPECT_THROW(st::Writer().set_metadata("crc32c.wte", "00000000"), tp::Error);
}

TEST(SafetensorsChecksums, FilesWithoutThemLoadAndPartialOrBadOnesAreRefused) {
  const std::string dir = fresh_dir();
  const std::string t2 = R"("a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                         R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]})";
  const std::string d8(8, '\0');
  // None (a hub file, an older checkpoint): read, unverified.
  const std::string none = dir + "/none.safetensors";
  write_bytes(none, craft("{" + t2 + "}", d8));
  EXPECT_FALSE(st::File::open(none).checksums());
  EXPECT_EQ(st::File::open(none).read_f32("b"), std::vector<float>{0.0f});
  const std::string crc0 = tp::crc32c_hex(tp::crc32c(d8.data(), 4));
  expect_bad_file(dir,
                  craft(R"({"__metadata__": {"crc32c.a": ")" + crc0 + R"("}, )" + t2 + "}", d8),
                  "tensor 'b' has no checksum although 1 of its 2 tensors have one");
  expect_bad_file(dir,
                  craft(R"({"__metadata__": {"crc32c.a": ")" + crc0 + R"(", "crc32c.b": ")" + crc0 +
                            R"(", "crc32c.c": ")" + crc0 + R"("}, )" + t2 + "}",
                        d8),
                  "metadata 'crc32c.c' is the checksum of a tensor the file does not have");
  expect_bad_file(
      dir, craft(R"({"__metadata__": {"crc32c.a": "xyz", "crc32c.b": "0"}, )" + t2 + "}", d8),
      "metadata 'crc32c.a'='xyz' is not a checksum (8 hex digits)");
}

// 200 000 metadata keys (an 8 MB header): the duplicate check is one pass with a hash set, so the
// header is read (or refused for a key given twice) in time linear in its keys; a list searched per
// key took about a minute. Measured as a ratio, not a time (machines and sanitized builds differ):
// 8× the keys must cost well under the 64× a quadratic check would (bound 24×: three times linear),
// in CPU time, which other processes do not inflate.
TEST(SafetensorsErrors, TwoHundredThousandKeysAreReadInLinearTime) {
  const std::string dir = fresh_dir();
  const std::string tensor = R"("a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  auto header_of = [&](int keys, const std::string& extra) {
    std::string meta;
    for (int i = 0; i < keys; ++i) {
      char key[32];
      std::snprintf(key, sizeof key, "%s\"k%06d\": \"", i ? ", " : "", i);
      meta += key + std::string(30, 'v') + "\"";
    }
    return craft(R"({"__metadata__": {)" + meta + extra + "}, " + tensor + "}",
                 std::string(4, '\0'));
  };
  // CPU seconds to open a file, best of 3 (the first read also warms the page cache).
  auto open_cpu = [](const std::string& path) {
    double best = 1e9;
    for (int r = 0; r < 3; ++r) {
      const std::clock_t start = std::clock();
      const st::File f = st::File::open(path);
      best = std::min(best, static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC);
    }
    return best;
  };
  const std::string small = dir + "/few.safetensors", good = dir + "/many.safetensors",
                    dup = dir + "/many_dup.safetensors";
  write_bytes(small, header_of(25000, ""));
  write_bytes(good, header_of(200000, ""));
  write_bytes(dup, header_of(200000, R"(, "k000123": "x")"));
  ASSERT_GT(read_bytes(good).size(), 8u << 20);
  EXPECT_EQ(st::File::open(good).metadata("k199999"), std::string(30, 'v'));
  const double few_s = open_cpu(small), many_s = open_cpu(good);
  EXPECT_LT(many_s, 24 * std::max(few_s, 1e-3))
      << "CPU seconds to open 200k keys: " << many_s << ", 25k keys: " << few_s;
  expect_bad_input(dup, "the header names 'k000123' twice");
  // A duplicate written with other escapes is found too (the parsed header has fewer keys).
  expect_bad_file(dir,
                  craft(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                        R"( "\u0061": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                        std::string(4, '\0')),
                  "twice");
}

TEST(SafetensorsWrite, SaveTargetsAreCheckedUpFront) {
  const std::string dir = fresh_dir();
  auto refused = [](const std::string& path, int64_t bytes, const std::string& needle) {
    try {
      tp::durable::check_save_target(path, bytes);
      ADD_FAILURE() << "no error for " << path;
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("/dev/full", 0, "cannot write checkpoint /dev/full: it is a device");
  refused(dir + "/ck.safetensors", int64_t{1} << 62,
          "but its folder " + dir + "/ has ");  // 4 EiB: no disk has that much free
  EXPECT_NO_THROW(tp::durable::check_save_target(dir + "/ck.safetensors", 1 << 20));
  EXPECT_NE(tp::errno_text(ENOSPC).find("(ENOSPC)"), std::string::npos);
  EXPECT_NE(tp::errno_text(EROFS).find("Read-only file system (EROFS)"), std::string::npos);
  // A save that fails is one line with errno: /dev/full refuses every write with ENOSPC; a
  // Writer aimed at it through a symbolic link is refused before writing (it is a device).
  fs::create_symlink("/dev/full", dir + "/link.safetensors");
  refused(dir + "/link.safetensors", 0, "/dev/full is a device");
}

// A write that fails midway is one line naming the call, the bytes written and errno, at once; the
// temporary file is removed and the previous file is untouched. Here a child process may write
// files of at most 4096 bytes (RLIMIT_FSIZE, with SIGXFSZ ignored), so write(2) fails with EFBIG
// as it would with ENOSPC on a full disk (scripts/tests/checkpoint.sh makes a real one).
TEST(SafetensorsWrite, AFailedWriteIsOneLineWithErrno) {
  const std::string dir = fresh_dir(), path = dir + "/ckpt.safetensors";
  sample_writer().write(path);
  const std::string before = read_bytes(path), said = dir + "/said.txt";
  const pid_t child = ::fork();
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit = {4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    st::Writer big;
    big.add_f32("big", {4096}, std::vector<float>(4096, 1.0f));
    try {
      big.write(path);
    } catch (const tp::Error& e) {
      std::FILE* f = std::fopen(said.c_str(), "w");
      if (f == nullptr) ::_exit(4);
      std::fputs(e.what(), f);
      std::fclose(f);
      ::_exit(e.exit_code() == 1 ? 0 : 5);
    }
    ::_exit(6);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's save did not fail as expected";
  const std::string msg = read_bytes(said);
  EXPECT_NE(msg.find("cannot write checkpoint " + path + ": write to " + path + ".tmp." +
                     std::to_string(child) + " failed after "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("File too large (EFBIG)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(child)));
  EXPECT_EQ(read_bytes(path), before);
}

// A checkpoint's configuration metadata against its tensors. The file here has the tensors the
// checks look at (zeros; the shapes are what matter) and the metadata save_checkpoint writes.
struct FakeCheckpoint {
  tp::GptConfig c;
  std::map<std::string, std::string> meta;  // replaces or (with "") removes a key
  bool moments = false;
  std::string write(const std::string& path) const {
    st::Writer w;
    const int64_t h = c.hidden, hd = c.hidden / c.heads;
    auto zeros = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      w.add_f32(name, shape, std::vector<float>(static_cast<size_t>(n), 0.0f));
    };
    zeros("transformer.wte.weight", {c.vocab, h});
    zeros("transformer.wpe.weight", {c.seq, h});
    for (int64_t l = 0; l < c.layers; ++l)
      zeros("transformer.h." + std::to_string(l) + ".ln_1.weight", {h});
    if (c.norm == tp::NormKind::LayerNorm) zeros("transformer.h.0.ln_1.bias", {h});
    zeros("transformer.h.0.attn.c_attn.weight", {h, h + 2 * c.kv() * hd});
    zeros("transformer.h.0.mlp.c_fc.weight", {h, c.inner()});
    if (c.act == tp::Activation::SwiGlu) zeros("transformer.h.0.mlp.c_gate.weight", {h, c.inner()});
    if (!c.tied) zeros("lm_head.weight", {c.vocab, h});
    if (moments) zeros("optimizer.exp_avg.transformer.wte.weight", {c.vocab, h});
    std::map<std::string, std::string> m = {{"layers", std::to_string(c.layers)},
                                            {"hidden", std::to_string(c.hidden)},
                                            {"heads", std::to_string(c.heads)},
                                            {"kv_heads", std::to_string(c.kv())},
                                            {"ffn", std::to_string(c.inner())},
                                            {"vocab", std::to_string(c.vocab)},
                                            {"seq", std::to_string(c.seq)},
                                            {"act", tp::activation_name(c.act)},
                                            {"norm", tp::norm_name(c.norm)},
                                            {"tied", c.tied ? "true" : "false"},
                                            {"step", "5"},
                                            {"adam_steps", "5"},
                                            {"config_crc32c", tp::config_checksum(c)}};
    for (const auto& [k, v] : meta) m[k] = v;
    for (const auto& [k, v] : m)
      if (!v.empty()) w.set_metadata(k, v);
    w.write(path);
    return path;
  }
};

// L = 2, h = 24, nh = 6, f = 32, V = 40, S = 8.
tp::GptConfig small_config() { return tp::gpt_shape(2, 24, 6, 0, 32, 40, 8); }

// Expects checked_checkpoint_config (and check_checkpoint_metadata) of the file to refuse it,
// naming the file and `needle`, on one line.
void expect_refused(const std::string& path, const std::string& needle) {
  for (int all = 0; all < 2; ++all) {
    try {
      const st::File f = st::File::open(path);
      if (all)
        (void)tp::checked_checkpoint_config(f);
      else
        tp::check_checkpoint_metadata(f);
      ADD_FAILURE() << "no error for " << path << " (wanted '" << needle << "')";
    } catch (const tp::Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.exit_code(), 2) << msg;
      EXPECT_NE(msg.find("checkpoint " + path), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

// config_crc32c of two configs, as the build before GptConfig's act and norm became enums wrote
// them (tp_train --steps 0 --save, default sizes L=2 h=64 nh=4 ffn=256 V=256 S=64, tied): the
// checksum hashes the words "gelu"/"swiglu" and "layernorm"/"rmsnorm", so a change of the names
// would make every saved checkpoint fail its check.
TEST(CheckpointMetadata, ConfigChecksumIsThatOfOlderFiles) {
  tp::GptConfig c;
  EXPECT_EQ(tp::config_checksum(c), "a994ec17");
  c.act = tp::Activation::SwiGlu;
  c.norm = tp::NormKind::RmsNorm;
  EXPECT_EQ(tp::config_checksum(c), "5d196307");
}

TEST(CheckpointMetadata, AgreesWithTheTensorsOrIsRefusedByKeyAndValue) {
  const std::string dir = fresh_dir();
  int k = 0;
  auto file = [&](FakeCheckpoint fake) {
    return fake.write(dir + "/ck" + std::to_string(k++) + ".safetensors");
  };
  FakeCheckpoint good{small_config(), {}, true};
  const tp::GptConfig read = tp::checked_checkpoint_config(st::File::open(file(good)));
  EXPECT_EQ(read.layers, 2);
  EXPECT_EQ(read.heads, 6);
  EXPECT_EQ(read.kv(), 6);
  EXPECT_EQ(read.inner(), 32);
  // GQA, SwiGLU, RMSNorm, untied: the same checks pass.
  FakeCheckpoint other{small_config(), {}, false};
  other.c.kv_heads = 2;
  other.c.act = tp::Activation::SwiGlu;
  other.c.norm = tp::NormKind::RmsNorm;
  other.c.tied = false;
  EXPECT_EQ(tp::checked_checkpoint_config(st::File::open(file(other))).kv(), 2);

  // Sizes that would be allocated: refused before that, by key and value.
  auto with = [&](std::map<std::string, std::string> meta) {
    FakeCheckpoint f = good;
    f.meta = std::move(meta);
    return file(f);
  };
  expect_refused(with({{"layers", "1000000"}}),
                 "metadata layers=1000000 contradicts its tensors: it has blocks "
                 "transformer.h.0 .. transformer.h.1, so layers=2");
  expect_refused(with({{"vocab", "2147483648"}}),
                 "metadata vocab=2147483648 contradicts its tensors: tensor "
                 "transformer.wte.weight has 40 rows, so vocab=40");
  expect_refused(with({{"hidden", "48"}}), "metadata hidden=48 contradicts");
  expect_refused(with({{"seq", "9"}}), "metadata seq=9 contradicts");
  expect_refused(with({{"ffn", "64"}}), "metadata ffn=64 contradicts");
  expect_refused(with({{"layers", "99999999999999999999"}}), "metadata layers=9999");
  expect_refused(with({{"vocab", "-4"}}), "metadata vocab=-4 is not a count of at least 1");
  // heads: c_attn's shape gives kv_heads/heads = 1; heads=3 with kv_heads=6 does not fit it.
  expect_refused(with({{"heads", "3"}}),
                 "metadata heads=3 (with kv_heads=6) contradicts its tensors: tensor "
                 "transformer.h.0.attn.c_attn.weight has shape [24, 72], q | k | v for "
                 "kv_heads/heads = 1/1");
  expect_refused(with({{"heads", "5"}, {"kv_heads", "5"}}), "hidden 24");
  // Both edited to another MHA layout the shapes allow: config_crc32c names the heads saved.
  expect_refused(with({{"heads", "3"}, {"kv_heads", "3"}}),
                 "metadata heads=3, kv_heads=3 were changed after the file was saved: its "
                 "config_crc32c=" +
                     tp::config_checksum(small_config()) + " fits heads=6, kv_heads=6");
  // Words the tensors contradict, or that are not this project's.
  expect_refused(with({{"act", "relu"}}), "metadata act=relu is not one this project writes");
  expect_refused(with({{"act", "swiglu"}}),
                 "metadata act=swiglu contradicts its tensors: it has no "
                 "transformer.h.0.mlp.c_gate.weight, so act=gelu");
  expect_refused(with({{"norm", "rmsnorm"}}),
                 "it has transformer.h.0.ln_1.bias, so norm=layernorm");
  expect_refused(with({{"tied", "false"}}), "it has no lm_head.weight, so tied=true");
  // A required key missing.
  try {
    (void)tp::checked_checkpoint_config(st::File::open(with({{"heads", ""}})));
    ADD_FAILURE() << "no error without heads";
  } catch (const tp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no 'heads' in its metadata"), std::string::npos)
        << e.what();
  }
}

TEST(CheckpointMetadata, AdamStepsMustComeWithTheMoments) {
  const std::string dir = fresh_dir();
  FakeCheckpoint fake{small_config(), {}, true};
  auto adam = [&](std::map<std::string, std::string> meta, bool moments, int64_t step) {
    fake.meta = std::move(meta);
    fake.moments = moments;
    return tp::checked_adam_steps(st::File::open(fake.write(dir + "/ck.safetensors")), step);
  };
  EXPECT_EQ(adam({}, true, 5), 5);
  EXPECT_EQ(adam({{"adam_steps", ""}}, false, 5), 0);  // no moments: nothing to correct
  EXPECT_EQ(adam({{"adam_steps", "0"}}, true, 5), 0);  // load_checkpoint then needs zero moments
  for (const auto& [meta, needle] :
       std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"adam_steps", ""}},
            "holds AdamW moments (optimizer.exp_avg.*) but no metadata "
            "adam_steps"},
           {{{"adam_steps", "x1"}}, "metadata adam_steps=x1 is not a count"},
           {{{"adam_steps", "6"}}, "metadata adam_steps=6 is more than its step=5"}}) {
    try {
      (void)adam(meta, true, 5);
      ADD_FAILURE() << "no error (wanted '" << needle << "')";
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

}  // namespace
