// api/sim.cc: the simulated network (api/sim.h) and its sockets (api/internal/sim_net.h).
//
// All of it runs on the simulation's one thread, under one weft::Mutex: a call never waits while
// it holds it except in a CondVar wait, which lets it go. Each socket has one CondVar, broadcast
// on every change its callers wait for (bytes or a FIN arrived, room in the window, a reset, a
// close, a connection queued, a heal); a caller re-checks its condition each time it wakes and
// also wakes by itself when the next segment it waits for is due (the wait's deadline). A caller
// holds its socket by shared_ptr, so a close from another fiber ends its call with ECANCELED and
// never lets it reach the next socket given the same fd number.

#include "weft/api/sim.h"

#ifdef _WIN32
#include <winsock2.h>
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "internal/sim_net.h"
#include "weft/base/clock.h"
#include "weft/scheduler/io.h"
#include "weft/sync/mutex.h"

namespace weft::sim {
namespace {

using Nanos = std::int64_t;  // virtual time, SyncClock's ticks

Nanos Now() { return SyncClock::now().time_since_epoch().count(); }

constexpr std::uint32_t kMaxHosts = 65000;
constexpr int kMaxBacklog = 4096;
constexpr std::size_t kMaxDatagram = 65507;       // UDP's payload limit over IPv4
constexpr std::size_t kMaxQueuedDatagrams = 256;  // a receive buffer's worth; more are dropped
constexpr std::uint16_t kFirstEphemeral = 32768;  // Linux's ip_local_port_range
constexpr std::size_t kMaxWindow = std::size_t{1} << 30;
constexpr int kFdsPerNetwork = 1 << 20;  // 1,024 ranges of these fill [2^30, 2^31)
constexpr auto kMaxLatency = std::chrono::hours(1);
constexpr auto kMaxConnectTimeout = std::chrono::hours(24);

// Lower: a host name as looked up (names are case-insensitive, as DNS's).
std::string Lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The host's address, in host byte order: 10.0.0.1 for host 0, then up.
std::uint32_t AddressOf(std::uint32_t host) { return (10u << 24) | (host + 1); }
constexpr std::uint32_t kLoopback = 0x7f000001;

}  // namespace

struct Segment {
  std::string bytes;
  std::size_t offset = 0;  // read so far
  Nanos due = 0;           // when it arrives
  bool held = false;       // by a partition (sent across it, or in flight when it began)
};

struct Socket;

// Direction: the bytes one end sends the other, in order.
struct Direction {
  std::deque<Segment> segments;
  std::size_t unread = 0;  // bytes sent and not yet read (the window's use)
  Nanos last_due = 0;      // a segment never arrives before the one sent before it
  bool fin = false;        // the sender shut down writing; arrives at fin_due, after the bytes
  Nanos fin_due = 0;
  bool fin_held = false;  // by a partition
};

struct Connection {
  std::uint64_t id = 0;
  std::uint32_t host[2] = {0, 0};  // end 0: the connecting side; end 1: the accepted side
  Direction dir[2];                // dir[i]: from end i to end 1 - i
  // The two ends' sockets (the accepted end from the SYN's arrival, queued or not); null once
  // that end is closed.
  Socket* end[2] = {nullptr, nullptr};
  int error = 0;  // ECONNRESET once reset
  // When the connecting end's SYN-ACK arrives. Closed before then, the handshake never ends:
  // its final ACK is never sent, and the accepting side drops it unaccepted.
  Nanos established_at = 0;
  bool aborted = false;
};

struct Socket {
  // kDatagram: a UDP socket (SOCK_DGRAM), bound or not, with a peer (peer_set) or not.
  enum class Kind { kFresh, kListening, kConnected, kDatagram };
  Kind kind = Kind::kFresh;
  int fd = -1;
  // serial: which socket this is, never reused (its fd number is): a call made later on behalf
  // of an earlier one (a task's, run on a fiber) names the socket by it (sim_internal::Serial).
  std::uint64_t serial = 0;
  std::uint32_t host = 0;
  bool closed = false;
  bool shut_rd = false, shut_wr = false;
  bool reset_seen = false;  // a call has reported the reset: reads now give 0, writes EPIPE
  sockaddr_in local{}, peer{};
  bool bound = false;
  std::uint32_t bound_ip = 0;  // host order; 0: every address of the host (INADDR_ANY)
  // Connected: its connection and which end it is.
  std::shared_ptr<Connection> conn;
  int side = 0;
  Nanos ready_at =
      0;  // accepted side: when the handshake's last ACK arrives (then accept takes it)
  // Listening: the connections that arrived, not yet accepted.
  std::deque<std::shared_ptr<Socket>> backlog;
  int backlog_limit = 0;
  // Datagram: connected to `peer` (where a send without an address goes, and the one source a
  // receive takes), and the datagrams that arrived or will, by arrival time (each latency is
  // drawn on its own, so they may arrive out of order, as UDP's do).
  bool peer_set = false;
  struct Datagram {
    std::string bytes;
    sockaddr_in from;
    Nanos due;
  };
  std::deque<Datagram> datagrams;
  CondVar cv;

  Socket() = default;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() {  // (a queued connection's end, dropped with its listener, never closed)
    if (conn != nullptr && conn->end[side] == this) conn->end[side] = nullptr;
  }
};

struct HostState {
  std::string name;
  int fd_limit = 0;
  int open = 0;
  std::uint16_t next_port = kFirstEphemeral;
  std::multimap<std::uint16_t, Socket*> ports;  // bound sockets, by port (each with its address)
};

struct Network::State {
  Mutex mu;
  NetworkOptions options;
  std::vector<HostState> hosts;
  std::map<std::string, std::uint32_t, std::less<>> by_name;
  std::set<std::pair<std::uint32_t, std::uint32_t>> cuts;  // (low, high) host pairs
  std::map<int, std::shared_ptr<Socket>> fds;
  // fd numbers: from fd_base up, the lowest free first, as the kernel gives them. fd_base is
  // drawn from the seed, so that a socket kept past its simulation is unknown (EBADF) in the
  // next simulation rather than the socket there with the same number (but for 1 in 1,024).
  int fd_base = sim_internal::kFdBase;
  int next_fd = sim_internal::kFdBase;
  std::set<int> free_fds;  // below next_fd
  std::uint64_t next_conn = 1;
  std::uint64_t next_serial = 1;
  NetworkStats stats;
  // Datagrams in flight, by arrival time (a multimap keeps the send order of equal times): each
  // settles as it arrives (Settle), against the network as it is then: its partitions, the
  // socket bound at its address, that socket's peer and the room in its queue.
  struct InFlight {
    std::uint32_t from_host = 0, to_host = 0;
    std::uint32_t ip = 0;  // where it goes (host order)
    std::uint16_t port = 0;
    Socket::Datagram d;
  };
  std::multimap<Nanos, InFlight> in_flight;

  State() {
    fd_base = sim_internal::kFdBase +
              static_cast<int>(scheduler_internal::SimRandom() >> 54) * kFdsPerNetwork;
    next_fd = fd_base;
    HostState main;
    main.name = "main";
    main.fd_limit = options.fd_limit;
    hosts.push_back(std::move(main));
    by_name.emplace("main", 0);
  }

  // Key: a host pair as cuts keeps it, the lower id first.
  static std::pair<std::uint32_t, std::uint32_t> Key(std::uint32_t a, std::uint32_t b) {
    return {std::min(a, b), std::max(a, b)};
  }
  bool Cut(std::uint32_t a, std::uint32_t b) const {
    if (a == b || cuts.empty()) return false;
    return cuts.count(Key(a, b)) != 0;
  }
  bool Cut(const Connection& c) const { return Cut(c.host[0], c.host[1]); }

  Nanos Latency() {
    const Nanos lo = options.min_latency.count(), hi = options.max_latency.count();
    if (hi <= lo) return lo;
    return lo + static_cast<Nanos>(scheduler_internal::SimRandom() %
                                   static_cast<std::uint64_t>(hi - lo + 1));
  }
  // Chance: true with probability p, drawn from the simulation's PRNG (no draw for p == 0).
  static bool Chance(double p) {
    if (p <= 0) return false;
    return static_cast<double>(scheduler_internal::SimRandom() >> 11) * 0x1.0p-53 < p;
  }

  std::shared_ptr<Socket> Find(int fd) const {
    auto it = fds.find(fd);
    return it == fds.end() ? nullptr : it->second;
  }

  static void Wake(Socket* s) {
    if (s != nullptr) s->cv.broadcast();
  }

  // Reset: the connection fails at both ends. Bytes in flight are lost; bytes that have arrived
  // stay readable, and the reader gets ECONNRESET after them (as from Linux's receive queue).
  void Reset(Connection& c) {
    if (c.error != 0) return;
    c.error = ECONNRESET;
    const Nanos now = Now();
    for (Direction& d : c.dir) {
      while (!d.segments.empty() && (d.segments.back().held || d.segments.back().due > now)) {
        d.unread -= d.segments.back().bytes.size() - d.segments.back().offset;
        d.segments.pop_back();
      }
      d.fin = false;
    }
    ++stats.resets;
    scheduler_internal::SimRecordEvent("net.reset", c.id, c.host[0], c.host[1]);
    Wake(c.end[0]);
    Wake(c.end[1]);
  }

  // Allocate: the lowest free fd (-1: all kFdsPerNetwork are open).
  int Allocate() {
    if (!free_fds.empty()) {
      const int fd = *free_fds.begin();
      free_fds.erase(free_fds.begin());
      return fd;
    }
    if (next_fd - fd_base >= kFdsPerNetwork) return -1;
    return next_fd++;
  }
  void Free(int fd) {
    try {
      free_fds.insert(fd);
    } catch (const std::bad_alloc&) {  // the number is not reused; the others still are
    }
  }

  // HostsNamed: the hosts a and b, in that order (ENOENT for a name no host has; EINVAL for one
  // host twice unless same_ok).
  Result<std::pair<std::uint32_t, std::uint32_t>> HostsNamed(std::string_view a, std::string_view b,
                                                             bool same_ok) const {
    Result<std::uint32_t> x = HostNamed(a), y = HostNamed(b);
    if (!x.ok()) return x.error();
    if (!y.ok()) return y.error();
    if (*x == *y && !same_ok) return std::errc::invalid_argument;
    return std::pair{*x, *y};
  }

  Result<std::uint32_t> HostNamed(std::string_view name) const {
    auto it = by_name.find(Lower(name));
    if (it == by_name.end()) return std::errc::no_such_file_or_directory;
    return it->second;
  }

  Result<std::uint32_t> MakeHost(std::string_view name) {
    if (auto it = by_name.find(Lower(name)); it != by_name.end()) return it->second;
    if (name.empty() || name.size() > 64) return std::errc::invalid_argument;
    bool numeric = true;
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.';
      if (!ok) return std::errc::invalid_argument;
      if (!((c >= '0' && c <= '9') || c == '.')) numeric = false;
    }
    if (numeric || Lower(name) == "localhost") return std::errc::invalid_argument;
    if (hosts.size() >= kMaxHosts) return std::errc::no_space_on_device;
    const auto id = static_cast<std::uint32_t>(hosts.size());
    HostState h;
    h.name = std::string(name);
    h.fd_limit = options.fd_limit;
    hosts.push_back(std::move(h));
    by_name.emplace(Lower(name), id);
    ++stats.hosts;
    scheduler_internal::SimRecordEvent("net.host", id, 0, 0);
    return id;
  }

  Host Describe(std::uint32_t id) const {
    Host h;
    h.id = id;
    h.name = hosts[id].name;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(AddressOf(id));
    h.address = *net::SocketAddress::from_sockaddr(reinterpret_cast<const sockaddr*>(&a), sizeof a);
    return h;
  }

  // HostOfAddress: the host an IPv4 address (host order) names, from host `from`.
  Result<std::uint32_t> HostOfAddress(std::uint32_t addr, std::uint32_t from) const {
    if ((addr >> 24) == 127 || addr == 0) return from;  // (0.0.0.0: this host, as Linux)
    if ((addr >> 16) == (10u << 8)) {
      const std::uint32_t n = addr & 0xffff;
      if (n >= 1 && n - 1 < hosts.size()) return n - 1;
    }
    return std::errc::host_unreachable;
  }

  // EphemeralPort: a port no socket of the host has bound; none left: EADDRINUSE (a bind's
  // error; a connect reports EADDRNOTAVAIL, as Linux).
  static Result<std::uint16_t> EphemeralPort(HostState& h) {
    for (int tries = 0; tries < 65536 - kFirstEphemeral; ++tries) {
      std::uint16_t p = h.next_port;
      h.next_port = h.next_port == 65535 ? kFirstEphemeral : static_cast<std::uint16_t>(p + 1);
      if (h.ports.count(p) == 0) return p;
    }
    return std::errc::address_in_use;
  }

  // PortTaken: a socket of the host, of the same protocol (TCP and UDP ports are apart), is bound
  // to port on an address that overlaps ip (either one INADDR_ANY, or both the same).
  static bool PortTaken(const HostState& h, std::uint16_t port, std::uint32_t ip, bool datagram) {
    auto [b, e] = h.ports.equal_range(port);
    for (auto it = b; it != e; ++it) {
      const Socket* o = it->second;
      if ((o->kind == Socket::Kind::kDatagram) != datagram) continue;
      if (ip == 0 || o->bound_ip == 0 || o->bound_ip == ip) return true;
    }
    return false;
  }

  // Settle: the datagrams in flight that have arrived by now go to their sockets, or are dropped
  // (a partition between the hosts, no socket bound there, a peer that is not the sender, a
  // full queue). Every call on the network's sockets, and every change of its partitions, first
  // settles what arrived before it, so that each datagram meets the network as it was when it
  // arrived.
  void Settle() {
    const Nanos now = Now();
    while (!in_flight.empty() && in_flight.begin()->first <= now) {
      InFlight f = std::move(in_flight.begin()->second);
      in_flight.erase(in_flight.begin());
      Socket* r =
          Cut(f.from_host, f.to_host) ? nullptr : DatagramSocketFor(hosts[f.to_host], f.ip, f.port);
      if (r != nullptr && r->peer_set &&
          (r->peer.sin_addr.s_addr != f.d.from.sin_addr.s_addr ||
           r->peer.sin_port != f.d.from.sin_port)) {
        r = nullptr;  // a connected socket takes only its peer's
      }
      if (r != nullptr && r->datagrams.size() >= kMaxQueuedDatagrams) r = nullptr;
      const std::uint64_t n = f.d.bytes.size();
      if (r == nullptr) {
        ++stats.datagrams_dropped;
        scheduler_internal::SimRecordEvent("net.udp.drop", f.from_host, f.to_host, n);
        continue;
      }
      scheduler_internal::SimRecordEvent("net.udp.arrive", f.from_host, f.to_host, n);
      try {
        r->datagrams.push_back(std::move(f.d));
      } catch (const std::bad_alloc&) {
        ++stats.datagrams_dropped;  // no memory for it: lost, as a full queue loses it
        continue;
      }
      Wake(r);
    }
  }
  // NextArrival: when the next datagram in flight to `port` on host `to` (at bound_ip, unless
  // INADDR_ANY) arrives, if one is: a receiver's wait.
  std::optional<Nanos> NextArrival(std::uint32_t to, std::uint32_t bound_ip,
                                   std::uint16_t port) const {
    for (const auto& [due, f] : in_flight) {
      if (f.to_host == to && f.port == port && (bound_ip == 0 || f.ip == bound_ip)) return due;
    }
    return std::nullopt;
  }

  // DatagramSocketFor: the host's datagram socket that a datagram to ip:port reaches (bound to
  // that address or to INADDR_ANY), or null.
  static Socket* DatagramSocketFor(const HostState& h, std::uint32_t ip, std::uint16_t port) {
    auto [b, e] = h.ports.equal_range(port);
    for (auto it = b; it != e; ++it) {
      Socket* d = it->second;
      if (d->kind == Socket::Kind::kDatagram && (d->bound_ip == 0 || d->bound_ip == ip)) return d;
    }
    return nullptr;
  }

  // ListenerFor: the host's listener that a SYN to ip:port reaches (bound to that address or to
  // INADDR_ANY), or null.
  static Socket* ListenerFor(const HostState& h, std::uint32_t ip, std::uint16_t port) {
    auto [b, e] = h.ports.equal_range(port);
    for (auto it = b; it != e; ++it) {
      Socket* l = it->second;
      if (l->kind == Socket::Kind::kListening && (l->bound_ip == 0 || l->bound_ip == ip)) return l;
    }
    return nullptr;
  }

  static void Unbind(HostState& h, Socket* s) {
    auto [b, e] = h.ports.equal_range(ntohs(s->local.sin_port));
    for (auto it = b; it != e; ++it) {
      if (it->second == s) {
        h.ports.erase(it);
        return;
      }
    }
  }

  // Between: the connections between hosts x and y (either way; x == y: loopback ones), each
  // once, in the order of their sockets' fds (then of listeners' backlogs): deterministic.
  std::vector<Connection*> Between(std::uint32_t x, std::uint32_t y) const {
    std::vector<Connection*> out;
    std::set<Connection*> seen;
    auto consider = [&](Connection* c) {
      if (c == nullptr || !seen.insert(c).second) return;
      if ((c->host[0] == x && c->host[1] == y) || (c->host[0] == y && c->host[1] == x)) {
        out.push_back(c);
      }
    };
    for (const auto& [fd, s] : fds) {
      consider(s->conn.get());
      for (const auto& q : s->backlog) consider(q->conn.get());
    }
    return out;
  }

  Result<int> Install(const std::shared_ptr<Socket>& s) {
    HostState& h = hosts[s->host];
    if (h.open >= h.fd_limit) {
      ++stats.emfile;
      return std::errc::too_many_files_open;
    }
    s->fd = Allocate();
    if (s->fd < 0) return std::errc::too_many_files_open_in_system;
    s->serial = next_serial++;
    try {
      fds.emplace(s->fd, s);
    } catch (const std::bad_alloc&) {
      Free(s->fd);
      return std::errc::not_enough_memory;
    }
    ++h.open;
    return s->fd;
  }
};

namespace {

// Locked: the network's mutex, held for a call's duration (CondVar waits let it go).
class Locked {
 public:
  explicit Locked(Network::State& st) : st_(st) { (void)st_.mu.lock({}); }
  ~Locked() { (void)st_.mu.unlock(); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  Network::State& st_;
};

Network::State* TheState() {
  Network* n = Network::current();
  return n != nullptr ? &n->state() : nullptr;
}

std::errc Errc(int e) { return static_cast<std::errc>(e); }

// Waiting: each blocking call's loop: check its condition, then Wait until woken or `due`.
// Wait returns an error to end the call with (the call's own deadline or cancellation), or
// success to check again.
Result<void> Wait(Network::State& st, Socket& s, const WaitOptions& options,
                  std::optional<Nanos> due) {
  if (options.deadline && *options.deadline <= SyncClock::now()) return std::errc::timed_out;
  WaitOptions w = options;
  if (due) {
    const SyncClock::time_point at{SyncClock::duration(*due)};
    if (!w.deadline || at < *w.deadline) w.deadline = at;
  }
  Result<void> r = s.cv.wait(st.mu, w);
  if (!r.ok() && r.error() == std::errc::timed_out) return {};  // the loop checks its deadline
  return r;
}

bool Cancelled(const WaitOptions& options) {
  return options.cancel != nullptr && options.cancel->is_cancelled();
}

void ToSockaddr(const sockaddr_in& in, sockaddr* addr, socklen_t* len) {
  if (addr == nullptr || len == nullptr) return;
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(*len), sizeof in);
  std::memcpy(addr, &in, n);
  *len = sizeof in;
}

sockaddr_in Inet(std::uint32_t host_order_addr, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host_order_addr);
  a.sin_port = htons(port);
  return a;
}

std::size_t TotalLength(const IoVec* iov, int iovcnt) {
  std::size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

bool BadVectors(const IoVec* iov, int iovcnt) {
  if (iovcnt < 0 || iovcnt > 1024 || (iovcnt > 0 && iov == nullptr)) return true;
  std::size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) {
    if (BadIoRequest(iov[i].iov_base, iov[i].iov_len)) return true;
    total += iov[i].iov_len;
    if (total > kMaxIoRequest) return true;
  }
  return false;
}

}  // namespace

// ---- Network --------------------------------------------------------------------------------

Network::Network(std::unique_ptr<State> state) : state_(std::move(state)) {}
Network::~Network() = default;

Network* Network::current() {
  std::shared_ptr<void>* slot = scheduler_internal::SimNetworkSlot();
  if (slot == nullptr) return nullptr;
  if (*slot == nullptr) {
    try {
      *slot = std::make_shared<Network>(std::make_unique<State>());
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  return static_cast<Network*>(slot->get());
}

Result<void> Network::configure(const NetworkOptions& o) {
  // (The bounds keep every sum of virtual times far from overflow.)
  if (o.min_latency.count() < 0 || o.max_latency < o.min_latency || o.max_latency > kMaxLatency ||
      o.retransmit.count() < 0 || o.retransmit > kMaxLatency || !(o.loss >= 0 && o.loss <= 1) ||
      !(o.reset >= 0 && o.reset <= 1) || o.window == 0 || o.window > kMaxWindow ||
      o.connect_timeout.count() < 0 || o.connect_timeout > kMaxConnectTimeout || o.fd_limit < 1) {
    return std::errc::invalid_argument;
  }
  Locked lock(*state_);
  state_->options = o;
  for (auto& [fd, s] : state_->fds) State::Wake(s.get());  // a wider window lets senders on
  return {};
}

NetworkOptions Network::options() const {
  Locked lock(*state_);
  return state_->options;
}

Result<Host> Network::host(std::string_view name) {
  Locked lock(*state_);
  Result<std::uint32_t> id = state_->MakeHost(name);
  if (!id.ok()) return id.error();
  return state_->Describe(*id);
}

Result<void> Network::enter(std::string_view name) {
  Locked lock(*state_);
  Result<std::uint32_t> id = state_->MakeHost(name);
  if (!id.ok()) return id.error();
  scheduler_internal::SetSimHost(*id);
  return {};
}

Host Network::current_host() {
  Locked lock(*state_);
  std::uint32_t id = scheduler_internal::SimHost();
  if (id >= state_->hosts.size()) id = 0;
  return state_->Describe(id);
}

Result<void> Network::partition(std::string_view a, std::string_view b) {
  Locked lock(*state_);
  state_->Settle();  // datagrams that arrived before the cut
  Result<std::pair<std::uint32_t, std::uint32_t>> hosts = state_->HostsNamed(a, b, false);
  if (!hosts.ok()) return hosts.error();
  const auto [x, y] = *hosts;
  try {
    if (!state_->cuts.insert(State::Key(x, y)).second) return {};
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  scheduler_internal::SimRecordEvent("net.partition", x, y, 0);
  // What is in flight between them now waits for the heal; what has arrived stays readable.
  const Nanos now = Now();
  for (Connection* c : state_->Between(x, y)) {
    for (Direction& d : c->dir) {
      for (Segment& seg : d.segments) seg.held = seg.held || seg.due > now;
      d.fin_held = d.fin_held || (d.fin && d.fin_due > now);
    }
  }
  return {};
}

namespace {
// Healed: the segments (and FIN) a partition between x and y held leave now: each direction's
// arrive one latency later, in order (a retransmission of the window, not one by one). A peer
// that closed meanwhile answers what it is sent with a reset. Every socket wakes to re-check.
void Healed(Network::State& st, std::uint32_t x, std::uint32_t y) {
  const Nanos now = Now();
  for (Connection* cp : st.Between(x, y)) {
    Connection& c = *cp;
    for (Direction& d : c.dir) {
      const Nanos arrive = now + st.Latency();
      Nanos floor = 0;  // the previous segment's arrival: order is kept
      for (Segment& seg : d.segments) {
        if (seg.held) {
          seg.due = std::max(arrive, floor);
          seg.held = false;
        }
        floor = std::max(floor, seg.due);
      }
      d.last_due = std::max(d.last_due, floor);
      if (d.fin_held) {
        d.fin_due = std::max(arrive, d.last_due);
        d.fin_held = false;
      }
    }
    for (int k = 0; k < 2; ++k) {
      if (c.end[k] == nullptr && c.dir[1 - k].unread > 0) st.Reset(c);
    }
  }
  // Every socket re-checks (a listener too: a connect's retry is its own timer).
  for (auto& [fd, s] : st.fds) Network::State::Wake(s.get());
}
}  // namespace

Result<void> Network::heal(std::string_view a, std::string_view b) {
  Locked lock(*state_);
  state_->Settle();  // datagrams that arrived, or were cut off, before the heal
  Result<std::pair<std::uint32_t, std::uint32_t>> hosts = state_->HostsNamed(a, b, false);
  if (!hosts.ok()) return hosts.error();
  const auto [x, y] = *hosts;
  if (state_->cuts.erase(State::Key(x, y)) != 0) {
    scheduler_internal::SimRecordEvent("net.heal", x, y, 0);
    Healed(*state_, x, y);
  }
  return {};
}

void Network::heal_all() {
  Locked lock(*state_);
  state_->Settle();
  auto cuts = std::move(state_->cuts);
  state_->cuts.clear();
  for (auto [x, y] : cuts) {
    scheduler_internal::SimRecordEvent("net.heal", x, y, 0);
    Healed(*state_, x, y);
  }
}

Result<std::size_t> Network::reset(std::string_view a, std::string_view b) {
  Locked lock(*state_);
  Result<std::pair<std::uint32_t, std::uint32_t>> hosts = state_->HostsNamed(a, b, true);
  if (!hosts.ok()) return hosts.error();
  std::size_t n = 0;
  for (Connection* c :
       state_->Between(hosts->first, hosts->second)) {  // (queued, not yet accepted, ones too)
    if (c->error == 0) {
      state_->Reset(*c);
      ++n;
    }
  }
  return n;
}

Result<void> Network::set_fd_limit(std::string_view host, int limit) {
  if (limit < 1) return std::errc::invalid_argument;
  Locked lock(*state_);
  Result<std::uint32_t> id = state_->HostNamed(host);
  if (!id.ok()) return id.error();
  state_->hosts[*id].fd_limit = limit;
  return {};
}

Result<int> Network::open_fds(std::string_view host) {
  Locked lock(*state_);
  Result<std::uint32_t> id = state_->HostNamed(host);
  if (!id.ok()) return id.error();
  return state_->hosts[*id].open;
}

NetworkStats Network::stats() const {
  Locked lock(*state_);
  NetworkStats s = state_->stats;
  s.hosts = state_->hosts.size();
  return s;
}

}  // namespace weft::sim

// ---- The sockets ----------------------------------------------------------------------------

namespace weft::sim_internal {

using sim::Connection;
using sim::Direction;
using sim::Locked;
using sim::Nanos;
using State = sim::Network::State;

namespace {

// Open: the network and the socket for fd, or EBADF.
struct Open {
  State* st = nullptr;
  std::shared_ptr<sim::Socket> s;
};

std::uint32_t CallerHost(const State& st) {
  std::uint32_t id = scheduler_internal::SimHost();
  return id < st.hosts.size() ? id : 0;
}

// SendOne: puts `n` bytes gathered from iov on the connection from end `side`.
void SendOne(State& st, Connection& c, int side, const IoVec* iov, int iovcnt, std::size_t n) {
  Direction& d = c.dir[side];
  sim::Segment seg;
  seg.bytes.reserve(n);
  for (int i = 0; i < iovcnt && seg.bytes.size() < n; ++i) {
    const std::size_t take = std::min(iov[i].iov_len, n - seg.bytes.size());
    seg.bytes.append(static_cast<const char*>(iov[i].iov_base), take);
  }
  const Nanos now = sim::Now();
  Nanos due = now + st.Latency();
  const bool lost = State::Chance(st.options.loss);
  if (lost) {
    due += st.options.retransmit.count();
    ++st.stats.lost;
  }
  due = std::max(due, d.last_due);
  seg.due = due;
  seg.held = st.Cut(c);  // until the heal, which sets its time again
  d.last_due = due;
  d.unread += n;
  d.segments.push_back(std::move(seg));
  ++st.stats.segments;
  st.stats.bytes += n;
  scheduler_internal::SimRecordEvent(lost ? "net.send.lost" : "net.send", c.id,
                                     static_cast<std::uint64_t>(side), n);
  if (State::Chance(st.options.reset)) {
    st.Reset(c);
    return;
  }
  if (c.end[1 - side] == nullptr) {
    // The peer closed: it answers with a reset (across a partition, once it heals).
    if (!st.Cut(c)) st.Reset(c);
    return;
  }
  State::Wake(c.end[1 - side]);
}

// SendFin: end `side` stops writing (a shutdown, or a close): a FIN after the bytes it sent,
// held as they are by a partition; the peer wakes to see it.
void SendFin(State& st, Connection& c, int side, bool closed) {
  Direction& out = c.dir[side];
  out.fin = true;
  out.fin_due = std::max(out.last_due, sim::Now() + st.Latency());
  out.fin_held = st.Cut(c);
  out.last_due = out.fin_due;
  scheduler_internal::SimRecordEvent("net.fin", c.id, static_cast<std::uint64_t>(side),
                                     closed ? 1 : 0);
  State::Wake(c.end[1 - side]);
}

// Readable: bytes that have arrived for the socket, or its end of stream.
struct Arrival {
  std::size_t bytes = 0;      // bytes arrived and unread
  bool eof = false;           // the FIN arrived after them
  std::optional<Nanos> next;  // when the next thing will arrive (for a wait)
};

Arrival Arrived(const State& st, const sim::Socket& s) {
  Arrival a;
  const Connection& c = *s.conn;
  const Direction& in = c.dir[1 - s.side];
  const Nanos now = sim::Now();
  for (const sim::Segment& seg : in.segments) {
    if (seg.held) return a;  // a heal sets its time and wakes the reader
    if (seg.due > now) {
      a.next = seg.due;
      return a;
    }
    a.bytes += seg.bytes.size() - seg.offset;
  }
  if (in.fin && !in.fin_held) {
    if (in.fin_due <= now) {
      a.eof = true;
    } else {
      a.next = in.fin_due;
    }
  }
  return a;
}

bool DontWait(int flags) { return (flags & sim_internal::kSimDontWait) != 0; }

// AutoBind: a datagram socket that sends or connects unbound gets an ephemeral port, as on
// Linux.
Result<void> AutoBind(State& st, sim::Socket& s) {
  if (s.bound) return {};
  sim::HostState& h = st.hosts[s.host];
  Result<std::uint16_t> p = State::EphemeralPort(h);
  if (!p.ok()) return p.error();
  try {
    h.ports.emplace(*p, &s);
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  s.bound = true;
  s.local = sim::Inet(INADDR_ANY, *p);
  return {};
}

// Destination: a datagram's or a connect's IPv4 address (0.0.0.0: this host's loopback, as
// Linux takes it).
Result<sockaddr_in> Destination(const sockaddr* addr, socklen_t len) {
  if (addr == nullptr || len < static_cast<socklen_t>(sizeof(sockaddr_in))) {
    return std::errc::invalid_argument;
  }
  if (addr->sa_family != AF_INET) return std::errc::address_family_not_supported;
  sockaddr_in to;
  std::memcpy(&to, addr, sizeof to);
  if (ntohl(to.sin_addr.s_addr) == INADDR_ANY) to.sin_addr.s_addr = htonl(sim::kLoopback);
  return to;
}

// SourceFor: the address an unbound socket of `host` sends from to `to_ip` (host order), as
// Linux's routing picks it: loopback to loopback, else the host's own.
std::uint32_t SourceFor(std::uint32_t to_ip, std::uint32_t host) {
  return (to_ip >> 24) == 127 ? to_ip : sim::AddressOf(host);
}

// VectorsOf: a MsgHdr's buffers as BadVectors takes them (EINVAL past 1,024).
Result<int> VectorsOf(const MsgHdr* msg) {
  if (msg == nullptr || msg->msg_iovlen > 1024) return std::errc::invalid_argument;
  const int n = static_cast<int>(msg->msg_iovlen);
  if (sim::BadVectors(msg->msg_iov, n)) return std::errc::invalid_argument;
  return n;
}

}  // namespace

// The calls below start with Find: the network (of this thread's simulation) and the socket.
// WEFT_SIM_OPEN_AS: the socket with that serial (see Socket::serial), if not 0; when the number
// no longer names it, it was closed: operation_canceled, as for a call under way at the close.
#define WEFT_SIM_OPEN_AS(fd, want)                            \
  State* st = sim::TheState();                                \
  if (st == nullptr) return std::errc::bad_file_descriptor;   \
  Locked lock(*st);                                           \
  st->Settle();                                               \
  std::shared_ptr<sim::Socket> s = st->Find(fd);              \
  if ((want) != 0 && (s == nullptr || s->serial != (want))) { \
    return std::errc::operation_canceled;                     \
  }                                                           \
  if (s == nullptr) return std::errc::bad_file_descriptor
#define WEFT_SIM_OPEN(fd) WEFT_SIM_OPEN_AS(fd, 0)

Result<int> Socket(int family, int type) {
  State* st = sim::TheState();
  if (st == nullptr) return std::errc::not_supported;
  if (family != AF_INET) return std::errc::address_family_not_supported;
  if (type != SOCK_STREAM && type != SOCK_DGRAM) return std::errc::not_supported;
  Locked lock(*st);
  std::shared_ptr<sim::Socket> s;
  try {
    s = std::make_shared<sim::Socket>();
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  s->host = CallerHost(*st);
  if (type == SOCK_DGRAM) s->kind = sim::Socket::Kind::kDatagram;
  return st->Install(s);
}

Result<void> Bind(int fd, const sockaddr* addr, socklen_t len) {
  WEFT_SIM_OPEN(fd);
  if (addr == nullptr || len < static_cast<socklen_t>(sizeof(sockaddr_in)) ||
      addr->sa_family != AF_INET) {
    return std::errc::invalid_argument;
  }
  if (s->bound ||
      (s->kind != sim::Socket::Kind::kFresh && s->kind != sim::Socket::Kind::kDatagram)) {
    return std::errc::invalid_argument;
  }
  sockaddr_in in;
  std::memcpy(&in, addr, sizeof in);
  const std::uint32_t ip = ntohl(in.sin_addr.s_addr);
  if (ip != INADDR_ANY && (ip >> 24) != 127 && ip != sim::AddressOf(s->host)) {
    return std::errc::address_not_available;  // not an address of this host
  }
  sim::HostState& h = st->hosts[s->host];
  std::uint16_t port = ntohs(in.sin_port);
  if (port == 0) {
    Result<std::uint16_t> p = State::EphemeralPort(h);
    if (!p.ok()) return p.error();
    port = *p;
  } else if (State::PortTaken(h, port, ip, s->kind == sim::Socket::Kind::kDatagram)) {
    return std::errc::address_in_use;
  }
  h.ports.emplace(port, s.get());
  s->bound = true;
  s->bound_ip = ip;
  s->local = sim::Inet(ip, port);  // 0.0.0.0 for INADDR_ANY, as getsockname says
  return {};
}

Result<void> Listen(int fd, int backlog) {
  WEFT_SIM_OPEN(fd);
  if (s->kind == sim::Socket::Kind::kDatagram) return std::errc::operation_not_supported;
  if (s->kind == sim::Socket::Kind::kConnected) return std::errc::invalid_argument;
  if (!s->bound) {  // as Linux: an unbound socket that listens gets a port
    sim::HostState& h = st->hosts[s->host];
    Result<std::uint16_t> p = State::EphemeralPort(h);
    if (!p.ok()) return p.error();
    h.ports.emplace(*p, s.get());
    s->bound = true;
    s->local = sim::Inet(INADDR_ANY, *p);
  }
  s->kind = sim::Socket::Kind::kListening;
  s->backlog_limit = std::clamp(backlog, 1, sim::kMaxBacklog);
  return {};
}

Result<int> Accept(int fd, sockaddr* addr, socklen_t* addrlen, const WaitOptions& options,
                   std::uint64_t serial) {
  if (BadAcceptAddress(addr, addrlen)) return std::errc::invalid_argument;
  WEFT_SIM_OPEN_AS(fd, serial);
  if (s->kind == sim::Socket::Kind::kDatagram) return std::errc::operation_not_supported;
  if (sim::Cancelled(options)) return std::errc::operation_canceled;
  for (;;) {
    if (s->closed) return std::errc::operation_canceled;
    if (s->kind != sim::Socket::Kind::kListening) return std::errc::invalid_argument;
    std::optional<Nanos> due;
    if (!s->backlog.empty()) {
      std::shared_ptr<sim::Socket> q = s->backlog.front();
      if (q->conn->aborted) {  // its connecting end closed mid-handshake
        s->backlog.pop_front();
        continue;
      }
      if (q->ready_at <= sim::Now()) {
        Result<int> nfd = st->Install(q);
        if (!nfd.ok()) return nfd.error();  // EMFILE: it stays queued
        s->backlog.pop_front();
        sim::ToSockaddr(q->peer, addr, addrlen);
        scheduler_internal::SimRecordEvent("net.accept", q->conn->id, q->host, 0);
        return *nfd;
      }
      due = q->ready_at;
    }
    if (Result<void> w = sim::Wait(*st, *s, options, due); !w.ok()) return w.error();
  }
}

Result<void> Connect(int fd, const sockaddr* addr, socklen_t len, const WaitOptions& options,
                     std::uint64_t serial) {
  WEFT_SIM_OPEN_AS(fd, serial);
  if (s->kind == sim::Socket::Kind::kDatagram) {  // records the peer; never waits
    Result<sockaddr_in> to = Destination(addr, len);
    if (!to.ok()) return to.error();
    Result<std::uint32_t> target = st->HostOfAddress(ntohl(to->sin_addr.s_addr), s->host);
    if (!target.ok()) return target.error();
    if (Result<void> b = AutoBind(*st, *s); !b.ok()) return b.error();
    if (s->bound_ip == 0) {  // its address is now the one its datagrams leave from, as Linux's
      const std::uint32_t ip = ntohl(to->sin_addr.s_addr);
      s->bound_ip = SourceFor(ip, s->host);
      s->local.sin_addr.s_addr = htonl(s->bound_ip);
    }
    s->peer = *to;
    s->peer_set = true;
    return {};
  }
  Result<sockaddr_in> dest = Destination(addr, len);
  if (!dest.ok()) return dest.error();
  if (s->kind == sim::Socket::Kind::kConnected) return std::errc::already_connected;
  if (s->kind == sim::Socket::Kind::kListening) return std::errc::invalid_argument;
  if (sim::Cancelled(options)) return std::errc::operation_canceled;
  const sockaddr_in to = *dest;
  const std::uint32_t ip = ntohl(to.sin_addr.s_addr);
  const std::uint16_t port = ntohs(to.sin_port);
  Result<std::uint32_t> target = st->HostOfAddress(ip, s->host);
  if (!target.ok()) return target.error();
  if (port == 0) return std::errc::connection_refused;
  const Nanos start = sim::Now();
  Nanos retry = std::chrono::nanoseconds(std::chrono::seconds(1)).count();
  Nanos next_try = start;
  for (;;) {
    if (s->closed) return std::errc::operation_canceled;
    if (s->kind == sim::Socket::Kind::kConnected) return std::errc::already_connected;
    const Nanos now = sim::Now();
    if (now >= next_try) {
      if (!st->Cut(s->host, *target)) {
        sim::Socket* listener = State::ListenerFor(st->hosts[*target], ip, port);
        if (listener == nullptr) {
          // A RST answers the SYN: refused, a round trip later.
          const Nanos back = now + st->Latency() + st->Latency();
          ++st->stats.refused;
          scheduler_internal::SimRecordEvent("net.refused", s->host, *target, port);
          while (sim::Now() < back) {
            if (s->closed) return std::errc::operation_canceled;
            if (Result<void> w = sim::Wait(*st, *s, options, back); !w.ok()) return w.error();
          }
          return std::errc::connection_refused;
        }
        if (static_cast<int>(listener->backlog.size()) < listener->backlog_limit) {
          // The SYN arrives: the connection is queued at the listener; the SYN-ACK comes back.
          std::shared_ptr<Connection> c;
          std::shared_ptr<sim::Socket> server;
          try {
            c = std::make_shared<Connection>();
            server = std::make_shared<sim::Socket>();
            listener->backlog.push_back(server);
          } catch (const std::bad_alloc&) {
            return std::errc::not_enough_memory;
          }
          c->id = st->next_conn++;
          c->host[0] = s->host;
          c->host[1] = *target;
          c->end[0] = s.get();
          if (!s->bound) {
            sim::HostState& h = st->hosts[s->host];
            Result<std::uint16_t> p = State::EphemeralPort(h);
            if (!p.ok()) {
              listener->backlog.pop_back();
              return std::errc::address_not_available;  // as Linux, out of ephemeral ports
            }
            h.ports.emplace(*p, s.get());
            s->bound = true;
            s->bound_ip = SourceFor(ip, s->host);
            s->local = sim::Inet(s->bound_ip, *p);
          }
          s->peer = to;
          s->conn = c;
          s->side = 0;
          s->kind = sim::Socket::Kind::kConnected;
          // The handshake: SYN, SYN-ACK (the connect returns), ACK (accept may take it).
          const Nanos syn = st->Latency(), syn_ack = st->Latency(), ack = st->Latency();
          server->kind = sim::Socket::Kind::kConnected;
          server->host = *target;
          server->conn = c;
          server->side = 1;
          server->local = to;
          server->peer = s->local;
          server->ready_at = now + syn + syn_ack + ack;
          c->end[1] = server.get();
          ++st->stats.connections;
          scheduler_internal::SimRecordEvent("net.connect", c->id, s->host, *target);
          State::Wake(listener);
          const Nanos established = now + syn + syn_ack;
          c->established_at = established;
          while (sim::Now() < established) {
            if (s->closed) return std::errc::operation_canceled;
            if (Result<void> w = sim::Wait(*st, *s, options, established); !w.ok()) {
              return w.error();
            }
          }
          if (c->error != 0) {
            s->reset_seen = true;
            return sim::Errc(c->error);
          }
          return {};
        }
      }
      // No answer (a partition, or a full backlog): the SYN is sent again later.
      if (now - start >= st->options.connect_timeout.count()) {
        ++st->stats.timed_out;
        return std::errc::timed_out;
      }
      next_try = std::min(now + retry, start + st->options.connect_timeout.count());
      retry *= 2;
    }
    if (Result<void> w = sim::Wait(*st, *s, options, next_try); !w.ok()) return w.error();
  }
}

namespace {
// SendDatagram / RecvDatagram: SendMsg and RecvMsg on an open datagram socket, under the
// network's lock (the stream calls on a UDP socket come here too: read, write, recv, send).
Result<std::size_t> SendDatagram(State& st, sim::Socket& s, const MsgHdr* msg, int iovcnt,
                                 const WaitOptions& options) {
  if (sim::Cancelled(options) || s.closed) return std::errc::operation_canceled;
  sockaddr_in to;
  if (msg->msg_name != nullptr) {
    Result<sockaddr_in> d = Destination(static_cast<const sockaddr*>(msg->msg_name),
                                        static_cast<socklen_t>(msg->msg_namelen));
    if (!d.ok()) return d.error();
    to = *d;
    if (to.sin_port == 0) return std::errc::invalid_argument;  // as Linux
  } else if (s.peer_set) {
    to = s.peer;
  } else {
    return std::errc::destination_address_required;
  }
  const std::size_t n = sim::TotalLength(msg->msg_iov, iovcnt);
  if (n > sim::kMaxDatagram) return std::errc::message_size;
  const std::uint32_t ip = ntohl(to.sin_addr.s_addr);
  Result<std::uint32_t> target = st.HostOfAddress(ip, s.host);
  if (s.bound_ip != 0 && (s.bound_ip >> 24) == 127 && target.ok() && *target != s.host) {
    return std::errc::invalid_argument;  // a loopback socket cannot reach another host (Linux)
  }
  if (Result<void> b = AutoBind(st, s); !b.ok()) return b.error();
  // Its source: the address it is bound to, else the one its host routes from (SourceFor).
  const std::uint32_t from_ip = s.bound_ip != 0 ? s.bound_ip : SourceFor(ip, s.host);
  State::InFlight f;
  f.d.from = sim::Inet(from_ip, ntohs(s.local.sin_port));
  ++st.stats.datagrams;
  // Lost on the way (UDP sends nothing again) or to an address no host has: dropped now. The
  // rest settle as they arrive (State::Settle).
  if (!target.ok() || State::Chance(st.options.loss)) {
    ++st.stats.datagrams_dropped;
    scheduler_internal::SimRecordEvent("net.udp.lost", s.host, ip, n);
    return n;
  }
  try {
    f.d.bytes.reserve(n);
    for (int i = 0; i < iovcnt; ++i) {
      f.d.bytes.append(static_cast<const char*>(msg->msg_iov[i].iov_base), msg->msg_iov[i].iov_len);
    }
    f.from_host = s.host;
    f.to_host = *target;
    f.ip = ip;
    f.port = ntohs(to.sin_port);
    f.d.due = sim::Now() + st.Latency();
    const Nanos due = f.d.due;
    st.in_flight.emplace(due, std::move(f));
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  scheduler_internal::SimRecordEvent("net.udp.send", s.host, ip, n);
  // A receiver waiting there now looks at when this one arrives.
  State::Wake(State::DatagramSocketFor(st.hosts[*target], ip, ntohs(to.sin_port)));
  return n;
}

Result<std::size_t> RecvDatagram(State& st, sim::Socket& s, MsgHdr* msg, int iovcnt, int flags,
                                 const WaitOptions& options) {
  if (sim::Cancelled(options)) return std::errc::operation_canceled;
  const bool peek = (flags & MSG_PEEK) != 0;
  for (;;) {
    if (s.closed) return std::errc::operation_canceled;
    st.Settle();
    if (!s.datagrams.empty()) {
      sim::Socket::Datagram& d = s.datagrams.front();
      std::size_t done = 0;
      for (int i = 0; i < iovcnt && done < d.bytes.size(); ++i) {
        const std::size_t take = std::min(msg->msg_iov[i].iov_len, d.bytes.size() - done);
        std::memcpy(msg->msg_iov[i].iov_base, d.bytes.data() + done, take);
        done += take;
      }
      msg->msg_flags = done < d.bytes.size() ? kMsgTruncated : 0;  // the rest is lost
      if (msg->msg_name != nullptr) {
        socklen_t len = static_cast<socklen_t>(msg->msg_namelen);
        sim::ToSockaddr(d.from, static_cast<sockaddr*>(msg->msg_name), &len);
        msg->msg_namelen = len;
      }
      if (!peek) s.datagrams.pop_front();
      return done;
    }
    if (DontWait(flags)) return std::errc::resource_unavailable_try_again;
    const std::optional<Nanos> due =
        s.bound ? st.NextArrival(s.host, s.bound_ip, ntohs(s.local.sin_port)) : std::nullopt;
    if (Result<void> w = sim::Wait(st, s, options, due); !w.ok()) return w.error();
  }
}

// OneMessage: a MsgHdr without an address over a stream call's buffers.
MsgHdr OneMessage(const IoVec* iov, int iovcnt) {
  MsgHdr m{};
  m.msg_iov = const_cast<IoVec*>(iov);
  m.msg_iovlen = static_cast<decltype(m.msg_iovlen)>(iovcnt);
  return m;
}
}  // namespace

Result<std::size_t> Recv(int fd, const IoVec* iov, int iovcnt, int flags,
                         const WaitOptions& options, std::uint64_t serial) {
  if (sim::BadVectors(iov, iovcnt)) return std::errc::invalid_argument;
  WEFT_SIM_OPEN_AS(fd, serial);
  if (s->kind == sim::Socket::Kind::kDatagram) {  // read, recv: the next datagram
    MsgHdr m = OneMessage(iov, iovcnt);
    return RecvDatagram(*st, *s, &m, iovcnt, flags, options);
  }
  if (sim::Cancelled(options)) return std::errc::operation_canceled;
  const std::size_t want = sim::TotalLength(iov, iovcnt);
  const bool dontwait = DontWait(flags);
  const bool peek = (flags & MSG_PEEK) != 0;
  for (;;) {
    if (s->closed) return std::errc::operation_canceled;
    if (s->kind != sim::Socket::Kind::kConnected) return std::errc::not_connected;
    Connection& c = *s->conn;
    Arrival a = Arrived(*st, *s);
    if (a.bytes == 0) {
      // After the bytes that had arrived: a shut-down read side ends (0); a reset is reported
      // once (ECONNRESET), and then reads end (0), as on Linux.
      if (s->shut_rd) return std::size_t{0};
      if (c.error != 0) {
        if (s->reset_seen) return std::size_t{0};
        s->reset_seen = true;
        return sim::Errc(c.error);
      }
    }
    if (a.bytes > 0 && want == 0) return std::size_t{0};
    if (a.bytes > 0) {
      // Copy what has arrived, in order, into the buffers.
      Direction& in = c.dir[1 - s->side];
      std::size_t done = 0;
      int vi = 0;
      std::size_t voff = 0;
      std::size_t limit = std::min(want, a.bytes);
      for (auto it = in.segments.begin(); done < limit && it != in.segments.end(); ++it) {
        std::size_t off = it->offset;
        while (done < limit && off < it->bytes.size()) {
          while (vi < iovcnt && voff == iov[vi].iov_len) {
            ++vi;
            voff = 0;
          }
          const std::size_t take =
              std::min({it->bytes.size() - off, iov[vi].iov_len - voff, limit - done});
          std::memcpy(static_cast<char*>(iov[vi].iov_base) + voff, it->bytes.data() + off, take);
          off += take;
          voff += take;
          done += take;
        }
      }
      if (!peek) {
        std::size_t left = done;
        while (left > 0) {
          sim::Segment& head = in.segments.front();
          const std::size_t take = std::min(left, head.bytes.size() - head.offset);
          head.offset += take;
          left -= take;
          if (head.offset == head.bytes.size()) in.segments.pop_front();
        }
        in.unread -= done;
        State::Wake(c.end[1 - s->side]);  // room in the sender's window
      }
      return done;
    }
    if (a.eof || want == 0) return std::size_t{0};
    if (dontwait) return std::errc::resource_unavailable_try_again;
    if (Result<void> w = sim::Wait(*st, *s, options, a.next); !w.ok()) return w.error();
  }
}

Result<std::size_t> Send(int fd, const IoVec* iov, int iovcnt, int flags,
                         const WaitOptions& options, std::uint64_t serial) {
  if (sim::BadVectors(iov, iovcnt)) return std::errc::invalid_argument;
  WEFT_SIM_OPEN_AS(fd, serial);
  if (s->kind == sim::Socket::Kind::kDatagram) {  // write, send: one datagram to the peer
    const MsgHdr m = OneMessage(iov, iovcnt);
    return SendDatagram(*st, *s, &m, iovcnt, options);
  }
  const bool dontwait = DontWait(flags);
  if (sim::Cancelled(options)) return std::errc::operation_canceled;
  const std::size_t want = std::min(sim::TotalLength(iov, iovcnt), kMaxIoLength);
  for (;;) {
    if (s->closed) return std::errc::operation_canceled;
    if (s->kind != sim::Socket::Kind::kConnected) return std::errc::not_connected;
    Connection& c = *s->conn;
    if (c.error != 0) {  // reported once as ECONNRESET, then EPIPE
      if (s->reset_seen) return std::errc::broken_pipe;
      s->reset_seen = true;
      return sim::Errc(c.error);
    }
    if (s->shut_wr) return std::errc::broken_pipe;
    if (want == 0) return std::size_t{0};
    Direction& out = c.dir[s->side];
    if (out.unread < st->options.window) {
      const std::size_t n = std::min(want, st->options.window - out.unread);
      try {
        SendOne(*st, c, s->side, iov, iovcnt, n);
      } catch (const std::bad_alloc&) {
        return std::errc::not_enough_memory;
      }
      return n;
    }
    // The window is full: wait for the peer to read (a send that may not wait: EAGAIN).
    if (dontwait) return std::errc::resource_unavailable_try_again;
    if (Result<void> w = sim::Wait(*st, *s, options, std::nullopt); !w.ok()) return w.error();
  }
}

Result<std::uint32_t> Poll(int fd, std::uint32_t events, const WaitOptions& options) {
  WEFT_SIM_OPEN(fd);
  if (sim::Cancelled(options)) return std::errc::operation_canceled;
  for (;;) {
    if (s->closed) return std::errc::operation_canceled;
    st->Settle();  // datagrams that arrived while it waited
    std::uint32_t ready = 0;
    std::optional<Nanos> due;
    if (s->kind == sim::Socket::Kind::kListening) {
      if (!s->backlog.empty()) {
        if (s->backlog.front()->ready_at <= sim::Now()) {
          ready |= POLLIN;
        } else {
          due = s->backlog.front()->ready_at;
        }
      }
    } else if (s->kind == sim::Socket::Kind::kDatagram) {
      ready |= POLLOUT;
      if (!s->datagrams.empty()) {
        ready |= POLLIN;
      } else if (s->bound) {
        due = st->NextArrival(s->host, s->bound_ip, ntohs(s->local.sin_port));
      }
    } else if (s->kind == sim::Socket::Kind::kConnected) {
      Connection& c = *s->conn;
      if (c.error != 0) {
        ready |= POLLERR | POLLHUP | POLLIN | POLLOUT;
      } else {
        Arrival a = Arrived(*st, *s);
        if (a.bytes > 0 || a.eof || s->shut_rd) ready |= POLLIN;
        // Both directions shut (its own shutdown of both, or a FIN each way): hung up.
        if (s->shut_wr && (a.eof || s->shut_rd)) ready |= POLLHUP;
        if (!a.bytes && !a.eof) due = a.next;
        if (s->shut_wr || c.dir[s->side].unread < st->options.window) ready |= POLLOUT;
      }
    } else {
      ready |= POLLOUT | POLLHUP;  // a socket never connected, as Linux reports it
    }
    const std::uint32_t hit = ready & (events | POLLERR | POLLHUP);
    if (hit != 0) return hit;
    if (Result<void> w = sim::Wait(*st, *s, options, due); !w.ok()) return w.error();
  }
}

Result<void> Shutdown(int fd, int how) {
  WEFT_SIM_OPEN(fd);
  if (how < 0 || how > 2) return std::errc::invalid_argument;
  if (s->kind != sim::Socket::Kind::kConnected) return std::errc::not_connected;
  Connection& c = *s->conn;
  if (how != 1 && !s->shut_rd) {  // SHUT_RD, SHUT_RDWR: reads end (0), blocked ones too
    s->shut_rd = true;
    State::Wake(s.get());
  }
  if (how != 0 && !s->shut_wr) {  // SHUT_WR, SHUT_RDWR: a FIN after the bytes sent
    s->shut_wr = true;
    SendFin(*st, c, s->side, /*closed=*/false);
    State::Wake(s.get());
  }
  return {};
}

Result<void> Close(int fd) {
  WEFT_SIM_OPEN(fd);
  st->fds.erase(fd);
  st->Free(fd);
  sim::HostState& h = st->hosts[s->host];
  --h.open;
  if (s->bound) State::Unbind(h, s.get());
  s->closed = true;
  if (s->kind == sim::Socket::Kind::kListening) {
    // Connections queued and never accepted: reset (their clients see ECONNRESET).
    for (auto& q : s->backlog) st->Reset(*q->conn);
    s->backlog.clear();
  } else if (s->kind == sim::Socket::Kind::kConnected) {
    Connection& c = *s->conn;
    c.end[s->side] = nullptr;
    if (s->side == 0 && sim::Now() < c.established_at) {
      c.aborted = true;  // no final ACK: the listener drops it
    }
    if (c.dir[1 - s->side].unread > 0) {
      st->Reset(c);  // closed with bytes unread: a RST, as Linux sends
    } else if (!s->shut_wr && c.error == 0) {
      SendFin(*st, c, s->side, /*closed=*/true);
    }
  }
  State::Wake(s.get());  // this socket's callers end with ECANCELED
  return {};
}

Result<void> Check(int fd) {
  WEFT_SIM_OPEN(fd);
  return {};
}

Result<std::size_t> SendMsg(int fd, const MsgHdr* msg, int flags, const WaitOptions& options,
                            std::uint64_t serial) {
  Result<int> iovcnt = VectorsOf(msg);
  if (!iovcnt.ok()) return iovcnt.error();
  WEFT_SIM_OPEN_AS(fd, serial);
  (void)flags;  // a datagram's send never waits here (there is no send buffer to fill)
  if (s->kind != sim::Socket::Kind::kDatagram) return std::errc::not_supported;
  return SendDatagram(*st, *s, msg, *iovcnt, options);
}

Result<std::size_t> RecvMsg(int fd, MsgHdr* msg, int flags, const WaitOptions& options,
                            std::uint64_t serial) {
  Result<int> iovcnt = VectorsOf(msg);
  if (!iovcnt.ok()) return iovcnt.error();
  WEFT_SIM_OPEN_AS(fd, serial);
  if (s->kind != sim::Socket::Kind::kDatagram) return std::errc::not_supported;
  return RecvDatagram(*st, *s, msg, *iovcnt, flags, options);
}

std::uint64_t Serial(int fd) {
  State* st = sim::TheState();
  if (st == nullptr) return 0;
  Locked lock(*st);
  std::shared_ptr<sim::Socket> s = st->Find(fd);
  return s != nullptr ? s->serial : 0;
}

Result<void> LocalAddress(int fd, sockaddr* addr, socklen_t* len) {
  WEFT_SIM_OPEN(fd);
  if (addr == nullptr || len == nullptr) return std::errc::invalid_argument;
  sockaddr_in a = s->local;
  a.sin_family = AF_INET;
  sim::ToSockaddr(a, addr, len);
  return {};
}

Result<void> PeerAddress(int fd, sockaddr* addr, socklen_t* len) {
  WEFT_SIM_OPEN(fd);
  if (addr == nullptr || len == nullptr) return std::errc::invalid_argument;
  if (s->kind != sim::Socket::Kind::kConnected &&
      !(s->kind == sim::Socket::Kind::kDatagram && s->peer_set)) {
    return std::errc::not_connected;
  }
  sim::ToSockaddr(s->peer, addr, len);
  return {};
}

Result<std::uint32_t> Resolve(std::string_view name) {
  State* st = sim::TheState();
  if (st == nullptr) return std::errc::not_supported;
  if (name == "localhost") return htonl(sim::kLoopback);
  in_addr a{};
  std::string text(name);
  if (::inet_pton(AF_INET, text.c_str(), &a) == 1) return a.s_addr;
  Locked lock(*st);
  Result<std::uint32_t> id = st->HostNamed(name);
  if (!id.ok()) return std::errc::address_not_available;
  return htonl(sim::AddressOf(*id));
}

#undef WEFT_SIM_OPEN
#undef WEFT_SIM_OPEN_AS

}  // namespace weft::sim_internal
