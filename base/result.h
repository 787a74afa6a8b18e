// base/result.h: weft's error convention. Every fallible weft call returns a `weft::Result<T>`
// (or `weft::Result<void>`): a value, or a `std::errc` that the caller branches on. The codes
// are errno's (ENOMEM when memory maps run out, EINVAL for bad arguments, ...), so they read the
// same in logs as the system calls underneath. No exceptions cross weft's API for expected
// failures.
//
// Defines: weft::Result<T>, weft::Result<void>.

#ifndef WEFT_BASE_RESULT_H_
#define WEFT_BASE_RESULT_H_

// First, for the C++20 check.
// clang-format off
#include "weft/base/config.h"
// clang-format on

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <system_error>
#include <utility>

namespace weft {

// Result<T>: either a T or an error code. Reading value() of an error is a programming error: it
// prints the code and aborts (check ok() first).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, like std::expected
  Result(std::errc error) : error_(error) {}     // NOLINT

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  // error: the failure; std::errc{} (0) when ok().
  std::errc error() const { return error_; }
  std::error_code error_code() const { return std::make_error_code(error_); }

  T& value() & {
    check();
    return *value_;
  }
  const T& value() const& {
    check();
    return *value_;
  }
  T&& value() && {
    check();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check() const {
    if (!value_.has_value()) {
      std::fprintf(stderr, "weft: Result::value() called on an error: %s\n",
                   std::make_error_code(error_).message().c_str());
      std::abort();
    }
  }

  std::optional<T> value_;
  std::errc error_{};
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(std::errc error) : error_(error) {}  // NOLINT

  bool ok() const { return error_ == std::errc{}; }
  explicit operator bool() const { return ok(); }
  std::errc error() const { return error_; }
  std::error_code error_code() const { return std::make_error_code(error_); }

 private:
  std::errc error_{};
};

}  // namespace weft

#endif  // WEFT_BASE_RESULT_H_
