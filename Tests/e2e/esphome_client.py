"""What the ESPHome-API tests share: where gattway serves the API, an aioesphomeapi client on it,
and the AD structures of a raw advertisement."""
import re

import pytest
from aioesphomeapi import APIClient


def esphome_port(gw):
    for line in gw.log:
        m = re.search(r"esphome: listening on 127\.0\.0\.1:(\d+) ", line)
        if m:
            return int(m.group(1))
    pytest.fail("no esphome listening line:\n" + "\n".join(gw.log))


async def connected(port, key=None, **kw):
    kw.setdefault("client_info", "gattway e2e")
    client = APIClient("127.0.0.1", port, None, noise_psk=key, **kw)
    await client.connect(login=False)
    return client


def address_int(address):
    return int(address.replace(":", ""), 16)


def ad_structures(data):
    """[(type, bytes)] of an advertisement's AD structures; fails on malformed data."""
    out, i = [], 0
    while i < len(data):
        length = data[i]
        assert length > 0 and i + 1 + length <= len(data), f"malformed AD data {data.hex()}"
        out.append((data[i + 1], bytes(data[i + 2:i + 1 + length])))
        i += 1 + length
    return out


def service_data(data):
    """{16-bit UUID: bytes} of the 16-bit service data structures."""
    return {int.from_bytes(v[:2], "little"): v[2:] for t, v in ad_structures(data) if t == 0x16}
