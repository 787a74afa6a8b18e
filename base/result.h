// base/result.h: weft's error convention. Every fallible weft call returns a `weft::Result<T>`
// (or `weft::Result<void>`): a value, or a `std::errc` that the caller branches on. The codes
// are errno's (ENOMEM when memory maps run out, EINVAL for bad arguments, ...), so they read the
// same in logs as the system calls underneath. No exceptions cross weft's API for expected
// failures.
//
// Result<T> has the names and meaning of C++23's std::expected<T, std::errc> (has_value,
// value_or, error_or, and_then, transform, or_else, transform_error, comparison with an error),
// so code written against it moves to std::expected by an alias; what differs is how an error is
// made (`return std::errc::timed_out;` here, `return std::unexpected(...)` there), that an
// error is never std::errc{} (which Result<void> reads as success), and that value() of an
// error aborts rather than throws.
//
//   Result<Config> Load(std::string_view path) {
//     WEFT_ASSIGN_OR_RETURN(auto file, fs::File::open(path));
//     WEFT_ASSIGN_OR_RETURN(std::string text, ReadAll(file));
//     return Parse(text).transform([](Config c) { return c.with_defaults(); });
//   }
//   std::cout << Load("x.toml") << "\n";  // the value if it prints, or "weft: No such file..."
//
// Defines: weft::Result<T>, weft::Result<void>, weft::to_string(std::errc), operator<< for
// Result, WEFT_RETURN_IF_ERROR, WEFT_ASSIGN_OR_RETURN; std::formatter<weft::Result<T>> where
// the standard library has <format> (GCC 12's does not: there, stream or use to_string).

#ifndef WEFT_BASE_RESULT_H_
#define WEFT_BASE_RESULT_H_

// First, for the C++20 check.
// clang-format off
#include "weft/base/config.h"
// clang-format on

#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#if __has_include(<format>)
#include <format>
#include <sstream>
#endif

namespace weft {

template <typename T>
class Result;

namespace result_internal {
template <typename R>
struct IsResult : std::false_type {};
template <typename U>
struct IsResult<Result<U>> : std::true_type {};

// NoErrorCode: the code of a Result<T> made from std::errc{} without a value (a bug: an
// error needs a code, errno read after a call that did not set it). Debug builds (NDEBUG not
// defined) abort with a message, so tests find it; others report io_error rather than end the
// process.
inline std::errc NoErrorCode() {
#ifndef NDEBUG
  std::fprintf(stderr,
               "weft: Result<T> made from std::errc{} (0, no error) without a value; an error "
               "needs a code\n");
  std::abort();
#else
  return std::errc::io_error;
#endif
}

[[noreturn]] inline void ValueOfError(std::errc e) {
  std::fprintf(stderr, "weft: Result::value() called on an error: %s\n",
               std::make_error_code(e).message().c_str());
  std::abort();
}

// Invoke: f(args...) as the Result of transform: Result<void> for a void f, else Result<U>.
template <typename F, typename... A>
auto Transform(F&& f, A&&... args) {
  using U = std::remove_cv_t<std::invoke_result_t<F, A...>>;
  static_assert(!std::is_same_v<U, std::errc>,
                "transform's function returns a value, not an error");
  if constexpr (std::is_void_v<U>) {
    std::invoke(std::forward<F>(f), std::forward<A>(args)...);
    return Result<void>();
  } else {
    return Result<U>(std::invoke(std::forward<F>(f), std::forward<A>(args)...));
  }
}
}  // namespace result_internal

// to_string: the error's text, as glibc's strerror gives it ("Connection timed out"), also
// where the C library has none for it (Windows' CRT knows no network or cancellation codes).
inline std::string to_string(std::errc e) {
  std::string text = std::make_error_code(e).message();
  if (text.rfind("Unknown error", 0) != 0) return text;
  switch (e) {
    case std::errc::timed_out:
      return "Connection timed out";
    case std::errc::operation_canceled:
      return "Operation canceled";
    case std::errc::connection_reset:
      return "Connection reset by peer";
    case std::errc::connection_refused:
      return "Connection refused";
    case std::errc::connection_aborted:
      return "Software caused connection abort";
    case std::errc::not_connected:
      return "Transport endpoint is not connected";
    case std::errc::address_in_use:
      return "Address already in use";
    case std::errc::address_not_available:
      return "Cannot assign requested address";
    case std::errc::network_unreachable:
      return "Network is unreachable";
    case std::errc::host_unreachable:
      return "No route to host";
    case std::errc::operation_would_block:
      return "Resource temporarily unavailable";
    case std::errc::not_supported:
      return "Operation not supported";
    case std::errc::message_size:
      return "Message too long";
    default:
      return text;
  }
}

// Result<T>: either a T or an error code. Reading value() of an error is a programming error: it
// prints the code and aborts (check ok() first, or use value_or).
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_reference_v<T> && !std::is_same_v<std::remove_cv_t<T>, std::errc>,
                "Result<T> holds a value type other than std::errc");

 public:
  using value_type = T;
  using error_type = std::errc;
  template <typename U>
  using rebind = Result<U>;

  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, like std::expected
  // Result(error): an error. std::errc{} is no error: a Result<T> made from it would read as
  // failed here and as success once passed on as a Result<void>; see NoErrorCode.
  Result(std::errc error) : error_(error) {  // NOLINT
    if (error == std::errc{}) [[unlikely]]
      error_ = result_internal::NoErrorCode();
  }
  // Result(std::in_place, args...): the value made in place (no move of a T).
  template <typename... A>
  explicit Result(std::in_place_t, A&&... args) : value_(std::in_place, std::forward<A>(args)...) {}

  bool ok() const { return value_.has_value(); }
  bool has_value() const { return ok(); }
  explicit operator bool() const { return ok(); }
  // error: the failure (never std::errc{}); std::errc{} when ok().
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

  // value_or: the value, or `fallback` (implicitly converted to T, as std::expected) for an
  // error.
  template <typename U>
  T value_or(U&& fallback) const& {
    static_assert(std::is_convertible_v<U&&, T>, "value_or's fallback converts to T implicitly");
    if (ok()) return *value_;
    return std::forward<U>(fallback);
  }
  template <typename U>
  T value_or(U&& fallback) && {
    static_assert(std::is_convertible_v<U&&, T>, "value_or's fallback converts to T implicitly");
    if (ok()) return std::move(*value_);
    return std::forward<U>(fallback);
  }
  // error_or: the error, or `fallback` when there is a value.
  std::errc error_or(std::errc fallback) const { return ok() ? fallback : error_; }

  // and_then: f(value) (which returns a Result<U>), or this error as a Result<U>.
  template <typename F>
  auto and_then(F&& f) & {
    return AndThen(*this, std::forward<F>(f));
  }
  template <typename F>
  auto and_then(F&& f) const& {
    return AndThen(*this, std::forward<F>(f));
  }
  template <typename F>
  auto and_then(F&& f) && {
    return AndThen(std::move(*this), std::forward<F>(f));
  }
  // transform: Result<U> of f(value) (Result<void> if f returns nothing), or this error.
  template <typename F>
  auto transform(F&& f) & {
    return Map(*this, std::forward<F>(f));
  }
  template <typename F>
  auto transform(F&& f) const& {
    return Map(*this, std::forward<F>(f));
  }
  template <typename F>
  auto transform(F&& f) && {
    return Map(std::move(*this), std::forward<F>(f));
  }
  // or_else: this value, or f(error) (which returns a Result<T>: a recovery, or another error).
  template <typename F>
  Result or_else(F&& f) const& {
    static_assert(std::is_same_v<std::remove_cvref_t<std::invoke_result_t<F, std::errc>>, Result>,
                  "or_else's function returns the same Result<T>");
    if (ok()) return *this;
    return std::invoke(std::forward<F>(f), error_);
  }
  template <typename F>
  Result or_else(F&& f) && {
    static_assert(std::is_same_v<std::remove_cvref_t<std::invoke_result_t<F, std::errc>>, Result>,
                  "or_else's function returns the same Result<T>");
    if (ok()) return std::move(*this);
    return std::invoke(std::forward<F>(f), error_);
  }
  // transform_error: this value, or the error f(error) (a std::errc, not std::errc{}) makes of
  // this one.
  template <typename F>
  Result transform_error(F&& f) const& {
    static_assert(std::is_same_v<std::invoke_result_t<F, std::errc>, std::errc>,
                  "transform_error's function returns a std::errc");
    if (ok()) return *this;
    return Result(std::invoke(std::forward<F>(f), error_));
  }
  template <typename F>
  Result transform_error(F&& f) && {
    static_assert(std::is_same_v<std::invoke_result_t<F, std::errc>, std::errc>,
                  "transform_error's function returns a std::errc");
    if (ok()) return std::move(*this);
    return Result(std::invoke(std::forward<F>(f), error_));
  }

  // r == e: r holds the error e (never true for a value, whatever e is).
  friend bool operator==(const Result& r, std::errc e) { return !r.ok() && r.error_ == e; }

 private:
  template <typename Self, typename F>
  static auto AndThen(Self&& self, F&& f) {
    using R =
        std::remove_cvref_t<std::invoke_result_t<F, decltype(*std::forward<Self>(self).value_)>>;
    static_assert(result_internal::IsResult<R>::value, "and_then's function returns a Result");
    if (!self.ok()) return R(self.error_);
    return std::invoke(std::forward<F>(f), *std::forward<Self>(self).value_);
  }
  template <typename Self, typename F>
  static auto Map(Self&& self, F&& f) {
    using R =
        decltype(result_internal::Transform(std::forward<F>(f), *std::forward<Self>(self).value_));
    if (!self.ok()) return R(self.error_);
    return result_internal::Transform(std::forward<F>(f), *std::forward<Self>(self).value_);
  }

  void check() const {
    if (!value_.has_value()) result_internal::ValueOfError(error_);
  }

  std::optional<T> value_;
  std::errc error_{};
};

template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;
  using error_type = std::errc;
  template <typename U>
  using rebind = Result<U>;

  Result() = default;
  Result(std::errc error) : error_(error) {}  // NOLINT

  bool ok() const { return error_ == std::errc{}; }
  bool has_value() const { return ok(); }
  explicit operator bool() const { return ok(); }
  std::errc error() const { return error_; }
  std::error_code error_code() const { return std::make_error_code(error_); }
  // value: nothing; on an error it prints the code and aborts, as Result<T>::value().
  void value() const {
    if (!ok()) result_internal::ValueOfError(error_);
  }
  std::errc error_or(std::errc fallback) const { return ok() ? fallback : error_; }

  // and_then: f() (a Result<U>), or this error as a Result<U>.
  template <typename F>
  auto and_then(F&& f) const {
    using R = std::remove_cvref_t<std::invoke_result_t<F>>;
    static_assert(result_internal::IsResult<R>::value, "and_then's function returns a Result");
    if (!ok()) return R(error_);
    return std::invoke(std::forward<F>(f));
  }
  // transform: Result<U> of f() (Result<void> if f returns nothing), or this error.
  template <typename F>
  auto transform(F&& f) const {
    using R = decltype(result_internal::Transform(std::forward<F>(f)));
    if (!ok()) return R(error_);
    return result_internal::Transform(std::forward<F>(f));
  }
  // or_else: success, or f(error) (a Result<void>).
  template <typename F>
  Result or_else(F&& f) const {
    static_assert(std::is_same_v<std::remove_cvref_t<std::invoke_result_t<F, std::errc>>, Result>,
                  "or_else's function returns a Result<void>");
    if (ok()) return *this;
    return std::invoke(std::forward<F>(f), error_);
  }
  // transform_error: success, or the error f(error) returns (a std::errc{} from f is success).
  template <typename F>
  Result transform_error(F&& f) const {
    static_assert(std::is_same_v<std::invoke_result_t<F, std::errc>, std::errc>,
                  "transform_error's function returns a std::errc");
    if (ok()) return *this;
    return Result(std::invoke(std::forward<F>(f), error_));
  }

  friend bool operator==(const Result& r, std::errc e) { return !r.ok() && r.error_ == e; }

 private:
  std::errc error_{};
};

namespace result_internal {
template <typename T, typename CharT, typename Traits>
concept Streamable = requires(std::basic_ostream<CharT, Traits>& os, const T& v) {
  os << v;
};
}  // namespace result_internal

// os << r: the value when it can be streamed ("ok" when it cannot, and for Result<void>), or
// "weft: " and the error's text.
template <typename T, typename CharT, typename Traits>
std::basic_ostream<CharT, Traits>& operator<<(std::basic_ostream<CharT, Traits>& os,
                                              const Result<T>& r) {
  if (!r.ok()) return os << "weft: " << to_string(r.error()).c_str();
  if constexpr (!std::is_void_v<T> && result_internal::Streamable<T, CharT, Traits>) {
    return os << *r;
  } else {
    return os << "ok";
  }
}

}  // namespace weft

// WEFT_RETURN_IF_ERROR(expr): evaluates expr (a Result); if it holds an error, returns that
// std::errc from the enclosing function, whose return type must take one (a Result<U>).
#define WEFT_RETURN_IF_ERROR(expr)                        \
  do {                                                    \
    if (auto weft_result_ = (expr); !weft_result_.ok()) { \
      return weft_result_.error();                        \
    }                                                     \
  } while (false)

// WEFT_ASSIGN_OR_RETURN(lhs, expr): evaluates expr (a Result<T>); on an error returns it as
// WEFT_RETURN_IF_ERROR does, else moves the value into lhs, which may declare a variable
// (`WEFT_ASSIGN_OR_RETURN(auto conn, listener.accept());`). One statement; not in an if
// without braces.
#define WEFT_ASSIGN_OR_RETURN(lhs, expr) \
  WEFT_ASSIGN_OR_RETURN_IMPL_(WEFT_RESULT_CONCAT_(weft_result_, __COUNTER__), lhs, expr)
#define WEFT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.error();                \
  lhs = std::move(tmp).value()
#define WEFT_RESULT_CONCAT_(a, b) WEFT_RESULT_CONCAT_IMPL_(a, b)
#define WEFT_RESULT_CONCAT_IMPL_(a, b) a##b

#if defined(__cpp_lib_format) && __cpp_lib_format >= 201907L
// std::format("{}", r): as operator<< writes it (string options such as width apply). Compiled
// only where the standard library has <format>; GCC 12's has not.
template <typename T, typename CharT>
struct std::formatter<weft::Result<T>, CharT> : std::formatter<std::basic_string<CharT>, CharT> {
  template <typename Context>
  auto format(const weft::Result<T>& r, Context& ctx) const {
    std::basic_ostringstream<CharT> os;
    os << r;
    return std::formatter<std::basic_string<CharT>, CharT>::format(os.str(), ctx);
  }
};
#endif

#endif  // WEFT_BASE_RESULT_H_
