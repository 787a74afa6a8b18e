// examples/chat_server.cc: a line-based chat server (the room is examples/chat.h). Every line a
// client sends goes to every connected client (the sender included), in the order the server
// received it from that sender. A slow consumer (a full outbox of --outbox lines) is handled by
// --slow: `disconnect` (the default) gives it --slow_grace_ms to make room, then evicts it;
// `drop` drops the line for it alone and counts it. The counts are printed at exit.
//
//   ./bazelw run -c opt //examples:chat_server -- --port 7001 [--outbox 1024]
//       [--slow disconnect|drop] [--slow_grace_ms 200]
//   ./bazelw run -c opt //examples:load_driver -- --mode chat --port 7001 --conns 50
//   ./bazelw run -c opt //examples:load_driver -- --mode chat --port 7001 --conns 20 --stall 1

#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "weft/base/command_line.h"
#include "weft/examples/chat.h"
#include "weft/examples/server_main.h"

ABSL_FLAG(long, outbox, 1024, "lines queued per client before it counts as a slow consumer");
ABSL_FLAG(std::string, slow, "disconnect", "a slow consumer: disconnect (after the grace) or drop");
ABSL_FLAG(long, slow_grace_ms, 200, "how long a full outbox may stay full before --slow acts");

int main(int argc, char** argv) {
  using namespace weft;
  using base_internal::UsageError;
  const char* usage =
      "a chat room over TCP, one fiber per client: chat_server --port 7001 [--outbox 256]";
  examples::ServerFlags flags = examples::ParseServerFlags(argc, argv, usage);
  const long outbox = absl::GetFlag(FLAGS_outbox);
  const std::string slow = absl::GetFlag(FLAGS_slow);
  const long grace_ms = absl::GetFlag(FLAGS_slow_grace_ms);
  if (outbox <= 0 || outbox > (1L << 20)) UsageError("--outbox must be 1..1048576");
  if (slow != "disconnect" && slow != "drop") UsageError("--slow must be disconnect or drop");
  if (grace_ms < 0 || grace_ms > 60000) UsageError("--slow_grace_ms must be 0..60000");
  examples::ChatRoom room({
      .outbox = static_cast<std::size_t>(outbox),
      .slow = slow == "drop" ? examples::SlowPolicy::kDrop : examples::SlowPolicy::kDisconnect,
      .grace = std::chrono::milliseconds(grace_ms),
  });
  int rc = examples::Serve("chat_server", flags,
                           [&room](net::TcpStream s, const CancellationToken& cancel) {
                             room.serve(std::move(s), cancel);
                           });
  std::fprintf(stderr, "chat_server: slow consumers evicted %llu, lines dropped %llu\n",
               static_cast<unsigned long long>(room.evicted()),
               static_cast<unsigned long long>(room.lines_dropped()));
  return rc;
}
