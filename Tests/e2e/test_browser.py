"""Issue 4: a real browser (Debian's chromium, headless) opens the WebSocket from a page and
receives notifications. The page is driven and read through the DevTools protocol."""
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest
import websockets

from conftest import wait_for

HR = "F0:00:00:00:00:01"

PAGE = """<!doctype html><html><head><title>gattway</title></head><body><pre id="log"></pre><script>
window.received = [];
const ws = new WebSocket("WS_URL");
ws.onopen = () => ws.send(JSON.stringify({op: "subscribe", id: "1", device: "DEVICE", characteristic: "2a37"}));
ws.onmessage = (e) => {
  const m = JSON.parse(e.data);
  if (m.type === "notification") window.received.push(m);
  document.getElementById("log").textContent += e.data + "\\n";
};
</script></body></html>"""


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed (Tests/install-deps.sh installs it)")


async def evaluate(ws_url, expression):
    async with websockets.connect(ws_url, max_size=None) as cdp:
        await cdp.send(json.dumps({"id": 1, "method": "Runtime.evaluate",
                                   "params": {"expression": expression, "returnByValue": True}}))
        while True:
            reply = json.loads(await cdp.recv())
            if reply.get("id") == 1:
                return reply["result"]["result"].get("value")


def test_browser_page_receives_notifications(gateway):
    gateway.discover(HR)
    assert gateway.post(f"/v1/devices/{HR}/connect", {"timeout": 10})[0] == 200
    workdir = tempfile.mkdtemp(prefix="gattway-chromium-")
    page = os.path.join(workdir, "page.html")
    with open(page, "w") as f:
        f.write(PAGE.replace("WS_URL", gateway.base.replace("http://", "ws://") + "/v1/ws").replace("DEVICE", HR))
    profile = os.path.join(workdir, "profile")
    browser = subprocess.Popen([chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                "file://" + page], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        assert wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(), 30), "chromium did not start"
        port = open(port_file).read().split()[0]
        def page_target():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                return next((t for t in json.load(resp) if t["type"] == "page" and t["url"].startswith("file://")), None)
        target = wait_for(page_target, 15)
        assert target, "no page target"
        started = time.monotonic()
        count = wait_for(lambda: (asyncio.run(evaluate(target["webSocketDebuggerUrl"], "window.received.length")) or 0) >= 3, 10, 0.25)
        assert count, "the page did not receive 3 notifications"
        received = asyncio.run(evaluate(target["webSocketDebuggerUrl"], "JSON.stringify(window.received)"))
        notes = json.loads(received)
        print(f"\nchromium received {len(notes)} notifications in {time.monotonic() - started:.1f} s")
        assert [n["sequence"] for n in notes[:3]] == [1, 2, 3]
        assert all(n["characteristic"]["uuid"].startswith("00002a37") for n in notes)
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(workdir, ignore_errors=True)
