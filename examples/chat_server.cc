// examples/chat_server.cc: a line-based chat server. Every line a client sends goes to every
// connected client (the sender included), in the order the server received it from that sender.
// A client first gets "welcome <id>\n" once it is registered: from then on it receives every line.
//
// Each client has a reader fiber (parse lines, fan out) and a writer fiber fed by a bounded
// channel; a full channel makes the fan-out wait (backpressure, never a dropped line).
//
//   ./bazelw run -c opt //examples:chat_server -- --port 7001
//   ./bazelw run -c opt //examples:load_driver -- --mode chat --port 7001 --conns 50

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "examples/server_main.h"

namespace {

using namespace weft;

struct Client {
  std::uint64_t id = 0;
  Channel<std::shared_ptr<const std::string>> outbox{1024};
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
  // broadcast: to every member; waits while a member's outbox is full.
  void broadcast(const std::shared_ptr<const std::string>& line) {
    std::vector<std::shared_ptr<Client>> to;
    (void)mu_.lock();
    to.reserve(clients_.size());
    for (auto& [id, c] : clients_) to.push_back(c);
    (void)mu_.unlock();
    for (auto& c : to) (void)c->outbox.send(line);  // fails only once that client left
  }

 private:
  Mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<Client>> clients_;
};

Room g_room;
std::atomic<std::uint64_t> g_next_id{1};

void Serve(net::TcpStream stream) {
  auto me = std::make_shared<Client>();
  me->id = g_next_id.fetch_add(1);
  g_room.join(me);
  // The writer: drains the outbox into the socket until the outbox closes or the socket fails.
  // `stream` outlives it: the reader joins it before returning.
  JoinHandle<void> writer = Runtime::current()->spawn(
      [me, &stream] {
        for (;;) {
          Result<std::shared_ptr<const std::string>> line = me->outbox.recv();
          if (!line.ok()) return;
          if (!stream.write_all((*line)->data(), (*line)->size()).ok()) {
            me->outbox.close();  // senders stop waiting for us
            return;
          }
        }
      },
      {.stack_size = 32 << 10, .name = "chat writer"});
  (void)me->outbox.send(
      std::make_shared<const std::string>("welcome " + std::to_string(me->id) + "\n"));
  std::string pending;
  char buf[16 << 10];
  for (;;) {
    Result<std::size_t> n = stream.read(buf, sizeof buf);
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
  (void)writer.join();
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: chat_server [--port N] [--workers N] [--port-file PATH]\n";
  examples::ServerFlags flags = examples::ParseServerFlags(argc, argv, usage);
  CancellationSource stop;
  std::thread watcher = examples::StopOnSignal(stop);
  CancellationToken token = stop.token();
  int rc = examples::Serve("chat_server", flags, token, &Serve);
  if (!stop.is_cancelled()) ::kill(::getpid(), SIGTERM);
  watcher.join();
  return rc;
}
