// step_log.cpp — cutting a resumed run's --log-json back to its checkpoint (step_log.h).
#include "observe/step_log.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/output_file.h"

namespace tp {

int64_t step_of_log_line(const std::string& line) {
  const std::string key = "\"step\":";
  const size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  const char* begin = line.c_str() + at + key.size();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(begin, &end, 10);
  if (end == begin || errno != 0 || v < 0) return -1;
  return static_cast<int64_t>(v);
}

LogCut cut_step_log(const std::string& path, int64_t step, const std::string& what) {
  LogCut out;
  // Only a regular file is read back: --log-json may be /dev/stdout or a FIFO.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    TP_CHECK(false, what, ": cannot read it to continue it: ", errno_text(errno));
  }
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  TP_CHECK(!failed, what, ": cannot read it to continue it");
  std::string kept;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {  // cut short by the kill: not a line
      ++out.cut;
      break;
    }
    const std::string line = text.substr(pos, nl - pos);
    if (step_of_log_line(line) > step) {
      ++out.cut;
    } else {
      kept += line + '\n';
      ++out.kept;
    }
    pos = nl + 1;
  }
  if (out.cut > 0) write_file_atomic(path, kept, what);
  return out;
}

}  // namespace tp
