#!/usr/bin/env bash
# bleak, unchanged, against gattway-sim, twice: as it is (one adapter, bleak's default
# arguments), then with two adapters and bleak told to use hci1. Each run starts the simulator
# on its own private bus, waits for its first output line (the bus address, printed once
# org.bluez is served), runs faithfulness.py with DBUS_SYSTEM_BUS_ADDRESS set, stops the simulator.
#
#   Tests/bleak/run.sh [path/to/gattway-sim] [faithfulness.py options...]
#
# Exit code: the first failing run's faithfulness.py code (1 a step failed, 2 watchdog), 3 if
# the simulator did not come up, 0 if both passed.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
sim="$root/.build/debug/gattway-sim"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then sim="$1"; shift; fi
if [ ! -x "$sim" ]; then
    echo "run.sh: no gattway-sim at $sim (swift build --product gattway-sim, or pass its path)" >&2
    exit 3
fi
options=("$@")

# check "SIM ARGS" [faithfulness.py options...]: one run; its exit code as above.
check() {
    local sim_args=($1)
    shift
    local log
    log="$(mktemp /tmp/gattway-sim-log.XXXXXX)"
    coproc SIM { exec "$sim" "${sim_args[@]}"; }
    local sim_pid=$SIM_PID
    # A coprocess's descriptors are not inherited by subshells: keep a copy for the drain below.
    local sim_out
    exec {sim_out}<&"${SIM[0]}"
    trap "kill -TERM $sim_pid 2>/dev/null; wait $sim_pid 2>/dev/null" EXIT

    # The first line says the bus is ready; the read's timeout only bounds a simulator that hangs.
    local first=""
    if ! IFS= read -r -t 60 first <&"$sim_out" || [ "${first#DBUS_SYSTEM_BUS_ADDRESS=}" = "$first" ]; then
        echo "run.sh: gattway-sim ${sim_args[*]} did not report its bus address (got: ${first:-nothing})" >&2
        return 3
    fi
    local address="${first#DBUS_SYSTEM_BUS_ADDRESS=}"
    # Keep draining the simulator's log so that it never blocks on a full pipe.
    cat <&"$sim_out" >"$log" &
    local drain=$!

    DBUS_SYSTEM_BUS_ADDRESS="$address" "${PYTHON:-python3}" "$here/faithfulness.py" "$@"
    local rc=$?
    kill -TERM "$sim_pid" 2>/dev/null
    wait "$sim_pid" 2>/dev/null
    wait "$drain" 2>/dev/null
    exec {sim_out}<&-
    trap - EXIT
    if [ $rc -ne 0 ]; then
        echo "--- gattway-sim ${sim_args[*]} log ---" >&2
        cat "$log" >&2
    fi
    rm -f "$log"
    return $rc
}

echo "== one adapter, bleak's defaults"
check "" "${options[@]}"
rc=$?
if [ $rc -eq 0 ]; then
    echo "== two adapters, bleak on hci1"
    check "--adapters 2" --adapter hci1 "${options[@]}"
    rc=$?
fi
exit $rc
