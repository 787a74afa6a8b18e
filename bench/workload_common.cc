// bench/workload_common.cc: the workload programs' flags (workload_common.h).

#include "weft/bench/workload_common.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "weft/base/command_line.h"

ABSL_FLAG(int, reps, 5, "timed runs per workload, after one warm-up");
ABSL_FLAG(int, workers, 0, "worker threads (0: all cores)");
ABSL_FLAG(std::string, only, "", "the workloads to run, e.g. W1,W4 (default: all)");

namespace weft::bench {

bool ParseOptions(int argc, char** argv, Options* o, const char* what) {
  using base_internal::UsageError;
  std::string usage = std::string(what) + (*what ? "\n" : "") +
                      "  the standard workloads W1..W10 (WORKLOADS.md), one JSON line each:\n"
                      "  [--reps 5] [--workers N] [--only W1,W2]";
  base_internal::ParseCommandLine(argc, argv, usage.c_str());
  const int reps = absl::GetFlag(FLAGS_reps), workers = absl::GetFlag(FLAGS_workers);
  if (reps < 1 || reps > 100000) UsageError("--reps must be 1..100000");
  if (workers < 0 || workers > 1024) UsageError("--workers must be 0..1024");
  o->reps = reps;
  o->workers = static_cast<unsigned>(workers);
  o->only = absl::GetFlag(FLAGS_only);
  for (std::size_t start = 0; start <= o->only.size() && !o->only.empty();) {
    std::size_t end = o->only.find(',', start);
    if (end == std::string::npos) end = o->only.size();
    const std::string id = o->only.substr(start, end - start);
    if (id.size() < 2 || id[0] != 'W' ||
        id.find_first_not_of("0123456789", 1) != std::string::npos) {
      UsageError("--only takes workload ids such as W1,W4, not '" + id + "'");
    }
    start = end + 1;
  }
  return true;
}

std::string W10File() {
  const char* env = std::getenv("WEFT_W10_FILE");
  const char* dir = std::getenv("TMPDIR");
  const std::string path = env != nullptr && *env != '\0'
                               ? env
                               : std::string(dir != nullptr ? dir : "/tmp") + "/weft_w10.dat";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != kW10Bytes) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return "";
    std::vector<char> zeros(1 << 20, 0);
    for (std::uint64_t off = 0; off < kW10Bytes; off += zeros.size()) {
      if (::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(off)) !=
          static_cast<ssize_t>(zeros.size())) {
        ::close(fd);
        return "";
      }
    }
    ::close(fd);
  }
  // Warm: read it once (the page cache then holds it, memory permitting).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::vector<char> buf(1 << 20);
  for (std::uint64_t off = 0; off < kW10Bytes; off += buf.size()) {
    if (::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off)) <= 0) break;
  }
  ::close(fd);
  return path;
}

int W9Conns() {
  const char* env = std::getenv("WEFT_W9_CONNS");
  const int n = env != nullptr ? std::atoi(env) : 10000;
  return n > 0 ? n : 10000;
}

W9Client::W9Client(int port, int conns) {
  rlimit l{};
  const rlim_t want = static_cast<rlim_t>(conns) + 256;
  if (::getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < want) {
    l.rlim_cur = std::min(l.rlim_max, want);
    (void)::setrlimit(RLIMIT_NOFILE, &l);
  }
  std::string path;
  if (const char* env = std::getenv("WEFT_W9_CLIENT")) {
    path = env;
  } else {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      path.assign(self, static_cast<std::size_t>(n));
      path = path.substr(0, path.rfind('/') + 1) + "w9_client";
    }
  }
  int in[2], out[2];
  if (path.empty() || ::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "W9: cannot start the client\n");
    std::exit(1);
  }
  const std::string args[] = {path, std::to_string(port), std::to_string(conns),
                              std::to_string(kW9Trips), std::to_string(kW9Size)};
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    char* argv[] = {const_cast<char*>(args[0].c_str()), const_cast<char*>(args[1].c_str()),
                    const_cast<char*>(args[2].c_str()), const_cast<char*>(args[3].c_str()),
                    const_cast<char*>(args[4].c_str()), nullptr};
    ::execv(argv[0], argv);
    std::fprintf(stderr, "W9: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid_ < 0) {
    std::fprintf(stderr, "W9: fork failed\n");
    std::exit(1);
  }
  to_ = in[1];
  from_ = ::fdopen(out[0], "r");
}

W9Client::~W9Client() {
  if (to_ >= 0) ::close(to_);
  if (from_ != nullptr) std::fclose(from_);
  int status = 0;
  if (pid_ > 0) (void)::waitpid(pid_, &status, 0);
}

std::string W9Client::ReadLine() {
  char line[256];
  if (from_ == nullptr || std::fgets(line, sizeof line, from_) == nullptr) return "";
  std::string s(line);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

void W9Client::WriteLine(const std::string& line) {
  const std::string s = line + "\n";
  (void)!::write(to_, s.data(), s.size());
}

double W9WallMs(const std::string& done, long expected, Percentiles* latency) {
  long long ns = 0;
  unsigned long long messages = 0, bad = 0, p50 = 0, p99 = 0, p999 = 0;
  if (std::sscanf(done.c_str(), "done %lld %llu %llu %llu %llu %llu", &ns, &messages, &bad, &p50,
                  &p99, &p999) != 6 ||
      bad != 0 || static_cast<long>(messages) != expected) {
    std::fprintf(stderr, "W9: lost messages (client said \"%s\")\n", done.c_str());
    std::exit(1);
  }
  *latency = {p50 / 1e3, p99 / 1e3, p999 / 1e3};
  return static_cast<double>(ns) / 1e6;
}

Percentiles PercentilesOf(const LatencyHistogram& h) {
  return {h.percentile(0.5) / 1e3, h.percentile(0.99) / 1e3, h.percentile(0.999) / 1e3};
}

std::string LatencyJson(const std::vector<Percentiles>& runs) {
  std::vector<double> p50, p99, p999;
  for (std::size_t i = 1; i < runs.size(); ++i) {  // runs[0]: the warm-up
    p50.push_back(runs[i].p50_us);
    p99.push_back(runs[i].p99_us);
    p999.push_back(runs[i].p999_us);
  }
  char out[128];
  std::snprintf(out, sizeof out, ",\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f", Median(p50),
                Median(p99), Median(p999));
  return out;
}

}  // namespace weft::bench
