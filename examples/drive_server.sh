# examples/drive_server.sh: sourced by examples/examples_smoke_test.sh and tools/soak.sh.
#
# drive_server NAME SERVER DRIVER DIR [SERVER_FLAGS...] -- [DRIVER_FLAGS...]
#   Starts the example server SERVER on a free port with 2 workers, floods it with the load
#   driver DRIVER (--server_pid: it gates on the server's sockets and RSS), its JSON lines going to
#   stdout and DIR/NAME.json, then stops the server with SIGTERM, also when the driver's gate
#   failed (the server prints its counts as it exits). Returns 1 if the gate failed or the server
#   did not exit cleanly.
drive_server() {
  local name="$1" server="$2" driver="$3" dir="$4"
  shift 4
  local server_flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    server_flags+=("$1")
    shift
  done
  [ $# -eq 0 ] || shift
  rm -f "$dir/$name.port"
  "$server" --port 0 --workers 2 --port_file "$dir/$name.port" "${server_flags[@]}" &
  local pid=$! status=0
  for _ in $(seq 1 500); do [ -s "$dir/$name.port" ] && break; sleep 0.01; done
  "$driver" --port "$(cat "$dir/$name.port")" --server_pid "$pid" --workers 2 "$@" |
    tee "$dir/$name.json" || status=1
  kill -TERM "$pid"
  wait "$pid" || status=1
  return "$status"
}
