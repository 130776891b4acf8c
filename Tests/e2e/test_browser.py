"""A real browser (Debian's chromium, headless) uses gattway from a web page, driven and read
through the DevTools protocol: a page of an allowed origin, with a token, gets notifications over
the WebSocket and over EventSource and makes a preflighted CORS request; a page of any other
origin can neither open the WebSocket nor read an answer, and a plain text POST (which a browser
sends without asking first) is refused."""
import asyncio
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest
import websockets

from conftest import Gateway, wait_for

HR = "F0:00:00:00:00:01"
TOKEN = "browser-token-0123456789abcdef"

ALLOWED_PAGE = """<!doctype html><html><head><title>gattway</title></head><body><script>
window.received = []; window.sse = []; window.results = {};
const gw = "GW_URL";
const ws = new WebSocket(gw.replace("http", "ws") + "/v1/ws", ["gattway", "bearer.TOKEN"]);
ws.onopen = () => { window.results.protocol = ws.protocol;
  ws.send(JSON.stringify({op: "subscribe", id: "1", device: "DEVICE", characteristic: "2a37"})); };
ws.onmessage = (e) => { const m = JSON.parse(e.data); if (m.type === "notification") window.received.push(m); };
const es = new EventSource(gw + "/v1/events?device=DEVICE&characteristic=2a37&access_token=TOKEN");
es.addEventListener("notification", (e) => window.sse.push(JSON.parse(e.data)));
fetch(gw + "/v1/scan", {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer TOKEN"},
                        body: "{}"}).then(r => { window.results.scan = r.status; });
fetch(gw + "/v1/scan", {method: "POST", headers: {"Content-Type": "text/plain", "Authorization": "Bearer TOKEN"},
                        body: "{}"}).then(r => { window.results.textPlain = r.status; });
fetch(gw + "/v1/devices").then(r => { window.results.noToken = r.status; });
</script></body></html>"""

FOREIGN_PAGE = """<!doctype html><html><head><title>gattway</title></head><body><script>
window.results = {};
const gw = "GW_URL";
const ws = new WebSocket(gw.replace("http", "ws") + "/v1/ws", ["gattway", "bearer.TOKEN"]);
ws.onopen = () => { window.results.ws = "open"; };
ws.onclose = (e) => { window.results.ws = window.results.ws || ("closed " + e.code); };
fetch(gw + "/v1/devices", {headers: {"Authorization": "Bearer TOKEN"}})
  .then(r => { window.results.fetch = "read " + r.status; }, e => { window.results.fetch = "refused"; });
fetch(gw + "/v1/scan", {method: "POST", body: "{}", mode: "no-cors"})
  .then(r => { window.results.simplePost = "sent"; }, e => { window.results.simplePost = "failed"; });
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


class Page:
    """`html` served from its own origin (http://127.0.0.1:PORT) and opened in headless chromium."""

    def __init__(self, html):
        self.workdir = tempfile.mkdtemp(prefix="gattway-chromium-")
        with open(os.path.join(self.workdir, "page.html"), "w") as f:
            f.write(html)
        handler = functools.partial(QuietHandler, directory=self.workdir)
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.browser = None

    def open(self):
        profile = os.path.join(self.workdir, "profile")
        self.browser = subprocess.Popen([chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                         "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                         self.origin + "/page.html"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(profile, "DevToolsActivePort")
        assert wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(), 30), "chromium did not start"
        port = open(port_file).read().split()[0]

        def page_target():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                return next((t for t in json.load(resp) if t["type"] == "page" and t["url"].startswith(self.origin)), None)
        target = wait_for(page_target, 15)
        assert target, "no page target"
        self.debugger = target["webSocketDebuggerUrl"]

    def value(self, expression, default):
        """`expression`'s value in the page; `default` until the page has defined it."""
        text = asyncio.run(evaluate(self.debugger, f"JSON.stringify({expression})"))
        return default if text is None else json.loads(text)

    def close(self):
        if self.browser:
            self.browser.terminate()
            try:
                self.browser.wait(10)
            except subprocess.TimeoutExpired:
                self.browser.kill()
        self.http.shutdown()
        shutil.rmtree(self.workdir, ignore_errors=True)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def page_with(template, gateway):
    return template.replace("GW_URL", gateway.base).replace("DEVICE", HR).replace("TOKEN", TOKEN)


def test_page_of_an_allowed_origin_streams_and_calls_with_a_token(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    page = Page("")
    gateway = Gateway(["--simulate", "--tokens", str(tokens), "--allow-origin", page.origin])
    try:
        auth = {"Authorization": "Bearer " + TOKEN}
        status, body, _ = gateway.request("POST", "/v1/scan", {}, headers=auth)
        assert status == 200, body
        assert wait_for(lambda: HR in {d["id"] for d in gateway.request("GET", "/v1/devices", headers=auth)[1]["devices"]}, 5)
        assert gateway.request("POST", f"/v1/devices/{HR}/connect", {"timeout": 10}, headers=auth)[0] == 200
        with open(os.path.join(page.workdir, "page.html"), "w") as f:
            f.write(page_with(ALLOWED_PAGE, gateway))
        page.open()
        started = time.monotonic()
        got = wait_for(lambda: len(page.value("window.received", [])) >= 3
                       and len(page.value("window.sse", [])) >= 3, 15, 0.25)
        assert got, f"notifications: ws {page.value('window.received', [])}, sse {page.value('window.sse', [])}"
        print(f"\nchromium received 3 notifications on each stream in {time.monotonic() - started:.1f} s")
        ws = page.value("window.received", [])
        sse = page.value("window.sse", [])
        assert [n["sequence"] for n in ws[:3]] == [1, 2, 3]
        assert all(n["characteristic"]["uuid"].startswith("00002a37") for n in ws + sse)
        assert wait_for(lambda: len(page.value("window.results", {})) == 4, 10, 0.25), page.value("window.results", {})
        # The WebSocket's chosen subprotocol is "gattway", never the one that carries the token.
        assert page.value("window.results", {}) == {"protocol": "gattway", "scan": 200, "textPlain": 415, "noToken": 401}
    finally:
        page.close()
        gateway.stop()


def test_page_of_another_origin_is_refused():
    page = Page("")
    gateway = Gateway(["--simulate"])
    try:
        with open(os.path.join(page.workdir, "page.html"), "w") as f:
            f.write(page_with(FOREIGN_PAGE, gateway))
        page.open()
        assert wait_for(lambda: len(page.value("window.results", {})) == 3, 15, 0.25), page.value("window.results", {})
        results = page.value("window.results", {})
        # The upgrade is refused (403), so the socket never opens; the answer to the GET is not
        # readable (no CORS headers for this origin); the POST went out but was refused.
        assert results["ws"] == "closed 1006"
        assert results["fetch"] == "refused"
        assert results["simplePost"] == "sent"
        assert gateway.get("/v1/scan")[1]["scanning"] is False, "the page's POST started a scan"
        assert any("refused (origin) 127.0.0.1" in line for line in gateway.log), gateway.log[-10:]
    finally:
        page.close()
        gateway.stop()
