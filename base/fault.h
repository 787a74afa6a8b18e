// base/fault.h: seeded fault injection, off by default, turned on by one environment variable.
//
// Defines: weft::fault::Site, Kind, Config, Configure, Current, Hit, Inject, Hard, Random,
// Injected, InjectedCount, Summary.
//
//   WEFT_FAULTS=<rate>[,seed=<n>][,hard]     e.g. WEFT_FAULTS=0.01,seed=7
//
// Each fault site of weft asks Hit(site) and, with probability `rate`, fails as the system
// could have failed there:
//
// clang-format off
//   site           soft (the runtime absorbs them: callers see no error)       hard (surfaced)
//   kIo            EINTR, EAGAIN, short reads and writes (any reactor backend)  ECONNRESET, EPIPE
//   kAccept        EINTR, ECONNABORTED                                          EMFILE
//   kUringSubmit   the kernel refuses SQEs (EBUSY): the backlog path            -
//   kStackMap      -                                                            mmap / VirtualAlloc fails (ENOMEM)
//   kSlab          -                                                            a slab's memory is refused
//   kThread        -                                                            a blocking thread fails to start;
//                                                                               the deadline thread refuses a cancel
//   kTimerEntry    no memory for a timed wait's timer: the wait polls instead    -
// clang-format on
//
// Soft faults are on with any rate: every test must pass with them (tools/test_all.sh's
// `faults` configuration). `hard` adds the rest, which fail the operation they hit with that
// error: a test of error handling turns them on (Configure) and checks that each surfaces
// cleanly, and that the runtime keeps serving.
//
// Seeded: each thread draws from its own generator, seeded by the seed and the order in which
// threads first drew; with the same seed and the same interleaving the same faults hit. At exit
// a process that injected faults prints how many of each kind (Summary) to stderr.
//
// Cost when off: Hit is one relaxed load and a branch, and only the slow paths ask it (a
// reactor is wrapped only when faults are on; see reactor/internal/faulty_reactor.cc).

#ifndef WEFT_BASE_FAULT_H_
#define WEFT_BASE_FAULT_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace weft::fault {

enum class Site : std::uint8_t {
  kIo,
  kAccept,
  kUringSubmit,
  kStackMap,
  kSlab,
  kThread,
  kTimerEntry,
  kCount
};

// Kind: what was injected, for the counts.
enum class Kind : std::uint8_t {
  kEintr,
  kEagain,
  kShort,
  kConnReset,
  kPipe,
  kConnAborted,
  kEmfile,
  kSubmitBusy,
  kNoMemory,
  kNoThread,
  kCount
};

struct Config {
  double rate = 0;  // 0: off
  std::uint64_t seed = 1;
  bool hard = false;
};

// Configure: replaces the configuration (a test's; WEFT_FAULTS is read once, at the first
// Current or Hit). Thread-safe; reactors made before a change keep their wrapping (faults on)
// or lack of it (off).
void Configure(const Config& config);
Config Current();

namespace fault_internal {
// g_threshold: rate * 2^32, 0 when off; kUnread until WEFT_FAULTS was read.
inline constexpr std::uint64_t kUnread = ~std::uint64_t{0};
inline std::atomic<std::uint64_t> g_threshold{kUnread};
bool HitSlow(Site site);
}  // namespace fault_internal

// Hit: true if a fault should be injected at `site` now (soft sites: any rate; hard sites only
// with `hard`). relaxed: the configuration is a hint each call reads on its own.
inline bool Hit(Site site) {
  if (fault_internal::g_threshold.load(std::memory_order_relaxed) == 0) [[likely]]
    return false;
  return fault_internal::HitSlow(site);
}

// Inject: a site with one kind of fault: Hit(site), counting `kind` when it hits.
inline bool Inject(Site site, Kind kind);

// Hard: whether hard faults are on.
bool Hard();

// Random: a value of the calling thread's generator (to choose a kind, or a short length).
std::uint64_t Random();

// Injected: count one injected fault of `kind`. Summary: "N faults injected (EINTR a, ...)".
void Injected(Kind kind);
std::uint64_t InjectedCount();
std::string Summary();

inline bool Inject(Site site, Kind kind) {
  if (!Hit(site)) [[likely]]
    return false;
  Injected(kind);
  return true;
}

}  // namespace weft::fault

#endif  // WEFT_BASE_FAULT_H_
