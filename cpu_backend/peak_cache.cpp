#include "peak_cache.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"

namespace tp {

namespace {
const std::string kFile = "tp-from-scratch/sgemm-peak.txt";

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}
}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t b = colon + 1;
    while (b < line.size() && line[b] == ' ') ++b;
    return line.substr(b);
  }
  return "unknown cpu";
}

std::string peak_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/" + kFile;
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return std::string(home) + "/.cache/" + kFile;
  return "";
}

std::string peak_cache_key(const std::string& cpu_model, const std::string& blas_core) {
  return one_line(cpu_model) + " | openblas " + one_line(blas_core);
}

double cached_peak(const std::string& path, const std::string& key) {
  if (path.empty()) return 0;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos || line.compare(0, tab, key) != 0 || tab != key.size()) continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + tab + 1, &end);
    if (end != line.c_str() + tab + 1 && v > 0) return v;
  }
  return 0;
}

bool store_peak(const std::string& path, const std::string& key, double gflops) {
  if (path.empty() || !(gflops > 0)) return false;
  // Create the folders on the way (~/.cache, ~/.cache/tp-from-scratch).
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1))
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  std::ostringstream text;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(key + "\t", 0) != 0 && !line.empty()) text << line << "\n";
  }
  char value[64];
  std::snprintf(value, sizeof value, "%.6g", gflops);
  text << key << "\t" << value << "\n";
  try {
    write_file_atomic(path, text.str(), "the peak cache " + path);
  } catch (const Error&) {
    return false;
  }
  return true;
}

}  // namespace tp
