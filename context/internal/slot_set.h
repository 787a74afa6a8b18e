// context/internal/slot_set.h: SlotSet, a set of free slots in a size class's chunks, handed out
// lowest index first: the oldest chunk, then its lowest slot. StackPool keeps its cached and
// pending stacks in these instead of LIFO lists, so stacks come back in the order they were first
// carved (chunks in the order they were mapped, each chunk's slots by address).
//
// Why that order: a LIFO list of freed stacks takes them back in the order fibers ended. With two
// workers those orders interleave, and each burst of spawns and exits shuffles the list a little
// more, the way riffle shuffles randomise a deck. Releasing 100,000 parked fibers (W8) went from
// 25-27 ms in a process's first reps to 30-31 ms by its seventh, while the share of consecutive
// fibers whose stacks were neighbours fell from 66% to 6%. Handing the stacks out in order kept
// every rep at the first reps' speed. (Ordering only by chunk, random within one, did not help:
// the order within a chunk is what counts.)
//
// Bitmaps: one bit per slot, a chunk's slots in consecutive words, and a summary bit per chunk
// that has any. insert and take cost a scan over the chunk's few words (a 4 MiB chunk holds at
// most 204 slots of 16 KiB: 4 words) and over the summary from a cursor, which only moves forward
// between inserts below it. Not thread-safe: the pool's mutex guards it.

#ifndef WEFT_CONTEXT_INTERNAL_SLOT_SET_H_
#define WEFT_CONTEXT_INTERNAL_SLOT_SET_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::context_internal {

class SlotSet {
 public:
  // slots_per_chunk: how many slots every chunk of this set has (>= 1).
  explicit SlotSet(std::size_t slots_per_chunk = 1)
      : words_per_chunk_((slots_per_chunk + 63) / 64) {}

  // add_chunk: makes room for one more chunk (index chunks() before the call), with no slots.
  void add_chunk() {
    bits_.resize(bits_.size() + words_per_chunk_, 0);
    if (chunks_ % 64 == 0) summary_.push_back(0);
    ++chunks_;
  }
  std::size_t chunks() const { return chunks_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // insert: adds slot `slot` of chunk `chunk`; false (and no change) if it is in the set
  // already, so the count stays true to the bits.
  bool insert(std::size_t chunk, std::size_t slot) {
    std::uint64_t& word = bits_[chunk * words_per_chunk_ + slot / 64];
    const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
    if ((word & bit) != 0) return false;
    word |= bit;
    summary_[chunk / 64] |= std::uint64_t{1} << (chunk % 64);
    if (chunk / 64 < first_word_) first_word_ = chunk / 64;
    ++size_;
    return true;
  }

  // take_lowest / take_highest: removes and returns the slot with the lowest (highest) chunk
  // index, then slot index. False when empty.
  bool take_lowest(std::size_t* chunk, std::size_t* slot) {
    if (size_ == 0) return false;
    while (summary_[first_word_] == 0) ++first_word_;  // size_ != 0: some word has a bit
    const std::size_t c = first_word_ * 64 + std::countr_zero(summary_[first_word_]);
    std::uint64_t* words = &bits_[c * words_per_chunk_];
    std::size_t w = 0;
    while (words[w] == 0) ++w;  // the summary bit says one of them has a bit
    *chunk = c;
    *slot = w * 64 + std::countr_zero(words[w]);
    Remove(c, words, w, words[w] & (words[w] - 1));  // clear the lowest bit
    return true;
  }
  bool take_highest(std::size_t* chunk, std::size_t* slot) {
    if (size_ == 0) return false;
    std::size_t sw = summary_.size() - 1;
    while (summary_[sw] == 0) --sw;
    const std::size_t c = sw * 64 + 63 - std::countl_zero(summary_[sw]);
    std::uint64_t* words = &bits_[c * words_per_chunk_];
    std::size_t w = words_per_chunk_ - 1;
    while (words[w] == 0) --w;
    const int bit = 63 - std::countl_zero(words[w]);
    *chunk = c;
    *slot = w * 64 + static_cast<std::size_t>(bit);
    Remove(c, words, w, words[w] & ~(std::uint64_t{1} << bit));
    return true;
  }

  // for_each: calls f(chunk, slot) for every slot in the set, lowest first.
  template <typename F>
  void for_each(F&& f) const {
    for (std::size_t c = 0; c < chunks_; ++c) {
      for (std::size_t w = 0; w < words_per_chunk_; ++w) {
        for (std::uint64_t word = bits_[c * words_per_chunk_ + w]; word != 0; word &= word - 1) {
          f(c, w * 64 + std::countr_zero(word));
        }
      }
    }
  }

  void clear() {
    std::fill(bits_.begin(), bits_.end(), 0);
    std::fill(summary_.begin(), summary_.end(), 0);
    first_word_ = 0;
    size_ = 0;
  }

 private:
  // Remove: stores `word` (the chunk's word w with one bit cleared), clearing the chunk's summary
  // bit when that was its last slot.
  void Remove(std::size_t c, std::uint64_t* words, std::size_t w, std::uint64_t word) {
    words[w] = word;
    --size_;
    if (word != 0) return;
    for (std::size_t i = 0; i < words_per_chunk_; ++i) {
      if (words[i] != 0) return;
    }
    summary_[c / 64] &= ~(std::uint64_t{1} << (c % 64));
  }

  std::size_t words_per_chunk_;
  std::size_t chunks_ = 0;
  std::vector<std::uint64_t> bits_;     // chunk c's slots: words [c * words_per_chunk_, +words)
  std::vector<std::uint64_t> summary_;  // bit c: chunk c has a slot in the set
  std::size_t first_word_ = 0;          // no summary word below this one has a bit
  std::size_t size_ = 0;
};

}  // namespace weft::context_internal

#endif  // WEFT_CONTEXT_INTERNAL_SLOT_SET_H_
