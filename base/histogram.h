// base/histogram.h: a log-linear histogram of unsigned values in fixed memory, written by one
// thread and read by any (relaxed: a snapshot, as every counter of stats_json).
//
// Defines: weft::LogHistogram.
//
// Buckets: values 0..7 have one bucket each; above, each power of two [2^e, 2^(e+1)) is split in
// four equal buckets (HdrHistogram's idea with two bits of precision: a bucket's width is at most a
// quarter of its lower bound). 252 buckets cover all of uint64_t; 2 KiB.
//
//   weft::LogHistogram h;
//   h.record(1500);             // the bucket [1280, 1536)
//   h.append_json(out);         // [[1280,1]]: the lower bound and count of each bucket in use

#ifndef WEFT_BASE_HISTOGRAM_H_
#define WEFT_BASE_HISTOGRAM_H_

#include <atomic>
#include <bit>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace weft {

class LogHistogram {
 public:
  static constexpr std::size_t kBuckets = 8 + 4 * 61;  // 0..7, then 2^3 .. 2^63 by quarters

  // index: the bucket of v.
  static constexpr std::size_t index(std::uint64_t v) {
    if (v < 8) return static_cast<std::size_t>(v);
    const int e = std::bit_width(v) - 1;  // 3..63
    const std::uint64_t quarter = (v >> (e - 2)) & 3;
    return 8 + 4 * static_cast<std::size_t>(e - 3) + static_cast<std::size_t>(quarter);
  }
  // lower_bound: the smallest value in bucket i.
  static constexpr std::uint64_t lower_bound(std::size_t i) {
    if (i < 8) return i;
    const std::size_t e = (i - 8) / 4 + 3;
    const std::uint64_t quarter = (i - 8) % 4;
    return (std::uint64_t{4} + quarter) << (e - 2);
  }

  // record: by the histogram's one writer. relaxed: a count read as a hint; one writer, so a
  // load and a store (no read-modify-write).
  void record(std::uint64_t v) {
    std::atomic<std::uint64_t>& c = counts_[index(v)];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::uint64_t count(std::size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  std::uint64_t total() const {
    std::uint64_t n = 0;
    for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
    return n;
  }
  // append_json: [[lower_bound,count],...] over the buckets in use, in increasing order.
  void append_json(std::string& out) const {
    out += '[';
    bool first = true;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      const std::uint64_t n = count(i);
      if (n == 0) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s[%" PRIu64 ",%" PRIu64 "]", first ? "" : ",",
                    lower_bound(i), n);
      out += buf;
      first = false;
    }
    out += ']';
  }

 private:
  std::atomic<std::uint64_t> counts_[kBuckets] = {};
};

}  // namespace weft

#endif  // WEFT_BASE_HISTOGRAM_H_
