// examples/chat.cc: the chat room (chat.h).

#include "weft/examples/chat.h"

#include <utility>
#include <vector>

namespace weft::examples {

struct ChatRoom::Client {
  // The source is linked to the connection's token: the server's shutdown cancels the writer's
  // pending write as an eviction does.
  Client(const CancellationToken& connection, std::size_t outbox_lines, ChatRoom* owner)
      : outbox(outbox_lines), evict(connection), room(owner) {}
  std::uint64_t id = 0;
  Channel<std::shared_ptr<const std::string>> outbox;
  CancellationSource evict;  // cancels the writer's pending write
  std::atomic<bool> evicted{false};
  ChatRoom* room;

  // Evict: once. The writer sees the closed outbox or its cancelled write, and shuts the socket.
  void Evict() {
    if (evicted.exchange(true)) return;
    room->evicted_.fetch_add(1, std::memory_order_relaxed);
    outbox.close();
    evict.cancel();
  }
};

void ChatRoom::join(const std::shared_ptr<Client>& c) {
  MutexLock hold(mu_);
  clients_[c->id] = c;
}

void ChatRoom::leave(std::uint64_t id) {
  MutexLock hold(mu_);
  clients_.erase(id);
}

// broadcast: to every member. First without waiting; then each full outbox gets the grace to
// make room, and past it the slow-consumer policy applies.
void ChatRoom::broadcast(const std::shared_ptr<const std::string>& line) {
  std::vector<std::shared_ptr<Client>> to;
  {
    MutexLock hold(mu_);
    to.reserve(clients_.size());
    for (auto& [id, c] : clients_) to.push_back(c);
  }
  std::vector<Client*> full;
  for (auto& c : to) {
    std::shared_ptr<const std::string> copy = line;
    Result<void> r = c->outbox.try_send(std::move(copy));
    if (r == std::errc::resource_unavailable_try_again) full.push_back(c.get());
    // (any other error: that client left or was evicted)
  }
  for (Client* c : full) {
    if (options_.slow == SlowPolicy::kDrop) {  // no wait at all: the line is not theirs
      lines_dropped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // Disconnect: the grace, once (after it the outbox is closed and sends fail at once).
    // SyncClock, not steady_clock: under simulation the grace is virtual time too.
    Result<void> r = c->outbox.send(line, {.deadline = SyncClock::now() + options_.grace});
    if (r == std::errc::timed_out) c->Evict();
  }
}

void ChatRoom::serve(net::TcpStream stream, const CancellationToken& cancel) {
  auto me = std::make_shared<Client>(cancel, options_.outbox, this);
  me->id = next_id_.fetch_add(1);
  // The writer: drains the outbox into the socket until the outbox closes or the socket fails.
  // A child of this connection's own group, which is nested in the server's group of
  // connections; `stream` outlives it: the group joins it before serve returns.
  TaskGroup<> writer;
  Result<std::uint64_t> spawned = writer.spawn(
      [me, &stream] {
        CancellationToken evicted = me->evict.token();
        // Until the outbox is closed (or a shutdown cancels the wait: range() ends, no throw).
        for (const std::shared_ptr<const std::string>& line : me->outbox.range()) {
          if (!stream.write_all(line->data(), line->size(), {.cancel = &evicted}).ok()) {
            me->outbox.close();  // senders stop waiting for us
            break;
          }
        }
        // Evicted: end the reader too (its read returns), so the connection goes away.
        if (me->evicted.load()) (void)stream.shutdown();
      },
      {.stack_size = 32 << 10, .name = "chat writer"});
  if (!spawned.ok()) return;  // no memory for the writer: this connection closes
  // The welcome first, then into the room: joined first, a line broadcast in between went to
  // the outbox ahead of the welcome, and a client that reads its welcome first took the line for
  // a protocol error (the load driver's talker left, and the others waited for its lines).
  (void)me->outbox.send(
      std::make_shared<const std::string>("welcome " + std::to_string(me->id) + "\n"));
  join(me);
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
      broadcast(std::make_shared<const std::string>(pending.substr(start, nl + 1 - start)));
    }
    pending.erase(0, start);
  }
  leave(me->id);
  me->outbox.close();
  (void)writer.join_all();
}

}  // namespace weft::examples
