#!/usr/bin/env bash
# The README's first command, as a new user runs it: in a fresh container of the Swift image
# (swift:6.3-bookworm, Debian 12 with the toolchain and no package lists, as root, no sudo),
# from the repository's tracked files. It must install what it needs, build, start gattway on
# the simulator and log the dashboard's URL; the page and /v1/state must then answer.
# A CI step (Tests/run.sh), bounded: 20 minutes in all.
# Usage: Tests/docker/first-run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
lab="$(dirname "$repo")/shared/dockerlab"
image=swift:6.3-bookworm
limit=1200
work=$(mktemp -d /tmp/gattway-first-run.XXXXXX)
ctr=""
cleanup() {
    local rc=$?
    set +e
    if [ "$rc" -ne 0 ] && [ -n "$ctr" ]; then echo "--- the container's output (last 60 lines)"; docker logs "$ctr" 2>&1 | tail -n 60; fi
    [ -z "$ctr" ] || docker rm -f "$ctr" >/dev/null 2>&1
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The first command of the README: the first line of its first ```sh block.
command=$(awk '/^```sh$/ { getline; print; exit }' README.md)
[[ $command == *"swift run gattway --simulate"* ]] || fail "the README's first command does not start gattway --simulate: $command"
echo "the README's first command: $command"

if [ -f "$lab/start" ]; then
    bash "$lab/start" > "$work/lab.log" 2>&1 || { cat "$work/lab.log"; fail "dockerlab start"; }
elif ! docker info >/dev/null 2>&1; then
    fail "no docker engine, and no $lab/start"
fi

# What a clone has: the tracked files (as they are in the work tree), no .build.
git ls-files -z | tar --null -T - -czf "$work/src.tgz"
started=$(date +%s)
# Port 0 (GATTWAY_LISTEN), so that the host network's 8080 may be taken.
ctr=$(docker run -d --network host -e GATTWAY_LISTEN=127.0.0.1:0 -e FIRST_COMMAND="$command" -v "$work:/in:ro" "$image" \
    bash -c 'mkdir /gattway && cd /gattway && tar -xzf /in/src.tgz && eval "$FIRST_COMMAND"')
url=""
while [ -z "$url" ]; do
    (( $(date +%s) - started < limit )) || fail "no dashboard URL in the log within $limit s"
    [ "$(docker inspect -f '{{.State.Running}}' "$ctr")" = true ] || fail "the command ended: exit $(docker inspect -f '{{.State.ExitCode}}' "$ctr")"
    url=$(docker logs "$ctr" 2>&1 | sed -n 's|.*dashboard: open \(http://[^ ]*\) in a browser.*|\1|p' | head -n 1)
    [ -n "$url" ] || sleep 2
done
echo "dashboard URL logged $(( $(date +%s) - started )) s after docker run: $url"
page=$(curl -sS --max-time 10 -H 'Accept: text/html' "$url") || fail "GET $url: no answer"
[[ $page == *'<script src="/ui/app.js"'* ]] || fail "GET $url is not the dashboard: ${page:0:200}"
state=$(curl -sS --max-time 10 "${url}v1/state") || fail "GET /v1/state: no answer"
[[ $state == *'"state":"poweredOn"'* ]] || fail "GET /v1/state: $state"
echo "GET / -> the dashboard; GET /v1/state -> $state"
echo "first run as root in a fresh $image: passed in $(( $(date +%s) - started )) s"
