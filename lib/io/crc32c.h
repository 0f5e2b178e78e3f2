// crc32c.h — CRC-32C (Castagnoli), the checksum every tensor of a checkpoint carries.
//
// CRC-32C is the CRC of the reflected polynomial 0x82F63B78 with initial value and final XOR
// 0xFFFFFFFF (RFC 3720, iSCSI); crc32c("123456789") = 0xE3069283. It is the checksum the SSE4.2
// crc32 instruction computes, so on x86-64 it runs at several GB/s; elsewhere (or on a CPU without
// SSE4.2) a portable table-driven version ("slicing by 8": eight table lookups per 8 bytes) gives
// the same values. A checksum finds any flipped bit and any burst of up to 32 bits; it does not
// protect against someone who recomputes it (it is not a signature).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tp {

/// CRC-32C of `size` bytes at `data`, continuing from `crc` (the value of the bytes before; 0 to
/// start): crc32c(b, n) == crc32c(b + k, n - k, crc32c(b, k)). Uses SSE4.2 when the CPU has it.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

/// The same value computed without the SSE4.2 instruction (slicing by 8): the fallback, kept
/// callable so a test can compare both.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

/// True when crc32c uses the SSE4.2 crc32 instruction on this CPU.
bool crc32c_hardware();

/// A checksum as it is written in metadata: 8 lowercase hex digits ("e3069283").
std::string crc32c_hex(uint32_t crc);

/// Parses 8 hex digits (either case) into `out`; false for anything else.
bool parse_crc32c_hex(const std::string& text, uint32_t& out);

}  // namespace tp
