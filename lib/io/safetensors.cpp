#include "io/safetensors.h"

#include "core/dtype.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "io/crc32c.h"
#include "io/durable_write.h"

// Tensor bytes are copied with memcpy between the file and host arrays, which is correct because
// the file format is little-endian and so is every host we build for (x86-64, AArch64). A
// big-endian port would byte-swap in read_bytes and Writer::add.
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");
#endif
static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559,
              "F32 must be IEEE-754 binary32");

namespace tp::safetensors {

namespace {

using nlohmann::json;

constexpr int64_t kMaxHeaderBytes = 100 * 1000 * 1000;  // 100 MB: real headers are kilobytes
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
const char* const kMetadataKey = "__metadata__";
const std::string kChecksumPrefix = "crc32c.";  // metadata "crc32c.<tensor>": 8 hex digits

// Quotes a name for a one-line message: 'name', with control characters escaped.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

// nlohmann's message without the "[json.exception.parse_error.101] " prefix, printable ASCII only
// (its "last read: '...'" part echoes raw bytes of the file) and at most 160 characters.
std::string short_json_message(const std::string& what) {
  std::string msg = what;
  if (!msg.empty() && msg[0] == '[') {
    const size_t close = msg.find("] ");
    if (close != std::string::npos) msg = msg.substr(close + 2);
  }
  for (char& c : msg) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) c = '?';
  }
  if (msg.size() > 160) msg = msg.substr(0, 157) + "...";
  return msg;
}

const char* json_type(const json& j) { return j.type_name(); }

// The number of keys of every object in `j`, nested ones included.
size_t count_members(const json& j) {
  size_t n = 0;
  if (j.is_object())
    for (const auto& kv : j.items()) n += 1 + count_members(kv.value());
  else if (j.is_array())
    for (const auto& v : j) n += count_members(v);
  return n;
}

// A key that `text` (valid JSON, parsed into `parsed`) gives twice in one object, quoted for a
// message, or "". One linear scan of the text with a hash set of the raw keys per open object:
// 200k metadata keys (an 8 MB header) take milliseconds, where a list searched per key took a
// minute and nlohmann's callback parser a second. A key repeated with other escapes ("a" and
// "\u0061") is found by counting: the parsed header then has fewer keys than the text.
std::string duplicate_key(const std::string& text, const json& parsed) {
  std::vector<std::unordered_set<std::string_view>> open;  // one per open object or array
  std::vector<bool> is_object;
  size_t keys = 0;
  size_t start = 0;
  bool in_string = false, after_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        after_string = true;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      start = i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (after_string && c == ':' && !open.empty() && is_object.back()) {
      ++keys;
      const std::string_view key(text.data() + start, i - start);  // with its quotes
      const size_t end = key.find_last_of('"');
      if (!open.back().insert(key.substr(0, end + 1)).second)
        return std::string("'") + std::string(key.substr(1, end - 1)) + "'";
    }
    after_string = false;
    if (c == '{' || c == '[') {
      open.emplace_back();
      is_object.push_back(c == '{');
    } else if ((c == '}' || c == ']') && !open.empty()) {
      open.pop_back();
      is_object.pop_back();
    }
  }
  return keys == count_members(parsed) ? "" : "a key (written with different escapes)";
}

// A JSON value as a non-negative int64, or false when it is not an integer in [0, 2^63).
bool as_nonneg_int(const json& j, int64_t& out) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(kMaxInt64)) return false;
    out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    out = j.get<int64_t>();
    return out >= 0;
  }
  return false;
}

bool parse_dtype(const std::string& s, DType& out) {
  if (s == "F32") {
    out = DType::F32;
    return true;
  }
  if (s == "I32") {
    out = DType::I32;
    return true;
  }
  if (s == "F16") {
    out = DType::F16;
    return true;
  }
  if (s == "BF16") {
    out = DType::BF16;
    return true;
  }
  return false;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::I32:
      return "I32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
  }
  return "?";
}

int64_t dtype_size(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16 ? 2 : 4; }

// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));       // inf, NaN
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));  // 127 - 15 = 112
  // Zero or subnormal: mant · 2^-24, exact in F32.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf, NaN (keep a quiet NaN)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Below the smallest normal 2^-14: a subnormal mant · 2^-24, rounded to nearest even.
    const float a = bits_float(abs) * 16777216.0f;  // exact: a power-of-two scale
    const float r = std::nearbyint(a);              // the default mode rounds half to even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // Normal: drop 13 mantissa bits with round to nearest even (a carry may bump the exponent).
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

float bf16_to_f32(uint16_t b) { return bf16_bits_to_float(b); }

uint16_t f32_to_bf16(float f) { return float_to_bf16_bits(f); }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Writer

void Writer::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                 const void* data, size_t count) {
  TP_CHECK(name != kMetadataKey, "safetensors: the tensor name \"__metadata__\" is reserved");
  TP_CHECK(tensors_.count(name) == 0, "safetensors: tensor ", quote(name), " was added twice");
  try {
    (void)json(name).dump();
  } catch (const json::exception&) {
    TP_CHECK(false, "safetensors: tensor name ", quote(name), " is not valid UTF-8");
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    TP_CHECK(d >= 0, "safetensors: tensor ", quote(name), " has a negative dim ", d);
    TP_CHECK(d == 0 || numel <= kMaxInt64 / d, "safetensors: tensor ", quote(name),
             " is too large");
    numel *= d;
  }
  TP_CHECK(static_cast<size_t>(numel) == count, "safetensors: tensor ", quote(name), " has ", count,
           " values but its shape holds ", numel);
  Entry e;
  e.info.dtype = dtype;
  e.info.shape = shape;
  e.bytes.resize(count * static_cast<size_t>(dtype_size(dtype)));
  if (!e.bytes.empty()) std::memcpy(e.bytes.data(), data, e.bytes.size());  // little-endian host
  tensors_.emplace(name, std::move(e));
}

void Writer::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                     std::vector<float> values) {
  add(name, DType::F32, shape, values.data(), values.size());
}

void Writer::add_i32(const std::string& name, const std::vector<int64_t>& shape,
                     std::vector<int32_t> values) {
  add(name, DType::I32, shape, values.data(), values.size());
}

void Writer::add_float(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                       const std::vector<float>& values) {
  if (dtype == DType::F32) return add(name, dtype, shape, values.data(), values.size());
  TP_CHECK(dtype == DType::F16 || dtype == DType::BF16, "safetensors: add_float of tensor ",
           quote(name), " as ", dtype_name(dtype), ": expected F32, F16 or BF16");
  std::vector<uint16_t> half(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    half[i] = dtype == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
  add(name, dtype, shape, half.data(), half.size());
}

void Writer::set_metadata(const std::string& key, const std::string& value) {
  TP_CHECK(key.compare(0, kChecksumPrefix.size(), kChecksumPrefix) != 0, "safetensors: metadata ",
           quote(key), " is reserved: write() adds the checksum of each tensor itself");
  try {
    (void)json(key).dump();
    (void)json(value).dump();
  } catch (const json::exception&) {
    TP_CHECK(false, "safetensors: metadata ", quote(key), " is not valid UTF-8");
  }
  metadata_[key] = value;
}

void Writer::write(const std::string& path) const {
  json header = json::object();
  json meta = json::object();
  for (const auto& [k, v] : metadata_) meta[k] = v;
  for (const auto& [name, e] : tensors_)
    meta[kChecksumPrefix + name] = crc32c_hex(crc32c(e.bytes.data(), e.bytes.size()));
  if (!meta.empty()) header[kMetadataKey] = meta;
  int64_t offset = 0;
  for (const auto& [name, e] : tensors_) {
    const auto size = static_cast<int64_t>(e.bytes.size());
    header[name] = {{"dtype", dtype_name(e.info.dtype)},
                    {"shape", e.info.shape},
                    {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  char len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);

  // The bytes in file order; durable::write saves them crash-safe (the lock, the leftovers of
  // killed saves, a temporary file, fsync and rename: io/durable_write.h).
  std::vector<std::string_view> pieces = {std::string_view(len, 8), text};
  for (const auto& kv : tensors_)
    pieces.emplace_back(kv.second.bytes.data(), kv.second.bytes.size());
  durable::write(path, pieces);
}

// ---------------------------------------------------------------------------------------------
// File

namespace {

// The header of the file at `path`: its JSON text, after the 8-byte length that must fit the file.
std::string read_header_text(const std::string& path, int64_t& file_size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    TP_CHECK_INPUT(false, "cannot open checkpoint ", path, ": ", std::strerror(errno));
  TP_CHECK_INPUT(S_ISREG(st.st_mode), "cannot open checkpoint ", path, ": not a regular file");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    TP_CHECK_INPUT(false, "cannot open checkpoint ", path, ": ",
                   std::strerror(errno ? errno : EIO));
  file_size = static_cast<int64_t>(st.st_size);

  TP_CHECK_INPUT(
      file_size >= 8, "checkpoint ", path, " is ", file_size,
      " bytes, shorter than the 8-byte header length: not a safetensors file (truncated?)");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  TP_CHECK_INPUT(in.gcount() == 8, "cannot read checkpoint ", path, ": the file ended early");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  TP_CHECK_INPUT(n <= static_cast<uint64_t>(kMaxHeaderBytes), "checkpoint ", path,
                 ": header length ", n, " is absurd (more than ", kMaxHeaderBytes,
                 " bytes): not a safetensors file");
  TP_CHECK_INPUT(static_cast<int64_t>(n) <= file_size - 8, "checkpoint ", path, ": header length ",
                 n, " is larger than the ", file_size - 8, " bytes after it (truncated?)");

  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  TP_CHECK_INPUT(static_cast<uint64_t>(in.gcount()) == n, "cannot read checkpoint ", path,
                 ": the file ended inside the header");
  return text;
}

// The header text parsed: a JSON object with no key twice (nlohmann keeps the last of two equal
// keys; a header with a duplicated key is refused instead: two tensors of one name, which is meant?).
json parse_header(const std::string& path, const std::string& text) {
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    TP_CHECK_INPUT(false, "checkpoint ", path,
                   ": the header is not valid JSON: ", short_json_message(e.what()));
  }
  TP_CHECK_INPUT(header.is_object(), "checkpoint ", path, ": the header is a JSON ",
                 json_type(header), ", not an object");
  const std::string duplicate = duplicate_key(text, header);
  TP_CHECK_INPUT(duplicate.empty(), "checkpoint ", path, ": the header names ", duplicate,
                 " twice (a corrupt or hand-edited file)");
  return header;
}

// The shape of one tensor entry (`where` names it in errors); its element count in `numel`.
std::vector<int64_t> parse_shape(const std::string& where, const json& shape, DType dtype,
                                 int64_t& numel) {
  TP_CHECK_INPUT(shape.is_array(), where, ": shape is a JSON ", json_type(shape), ", not an array");
  std::vector<int64_t> dims;
  numel = 1;
  for (const json& d : shape) {
    TP_CHECK_INPUT(d.is_number_integer(), where, ": shape ", shape.dump(), " holds a JSON ",
                   json_type(d), ", not an integer");
    TP_CHECK_INPUT(d.is_number_unsigned() || d.get<int64_t>() >= 0, where, ": shape ", shape.dump(),
                   " has a negative dim");
    int64_t dim = 0;
    TP_CHECK_INPUT(as_nonneg_int(d, dim), where, ": shape ", shape.dump(),
                   " overflows the element count");
    TP_CHECK_INPUT(dim == 0 || numel <= kMaxInt64 / dim, where, ": shape ", shape.dump(),
                   " overflows the element count");
    numel *= dim;
    dims.push_back(dim);
  }
  TP_CHECK_INPUT(numel <= kMaxInt64 / dtype_size(dtype), where, ": shape ", shape.dump(),
                 " overflows the byte count");
  return dims;
}

// One tensor entry of the header: its dtype, shape and [begin, end) in the data section (of
// `data_size` bytes), the span exactly the bytes the dtype and shape need.
TensorInfo parse_entry(const std::string& path, const std::string& where, const json& value,
                       int64_t data_size, int64_t& begin, int64_t& end) {
  TP_CHECK_INPUT(value.is_object(), where, ": entry is a JSON ", json_type(value),
                 ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    TP_CHECK_INPUT(value.contains(key), where, ": entry lacks \"", key, "\"");

  TensorInfo info;
  const json& dtype = value.at("dtype");
  TP_CHECK_INPUT(dtype.is_string(), where, ": dtype is a JSON ", json_type(dtype),
                 ", not a string");
  TP_CHECK_INPUT(parse_dtype(dtype.get<std::string>(), info.dtype), where, ": dtype ",
                 quote(dtype.get<std::string>()),
                 " is not supported (supported: F32, F16, BF16, I32)");
  const json& shape = value.at("shape");
  int64_t numel = 1;
  info.shape = parse_shape(where, shape, info.dtype, numel);

  const json& off = value.at("data_offsets");
  TP_CHECK_INPUT(off.is_array() && off.size() == 2, where, ": data_offsets ", off.dump(),
                 " is not an array [begin, end]");
  TP_CHECK_INPUT(as_nonneg_int(off[0], begin) && as_nonneg_int(off[1], end), where,
                 ": data_offsets ", off.dump(), " must be two non-negative integers");
  TP_CHECK_INPUT(begin <= end, where, ": data_offsets [", begin, ", ", end, "] have begin > end");
  TP_CHECK_INPUT(end <= data_size, where, ": data_offsets [", begin, ", ", end,
                 "] lie outside the ", data_size, "-byte data section of file ", path,
                 " (truncated?)");
  const int64_t want = numel * dtype_size(info.dtype);
  TP_CHECK_INPUT(end - begin == want, where, ": data_offsets [", begin, ", ", end, "] span ",
                 end - begin, " bytes, but ", dtype_name(info.dtype), " shape ", shape.dump(),
                 " needs ", want);
  return info;
}

}  // namespace

File File::open(const std::string& path) {
  int64_t file_size = 0;
  const std::string text = read_header_text(path, file_size);
  const json header = parse_header(path, text);

  File f;
  f.path_ = path;
  f.data_start_ = 8 + static_cast<int64_t>(text.size());
  const int64_t data_size = file_size - f.data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      TP_CHECK_INPUT(value.is_object(), "checkpoint ", path, ": __metadata__ is a JSON ",
                     json_type(value), ", not an object of strings");
      for (const auto& [k, v] : value.items()) {
        TP_CHECK_INPUT(v.is_string(), "checkpoint ", path, ": __metadata__ value ", quote(k),
                       " is a JSON ", json_type(v), ", not a string");
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    Entry e;
    e.info = parse_entry(path, "checkpoint " + path + ": tensor " + quote(name), value, data_size,
                         e.begin, e.end);
    f.tensors_.emplace(name, std::move(e));
  }
  f.check_tiling(data_size, text.size());
  f.read_checksums();
  return f;
}

// The tensors must tile the data section exactly: sorted by offset, each starts where the one
// before ended, the first at 0 and the last at the end of the file. This catches overlapping
// tensors, gaps, and a header length that is off (every tensor would be shifted).
void File::check_tiling(int64_t data_size, uint64_t header_bytes) const {
  const std::string& path = path_;
  std::vector<std::pair<const std::string*, const Entry*>> order;
  for (const auto& kv : tensors_) order.emplace_back(&kv.first, &kv.second);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin
                                              : a.second->end < b.second->end;
  });
  int64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, e] : order) {
    TP_CHECK_INPUT(e->begin >= covered, "checkpoint ", path, ": tensor ", quote(*name),
                   " (data_offsets [", e->begin, ", ", e->end, "]) overlaps tensor ",
                   quote(previous ? *previous : ""), ", which ends at ", covered);
    TP_CHECK_INPUT(e->begin == covered, "checkpoint ", path, ": ", e->begin - covered,
                   " bytes of the data section between ",
                   previous ? "tensor " + quote(*previous) : std::string("its start"),
                   " and tensor ", quote(*name), " belong to no tensor (a corrupt file)");
    covered = e->end;
    previous = name;
  }
  TP_CHECK_INPUT(covered == data_size, "checkpoint ", path, ": the data section has ",
                 data_size - covered, " bytes after the last tensor",
                 previous ? " " + quote(*previous) : std::string(),
                 " that belong to no tensor: the header length (", header_bytes,
                 ") is wrong or the file was appended to");
}

// The checksums (metadata "crc32c.<tensor>", written by Writer): each names a tensor of the file
// and is 8 hex digits; a file has one for every tensor or none (hub files, older checkpoints).
void File::read_checksums() {
  const std::string& path = path_;
  size_t checksums = 0;
  for (const auto& [key, value] : metadata_) {
    if (key.compare(0, kChecksumPrefix.size(), kChecksumPrefix) != 0) continue;
    const std::string name = key.substr(kChecksumPrefix.size());
    const auto it = tensors_.find(name);
    TP_CHECK_INPUT(it != tensors_.end(), "checkpoint ", path, ": metadata ", quote(key),
                   " is the checksum of a tensor the file does not have (a corrupt file)");
    TP_CHECK_INPUT(parse_crc32c_hex(value, it->second.crc), "checkpoint ", path, ": metadata ",
                   quote(key), "=", quote(value), " is not a checksum (8 hex digits)");
    it->second.has_crc = true;
    ++checksums;
  }
  if (checksums > 0 && checksums != tensors_.size()) {
    for (const auto& [name, e] : tensors_)
      TP_CHECK_INPUT(e.has_crc, "checkpoint ", path, ": tensor ", quote(name),
                     " has no checksum although ", checksums, " of its ", tensors_.size(),
                     " tensors have one (metadata ", quote(kChecksumPrefix + name),
                     " was removed: a corrupt or hand-edited file)");
  }
  checksums_ = checksums > 0;
}

bool File::has(const std::string& name) const { return tensors_.count(name) != 0; }

std::vector<std::string> File::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);  // std::map: already sorted
  return out;
}

const File::Entry& File::entry(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string some;
    int shown = 0;
    for (const auto& kv : tensors_) {
      if (shown == 5) {
        some += ", ...";
        break;
      }
      some += (shown++ ? ", " : "") + kv.first;
    }
    TP_CHECK_INPUT(false, "checkpoint ", path_, " has no tensor ", quote(name), " (it has ",
                   tensors_.size(), tensors_.size() == 1 ? " tensor" : " tensors",
                   some.empty() ? "" : ": ", some, ")");
  }
  return it->second;
}

const TensorInfo& File::info(const std::string& name) const { return entry(name).info; }

const File::Entry& File::typed_entry(const std::string& name, DType want) const {
  const Entry& e = entry(name);
  TP_CHECK_INPUT(e.info.dtype == want, "checkpoint ", path_, ": tensor ", quote(name), " is ",
                 dtype_name(e.info.dtype), ", not ", dtype_name(want));
  return e;
}

void File::read_bytes(const std::string& name, const Entry& e, void* out) const {
  const int64_t bytes = e.end - e.begin;
  if (bytes == 0) return;
  errno = 0;
  std::ifstream in(path_, std::ios::binary);
  if (!in)
    TP_CHECK_INPUT(false, "cannot open checkpoint ", path_, ": ",
                   std::strerror(errno ? errno : EIO));
  in.seekg(data_start_ + e.begin);
  in.read(static_cast<char*>(out), bytes);  // little-endian file, little-endian host
  TP_CHECK_INPUT(in && in.gcount() == bytes, "checkpoint ", path_, ": tensor ", quote(name),
                 ": the file ended before its data (changed since it was opened?)");
  if (!e.has_crc) return;
  const uint32_t got = crc32c(out, static_cast<size_t>(bytes));
  TP_CHECK_INPUT(got == e.crc, "checkpoint ", path_, ": tensor ", quote(name),
                 " fails its checksum (crc32c ", crc32c_hex(got), ", written ", crc32c_hex(e.crc),
                 "): its data changed after it was saved (a flipped bit, a bad disk or copy); "
                 "load an earlier checkpoint or copy the file again");
}

std::vector<float> File::read_f32(const std::string& name) const {
  const Entry& e = typed_entry(name, DType::F32);
  std::vector<float> out(static_cast<size_t>(e.info.numel()));
  read_bytes(name, e, out.data());
  return out;
}

std::vector<float> File::read_as_f32(const std::string& name) const {
  const Entry& e = entry(name);
  if (e.info.dtype == DType::F32) return read_f32(name);
  TP_CHECK_INPUT(e.info.dtype == DType::F16 || e.info.dtype == DType::BF16, "checkpoint ", path_,
                 ": tensor ", quote(name), " is ", dtype_name(e.info.dtype),
                 ", not a floating-point tensor (F32, F16 or BF16)");
  std::vector<uint16_t> half(static_cast<size_t>(e.info.numel()));
  read_bytes(name, e, half.data());
  std::vector<float> out(half.size());
  for (size_t i = 0; i < half.size(); ++i)
    out[i] = e.info.dtype == DType::F16 ? f16_to_f32(half[i]) : bf16_to_f32(half[i]);
  return out;
}

std::vector<int32_t> File::read_i32(const std::string& name) const {
  const Entry& e = typed_entry(name, DType::I32);
  std::vector<int32_t> out(static_cast<size_t>(e.info.numel()));
  read_bytes(name, e, out.data());
  return out;
}

std::string File::metadata(const std::string& key, const std::string& fallback) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? fallback : it->second;
}

bool File::has_metadata(const std::string& key) const { return metadata_.count(key) != 0; }

}  // namespace tp::safetensors
