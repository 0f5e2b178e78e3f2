// flight_dumps.cpp — --flight-dir, the recorder of this rank and its dumper thread (see
// flight_dumps.h).
#include "flight_dumps.h"

#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "core/output_file.h"
#include "launcher.h"
#include "node_page.h"
#include "observe/flight_recorder.h"

namespace tp {

using namespace watch;

namespace {

FlightRecorder* g_recorder = nullptr;  // lives until the process ends (the dumper may be writing)
std::string g_ring_path;               // the ring file, removed when run_program returns
ino_t g_ring_inode = 0;                // its inode: a later job may have replaced the name
sem_t g_wake;
std::atomic<const char*> g_reason{nullptr};

void on_sigusr1(int) { request_flight_dump(nullptr); }

// Why this dump: the reason posted with it, else what the watchdog wrote in this rank's slot.
std::string reason_now() {
  if (const char* posted = g_reason.exchange(nullptr)) return posted;
  const int32_t request = __atomic_exchange_n(&g_slot->flight_request, 0, __ATOMIC_ACQ_REL);
  if (request == kFlightStall) return "stall (the watchdog's stall detector fired)";
  if (request == kFlightDeath) return "a rank of the node ended before the job finished";
  return "SIGUSR1 (a live snapshot; the run went on)";
}

[[noreturn]] void dumper_main() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);  // the one thread that takes it (see below)
  for (;;) {
    while (::sem_wait(&g_wake) != 0) {
    }
    const std::string reason = reason_now();
    try {
      // At most 200 ms for the ring's lock: a fatal signal may have stopped its holder for good.
      write_file_atomic(g_recorder->path(), g_recorder->snapshot(reason, 200), "flight dump");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: warning: no flight dump: %s\n", g_rank, e.what());
    }
    __atomic_add_fetch(&g_slot->flight_dumps, 1, __ATOMIC_ACQ_REL);
  }
}

// The same id on every rank: rank 0's host, pid and start time, broadcast.
std::string agree_job_id(MPI_Comm comm, const std::string& host) {
  char id[96] = {};
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    std::snprintf(id, sizeof id, "%.40s-%d-%lld", host.c_str(), static_cast<int>(::getpid()),
                  static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000);
  }
  MPI_Bcast(id, sizeof id, MPI_CHAR, 0, comm);
  return id;
}

// DIR/flight-rank-R.ring mapped shared (flight_recorder.h: "The ring file"), or nullptr when it
// cannot be made (then the ring is in memory and a killed rank leaves nothing).
void* map_ring_file(const std::string& path, size_t capacity) {
  const size_t bytes = flight_ring_bytes(capacity);
  // A new file, never the old one cut to size: another job in the same folder may still have the
  // old one mapped (a mapping past its file's end raises SIGBUS); it keeps its unlinked file.
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) == 0) g_ring_inode = st.st_ino;
  void* map = MAP_FAILED;
  // Its blocks allocated now: a store into a page the file system has no room for would raise
  // SIGBUS (a full disk: the ring then lives in memory only).
  if (::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0)
    map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map != MAP_FAILED) return map;
  ::unlink(path.c_str());
  return nullptr;
}

}  // namespace

void add_flight_options(Options& options) {
  options.path(
      "flight-dir", "",
      "folder of the flight recorder's dumps (flight-rank-R.jsonl, read by tp_flight), "
      "written on a stall, a collective mismatch, a fatal signal, the non-finite stop "
      "and SIGUSR1; default: the folder of --save when it exists, else the working folder");
  options
      .integer("flight-records", static_cast<int64_t>(FlightRecorder::kDefaultCapacity),
               "calls the flight recorder keeps per rank (its ring); 0: no recorder")
      .min(0)
      .max(1 << 24);
}

void start_flight_recorder(MPI_Comm comm, const Options& options) {
  const int64_t capacity = options.get_int("flight-records");
  if (capacity == 0) {              // every rank sees the same flag: none of them records
    std::signal(SIGUSR1, SIG_IGN);  // and a snapshot asked for does nothing (not the default kill)
    return;
  }
  std::string dir = options.get_text("flight-dir");
  if (!options.given("flight-dir")) {
    dir = ".";
    if (options.declared("save") && options.given("save")) {
      const std::string& save = options.get_text("save");
      const size_t slash = save.find_last_of('/');
      const std::string folder = slash == std::string::npos ? "."
                                 : slash == 0               ? "/"
                                                            : save.substr(0, slash);
      // A series folder (--save DIR/) that tp_train has yet to create: the working folder then.
      struct stat st {};
      if (::stat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dir = folder;
    }
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  check_output_paths({{options.given("flight-dir") ? "--flight-dir" : "--flight-dir (its default)",
                       dir + "/flight-rank-" + std::to_string(rank) + ".jsonl"}});
  char host[64] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  FlightIdentity id;
  id.job = agree_job_id(comm, host);
  id.rank = rank;
  id.world_size = size;
  id.host = host;
  id.pid = ::getpid();
  if (g_recorder != nullptr) return;  // run_program twice in one process: keep the first
  g_ring_path = dir + "/flight-rank-" + std::to_string(rank) + ".ring";
  void* ring = map_ring_file(g_ring_path, static_cast<size_t>(capacity));
  if (ring == nullptr) g_ring_path.clear();
  g_recorder = new FlightRecorder(id, dir, static_cast<size_t>(capacity), ring);
  ::sem_init(&g_wake, 0, 0);
  // SIGUSR1 goes to the dumper thread: blocked in this thread (and so in the threads it starts
  // later, OpenMP's), a program sleeping or waiting here is not woken early by a snapshot.
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
  std::thread(dumper_main).detach();
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  set_call_recorder(g_recorder);
  g_slot->flight_on = 1;  // the watchdog may ask now
}

void finish_flight_recorder() {
  struct stat st {};
  // Only our own file (the mapping stays valid after the unlink).
  if (!g_ring_path.empty() && ::stat(g_ring_path.c_str(), &st) == 0 && st.st_ino == g_ring_inode)
    ::unlink(g_ring_path.c_str());
  g_ring_path.clear();
}

void request_flight_dump(const char* reason) {
  if (g_recorder == nullptr) return;
  if (reason != nullptr) g_reason.store(reason);
  ::sem_post(&g_wake);
}

void set_flight_step(int64_t step) {
  if (g_recorder != nullptr) g_recorder->set_step(step);
}

}  // namespace tp
