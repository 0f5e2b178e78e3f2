// safetensors.h — read and write checkpoints in the safetensors format (Hugging Face).
//
// A file is three parts, back to back:
//
//     [ N: u64, little-endian ][ N bytes of UTF-8 JSON header ][ data section ]
//
// The header is a JSON object mapping each tensor name to
// {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}; the offsets are bytes relative
// to the start of the data section, and (end - begin) = numel x dtype size. An optional
// "__metadata__" entry maps strings to strings. Tensor data is little-endian, row-major and
// tightly packed. Writers pad the header with trailing spaces so the data section starts on an
// 8-byte boundary.
//
// The header of a file being read is untrusted input: tp::safetensors::File::open validates all of
// it and reports any problem as a one-line bad-input tp::Error (exit code 2) naming the file, the
// tensor and the problem. Every tensor a Writer writes carries a CRC-32C checksum in the metadata,
// checked on every read. This file is the format only: Writer::write hands the bytes to
// io/durable_write.h, which saves them crash-safe (the lock, a temporary file, fsync, rename).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tp::safetensors {

/// The element types this project reads and writes ("F32", "I32", "F16" and "BF16" in the
/// header). F16 (IEEE-754 binary16) and BF16 (the top 16 bits of an F32) are how released weights
/// often come; they are read as F32 (read_as_f32) and written from F32 (add_float).
enum class DType { F32, I32, F16, BF16 };

/// The header's name of a dtype: "F32", "I32", "F16" or "BF16".
const char* dtype_name(DType dtype);
/// Bytes per element: 4 for F32 and I32, 2 for F16 and BF16.
int64_t dtype_size(DType dtype);

/// binary16 bits → float (exact: every F16 value is an F32 value, subnormals included).
float f16_to_f32(uint16_t bits);
/// float → binary16 bits, rounded to nearest even; overflow gives ±inf, NaN stays NaN.
uint16_t f32_to_f16(float value);
/// bfloat16 bits → float (exact: the bits are the top half of the F32).
float bf16_to_f32(uint16_t bits);
/// float → bfloat16 bits, rounded to nearest even; NaN stays NaN.
uint16_t f32_to_bf16(float value);

/// What the header says about one tensor.
struct TensorInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  ///< row-major; [] is a scalar (1 element), [0] is empty
  /// Product of the dims (1 for a scalar shape []).
  int64_t numel() const;
};

/// Collects named tensors and metadata, then writes them to one file atomically.
///
///     tp::safetensors::Writer w;
///     w.add_f32("h.0.attn.c_attn.weight", {768, 2304}, std::move(values));
///     w.set_metadata("step", "1000");
///     w.write("ckpt.safetensors");
class Writer {
 public:
  /// Adds an F32 tensor. `values.size()` must equal the product of `shape`; the name must be new
  /// (a duplicate is a TP_CHECK error) and must not be "__metadata__".
  void add_f32(const std::string& name, const std::vector<int64_t>& shape,
               std::vector<float> values);
  /// Adds an I32 tensor; the same rules as add_f32.
  void add_i32(const std::string& name, const std::vector<int64_t>& shape,
               std::vector<int32_t> values);
  /// Adds float values stored as `dtype` (F32, F16 or BF16; F16 and BF16 round to nearest even).
  void add_float(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                 const std::vector<float>& values);
  /// Sets (or replaces) one "__metadata__" string. Keys "crc32c.*" are reserved (the checksums).
  void set_metadata(const std::string& key, const std::string& value);

  /// Writes the file, crash-safe: durable::write (io/durable_write.h) saves the bytes to
  /// `path` + ".tmp.<pid>", fsyncs them and renames them onto `path`, under a SaveLock, so a
  /// reader never sees a half-written checkpoint and a failed save (a tp::Error naming the call,
  /// the path and errno) leaves whatever was at `path` untouched. Tensors are laid out in name
  /// order; the metadata gets "crc32c.<name>", the CRC-32C of each tensor's bytes (io/crc32c.h),
  /// which File verifies on every read.
  void write(const std::string& path) const;

 private:
  struct Entry {
    TensorInfo info;
    std::vector<char> bytes;  // little-endian element bytes
  };
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* data, size_t count);
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A safetensors file opened for reading. open() reads and validates the whole header; tensor data
/// is read from disk on demand by read_f32 / read_i32.
class File {
 public:
  /// Opens `path` and validates its header. Throws a bad-input tp::Error (exit code 2) when the
  /// file is missing, unreadable, truncated or malformed, e.g.
  /// "cannot open checkpoint ckpt.safetensors: No such file or directory".
  static File open(const std::string& path);

  /// The path the file was opened with.
  const std::string& path() const { return path_; }
  /// True when the file holds a tensor called `name`.
  bool has(const std::string& name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// The dtype and shape of `name`; a bad-input error naming the tensor when it is missing.
  const TensorInfo& info(const std::string& name) const;

  /// Reads tensor `name` (which must be F32) from disk, row-major.
  std::vector<float> read_f32(const std::string& name) const;
  /// Reads tensor `name` (F32, F16 or BF16) from disk as F32, row-major; the conversion is exact.
  std::vector<float> read_as_f32(const std::string& name) const;
  /// Reads tensor `name` (which must be I32) from disk, row-major.
  std::vector<int32_t> read_i32(const std::string& name) const;

  /// The "__metadata__" value of `key`, or `fallback` when there is none.
  std::string metadata(const std::string& key, const std::string& fallback = "") const;
  /// True when "__metadata__" has `key`.
  bool has_metadata(const std::string& key) const;
  /// True when every tensor carries a checksum (metadata "crc32c.<name>", as Writer writes), which
  /// every read verifies: a tensor whose bytes differ is a bad-input error naming it and the file.
  /// False for files without checksums (hub files, checkpoints written before them): their reads
  /// are not verified. open() refuses a file with checksums for only some tensors.
  bool checksums() const { return checksums_; }

 private:
  struct Entry {
    TensorInfo info;
    int64_t begin = 0;  // byte offsets relative to the data section
    int64_t end = 0;
    bool has_crc = false;
    uint32_t crc = 0;  // CRC-32C of the bytes [begin, end), from "crc32c.<name>"
  };
  File() = default;
  const Entry& entry(const std::string& name) const;
  const Entry& typed_entry(const std::string& name, DType want) const;
  void read_bytes(const std::string& name, const Entry& e, void* out) const;
  // Parts of open(): the tensors tile the data section; the checksums name tensors, all or none.
  void check_tiling(int64_t data_size, uint64_t header_bytes) const;
  void read_checksums();

  std::string path_;
  int64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
  bool checksums_ = false;
};

}  // namespace tp::safetensors
