"""The proxy announced over mDNS as Home Assistant finds ESPHome nodes: `_esphomelib._tcp` with
the TXT records Home Assistant and aioesphomeapi read, through Debian's avahi-daemon on the
system bus. The scenario runs in a network and mount namespace of its own (mdns_netns.py, as
root: loopback with multicast, a private bus, avahi-daemon on it): without avahi-daemon one log
line and the API serves; avahi-daemon started later, the proxy is announced by itself, seen by
avahi-browse and by python-zeroconf (Home Assistant's) on the wire with every TXT record, its
mac the one device info says; a second proxy of the same name takes Avahi's alternative; a
stopped one is withdrawn; avahi-daemon restarted, the proxy is announced again."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import binary

HERE = os.path.dirname(os.path.abspath(__file__))


def test_announced_over_mdns_through_avahi(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the scenario makes network and mount namespaces: root only")
    for tool in ("avahi-daemon", "avahi-browse", "dbus-daemon", "ip", "unshare"):
        assert shutil.which(tool), f"{tool} is missing (Tests/install-deps.sh installs avahi-daemon and avahi-utils)"
    out = subprocess.run(["unshare", "-n", "-m", "--propagation", "private", sys.executable,
                          os.path.join(HERE, "mdns_netns.py"), binary("gattway"), str(tmp_path)],
                         capture_output=True, text=True, timeout=180)
    logs = "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in tmp_path.glob("*.log"))
    assert out.returncode == 0 and out.stdout.strip(), out.stderr + logs
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert "error" not in r, r["error"] + "\n" + json.dumps(r, indent=1) + logs

    # Without avahi-daemon: one line, and the API answered.
    assert len(r["before_avahi"]) == 1 and "avahi-daemon is not running" in r["before_avahi"][0]
    assert r["device_info"]["name"] == "proxy-e2e"
    mac = r["device_info"]["mac"].replace(":", "").lower()

    expected = {
        "friendly_name": "gattway proxy-e2e", "version": "2025.11.0", "mac": mac, "platform": "Linux", "board": "gattway",
        "network": "ethernet", "api_encryption": "Noise_NNpsk0_25519_ChaChaPoly_SHA256",
        "project_name": "gattway.gattway", "project_version": "0.1.0",
    }
    host, address, port, txt = r["avahi_browse"]["proxy-e2e"]
    assert (host, address, port) == ("gattway-test.local", "127.0.0.1", r["port"])
    assert txt == expected
    # On the wire, as Home Assistant's zeroconf sees it.
    assert r["zeroconf"] is not None, "python-zeroconf did not resolve the service"
    assert r["zeroconf"]["port"] == r["port"] and r["zeroconf"]["server"] == "gattway-test.local."
    assert r["zeroconf"]["txt"] == expected

    assert r["second"] == "proxy-e2e #2"
    assert r["both"] == ["proxy-e2e", "proxy-e2e #2"]
    assert r["after_stop"] == ["proxy-e2e"], "a stopped proxy is withdrawn"
    assert r["after_restart"] == ["proxy-e2e"], "announced again after avahi-daemon restarted"
    announced = f'mdns: announced "proxy-e2e" (_esphomelib._tcp) on port {r["port"]}'
    assert r["first_log"][1:] == [announced, "mdns: avahi-daemon left the bus: not announced until it is back", announced]
