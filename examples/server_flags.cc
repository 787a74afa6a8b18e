// examples/server_flags.cc: the flags every example server has (server_main.h).

#include <string>

#include "absl/flags/flag.h"
#include "weft/base/command_line.h"
#include "weft/examples/server_main.h"

ABSL_FLAG(int, port, 7000, "the port to listen on (0: any free port; see --port_file)");
ABSL_FLAG(int, workers, 0, "worker threads (0: one per core)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once listening");
ABSL_FLAG(bool, console, false,
          "serve the runtime's console for tools/weft-console (also: WEFT_CONSOLE=1)");
ABSL_FLAG(int, busy_ms, 0,
          "a demonstration: once a second, a fiber computes this long without yielding "
          "(0..10000; the monitor reports it, the console shows it)");

namespace weft::examples {

ServerFlags ParseServerFlags(int argc, char** argv, const char* usage) {
  using base_internal::UsageError;
  base_internal::ParseCommandLine(argc, argv, usage);
  ServerFlags f;
  f.port = absl::GetFlag(FLAGS_port);
  const int workers = absl::GetFlag(FLAGS_workers);
  f.port_file = absl::GetFlag(FLAGS_port_file);
  if (f.port < 0 || f.port > 65535) UsageError("--port must be 0..65535");
  if (workers < 0 || workers > 1024) UsageError("--workers must be 0..1024");
  f.console = absl::GetFlag(FLAGS_console);
  f.busy_ms = absl::GetFlag(FLAGS_busy_ms);
  if (f.busy_ms < 0 || f.busy_ms > 10000) UsageError("--busy_ms must be 0..10000");
  f.workers = static_cast<unsigned>(workers);
  return f;
}

}  // namespace weft::examples
