#!/usr/bin/env bash
# tools/soak.sh: soak runs. The echo and chat example servers each serve the load driver for many
# rounds while misbehaving clients churn (they vanish mid-message, half-close, stop reading,
# connect and leave at once, and reconnect); every round checks exact delivery to the
# well-behaved clients, exact echoes to the half-closed ones, and the server's sockets back to their
# baseline and its RSS flat (within 10% of the first round's). Prints one JSON line per round and
# a summary; exits non-zero if any round fails.
#
#   tools/soak.sh                     # about 2 minutes here: 20 rounds per server
#   WEFT_SOAK_SCALE=10 tools/soak.sh  # 10x the rounds
#   WEFT_FAULTS=0.01 tools/soak.sh    # with soft faults injected (base/fault.h) on both sides
#   tools/soak.sh --help
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

scale="${WEFT_SOAK_SCALE:-1}"
case "$scale" in '' | *[!0-9]*) echo "tools/soak.sh: WEFT_SOAK_SCALE must be a whole number" >&2; exit 2 ;; esac
rounds=$((20 * scale))

./bazelw build -c opt //examples:echo_server //examples:chat_server //examples:load_driver >&2
bin="$(./bazelw info -c opt bazel-bin 2>/dev/null)/examples"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=examples/drive_server.sh
source examples/drive_server.sh
status=0
run() {  # name server driver-args...
  local name="$1" server="$2"
  shift 2
  drive_server "$name" "$bin/$server" "$bin/load_driver" "$tmp" -- --rounds "$rounds" "$@" ||
    status=1
  python3 - "$name" "$tmp/$name.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
ok = sum(r["pass"] for r in rows)
print(f"{sys.argv[1]}: {ok}/{len(rows)} rounds passed; {sum(r['delivered'] for r in rows)} of "
      f"{sum(r['expected'] for r in rows)} messages delivered; "
      f"{sum(r['churn_connections'] for r in rows)} churning connections, "
      f"{sum(r['churn_bad'] for r in rows)} bad; server sockets {rows[0]['server_sockets'][0]} -> "
      f"{rows[-1]['server_sockets'][1]}, RSS {rows[0]['server_rss_kib'][1]} -> "
      f"{rows[-1]['server_rss_kib'][1]} KiB")
EOF
}

run echo echo_server --mode echo --conns 100 --messages 500 --churn 8
run chat chat_server --mode chat --conns 20 --messages 100 --churn 8
exit "$status"
