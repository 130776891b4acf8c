#!/usr/bin/env bash
# The Debian 12 packages gattway needs to build, run and be tested.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# build: libmicrohttpd, libdbus; run: dbus-daemon (for --simulate); test: python3-venv (pytest,
# bleak), bluez (bleak asks `bluetoothctl --version`), curl and jq (the README's polling examples), chromium (the browser test), openssl
# (the TLS tests make their certificates).
$SUDO apt-get install -y -qq --no-install-recommends \
    libmicrohttpd-dev libdbus-1-dev nettle-dev pkg-config dbus python3-venv bluez curl jq chromium openssl >/dev/null
