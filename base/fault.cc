// base/fault.cc: WEFT_FAULTS, the per-thread generators and the counts (see fault.h).

#include "weft/base/fault.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace weft::fault {
namespace {

using fault_internal::g_threshold;
using fault_internal::kUnread;

std::mutex g_mu;
Config g_config;                          // guarded by g_mu
std::atomic<bool> g_hard{false};          // relaxed: a copy of g_config.hard for HitSlow
std::atomic<std::uint64_t> g_seed{1};     // relaxed: read when a thread first draws
std::atomic<std::uint64_t> g_epoch{0};    // bumped by Configure: threads reseed
std::atomic<std::uint64_t> g_threads{0};  // threads that drew, for their seeds
std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(Kind::kCount)> g_counts{};

// Sites with soft faults (the rest are hard only).
constexpr bool HasSoft(Site site) {
  return site == Site::kIo || site == Site::kAccept || site == Site::kUringSubmit ||
         site == Site::kTimerEntry;
}

std::uint64_t Threshold(double rate) {
  if (!(rate > 0)) return 0;
  if (rate >= 1) return std::uint64_t{1} << 32;
  std::uint64_t t = static_cast<std::uint64_t>(rate * 4294967296.0);
  return t == 0 ? 1 : t;
}

void PrintSummary() {
  if (InjectedCount() != 0) std::fprintf(stderr, "weft: %s\n", Summary().c_str());
}

void Apply(const Config& c) {  // g_mu held
  g_config = c;
  g_hard.store(c.hard, std::memory_order_relaxed);
  g_seed.store(c.seed, std::memory_order_relaxed);
  g_epoch.fetch_add(1, std::memory_order_relaxed);
  g_threshold.store(Threshold(c.rate), std::memory_order_relaxed);
}

// ReadEnvironment: WEFT_FAULTS, once (g_mu held).
void ReadEnvironmentLocked() {
  if (g_threshold.load(std::memory_order_relaxed) != kUnread) return;
  Config c;
  if (const char* env = std::getenv("WEFT_FAULTS"); env != nullptr && *env != '\0') {
    std::string_view rest(env);
    bool first = true;
    bool bad = false;
    while (!rest.empty()) {
      std::size_t comma = rest.find(',');
      std::string item(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      char* end = nullptr;
      if (first) {
        c.rate = std::strtod(item.c_str(), &end);
        bad = bad || end == item.c_str() || *end != '\0' || c.rate < 0 || c.rate > 1;
      } else if (item == "hard") {
        c.hard = true;
      } else if (item.rfind("seed=", 0) == 0) {
        c.seed = std::strtoull(item.c_str() + 5, &end, 10);
        bad = bad || *end != '\0';
      } else {
        bad = true;
      }
      first = false;
    }
    if (bad) {
      std::fprintf(stderr, "weft: ignoring WEFT_FAULTS=%s (want <rate 0..1>[,seed=<n>][,hard])\n",
                   env);
      c = Config{};
    } else if (c.rate > 0) {
      std::fprintf(stderr, "weft: fault injection on: rate %g, seed %llu, %s faults\n", c.rate,
                   static_cast<unsigned long long>(c.seed), c.hard ? "soft and hard" : "soft");
      std::atexit(PrintSummary);
    }
  }
  Apply(c);
}

struct ThreadRng {
  std::uint64_t epoch = ~std::uint64_t{0};
  std::uint64_t state = 0;
  std::uint64_t Next() {
    if (epoch != g_epoch.load(std::memory_order_relaxed)) {
      epoch = g_epoch.load(std::memory_order_relaxed);
      // splitmix64 of (seed, thread ordinal): independent streams per thread.
      state = g_seed.load(std::memory_order_relaxed) * 0x9e3779b97f4a7c15ull +
              g_threads.fetch_add(1, std::memory_order_relaxed) + 1;
    }
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};
thread_local ThreadRng t_rng;

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kEintr:
      return "EINTR";
    case Kind::kEagain:
      return "EAGAIN";
    case Kind::kShort:
      return "short transfer";
    case Kind::kConnReset:
      return "ECONNRESET";
    case Kind::kPipe:
      return "EPIPE";
    case Kind::kConnAborted:
      return "ECONNABORTED";
    case Kind::kEmfile:
      return "EMFILE";
    case Kind::kSubmitBusy:
      return "io_uring SQE refused";
    case Kind::kNoMemory:
      return "ENOMEM";
    case Kind::kNoThread:
      return "thread refused";
    case Kind::kCount:
      break;
  }
  return "?";
}

}  // namespace

void Configure(const Config& config) {
  std::lock_guard<std::mutex> lock(g_mu);
  Apply(config);
}

Config Current() {
  std::lock_guard<std::mutex> lock(g_mu);
  ReadEnvironmentLocked();
  return g_config;
}

bool Hard() { return g_hard.load(std::memory_order_relaxed); }

namespace fault_internal {
bool HitSlow(Site site) {
  std::uint64_t threshold = g_threshold.load(std::memory_order_relaxed);
  if (threshold == kUnread) {
    std::lock_guard<std::mutex> lock(g_mu);
    ReadEnvironmentLocked();
    threshold = g_threshold.load(std::memory_order_relaxed);
  }
  if (threshold == 0) return false;
  if (!HasSoft(site) && !g_hard.load(std::memory_order_relaxed)) return false;
  return (t_rng.Next() & 0xffffffffu) < threshold;
}
}  // namespace fault_internal

std::uint64_t Random() { return t_rng.Next(); }

void Injected(Kind kind) {
  g_counts[static_cast<std::size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t InjectedCount() {
  std::uint64_t n = 0;
  for (const auto& c : g_counts) n += c.load(std::memory_order_relaxed);
  return n;
}

std::string Summary() {
  std::string s = std::to_string(InjectedCount()) + " faults injected";
  const char* sep = " (";
  for (std::size_t i = 0; i < g_counts.size(); ++i) {
    std::uint64_t n = g_counts[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    s += sep;
    s += KindName(static_cast<Kind>(i));
    s += " " + std::to_string(n);
    sep = ", ";
  }
  if (InjectedCount() != 0) s += ")";
  return s;
}

}  // namespace weft::fault
