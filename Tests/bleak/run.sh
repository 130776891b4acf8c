#!/usr/bin/env bash
# bleak, unchanged, against gattway-sim: starts the simulator on its own private bus, waits for
# its first output line (the bus address, printed once org.bluez is served), runs
# faithfulness.py with DBUS_SYSTEM_BUS_ADDRESS set, stops the simulator.
#
#   Tests/bleak/run.sh [path/to/gattway-sim] [faithfulness.py options...]
#
# Exit code: faithfulness.py's (0 all steps passed, 1 a step failed, 2 watchdog), or 3 if the
# simulator did not come up.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
sim="$root/.build/debug/gattway-sim"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then sim="$1"; shift; fi
if [ ! -x "$sim" ]; then
    echo "run.sh: no gattway-sim at $sim (swift build --product gattway-sim, or pass its path)" >&2
    exit 3
fi

log="$(mktemp /tmp/gattway-sim-log.XXXXXX)"
coproc SIM { exec "$sim"; }
sim_pid=$SIM_PID
# A coprocess's descriptors are not inherited by subshells: keep a copy for the drain below.
exec {sim_out}<&"${SIM[0]}"
stop_sim() {
    kill -TERM "$sim_pid" 2>/dev/null
    wait "$sim_pid" 2>/dev/null
}
trap stop_sim EXIT

# The first line says the bus is ready; the read's timeout only bounds a simulator that hangs.
if ! IFS= read -r -t 60 first <&"$sim_out" || [ "${first#DBUS_SYSTEM_BUS_ADDRESS=}" = "$first" ]; then
    echo "run.sh: gattway-sim did not report its bus address (got: ${first:-nothing})" >&2
    exit 3
fi
address="${first#DBUS_SYSTEM_BUS_ADDRESS=}"
# Keep draining the simulator's log so that it never blocks on a full pipe.
cat <&"$sim_out" >"$log" &

DBUS_SYSTEM_BUS_ADDRESS="$address" "${PYTHON:-python3}" "$here/faithfulness.py" "$@"
rc=$?
stop_sim
trap - EXIT
if [ $rc -ne 0 ]; then
    echo "--- gattway-sim log ---" >&2
    cat "$log" >&2
fi
rm -f "$log"
exit $rc
