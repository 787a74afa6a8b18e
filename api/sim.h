// api/sim.h: the simulated network of a simulated runtime (RuntimeOptions::simulation): the
// TCP of weft::net and weft::io between named simulated hosts, in memory, with seeded latency,
// loss, resets, partitions and heals and per-host fd limits. docs/simulation.md has the guide.
//
// Defines: weft::sim::NetworkOptions, weft::sim::Host, weft::sim::NetworkStats,
// weft::sim::Network.
//
// In a simulated runtime, TcpListener, TcpStream, UdpSocket, net::resolve and the weft::io calls
// on their fds use this network; no real fd is ever touched (a real one is refused with ENOTSUP). A
// fiber runs on a host: the default host "main" unless it, or the fiber that spawned it, entered
// another (Network::enter). Each host has an address 10.0.x.y, a name that net::resolve knows,
// loopback (127.0.0.1 reaches the host itself), its own ports and its own fd limit. A stackless
// task's socket calls (async_read, async_connect...) run their blocking forms on fibers of
// their own, on the task's host, while the task waits.
//
// What the network does, as TCP would:
//   - connect: a SYN that finds no listener (on that address and port) is refused
//     (ECONNREFUSED) after a round trip; one cut off by a partition or finding the backlog full
//     is retried (1 s, 2 s, 4 s ...) until NetworkOptions::connect_timeout (ETIMEDOUT) or the
//     call's deadline. connect returns after SYN and SYN-ACK; accept gets it after the ACK.
//   - bytes arrive in order, each write after a latency drawn from [min_latency, max_latency];
//     a lost segment (NetworkOptions::loss) arrives `retransmit` later, as a retransmission
//     would. A partition holds every segment in flight between its hosts (bytes that had
//     arrived stay readable) until it heals; then they arrive one latency later, in order,
//     exactly once. (There is no give-up timeout: set deadlines on your reads.)
//   - a send waits while `window` bytes are sent and not yet read: backpressure.
//   - close with unread data, a write to a closed peer, Network::reset and NetworkOptions::reset
//     reset a connection: bytes in flight are lost; bytes that had arrived are still read, then
//     one call on each end fails with ECONNRESET, and after it reads give 0 and writes EPIPE.
//     A plain close or shutdown_write is a FIN: the peer reads what was sent, then 0.
//   - socket(), accept() past the host's fd limit: EMFILE (a connection stays queued).
//   - UDP: a datagram arrives whole after a latency (datagrams may pass each other), or is
//     dropped, silently: lost (NetworkOptions::loss; never sent again), or, as it arrives,
//     across a partition, with no socket bound at its address, a connected socket's peer not
//     its sender, or 256 arrived and unread there. TCP and UDP ports are apart.
//   - fds are numbered from a base drawn from the seed, the lowest free first; an fd is
//     meaningful only on its simulation's thread while that runtime lives.
//
// Everything here is deterministic given the simulation's seed: its draws come from the same
// PRNG that picks fibers, and its events (connections, segments, resets, partitions) join the
// trace hash.

#ifndef WEFT_API_SIM_H_
#define WEFT_API_SIM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "weft/api/net.h"
#include "weft/base/result.h"

namespace weft::sim {

struct NetworkOptions {
  // One-way latency of a segment, drawn uniformly from [min_latency, max_latency] (at most 1 h).
  std::chrono::nanoseconds min_latency = std::chrono::microseconds(50);
  std::chrono::nanoseconds max_latency = std::chrono::microseconds(500);
  // loss: the chance (0..1) that a segment is lost once; it arrives `retransmit` (at most 1 h)
  // later.
  double loss = 0.0;
  std::chrono::nanoseconds retransmit = std::chrono::milliseconds(200);
  // reset: the chance (0..1) that a segment resets its connection instead of arriving.
  double reset = 0.0;
  // window: bytes sent on a connection and not yet read by the peer, per direction, past which
  // a send waits (1 .. 1 GiB).
  std::size_t window = std::size_t{256} << 10;
  // connect_timeout: how long a connect retries a SYN that gets no answer (Linux: about 127 s;
  // at most 24 h).
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(127);
  // fd_limit: sockets open at once per host (listeners and connections), past which socket()
  // and accept() fail with EMFILE. Network::set_fd_limit changes one host's.
  int fd_limit = 1024;
};

struct Host {
  std::uint32_t id = 0;  // 0: "main"; then in the order hosts were made
  std::string name;
  net::SocketAddress address;  // 10.0.x.y, port 0
};

struct NetworkStats {
  std::uint64_t hosts = 0;
  std::uint64_t connections = 0;  // connects that succeeded
  std::uint64_t refused = 0;      // connects refused (no listener)
  std::uint64_t timed_out = 0;    // connects that gave up (connect_timeout)
  std::uint64_t segments = 0;     // writes that put bytes on the network
  std::uint64_t bytes = 0;
  std::uint64_t lost = 0;               // segments lost once and retransmitted
  std::uint64_t resets = 0;             // connections reset, for any reason
  std::uint64_t emfile = 0;             // sockets and accepts refused by a host's fd limit
  std::uint64_t datagrams = 0;          // UDP datagrams sent
  std::uint64_t datagrams_dropped = 0;  // of those: lost, cut off, or with no socket to take them
};

// Network: the simulated network of the calling thread's simulated runtime. Every call is for
// that runtime's fibers (its one thread); none waits.
class Network {
 public:
  // current: this simulation's network, made on first use; null outside a simulated runtime.
  static Network* current();

  // configure: replaces the options (EINVAL: a time negative or past its bound, min_latency >
  // max_latency, a chance outside 0..1, window 0 or above 1 GiB, fd_limit below 1). Applies to
  // segments sent from now on; a wider window lets waiting senders on at once.
  Result<void> configure(const NetworkOptions& options);
  NetworkOptions options() const;

  // host: the host named `name`, made on first use (EINVAL: empty, over 64 bytes, or not letters,
  // digits, '-', '_', '.'; or a numeric address. ENOSPC past 65,000 hosts). Names are
  // case-insensitive, as DNS's.
  Result<Host> host(std::string_view name);
  // enter: the calling fiber now runs on host `name` (made on first use), and so do the fibers
  // it spawns from now on. Its sockets already open stay on the host that opened them.
  Result<void> enter(std::string_view name);
  // current_host: the calling fiber's host.
  Host current_host();

  // partition / heal: cut, or restore, every path between hosts a and b (both ways). Segments
  // between them wait; connects between them get no answer. heal_all: every partition.
  // EINVAL for a == b; ENOENT for a host never made.
  Result<void> partition(std::string_view a, std::string_view b);
  Result<void> heal(std::string_view a, std::string_view b);
  void heal_all();
  // reset: resets every open connection between hosts a and b (a == b: the host's loopback
  // connections); returns how many.
  Result<std::size_t> reset(std::string_view a, std::string_view b);
  // set_fd_limit: host's fd limit (at least 1); sockets already open stay open.
  Result<void> set_fd_limit(std::string_view host, int limit);
  // open_fds: the sockets open on the host.
  Result<int> open_fds(std::string_view host);

  NetworkStats stats() const;

  struct State;
  explicit Network(std::unique_ptr<State> state);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace weft::sim

#endif  // WEFT_API_SIM_H_
