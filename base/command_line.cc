// base/command_line.cc: see command_line.h.

#include "weft/base/command_line.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace weft::base_internal {
namespace {

std::string& Program() {
  static std::string* name = new std::string("error");  // never destroyed: read at exit
  return *name;
}

bool IsOwnFlag(absl::string_view file) { return !absl::StrContains(file, "absl/"); }

// PrintHelp: the usage message, then the program's flags (not abseil's own), sorted by name.
void PrintHelp(const char* usage) {
  std::printf("%s\n\nflags:\n", usage);
  std::vector<const absl::CommandLineFlag*> own;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsOwnFlag(flag->Filename())) own.push_back(flag);
  }
  std::sort(own.begin(), own.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  for (const auto* flag : own) {
    std::printf("  --%s  %s (default: %s)\n", std::string(flag->Name()).c_str(),
                flag->Help().c_str(), flag->DefaultValue().c_str());
  }
}

}  // namespace

void ParseCommandLine(int argc, char** argv, const char* usage) {
  // --help (and -h) print the usage and the program's flags and exit 0, before any parsing: absl's
  // own --help exits 1 and lists only the flags of a file named after the program, which misses
  // flags shared by several programs. absl's other help flags (--helpfull...) work as absl's.
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      PrintHelp(usage);
      std::exit(0);
    }
  }
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsOwnFlag;
  config.contains_helpshort_flags = IsOwnFlag;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  if (argc > 0) {
    absl::string_view path = argv[0];
    Program() = std::string(path.substr(path.rfind('/') + 1));
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);  // argv[0] first
  if (rest.size() > 1) UsageError(std::string("unexpected argument ") + rest[1]);
}

void UsageError(const std::string& message) {
  std::fprintf(stderr, "%s: %s (--help shows the flags)\n", Program().c_str(), message.c_str());
  std::exit(2);
}

}  // namespace weft::base_internal
