#!/usr/bin/env bash
# Docker/compose.mqtt.yaml as it is ("Many rooms" in docs/mqtt.md): Debian's mosquitto built from
# Docker/mosquitto.Dockerfile and two simulated gateways on a compose network, started with
# Debian's docker-compose; then Tests/docker/compose_check.py checks what the broker holds
# (availability, sensors heard by both, Home Assistant discovery without duplicate ids), kills
# one gateway (its process killed with SIGKILL: the broker says offline) and sees it come
# back (its restart policy, unless-stopped). A CI step, after Tests/docker/run.sh has built the gateway image (gattway:test).
# Usage: Tests/docker/compose-mqtt.sh PYTHON   (a python with paho-mqtt)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=$1
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export GATTWAY_IMAGE=${GATTWAY_IMAGE:-gattway:test} GATTWAY_MQTT_PORT=$(free_port) \
       GATTWAY_UPSTAIRS_PORT=$(free_port) GATTWAY_DOWNSTAIRS_PORT=$(free_port)
compose=(docker-compose --project-name "gattway-house-$$" -f Docker/compose.mqtt.yaml)
docker image inspect "$GATTWAY_IMAGE" >/dev/null || { echo "FAIL: no image $GATTWAY_IMAGE (Tests/docker/run.sh builds it)" >&2; exit 1; }
cleanup() {
    local rc=$?
    set +e
    if [ "$rc" -ne 0 ]; then echo "--- the containers' output (last 30 lines each)"; "${compose[@]}" logs --no-color --tail 30; fi
    "${compose[@]}" down --volumes --timeout 5 >/dev/null 2>&1
    exit "$rc"
}
trap cleanup EXIT
t0=$SECONDS
echo "-- build the broker's image, then up (broker on 127.0.0.1:$GATTWAY_MQTT_PORT)"
timeout 600 "${compose[@]}" build mosquitto > /tmp/compose-build-$$.log 2>&1 || { tail -30 /tmp/compose-build-$$.log; exit 1; }
rm -f /tmp/compose-build-$$.log
timeout 120 "${compose[@]}" up -d --no-build
echo "-- what the broker holds"
timeout 300 "$py" Tests/docker/compose_check.py "$GATTWAY_MQTT_PORT" up
for port in "$GATTWAY_UPSTAIRS_PORT" "$GATTWAY_DOWNSTAIRS_PORT"; do
    state=$(curl -sS --max-time 10 "http://127.0.0.1:$port/v1/state")
    echo "GET 127.0.0.1:$port/v1/state -> $state"
    [[ $state == *'"poweredOn"'* ]] || { echo "FAIL: not poweredOn" >&2; exit 1; }
done
echo "-- downstairs crashes (its process killed with SIGKILL from the host), then back by its restart policy"
# Not `docker kill`: Docker counts that as a manual stop, which unless-stopped does not undo.
pid=$(docker inspect --format '{{.State.Pid}}' "$("${compose[@]}" ps -q downstairs)")
timeout 240 "$py" Tests/docker/compose_check.py "$GATTWAY_MQTT_PORT" crash downstairs kill -KILL "$pid"
echo "the house in compose: passed in $((SECONDS - t0)) s"
