// bench/latency.h: the round-trip latency histogram of W6 and W9, the same in every runtime's
// implementation (bench/peers/go/main.go and bench/peers/tokio/src/main.rs carry the same few
// lines), so that their percentiles are computed alike.
//
// Buckets, HdrHistogram's idea: values below 64 ns one each; above, each power of two
// [2^e, 2^(e+1)) is split in 64 equal buckets, so a bucket is at most 1/64 (1.6%) of its lower
// bound wide. A percentile is the lower bound of the bucket holding it: at most 1.6% low.
//
//   weft::bench::LatencyHistogram h;
//   h.record(ns);               // one round trip
//   h.merge(other);             // per-client histograms into one
//   h.percentile(0.99);         // ns

#ifndef WEFT_BENCH_LATENCY_H_
#define WEFT_BENCH_LATENCY_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;  // 64 buckets per power of two
  static constexpr std::size_t kSub = std::size_t{1} << kSubBits;
  static constexpr std::size_t kBuckets = kSub + kSub * (64 - kSubBits);

  static std::size_t index(std::uint64_t v) {
    if (v < kSub) return static_cast<std::size_t>(v);
    const int e = std::bit_width(v) - 1;  // kSubBits..63
    const std::uint64_t sub = (v >> (e - kSubBits)) & (kSub - 1);
    return kSub + kSub * static_cast<std::size_t>(e - kSubBits) + static_cast<std::size_t>(sub);
  }
  static std::uint64_t lower_bound(std::size_t i) {
    if (i < kSub) return i;
    const std::size_t e = (i - kSub) / kSub + kSubBits;
    const std::uint64_t sub = (i - kSub) % kSub;
    return (kSub + sub) << (e - kSubBits);
  }

  LatencyHistogram() : counts_(kBuckets, 0) {}
  void record(std::uint64_t ns) {
    ++counts_[index(ns)];
    ++total_;
  }
  void merge(const LatencyHistogram& o) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    total_ += o.total_;
  }
  std::uint64_t total() const { return total_; }
  // percentile: the lower bound of the bucket holding the q-th value (q in (0, 1]); 0 if empty.
  std::uint64_t percentile(double q) const {
    if (total_ == 0) return 0;
    std::uint64_t rank = static_cast<std::uint64_t>(q * static_cast<double>(total_));
    if (rank == 0) rank = 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return lower_bound(i);
    }
    return lower_bound(kBuckets - 1);
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t total_ = 0;
};

}  // namespace weft::bench

#endif  // WEFT_BENCH_LATENCY_H_
