// examples/echo.h: the echo server's connection handler (examples/echo_server.cc), a header so
// that a test can serve it on any listener, real or simulated (examples/sim_examples_test.cc).

#ifndef WEFT_EXAMPLES_ECHO_H_
#define WEFT_EXAMPLES_ECHO_H_

#include <cstddef>

#include "weft/api/weft.h"

namespace weft::examples {

// EchoConnection: writes back every byte read, until end of stream, an error, or `cancel`.
inline void EchoConnection(net::TcpStream s, const CancellationToken& cancel) {
  char buf[16 << 10];
  for (;;) {
    Result<std::size_t> n = s.read(buf, sizeof buf, {.cancel = &cancel});
    if (!n.ok() || *n == 0) return;  // error, end of stream, or shutdown
    if (!s.write_all(buf, *n, {.cancel = &cancel}).ok()) return;
  }
}

}  // namespace weft::examples

#endif  // WEFT_EXAMPLES_ECHO_H_
