#!/usr/bin/env bash
# The container, end to end (a CI step):
#   1. a Docker engine: ../shared/dockerlab/start beside the repository (left running afterwards,
#      so later runs reuse it), or any docker that already answers;
#   2. the image from Docker/Dockerfile as it is;
#   3. gattway-sim on the host, on its own private bus, whose directory the container gets as
#      /run/dbus (read-only), as it would get the host's real /run/dbus;
#   4. the container as its default user, with compose.yaml's hardening, driven over HTTP with
#      curl: state, scan, connect, read, notifications; then its HEALTHCHECK, `--simulate` inside
#      the image, a clean stop on SIGTERM, and the image size.
# Usage: Tests/docker/run.sh [GATTWAY-SIM]   (default: the debug build's gattway-sim)
set -euo pipefail
cd "$(dirname "$0")/../.."
sim_bin=${1:-"$(swift build --show-bin-path)/gattway-sim"}
image=gattway:test
device=F0:00:00:00:00:01
size_goal_mb=120

ctr="" sim_pid=""
# shellcheck source=steps.sh
source Tests/docker/steps.sh gattway-docker-test

show_failure() {
    if [ -n "$ctr" ]; then echo "--- container logs ($ctr)"; docker logs "$ctr" 2>&1 | tail -n 100; fi
    if [ -s "$work/sim.log" ]; then echo "--- gattway-sim log"; tail -n 40 "$work/sim.log"; fi
    if [ -s "$work/build.log" ] && [ "$step_name" = "build the image" ]; then echo "--- docker build"; tail -n 40 "$work/build.log"; fi
}
tidy_up() {
    [ -z "$ctr" ] || docker rm -f "$ctr" >/dev/null 2>&1
    # The simulator leads its own process group (setsid): that ends its dbus-daemon too.
    if [ -n "$sim_pid" ]; then
        kill -TERM -- "-$sim_pid" 2>/dev/null || kill -TERM "$sim_pid" 2>/dev/null
        wait "$sim_pid" 2>/dev/null
    fi
}

# HTTP: `call METHOD PATH [JSON]` sets $status and $body (status 000: no answer).
call() {
    local out
    out=$(curl -sS --max-time 30 -X "$1" ${3:+-H 'Content-Type: application/json' --data "$3"} \
        -w '\n%{http_code}' "$base$2") || { status=000 body="(no answer)"; return 1; }
    status=${out##*$'\n'} body=${out%$'\n'*}
}
expect_ok() {
    call "$@" || fail "$1 $2: no answer"
    [[ $status == 2?? ]] || fail "$1 $2 -> $status $(compact)"
    echo "$1 $2 -> $status $(compact)" | cut -c1-160
}
# `json EXPR`: evaluates a Python expression on $body, parsed as `j`.
json() { python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$body" "$1"; }
compact() { json 'json.dumps(j, separators=(",", ":"))' 2>/dev/null || echo "$body"; }
powered_on() { call GET /v1/state 2>/dev/null && [[ $status == 200 ]] && [[ $(json 'j["state"]' 2>/dev/null) == poweredOn ]]; }
listed() { call GET /v1/devices 2>/dev/null && [[ $(json "'$device' in [d['id'] for d in j['devices']]" 2>/dev/null) == True ]]; }
healthy() { [[ $(docker inspect --format '{{.State.Health.Status}}' "$ctr") == healthy ]]; }

start_docker

step "build the image"
# The context is what the Dockerfile copies: a .build/ of several hundred MB stays out of it
# (a .dockerignore is not allowed at the top level).
tar -cf - Package.swift Sources Docker Packaging/build-release \
    | docker build --network host --force-rm -f Docker/Dockerfile -t "$image" - > "$work/build.log" 2>&1 \
    || fail "docker build (its log follows)"
grep -E '^(Step [0-9]+/[0-9]+ : RUN Packaging/build-release|Build of product|Successfully built)' "$work/build.log" | cut -c1-120
grep -q -- '---> Using cache' "$work/build.log" && echo "(some layers from cache)"

step "gattway-sim on the host"
[ -x "$sim_bin" ] || fail "$sim_bin not found: swift build --product gattway-sim, or pass its path"
setsid "$sim_bin" > "$work/sim.log" 2>&1 &
sim_pid=$!
wait_for 15 grep -q '^DBUS_SYSTEM_BUS_ADDRESS=' "$work/sim.log" || fail "gattway-sim printed no bus address"
address=$(grep -m1 '^DBUS_SYSTEM_BUS_ADDRESS=' "$work/sim.log" | cut -d= -f2-)
socket=${address#unix:path=} socket=${socket%%,*}
[ -S "$socket" ] || fail "no socket at $socket (address $address)"
echo "bus: $address"
bus_env=()   # the image's default address is /run/dbus/system_bus_socket
[ "$(basename "$socket")" = system_bus_socket ] || bus_env=(-e "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/dbus/$(basename "$socket")")

step "container up (default user, read-only, no capabilities) until poweredOn"
port=$(free_port 18089)
base=http://127.0.0.1:$port
t_start=$(now)
ctr=$(docker run -d --network host --name "gattway-test-$$" \
    -v "$(dirname "$socket"):/run/dbus:ro" "${bus_env[@]}" \
    --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
    "$image" --listen "127.0.0.1:$port") || fail "docker run"
wait_for 30 powered_on || fail "not poweredOn within 30 s: $status $(compact)"
echo "GET /v1/state -> $(compact), $(since "$t_start") s after docker run"

step "runs as a non-root user"
uid=$(docker exec "$ctr" id -u)
echo "uid $uid ($(docker exec "$ctr" id))"
[ "$uid" != 0 ] || fail "the container runs as root"

step "scan until $device is listed"
expect_ok POST /v1/scan '{}'
wait_for 15 listed || fail "$device not listed: $(compact)"
echo "GET /v1/devices -> $(json "[d['id'] for d in j['devices']]")"

step "connect"
expect_ok POST "/v1/devices/$device/connect" '{"timeout": 10}'
[[ $(json 'j["state"]') == connected ]] || fail "state after connect: $(compact)"

step "read 2a19 (battery level)"
expect_ok GET "/v1/devices/$device/characteristics/2a19/value"
[[ $(json 'j["length"]') -ge 1 ]] || fail "empty value: $(compact)"

step "notifications on 2a37 (heart rate measurement)"
expect_ok POST "/v1/devices/$device/characteristics/2a37/notifications"
[[ $(json 'j["isNotifying"]') == True ]] || fail "isNotifying is not true: $(compact)"

step "a notification arrives over SSE"
events=$(curl -sN --max-time 4 "$base/v1/events?device=$device&characteristic=2a37" || true)
grep -q '^event: notification' <<<"$events" || fail "no notification event within 4 s: $(head -c 300 <<<"$events")"
grep -m1 '^data: ' <<<"$events"

step "HEALTHCHECK turns healthy"
wait_for 60 healthy || fail "health: $(docker inspect --format '{{json .State.Health}}' "$ctr")"
echo "healthy $(since "$t_start") s after docker run"
body=$(docker inspect --format '{{json .State.Health.Log}}' "$ctr")
echo "the check printed: $(json 'j[-1]["Output"].strip()')"

step "SIGTERM stops it cleanly"
t_stop=$(now)
docker stop -t 10 "$ctr" >/dev/null
code=$(docker inspect --format '{{.State.ExitCode}}' "$ctr")
echo "exit code $code after $(since "$t_stop") s"
[ "$code" = 0 ] || fail "exit code $code on docker stop (137: it ignored SIGTERM and was killed)"
docker rm "$ctr" >/dev/null
ctr=""

step "--simulate inside the image"
port=$(free_port "$((port + 1))")
base=http://127.0.0.1:$port
ctr=$(docker run -d --network host --name "gattway-test-sim-$$" \
    --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
    "$image" --simulate --listen "127.0.0.1:$port") || fail "docker run --simulate"
wait_for 30 powered_on || fail "not poweredOn within 30 s: $status $(compact)"
expect_ok POST /v1/scan '{}'
wait_for 15 listed || fail "$device not listed: $(compact)"
echo "GET /v1/devices -> $(json "[d['id'] for d in j['devices']]")"

step "image size"
bytes=$(docker image inspect "$image" --format '{{.Size}}')
mb=$(( (bytes + 500000) / 1000000 ))
echo "image size: $mb MB (goal < $size_goal_mb MB)"
[ "$mb" -lt "$size_goal_mb" ] || echo "warning: the image is over the size goal"

print_timings
echo "docker: all passed"
