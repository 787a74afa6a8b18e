// bench/workload_common.cc: the workload programs' flags (workload_common.h).

#include "weft/bench/workload_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
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
  std::string usage =
      std::string(what) + (*what ? "\n" : "") +
      "  the standard workloads W1..W8 and W10 (WORKLOADS.md), one JSON line each:\n"
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

}  // namespace weft::bench
