#!/usr/bin/env python3
"""The architecture, checked: knowledge points one way, doors → core → BLE.

Reads the targets' dependencies in Package.swift and the `import` lines of every Swift file
under Sources/, and fails (exit 1, each violation on a line) when:
  - the core (GatewayCore) depends on or imports a door, a transport (HTTPServer, MQTT, Access, Sockets,
    Dashboard and their C libraries) or a backend (BlueZ, DBus, Simulator);
  - a door (HTTPAPI, MQTTBridge, ESPHomeProxy, SerialBridge) depends on or imports another door
    or a backend (the doors reach Bluetooth through the core's Central); one edge is allowed,
    named in FRONTS: the HTTP API fronts the serial door (its WebSocket route and
    /v1/serial-ports call into SerialBridge), and the serial door knows no other door;
  - BLE, the model, depends on or imports any module of ours;
  - a module with an allow-list (ONLY: the management channel) depends on or imports a module
    of ours outside it;
  - a library below the core (Threading, DBus, BLE, BlueZ, Sensors, Simulator, HTTPServer,
    Access, MQTT, ...) depends on or imports the core or a door;
  - the core or a layer below it that the doors share (QUIET: GatewayCore, BlueZ, BLE, DBus,
    Threading, Sensors) names a door's route or a transport in its code: a route (`/v1/`,
    `POST /...`), or HTTP, REST, SSE (Server-Sent Events, Last-Event-ID, event-stream, its
    `event:`/`data:` fields in a literal), WebSocket, MQTT or ESPHome in an identifier or a string literal — log lines included. The
    door that asked logs its own words; framing belongs to the door's transport. Comments are
    not checked (they may say which door shows a thing), nor URLs (`http://` is data: a D-Bus
    DTD, an Eddystone URL scheme), nor import lines (the rules above cover those).
The executables (Sources/gattway, Sources/gattway-sim) wire everything and may import anything;
so may their wiring (Launch: the options and the start, apart to be tested), which nothing but
an executable may import.

Usage: Tests/architecture/check.py [ROOT]   (default: the repository). `--self-test` runs it on
Tests/architecture/wrong-imports/ and wrong-words/, trees with deliberate violations, and fails
unless each is caught (and nothing else is).
"""
import os
import re
import sys

CORE = {"GatewayCore"}
DOORS = {"HTTPAPI", "MQTTBridge", "ESPHomeProxy", "SerialBridge"}
TRANSPORTS = {"HTTPServer", "MQTT", "Access", "Dashboard", "Sockets", "CMicroHTTPD", "CMosquitto"}
BACKENDS = {"BlueZ", "DBus", "CDBus", "Simulator", "Management"}
EXECUTABLES = {"gattway", "gattway-sim"}
WIRING = {"Launch"}
# Door → door edges that are part of the design: {door: {doors it fronts}}.
FRONTS = {"HTTPAPI": {"SerialBridge"}}
# Modules that may know these of ours and nothing else: the management channel reads the kernel's
# socket and hands out BLE values, knowing no D-Bus, no BlueZ, no core and no door.
ONLY = {"Management": {"CLinux", "BLE", "Threading"}}
# Below the doors: no route, no transport, no door named in code.
QUIET = {"GatewayCore", "BlueZ", "BLE", "DBus", "Threading", "Sensors", "Management"}
# Found inside any identifier or word, whatever the case: webSocketUpgrade, MQTTClient, "esphome".
TRANSPORT_WORDS = ("http", "websocket", "mqtt", "esphome")
# A route, a request line, SSE's names and its fields as a string literal writes them ("\\nevent: ").
ROUTE = re.compile(r'/v1/|\b(?:GET|POST|PUT|PATCH|DELETE)(?= /)|Server-Sent|Last-Event-ID|event-stream'
                   r'|(?:"|\\n)(?:id|event|data|retry): ')
URL = re.compile(r'https?://[^\s"\\)]*')


def targets(package_swift):
    """{target name: set of dependency names} from the manifest's target declarations."""
    text = open(package_swift).read()
    found = {}
    for m in re.finditer(r'\.(?:target|executableTarget|testTarget|systemLibrary)\(\s*name:\s*"([^"]+)"', text):
        name, rest = m.group(1), text[m.end():]
        deps = set()
        d = re.match(r'\s*,\s*dependencies:\s*\[([^\]]*)\]', rest)
        if d:
            deps = set(re.findall(r'"([^"]+)"', d.group(1)))
        found[name] = deps
    return found


def imports(directory):
    """{module: [(file, line number, imported module)]} for the Swift files of each Sources/ folder."""
    found = {}
    sources = os.path.join(directory, "Sources")
    for module in sorted(os.listdir(sources)):
        for root, _, files in os.walk(os.path.join(sources, module)):
            for f in sorted(files):
                if not f.endswith(".swift"):
                    continue
                path = os.path.join(root, f)
                for n, line in enumerate(open(path, errors="replace"), 1):
                    m = re.match(r'^\s*(?:@testable\s+|@_exported\s+|@preconcurrency\s+)*import\s+(?:(?:struct|class|enum|protocol|func|var|let|typealias)\s+)?([A-Za-z_][A-Za-z0-9_]*)', line)
                    if m:
                        found.setdefault(module, []).append((os.path.relpath(path, directory), n, m.group(1)))
    return found


def forbidden(module, ours):
    """What `module` may not know, and why."""
    if module in EXECUTABLES:
        return {}
    if module in WIRING:
        return {e: "an executable" for e in EXECUTABLES}
    wiring = {w: "the executables' wiring" for w in WIRING}
    if module in CORE:
        return {**{d: "a door" for d in DOORS}, **{t: "a transport" for t in TRANSPORTS}, **{b: "a backend" for b in BACKENDS}, **wiring}
    if module in DOORS:
        return {**{d: "another door" for d in DOORS - {module} - FRONTS.get(module, set())}, **{b: "a backend (doors reach Bluetooth through the core)" for b in BACKENDS}, **wiring}
    if module == "BLE":
        return {o: "BLE is the model: it knows no module of ours" for o in ours - {"BLE"}}
    if module in ONLY:
        allowed = ONLY[module]
        return {o: f"{module} may use only {', '.join(sorted(allowed))} of ours" for o in ours - allowed - {module}}
    return {**{c: "the core (a library below it)" for c in CORE}, **{d: "a door (a library below the core)" for d in DOORS}, **wiring}


def code_of(text):
    """Swift source with its comments blanked (line numbers kept): code and string literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):  # Swift's block comments nest
            depth, j = 0, i
            while j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                    if depth == 0:
                        break
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.match(r'(#*)("""|")', text[i:i + 12])):  # a string literal, raw or not
            hashes, quote = m.group(1), m.group(2)
            end, j = quote + hashes, i + len(m.group(0))
            while j < n and not text.startswith(end, j):
                if quote == '"' and text[j] == "\n":
                    break
                j += 2 if not hashes and text[j] == "\\" else 1
            j = min(n, j + len(end)) if text.startswith(end, j) else j
            out.append(text[i:j])
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def door_words(line):
    """The route and transport words a line of code names."""
    line = URL.sub("", line)
    found = [m.group(0).lstrip('"').replace("\\n", "").strip() for m in ROUTE.finditer(line)]
    for token in re.findall(r"[A-Za-z][A-Za-z0-9_]*", line):
        parts = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", token)
        if any(w in token.lower() for w in TRANSPORT_WORDS) or "REST" in parts or "sse" in (p.lower() for p in parts):
            found.append(token)
    return found


def words(directory):
    """[(file, line number, module, words)] where a QUIET module's code names a route or transport."""
    found = []
    sources = os.path.join(directory, "Sources")
    for module in sorted(QUIET & set(os.listdir(sources))):
        for root, _, files in os.walk(os.path.join(sources, module)):
            for f in sorted(files):
                if not f.endswith(".swift"):
                    continue
                path = os.path.join(root, f)
                for n, line in enumerate(code_of(open(path, errors="replace").read()).split("\n"), 1):
                    if re.match(r"\s*(?:@\w+\s+)*import\s", line):
                        continue
                    named = door_words(line)
                    if named:
                        found.append((os.path.relpath(path, directory), n, module, named))
    return found


def check(directory):
    manifest = targets(os.path.join(directory, "Package.swift"))
    ours = {name for name in manifest if not name.endswith("Tests") and name not in EXECUTABLES}
    sources = imports(directory)
    problems = []
    for module, deps in sorted(manifest.items()):
        if module.endswith("Tests") or module not in os.listdir(os.path.join(directory, "Sources")):
            continue
        rules = forbidden(module, ours)
        for dep in sorted(deps):
            if dep in rules:
                problems.append(f"Package.swift: {module} depends on {dep}, {rules[dep]}")
    for module, lines in sorted(sources.items()):
        rules = forbidden(module, ours)
        for path, n, imported in lines:
            if imported in rules:
                problems.append(f"{path}:{n}: {module} imports {imported}, {rules[imported]}")
    for path, n, module, named in words(directory):
        problems.append(f"{path}:{n}: {module} names {', '.join(named)} (below the doors, code names no route or"
                        " transport: the door that asked logs its own words)")
    return problems


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.argv[1:] == ["--self-test"]:
        failed, total = False, 0
        for name in ("wrong-imports", "wrong-words"):
            fixture = os.path.join(here, name)
            problems = check(fixture)
            expected = [line.strip() for line in open(os.path.join(fixture, "expected.txt")) if line.strip()]
            missing = [e for e in expected if not any(e in p for p in problems)]
            for p in problems:
                print(f"caught ({name}): " + p)
            if missing or len(problems) != len(expected):
                print(f"architecture check self-test FAILED on {name}: expected {len(expected)} violations, caught"
                      f" {len(problems)}; not caught: {missing}", file=sys.stderr)
                failed = True
            total += len(expected)
        if failed:
            return 1
        print(f"architecture check self-test: all {total} deliberate violations caught")
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(here))
    problems = check(root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"architecture: {len(problems)} violation(s) of doors → core → BLE", file=sys.stderr)
        return 1
    modules = sorted(m for m in imports(root))
    print(f"architecture: doors → core → BLE holds ({len(modules)} modules' imports and Package.swift checked;"
          f" no route or transport named in {', '.join(sorted(QUIET))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
