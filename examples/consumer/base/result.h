// The consumer's own base/result.h: nothing like weft's (weft's is weft/base/result.h).
#ifndef CONSUMER_BASE_RESULT_H_
#define CONSUMER_BASE_RESULT_H_

namespace consumer {
inline constexpr int kResultMarker = 42;  // the test checks it sees this header, not weft's
}  // namespace consumer

#endif  // CONSUMER_BASE_RESULT_H_
