// api/internal/recv_buffer_tries.h: what a recv_buffer call keeps between its attempts, for its
// blocking form (api/io.cc) and its task form (net::RecvBufferOperation, api/net.h), which keeps
// it in the awaiting coroutine's frame.
//
// Defines: weft::io_internal::Fd, weft::io_internal::RecvBufferTries.

#ifndef WEFT_API_INTERNAL_RECV_BUFFER_TRIES_H_
#define WEFT_API_INTERNAL_RECV_BUFFER_TRIES_H_

#include <cstdint>
#include <optional>

#include "weft/api/io.h"
#include "weft/base/result.h"
#include "weft/reactor/buffer_pool.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"

namespace weft::io_internal {

// Fd: an fd as a call names it: the number, and its close epoch (scheduler/io.h) when the call
// started, or when the object that holds it (a TcpStream, a File) opened it. A close that began
// since ends the call with -ECANCELED before it touches the number, which may be another file's
// by now.
struct Fd {
  int fd;
  std::uint32_t epoch;
  static Fd Now(int fd) { return {fd, scheduler_internal::CloseEpoch(fd)}; }
};

// RecvBufferTries: one recv_buffer call's attempts. Through the worker's ring while it has one
// and lends buffers; once it says it cannot (ENOBUFS: all lent; EOPNOTSUPP: no ring), the
// readiness way for the rest of the call.
class RecvBufferTries {
 public:
  explicit RecvBufferTries(Fd at) : at_(at) {}
  Fd at() const { return at_; }
  // Submit: the next attempt's operation (again for each retry).
  void Submit(Reactor& re, IoOp& op);
  // After: the call's result once the attempt ended with r; nullopt: submit another.
  std::optional<Result<io::RecvBuffer>> After(std::int64_t r);

 private:
  Fd at_;
  PooledBuffer got_;
  bool pooled_ = false;
  bool no_ring_ = false;
  bool no_buffers_ = false;
};

}  // namespace weft::io_internal

#endif  // WEFT_API_INTERNAL_RECV_BUFFER_TRIES_H_
