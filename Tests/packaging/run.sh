#!/usr/bin/env bash
# The Debian package (issue 27), end to end, with ../shared/dockerlab (a CI step: Tests/run.sh's
# containers suite):
#   1. Packaging/build-deb twice, revisions 1 and 2: two packages of one release build, the
#      second an upgrade of the first;
#   2. a fresh debian:bookworm-slim: `apt-get install ./gattway_…-1.deb`, its dependencies from
#      Debian's archive; the user, its directories and groups, the conffiles; `gattway --simulate`
#      as the user gattway with the packaged configuration (its files in force, GET /v1/state, a
#      scan kept in /var/lib/gattway/state.json); then gattway.conf and tokens edited, the upgrade
#      to -2 keeps both and the state file; remove keeps them; purge takes them;
#   3. systemd in a container (as PID 1; dockerlab's images have none): the unit passes
#      `systemd-analyze verify` and `security --offline=true` at an exposure of at most 2.0, also
#      with the optional drop-in kernel-advertisements.conf, which gives gattway CAP_NET_ADMIN; the
#      package starts gattway.service at install (hardened, as gattway; active only after
#      READY=1), the watchdog's pings move WatchdogTimestamp; gattway-sim from the host serves
#      org.bluez on the container's system bus, where only the package's D-Bus policy lets
#      gattway call it (without the policy: unauthorized): poweredOn, a scan, a connect, a read;
#      `systemctl reload` takes a new token; journal lines carry their priority and no time of
#      their own; a mistake in gattway.conf fails the service without restarts, its FILE:LINE
#      a PRIORITY=3 line; a gattway stopped with SIGSTOP is restarted by the watchdog (state
#      restored); remove stops the service.
# A drop-in for the test gives the service a free port and WatchdogSec=3s.
# Usage: Tests/packaging/run.sh [GATTWAY-SIM]   (default: the debug build's gattway-sim)
set -euo pipefail
cd "$(dirname "$0")/../.."
sim_bin=${1:-"$(swift build --show-bin-path)/gattway-sim"}
systemd_image=gattway-systemd:test
exposure_limit=2.0

ctr="" sim_pid=""
# shellcheck source=../docker/steps.sh
source Tests/docker/steps.sh gattway-packaging-test

show_failure() {
    for log in "$work"/*.log; do [ -s "$log" ] && { echo "--- $(basename "$log") (last 40 lines)"; tail -n 40 "$log"; }; done
    if [ -n "$ctr" ]; then
        echo "--- the container's gattway journal, or its gattway log"
        docker exec "$ctr" sh -c 'journalctl -u gattway --no-pager -n 60 2>/dev/null || cat /tmp/gattway.log' 2>&1 | tail -n 60
    fi
}
tidy_up() {
    [ -z "$ctr" ] || docker rm -f "$ctr" >/dev/null 2>&1
    if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null; wait "$sim_pid" 2>/dev/null; fi
}

# `in_ctr CMD`: a bash command in the container.
in_ctr() { docker exec "$ctr" bash -c "$1"; }
state_is() { [[ $(curl -s --max-time 5 "http://127.0.0.1:$port/v1/state" || true) == *"\"state\":\"$1\""* ]]; }
expect() { [[ $2 == *"$1"* ]] || fail "expected \"$1\" in: $2"; }

start_docker

step "Packaging/build-deb, revisions 1 and 2"
Packaging/build-deb --revision 1 > "$work/build-deb.log" 2>&1 || fail "build-deb --revision 1"
tail -n 1 "$work/build-deb.log"
Packaging/build-deb --revision 2 > "$work/build-deb.log" 2>&1 || fail "build-deb --revision 2"
tail -n 1 "$work/build-deb.log"
version=$(sed -n 's/^let gattwayVersion = "\(.*\)"$/\1/p' Sources/gattway/main.swift)
arch=$(dpkg --print-architecture)
deb1=gattway_$version-1_$arch.deb deb2=gattway_$version-2_$arch.deb
for deb in "$deb1" "$deb2"; do [ -f ".build/packages/$deb" ] || fail "no .build/packages/$deb"; done
dpkg-deb -f ".build/packages/$deb1" Depends Recommends
expect "avahi-daemon" "$(dpkg-deb -f ".build/packages/$deb1" Recommends)"
files=$(dpkg-deb -c ".build/packages/$deb1")
for path in ./usr/bin/gattway ./lib/systemd/system/gattway.service ./usr/share/dbus-1/system.d/gattway.conf \
            ./etc/gattway/gattway.conf ./usr/share/doc/gattway/copyright ./usr/share/man/man1/gattway.1.gz \
            ./usr/share/gattway/kernel-advertisements.conf; do
    expect "$path" "$files"
done

step "install in a fresh debian:bookworm-slim (apt-get install ./$deb1)"
ctr=$(docker run -d --network host -v "$repo/.build/packages:/debs:ro" debian:bookworm-slim sleep infinity)
t_install=$(now)
in_ctr "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q /debs/$deb1" > "$work/apt.log" 2>&1 \
    || fail "apt-get install ./$deb1"
echo "installed in $(since "$t_install") s with what it needs from Debian's archive:" \
     "$(grep -c '^Setting up ' "$work/apt.log") packages set up"
expect "install ok installed $version-1" "$(in_ctr 'dpkg-query -W -f="\${Status} \${Version}" gattway')"
expect "install ok installed" "$(in_ctr 'dpkg-query -W -f="\${Status}" avahi-daemon')"  # a Recommends, for --esphome-api

step "the user, its directories, the conffiles"
user=$(in_ctr 'getent passwd gattway') || fail "no user gattway"
echo "$user"
IFS=: read -r _ _ uid _ _ home shell <<< "$user"
(( uid < 1000 )) || fail "gattway is not a system user (uid $uid)"
[ "$home" = /var/lib/gattway ] && [ "$shell" = /usr/sbin/nologin ] || fail "home $home, shell $shell"
groups=$(in_ctr 'id -nG gattway')
echo "groups: $groups"
[[ " $groups " == *" bluetooth "* ]] || fail "gattway is not in bluetooth (BlueZ came as a Recommends)"
expect "gattway gattway 750" "$(in_ctr 'stat -c "%U %G %a" /var/lib/gattway')"
expect "root gattway 640" "$(in_ctr 'stat -c "%U %G %a" /etc/gattway/tokens')"
expect "root gattway 640" "$(in_ctr 'stat -c "%U %G %a" /etc/gattway/sensor-keys')"
expect "root gattway 640" "$(in_ctr 'stat -c "%U %G %a" /etc/gattway/pairing-keys')"
conffiles=$(in_ctr 'dpkg-query -W -f="\${Conffiles}" gattway')
for file in gattway.conf tokens blocklist sensor-keys pairing-keys; do expect "/etc/gattway/$file " "$conffiles"; done
echo "conffiles: $(awk '{print $1}' <<< "$conffiles" | tr '\n' ' ')"
expect "gattway $version" "$(in_ctr 'gattway --version')"

step "gattway --simulate as the user gattway, with the packaged configuration"
port=$(free_port 18621)
in_ctr "echo \$\$ > /tmp/gattway.pid; exec setpriv --reuid=gattway --regid=gattway --init-groups \
    gattway --config /etc/gattway/gattway.conf --simulate --listen 127.0.0.1:$port --state-dir /var/lib/gattway \
    > /tmp/gattway.log 2>&1" &
wait_for 30 state_is poweredOn || fail "not poweredOn within 30 s: $(in_ctr 'cat /tmp/gattway.log')"
pid=$(in_ctr 'cat /tmp/gattway.pid')
expect "gattway" "$(in_ctr "stat -c %U /proc/$pid")"
log=$(in_ctr 'cat /tmp/gattway.log')
expect "GATT blocklist: 14 UUIDs from the default list, /etc/gattway/blocklist" "$log"
expect "bind key(s) from /etc/gattway/sensor-keys" "$log"
expect "pairing: 0 key(s) from /etc/gattway/pairing-keys" "$log"
expect '"scanning":true' "$(curl -s --max-time 10 -X POST --json '{}' "http://127.0.0.1:$port/v1/scan")"
wait_for 10 in_ctr 'grep -q "\"scan\"" /var/lib/gattway/state.json' || fail "no scan in state.json"
expect "gattway 600" "$(in_ctr 'stat -c "%U %a" /var/lib/gattway/state.json')"
in_ctr "kill $pid; for i in \$(seq 50); do [ -d /proc/$pid ] || exit 0; sleep 0.1; done; exit 1" || fail "gattway did not stop on SIGTERM"
state=$(in_ctr 'md5sum /var/lib/gattway/state.json')
echo "GET /v1/state poweredOn as $(in_ctr "id -un $uid"); state.json kept: $(in_ctr 'cat /var/lib/gattway/state.json')"

step "upgrade to $deb2: the edited configuration and the state stay"
in_ctr 'echo "max-body 70000   # edited by the test" >> /etc/gattway/gattway.conf
        echo "abcdefghijklmnop-edited" >> /etc/gattway/tokens'
in_ctr "DEBIAN_FRONTEND=noninteractive apt-get install -y -q /debs/$deb2" > "$work/apt.log" 2>&1 || fail "apt-get install ./$deb2"
expect "install ok installed $version-2" "$(in_ctr 'dpkg-query -W -f="\${Status} \${Version}" gattway')"
in_ctr 'grep -q "^max-body 70000   # edited by the test$" /etc/gattway/gattway.conf' || fail "the edit of gattway.conf is gone"
in_ctr 'grep -q "^abcdefghijklmnop-edited$" /etc/gattway/tokens' || fail "the edit of tokens is gone"
[ "$(in_ctr 'md5sum /var/lib/gattway/state.json')" = "$state" ] || fail "state.json changed or is gone"
leftovers=$(in_ctr 'ls /etc/gattway | grep -E "dpkg-(dist|new|old)" || true')
[ -z "$leftovers" ] || fail "dpkg left $leftovers"
expect "root gattway 640" "$(in_ctr 'stat -c "%U %G %a" /etc/gattway/tokens')"
echo "gattway.conf and tokens as edited, state.json unchanged"

step "remove keeps configuration and state; purge takes them"
in_ctr 'DEBIAN_FRONTEND=noninteractive apt-get remove -y -q gattway' > "$work/apt.log" 2>&1 || fail "apt-get remove"
expect "deinstall ok config-files" "$(in_ctr 'dpkg-query -W -f="\${Status}" gattway')"
in_ctr 'grep -q "edited by the test" /etc/gattway/gattway.conf && test -f /var/lib/gattway/state.json' \
    || fail "remove took the configuration or the state"
in_ctr '! test -e /usr/bin/gattway' || fail "remove left /usr/bin/gattway"
in_ctr 'DEBIAN_FRONTEND=noninteractive apt-get purge -y -q gattway' > "$work/apt.log" 2>&1 || fail "apt-get purge"
in_ctr '! test -e /etc/gattway && ! test -e /var/lib/gattway' || fail "purge left $(in_ctr 'ls -d /etc/gattway /var/lib/gattway 2>&1')"
expect "not-installed" "$(in_ctr 'dpkg-query -W -f="\${db:Status-Status}" gattway 2>/dev/null || echo not-installed')"
echo "removed: /etc/gattway and state.json stayed; purged: both gone (the user gattway stays, as Debian's do)"
docker rm -f "$ctr" >/dev/null
ctr=""

step "systemd in a container"
printf '%s\n' 'FROM debian:bookworm-slim' \
    'RUN apt-get update && apt-get install -y --no-install-recommends systemd dbus && rm -f /usr/sbin/policy-rc.d' \
    | docker build --network host -t "$systemd_image" - > "$work/systemd-image.log" 2>&1 || fail "the systemd image"
mkdir -p "$work/dbus"
port=$(free_port 18631)
# systemd as PID 1 wants cgroups and mounts of its own (the hardening's namespaces too).
# NET_ADMIN: in the bounding set of systemd, so that kernel-advertisements.conf can give it to gattway.
ctr=$(docker run -d --network host --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock -v "$work/dbus:/run/dbus" \
    -v "$repo/.build/packages:/debs:ro" -e container=docker "$systemd_image" /lib/systemd/systemd)
wait_for 30 in_ctr 'systemctl is-system-running 2>/dev/null | grep -qE "running|degraded"' || fail "systemd did not come up"
in_ctr "mkdir -p /etc/systemd/system/gattway.service.d && printf '%s\n' '[Service]' 'ExecStart=' \
    'ExecStart=/usr/bin/gattway --config /etc/gattway/gattway.conf --listen 127.0.0.1:$port' 'WatchdogSec=3s' \
    'TimeoutAbortSec=3s' > /etc/systemd/system/gattway.service.d/test.conf"
echo "systemd $(in_ctr 'systemctl --version | head -1 | cut -d" " -f2') up; the drop-in: port $port, WatchdogSec=3s"

step "install there: gattway.service enabled, started, READY"
in_ctr "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /debs/$deb1" \
    > "$work/apt.log" 2>&1 || fail "apt-get install ./$deb1 under systemd"
expect "enabled" "$(in_ctr 'systemctl is-enabled gattway')"
# Type=notify: the start job postinst waits for ends at READY=1.
expect "active" "$(in_ctr 'systemctl is-active gattway')"
expect "StatusText=listening on http://127.0.0.1:$port" "$(in_ctr 'systemctl show -p StatusText gattway')"
main_pid=$(in_ctr 'systemctl show -p MainPID --value gattway')
expect "gattway" "$(in_ctr "stat -c %U /proc/$main_pid")"
wait_for 10 state_is unsupported || fail "GET /v1/state: $(curl -s "http://127.0.0.1:$port/v1/state")"
pings=$(in_ctr 'systemctl show -p WatchdogTimestampMonotonic --value gattway')
sleep 2.5
[ "$(in_ctr 'systemctl show -p WatchdogTimestampMonotonic --value gattway')" != "$pings" ] || fail "no WATCHDOG=1 in 2.5 s"
echo "active as gattway (pid $main_pid), $(in_ctr 'systemctl show -p StatusText --value gattway'); WATCHDOG=1 arriving"

step "the unit: systemd-analyze verify and security"
# --man=no: dockerlab's image keeps no manual pages (a dpkg path-exclude), so man:gattway(1) cannot resolve there.
in_ctr 'systemd-analyze verify --man=no /lib/systemd/system/gattway.service' > "$work/verify.log" 2>&1 \
    || fail "systemd-analyze verify: $(cat "$work/verify.log")"
security=$(in_ctr 'systemd-analyze security --offline=true --no-pager /lib/systemd/system/gattway.service')
exposure=$(sed -n 's/.*Overall exposure level for gattway.service: \([0-9.]*\) .*/\1/p' <<< "$security")
grep -E '^✗' <<< "$security" || true
echo "exposure $exposure ($(grep -o 'Overall exposure level.*' <<< "$security" | cut -d' ' -f7-))"
awk -v e="$exposure" -v limit="$exposure_limit" 'BEGIN { exit !(e != "" && e <= limit) }' || fail "exposure $exposure above $exposure_limit"
# The optional drop-in (the kernel's advertisements): within the limit too, and its capability
# reaches gattway (the user gattway, NoNewPrivileges=yes), and only while it is in place.
dropin=/etc/systemd/system/gattway.service.d/kernel-advertisements.conf
in_ctr "cp /usr/share/gattway/kernel-advertisements.conf $dropin && systemctl daemon-reload"
in_ctr 'systemd-analyze verify --man=no /lib/systemd/system/gattway.service' > "$work/verify.log" 2>&1 \
    || fail "systemd-analyze verify with $dropin: $(cat "$work/verify.log")"
security=$(in_ctr 'systemd-analyze security --offline=true --no-pager /lib/systemd/system/gattway.service')
grep -q '^✗ CapabilityBoundingSet=~CAP_NET_ADMIN' <<< "$security" || fail "systemd-analyze security did not read $dropin"
exposure_kernel=$(sed -n 's/.*Overall exposure level for gattway.service: \([0-9.]*\) .*/\1/p' <<< "$security")
awk -v e="$exposure_kernel" -v limit="$exposure_limit" 'BEGIN { exit !(e != "" && e <= limit) }' \
    || fail "exposure with kernel-advertisements.conf $exposure_kernel above $exposure_limit"
# CapEff in /proc/PID/status: CAP_NET_ADMIN is bit 12.
cap_eff() { in_ctr 'awk "/^CapEff:/ { print \$2 }" /proc/$(systemctl show -p MainPID --value gattway)/status'; }
in_ctr 'systemctl restart gattway'
[ "$(cap_eff)" = 0000000000001000 ] || fail "with $dropin gattway's CapEff is $(cap_eff), not CAP_NET_ADMIN alone"
# reset-failed: these two restarts do not count toward StartLimitBurst for the steps below.
in_ctr "rm $dropin && systemctl daemon-reload && systemctl restart gattway && systemctl reset-failed gattway"
[ "$(cap_eff)" = 0000000000000000 ] || fail "without $dropin gattway's CapEff is $(cap_eff)"
echo "with kernel-advertisements.conf: exposure $exposure_kernel, gattway's CapEff CAP_NET_ADMIN; without: none"

step "BlueZ on the container's system bus, through the package's D-Bus policy only"
# gattway-sim (root, from the host) plays bluetoothd, which may own org.bluez; the policy that lets
# gattway call it is the package's (no BlueZ installed, and Debian's bus denies method calls).
in_ctr "printf '%s\n' '<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN\"' \
    ' \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">' \
    '<busconfig><policy user=\"root\"><allow own=\"org.bluez\"/></policy></busconfig>' \
    > /etc/dbus-1/system.d/test-bluetoothd.conf && systemctl reload dbus"
[ -x "$sim_bin" ] || fail "$sim_bin not found: swift build --product gattway-sim, or pass its path"
"$sim_bin" --bus "unix:path=$work/dbus/system_bus_socket" > "$work/sim.log" 2>&1 &
sim_pid=$!
wait_for 30 state_is poweredOn || fail "not poweredOn: $(curl -s "http://127.0.0.1:$port/v1/state")"
expect '"scanning":true' "$(curl -s --max-time 10 -X POST --json '{}' "http://127.0.0.1:$port/v1/scan")"
listed() { [[ $(curl -s --max-time 5 "http://127.0.0.1:$port/v1/devices") == *'"id":"F0:00:00:00:00:01"'* ]]; }
wait_for 15 listed || fail "F0:00:00:00:00:01 not listed"
expect '"state":"connected"' "$(curl -s --max-time 20 -X POST --json '{"timeout": 10}' "http://127.0.0.1:$port/v1/devices/F0:00:00:00:00:01/connect")"
read=$(curl -s --max-time 20 "http://127.0.0.1:$port/v1/devices/F0:00:00:00:00:01/characteristics/2a19/value")
expect '"source":"read"' "$read"
echo "poweredOn, scanned, connected, battery read: $read"
in_ctr 'mv /usr/share/dbus-1/system.d/gattway.conf /root/ && systemctl reload dbus && systemctl restart gattway'
wait_for 15 state_is unauthorized || fail "without the package's policy: $(curl -s "http://127.0.0.1:$port/v1/state")"
in_ctr 'mv /root/gattway.conf /usr/share/dbus-1/system.d/ && systemctl reload dbus && systemctl restart gattway'
wait_for 15 state_is poweredOn || fail "the policy back: $(curl -s "http://127.0.0.1:$port/v1/state")"
echo "without the package's policy: unauthorized; with it: poweredOn"

step "systemctl reload: a new token; the journal's priorities"
status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" "http://127.0.0.1:$port/v1/devices"; }
[ "$(status)" = 200 ] || fail "before any token: $(status)"
in_ctr 'echo reloaded-token-0123456789 >> /etc/gattway/tokens && systemctl reload gattway'
unauthorized() { [ "$(status)" = 401 ]; }
wait_for 10 unauthorized || fail "no token after the reload: $(status), not 401"
[ "$(status -H 'Authorization: Bearer reloaded-token-0123456789')" = 200 ] || fail "the new token is refused"
in_ctr 'echo "too short" >> /etc/gattway/tokens && systemctl reload gattway'
# The journal's lines of one priority, as gattway wrote them (-o cat: the message alone).
journal() { in_ctr "journalctl -u gattway -p $1..$1 -o cat --no-pager"; }
warned() { grep -q '^tokens: SIGHUP: /etc/gattway/tokens:.*keeping the tokens in force$' <<< "$(journal warning)"; }
wait_for 10 warned || fail "no PRIORITY=4 line of the bad token file: $(journal warning)"
grep -qx "gattway $version listening on http://127.0.0.1:$port" <<< "$(journal info)" \
    || fail "no PRIORITY=6 line 'gattway $version listening ...' as written, without a time"
[ "$(status -H 'Authorization: Bearer reloaded-token-0123456789')" = 200 ] || fail "a bad file dropped the tokens in force"
echo "a token added by reload is in force (401 without, 200 with); a bad file is a PRIORITY=4 line and changes nothing"

step "a mistake in gattway.conf: failed, not restarted, a PRIORITY=3 line"
in_ctr 'sed -i "/^too short$/d" /etc/gattway/tokens'   # a bad file would stop the new gattway at start
restarts=$(in_ctr 'systemctl show -p NRestarts --value gattway')
in_ctr 'echo "listen nowhere" >> /etc/gattway/gattway.conf; systemctl restart gattway || true'
failed() { [ "$(in_ctr 'systemctl is-failed gattway' || true)" = failed ]; }
wait_for 10 failed || fail "gattway.service is $(in_ctr 'systemctl is-active gattway' || true), not failed"
sleep 3   # RestartSec=2s: a restart would have come
[ "$(in_ctr 'systemctl show -p NRestarts --value gattway')" = "$restarts" ] || fail "restarted after exit status 2"
grep -q "^gattway: /etc/gattway/gattway.conf:[0-9]*: --listen takes HOST:PORT" <<< "$(journal err)" \
    || fail "no PRIORITY=3 line with FILE:LINE: $(journal err)"
echo "$(in_ctr 'systemctl show -p Result --value gattway'), exit $(in_ctr 'systemctl show -p ExecMainStatus --value gattway'), no restart: $(journal err | head -1)"
# Mended; reset-failed clears the start limit (5 in 300 s) this test's restarts come near.
in_ctr 'sed -i "/^listen nowhere$/d" /etc/gattway/gattway.conf; systemctl reset-failed gattway; systemctl start gattway'
wait_for 15 state_is poweredOn || fail "not back after the mend"

step "a wedged gattway (SIGSTOP) is restarted by the watchdog"
main_pid=$(in_ctr 'systemctl show -p MainPID --value gattway')
restarts=$(in_ctr 'systemctl show -p NRestarts --value gattway')
t_stop=$(now)
in_ctr "kill -STOP $main_pid"
restarted() { [ "$(in_ctr 'systemctl show -p NRestarts --value gattway')" -gt "$restarts" ] && state_is poweredOn; }
wait_for 20 restarted || fail "not restarted within 20 s"
grep -q "Watchdog timeout" <(in_ctr 'journalctl -u gattway --no-pager -o cat') || fail "no watchdog timeout in the journal"
echo "restarted $(since "$t_stop") s after SIGSTOP (WatchdogSec=3s); pid $main_pid -> $(in_ctr 'systemctl show -p MainPID --value gattway'); poweredOn"
[[ $(curl -s --max-time 5 -H 'Authorization: Bearer reloaded-token-0123456789' "http://127.0.0.1:$port/v1/restoration") == *'"scan"'* ]] \
    || fail "the scan was not restored from /var/lib/gattway"

step "remove: the service stops"
in_ctr 'DEBIAN_FRONTEND=noninteractive apt-get remove -y -q gattway' > "$work/apt.log" 2>&1 || fail "apt-get remove under systemd"
[ "$(in_ctr 'systemctl is-active gattway' || true)" != active ] || fail "gattway.service still active after remove"
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && fail "port $port still answers"
echo "gattway.service: $(in_ctr 'systemctl is-active gattway' || true)"

print_timings
echo "packaging: all passed (exposure $exposure)"
