// reactor/reactor.cc: Reactor::create: the backend choice. Explicit requests are honoured or fail;
// kAuto (and WEFT_REACTOR) prefer io_uring and fall back to epoll when the kernel refuses it
// (ENOSYS: too old or seccomp; EPERM: kernel.io_uring_disabled or a container profile; ENOMEM:
// a small RLIMIT_MEMLOCK on kernels before 5.12), saying why once per process.

#include "weft/reactor/reactor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "weft/base/fault.h"
#include "weft/reactor/internal/backends.h"

namespace weft {

std::string_view ReactorBackendName(ReactorBackend backend) {
  switch (backend) {
    case ReactorBackend::kIoUring:
      return "io_uring";
    case ReactorBackend::kEpoll:
      return "epoll";
    case ReactorBackend::kIocp:
      return "iocp";
    case ReactorBackend::kAuto:
      break;
  }
  return "auto";
}

std::string_view Reactor::backend_name() const { return ReactorBackendName(backend()); }

namespace {

#ifdef _WIN32
Result<std::unique_ptr<Reactor>> CreateBackend(const ReactorOptions& options) {
  if (options.backend != ReactorBackend::kAuto && options.backend != ReactorBackend::kIocp) {
    return std::errc::invalid_argument;  // a Linux backend
  }
  return reactor_internal::MakeIocpReactor(options);
}
#else
Result<std::unique_ptr<Reactor>> CreateBackend(const ReactorOptions& options) {
  ReactorBackend want = options.backend;
  if (want == ReactorBackend::kIocp) return std::errc::invalid_argument;  // Windows only
  if (want == ReactorBackend::kAuto) {
    if (const char* env = std::getenv("WEFT_REACTOR")) {
      std::string_view v(env);
      if (v == "io_uring") {
        want = ReactorBackend::kIoUring;
      } else if (v == "epoll") {
        want = ReactorBackend::kEpoll;
      } else if (!v.empty()) {
        static std::once_flag once;
        std::call_once(once, [&] {
          std::fprintf(stderr, "weft: ignoring WEFT_REACTOR=%s (want io_uring or epoll)\n", env);
        });
      }
    }
  }
  if (want == ReactorBackend::kEpoll) return reactor_internal::MakeEpollReactor(options);
#if defined(WEFT_HAVE_IO_URING)
  Result<std::unique_ptr<Reactor>> uring = reactor_internal::MakeIoUringReactor(options);
  if (uring.ok() || want == ReactorBackend::kIoUring) return uring;
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr, "weft: io_uring is not available (%s); using epoll\n",
                 std::strerror(uring.error_code().value()));
  });
#else
  if (want == ReactorBackend::kIoUring) return std::errc::invalid_argument;  // compiled out
#endif
  return reactor_internal::MakeEpollReactor(options);
}
#endif

}  // namespace

Result<std::unique_ptr<Reactor>> Reactor::create(const ReactorOptions& options) {
  Result<std::unique_ptr<Reactor>> r = CreateBackend(options);
  if (r.ok() && fault::Current().rate > 0) {
    return reactor_internal::MakeFaultyReactor(std::move(*r));
  }
  return r;
}

}  // namespace weft
