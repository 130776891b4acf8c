#!/usr/bin/env bash
# The Debian 12 packages gattway needs: to build and run it with `--build-only` (the README's
# first command), and to test it too without. Works as root (containers, CI) and as a user with
# sudo; `apt-get update` first, since a fresh machine or image has no package lists.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
# build: libmicrohttpd, libdbus, nettle (BTHome's AES-CCM), libmosquitto (the MQTT bridge),
# pkg-config, dpkg-dev (Packaging/build-deb's dpkg-shlibdeps); run: dbus-daemon (for --simulate).
packages=(libmicrohttpd-dev libdbus-1-dev nettle-dev libmosquitto-dev pkg-config dpkg-dev dbus)
case "${1:-}" in
    --build-only) ;;
    "")
        # test: python3-venv (pytest, bleak, playwright), bluez (bleak asks `bluetoothctl
        # --version`), curl and jq (the polling examples of docs/sensors.md), chromium (the browser
        # tests), openssl (the TLS tests make their certificates), mosquitto (the MQTT tests' broker),
        # docker-compose (Docker/compose.mqtt.yaml run as it is, with ../shared/dockerlab),
        # avahi-daemon and avahi-utils (the ESPHome API's mDNS announcement, tested with a daemon
        # of the test's own in a network namespace; on a machine with systemd the package also
        # enables the system's avahi-daemon, as any desktop has it).
        packages+=(python3-venv bluez curl jq chromium openssl mosquitto docker-compose avahi-daemon avahi-utils) ;;
    *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac
echo "installing ${packages[*]} (apt-get${SUDO:+, with sudo})"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
