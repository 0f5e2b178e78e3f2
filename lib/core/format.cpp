#include "core/format.h"

#include <cstdio>

namespace tp {

std::string mib(double bytes, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f MiB", decimals, bytes / 1048576.0);
  return buf;
}

std::string gib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string pct(double fraction) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.0f %%", fraction * 100);
  return buf;
}

std::string kib_mib(double bytes) {
  char buf[48];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
    return buf;
  }
  if (bytes < 1048576) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024);
    return buf;
  }
  return mib(bytes);
}

std::string sci(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*e", digits, x);
  return buf;
}

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string fmt_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace tp
