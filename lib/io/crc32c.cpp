#include "io/crc32c.h"

#include <array>
#include <cstring>

namespace tp {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

// table[k][b]: the CRC of byte b followed by k zero bytes. table[0] is the classic byte-wise table;
// slicing by 8 folds 8 input bytes at once with one lookup in each of the 8 tables.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPoly : 0u);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
};

const Tables& tables() {
  static const Tables tables;
  return tables;
}

// The raw register (no initial/final XOR) advanced over `size` bytes.
uint32_t update_portable(uint32_t c, const unsigned char* p, size_t size) {
  const auto& t = tables().t;
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
    --size;
  }
  while (size >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian: the first byte is the low byte
    const uint32_t lo = static_cast<uint32_t>(w) ^ c, hi = static_cast<uint32_t>(w >> 32);
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
  return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TP_CRC32C_SSE42 1
// The crc32 instruction (SSE4.2) computes exactly this CRC, 8 bytes per instruction, but each one
// waits for the one before (a latency of 3 cycles, a throughput of 1 per cycle). So long buffers
// run as three independent lanes over consecutive kLane-byte pieces A, B, C, joined by linearity:
// crc(A B C) = shift(shift(crc(A)) ^ crc0(B)) ^ crc0(C), where crc0 starts from 0 and shift(x) is
// the register after kLane zero bytes (a linear map of x, kept as the images of its 32 bits).
// Compiled for SSE4.2 here only; called only when the CPU says it has it.
constexpr size_t kLane = 4096;

struct LaneShift {
  uint32_t basis[32];
  LaneShift() {
    static const unsigned char zeros[kLane] = {};
    for (int i = 0; i < 32; ++i) basis[i] = update_portable(1u << i, zeros, kLane);
  }
  uint32_t operator()(uint32_t x) const {
    uint32_t out = 0;
    for (int i = 0; x != 0; ++i, x >>= 1)
      if (x & 1u) out ^= basis[i];
    return out;
  }
};

const LaneShift& lane_shift() {
  static const LaneShift shift;
  return shift;
}

__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t c, const unsigned char* p,
                                                        size_t size) {
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = __builtin_ia32_crc32qi(c, *p++);
    --size;
  }
  if (size >= 3 * kLane) {
    const LaneShift& shift = lane_shift();
    while (size >= 3 * kLane) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t wa, wb, wd;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kLane + i, 8);
        std::memcpy(&wd, p + 2 * kLane + i, 8);
        a = __builtin_ia32_crc32di(a, wa);
        b = __builtin_ia32_crc32di(b, wb);
        d = __builtin_ia32_crc32di(d, wd);
      }
      c = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(d);
      p += 3 * kLane;
      size -= 3 * kLane;
    }
  }
  uint64_t c64 = c;
  while (size >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    size -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (size-- > 0) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

}  // namespace

bool crc32c_hardware() {
#ifdef TP_CRC32C_SSE42
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  return ~update_portable(~crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#ifdef TP_CRC32C_SSE42
  if (crc32c_hardware()) return ~update_sse42(~crc, static_cast<const unsigned char*>(data), size);
#endif
  return crc32c_portable(data, size, crc);
}

std::string crc32c_hex(uint32_t crc) {
  static const char digits[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) s[static_cast<size_t>(i)] = digits[crc & 0xfu];
  return s;
}

bool parse_crc32c_hex(const std::string& text, uint32_t& out) {
  if (text.size() != 8) return false;
  uint32_t v = 0;
  for (char ch : text) {
    int d;
    if (ch >= '0' && ch <= '9')
      d = ch - '0';
    else if (ch >= 'a' && ch <= 'f')
      d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F')
      d = ch - 'A' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  out = v;
  return true;
}

}  // namespace tp
