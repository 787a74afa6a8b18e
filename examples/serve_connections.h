// examples/serve_connections.h: the example servers' accept loop, apart from their flags and
// signals (server_main.h), so that a test serves the same loop on a simulated listener
// (examples/sim_examples_test.cc).

#ifndef WEFT_EXAMPLES_SERVE_CONNECTIONS_H_
#define WEFT_EXAMPLES_SERVE_CONNECTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <system_error>
#include <utility>

#include "weft/api/weft.h"

namespace weft::examples {

// Log: a line on stderr, prefixed "name: " (nothing if name is null).
template <typename... Args>
void Log(const char* name, const char* format, Args... args) {
  if (name == nullptr) return;
  std::fprintf(stderr, "%s: ", name);
  std::fprintf(stderr, format, args...);
}

// ServeConnections: accepts on `listener` until `stop` is cancelled, running
// on_connection(stream, token) on a fiber per connection, each a child of one TaskGroup whose
// token it gets. Then it closes the listener, cancels the group (every connection's pending
// read or write ends with operation_canceled), waits for the connections to return, and returns
// how many it drained. Out of fds (EMFILE) is logged and retried after a pause: the server
// keeps serving the connections it has. `name` prefixes its lines on stderr (null: no lines).
template <typename OnConnection>
std::size_t ServeConnections(const char* name, net::TcpListener& listener,
                             const CancellationToken& stop, OnConnection& on_connection) {
  // Collect-all: one connection's failure ends only that connection. Outcomes are discarded
  // as connections close, so the group stays small however long the server runs.
  TaskGroup<> connections({.policy = GroupPolicy::kCollectAll, .discard_outcomes = true});
  for (;;) {
    auto conn = listener.accept({.cancel = &stop});
    if (conn.ok()) {
      (void)conn->set_nodelay(true);
      Result<std::uint64_t> id = connections.spawn(
          [&on_connection, s = std::move(*conn)](const CancellationToken& token) mutable {
            on_connection(std::move(s), token);
          },
          {.stack_size = 32 << 10, .name = "connection"});
      if (!id.ok()) {  // out of memory or stacks: this connection is closed, the rest serve on
        Log(name, "spawn: %s\n", std::make_error_code(id.error()).message().c_str());
      }
    } else if (conn.error() == std::errc::operation_canceled) {
      break;
    } else if (conn.error() == std::errc::too_many_files_open ||
               conn.error() == std::errc::too_many_files_open_in_system) {
      Log(name, "out of fds; pausing accepts\n");
      (void)this_fiber::sleep_for(std::chrono::milliseconds(10), &stop);
    } else {
      Log(name, "accept: %s\n", std::make_error_code(conn.error()).message().c_str());
    }
  }
  (void)listener.close();  // no new connections queue up while the others drain
  const std::size_t open = connections.size();
  Log(name, "stopping; draining %zu connections\n", open);
  connections.cancel();
  try {
    (void)connections.join_all();
  } catch (const std::exception& e) {
    Log(name, "a connection failed: %s\n", e.what());
  }
  Log(name, "stopped; %zu connections drained\n", open);
  return open;
}

}  // namespace weft::examples

#endif  // WEFT_EXAMPLES_SERVE_CONNECTIONS_H_
