// base/command_line.h: how weft's programs (examples, tools, benchmarks) read their command line:
// absl flags (each program defines its own with ABSL_FLAG). `--help` (or -h) prints the usage and
// the program's flags, not absl's own, and exits 0; a bad value (`--conns abc`, an unknown flag)
// is reported with a message and exit status 1 (absl's), an out-of-range one by UsageError (2).
// Not for libraries: only a main() calls it.
//
// Defines: weft::base_internal::ParseCommandLine.
//
//   ABSL_FLAG(int, conns, 100, "client connections");
//   int main(int argc, char** argv) {
//     weft::base_internal::ParseCommandLine(argc, argv, "floods a server");
//     if (absl::GetFlag(FLAGS_conns) <= 0) { ...usage error... }

#ifndef WEFT_BASE_COMMAND_LINE_H_
#define WEFT_BASE_COMMAND_LINE_H_

#include <string>

namespace weft::base_internal {

// ParseCommandLine: sets `usage` as the program's usage message (the first lines of --help) and
// parses argv's flags, exiting on --help, on a bad flag (as absl does) and on an argument that is
// not a flag (UsageError): weft's programs take flags only.
void ParseCommandLine(int argc, char** argv, const char* usage);

// UsageError: prints "<program>: <message>" and a hint to --help on stderr and exits with 2 (a
// flag whose value parsed but is out of range).
[[noreturn]] void UsageError(const std::string& message);

}  // namespace weft::base_internal

#endif  // WEFT_BASE_COMMAND_LINE_H_
