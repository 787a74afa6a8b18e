// api/internal/console_events.h: a test hook for Windows, where signals are console control
// events: DeliverConsoleEvent runs weft's console control handler as Windows would, so tests can
// check the plumbing where the emulator (Wine) delivers no console events. Nothing on POSIX.
//
// Defines: weft::api_internal::DeliverConsoleEvent.

#ifndef WEFT_API_INTERNAL_CONSOLE_EVENTS_H_
#define WEFT_API_INTERNAL_CONSOLE_EVENTS_H_

#ifdef _WIN32
namespace weft::api_internal {

// DeliverConsoleEvent: what weft's handler returns for `event` (CTRL_C_EVENT...): true if an
// open SignalSet owns the signal the event stands for (the event is then queued there), false if
// none does (Windows then runs the next handler, by default the one that ends the process). Any
// thread.
bool DeliverConsoleEvent(unsigned long event);

}  // namespace weft::api_internal
#endif

#endif  // WEFT_API_INTERNAL_CONSOLE_EVENTS_H_
