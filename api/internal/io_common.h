// api/internal/io_common.h: what the io, net and fs calls share (api/io.cc, net.cc, fs.cc):
// running a reactor operation while it fails transiently, a call's direct first try without the
// reactor, and the loop that writes all of a buffer.

#ifndef WEFT_API_INTERNAL_IO_COMMON_H_
#define WEFT_API_INTERNAL_IO_COMMON_H_

#ifndef _WIN32
#include <sys/types.h>
#endif

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <system_error>

#include "weft/base/fault.h"
#include "weft/base/result.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"
#include "weft/sync/cancellation.h"

namespace weft::io_internal {

inline std::errc ErrcOf(std::int64_t negative_errno) {
  return static_cast<std::errc>(static_cast<int>(-negative_errno));
}

inline Result<std::size_t> Size(std::int64_t r) {
  if (r < 0) return ErrcOf(r);
  return static_cast<std::size_t>(r);
}

// kTransientRetries: how many transient errors in a row a call absorbs before it reports one
// (a backend that kept failing so would otherwise spin the fiber).
inline constexpr int kTransientRetries = 64;

// RunAbsorbing: RunIo(submit) on fd, run again while it fails with an error its caller should
// never see (as Go's runtime, and SA_RESTART for blocking calls): EINTR (a signal interrupted
// it, or an injected fault), EAGAIN unless the caller asked not to wait (MSG_DONTWAIT), and for
// an accept ECONNABORTED (a connection reset before it was taken: take the next one). Not once
// fd's close has begun (another fiber closed it meanwhile): the number may be a new file's by
// now; the call ends with ECANCELED, as an operation in flight would.
enum class Absorb { kEintr, kEagain, kAccept };
template <typename Submit>
std::int64_t RunAbsorbing(Absorb what, int fd, const Submit& submit, const WaitOptions& options,
                          const char* name) {
  const std::uint32_t epoch = scheduler_internal::CloseEpoch(fd);
  for (int i = 0;; ++i) {
    std::int64_t r = scheduler_internal::RunIo(submit, options, name, fd);
    bool transient = r == -EINTR ||
                     (what != Absorb::kEintr && (r == -EAGAIN || r == -EWOULDBLOCK)) ||
                     (what == Absorb::kAccept && r == -ECONNABORTED);
    if (!transient || i == kTransientRetries) return r;
    if (scheduler_internal::CloseEpoch(fd) != epoch) return -ECANCELED;
  }
}

#ifndef _WIN32
// TryDirect: call(), a non-blocking system call (ssize_t and errno), for a call that seldom has
// to wait: its result, or nullopt when it would block, when the caller may not try (a cancelled
// token must fail the call; past the fiber's budget of direct turns it goes through the reactor
// so its worker's other fibers run) or when an injected fault (WEFT_FAULTS) says it would block.
// Then the caller goes through the reactor (RunAbsorbing), which also ends a MSG_DONTWAIT call
// with EAGAIN.
template <typename Call>
std::optional<Result<std::size_t>> TryDirect(const WaitOptions& options, const Call& call) {
  if ((options.cancel != nullptr && options.cancel->is_cancelled()) ||
      !scheduler_internal::TakeDirectIoTurn() ||
      fault::Inject(fault::Site::kIo, fault::Kind::kEagain)) {
    return std::nullopt;
  }
  const ssize_t n = call();
  if (n >= 0) return Result<std::size_t>(static_cast<std::size_t>(n));
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    return Result<std::size_t>(static_cast<std::errc>(errno));
  }
  return std::nullopt;
}
#endif

// WriteAll: repeats one writing operation until len bytes went out.
template <typename WriteOp>
Result<void> WriteAll(WriteOp op, const void* buf, std::size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len != 0) {
    Result<std::size_t> n = op(p, len);
    if (!n.ok()) return n.error();
    if (*n == 0) return std::errc::io_error;  // a write that makes no progress
    p += *n;
    len -= *n;
  }
  return {};
}
}  // namespace weft::io_internal

#endif  // WEFT_API_INTERNAL_IO_COMMON_H_
