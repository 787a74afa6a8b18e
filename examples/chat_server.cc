// examples/chat_server.cc: a line-based chat server. Every line a client sends goes to every
// connected client (the sender included), in the order the server received it from that sender.
// A client first gets "welcome <id>\n" once it is registered: from then on it receives every line.
//
// Each client has a reader fiber (parse lines, fan out) and a writer fiber fed by a bounded
// outbox (a channel of --outbox lines). The fan-out never waits on one client for long: it
// offers each line to every outbox without waiting. A full outbox marks a slow consumer, and the
// --slow policy decides: `disconnect` (the default) gives it --slow_grace_ms to make room, then
// evicts it (its outbox closes, its pending write is cancelled, its socket is shut down); `drop`
// drops the line for it alone, at once, and counts it. Either way the other clients never wait
// more than the grace, once per slow client. The counts are printed at exit.
//
//   ./bazelw run -c opt //examples:chat_server -- --port 7001 [--outbox 1024]
//       [--slow disconnect|drop] [--slow_grace_ms 200]
//   ./bazelw run -c opt //examples:load_driver -- --mode chat --port 7001 --conns 50
//   ./bazelw run -c opt //examples:load_driver -- --mode chat --port 7001 --conns 20 --stall 1

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "weft/base/command_line.h"
#include "weft/examples/server_main.h"

ABSL_FLAG(long, outbox, 1024, "lines queued per client before it counts as a slow consumer");
ABSL_FLAG(std::string, slow, "disconnect", "a slow consumer: disconnect (after the grace) or drop");
ABSL_FLAG(long, slow_grace_ms, 200, "how long a full outbox may stay full before --slow acts");

namespace {

using namespace weft;

enum class SlowPolicy { kDisconnect, kDrop };

struct ChatOptions {
  std::size_t outbox = 1024;  // lines
  SlowPolicy slow = SlowPolicy::kDisconnect;
  std::chrono::milliseconds grace{200};
};
ChatOptions g_options;
std::atomic<std::uint64_t> g_evicted{0};        // slow consumers disconnected
std::atomic<std::uint64_t> g_lines_dropped{0};  // lines a slow consumer did not get (kDrop)

struct Client {
  // The source is linked to the connection's token: the server's shutdown cancels the writer's
  // pending write as an eviction does.
  explicit Client(const CancellationToken& connection) : evict(connection) {}
  std::uint64_t id = 0;
  Channel<std::shared_ptr<const std::string>> outbox{g_options.outbox};
  CancellationSource evict;  // cancels the writer's pending write
  std::atomic<bool> evicted{false};

  // Evict: once. The writer sees the closed outbox or its cancelled write, and shuts the socket.
  void Evict() {
    if (evicted.exchange(true)) return;
    g_evicted.fetch_add(1, std::memory_order_relaxed);
    outbox.close();
    evict.cancel();
  }
};

class Room {
 public:
  void join(const std::shared_ptr<Client>& c) {
    (void)mu_.lock();
    clients_[c->id] = c;
    (void)mu_.unlock();
  }
  void leave(std::uint64_t id) {
    (void)mu_.lock();
    clients_.erase(id);
    (void)mu_.unlock();
  }
  // broadcast: to every member. First without waiting; then each full outbox gets the grace to
  // make room, and past it the slow-consumer policy applies.
  void broadcast(const std::shared_ptr<const std::string>& line) {
    std::vector<std::shared_ptr<Client>> to;
    (void)mu_.lock();
    to.reserve(clients_.size());
    for (auto& [id, c] : clients_) to.push_back(c);
    (void)mu_.unlock();
    std::vector<Client*> full;
    for (auto& c : to) {
      std::shared_ptr<const std::string> copy = line;
      Result<void> r = c->outbox.try_send(std::move(copy));
      if (!r.ok() && r.error() == std::errc::resource_unavailable_try_again)
        full.push_back(c.get());
      // (any other error: that client left or was evicted)
    }
    for (Client* c : full) {
      if (g_options.slow == SlowPolicy::kDrop) {  // no wait at all: the line is not theirs
        g_lines_dropped.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      // Disconnect: the grace, once (after it the outbox is closed and sends fail at once).
      Result<void> r =
          c->outbox.send(line, {.deadline = std::chrono::steady_clock::now() + g_options.grace});
      if (!r.ok() && r.error() == std::errc::timed_out) c->Evict();
    }
  }

 private:
  Mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<Client>> clients_;
};

Room g_room;
std::atomic<std::uint64_t> g_next_id{1};

void Serve(net::TcpStream stream, const CancellationToken& cancel) {
  auto me = std::make_shared<Client>(cancel);
  me->id = g_next_id.fetch_add(1);
  // The writer: drains the outbox into the socket until the outbox closes or the socket fails.
  // A child of this connection's own group, which is nested in the server's group of
  // connections; `stream` outlives it: the group joins it before Serve returns.
  TaskGroup<> writer;
  Result<std::uint64_t> spawned = writer.spawn(
      [me, &stream] {
        CancellationToken evicted = me->evict.token();
        for (;;) {
          Result<std::shared_ptr<const std::string>> line = me->outbox.recv();
          if (!line.ok()) break;
          if (!stream.write_all((*line)->data(), (*line)->size(), {.cancel = &evicted}).ok()) {
            me->outbox.close();  // senders stop waiting for us
            break;
          }
        }
        // Evicted: end the reader too (its read returns), so the connection goes away.
        if (me->evicted.load()) (void)::shutdown(stream.fd(), SHUT_RDWR);
      },
      {.stack_size = 32 << 10, .name = "chat writer"});
  if (!spawned.ok()) return;  // no memory for the writer: this connection closes
  g_room.join(me);
  (void)me->outbox.send(
      std::make_shared<const std::string>("welcome " + std::to_string(me->id) + "\n"));
  std::string pending;
  char buf[16 << 10];
  // The reads take the writer group's token: nested in the connection's, it is cancelled by the
  // server's shutdown, and also (fail-fast) if the writer fails, as one that cannot get a stack
  // does: a client nobody writes to is not kept.
  const CancellationToken& reading = writer.token();
  for (;;) {
    Result<std::size_t> n = stream.read(buf, sizeof buf, {.cancel = &reading});
    if (!n.ok() || *n == 0) break;
    pending.append(buf, *n);
    std::size_t start = 0;
    for (std::size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      g_room.broadcast(std::make_shared<const std::string>(pending.substr(start, nl + 1 - start)));
    }
    pending.erase(0, start);
  }
  g_room.leave(me->id);
  me->outbox.close();
  (void)writer.join_all();
}

}  // namespace

int main(int argc, char** argv) {
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
  g_options.outbox = static_cast<std::size_t>(outbox);
  g_options.slow = slow == "drop" ? SlowPolicy::kDrop : SlowPolicy::kDisconnect;
  g_options.grace = std::chrono::milliseconds(grace_ms);
  int rc = examples::Serve("chat_server", flags, &Serve);
  std::fprintf(stderr, "chat_server: slow consumers evicted %llu, lines dropped %llu\n",
               static_cast<unsigned long long>(g_evicted.load()),
               static_cast<unsigned long long>(g_lines_dropped.load()));
  return rc;
}
