// api/fs.h: files for fibers. With io_uring each call is one asynchronous operation of the
// calling worker's ring (IORING_OP_OPENAT, READ, WRITE, FSYNC, STATX): the fiber parks and its
// worker runs the others. With epoll, and on Windows, each call runs on the runtime's blocking
// threads (call_blocking): a worker never waits for a disk. On a plain thread the calls block
// it. docs/api.md has the guide.
//
// Defines: weft::fs::OpenOptions, weft::fs::FileStat, weft::fs::File, weft::fs::read_file.
//
// Every call takes WaitOptions. Through io_uring a deadline or cancellation cancels the
// operation (std::errc::timed_out / operation_canceled); on a blocking thread they are checked
// before the system call starts, and the call then runs to its end. Errors are the system's
// (no_such_file_or_directory, permission_denied, ...). A simulated runtime touches no real file:
// every call is not_supported there.

#ifndef WEFT_API_FS_H_
#define WEFT_API_FS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/base/result.h"
#include "weft/scheduler/task.h"
#include "weft/sync/cancellation.h"

namespace weft::fs {

struct OpenOptions {
  bool read = true;
  bool write = false;
  bool create = false;     // if it does not exist (needs write)
  bool truncate = false;   // to 0 bytes (needs write)
  bool append = false;     // writes go to the end (write_at's offset is then ignored, as POSIX)
  bool exclusive = false;  // with create: file_exists if it does
  unsigned mode = 0644;    // a created file's permissions (POSIX)
};

struct FileStat {
  std::uint64_t size = 0;
  bool regular = false;
  bool directory = false;
};

// File: an open file; closed by its destructor. Reads and writes take an offset and never move
// a file position, so fibers may share one File. A call racing with close() on the same File
// never returns another file's bytes (operation_canceled), and on a regular file never reaches a
// file that took the number meanwhile. On a pipe, FIFO or device without io_uring, a call may
// wait for ever, so a close does not wait for it: a write racing with the close may then reach
// the number's next file, and a read may consume its bytes before it fails operation_canceled.
// Do not close such a File while other fibers still use it. Nor does the runtime's shutdown end
// such a call (a blocking thread's system call cannot be cancelled): ~Runtime waits for it, as
// for any call_blocking.
// On a pipe or FIFO the offset is ignored, as the reactor ignores it (io_uring's rule).
class File {
 public:
  File() = default;
  ~File() { (void)close(); }
  File(File&& other) noexcept
      : fd_(other.fd_.exchange(-1)), epoch_(other.epoch_), regular_(other.regular_) {}
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // open: EINVAL for an empty path, one with a NUL byte, or create/truncate without write.
  static Result<File> open(const std::string& path, const OpenOptions& options = {},
                           const WaitOptions& wait = {});

  // read_at: up to len bytes at offset; fewer at the end of the file (0 at or past it), and at
  // most 2 GiB - 4 KiB per call, as the kernel's own read. write_at: some bytes (usually all);
  // file_too_large at INT64_MAX. EINVAL for a null buffer with len > 0, or an offset past
  // INT64_MAX.
  Result<std::size_t> read_at(void* buf, std::size_t len, std::uint64_t offset,
                              const WaitOptions& options = {});
  Result<std::size_t> write_at(const void* buf, std::size_t len, std::uint64_t offset,
                               const WaitOptions& options = {});
  // read_full_at: len bytes unless the file ends first; returns how many (< len: it ended).
  // write_all_at: all len bytes, in as many writes as it takes.
  Result<std::size_t> read_full_at(void* buf, std::size_t len, std::uint64_t offset,
                                   const WaitOptions& options = {});
  Result<void> write_all_at(const void* buf, std::size_t len, std::uint64_t offset,
                            const WaitOptions& options = {});
  // The forms for a task (scheduler/task.h): `co_await file.async_read_at(buf, len, offset)`,
  // the same results. With io_uring they wait on the worker's ring (and a read the page cache
  // serves takes one system call, as read_at's); elsewhere they run on a blocking thread
  // (this_task::call_blocking), which also serves a task's open, sync and stat. The buffer and
  // the File must outlive the call (awaited at once, they do).
  Task<Result<std::size_t>> async_read_at(void* buf, std::size_t len, std::uint64_t offset,
                                          WaitOptions options = {});
  Task<Result<std::size_t>> async_write_at(const void* buf, std::size_t len, std::uint64_t offset,
                                           WaitOptions options = {});

  // sync: data and metadata to the disk (fsync); sync_data: data and what reading it needs
  // (fdatasync).
  Result<void> sync(const WaitOptions& options = {});
  Result<void> sync_data(const WaitOptions& options = {});
  Result<FileStat> stat(const WaitOptions& options = {});

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }  // on Windows, the HANDLE, cast
  Result<void> close();           // idempotent

 private:
  explicit File(int fd) : fd_(fd) {}
  // Atomic: a close may race with another fiber's call (which then ends operation_canceled).
  std::atomic<int> fd_{-1};
  std::uint32_t epoch_ = 0;  // fd_'s close epoch when opened (api/fs.cc)
  bool regular_ = false;     // a regular file (its calls never wait for long)
};

// read_file: the whole file, read until its end (so a /proc file, whose size says 0, is read
// whole too); file_too_large past max_bytes (1 GiB by default).
Result<std::string> read_file(const std::string& path, const WaitOptions& options = {},
                              std::size_t max_bytes = std::size_t{1} << 30);

}  // namespace weft::fs

#endif  // WEFT_API_FS_H_
