"""The dashboard (GET /) in a real headless chromium (Debian's, driven by Playwright) against
`gattway --simulate`: scan, connect, the GATT tree with SIG names, a read, a live plot of the
heart rate, a write echoed by the serial device, a refused operation with its CBError, and token
entry. Screenshots go to .build/dashboard/; readme.png, through `pngquant --quality 60-85`, is
the README's picture (Tests/e2e/dashboard.png). Also the page's HTTP answers: negotiated with the
JSON index, ETag and 304, the CSP, open without a token."""
import json
import os
import re
import threading
import urllib.error
import urllib.request

import pytest
from websockets.sync.client import connect as ws_connect

import contract
import streamtap
from conftest import ROOT, Gateway, wait_for
from test_adapters import configuration
from test_reconnect import SSE

playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (Tests/run.sh does)")

HR, SERIAL = "F0:00:00:00:00:01", "F0:00:00:00:00:02"
TOKEN = "dashboard-token-0123456789"
SHOTS = os.path.join(ROOT, ".build", "dashboard")
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 15_000
# Every expectation waits up to this long (the machine may be loaded), not Playwright's 5 s.
playwright.expect.set_options(timeout=WAIT_MS)


def fetch(gw, path, headers=None):
    req = urllib.request.Request(gw.base + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, body, headers = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        status, body, headers = e.code, e.read(), dict(e.headers)
    # openapi-core holds text bodies (the page, the script) against `type: string` as text.
    textual = headers.get("Content-Type", "").split(";")[0] in ("text/html", "text/javascript", "text/css", "image/svg+xml")
    contract.check("GET", path, status, headers, body.decode() if textual else body)
    return status, body, headers


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail("chromium is not installed (Tests/install-deps.sh installs it)")
    os.makedirs(SHOTS, exist_ok=True)
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield b
        b.close()


class Dashboard:
    """A page of the dashboard, with what it logged to its console and any CSP violation."""

    def __init__(self, browser, gw, **context):
        self.page = browser.new_page(**context)
        self.problems = []
        # Console errors but the browser's note of each failed request (the API's refusals,
        # which the page shows): script errors and CSP violations ("Refused to ...") remain.
        self.page.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load resource")
                     and self.problems.append(m.text))
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))
        streamtap.watch_page(self.page)  # its /v1/ws messages, held against openapi.yaml
        self.page.goto(gw.base + "/")

    def device(self, address):
        return self.page.locator(f'li[data-device="{address}"]')

    def characteristic(self, short_uuid):
        return self.page.locator(f'#gatt .char[data-uuid="{short_uuid}"]')

    def open_connected(self, address):
        self.device(address).get_by_role("button", name="Open").click()
        self.page.locator("#device-connect").click()
        playwright.expect(self.page.locator("#device-state")).to_have_text("connected", timeout=WAIT_MS)
        playwright.expect(self.page.locator("#gatt .char").first).to_be_visible(timeout=WAIT_MS)

    def shot(self, name):
        self.page.screenshot(path=os.path.join(SHOTS, name), full_page=True)


def test_dashboard_scans_connects_reads_plots_writes_and_shows_errors(browser):
    gw = Gateway(["--simulate"])
    dash = None
    try:
        dash = Dashboard(browser, gw, viewport={"width": 1200, "height": 820})
        page, expect = dash.page, playwright.expect
        expect(page.locator("#state")).to_contain_text("poweredOn", timeout=WAIT_MS)
        expect(page.locator("#stream")).to_have_text("live", timeout=WAIT_MS)
        # Scan by keyboard: the scan button is reachable and works with Enter.
        page.locator("#scan-start").focus()
        page.keyboard.press("Enter")
        for address, name in [(HR, "Sim Heart Rate"), (SERIAL, "Sim Serial"), ("F0:00:00:00:00:03", "Sim Secure"),
                              ("F0:00:00:00:00:05", "Sim Eddystone")]:
            expect(dash.device(address).locator(".name")).to_have_text(name, timeout=WAIT_MS)
        expect(page.locator("#scanning")).to_have_text("scanning")
        expect(dash.device(HR).locator(".meta")).to_contain_text(re.compile(r"F0:00:00:00:00:01 · -\d+ dBm · \d+ s ago"))
        # A simulated sensor shows its decoded values.
        expect(page.locator("li .sensor").first).to_contain_text("temperature", timeout=WAIT_MS)

        dash.open_connected(HR)
        expect(dash.device(HR).locator(".badge")).to_have_text("connected")
        # One adapter looks as it always did: no adapters panel, no adapter on a link.
        expect(page.locator("#state")).to_have_text("Bluetooth poweredOn (hci0)")
        expect(page.locator("#adapters-panel")).to_be_hidden()
        expect(page.locator("#device-adapter")).to_have_count(0)
        # The tree, named from the SIG's tables, with handles and properties.
        expect(page.locator('#gatt .service[data-uuid="180d"] summary')).to_contain_text("Heart Rate")
        hr = dash.characteristic("2a37")
        expect(hr.locator(".title")).to_have_text("Heart Rate Measurement")
        expect(hr).to_contain_text(re.compile(r"handle 0x[0-9a-f]{4}"))
        expect(hr.locator(".props")).to_contain_text("notify")
        expect(dash.characteristic("2a29").locator(".title")).to_have_text("Manufacturer Name String")

        battery = dash.characteristic("2a19")
        expect(battery.locator(".title")).to_have_text("Battery Level")
        battery.get_by_role("button", name="Read").click()
        expect(battery.locator(".value")).to_have_text(re.compile(r"^0x[0-9a-f]{2}\b"), timeout=WAIT_MS)
        level = int(battery.locator(".value").inner_text()[2:4], 16)
        assert 0 < level <= 100, level

        hr.get_by_role("button", name="Subscribe").click()
        plot = hr.locator("canvas.plot")
        expect(plot).to_be_visible(timeout=WAIT_MS)
        expect(plot).to_have_attribute("data-points", re.compile(r"^([3-9]|\d\d+)$"), timeout=WAIT_MS)
        bpm = int(plot.get_attribute("data-last"))
        assert 40 <= bpm <= 200, bpm
        assert hr.locator(".vlog li").count() >= 3
        dash.shot("heart-rate.png")
        expect(page.locator("#errors .error")).to_have_count(0)
        # The README's picture: the Generic Attribute service folded (by keyboard), the plot in view.
        page.locator('#gatt .service[data-uuid="1801"] summary').focus()
        page.keyboard.press("Enter")
        expect(page.locator('#gatt .service[data-uuid="1801"]')).not_to_have_attribute("open", "")
        expect(plot).to_have_attribute("data-points", re.compile(r"^([6-9]|\d\d+)$"), timeout=WAIT_MS)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=os.path.join(SHOTS, "readme.png"))

        # A refused operation: the heart-rate control point takes only 01; the device answers
        # ATT 0x80, shown with its name, domain and code.
        control = dash.characteristic("2a39")
        control.get_by_label("value to write").fill("02")
        control.get_by_role("button", name="Write").click()
        expect(control.locator(".op-error")).to_contain_text("CBATTErrorDomain 128", timeout=WAIT_MS)
        expect(page.locator("#errors .error").first).to_contain_text("CBATTErrorDomain 128")
        dash.shot("refused.png")

        # The serial device echoes what is written, as a notification.
        page.locator("#device-close").click()
        dash.open_connected(SERIAL)
        serial = dash.characteristic("ffe1")
        serial.get_by_role("button", name="Subscribe").click()
        expect(serial.get_by_role("button", name="Unsubscribe")).to_be_visible(timeout=WAIT_MS)
        serial.get_by_label("value to write").fill("hello gattway")
        serial.get_by_label("value format").select_option("utf8")
        serial.get_by_role("button", name="Write").click()
        expect(serial.locator(".vlog")).to_contain_text("hello gattway", timeout=WAIT_MS)
        expect(serial.locator(".value")).to_contain_text('"hello gattway"')
        dash.shot("serial.png")
        assert dash.problems == [], dash.problems
    finally:
        # What the page showed last, also when an expectation failed.
        if dash:
            dash.shot("last.png")
        gw.stop()


def test_dashboard_shows_the_adapters_and_which_one_holds_each_link(browser):
    """Two simulated adapters (test_adapters' configuration: the heart-rate monitor near hci0,
    -45, and far from hci1, -75; the serial module heard by hci1 only): the panel lists both, live;
    a device shows the RSSI each adapter hears; the connected heart-rate monitor shows hci0 holding
    its link; hci1 powered off and on shows it; hci0 pulled out, it leaves the panel and the kept
    link comes back via hci1; plugged in again, it is back."""
    path = configuration()
    gw = Gateway(["--simulate", path, "--auto-reconnect"])
    try:
        dash = Dashboard(browser, gw, viewport={"width": 1200, "height": 820})
        page, expect = dash.page, playwright.expect
        adapter = lambda name: page.locator(f'#adapters li[data-adapter="{name}"]')
        expect(page.locator("#stream")).to_have_text("live")
        expect(page.locator("#state")).to_have_text("Bluetooth poweredOn (2 adapters)")
        expect(page.locator("#adapter-count")).to_have_text("2")
        expect(adapter("hci0").locator(".meta")).to_have_text("00:1A:7D:DA:71:13 · links: 0")
        expect(adapter("hci1").locator(".meta")).to_have_text("00:1A:7D:DA:71:14 · links: 0")
        for name in ("hci0", "hci1"):
            expect(adapter(name).locator(".name")).to_have_text(f"{name} gattway-sim")
            expect(adapter(name).locator(".powered")).to_have_text("on")
        page.locator("#scan-start").click()
        # Discovering on both, from their `adapter` events.
        for name in ("hci0", "hci1"):
            expect(adapter(name).locator(".actions")).to_contain_text("discovering")
        expect(dash.device(HR).locator(".meta")).to_contain_text("F0:00:00:00:00:01 · -45 dBm (hci0 -45, hci1 -75) · ")
        expect(dash.device(SERIAL).locator(".meta")).to_contain_text("F0:00:00:00:00:02 · -50 dBm (hci1 -50) · ")

        dash.open_connected(HR)
        expect(dash.device(HR).locator(".link")).to_have_text("via hci0")
        expect(page.locator("#device-adapter")).to_have_text("via hci0")
        expect(page.locator("#device-info")).to_contain_text("RSSI -45 dBm (hci0 -45, hci1 -75)")
        expect(adapter("hci0").locator(".meta")).to_have_text("00:1A:7D:DA:71:13 · links: 1")
        expect(adapter("hci0").locator(".links")).to_have_text("Sim Heart Rate")
        expect(adapter("hci1").locator(".links")).to_have_count(0)
        dash.shot("adapters.png")

        # hci1 powered off and on, live.
        gw.simulator("SetAdapterPowered", "string:hci1", "boolean:false")
        expect(adapter("hci1").locator(".powered")).to_have_text("off")
        expect(page.locator("#state")).to_have_text("Bluetooth poweredOn (hci0)")
        gw.simulator("SetAdapterPowered", "string:hci1", "boolean:true")
        expect(adapter("hci1").locator(".powered")).to_have_text("on")
        expect(page.locator("#state")).to_have_text("Bluetooth poweredOn (2 adapters)")

        # The dongle pulled out: it leaves the panel; the kept link moves to hci1, shown live.
        gw.simulator("RemoveAdapter", "string:hci0")
        expect(adapter("hci0")).to_have_count(0)
        expect(page.locator("#adapter-count")).to_have_text("1")
        expect(page.locator("#state")).to_have_text("Bluetooth poweredOn (hci1)")
        # Reconnecting waits 1-5 s, then for the device to be heard again: more than WAIT_MS at worst.
        expect(page.locator("#device-adapter")).to_have_text("via hci1", timeout=30_000)
        expect(dash.device(HR).locator(".link")).to_have_text("via hci1")
        expect(adapter("hci1").locator(".meta")).to_have_text("00:1A:7D:DA:71:14 · links: 1")
        expect(adapter("hci1").locator(".links")).to_have_text("Sim Heart Rate")
        dash.shot("adapter-pulled.png")
        # Plugged in again, it joins the strip, named.
        gw.simulator("AddAdapter", "string:hci0")
        expect(adapter("hci0").locator(".name")).to_have_text("hci0 gattway-sim")
        expect(page.locator("#adapter-count")).to_have_text("2")
        assert dash.problems == [], dash.problems
    finally:
        gw.stop()
        os.remove(path)


def test_dashboard_shows_the_watchs_sensors_with_no_scan_and_live(browser):
    gw = Gateway(["--simulate"])  # --simulate watches: the sensors are heard with no scan
    try:
        dash = Dashboard(browser, gw, viewport={"width": 1200, "height": 820})
        page, expect = dash.page, playwright.expect
        status, body, _ = fetch(gw, "/v1/sensors")
        heard = {s["id"]: s for s in json.loads(body)["sensors"]}
        expect(page.locator("#sensor-count")).to_have_text(re.compile(r"^(1\d|[2-9]\d)$"))  # ten or more
        assert int(page.locator("#sensor-count").inner_text()) >= len(heard) >= 10
        atc = page.locator('#sensors li[data-sensor="F0:00:00:00:00:08"]')
        expect(atc.locator(".name")).to_have_text("Sim ATC1441")
        expect(atc.locator(".reading")).to_contain_text(re.compile(r"atc1441: battery \d+ %, humidity \d+ %, temperature [\d.]+ °C"))
        expect(atc.locator(".meta")).to_contain_text(re.compile(r"F0:00:00:00:00:08 · -\d+ dBm · \d+ s ago"))
        # A sealed reading without its key says so instead of values.
        expect(page.locator('#sensors li[data-sensor="F0:00:00:00:00:07"] .reading')).to_contain_text("no values (encryption: missing-key)")
        # Live: the simulated thermometer's reading changes on the page as it advertises new values.
        first = atc.locator(".reading").inner_text()
        expect(atc.locator(".reading")).not_to_have_text(first, timeout=60_000)
        # The scan's list stays the scan's: nothing was scanned for.
        expect(page.locator("#device-count")).to_have_text("0")
        assert dash.problems == [], dash.problems
    finally:
        gw.stop()


def test_dashboard_at_phone_width(browser):
    gw = Gateway(["--simulate"])
    try:
        dash = Dashboard(browser, gw, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        page = dash.page
        page.locator("#scan-start").click()
        playwright.expect(dash.device(HR)).to_be_visible(timeout=WAIT_MS)
        dash.open_connected(HR)
        # Nothing wider than the screen: the page does not scroll sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        dash.shot("phone.png")
        # The Peripheral view, with a service served (long UUIDs) and the forms, fits too.
        page.get_by_role("link", name="Peripheral").click()
        page.get_by_role("button", name="Define").click()
        playwright.expect(page.locator("#served .char .value")).to_have_text('0x68656c6c6f  "hello"', timeout=WAIT_MS)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        dash.shot("phone-peripheral.png")
        assert dash.problems == [], dash.problems
    finally:
        gw.stop()


def test_dashboard_forms_work_as_soon_as_the_page_has_loaded(browser):
    """The handlers are attached before the page's first await: with /ui/names.json held back,
    Start scan right after the load event scans, and does not submit the form as a reload."""
    gw = Gateway(["--simulate"])
    try:
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        held = []
        page.route("**/ui/names.json", lambda route: held.append(route))
        page.goto(gw.base + "/")
        page.locator("#scan-start").click(no_wait_after=True)
        playwright.expect(page.locator("#scanning")).to_have_text("scanning", timeout=WAIT_MS)
        assert page.url == gw.base + "/", page.url
        assert len(held) == 1
        held[0].continue_()
        page.close()
    finally:
        gw.stop()


def test_dashboard_asks_for_the_token_and_then_works(browser, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    gw = Gateway(["--simulate", "--tokens", str(tokens)])
    try:
        dash = Dashboard(browser, gw, viewport={"width": 1000, "height": 700})
        page = dash.page
        form = page.locator("#token")
        playwright.expect(form).to_be_visible(timeout=WAIT_MS)
        # The page and its state load without a token (the health check is open).
        playwright.expect(page.locator("#state")).to_contain_text("poweredOn")
        page.locator("#token-value").fill(TOKEN)
        page.keyboard.press("Enter")
        playwright.expect(form).to_be_hidden()
        playwright.expect(page.locator("#stream")).to_have_text("live", timeout=WAIT_MS)
        page.locator("#scan-start").click()
        playwright.expect(dash.device(HR)).to_be_visible(timeout=WAIT_MS)
        # No WebSocket was tried without the token.
        assert dash.problems == [], dash.problems
    finally:
        gw.stop()


def test_dashboard_terminal_on_the_serial_device(browser, tmp_path):
    """A connected UART device has a Serial button: a terminal on GET …/serial (the token as
    the WebSocket's bearer. subprotocol); a line sent comes back from the echoing HM-10, and a
    second page, finding the writer taken, reads along."""
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    gw = Gateway(["--simulate", "--tokens", str(tokens)])
    try:
        pages = []
        for _ in range(2):
            dash = Dashboard(browser, gw, viewport={"width": 1000, "height": 800})
            dash.page.locator("#token-value").fill(TOKEN)
            dash.page.keyboard.press("Enter")
            playwright.expect(dash.page.locator("#stream")).to_have_text("live", timeout=WAIT_MS)
            pages.append(dash)
        writer, reader = pages
        writer.page.locator("#scan-start").click()
        playwright.expect(writer.device(SERIAL)).to_be_visible(timeout=WAIT_MS)
        # A device without a UART has no Serial button.
        playwright.expect(writer.device(HR)).to_be_visible(timeout=WAIT_MS)
        writer.open_connected(HR)
        playwright.expect(writer.page.locator("#device-serial")).to_be_hidden()
        writer.page.locator("#device-close").click()
        writer.open_connected(SERIAL)
        writer.page.locator("#device-serial").click()
        playwright.expect(writer.page.locator("#terminal-state")).to_have_text("open", timeout=WAIT_MS)
        reader.page.reload()
        playwright.expect(reader.page.locator("#stream")).to_have_text("live", timeout=WAIT_MS)
        reader.device(SERIAL).get_by_role("button", name="Open").click()
        reader.page.locator("#device-serial").click()
        playwright.expect(reader.page.locator("#terminal-state")).to_have_text("read only", timeout=WAIT_MS)
        writer.page.locator("#terminal-line").fill("hello from the page")
        writer.page.keyboard.press("Enter")
        for dash in pages:
            playwright.expect(dash.page.locator("#terminal-out")).to_have_text("hello from the page\n", timeout=WAIT_MS)
        writer.shot("terminal.png")
        writer.page.locator("#terminal-close").click()
        playwright.expect(writer.page.locator("#terminal")).to_be_hidden()
        assert writer.problems == [], writer.problems
        # The reader's one console line is the browser's note of the refused writer (503).
        assert [p for p in reader.problems if "Unexpected response code: 503" not in p] == [], reader.problems
        assert len(reader.problems) == 1, reader.problems
    finally:
        gw.stop()


PERIPHERAL_SERVICE = "5a1e0001-0000-4000-8000-00805f9b34fb"
GREETING = "5a1e0002-0000-4000-8000-00805f9b34fb"  # the example, which the page offers
INDICATING_SERVICE, INDICATED = "5a1e0010-0000-4000-8000-00805f9b34fb", "5a1e0011-0000-4000-8000-00805f9b34fb"
HCI0, HCI1 = "00:1A:7D:DA:71:13", "00:1A:7D:DA:71:14"


def test_dashboard_peripheral_view_serves_a_service_and_logs_what_a_central_does(browser):
    """Issue 34's page, on two simulated adapters: the Peripheral view defines the example
    service and starts an advertisement on hci0; gattway's own central on hci1 (through REST)
    connects, reads and writes; the page logs the central's read and write with its address and
    the values, shows the stored value the write changed, a value set from the page reaching the
    subscribed central (`sent`), a read the page answers itself (a claim), a refused definition
    with its CBError, and stops and removes what it made."""
    path = configuration()
    gw = Gateway(["--simulate", path])
    try:
        dash = Dashboard(browser, gw, viewport={"width": 1200, "height": 900})
        page, expect = dash.page, playwright.expect
        expect(page.locator("#stream")).to_have_text("live")
        page.get_by_role("link", name="Peripheral").click()
        expect(page.locator("#central-view")).to_be_hidden()
        expect(page.locator("#view-peripheral")).to_have_attribute("aria-current", "page")
        expect(page.locator("#role-state")).to_have_text("poweredOn")
        hci0 = page.locator('#role-adapters li[data-adapter="hci0"] .meta')
        expect(hci0).to_have_text(re.compile(r"^advertisements: 0 running, \d+ more possible$"))
        expect(page.locator("#service-count")).to_have_text("0")

        # The example is there to define as it is.
        assert json.loads(page.locator("#definition").input_value())["characteristics"][0]["uuid"] == GREETING
        page.get_by_role("button", name="Define").click()
        greeting = page.locator(f'#served .char[data-uuid="{GREETING}"]')
        expect(greeting.locator(".value")).to_have_text('0x68656c6c6f  "hello"')
        expect(greeting.locator(".props")).to_have_text(re.compile(r"^read\s*write\s*notify$"))
        expect(page.locator("#service-count")).to_have_text("1")
        # The same service again: refused, with the API's error.
        page.get_by_role("button", name="Define").click()
        expect(page.locator("#errors .error").first).to_contain_text("define a service: invalidParameters (CBErrorDomain 1)")
        expect(page.locator("#service-count")).to_have_text("1")

        # An advertisement with what is served, on hci0.
        expect(page.locator("#advertise-services")).to_have_value(PERIPHERAL_SERVICE)
        page.locator("#advertise-adapter").select_option("hci0")
        page.get_by_role("button", name="Start advertising").click()
        advertisement = page.locator("#advertisements li").first
        expect(advertisement.locator(".badge")).to_have_text("on air")
        # Read only once the page shows it on air: the click's request may still be on its way before.
        first_ad = gw.get("/v1/peripheral")[1]["advertisements"][0]["id"]  # the stack's numbers: ids as it gives them
        expect(advertisement.locator(".name")).to_have_text(f'#{first_ad} "gattway-demo" · {PERIPHERAL_SERVICE}')
        expect(hci0).to_have_text(re.compile(r"^advertisements: 1 running, \d+ more possible$"))

        # gattway's own central on hci1, through REST, as a phone would.
        notifications = SSE(gw, "types=notification&format=utf8")
        gw.discover(HCI0, timeout=10)
        status, body, _ = gw.post(f"/v1/devices/{HCI0}/connect", {"timeout": 10, "adapter": "hci1"})
        assert status == 200 and body["adapter"] == "hci1", body
        expect(page.locator(f'#centrals li[data-central="{HCI1}"]')).to_contain_text("on hci0")
        log = page.locator("#requests")
        expect(log.locator('li[data-type="centralConnected"] .central')).to_have_text(HCI1)

        status, body, _ = gw.get(f"/v1/devices/{HCI0}/characteristics/{GREETING}/value?format=utf8")
        assert status == 200 and body["value"] == "hello", body
        read = log.locator('li[data-type="peripheralRead"]').first
        expect(read.locator(".central")).to_have_text(HCI1)
        expect(read.locator(".char")).to_have_text(GREETING)
        expect(read.locator(".value")).to_have_text('0x68656c6c6f  "hello"')

        status, body, _ = gw.request("PUT", f"/v1/devices/{HCI0}/characteristics/{GREETING}/value",
                                     {"value": "from hci1", "format": "utf8", "withResponse": True})
        assert status == 200, body
        write = log.locator('li[data-type="peripheralWrite"]').first
        expect(write.locator(".central")).to_have_text(HCI1)
        expect(write.locator(".value")).to_contain_text('"from hci1"')
        expect(greeting.locator(".value")).to_have_text('0x66726f6d2068636931  "from hci1"')

        # A value set from the page goes to the subscribed central.
        assert gw.post(f"/v1/devices/{HCI0}/characteristics/{GREETING}/notifications")[0] == 200
        expect(greeting.locator(".props")).to_contain_text("subscribed")
        expect(log.locator('li[data-type="subscribed"]')).to_have_count(1)
        greeting.get_by_label("value to set").fill("21.5")
        greeting.get_by_role("button", name="Set").click()
        expect(greeting.locator(".set-result")).to_contain_text("sent: yes")
        assert notifications.wait(lambda e: e["device"] == HCI0 and e["value"] == "21.5", 5), notifications.events
        expect(greeting.locator(".value")).to_have_text('0x32312e35  "21.5"')

        # A second service, typed in, with an indication that the central confirms.
        page.locator("#definition").fill(json.dumps({"uuid": INDICATING_SERVICE, "characteristics": [
            {"uuid": INDICATED, "properties": ["read", "indicate"], "value": "0", "format": "utf8"}]}))
        page.get_by_role("button", name="Define").click()
        indicated = page.locator(f'#served .char[data-uuid="{INDICATED}"]')
        expect(indicated.locator(".value")).to_have_text('0x30  "0"')
        expect(page.locator("#service-count")).to_have_text("2")
        status, body, _ = gw.post(f"/v1/devices/{HCI0}/characteristics/{INDICATED}/notifications")
        assert status == 200, body
        expect(indicated.locator(".props")).to_contain_text("subscribed")
        indicated.get_by_label("value to set").fill("7")
        indicated.get_by_role("button", name="Set").click()
        expect(indicated.locator(".set-result")).to_contain_text("sent: yes")
        expect(log.locator('li[data-type="indicationConfirmed"] .char')).to_have_text(INDICATED)

        # Reads answered by the page: a claim over its WebSocket.
        greeting.get_by_label("answer to reads").fill("from the page")
        greeting.get_by_label("answer reads myself with").check()
        expect(greeting.locator(".props")).to_contain_text("answered here")
        status, body, _ = gw.get(f"/v1/devices/{HCI0}/characteristics/{GREETING}/value?format=utf8")
        assert status == 200 and body["value"] == "from the page", body
        expect(log.locator('li[data-type="peripheralRead"]').first).to_contain_text('answered 0x66726f6d207468652070616765  "from the page"')
        # A claimed write is answered done, and not stored.
        status, body, _ = gw.request("PUT", f"/v1/devices/{HCI0}/characteristics/{GREETING}/value",
                                     {"value": "claimed", "format": "utf8", "withResponse": True})
        assert status == 200, body
        expect(log.locator('li[data-type="peripheralWrite"]').first).to_contain_text('"claimed" → answered done')
        expect(greeting.locator(".value")).to_have_text('0x32312e35  "21.5"')
        greeting.get_by_label("answer reads myself with").uncheck()
        expect(greeting.locator(".props")).not_to_contain_text("answered here")
        assert gw.get(f"/v1/devices/{HCI0}/characteristics/{GREETING}/value?format=utf8")[1]["value"] == "21.5"
        # Claimed by another client: the page says so, logs the request as someone else's, and
        # its own claim is refused with the reason.
        got = []
        with ws_connect(gw.base.replace("http", "ws", 1) + "/v1/ws") as other:
            other.send(json.dumps({"op": "claim", "id": "c", "characteristic": GREETING, "format": "utf8"}))
            assert json.loads(other.recv(timeout=10))["op"] == "ack"
            reading = threading.Thread(target=lambda: got.append(gw.get(f"/v1/devices/{HCI0}/characteristics/{GREETING}/value?format=utf8")))
            reading.start()
            request = json.loads(other.recv(timeout=10))
            assert request["type"] == "peripheralRead" and request["request"], request
            other.send(json.dumps({"op": "respond", "id": "r", "request": request["request"], "value": "elsewhere", "format": "utf8"}))
            reading.join(10)
            assert got and got[0][1]["value"] == "elsewhere", got
            expect(log.locator('li[data-type="peripheralRead"]').first).to_contain_text(f'(request {request["request"]}, claimed elsewhere)')
            expect(greeting.locator(".props")).to_contain_text("claimed")
            # A click, not check(): the page unticks the box again once the claim is refused,
            # which can come before Playwright looks at the box (seen in CI).
            greeting.get_by_label("answer reads myself with").click()
            expect(page.locator("#errors .error").first).to_contain_text("claim 5a1e0002-0000-4000-8000-00805f9b34fb: invalidParameters (CBErrorDomain 1) characteristic 5a1e0002-0000-4000-8000-00805f9b34fb is claimed by another client")
            expect(greeting.get_by_label("answer reads myself with")).not_to_be_checked()
        expect(page.locator("#request-count")).not_to_have_text("0")
        page.evaluate("window.scrollTo(0, 0)")
        dash.shot("peripheral.png")

        assert gw.post(f"/v1/devices/{HCI0}/disconnect", {})[0] == 200
        expect(log.locator('li[data-type="centralDisconnected"] .central')).to_have_text(HCI1)
        expect(page.locator("#central-count")).to_have_text("0")
        # An iBeacon preset beside it: a beacon, not connectable.
        page.locator("#advertise-kind").select_option("iBeacon")
        expect(page.get_by_label("Local name")).to_be_hidden()
        page.get_by_label("Major").fill("7")
        page.get_by_role("button", name="Start advertising").click()
        expect(page.locator("#advertisements li")).to_have_count(2)
        beacon_ad = gw.get("/v1/peripheral")[1]["advertisements"][1]["id"]
        beacon = page.locator(f'#advertisements li[data-advertisement="{beacon_ad}"]')
        expect(beacon.locator(".name")).to_have_text(f"#{beacon_ad} iBeacon e2c56db5-dffb-48d2-b060-d0f5a71096e0 7/1")
        expect(beacon.locator(".meta")).to_have_text("on hci0 · not connectable")
        expect(hci0).to_have_text(re.compile(r"^advertisements: 2 running, "))
        beacon.get_by_role("button", name=f"stop advertisement {beacon_ad}").click()
        advertisement.get_by_role("button", name=f"stop advertisement {first_ad}").click()
        expect(page.locator("#advertisements li")).to_have_count(0)
        expect(hci0).to_have_text(re.compile(r"^advertisements: 0 running, "))
        first, second = [s["id"] for s in gw.get("/v1/peripheral")[1]["services"]]
        page.get_by_role("button", name=f"remove service {first}").click()
        expect(page.locator("#served .service")).to_have_count(1)
        page.get_by_role("button", name=f"remove service {second}").click()
        expect(page.locator("#served .service")).to_have_count(0)
        assert gw.get("/v1/peripheral")[1]["services"] == []
        # The central's view is still there.
        page.get_by_role("link", name="Central").click()
        expect(page.locator("#scan-panel")).to_be_visible()
        expect(page.locator("#peripheral-view")).to_be_hidden()
        notifications.close()
        assert dash.problems == [], dash.problems
    finally:
        gw.stop()
        os.remove(path)


def test_dashboard_peripheral_view_says_when_there_is_no_peripheral_role(browser):
    """gattway on a stack without the role answers 501 (the simulator always has one: the
    answer is played to the page as openapi.yaml's NoPeripheralRole gives it)."""
    gw = Gateway(["--simulate"])
    try:
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        body = {"error": {"domain": "CBErrorDomain", "code": 13, "name": "operationNotSupported",
                          "message": "this gattway has no peripheral role (its Bluetooth stack offers none)"}}
        page.route("**/v1/peripheral?*", lambda route: route.fulfill(status=501, content_type="application/json", body=json.dumps(body)))
        page.goto(gw.base + "/#peripheral")
        playwright.expect(page.locator("#role-none")).to_have_text(
            "Not available: this gattway has no peripheral role (its Bluetooth stack offers none) — operationNotSupported (CBErrorDomain 13), HTTP 501.")
        playwright.expect(page.locator("#role-state")).to_have_text("unsupported")
        for panel in ("#define-panel", "#advertise-panel", "#served-panel"):
            playwright.expect(page.locator(panel)).to_be_hidden()
        playwright.expect(page.locator("#errors .error")).to_have_count(0)
        page.close()
    finally:
        gw.stop()


def test_page_and_files_are_served_with_validators_and_a_policy(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    gw = Gateway(["--simulate", "--tokens", str(tokens)])
    try:
        # Without a token: the page (for a browser) and the JSON index (for anything else).
        status, body, headers = fetch(gw, "/", {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert b'<script src="/ui/app.js"' in body
        assert "default-src 'none'" in headers["Content-Security-Policy"] and "connect-src 'self'" in headers["Content-Security-Policy"]
        assert headers["Cache-Control"] == "no-cache" and headers["Vary"] == "Accept"
        etag = headers["ETag"]
        assert re.fullmatch(r'"[0-9a-f]{16}"', etag)
        status, body, headers = fetch(gw, "/", {"Accept": "text/html", "If-None-Match": etag})
        assert status == 304 and body == b""
        status, body, headers = fetch(gw, "/")
        assert status == 200 and headers["Content-Type"] == "application/json" and b'"name":"gattway"' in body
        status, body, _ = fetch(gw, "/", {"Accept": "text/html;q=0, application/json"})
        assert b'"name":"gattway"' in body

        for name, media_type in [("app.js", "text/javascript"), ("style.css", "text/css"),
                                 ("names.json", "application/json"), ("icon.svg", "image/svg+xml")]:
            status, body, headers = fetch(gw, "/ui/" + name)
            assert status == 200 and headers["Content-Type"].split(";")[0] == media_type, (name, status)
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert fetch(gw, "/ui/" + name, {"If-None-Match": headers["ETag"]})[0] == 304
        status, body, _ = fetch(gw, "/ui/names.json")
        assert b'"2a37":"Heart Rate Measurement"' in body and b'"180f":"Battery Service"' in body
        # Only the dashboard's own files are open; the API still needs the token.
        assert fetch(gw, "/ui/nothing.js")[0] == 401
        assert fetch(gw, "/v1/devices")[0] == 401
        assert fetch(gw, "/ui/nothing.js", {"Authorization": "Bearer " + TOKEN})[0] == 404
    finally:
        gw.stop()


def test_log_names_the_dashboard_url():
    gw = Gateway(["--simulate"])
    try:
        line = f"dashboard: open {gw.base}/ in a browser"
        # Logged right after "listening on", which the Gateway helper waits for.
        assert wait_for(lambda: any(line in entry for entry in gw.log), 5), gw.log[-5:]
    finally:
        gw.stop()
