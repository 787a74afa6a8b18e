// alloc/slab_model_test.cc: the slab's remote-free list under the model checker
// (--config=model). Two threads free objects into the owner's list while the owner collects:
// every object comes back exactly once, and what a freeing thread wrote into its object happens
// before the owner's reuse of it (a data race on the object's contents otherwise).

#include <new>
#include <set>

#include "gtest/gtest.h"
#include "weft/alloc/slab.h"
#include "weft/model/model.h"
#include "weft/model/testing.h"

namespace weft {
namespace {

using model::Cell;

TEST(SlabModelTest, RemoteFreesComeBackOnceAndBeforeReuse) {
  model::Report r = model::check([] {
    SlabAllocator slab(64);
    void* p = slab.allocate();
    void* q = slab.allocate();
    // The objects' contents, checked for races (never destroyed: a Cell's checker state is
    // keyed by its address, which is the point).
    auto* cp = new (p) Cell<int>(0);
    auto* cq = new (q) Cell<int>(0);
    model::thread a([&] {
      cp->set(1);
      SlabAllocator::free_mt(p);
    });
    model::thread b([&] {
      cq->set(2);
      SlabAllocator::free_mt(q);
    });
    std::size_t back = 0;
    while (back < 2) {
      back += slab.collect_mt_frees();
      if (back < 2) model::yield();
    }
    WEFT_MODEL_ASSERT(back == 2 && slab.collect_mt_frees() == 0);
    std::set<void*> again = {slab.allocate(), slab.allocate()};
    WEFT_MODEL_ASSERT(again == (std::set<void*>{p, q}));  // each exactly once
    cp->set(10);  // reuse: ordered after thread a's write by the list's release/acquire
    cq->set(20);
    a.join();
    b.join();
    slab.free(p);
    slab.free(q);
  });
  model::ExpectAllSchedulesPass(r);
}

}  // namespace
}  // namespace weft
