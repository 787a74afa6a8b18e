// Uses weft's Chase-Lev deque and nothing else of weft: push, pop, steal on one thread.
#include <cstdio>

#include "weft/deque/chase_lev.h"

int main() {
  weft::ChaseLevDeque<int> dq;
  for (int i = 1; i <= 3; ++i) dq.push(i);
  int stolen = 0;
  const bool stole = dq.steal(&stolen) == weft::StealResult::kSuccess;
  auto popped = dq.pop();
  if (!stole || stolen != 1 || !popped || *popped != 3) {
    std::printf("deque_only: unexpected results\n");
    return 1;
  }
  std::printf("deque_only: ok\n");
  return 0;
}
