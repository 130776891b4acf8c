#!/usr/bin/env python3
"""Writes Resources/names.json, the dashboard's names for standard GATT UUIDs, from the tables of
the PyPI package bluetooth-numbers (MIT, Koen Vervloesem; taken from the Bluetooth SIG's
assigned numbers, and vendors' published UUIDs, e.g. Nordic UART). Run it again to refresh:

    .build/venv/bin/pip install bluetooth-numbers==1.1.2
    .build/venv/bin/python Sources/Dashboard/make-names.py

Keys are lower case: four hex digits for a UUID on the Bluetooth base, 36 characters otherwise."""
import json
import os
from uuid import UUID

import bluetooth_numbers
from importlib.metadata import version

BASE_SUFFIX = "-0000-1000-8000-00805f9b34fb"


def key(uuid):
    if isinstance(uuid, int):
        return f"{uuid:04x}"
    text = str(uuid).lower()
    if text.startswith("0000") and text.endswith(BASE_SUFFIX):
        return text[4:8]
    return text


def table(numbers):
    return dict(sorted((key(uuid), name) for uuid, name in numbers.items()))


names = {
    "source": f"bluetooth-numbers {version('bluetooth-numbers')} (PyPI, MIT), from the Bluetooth SIG's assigned numbers",
    "services": table(bluetooth_numbers.service),
    "characteristics": table(bluetooth_numbers.characteristic),
    "descriptors": table(bluetooth_numbers.descriptor),
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "Resources", "names.json")
with open(path, "w") as f:
    json.dump(names, f, separators=(",", ":"), ensure_ascii=False)
    f.write("\n")
print(f"{path}: {sum(len(v) for v in names.values() if isinstance(v, dict))} names, {os.path.getsize(path)} bytes")
