// examples/server_main.h: what the example servers share: flags, the listener, SIGINT/SIGTERM
// received by a fiber (weft::SignalSet) as a stop token, and the accept loop that runs each
// connection as a child of one TaskGroup, cancelled and drained at shutdown.

#ifndef WEFT_EXAMPLES_SERVER_MAIN_H_
#define WEFT_EXAMPLES_SERVER_MAIN_H_

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "weft/api/weft.h"
#include "weft/examples/serve_connections.h"

namespace weft::examples {

struct ServerFlags {
  int port = 7000;  // 0: any free port (see --port_file)
  unsigned workers = 0;
  std::string port_file;  // the bound port is written here once listening
  bool console = false;   // RuntimeOptions::console
  int busy_ms = 0;        // a fiber that computes this long once a second (a demonstration)
};

// ParseServerFlags: the flags every example server has (--port, --workers, --port_file, defined
// in server_flags.cc) and the program's own (ABSL_FLAG in its file), parsed from argv; --help
// lists them. A bad value exits with a message.
ServerFlags ParseServerFlags(int argc, char** argv, const char* usage);

// Serve: listens, then runs on_connection(stream, token) on a fiber per connection until SIGINT
// or SIGTERM. The connections are children of one TaskGroup, and `token` is the group's: the
// handler passes it to its reads and writes. On the signal it shuts down gracefully: stops
// accepting, cancels the group (every connection's pending read or write ends with
// operation_canceled), waits for the connections to return, and returns 0; a second SIGINT or
// SIGTERM during the drain exits at once (status 1). SIGUSR1 prints the live fibers (id, name,
// state, what each is parked on) to stderr, while serving or draining. The accept loop and the
// drain are ServeConnections (serve_connections.h).
template <typename OnConnection>
int Serve(const char* name, const ServerFlags& flags, OnConnection on_connection) {
  Runtime rt({.workers = flags.workers, .console = flags.console});
  if (!rt.console_path().empty()) {
    std::fprintf(stderr, "%s: console at %s (tools/weft-console %d)\n", name,
                 rt.console_path().c_str(), static_cast<int>(::getpid()));
  }
  return rt.block_on([&]() -> int {
    // The signals first: one that arrives from here on is queued, not fatal.
    Result<SignalSet> signals = SignalSet::open({SIGINT, SIGTERM, SIGUSR1});
    if (!signals.ok()) {
      std::fprintf(stderr, "%s: signals: %s\n", name,
                   std::make_error_code(signals.error()).message().c_str());
      return 1;
    }
    CancellationSource stop;
    const CancellationToken stop_token = stop.token();
    // The signal watcher: a group of its own, cancelled (and joined) as Serve returns, before
    // the set it waits on closes.
    TaskGroup<> watcher;
    (void)watcher.spawn(
        [&](const CancellationToken& cancel) {
          for (;;) {
            Result<int> sig = signals->recv({.cancel = &cancel});
            if (!sig.ok()) return;
            if (*sig == SIGUSR1) {
              std::string dump = rt.dump_fibers();
              std::fprintf(stderr, "--- live fibers (SIGUSR1)\n%s---\n", dump.c_str());
              continue;
            }
            const char* what = *sig == SIGINT ? "SIGINT" : "SIGTERM";
            if (stop.is_cancelled()) {  // a second one while draining: the operator insists
              std::fprintf(stderr, "%s: %s again: exiting without draining\n", name, what);
              std::_Exit(1);
            }
            std::fprintf(stderr, "%s: %s\n", name, what);
            stop.cancel();  // and keep watching: SIGUSR1 dumps the drain, a second signal ends it
          }
        },
        {.name = "signals"});
    if (flags.busy_ms > 0) {
      // The demonstration of a fiber that holds its worker (--busy_ms): the monitor reports it
      // on stderr, the console lists it, and a spare worker serves if every worker is held.
      (void)watcher.spawn(
          [&](const CancellationToken& cancel) {
            while (this_fiber::sleep_for(std::chrono::seconds(1), &cancel).ok()) {
              const auto end =
                  std::chrono::steady_clock::now() + std::chrono::milliseconds(flags.busy_ms);
              while (std::chrono::steady_clock::now() < end) {
              }
            }
          },
          {.name = "busy-loop"});
    }
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
    (void)ServeConnections(name, *listener, stop_token, on_connection);
    return 0;
  });
}

}  // namespace weft::examples

#endif  // WEFT_EXAMPLES_SERVER_MAIN_H_
