// context/internal/sanitizers.h: WEFT_ASAN / WEFT_TSAN are 1 when the translation unit is built
// with AddressSanitizer / ThreadSanitizer (GCC's __SANITIZE_*__ or clang's __has_feature), else 0.

#ifndef WEFT_CONTEXT_INTERNAL_SANITIZERS_H_
#define WEFT_CONTEXT_INTERNAL_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#endif
#ifndef WEFT_ASAN
#define WEFT_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif
#ifndef WEFT_TSAN
#define WEFT_TSAN 0
#endif

// WEFT_NO_SANITIZE_ADDRESS: a function ASan leaves uninstrumented (its locals on the real stack).
#if WEFT_ASAN
#define WEFT_NO_SANITIZE_ADDRESS __attribute__((no_sanitize_address))
#else
#define WEFT_NO_SANITIZE_ADDRESS
#endif

#endif  // WEFT_CONTEXT_INTERNAL_SANITIZERS_H_
