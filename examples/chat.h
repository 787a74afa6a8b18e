// examples/chat.h: the chat room of examples/chat_server.cc, a library so that a test can serve
// it on any listener, real or simulated (examples/sim_examples_test.cc). Every line a client
// sends goes to every connected client (the sender included), in the order the server received
// it from that sender. A client first gets "welcome <id>\n" once it is registered: from then on
// it receives every line.
//
// Each client has a reader fiber (parse lines, fan out) and a writer fiber fed by a bounded
// outbox (a channel of `outbox` lines). The fan-out never waits on one client for long: it
// offers each line to every outbox without waiting. A full outbox marks a slow consumer, and the
// policy decides: kDisconnect gives it `grace` to make room, then evicts it (its outbox closes,
// its pending write is cancelled, its socket is shut down); kDrop drops the line for it alone,
// at once, and counts it. Either way the other clients never wait more than the grace, once per
// slow client.

#ifndef WEFT_EXAMPLES_CHAT_H_
#define WEFT_EXAMPLES_CHAT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "weft/api/weft.h"

namespace weft::examples {

enum class SlowPolicy { kDisconnect, kDrop };

struct ChatOptions {
  std::size_t outbox = 1024;  // lines queued per client
  SlowPolicy slow = SlowPolicy::kDisconnect;
  std::chrono::milliseconds grace{200};
};

class ChatRoom {
 public:
  explicit ChatRoom(ChatOptions options) : options_(options) {}
  ChatRoom(const ChatRoom&) = delete;
  ChatRoom& operator=(const ChatRoom&) = delete;

  // serve: one client's connection, until it ends, fails, is evicted, or `cancel` (the server's
  // shutdown) is cancelled.
  void serve(net::TcpStream stream, const CancellationToken& cancel);

  std::uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }
  std::uint64_t lines_dropped() const { return lines_dropped_.load(std::memory_order_relaxed); }

 private:
  struct Client;
  void join(const std::shared_ptr<Client>& c);
  void leave(std::uint64_t id);
  void broadcast(const std::shared_ptr<const std::string>& line);

  const ChatOptions options_;
  Mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<Client>> clients_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> evicted_{0};        // slow consumers disconnected
  std::atomic<std::uint64_t> lines_dropped_{0};  // lines a slow consumer did not get (kDrop)
};

}  // namespace weft::examples

#endif  // WEFT_EXAMPLES_CHAT_H_
