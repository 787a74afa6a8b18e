// examples/echo_server.cc: a TCP echo server, one fiber per connection (the handler is
// examples/echo.h).
//
//   ./bazelw run -c opt //examples:echo_server -- --port 7000
//   ./bazelw run -c opt //examples:load_driver -- --mode echo --port 7000 --conns 100

#include "weft/examples/echo.h"
#include "weft/examples/server_main.h"

int main(int argc, char** argv) {
  using namespace weft;
  const char* usage = "a TCP echo server, one fiber per connection: echo_server --port 7000";
  examples::ServerFlags flags = examples::ParseServerFlags(argc, argv, usage);
  return examples::Serve("echo_server", flags, &examples::EchoConnection);
}
