// api/signals.cc: what SignalSet does alike on every platform (moves, destruction, the one-shot
// signals::wait). Opening, receiving and closing are per platform: api/internal/signals_posix.cc
// (a sigaction handler and a self-pipe) and api/internal/signals_windows.cc (console control
// events).

#include "weft/api/signals.h"

#include <utility>

namespace weft {

SignalSet::SignalSet(SignalSet&& other) noexcept : state_(std::move(other.state_)) {}

SignalSet& SignalSet::operator=(SignalSet&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

SignalSet::~SignalSet() { close(); }

Result<SignalSet> SignalSet::open(std::initializer_list<int> signals) {
  return open(std::span<const int>(signals.begin(), signals.size()));
}

namespace signals {

Result<int> wait(std::initializer_list<int> signals, const WaitOptions& options) {
  Result<SignalSet> set = SignalSet::open(signals);
  if (!set.ok()) return set.error();
  return set->recv(options);
}

}  // namespace signals

}  // namespace weft
