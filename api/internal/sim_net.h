// api/internal/sim_net.h: the simulated network's sockets (api/sim.cc), as api/io.cc and
// api/net.cc call them for the fds of a simulated runtime. Each mirrors the system call it
// stands for, with its errors; those that wait take WaitOptions as the io calls do.

#ifndef WEFT_API_INTERNAL_SIM_NET_H_
#define WEFT_API_INTERNAL_SIM_NET_H_

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <sys/socket.h>
#endif

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "weft/base/result.h"
#include "weft/reactor/reactor.h"  // IoVec
#include "weft/sync/cancellation.h"

namespace weft::sim_internal {

// kFdBase: simulated fds are numbered from here up, far above any real fd (the kernel's
// nr_open is at most 2^20), so one is never mistaken for the other.
inline constexpr int kFdBase = 0x40000000;
inline bool IsSimFd(int fd) { return fd >= kFdBase; }

// A simulated fd outside its simulation's thread (or after it ended) is EBADF in every call;
// in another simulation it is too, unless that one drew the same fd base (1 in 1,024).
// Socket: a TCP (SOCK_STREAM) or UDP (SOCK_DGRAM) socket. EAFNOSUPPORT for anything but
// AF_INET; ENOTSUP for other types; EMFILE.
Result<int> Socket(int family, int type = SOCK_STREAM);
Result<void> Bind(int fd, const sockaddr* addr, socklen_t len);
Result<void> Listen(int fd, int backlog);
// serial (the waiting calls'): if not 0, the call is for the socket Serial(fd) named when it
// was asked for (a task's call, which runs later on a fiber of its own): if fd no longer names
// that socket, it was closed since, and the call ends with operation_canceled, as a call under
// way at the close does (the number may be another socket's by then).
Result<int> Accept(int fd, sockaddr* addr, socklen_t* addrlen, const WaitOptions& options,
                   std::uint64_t serial = 0);
Result<void> Connect(int fd, const sockaddr* addr, socklen_t len, const WaitOptions& options,
                     std::uint64_t serial = 0);
// Recv / Send: over a list of buffers (read, recv, readv: one or more). flags: MSG_DONTWAIT,
// MSG_PEEK (Recv); others are ignored.
Result<std::size_t> Recv(int fd, const IoVec* iov, int iovcnt, int flags,
                         const WaitOptions& options, std::uint64_t serial = 0);
Result<std::size_t> Send(int fd, const IoVec* iov, int iovcnt, int flags,
                         const WaitOptions& options, std::uint64_t serial = 0);
// SendMsg / RecvMsg: a UDP socket's datagrams (ENOTSUP on a TCP one). A send never waits: the
// datagram is dropped on the way (loss, a partition, no socket bound at the address, a full
// receive queue) or arrives after a latency; a receive waits for the next to arrive, taking only
// the peer's once connected, and sets kMsgTruncated in msg_flags when the buffers were short.
// flags: MSG_PEEK, MSG_DONTWAIT or kSimDontWait (RecvMsg). For a connected socket, msg_name
// may be null.
#ifdef MSG_DONTWAIT
inline constexpr int kSimDontWait = MSG_DONTWAIT;
#else
inline constexpr int kSimDontWait = 0x40000000;  // where the platform has no MSG_DONTWAIT
#endif
Result<std::size_t> SendMsg(int fd, const MsgHdr* msg, int flags, const WaitOptions& options,
                            std::uint64_t serial = 0);
Result<std::size_t> RecvMsg(int fd, MsgHdr* msg, int flags, const WaitOptions& options,
                            std::uint64_t serial = 0);
Result<std::uint32_t> Poll(int fd, std::uint32_t events, const WaitOptions& options);
Result<void> Shutdown(int fd, int how);  // SHUT_RD, SHUT_WR, SHUT_RDWR
Result<void> Close(int fd);
Result<void> Check(int fd);  // EBADF unless open (for the calls that are no-ops here)
// Serial: the socket fd names now (never 0), or 0 if fd is not open here.
std::uint64_t Serial(int fd);
// LocalAddress / PeerAddress: as getsockname / getpeername.
Result<void> LocalAddress(int fd, sockaddr* addr, socklen_t* len);
Result<void> PeerAddress(int fd, sockaddr* addr, socklen_t* len);
// Resolve: "localhost", a host's name, or a numeric IPv4 address, to the host's address (in
// network order, IPv4). EADDRNOTAVAIL for a name no host has.
Result<std::uint32_t> Resolve(std::string_view name);

}  // namespace weft::sim_internal

#endif  // WEFT_API_INTERNAL_SIM_NET_H_
