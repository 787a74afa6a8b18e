// scheduler/internal/console.h: a runtime's console server (RuntimeOptions::console): a thread
// that serves the runtime's introspection on a Unix socket, for tools/weft-console.
//
// Defines (weft::scheduler_internal): Console, ConsolePlace.
//
// A thread, not a fiber: it answers while every worker is stuck. Read-only, one JSON line per
// request line (docs/console.md has the protocol). The socket is 0600 in a directory that must
// be the user's own with mode 0700, and a peer whose uid is not the process's is dropped.

#ifndef WEFT_SCHEDULER_INTERNAL_CONSOLE_H_
#define WEFT_SCHEDULER_INTERNAL_CONSOLE_H_

#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "weft/base/result.h"
#include "weft/scheduler/runtime.h"

namespace weft {
namespace scheduler_internal {

// ConsoleDirectory: where a runtime's socket goes: `dir` if not empty, else $WEFT_CONSOLE_DIR,
// else $XDG_RUNTIME_DIR/weft, else /tmp/weft-<uid>.
std::string ConsoleDirectory(const std::string& dir);

class Console {
 public:
  // Start: makes the directory (0700) if needed and checks that only the user can use it,
  // binds <dir>/<pid>-<n>.sock (0600) and starts the thread. An error (the directory is not
  // private, the socket cannot be bound, no thread) leaves the runtime without a console.
  static Result<std::unique_ptr<Console>> Start(Runtime::Impl* rt, const std::string& dir);
  ~Console();  // stops the thread, closes and removes the socket
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  const std::string& path() const { return path_; }

 private:
  Console(Runtime::Impl* rt, std::string path, int listen_fd, int wake_read, int wake_write);
  void Loop();
  // Answer: the reply to one request line (without its newline).
  std::string Answer(const std::string& line);

  Runtime::Impl* const rt_;
  const std::string path_;
  const int listen_fd_;
  const int wake_read_, wake_write_;  // a pipe: the destructor's wake-up
  std::thread thread_;
};

}  // namespace scheduler_internal
}  // namespace weft

#endif  // WEFT_SCHEDULER_INTERNAL_CONSOLE_H_
