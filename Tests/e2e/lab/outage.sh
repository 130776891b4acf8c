#!/bin/bash
# Runs in the realbluez guest (guest-exec). RB-Periph out of range until the host creates
# /run/realbluez/TRIGGER (at most LIMIT s): its link ends and it neither advertises nor accepts a
# connection, its GATT application staying registered (its handles unchanged); then it
# advertises again, as the lab's peripheral does, and the line "back EPOCH" says when.
#
# Why not `btmgmt power off`: btvirt's controller goes on advertising and accepting connections
# while its host has powered it off, and the power on's HCI Reset then drops such a link without
# a Disconnection Complete to the central, whose kernel keeps it (BT_DISCONN) for ever: see
# docs/testing.md, "Outages that swallow attempts". A device out of range does neither.
#
# Usage: outage.sh TRIGGER LIMIT CENTRAL_ADDRESS LAB_LIB_DIR
set -u
TRIGGER=$1 LIMIT=$2 CENTRAL=$3 LIB=$4
HERE=$(dirname "$(readlink -f "$0")")
S=/run/realbluez
[ -f $S/guest.env ] && . $S/guest.env
: "${RB_PERIPH_ADAPTER:=hci1}"
idx=${RB_PERIPH_ADAPTER#hci}
ready=/run/lab-outage-ready.$$
# The advertisements: the last outage's owner (this script's own) goes with them, then the
# peripheral's are removed (after the first outage there are none: that answer is no error).
if [ -f /run/lab-adverts.pid ]; then
    old=$(cat /run/lab-adverts.pid)
    kill "$old" 2>/dev/null
    for i in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.02; done
fi
btmgmt --index "$idx" rm-adv 0 >/dev/null 2>&1
btmgmt --index "$idx" disconnect -t 1 "$CENTRAL" >/dev/null
# Their owner for the return, started now (Python takes seconds to start under TCG).
setsid /usr/bin/python3 -u "$HERE/adverts.py" "$RB_PERIPH_ADAPTER" "$S/$TRIGGER" "$ready" "$LIB" \
    >>$S/lab-adverts.log 2>&1 </dev/null &
echo $! > /run/lab-adverts.pid
echo "gone $(date +%s.%N)"
end=$((SECONDS + LIMIT))
while [ ! -e "$ready" ]; do
    # Python under TCG, beside CI's other suites, and bluetoothd letting go of the last owner's
    # advertisements (adverts.py asks again for 10 s): 40 s more than the outage.
    [ $SECONDS -ge $((end + 40)) ] && { echo "the advertisements did not come back"; tail -3 $S/lab-adverts.log; exit 1; }
    sleep 0.01
done
echo "back $(cat "$ready")"
rm -f "$ready"
