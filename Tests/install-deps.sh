#!/usr/bin/env bash
# The Debian 12 packages gattway needs to build, run and be tested.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# build: libmicrohttpd, libdbus; run: dbus-daemon (for --simulate); test: python3-venv (pytest,
# bleak), bluez (bleak asks `bluetoothctl --version`), curl, chromium (the browser test), openssl
# (the TLS tests make their certificates), libmosquitto-dev (the MQTT bridge) and mosquitto (its tests' broker).
$SUDO apt-get install -y -qq --no-install-recommends \
    libmicrohttpd-dev libdbus-1-dev nettle-dev pkg-config dbus python3-venv bluez curl chromium openssl \
    libmosquitto-dev mosquitto >/dev/null
