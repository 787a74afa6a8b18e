// The consumer's own sync/mutex.h: nothing like weft's (weft's is weft/sync/mutex.h).
#ifndef CONSUMER_SYNC_MUTEX_H_
#define CONSUMER_SYNC_MUTEX_H_

namespace consumer {
struct Mutex {  // a stand-in: the consumer's own type of the same name as weft::Mutex
  static constexpr int kMarker = 7;
};
}  // namespace consumer

#endif  // CONSUMER_SYNC_MUTEX_H_
