#!/usr/bin/env python3
"""Writes Sources/gattway/Linking/gattway.order: the functions of the release gattway that run
at start and idle, for lld's --symbol-ordering-file (Package.swift). Laid out together, they share pages: the
kernel maps 64 kB around each page a process touches (fault-around), so a few hundred kB of code
spread over 10 MB of .text made 7 MB of it resident.

It runs what the rss phase measures as idle (bench.py's Rig: a simulator with 2 devices, scan,
connect, 1 Hz notifications, then a few seconds) with gattway under callgrind, and lists, in
callgrind's order, every function of the gattway binary that ran (mangled names, as lld wants
them). Regenerate after changes that move what runs at start or idle:

    swift build -c release --static-swift-stdlib && nice -n 19 bench/order.py && \\
        swift build -c release --static-swift-stdlib      # (the second build links with it)

Needs valgrind. Names that a later build no longer has are skipped by the linker
(--no-warn-symbol-ordering), new functions go after the listed ones: an old list costs RSS,
never a link.
"""
import contextlib
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

ORDER = os.path.join(bench.ROOT, "Sources", "gattway", "Linking", "gattway.order")


def functions(profile, binary):
    """The functions of `binary` in a callgrind profile: `fn=` lines while `ob=` is the binary.
    Callgrind names each object and function once, in full, wherever it first appears (also as
    a callee, `cob=`/`cfn=`), and by its number after that."""
    objects, names, current, seen = {}, {}, None, {}
    ref = re.compile(r"\((\d+)\)(?: (.*))?")
    for line in open(profile, errors="replace"):
        key, _, rest = line.rstrip("\n").partition("=")
        if key not in ("ob", "cob", "fn", "cfn") or not (m := ref.match(rest)):
            continue
        number, name = m.groups()
        table = objects if key.endswith("ob") else names
        if name is not None:
            table[number] = name
        if key == "ob":
            current = objects.get(number)
        elif key == "fn" and current == binary and number in names:
            seen.setdefault(names[number])
    return list(seen)


def main():
    binary = os.path.realpath(bench.GATTWAY)
    os.makedirs(bench.OUT, exist_ok=True)
    profile = os.path.join(tempfile.mkdtemp(prefix="gattway-order-"), "callgrind.out")
    gw = bench.Gateway("gattway", ["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={profile}", binary])
    with contextlib.ExitStack() as st:
        bench.Rig(st, gw, "order", devices=2, chars=1, interval_ms=1000)
        time.sleep(5)
    found = [name for name in functions(profile, binary) if not name.startswith("0x")]
    with open(ORDER, "w") as f:
        f.write("".join(name + "\n" for name in found))
    print(f"{ORDER}: {len(found)} functions")


if __name__ == "__main__":
    main()
