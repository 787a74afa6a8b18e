// context_demo: weft's context switch in a few lines. A generator fiber produces Fibonacci
// numbers, one per switch; then 100,000 fibers are parked at once on pooled stacks (more than a
// stock kernel's memory-map limit would allow with a guard page on each) and finished.
//
//   ./bazelw run //examples:context_demo

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "weft/context/context.h"
#include "weft/context/stack.h"

namespace {

// The generator: each switch back to the consumer carries the next Fibonacci number.
void Fibonacci(weft::Transfer t) {
  std::uint64_t a = 0, b = 1;
  for (;;) {
    t = weft::jump_context(t.from, &a);
    std::uint64_t next = a + b;
    a = b;
    b = next;
  }
}

// A fiber that parks once, then exits; its on-top function runs on the resumer's stack.
void ParkOnce(weft::Transfer t) {
  t = weft::jump_context(t.from);
  weft::exit_context(t.from, nullptr, [](weft::Transfer in) {
    weft::discard_context(in.from);
    return in;
  });
}

}  // namespace

int main() {
  weft::StackPool& pool = weft::StackPool::default_pool();

  weft::Result<weft::Stack> stack = pool.allocate({.size = 32 << 10});
  if (!stack) {
    std::fprintf(stderr, "allocate: %s\n", stack.error_code().message().c_str());
    return 1;
  }
  weft::Context gen = *weft::make_context(stack->span(), &Fibonacci);
  weft::set_context_name(gen, "fibonacci");
  std::printf("first Fibonacci numbers from a generator fiber:");
  for (int i = 0; i < 12; ++i) {
    weft::Transfer t = weft::jump_context(gen);
    gen = t.from;
    std::printf(" %llu", static_cast<unsigned long long>(*static_cast<std::uint64_t*>(t.data)));
  }
  std::printf("\n");
  weft::discard_context(gen);  // parked for good: release it before its stack goes back
  stack->reset();

  constexpr int kFibers = 100000;
  auto start = std::chrono::steady_clock::now();
  std::vector<weft::Stack> stacks;
  std::vector<weft::Context> parked;
  stacks.reserve(kFibers);
  parked.reserve(kFibers);
  for (int i = 0; i < kFibers; ++i) {
    weft::Result<weft::Stack> s = pool.allocate({.size = 16 << 10});
    if (!s) {
      std::fprintf(stderr, "fiber %d: %s\n", i, s.error_code().message().c_str());
      return 1;
    }
    parked.push_back(weft::jump_context(*weft::make_context(s->span(), &ParkOnce)).from);
    stacks.push_back(std::move(s).value());
  }
  weft::StackPoolStats st = pool.stats();
  auto parked_at = std::chrono::steady_clock::now();
  for (weft::Context c : parked) weft::jump_context(c);
  auto done = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::printf(
      "%d fibers parked at once: %zu on guarded stacks, %zu on compact stacks, %zu memory "
      "mappings (vm.max_map_count budget for guards: %zu; guard markers: %s)\n",
      kFibers, st.live_guarded, st.live_compact, st.mappings, st.guarded_mapping_budget,
      st.guard_markers ? "yes" : "no, one mapping per guarded stack");
  std::printf("spawn+park %.1f ms, resume+finish %.1f ms\n", ms(parked_at - start),
              ms(done - parked_at));
  return 0;
}
