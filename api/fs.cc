// api/fs.cc: files (api/fs.h): through the reactor where it is io_uring, else on the blocking
// threads.

#include "weft/api/fs.h"

#ifdef _WIN32
#include <windows.h>

#include "weft/base/internal/win_errno.h"
#else
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>

#include "internal/io_common.h"
#include "weft/api/io.h"
#include "weft/base/clock.h"
#include "weft/reactor/reactor.h"
#include "weft/scheduler/io.h"
#include "weft/scheduler/runtime.h"
#include "weft/scheduler/task.h"
#include "weft/sync/waiter.h"

namespace weft::fs {
namespace {

constexpr std::uint64_t kMaxOffset = static_cast<std::uint64_t>(INT64_MAX);
constexpr std::size_t kMaxDirectRead = std::size_t{128} << 10;

// Ready: whether a call may start: not cancelled, not past its deadline, not in a simulation
// (which touches no real file), not from a fiber or task that the runtime's shutdown has
// interrupted (whichever way the call would go: a cached read done directly, or a blocking
// thread's call, which nothing interrupts, ended it as the reactor's path does).
Result<void> Ready(const WaitOptions& options) {
  if (scheduler_internal::InSimulation()) return std::errc::not_supported;
  if (options.cancel != nullptr && options.cancel->is_cancelled()) {
    return std::errc::operation_canceled;
  }
  if (const Waiter* w = sync_internal::CurrentWaiterIfReady(); w != nullptr && w->interrupted()) {
    return std::errc::operation_canceled;
  }
  if (options.deadline && *options.deadline <= SyncClock::now()) return std::errc::timed_out;
  return {};
}

bool BadPath(const std::string& path) {
  return path.empty() || path.find('\0') != std::string::npos;
}

bool StillOurs(int fd, std::uint32_t epoch) { return scheduler_internal::CloseEpoch(fd) == epoch; }

// OnFile: f() for a File's blocking-thread call on fd (epoch: its close epoch at open), or
// nullopt, without calling f, once a close began since the open: a call that waited for a
// blocking thread while the File was closed never reaches the number's next file. On a regular
// file the call is an FdUse (scheduler/io.h): a close waits for it, which is short (a disk
// access). A pipe's or FIFO's call may wait for ever, so a close must not wait for it: there the
// epoch is checked before the call, and callers check StillOurs again after it; a close in
// between is the caller's race (api/fs.h).
template <typename F>
auto OnFile(int fd, std::uint32_t epoch, bool regular, F f) -> std::optional<decltype(f())> {
  std::optional<scheduler_internal::FdUse> use;
  if (regular) use.emplace(fd, epoch);
  if (use ? use->refused() : !StillOurs(fd, epoch)) return std::nullopt;
  return f();
}

#ifndef _WIN32
std::errc Errno() { return static_cast<std::errc>(errno); }

// UringCall: one reactor operation (submit) for a file call, run again on EINTR and EAGAIN as
// the io calls are (io_internal::RunAbsorbing). Returns the result (>= 0) or the error.
template <typename Submit>
Result<std::int64_t> UringCall(const Submit& submit, const WaitOptions& options, const char* what,
                               io_internal::Fd fd) {
  const std::int64_t r =
      io_internal::RunAbsorbing(io_internal::Absorb::kEagain, fd, submit, options, what);
  if (r < 0) return io_internal::ErrcOf(r);
  return r;
}

// Blocking: f() (a system call's result, -1 with errno on failure) on a blocking thread.
template <typename F>
Result<std::int64_t> Blocking(F f) {
  std::int64_t r = 0;
  int error = 0;
  call_blocking([&] {
    do {
      r = f();
    } while (r < 0 && errno == EINTR);
    error = r < 0 ? errno : 0;
  });
  if (r < 0) return static_cast<std::errc>(error);
  return r;
}

// BlockingOn: Blocking for a call on fd, the File's, under OnFile's rules (ECANCELED once a
// close began since the open).
template <typename F>
Result<std::int64_t> BlockingOn(int fd, std::uint32_t epoch, bool regular, F f) {
  return Blocking([&] {
    if (std::optional<std::int64_t> r = OnFile(fd, epoch, regular, f)) return *r;
    errno = ECANCELED;
    return std::int64_t{-1};
  });
}

// AsSize: a byte count's Result as the calls return it.
Result<std::size_t> AsSize(const Result<std::int64_t>& n) {
  if (!n.ok()) return n.error();
  return static_cast<std::size_t>(*n);
}
#endif

}  // namespace

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    (void)close();
    epoch_ = other.epoch_;
    regular_ = other.regular_;
    fd_ = other.fd_.exchange(-1);
  }
  return *this;
}

#ifndef _WIN32

Result<File> File::open(const std::string& path, const OpenOptions& o, const WaitOptions& wait) {
  if (BadPath(path) || ((o.create || o.truncate) && !o.write) || (!o.read && !o.write)) {
    return std::errc::invalid_argument;
  }
  if (Result<void> r = Ready(wait); !r.ok()) return r.error();
  int flags = O_CLOEXEC | (o.read && o.write ? O_RDWR : o.write ? O_WRONLY : O_RDONLY);
  if (o.create) flags |= O_CREAT;
  if (o.truncate) flags |= O_TRUNC;
  if (o.append) flags |= O_APPEND;
  if (o.exclusive) flags |= O_EXCL;
  const bool ring = scheduler_internal::FileIoThroughReactor();
  Result<std::int64_t> fd = std::errc::invalid_argument;
  if (ring) {
    fd = UringCall(
        [&](Reactor& r, IoOp& op) { r.openat(op, AT_FDCWD, path.c_str(), flags, o.mode); }, wait,
        "fs open", {-1, 0});
  }
  // ENXIO through the ring: a FIFO opened for writing with no reader (io_uring opens without
  // waiting): on a blocking thread, which waits for the reader as open(2) does.
  if (!ring || (!fd.ok() && fd.error() == std::errc::no_such_device_or_address)) {
    fd = Blocking([&] { return static_cast<std::int64_t>(::open(path.c_str(), flags, o.mode)); });
  }
  if (!fd.ok()) return fd.error();
  File f(static_cast<int>(*fd));
  f.epoch_ = scheduler_internal::CloseEpoch(f.fd_);
  struct stat st {};
  f.regular_ = ::fstat(f.fd_, &st) == 0 && S_ISREG(st.st_mode);  // metadata: never waits
  return f;
}

namespace {
Result<std::size_t> BlockingRead(int fd, std::uint32_t epoch, bool regular, void* buf,
                                 std::size_t len, std::uint64_t offset) {
  return AsSize(BlockingOn(fd, epoch, regular, [&] {
    ssize_t r = ::pread(fd, buf, ClampIoLength(len), static_cast<off_t>(offset));
    if (r < 0 && errno == ESPIPE) r = ::read(fd, buf, ClampIoLength(len));  // as io_uring
    return static_cast<std::int64_t>(r);
  }));
}

Result<std::size_t> BlockingWrite(int fd, std::uint32_t epoch, bool regular, const void* buf,
                                  std::size_t len, std::uint64_t offset) {
  return AsSize(BlockingOn(fd, epoch, regular, [&] {
    ssize_t r = ::pwrite(fd, buf, ClampIoLength(len), static_cast<off_t>(offset));
    if (r < 0 && errno == ESPIPE) r = ::write(fd, buf, ClampIoLength(len));  // as io_uring
    return static_cast<std::int64_t>(r);
  }));
}

Result<void> Sync(int fd, std::uint32_t epoch, bool regular, bool datasync,
                  const WaitOptions& options) {
  if (fd < 0) return std::errc::bad_file_descriptor;
  if (Result<void> r = Ready(options); !r.ok()) return r.error();
  Result<std::int64_t> r = std::errc::invalid_argument;
  if (scheduler_internal::FileIoThroughReactor()) {
    r = UringCall([&](Reactor& re, IoOp& op) { re.fsync(op, fd, datasync); }, options, "fs sync",
                  {fd, epoch});
  } else {
    r = BlockingOn(fd, epoch, regular, [&] {
      return static_cast<std::int64_t>(datasync ? ::fdatasync(fd) : ::fsync(fd));
    });
  }
  if (!StillOurs(fd, epoch)) return std::errc::operation_canceled;
  if (!r.ok()) return r.error();
  return {};
}
}  // namespace

Result<void> File::sync(const WaitOptions& options) {
  return Sync(fd_, epoch_, regular_, false, options);
}
Result<void> File::sync_data(const WaitOptions& options) {
  return Sync(fd_, epoch_, regular_, true, options);
}

Result<FileStat> File::stat(const WaitOptions& options) {
  const int fd = fd_;
  if (fd < 0) return std::errc::bad_file_descriptor;
  if (Result<void> r = Ready(options); !r.ok()) return r.error();
  FileStat out;
  if (scheduler_internal::FileIoThroughReactor()) {
    struct statx sx {};
    Result<std::int64_t> r = UringCall([&](Reactor& re, IoOp& op) { re.statx(op, fd, &sx); },
                                       options, "fs stat", {fd, epoch_});
    if (!StillOurs(fd, epoch_)) return std::errc::operation_canceled;
    if (!r.ok()) return r.error();
    out.size = sx.stx_size;
    out.regular = S_ISREG(sx.stx_mode);
    out.directory = S_ISDIR(sx.stx_mode);
    return out;
  }
  struct stat st {};
  Result<std::int64_t> r =
      BlockingOn(fd, epoch_, regular_, [&] { return static_cast<std::int64_t>(::fstat(fd, &st)); });
  if (!StillOurs(fd, epoch_)) return std::errc::operation_canceled;
  if (!r.ok()) return r.error();
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.regular = S_ISREG(st.st_mode);
  out.directory = S_ISDIR(st.st_mode);
  return out;
}

Result<void> File::close() {
  const int fd = fd_.exchange(-1);
  if (fd < 0) return {};
  return io::close(fd);  // ends the fd's operations in every reactor first
}

#else  // _WIN32: every call on a blocking thread, on a handle opened for synchronous I/O

namespace {
HANDLE H(int fd) { return reinterpret_cast<HANDLE>(static_cast<std::intptr_t>(fd)); }
std::errc LastError() { return static_cast<std::errc>(base_internal::ErrnoOf(GetLastError())); }

// OnHandle: ok() (a Win32 call's success; GetLastError says why not) on a blocking thread, for
// the File's handle, under OnFile's rules (operation_canceled once a close began since the open).
template <typename F>
Result<void> OnHandle(int fd, std::uint32_t epoch, bool regular, F ok) {
  std::errc error{};
  call_blocking([&] {
    if (std::optional<bool> done = OnFile(fd, epoch, regular, ok); !done) {
      error = std::errc::operation_canceled;
    } else if (!*done) {
      error = LastError();
    }
  });
  if (error != std::errc{}) return error;
  return {};
}

// At: the OVERLAPPED that gives a synchronous ReadFile or WriteFile its offset.
OVERLAPPED At(std::uint64_t offset) {
  OVERLAPPED at{};
  at.Offset = static_cast<DWORD>(offset & 0xffffffff);
  at.OffsetHigh = static_cast<DWORD>(offset >> 32);
  return at;
}

// AsPosix: a read's or write's failure as POSIX reports it: a handle not opened for that access
// fails with ERROR_ACCESS_DENIED (EACCES), where read(2) and write(2) say EBADF.
std::errc AsPosix(std::errc e) {
  return e == std::errc::permission_denied ? std::errc::bad_file_descriptor : e;
}

Result<std::size_t> BlockingRead(int fd, std::uint32_t epoch, bool regular, void* buf,
                                 std::size_t len, std::uint64_t offset) {
  DWORD got = 0;
  Result<void> r = OnHandle(fd, epoch, regular, [&] {
    OVERLAPPED at = At(offset);
    if (ReadFile(H(fd), buf, static_cast<DWORD>(ClampIoLength(len)), &got, &at)) return true;
    if (GetLastError() != ERROR_HANDLE_EOF) return false;
    got = 0;  // at or past the end
    return true;
  });
  if (!r.ok()) return AsPosix(r.error());
  return static_cast<std::size_t>(got);
}

Result<std::size_t> BlockingWrite(int fd, std::uint32_t epoch, bool regular, const void* buf,
                                  std::size_t len, std::uint64_t offset) {
  DWORD put = 0;
  Result<void> r = OnHandle(fd, epoch, regular, [&] {
    OVERLAPPED at = At(offset);
    return WriteFile(H(fd), buf, static_cast<DWORD>(ClampIoLength(len)), &put, &at) != 0;
  });
  if (!r.ok()) return AsPosix(r.error());
  return static_cast<std::size_t>(put);
}
}  // namespace

Result<File> File::open(const std::string& path, const OpenOptions& o, const WaitOptions& wait) {
  if (BadPath(path) || ((o.create || o.truncate) && !o.write) || (!o.read && !o.write)) {
    return std::errc::invalid_argument;
  }
  if (Result<void> r = Ready(wait); !r.ok()) return r.error();
  const int wide_len =
      MultiByteToWideChar(CP_UTF8, 0, path.data(), static_cast<int>(path.size()), nullptr, 0);
  if (wide_len <= 0) return std::errc::invalid_argument;
  std::wstring wide(static_cast<std::size_t>(wide_len), L'\0');
  MultiByteToWideChar(CP_UTF8, 0, path.data(), static_cast<int>(path.size()), wide.data(),
                      wide_len);
  DWORD access = 0;
  if (o.read) access |= GENERIC_READ;
  // FILE_APPEND_DATA without FILE_WRITE_DATA: every write goes to the end, whatever its offset.
  if (o.write) access |= o.append ? FILE_APPEND_DATA : GENERIC_WRITE;
  DWORD disposition = OPEN_EXISTING;
  if (o.create && o.exclusive) {
    disposition = CREATE_NEW;
  } else if (o.create && o.truncate) {
    disposition = CREATE_ALWAYS;
  } else if (o.create) {
    disposition = OPEN_ALWAYS;
  } else if (o.truncate) {
    disposition = TRUNCATE_EXISTING;
  }
  HANDLE h = INVALID_HANDLE_VALUE;
  std::errc error{};
  call_blocking([&] {
    h = CreateFileW(wide.c_str(), access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                    nullptr, disposition, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (h == INVALID_HANDLE_VALUE) error = LastError();
  });
  if (h == INVALID_HANDLE_VALUE) return error;
  File f(static_cast<int>(reinterpret_cast<std::intptr_t>(h)));
  f.epoch_ = scheduler_internal::CloseEpoch(f.fd_);
  f.regular_ = GetFileType(h) == FILE_TYPE_DISK;
  return f;
}

Result<void> File::sync(const WaitOptions& options) {
  const int fd = fd_;
  if (fd < 0) return std::errc::bad_file_descriptor;
  if (Result<void> r = Ready(options); !r.ok()) return r.error();
  Result<void> r = OnHandle(fd, epoch_, regular_, [&] { return FlushFileBuffers(H(fd)) != 0; });
  if (!StillOurs(fd, epoch_)) return std::errc::operation_canceled;
  return r;
}
Result<void> File::sync_data(const WaitOptions& options) { return sync(options); }

Result<FileStat> File::stat(const WaitOptions& options) {
  const int fd = fd_;
  if (fd < 0) return std::errc::bad_file_descriptor;
  if (Result<void> r = Ready(options); !r.ok()) return r.error();
  BY_HANDLE_FILE_INFORMATION info{};
  Result<void> r =
      OnHandle(fd, epoch_, regular_, [&] { return GetFileInformationByHandle(H(fd), &info) != 0; });
  if (!StillOurs(fd, epoch_)) return std::errc::operation_canceled;
  if (!r.ok()) return r.error();
  FileStat out;
  out.size = (static_cast<std::uint64_t>(info.nFileSizeHigh) << 32) | info.nFileSizeLow;
  out.directory = (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) != 0;
  out.regular = regular_ && !out.directory;  // a disk file (GetFileType at open), not a pipe
  return out;
}

// close: through the close protocol (scheduler/io.h's CloseFd), as on Linux: calls that began
// since refuse the handle, and a close waits for a regular file's calls under way, so none
// reaches a file that takes the handle's number next.
Result<void> File::close() {
  const int fd = fd_.exchange(-1);
  if (fd < 0) return {};
  scheduler_internal::CloseFd(fd);
  return {};
}

#endif

// Each call takes fd_ once, and checks after its system call that the number still names the
// file this File opened (its close epoch, scheduler/io.h, is the one noted at open): a File
// closed by another fiber meanwhile, its number perhaps reused by another file, never hands
// back that file's bytes (operation_canceled instead). A write cannot be taken back: closing a
// File while another fiber writes through it is the caller's race (api/fs.h).
namespace {
// Clamp: len so that offset + len stays within the largest offset (the kernel refuses more).
std::size_t Clamp(std::size_t len, std::uint64_t offset) {
  return static_cast<std::size_t>(std::min<std::uint64_t>(len, kMaxOffset - offset));
}

// ReadStart: read_at's checks and its first try: the call's result, or nullopt (*len clamped)
// when the read goes on, through the reactor (io_internal::Read) or on a blocking thread
// (BlockingRead), after which the caller checks StillOurs. Shared with async_read_at.
std::optional<Result<std::size_t>> ReadStart(int fd, std::uint32_t epoch, void* buf,
                                             std::size_t* len, std::uint64_t offset,
                                             const WaitOptions& options) {
  if (BadIoRequest(buf, *len) || offset > kMaxOffset) {
    return Result<std::size_t>(std::errc::invalid_argument);
  }
  if (fd < 0) return Result<std::size_t>(std::errc::bad_file_descriptor);
  if (Result<void> r = Ready(options); !r.ok()) return Result<std::size_t>(r.error());
  *len = Clamp(*len, offset);
  if (*len == 0) return Result<std::size_t>(std::size_t{0});
#ifdef _WIN32
  // No read that never waits for the disk: a blocking thread's read (a File's handle is
  // synchronous there; docs/platforms.md says why).
  return std::nullopt;
#else
  // First, what the page cache holds, without waiting: preadv2 with RWF_NOWAIT never waits for
  // the disk (EAGAIN instead), so it is safe on a worker. A read the cache serves then costs one
  // system call, not a park and a completion (W10 in docs/bench.md). A fiber past its budget of
  // direct turns goes through the reactor, as a send does, so the others of its worker run.
  // (Up to 128 KiB: a larger read is a long copy, which would hold the worker for long across
  // a budget of direct turns; through the ring it costs about the same.)
  if (*len > kMaxDirectRead || !scheduler_internal::TakeDirectIoTurn()) return std::nullopt;
  Result<std::size_t> out = std::size_t{0};
  {
    // An FdUse (scheduler/io.h): a close that began since the open refuses it; one that begins
    // during the read waits for it.
    scheduler_internal::FdUse use(fd, epoch);
    if (use.refused()) return Result<std::size_t>(std::errc::operation_canceled);
    iovec v{buf, ClampIoLength(*len)};
    ssize_t n = ::preadv2(fd, &v, 1, static_cast<off_t>(offset), RWF_NOWAIT);
    if (n < 0 && errno == ESPIPE) n = ::preadv2(fd, &v, 1, -1, RWF_NOWAIT);  // a pipe: no offset
    if (n >= 0) {
      out = static_cast<std::size_t>(n);
    } else if (errno != EAGAIN && errno != EOPNOTSUPP && errno != EINTR) {
      out = Errno();
    } else {
      return std::nullopt;  // EAGAIN: not (all) cached; EOPNOTSUPP: no RWF_NOWAIT here
    }
  }
  if (!StillOurs(fd, epoch)) return Result<std::size_t>(std::errc::operation_canceled);
  return out;
#endif
}

// WriteStart: write_at's checks: the call's result, or nullopt (*len clamped) when the write
// goes on, through the reactor or on a blocking thread (BlockingWrite).
std::optional<Result<std::size_t>> WriteStart(int fd, std::uint32_t epoch, const void* buf,
                                              std::size_t* len, std::uint64_t offset,
                                              const WaitOptions& options) {
  if (BadIoRequest(buf, *len) || offset > kMaxOffset) {
    return Result<std::size_t>(std::errc::invalid_argument);
  }
  if (fd < 0) return Result<std::size_t>(std::errc::bad_file_descriptor);
  if (Result<void> r = Ready(options); !r.ok()) return Result<std::size_t>(r.error());
  if (!StillOurs(fd, epoch)) return Result<std::size_t>(std::errc::operation_canceled);
  if (*len > 0 && offset == kMaxOffset) return Result<std::size_t>(std::errc::file_too_large);
  *len = Clamp(*len, offset);
  return std::nullopt;
}

}  // namespace

Result<std::size_t> File::read_at(void* buf, std::size_t len, std::uint64_t offset,
                                  const WaitOptions& options) {
  scheduler_internal::AbortIfTask("called blocking I/O (File read_at)");
  const int fd = fd_;
  if (std::optional<Result<std::size_t>> r = ReadStart(fd, epoch_, buf, &len, offset, options)) {
    return *r;
  }
  Result<std::size_t> out =
      scheduler_internal::FileIoThroughReactor()
          ? io_internal::Read({fd, epoch_}, buf, len, options, static_cast<std::int64_t>(offset))
          : BlockingRead(fd, epoch_, regular_, buf, len, offset);
  if (!StillOurs(fd, epoch_)) return std::errc::operation_canceled;
  return out;
}

Task<Result<std::size_t>> File::async_read_at(void* buf, std::size_t len, std::uint64_t offset,
                                              WaitOptions options) {
  const int fd = fd_;
  if (std::optional<Result<std::size_t>> r = ReadStart(fd, epoch_, buf, &len, offset, options)) {
    co_return *r;
  }
  Result<std::size_t> out = std::size_t{0};
  if (scheduler_internal::FileIoThroughReactor()) {
    out = co_await io_internal::AsyncRead({fd, epoch_}, buf, len, options,
                                          static_cast<std::int64_t>(offset));
  } else {
    out = co_await this_task::call_blocking(
        [&] { return BlockingRead(fd, epoch_, regular_, buf, len, offset); });
  }
  if (!StillOurs(fd, epoch_)) co_return std::errc::operation_canceled;
  co_return out;
}

Result<std::size_t> File::write_at(const void* buf, std::size_t len, std::uint64_t offset,
                                   const WaitOptions& options) {
  const int fd = fd_;
  if (std::optional<Result<std::size_t>> r = WriteStart(fd, epoch_, buf, &len, offset, options)) {
    return *r;
  }
  Result<std::size_t> out =
      scheduler_internal::FileIoThroughReactor()
          ? io_internal::Write({fd, epoch_}, buf, len, options, static_cast<std::int64_t>(offset))
          : BlockingWrite(fd, epoch_, regular_, buf, len, offset);
  if (!out.ok() && !StillOurs(fd, epoch_)) return std::errc::operation_canceled;
  return out;
}

Task<Result<std::size_t>> File::async_write_at(const void* buf, std::size_t len,
                                               std::uint64_t offset, WaitOptions options) {
  const int fd = fd_;
  if (std::optional<Result<std::size_t>> r = WriteStart(fd, epoch_, buf, &len, offset, options)) {
    co_return *r;
  }
  Result<std::size_t> out = std::size_t{0};
  if (scheduler_internal::FileIoThroughReactor()) {
    out = co_await io_internal::AsyncWrite({fd, epoch_}, buf, len, options,
                                           static_cast<std::int64_t>(offset));
  } else {
    out = co_await this_task::call_blocking(
        [&] { return BlockingWrite(fd, epoch_, regular_, buf, len, offset); });
  }
  if (!out.ok() && !StillOurs(fd, epoch_)) co_return std::errc::operation_canceled;
  co_return out;
}

Result<std::size_t> File::read_full_at(void* buf, std::size_t len, std::uint64_t offset,
                                       const WaitOptions& options) {
  if (BadIoRequest(buf, len) || offset > kMaxOffset || len > kMaxOffset - offset) {
    return std::errc::invalid_argument;
  }
  std::size_t done = 0;
  while (done < len) {
    Result<std::size_t> n =
        read_at(static_cast<char*>(buf) + done, len - done, offset + done, options);
    if (!n.ok()) return n.error();
    if (*n == 0) break;  // the end of the file
    done += *n;
  }
  return done;
}

Result<void> File::write_all_at(const void* buf, std::size_t len, std::uint64_t offset,
                                const WaitOptions& options) {
  if (BadIoRequest(buf, len) || offset > kMaxOffset || len > kMaxOffset - offset) {
    return std::errc::invalid_argument;
  }
  const char* start = static_cast<const char*>(buf);
  return io_internal::WriteAll(
      [&](const char* p, std::size_t n) {
        return write_at(p, n, offset + static_cast<std::uint64_t>(p - start), options);
      },
      buf, len);
}

Result<std::string> read_file(const std::string& path, const WaitOptions& options,
                              std::size_t max_bytes) {
  Result<File> f = File::open(path, {}, options);
  if (!f.ok()) return f.error();
  Result<FileStat> st = f->stat(options);
  if (!st.ok()) return st.error();
  if (st->size > max_bytes) return std::errc::file_too_large;
  // Until a read returns 0: the size stat gives is a first guess (a /proc file says 0, a file
  // may grow meanwhile).
  std::string out;
  std::size_t have = 0;
  try {
    out.resize(
        std::min(max_bytes, std::max<std::size_t>(static_cast<std::size_t>(st->size), 4096)));
    for (;;) {
      if (have == out.size()) {
        if (out.size() >= max_bytes) {
          // Full at the limit: one more byte says whether the file goes on.
          char probe;
          Result<std::size_t> more = f->read_at(&probe, 1, have, options);
          if (!more.ok()) return more.error();
          if (*more != 0) return std::errc::file_too_large;
          break;
        }
        out.resize(std::min(max_bytes, out.size() * 2));
      }
      Result<std::size_t> n = f->read_at(out.data() + have, out.size() - have, have, options);
      if (!n.ok()) return n.error();
      if (*n == 0) break;
      have += *n;
    }
  } catch (const std::bad_alloc&) {
    return std::errc::not_enough_memory;
  }
  out.resize(have);
  return out;
}

}  // namespace weft::fs
