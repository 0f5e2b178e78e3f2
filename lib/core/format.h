// format.h — the few number formats the programs and lessons print, written once.
//
//   mib(3 << 20)        "3.0 MiB"       mib(3 << 20, 0)   "3 MiB"
//   gib(1.5 * 2^30)     "1.5 GiB"       (three significant digits)
//   pct(0.373)          "37 %"
//   kib_mib(512)        "512 B"         kib_mib(1536)     "1.5 KiB"     then mib()
//   sci(0.000123)       "1.23e-04"      fixed(2.345, 1)   "2.3"
#pragma once

#include <string>

namespace tp {

/// Bytes in MiB with `decimals` digits after the point: "12.5 MiB".
std::string mib(double bytes, int decimals = 1);

/// Bytes in GiB, three significant digits: "1.5 GiB", "0.0123 GiB".
std::string gib(double bytes);

/// A fraction as a whole percentage: 0.373 → "37 %".
std::string pct(double fraction);

/// Bytes in the largest binary unit up to MiB, one decimal: "512 B", "1.5 KiB", "12.5 MiB".
std::string kib_mib(double bytes);

/// x in scientific notation with `digits` after the point: "1.23e-04".
std::string sci(double x, int digits = 2);

/// x with `digits` after the point: fixed(2.346, 2) = "2.35".
std::string fixed(double x, int digits);

/// x in 4 significant digits, printf's %.4g: "0.5", "3.142", "1.235e+04".
std::string fmt_g(double x);

}  // namespace tp
