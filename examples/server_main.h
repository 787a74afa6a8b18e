// examples/server_main.h: what the example servers share: flags, the listener, a stop token
// cancelled by SIGINT/SIGTERM, and the accept loop that spawns a fiber per connection.

#ifndef WEFT_EXAMPLES_SERVER_MAIN_H_
#define WEFT_EXAMPLES_SERVER_MAIN_H_

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "weft/api/weft.h"

namespace weft::examples {

struct ServerFlags {
  int port = 7000;  // 0: any free port (see --port_file)
  unsigned workers = 0;
  std::string port_file;  // the bound port is written here once listening
};

// ParseServerFlags: the flags every example server has (--port, --workers, --port_file, defined
// in server_flags.cc) and the program's own (ABSL_FLAG in its file), parsed from argv; --help
// lists them. A bad value exits with a message.
ServerFlags ParseServerFlags(int argc, char** argv, const char* usage);

// The runtime that SIGUSR1 dumps (see StopOnSignal); set by Serve while it runs. The mutex keeps
// the runtime alive while a dump reads it.
inline std::mutex g_dump_mu;
inline const Runtime* g_dump_runtime = nullptr;

// StopOnSignal: SIGINT/SIGTERM cancel `source`; SIGUSR1 prints the live fibers (id, name, state,
// what each is parked on) to stderr and keeps serving. Call before starting any thread (the
// runtime's workers inherit the blocked mask, so only the watcher thread receives the signals).
inline std::thread StopOnSignal(CancellationSource& source) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return std::thread([set, &source] {
    for (;;) {
      int sig = 0;
      sigwait(&set, &sig);
      if (sig != SIGUSR1) break;
      std::lock_guard<std::mutex> lock(g_dump_mu);
      if (g_dump_runtime != nullptr) {
        std::string dump = g_dump_runtime->dump_fibers();
        std::fprintf(stderr, "--- live fibers (SIGUSR1)\n%s---\n", dump.c_str());
      }
    }
    source.cancel();
  });
}

// Serve: listens, then runs on_connection(stream) on a fiber per connection until the token is
// cancelled. Out of fds (EMFILE) is logged and retried after a pause: the server keeps serving
// the connections it has.
template <typename OnConnection>
int Serve(const char* name, const ServerFlags& flags, const CancellationToken& stop,
          OnConnection on_connection) {
  Runtime rt({.workers = flags.workers});
  {
    std::lock_guard<std::mutex> lock(g_dump_mu);
    g_dump_runtime = &rt;
  }
  struct Unpublish {  // before ~Runtime
    ~Unpublish() {
      std::lock_guard<std::mutex> lock(g_dump_mu);
      g_dump_runtime = nullptr;
    }
  } unpublish;
  return rt.block_on([&]() -> int {
    auto listener = net::TcpListener::bind(
        net::SocketAddress::ipv4_any(static_cast<std::uint16_t>(flags.port)));
    if (!listener.ok()) {
      std::fprintf(stderr, "%s: listen: %s\n", name,
                   std::make_error_code(listener.error()).message().c_str());
      return 1;
    }
    int port = listener->local_address()->port();
    std::fprintf(stderr, "%s: listening on port %d with %u workers\n", name, port, rt.workers());
    if (!flags.port_file.empty()) std::ofstream(flags.port_file) << port << "\n";
    for (;;) {
      auto conn = listener->accept({.cancel = &stop});
      if (conn.ok()) {
        (void)conn->set_nodelay(true);
        rt.spawn([&on_connection, s = std::move(*conn)]() mutable { on_connection(std::move(s)); },
                 {.stack_size = 32 << 10, .name = "connection"})
            .detach();
      } else if (conn.error() == std::errc::operation_canceled) {
        break;
      } else if (conn.error() == std::errc::too_many_files_open ||
                 conn.error() == std::errc::too_many_files_open_in_system) {
        std::fprintf(stderr, "%s: out of fds; pausing accepts\n", name);
        (void)this_fiber::sleep_for(std::chrono::milliseconds(10), &stop);
      } else {
        std::fprintf(stderr, "%s: accept: %s\n", name,
                     std::make_error_code(conn.error()).message().c_str());
      }
    }
    std::fprintf(stderr, "%s: stopping\n", name);
    return 0;
  });  // ~Runtime cancels the connection fibers' reads and writes; they unwind
}

}  // namespace weft::examples

#endif  // WEFT_EXAMPLES_SERVER_MAIN_H_
