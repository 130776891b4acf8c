#!/usr/bin/env bash
# The whole test suite, as the README and CI run it:
#   1. swift test: unit tests (UUIDs, marshalling, error table, JSON), D-Bus tests on a private
#      dbus-daemon, the simulator's D-Bus behaviour, the HTTP server on loopback;
#   2. end-to-end HTTP tests against a real `gattway --simulate` (pytest);
#   3. the faithfulness check: bleak, unchanged, against `gattway-sim`.
# Needs the Debian packages from Tests/install-deps.sh. Python tools go into .build/venv.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

step "build"
swift build --build-tests

step "swift test"
swift test --skip-build 2>&1 | tee .build/swift-test.log | grep -vE '^(◇|↳) ' || { tail -50 .build/swift-test.log; exit 1; }
grep -qE 'Test run with [0-9]+ tests? .*passed' .build/swift-test.log

step "python test tools"
if [ ! -x .build/venv/bin/python ]; then python3 -m venv .build/venv; fi
.build/venv/bin/pip install -q --disable-pip-version-check pytest bleak

step "end-to-end (HTTP against gattway --simulate)"
GATTWAY_BIN_DIR="$(swift build --show-bin-path)" .build/venv/bin/python -m pytest -q Tests/e2e

step "bleak faithfulness (bleak against gattway-sim)"
PYTHON=.build/venv/bin/python bash Tests/bleak/run.sh "$(swift build --show-bin-path)/gattway-sim"

step "all passed"
