// scheduler/introspect.cc: what a runtime shows of itself: stats_json() (per-worker counters,
// live fibers, blocking threads) and dump_fibers() (one line per live fiber: id, name, state, what
// it waits on). Both read other threads' state relaxed: a snapshot, not a consistent cut.

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "internal/runtime_impl.h"

namespace weft {

using namespace scheduler_internal;

namespace {
// TimersOf: how many deadlines w's heap holds now.
std::size_t TimersOf(Worker& w) {
  w.timer_mu.lock();
  std::size_t n = w.timers.size();
  w.timer_mu.unlock();
  return n;
}
}  // namespace

namespace scheduler_internal {
void AppendJsonString(std::string& out, std::string_view s) {
  // Valid UTF-8 passes through; quotes, backslashes and control bytes are escaped; a byte that
  // does not start a valid sequence becomes U+FFFD (fiber names are bytes, cut at 31).
  out += '"';
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A multi-byte sequence: its length from the lead byte, then continuation bytes, no
    // overlong forms, no surrogates, nothing past U+10FFFF.
    std::size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (ok && len == 3) {
      ok = !(c == 0xe0 && p[i + 1] < 0xa0) && !(c == 0xed && p[i + 1] >= 0xa0);
    }
    if (ok && len == 4) ok = !(c == 0xf0 && p[i + 1] < 0x90) && !(c == 0xf4 && p[i + 1] >= 0x90);
    if (ok) {
      out.append(reinterpret_cast<const char*>(p + i), len);
      i += len;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out += '"';
}
}  // namespace scheduler_internal

namespace {
// FiberView: what the dumps (dump_fibers, the console's fibers) show of one live fiber, read
// relaxed, its identity under meta_lock (the lock spawn writes it under).
struct FiberView {
  int state;
  std::uint64_t id;
  std::uint8_t name_len;
  char name[kNameBytes];
  const char* on;      // what it is parked on (null unless parked)
  const void* object;  // and the object, when not an fd
  int fd;              // the fd it waits on, -1 if none
  int pinned;          // its worker if pinned, else -1
  std::source_location spawn_site;
};

// ViewLocked: f's view, with the runtime's fibers_mu held; false if f is free (finished).
bool ViewLocked(Fiber* f, FiberView* v) {
  v->state = f->state.load(std::memory_order_relaxed);
  if (v->state == kDone) return false;
  const bool parked = v->state == kParked;
  v->on = parked ? f->waiter.waiting_on() : nullptr;
  v->object = parked ? f->waiter.waiting_on_object() : nullptr;
  v->fd = v->on != nullptr ? f->waiter.wait_fd.load(std::memory_order_relaxed) : -1;
  f->meta_lock.lock();
  v->id = f->id();
  v->name_len = f->name_len;
  if (f->name_len != 0) std::memcpy(v->name, f->name_chars(), f->name_len);
  v->pinned = f->pinned;
  v->spawn_site = f->spawn_site;
  f->meta_lock.unlock();
  return true;
}
}  // namespace

std::string Runtime::Impl::FibersJson(std::size_t limit) {
  struct Listed {
    int order;
    FiberView view;
    int worker;
    std::uint32_t max_wait_us;
  };
  std::vector<Listed> listed;
  std::map<std::string, std::size_t> states, waits;
  std::size_t live = 0;
  const bool deadlock = DeadlockSuspected();
  // Which worker runs which fiber: each worker's current (relaxed: a snapshot).
  std::vector<std::pair<const Fiber*, unsigned>> running;
  for (const auto& w : workers) {
    if (const Fiber* f = w->current) running.emplace_back(f, w->index);
  }
  {
    std::lock_guard<std::mutex> lock(fibers_mu);
    ForEachFiberLocked([&](Fiber* f) {
      Listed l{0, {}, -1, f->max_wait_us.load(std::memory_order_relaxed)};
      if (!ViewLocked(f, &l.view)) return;
      const int s = l.view.state;
      ++live;
      ++states[StateName(s)];
      if (const char* what = l.view.on) {
        ++waits[l.view.fd >= 0 ? std::string(what) + " fd" : std::string(what)];
      }
      // Running, runnable, blocking, then parked.
      const int order = s == kRunning ? 0 : s == kRunnable ? 1 : s == kBlocking ? 2 : 3;
      if (listed.size() >= limit && order >= listed.back().order) return;
      l.order = order;
      if (s == kRunning) {
        for (const auto& [fiber, index] : running) {
          if (fiber == f) l.worker = static_cast<int>(index);
        }
      }
      auto at = std::upper_bound(listed.begin(), listed.end(), order,
                                 [](int o, const Listed& x) { return o < x.order; });
      listed.insert(at, std::move(l));
      if (listed.size() > limit) listed.pop_back();
    });
  }
  std::string out = "{\"live\":" + std::to_string(live) + ",\"deadlock_suspected\":";
  out += deadlock ? "true" : "false";
  out += ",\"states\":{";
  for (auto it = states.begin(); it != states.end(); ++it) {
    if (it != states.begin()) out += ',';
    AppendJsonString(out, it->first);
    out += ':' + std::to_string(it->second);
  }
  out += "},\"waiting_on\":{";
  for (auto it = waits.begin(); it != waits.end(); ++it) {
    if (it != waits.begin()) out += ',';
    AppendJsonString(out, it->first);
    out += ':' + std::to_string(it->second);
  }
  out += "},\"fibers\":[";
  for (std::size_t i = 0; i < listed.size(); ++i) {
    const Listed& l = listed[i];
    const FiberView& v = l.view;
    if (i != 0) out += ',';
    out += "{\"id\":" + std::to_string(v.id) + ",\"name\":";
    AppendJsonString(out, {v.name, v.name_len});
    out += ",\"state\":\"";
    out += StateName(v.state);
    out += '"';
    if (v.on != nullptr) {
      out += ",\"on\":";
      AppendJsonString(out, v.on);
    }
    if (v.fd >= 0) out += ",\"fd\":" + std::to_string(v.fd);
    if (v.pinned >= 0) out += ",\"pinned\":" + std::to_string(v.pinned);
    if (l.worker >= 0) out += ",\"worker\":" + std::to_string(l.worker);
    if (measure_latency) out += ",\"max_wait_us\":" + std::to_string(l.max_wait_us);
    out += ",\"spawned_at\":";
    AppendJsonString(out, SpawnSite(v.spawn_site));
    out += '}';
  }
  out += "]}";
  return out;
}

std::string Runtime::stats_json() const {
  std::string out = "{\"workers\":[";
  char buf[512];
  for (const auto& w : impl_->workers) {
    // acquire: a spare's thread set its reactor before (a spare that never started is left out).
    if (w->spare && !w->ready.load(std::memory_order_acquire)) continue;
    std::string backend = "none";
    if (w->spare) {
      // A spare's thread may be ending and starting again (a reactor that could not be made):
      // its reactor is published under the idle lock.
      std::lock_guard<std::mutex> lock(impl_->idle.lock());
      if (w->reactor != nullptr) backend = w->reactor->backend_name();
    } else if (w->reactor != nullptr) {
      backend = w->reactor->backend_name();
    }
    const Counters& c = w->counters;
    auto get = [](const std::atomic<std::uint64_t>& a) {
      return a.load(std::memory_order_relaxed);
    };
    std::snprintf(buf, sizeof buf,
                  "%s{\"index\":%u,\"reactor\":\"%s\",\"spawned\":%" PRIu64 ",\"run\":%" PRIu64
                  ",\"stolen\":%" PRIu64 ",\"parked\":%" PRIu64 ",\"polled\":%" PRIu64
                  ",\"sleeps\":%" PRIu64 ",\"idle_ns\":%" PRIu64 ",\"no_stack\":%" PRIu64
                  ",\"rescued\":%" PRIu64 ",\"stuck\":%" PRIu64 ",\"timers\":%zu,\"queue\":%zu%s%s",
                  w->index == 0 ? "" : ",", w->index, backend.c_str(), get(c.spawned), get(c.run),
                  get(c.stolen), get(c.parked), get(c.polled), get(c.sleeps), get(c.idle_ns),
                  get(c.no_stack), get(c.rescued), get(c.stuck), TimersOf(*w),
                  w->queue.size_approx(), w->held ? ",\"held\":true" : "",
                  !w->spare                                   ? ""
                  : w->active.load(std::memory_order_relaxed) ? ",\"spare\":\"active\""
                                                              : ",\"spare\":\"dormant\"");
    out += buf;
    if (w->sched_latency != nullptr) {
      out += ",\"sched_latency_ns\":";
      w->sched_latency->append_json(out);
    }
    out += '}';
  }
  std::int64_t live = impl_->credits.load(std::memory_order_relaxed);
  for (const auto& w : impl_->workers) live -= w->credits.load(std::memory_order_relaxed);
  std::snprintf(buf, sizeof buf,
                "],\"spawned_outside\":%" PRIu64 ",\"live_fibers\":%" PRId64
                ",\"blocking_threads\":%zu,\"blocking_busy\":%zu,\"monitor_samples\":%" PRIu64,
                impl_->spawned_outside.load(std::memory_order_relaxed), live,
                impl_->blocking != nullptr ? impl_->blocking->threads() : 0,
                impl_->blocking != nullptr ? impl_->blocking->busy() : 0,
                impl_->monitor != nullptr ? impl_->monitor->samples() : 0);
  out += buf;
  if (impl_->monitor != nullptr) {
    out += ",\"long_runs_ns\":";
    impl_->monitor->long_runs().append_json(out);
    out += ",\"run_queue_len\":";
    impl_->monitor->run_queue().append_json(out);
  }
  out += '}';
  return out;
}

std::string Runtime::dump_fibers() const {
  std::string out;
  if (impl_->DeadlockSuspected()) {
    out =
        "# a deadlock? every fiber is parked, with no timer, no I/O and nothing runnable, while "
        "a thread waits in block_on\n";
  }
  char buf[256];
  std::lock_guard<std::mutex> lock(impl_->fibers_mu);
  impl_->ForEachFiberLocked([&](Fiber* f) {
    FiberView v;
    if (!ViewLocked(f, &v)) return;
    int n = std::snprintf(buf, sizeof buf, "fiber %" PRIu64 " \"%.*s\" %s", v.id, v.name_len,
                          v.name, StateName(v.state));
    if (v.on != nullptr) {
      if (v.fd >= 0) {
        n += std::snprintf(buf + n, sizeof buf - n, " on %s fd %d", v.on, v.fd);
      } else {
        n += std::snprintf(buf + n, sizeof buf - n, " on %s %p", v.on, v.object);
      }
    }
    if (v.pinned >= 0) n += std::snprintf(buf + n, sizeof buf - n, " pinned %d", v.pinned);
    out.append(buf, std::min<std::size_t>(n, sizeof buf - 1));
    out += " spawned at ";
    out += SpawnSite(v.spawn_site);
    out += '\n';
  });
  return out;
}

}  // namespace weft
