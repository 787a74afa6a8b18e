// scheduler/console.cc: the console server (internal/console.h): a thread that answers request
// lines on a Unix socket with JSON lines (stats, fibers, stuck-fiber reports).

#include "internal/console.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "internal/runtime_impl.h"

#if !defined(_WIN32)
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#endif

namespace weft {
namespace scheduler_internal {

void AppendJsonString(std::string& out, std::string_view s);  // introspect.cc

namespace {
// kMaxClients: consoles attached at once; more are refused (closed at once).
constexpr std::size_t kMaxClients = 8;
// kMaxLine: a request line longer than this drops the client (requests are single words).
constexpr std::size_t kMaxLine = 256;
// kMaxPending: a reply the client has not read past this drops it (it does not read).
constexpr std::size_t kMaxPending = std::size_t{16} << 20;
// kFibersListed: fibers listed by "fibers" (all are counted).
constexpr std::size_t kFibersListed = 200;
std::atomic<unsigned> g_console_seq{0};  // <pid>-<n>.sock: the process's n-th console
}  // namespace

std::string ConsoleDirectory(const std::string& dir) {
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("WEFT_CONSOLE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/weft";
  }
#if !defined(_WIN32)
  return "/tmp/weft-" + std::to_string(::geteuid());
#else
  return {};
#endif
}

#if defined(_WIN32)

Result<std::unique_ptr<Console>> Console::Start(Runtime::Impl*, const std::string&) {
  return std::errc::function_not_supported;  // Unix sockets only
}
Console::~Console() = default;

#else

namespace {
// PrivateDirectory: dir exists (made 0700 if not), is a directory and not a link, is owned by
// the effective user and no one else may use it. Otherwise the reason, for the one line on
// stderr.
const char* PrivateDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return std::strerror(errno);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (st.st_uid != ::geteuid()) return "owned by another user";
  if ((st.st_mode & 077) != 0) return "others may use it (want mode 0700)";
  return nullptr;
}

// PeerIsUs: the connected peer runs as the process's effective user (the socket's mode keeps
// others out already; this holds even if the mode is changed).
bool PeerIsUs(int fd) {
#if defined(SO_PEERCRED)
  struct ucred cred;
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == ::geteuid();
#else
  uid_t uid;
  gid_t gid;
  return ::getpeereid(fd, &uid, &gid) == 0 && uid == ::geteuid();
#endif
}

std::string JsonOfStuck(const std::vector<Monitor::StuckEvent>& events) {
  std::string out = "{\"stuck\":[";
  char buf[160];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Monitor::StuckEvent& e = events[i];
    const auto at_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(e.at.time_since_epoch()).count();
    std::snprintf(buf, sizeof buf, "%s{\"fiber_id\":%" PRIu64 ",\"name\":", i == 0 ? "" : ",",
                  e.fiber.fiber_id);
    out += buf;
    AppendJsonString(out, e.fiber.name);
    std::snprintf(buf, sizeof buf,
                  ",\"worker\":%u,\"running_for_ns\":%lld,\"queued\":%zu,\"at_ms\":%lld",
                  e.fiber.worker, static_cast<long long>(e.fiber.running_for.count()),
                  e.fiber.queued, static_cast<long long>(at_ms));
    out += buf;
    out += ",\"spawned_at\":";
    AppendJsonString(out, e.fiber.spawned_at);
    out += '}';
  }
  out += "]}";
  return out;
}
}  // namespace

Result<std::unique_ptr<Console>> Console::Start(Runtime::Impl* rt, const std::string& dir_option) {
  const std::string dir = ConsoleDirectory(dir_option);
  if (const char* why = PrivateDirectory(dir)) {
    std::fprintf(stderr, "weft: console off: %s: %s\n", dir.c_str(), why);
    return std::errc::permission_denied;
  }
  const std::string path = dir + "/" + std::to_string(::getpid()) + "-" +
                           std::to_string(g_console_seq.fetch_add(1)) + ".sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    std::fprintf(stderr, "weft: console off: socket path too long: %s\n", path.c_str());
    return std::errc::filename_too_long;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return static_cast<std::errc>(errno);
  ::unlink(path.c_str());  // a stale one of an earlier process with this pid (our directory)
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, static_cast<int>(kMaxClients)) != 0) {
    const int e = errno;
    std::fprintf(stderr, "weft: console off: %s: %s\n", path.c_str(), std::strerror(e));
    ::close(fd);
    ::unlink(path.c_str());
    return static_cast<std::errc>(e);
  }
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return static_cast<std::errc>(e);
  }
  std::unique_ptr<Console> console(new Console(rt, path, fd, wake[0], wake[1]));
  try {
    console->thread_ = std::thread([c = console.get()] { c->Loop(); });
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "weft: console off: no thread: %s\n", e.what());
    return std::errc::resource_unavailable_try_again;  // the destructor closes and removes
  }
  return console;
}

Console::Console(Runtime::Impl* rt, std::string path, int listen_fd, int wake_read, int wake_write)
    : rt_(rt),
      path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_read_(wake_read),
      wake_write_(wake_write) {}

Console::~Console() {
  if (thread_.joinable()) {
    const char stop = 1;
    while (::write(wake_write_, &stop, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
  ::unlink(path_.c_str());
}

std::string Console::Answer(const std::string& line) {
  if (line == "stats") return rt_->self->stats_json();
  if (line == "fibers") return rt_->FibersJson(kFibersListed);
  if (line == "stuck") {
    return rt_->monitor != nullptr ? JsonOfStuck(rt_->monitor->recent_stuck()) : "{\"stuck\":[]}";
  }
  if (line == "runs") {
    if (rt_->monitor == nullptr) return "{\"longest_runs\":[]}";
    std::string out = "{\"longest_runs\":[";
    const std::vector<Monitor::LongRun> runs = rt_->monitor->longest_runs();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      out += i == 0 ? "{\"fiber_id\":" : ",{\"fiber_id\":";
      out += std::to_string(runs[i].fiber_id) + ",\"name\":";
      AppendJsonString(out, runs[i].name);
      out += ",\"longest_ns\":" + std::to_string(runs[i].longest.count()) + "}";
    }
    return out + "]}";
  }
  if (line == "hello") {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"weft_console\":1,\"pid\":%d,\"workers\":%u,\"spares\":%zu,"
                  "\"stuck_threshold_us\":%lld}",
                  static_cast<int>(::getpid()), rt_->nworkers, rt_->workers.size() - rt_->nworkers,
                  static_cast<long long>(rt_->options.stuck_threshold.count()));
    return buf;
  }
  return "{\"error\":\"unknown request; send hello, stats, fibers, stuck or runs\"}";
}

void Console::Loop() {
  struct Client {
    int fd;
    std::string in, out;
    bool eof = false;  // it shut down its side: its replies still go out, then it is closed
  };
  std::vector<Client> clients;
  // Out of fds (or memory) for accept: the listening socket stays readable, so it is left out
  // of the poll until then, instead of spinning.
  std::chrono::steady_clock::time_point accept_paused_until{};
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_read_, POLLIN, 0});
    const auto now = std::chrono::steady_clock::now();
    const bool accepting = now >= accept_paused_until;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // a negative fd is skipped
    for (const Client& c : clients) {
      short events = c.eof ? 0 : POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
    }
    const int timeout =
        accepting
            ? -1
            : static_cast<int>(
                  std::chrono::ceil<std::chrono::milliseconds>(accept_paused_until - now).count());
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "weft: console stopped: poll: %s\n", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;  // the destructor
    std::vector<bool> drop(clients.size(), false);
    for (std::size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short ev = fds[i + 2].revents;
      if ((ev & (POLLERR | POLLNVAL)) != 0) {
        drop[i] = true;
        continue;
      }
      if (!c.eof && (ev & (POLLIN | POLLHUP)) != 0) {
        char buf[512];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          drop[i] = true;
          continue;
        }
        if (n == 0) c.eof = true;  // answer what it sent, then close
        if (n > 0) c.in.append(buf, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = c.in.find('\n')) != std::string::npos;) {
          std::string line = c.in.substr(0, nl);
          c.in.erase(0, nl + 1);
          if (!line.empty() && line.back() == '\r') line.pop_back();
          c.out += Answer(line);
          c.out += '\n';
        }
        if (c.in.size() > kMaxLine || c.out.size() > kMaxPending) {
          drop[i] = true;
          continue;
        }
      }
      if (!c.out.empty()) {
        const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          c.out.erase(0, static_cast<std::size_t>(n));
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          drop[i] = true;
          continue;
        }
      }
      if (c.eof && c.out.empty()) drop[i] = true;
    }
    for (std::size_t i = clients.size(); i-- > 0;) {
      if (drop[i]) {
        ::close(clients[i].fd);
        clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (accepting && (fds[1].revents & POLLIN) != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
          }
          break;  // EAGAIN: none left; ECONNABORTED and the like: at the next poll
        }
        if (clients.size() >= kMaxClients || !PeerIsUs(fd)) {
          ::close(fd);
          continue;
        }
        clients.push_back({fd, {}, {}});
      }
    }
  }
  for (const Client& c : clients) ::close(c.fd);
}

#endif

}  // namespace scheduler_internal
}  // namespace weft
