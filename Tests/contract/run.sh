#!/usr/bin/env bash
# schemathesis (every check, a fixed seed) against a fresh `gattway --simulate`: openapi.yaml
# is the contract. Fails on any failure, and when gattway did not survive the run.
#   Tests/contract/run.sh BIN_DIR PYTHON [MAX_EXAMPLES] [SEED]
set -euo pipefail
bin="$(realpath "$1")" py="$(realpath -s "$2")" examples="${3:-5}" seed="${4:-12}"
cd "$(dirname "$0")"
log="$(mktemp)" tokens="$(mktemp)" simulated="$(mktemp)"
# With a token, so that schemathesis' ignored_auth check sees every operation refuse a request
# without one; no rate limit, as schemathesis is one client sending as fast as it can.
token="contract-$(head -c 18 /dev/urandom | base64 | tr +/ -_)"
echo "$token" > "$tokens"
# The built-in devices, with BlueZ's waits shortened (a connect to a beacon that never answers,
# an ATT request a fault leaves unanswered) and gattway's for a pairing answer: what is checked
# is the answers' shape, and the run waits out such a case many times.
"$bin/gattway-sim" --print-config | "$py" -c '
import json, sys
c = json.load(sys.stdin)
c["adapter"].update(connectTimeoutMs=2000, attTimeoutMs=3000, pairingTimeoutMs=4000)
json.dump(c, sys.stdout)' > "$simulated"
"$bin/gattway" --simulate "$simulated" --listen 127.0.0.1:0 --state-dir none --tokens "$tokens" --rate-limit 0 \
    --pairing-timeout 3 2> "$log" &
gw=$!
trap 'kill "$gw" 2>/dev/null || true; wait "$gw" 2>/dev/null || true; rm -f "$log" "$tokens" "$simulated"' EXIT
base=""
for _ in $(seq 100); do
    base="$(grep -o 'listening on http://[^ ]*' "$log" | head -1 | cut -d' ' -f3)" && [ -n "$base" ] && break
    sleep 0.1
done
[ -n "$base" ] || { cat "$log"; echo "gattway did not start" >&2; exit 1; }
# Not fuzzed: /v1/ws and /v1/devices/{id}/serial are WebSocket upgrades (their messages are no
# HTTP; the e2e tests and the conformance suite drive them), and a 200 from /v1/events is an SSE stream that lasts until the
# client leaves, which schemathesis would wait out request after request.
rc=0
SCHEMATHESIS_HOOKS=hooks PYTHONPATH=. "$py" -m schemathesis.cli --config-file schemathesis.toml run ../../openapi.yaml \
    --url "$base" --header "Authorization: Bearer $token" --checks all --seed "$seed" --max-examples "$examples" --workers 1 \
    --exclude-path /v1/ws --exclude-path '/v1/devices/{id}/serial' --exclude-path /v1/events --request-timeout 40 \
    --suppress-health-check too_slow,filter_too_much --no-color || rc=$?
if ! kill -0 "$gw" 2>/dev/null; then
    tail -40 "$log"; echo "FAILED: gattway did not survive the run" >&2; exit 1
fi
exit "$rc"
