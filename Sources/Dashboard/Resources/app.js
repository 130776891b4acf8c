// gattway's dashboard: the public API (openapi.yaml) from a page, nothing else. REST for state,
// scan, connect, GATT, reads and writes; one WebSocket (/v1/ws) for live events and notifications.
"use strict";

const $ = (id) => document.getElementById(id);

/** An element with attributes (on* are listeners) and children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
  return el;
}

// ---- UUID names (generated from the Bluetooth SIG's assigned numbers: make-names.py) ----

let names = { services: {}, characteristics: {}, descriptors: {} };
const BASE = "-0000-1000-8000-00805f9b34fb";
/** `0000180d-0000-1000-8000-00805f9b34fb` → `180d`; others as they are, lower case. */
function shortUUID(uuid) {
  const u = uuid.toLowerCase();
  return u.length === 36 && u.startsWith("0000") && u.endsWith(BASE) ? u.slice(4, 8) : u;
}
function nameOf(kind, uuid, given) { return names[kind][shortUUID(uuid)] || given || null; }

// ---- the API ----

const token = {
  get: () => sessionStorage.getItem("gattway-token") || "",
  set: (t) => sessionStorage.setItem("gattway-token", t),
};

/** A CBError / CBATTError from the API's error body. */
class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || { domain: "CBErrorDomain", code: 0, name: "unknown", message: `HTTP ${status}` };
    super(e.message);
    Object.assign(this, { status, domain: e.domain, code: e.code, cbName: e.name, detail: e.detail });
  }
  toString() { return `${this.cbName} (${this.domain} ${this.code}): ${this.message}`; }
}

async function api(method, path, body) {
  const headers = {};
  if (token.get()) headers.Authorization = "Bearer " + token.get();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (response.status === 401) askForToken(json && json.error && json.error.message);
  if (!response.ok) throw new APIError(response.status, json);
  return json;
}

const enc = encodeURIComponent;
const devicePath = (id) => `/v1/devices/${enc(id)}`;

// ---- errors ----

function showError(error, context) {
  const text = error instanceof APIError ? null : String(error.message || error);
  const item = h("div", { class: "error", dataset: { name: error.cbName || "" } },
    h("span", { class: "what" },
      context ? context + ": " : "",
      error instanceof APIError ? [h("strong", {}, error.cbName), ` (${error.domain} ${error.code}) `, error.message,
        error.detail ? h("span", { class: "hint" }, " — " + error.detail) : null] : text),
    h("button", { type: "button", class: "quiet", "aria-label": "dismiss", onclick: () => item.remove() }, "×"));
  const list = $("errors");
  list.prepend(item);
  while (list.children.length > 5) list.lastChild.remove();
}

/** Runs `f`, showing what it throws. */
async function attempt(context, f) {
  try { return await f(); } catch (e) { showError(e, context); return undefined; }
}

function askForToken(message) {
  const form = $("token");
  if (!form.hidden) return;
  form.hidden = false;
  if (message) form.querySelector("label").title = message;
  $("token-value").focus();
}

// ---- the model ----

const devices = new Map();      // id → device JSON, as GET /v1/devices gives it
let selected = null;            // id of the device shown in the device panel
let gattTree = null;            // GET .../gatt of `selected`
const views = new Map();        // characteristic handle → {element parts, plot, subscription}

function setBadge(el, text, cls) { el.textContent = text; el.className = "badge " + (cls || ""); }

/** The header's badge from a ManagerState (GET /v1/state or a `state` event). */
function showState(s) {
  const which = s.usableAdapters > 1 ? ` (${s.usableAdapters} adapters)` : s.adapter ? ` (${s.adapter})` : "";
  setBadge($("state"), `Bluetooth ${s.state}${which}`, s.state);
}

async function refreshState() {
  const s = await attempt("state", () => api("GET", "/v1/state"));
  if (s) showState(s);
}

async function refreshScan() {
  const s = await api("GET", "/v1/scan").catch(() => null);
  if (s) setBadge($("scanning"), s.scanning ? "scanning" : "stopped", s.scanning ? "scanning" : "");
}

/** Reads the device list; false when the gateway wants a token first. */
async function refreshDevices() {
  const list = await api("GET", "/v1/devices").catch((e) => { if (e.status !== 401) showError(e, "devices"); return e; });
  if (list instanceof APIError) return list.status !== 401;
  if (!list) return true;
  const seen = new Set();
  for (const d of list.devices) { seen.add(d.id); mergeDevice(d); }
  for (const id of [...devices.keys()]) if (!seen.has(id)) devices.delete(id);
  renderDevices();
  return true;
}

// Fields a device object leaves out when they do not apply (any more): absent, the old ones go.
const TRANSIENT = ["adapter", "adapters", "stale", "reconnect", "mtu", "maximumWriteValueLength"];

/** Folds a device object (a REST answer, or an advertisement's peripheral) into `devices`. */
function mergeDevice(d) {
  const merged = { ...devices.get(d.id), ...d };
  for (const k of TRANSIENT) if (!(k in d)) delete merged[k];
  devices.set(d.id, merged);
}

/** Reads one device again (what events do not carry: the adapter holding its link). */
async function refreshDevice(id) {
  const d = await api("GET", devicePath(id)).catch(() => null);
  if (d) { mergeDevice(d); renderDevices(); }
}

// ---- adapters: shown once more than one is in use (GET /v1/adapters, `adapter` events) ----

const adapters = new Map();     // id → adapter JSON, those in use
// Set once the page has seen several adapters in use, and kept: with one left after a dongle was
// pulled, the panel still shows which holds the links. One adapter alone looks as it always did.
let severalAdapters = false;

async function refreshAdapters() {
  const list = await api("GET", "/v1/adapters").catch(() => null);
  if (!list) return;
  adapters.clear();
  for (const a of list.adapters) if (a.selected) adapters.set(a.id, a);
  renderAdapters();
}

function adapterChanged(m) {
  if (m.state === "removed") adapters.delete(m.adapter);
  else {
    const { address, powered, discovering, connections, connectionLimit } = m;
    adapters.set(m.adapter, { ...adapters.get(m.adapter), id: m.adapter, address, powered, discovering, connections, connectionLimit });
  }
  // An adapter plugged in comes with no name: the list has it.
  if (m.state === "added") refreshAdapters(); else renderAdapters();
}

function renderAdapters() {
  if (adapters.size > 1) severalAdapters = true;
  $("adapters-panel").hidden = !severalAdapters;
  if (!severalAdapters) return;
  const sorted = [...adapters.values()].sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }));
  const linked = (id) => [...devices.values()].filter((d) => d.state === "connected" && d.adapter === id).map((d) => d.name || d.id);
  $("adapters").replaceChildren(...sorted.map((a) => {
    const links = linked(a.id);
    return h("li", { dataset: { adapter: a.id } },
      h("span", { class: "name" }, a.id, a.name ? h("span", { class: "hint" }, " " + a.name) : null),
      h("span", { class: "actions" },
        h("span", { class: "badge powered " + (a.powered ? "poweredOn" : "poweredOff"), title: "powered" }, a.powered ? "on" : "off"),
        a.discovering ? h("span", { class: "badge scanning" }, "discovering") : null),
      h("span", { class: "meta mono" }, `${a.address || "?"} · links: ${a.connections ?? "?"}` + (a.connectionLimit !== undefined ? ` of ${a.connectionLimit}` : "")),
      links.length ? h("span", { class: "links" }, links.join(", ")) : null);
  }));
  $("adapter-count").textContent = String(adapters.size);
}

/** With several adapters: each one that hears the device, with its RSSI (" (hci0 -45, hci1 -75)"). */
function heardBy(d) {
  if (!severalAdapters || !d.adapters) return "";
  return ` (${d.adapters.map((a) => `${a.adapter}\u00a0${a.rssi ?? "?"}`).join(", ")})`;
}

/** With several adapters, the one that holds a connected device's link. */
function linkAdapter(d) { return severalAdapters && d.state === "connected" && d.adapter ? d.adapter : null; }

function ago(time) {
  if (!time) return "";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(time)) / 1000));
  return s < 60 ? `${s} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : new Date(time).toLocaleTimeString();
}

function sensorText(sensor) {
  if (!sensor) return null;
  if (!sensor.measurements || !Object.keys(sensor.measurements).length) return `${sensor.format}: no values (encryption: ${sensor.encryption})`;
  return `${sensor.format}: ` + Object.entries(sensor.measurements)
    .map(([k, m]) => `${k} ${m.value}${m.unit ? " " + m.unit : ""}`).join(", ");
}

// ---- sensors: every decoded advertisement heard (the watch's and the scan's), GET /v1/sensors ----

const sensors = new Map();      // id → sensor JSON, as GET /v1/sensors gives it

async function refreshSensors() {
  const list = await api("GET", "/v1/sensors").catch(() => null);
  if (!list) return;
  sensors.clear();
  for (const s of list.sensors) sensors.set(s.id, s);
  renderSensors();
}

function renderSensors() {
  const sorted = [...sensors.values()].sort((a, b) => (a.name || "\uffff").localeCompare(b.name || "\uffff") || a.id.localeCompare(b.id));
  $("sensors").replaceChildren(...sorted.map((s) =>
    h("li", { dataset: { sensor: s.id }, class: s.stale ? "stale" : "" },
      h("span", { class: "name" }, s.name || "(no name)"),
      h("span", { class: "actions" }, s.stale ? h("span", { class: "badge" }, "stale") : null),
      h("span", { class: "meta mono" }, `${s.id} · ${s.rssi ?? "?"} dBm · ${ago(s.updated)}`),
      h("span", { class: "reading" }, sensorText(s.reading)))));
  $("sensor-count").textContent = String(sensors.size);
}

function renderDevices() {
  const ul = $("devices");
  const sorted = [...devices.values()].sort((a, b) => (b.rssi ?? -999) - (a.rssi ?? -999) || a.id.localeCompare(b.id));
  ul.replaceChildren(...sorted.map((d) =>
    h("li", { dataset: { device: d.id }, class: d.stale ? "stale" : "" },
      h("span", { class: "name" }, d.name || "(no name)"),
      h("span", { class: "actions" },
        h("span", { class: "badge " + d.state }, d.state),
        linkAdapter(d) ? h("span", { class: "badge link", title: "the adapter that holds its link" }, "via " + d.adapter) : null,
        h("button", { type: "button", class: "quiet", onclick: () => openDevice(d.id), "aria-label": `open ${d.name || d.id}` }, "Open")),
      h("span", { class: "meta mono" }, `${d.address} · ${d.rssi ?? "?"} dBm${heardBy(d)} · ${ago(d.lastSeen)}`),
      d.sensor ? h("span", { class: "sensor" }, sensorText(d.sensor)) : null)));
  $("device-count").textContent = String(devices.size);
  if (selected) renderDeviceHead();
  if (severalAdapters) renderAdapters();
}

// ---- scan ----

function scanBody(form) {
  const f = new FormData(form);
  const body = {};
  const list = (v) => v.split(/[\s,]+/).filter(Boolean);
  if (f.get("services").trim()) body.services = list(f.get("services"));
  if (f.get("name").trim()) body.name = f.get("name").trim();
  if (f.get("namePrefix").trim()) body.namePrefix = f.get("namePrefix").trim();
  if (f.get("rssi")) body.rssi = Number(f.get("rssi"));
  if (f.get("timeout")) body.timeout = Number(f.get("timeout"));
  if (f.get("allowDuplicates")) body.allowDuplicates = true;
  const pairs = (v) => list(v).map((p) => p.split(":"));
  if (f.get("manufacturer").trim())
    body.manufacturerData = pairs(f.get("manufacturer")).map(([id, prefix]) => ({ companyIdentifier: Number(id), ...(prefix ? { dataPrefix: prefix } : {}) }));
  if (f.get("serviceData").trim())
    body.serviceData = pairs(f.get("serviceData")).map(([service, prefix]) => ({ service, ...(prefix ? { dataPrefix: prefix } : {}) }));
  return body;
}

// ---- one device ----

function renderDeviceHead() {
  const d = devices.get(selected) || { id: selected, state: "disconnected" };
  const link = linkAdapter(d);
  $("device-title").replaceChildren(d.name || d.id, " ", h("span", { class: "badge " + d.state, id: "device-state" }, d.state),
    link ? h("span", { class: "badge link", id: "device-adapter", title: "the adapter that holds its link" }, "via " + link) : null);
  const bonds = severalAdapters && d.adapters ? d.adapters.filter((a) => a.bonded).map((a) => a.adapter) : [];
  $("device-info").textContent = `${d.address || d.id} · ${d.addressType || ""} · RSSI ${d.rssi ?? "?"} dBm${heardBy(d)} · last seen ${ago(d.lastSeen) || "?"}`
    + (bonds.length ? ` · bonded on ${bonds.join(", ")}` : "");
  $("device-connect").disabled = d.state === "connected" || d.state === "connecting";
  $("device-disconnect").disabled = d.state !== "connected";
  $("device-pair").disabled = d.paired === true;
  $("device-unbond").disabled = d.paired !== true;
  $("device-serial").hidden = !(d.state === "connected" && gattTree && uartOf(gattTree));
}

// ---- serial: a terminal on the device's UART (WebSocket …/serial) ----

// The characteristics gattway writes for each profile it knows (SerialProfile.known).
const UART_RX = { ffe1: "hm10", "6e400002-b5a3-f393-e0a9-e50e24dcca9e": "nordic", "49535343-8841-43f4-a8d4-ecbe34729bb3": "microchip" };
function uartOf(tree) {
  for (const s of tree.services) for (const c of s.characteristics) if (UART_RX[shortUUID(c.uuid)]) return UART_RX[shortUUID(c.uuid)];
  return null;
}

let terminal = null; // { ws, device, decoder }

function terminalShow(text) {
  const out = $("terminal-out");
  out.textContent = (out.textContent + text).slice(-32768);
  out.scrollTop = out.scrollHeight;
}

function openTerminal(write = true) {
  closeTerminal();
  const id = selected;
  const url = location.origin.replace(/^http/, "ws") + devicePath(id) + "/serial" + (write ? "?write=true" : "");
  const ws = token.get() ? new WebSocket(url, ["gattway", "bearer." + token.get()]) : new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const session = { ws, device: id, decoder: new TextDecoder(), opened: false, write };
  terminal = session;
  $("terminal").hidden = false;
  $("terminal-send").disabled = true;
  setBadge($("terminal-state"), "opening", "connecting");
  ws.onopen = () => {
    session.opened = true;
    setBadge($("terminal-state"), write ? "open" : "read only", "ok");
    $("terminal-send").disabled = !write;
    $("terminal-line").focus();
  };
  ws.onmessage = (e) => terminalShow(session.decoder.decode(e.data, { stream: true }));
  ws.onclose = (e) => {
    if (terminal !== session) return;
    // Refused before it opened: most likely another client writes; read along instead.
    if (!session.opened && write) { openTerminal(false); return; }
    setBadge($("terminal-state"), e.code === 4001 ? "link lost" : `closed${e.reason ? ": " + e.reason : ""}`, e.code === 1000 ? "" : "bad");
    $("terminal-send").disabled = true;
    terminal = null;
  };
}

function closeTerminal() {
  if (!terminal) return;
  const { ws } = terminal;
  terminal = null;
  ws.close(1000);
  setBadge($("terminal-state"), "closed");
  $("terminal").hidden = true;
}

// ---- pairing: what a pairing asks (`pairing` events), answered with POST …/pairing ----

let pairingAsked = null; // { device, request, passkey }

function showPairing(m) {
  const form = $("pairing");
  if (m.state !== "request") {
    if (pairingAsked?.device === m.device) { pairingAsked = null; form.hidden = true; }
    if (m.state === "failed") showError(new APIError(0, { error: m.error }), `pair ${m.device}`);
    const d = devices.get(m.device);
    if (d && m.state === "paired") { d.paired = true; if (m.device === selected) renderDeviceHead(); }
    return;
  }
  const name = devices.get(m.device)?.name || m.device;
  const asks = {
    passkey: [`${name} shows a passkey: enter it.`, true, "Enter"],
    pinCode: [`Enter ${name}'s PIN code.`, true, "Enter"],
    confirm: [`Does ${name} show ${m.passkey}?`, false, "Yes"],
    authorize: [`Allow ${name} to pair?`, false, "Yes"],
    authorizeService: [`Allow ${name} to use service ${m.uuid}?`, false, "Yes"],
    displayPasskey: [`Type ${m.passkey} on ${name}.`, false, null],
    displayPinCode: [`Type ${m.pinCode} on ${name}.`, false, null],
  }[m.request];
  if (!asks) return;
  const [question, typed, yes] = asks;
  pairingAsked = m;
  $("pairing-text").textContent = question;
  $("pairing-passkey").hidden = !typed;
  $("pairing-passkey").value = "";
  $("pairing-yes").hidden = !yes;
  $("pairing-yes").textContent = yes || "";
  $("pairing-no").hidden = !yes || typed;
  form.hidden = false;
  if (m.device !== selected) openDevice(m.device);
  (typed ? $("pairing-passkey") : $("pairing-yes")).focus();
}

function answerPairing(yes) {
  const m = pairingAsked;
  if (!m) return;
  const typed = $("pairing-passkey").value.trim();
  const body = m.request === "passkey" ? { passkey: Number(typed) } : m.request === "pinCode" ? { pinCode: typed } : { confirm: yes };
  $("pairing").hidden = true;
  pairingAsked = null;
  attempt(`answer ${m.device}'s pairing`, () => api("POST", devicePath(m.device) + "/pairing", body));
}

async function openDevice(id) {
  if (selected !== id) closeDevice();
  selected = id;
  $("device-panel").hidden = false;
  renderDeviceHead();
  if (devices.get(id)?.state === "connected") await loadGATT();
  $("device-title").scrollIntoView({ block: "nearest" });
  $("device-connect").disabled ? $("device-disconnect").focus() : $("device-connect").focus();
}

function closeDevice() {
  closeTerminal();
  for (const view of views.values()) if (view.subscription) wsSend({ op: "unsubscribe", subscription: view.subscription });
  views.clear();
  gattTree = null;
  $("gatt").replaceChildren();
  selected = null;
  $("device-panel").hidden = true;
}

function setDeviceState(id, state) {
  const d = devices.get(id);
  if (d) d.state = state;
  if (d && state !== "connected") delete d.adapter;
  renderDevices();
  if (id === selected && state === "connected" && !gattTree) loadGATT();
  if (id === selected && state === "disconnected") {
    for (const view of views.values()) { view.subscription = null; view.setSubscribed(false); }
  }
}

async function loadGATT() {
  const id = selected;
  // The `connected` event (the link is up) comes before the services are resolved: until they
  // are, the tree answers notConnected. Asked again for a while, quietly, then shown.
  const tree = await attempt("GATT", async () => {
    for (let tries = 1; ; tries++) {
      try {
        return await api("GET", devicePath(id) + "/gatt");
      } catch (e) {
        const waiting = e.cbName === "notConnected" && devices.get(id)?.state !== "disconnected" && id === selected;
        if (!waiting || tries >= 30) throw e;
        await new Promise((done) => setTimeout(done, 500));
      }
    }
  });
  if (!tree || id !== selected || gattTree) return;
  gattTree = tree;
  renderDeviceHead();
  views.clear();
  $("gatt").replaceChildren(
    h("p", { class: "hint" }, `MTU ${tree.mtu ?? "?"} · longest write ${tree.maximumWriteValueLength?.withResponse ?? "?"} / ${tree.maximumWriteValueLength?.withoutResponse ?? "?"} (without response) bytes`),
    ...tree.services.map((s) => h("details", { class: "service", open: true, dataset: { uuid: shortUUID(s.uuid), handle: s.handle } },
      h("summary", {}, h("strong", {}, nameOf("services", s.uuid, s.name) || "Unknown service"), " ",
        h("code", {}, shortUUID(s.uuid)), ` · handle ${s.handle}`, s.isPrimary ? "" : " · secondary"),
      ...s.characteristics.map(characteristicView))));
}

/** Turns a value in `format` into bytes, for the log and the plot. */
function bytesOf(value, format) {
  if (format === "hex") return Uint8Array.from(value.match(/../g) || [], (b) => parseInt(b, 16));
  if (format === "base64") return Uint8Array.from(atob(value), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(value);
}
const hex = (bytes) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
function text(bytes) {
  const t = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  return /^[\x20-\x7e\u00a0-\uffff]*$/.test(t) && !t.includes("\ufffd") ? t : null;
}

/** A number to plot from a characteristic's value: the standard ones decoded, else a small integer. */
function numberOf(uuid, bytes) {
  const u = shortUUID(uuid);
  const le = (n, at = 0) => bytes.length >= at + n ? [...bytes.slice(at, at + n)].reduceRight((acc, b) => acc * 256 + b, 0) : null;
  if (u === "2a37") return bytes.length < 2 ? null : (bytes[0] & 1 ? le(2, 1) : bytes[1]);   // heart rate, bpm
  if (u === "2a19") return le(1);                                                               // battery, %
  if ([1, 2, 4].includes(bytes.length)) return le(bytes.length);
  const t = text(bytes);
  return t !== null && t.trim() !== "" && isFinite(Number(t)) ? Number(t) : null;
}

function characteristicView(c) {
  const props = c.properties || [];
  const can = (p) => props.includes(p);
  const path = devicePath(selected) + "/characteristics/" + enc(c.handle);
  const name = nameOf("characteristics", c.uuid, c.name);
  const value = h("div", { class: "value", "aria-live": "polite" });
  const opError = h("div", { class: "op-error", role: "status" });
  const written = h("div", { class: "hint written" });
  const log = h("ol", { class: "vlog", hidden: true, "aria-label": "values received" });
  const canvas = h("canvas", { class: "plot", hidden: true, width: 600, height: 120, role: "img", "aria-label": "plot of the values", dataset: { points: "0" } });
  const plot = new Plot(canvas);
  const format = h("select", { "aria-label": "value format" }, ...["hex", "utf8", "base64"].map((f) => h("option", { value: f }, f)));
  const input = h("input", { "aria-label": "value to write", spellcheck: "false", placeholder: "value" });
  const withoutResponse = h("input", { type: "checkbox", checked: !can("write") && can("writeWithoutResponse") });
  const subscribe = h("button", { type: "button", class: "subscribe" }, "Subscribe");
  const view = { subscription: null, plot, log, canvas, uuid: c.uuid,
    setSubscribed(on) { subscribe.textContent = on ? "Unsubscribe" : "Subscribe"; subscribe.setAttribute("aria-pressed", String(on)); } };
  views.set(c.handle, view);

  function show(valueText, fmt, source) {
    const bytes = bytesOf(valueText, fmt);
    const t = text(bytes);
    value.textContent = `0x${hex(bytes) || "(empty)"}` + (t !== null && bytes.length ? `  "${t}"` : "") + (source ? `  · ${source}` : "");
    opError.textContent = "";
    return bytes;
  }
  function fail(e) { opError.textContent = e instanceof APIError ? String(e) : String(e.message || e); showError(e, name || shortUUID(c.uuid)); }

  view.received = (n) => {
    const bytes = show(n.value, n.format, `#${n.sequence}`);
    log.hidden = false;
    const t = text(bytes);
    const number = numberOf(c.uuid, bytes);
    log.prepend(h("li", {}, `${new Date(n.time || Date.now()).toLocaleTimeString()}  ${hex(bytes)}`
      + (t !== null && bytes.length ? `  "${t}"` : "") + (number !== null ? `  = ${number}` : "")));
    while (log.children.length > 50) log.lastChild.remove();
    if (number !== null) { canvas.hidden = false; plot.add(number); }
  };

  subscribe.addEventListener("click", () => {
    if (view.subscription) {
      wsSend({ op: "unsubscribe", subscription: view.subscription });
      view.subscription = null;
      view.setSubscribed(false);
      return;
    }
    wsCommand({ op: "subscribe", device: selected, characteristic: c.handle, format: "hex" }).then((ack) => {
      view.subscription = ack.subscription;
      view.setSubscribed(true);
      opError.textContent = "";
    }, fail);
  });

  const read = h("button", { type: "button", class: "read" }, "Read");
  read.addEventListener("click", async () => {
    try { const v = await api("GET", path + "/value?format=hex"); show(v.value, v.format); } catch (e) { fail(e); }
  });
  const write = h("form", { class: "row write" }, input, format,
    h("label", { class: "check" }, withoutResponse, "without response"),
    h("button", { type: "submit" }, "Write"));
  write.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const r = await api("PUT", path + "/value", { value: input.value, format: format.value, withResponse: !withoutResponse.checked });
      opError.textContent = "";
      written.textContent = `wrote ${r.written ?? "?"} byte(s) at ${new Date().toLocaleTimeString()}`;
    } catch (e) { fail(e); }
  });

  return h("div", { class: "char", dataset: { uuid: shortUUID(c.uuid), handle: c.handle } },
    h("div", {}, h("span", { class: "title" }, name || "Unknown characteristic"), " ", h("code", {}, shortUUID(c.uuid)),
      h("span", { class: "hint" }, ` · handle ${c.handle}`)),
    h("div", { class: "props" }, ...props.map((p) => h("span", { class: "badge" }, p))),
    c.descriptors.length ? h("div", { class: "hint" }, "descriptors: ",
      c.descriptors.map((d) => `${nameOf("descriptors", d.uuid, d.name) || shortUUID(d.uuid)} (${d.handle})`).join(", ")) : null,
    h("div", { class: "row" }, can("read") ? read : null, can("notify") || can("indicate") ? subscribe : null),
    can("write") || can("writeWithoutResponse") ? write : null,
    value, written, opError, canvas, log);
}

// ---- the plot: the last 120 numbers as a line, with their range ----

class Plot {
  constructor(canvas) { this.canvas = canvas; this.points = []; }
  add(v) {
    this.points.push(v);
    if (this.points.length > 120) this.points.shift();
    this.canvas.dataset.points = String(this.points.length);
    this.canvas.dataset.last = String(v);
    this.draw();
  }
  draw() {
    const c = this.canvas, ctx = c.getContext("2d");
    const ratio = window.devicePixelRatio || 1;
    const w = c.clientWidth || 600, hgt = c.clientHeight || 120;
    if (c.width !== Math.round(w * ratio)) { c.width = Math.round(w * ratio); c.height = Math.round(hgt * ratio); }
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, hgt);
    const style = getComputedStyle(document.documentElement);
    const lo = Math.min(...this.points), hi = Math.max(...this.points);
    const span = hi - lo || 1, pad = 14;
    const x = (i) => 30 + (w - 36) * (this.points.length === 1 ? 1 : i / (this.points.length - 1));
    const y = (v) => hgt - pad - (hgt - 2 * pad) * ((v - lo) / span);
    ctx.fillStyle = style.getPropertyValue("--muted");
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(String(hi), 2, pad);
    ctx.fillText(String(lo), 2, hgt - 4);
    ctx.strokeStyle = style.getPropertyValue("--accent");
    ctx.lineWidth = 2;
    ctx.beginPath();
    this.points.forEach((v, i) => (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
    ctx.stroke();
    const last = this.points.length - 1;
    ctx.fillStyle = ctx.strokeStyle;
    ctx.beginPath();
    ctx.arc(x(last), y(this.points[last]), 3, 0, 2 * Math.PI);
    ctx.fill();
  }
}

// ---- the peripheral view: services and advertisements this gattway serves (GET /v1/peripheral) ----

const PERIPHERAL_EVENTS = ["centralConnected", "centralDisconnected", "subscribed", "unsubscribed",
  "peripheralRead", "peripheralWrite", "indicationConfirmed"];
// The issue's example (docs/peripheral.md), ready to define.
const EXAMPLE_SERVICE = `{"uuid": "5a1e0001-0000-4000-8000-00805f9b34fb", "primary": true, "characteristics": [
  {"uuid": "5a1e0002-0000-4000-8000-00805f9b34fb", "properties": ["read", "write", "notify"],
   "permissions": ["readable", "writeable"], "value": "hello", "format": "utf8"}]}`;

let served = null;              // GET /v1/peripheral?format=hex, the last answer
let servedShape = "";           // the services' ids and characteristics, to rebuild only when they change
const servedViews = new Map();  // "service id/characteristic uuid" → {update(c)}
const claims = new Map();       // characteristic uuid → {subscription, value, format}: this page answers its requests
const seenEvents = new Set();   // seq of the events logged: a claimed request comes on two subscriptions
const answered = new Set();     // request ids answered
let peripheralTimer = null;

const peripheralShown = () => !$("peripheral-view").hidden;
const charPath = (uuid) => `/v1/peripheral/characteristics/${enc(uuid)}/value`;

/** Shows the view the hash names (#peripheral), the central's otherwise. */
function showView() {
  const peripheral = location.hash === "#peripheral";
  $("central-view").hidden = peripheral;
  $("peripheral-view").hidden = !peripheral;
  const [on, off] = peripheral ? ["view-peripheral", "view-central"] : ["view-central", "view-peripheral"];
  $(on).setAttribute("aria-current", "page");
  $(off).removeAttribute("aria-current");
  if (peripheral) refreshPeripheral();
}

/** Reads GET /v1/peripheral again soon: events come in bursts (a write, then its connection). */
function schedulePeripheral() {
  if (peripheralTimer) return;
  peripheralTimer = setTimeout(() => { peripheralTimer = null; refreshPeripheral(); }, 150);
}

async function refreshPeripheral() {
  let status;
  try { status = await api("GET", "/v1/peripheral?format=hex"); } catch (e) {
    if (e.status === 501) noPeripheralRole(e);
    else if (e.status !== 401) showError(e, "peripheral");
    return;
  }
  served = status;
  renderPeripheral();
}

function noPeripheralRole(e) {
  setBadge($("role-state"), "unsupported", "unsupported");
  $("role-none").hidden = false;
  $("role-none").textContent = `Not available: ${e.message} — ${e.cbName} (${e.domain} ${e.code}), HTTP ${e.status}.`;
  for (const el of document.querySelectorAll("#peripheral-view .needs-role")) el.hidden = true;
}

function renderPeripheral() {
  const p = served;
  setBadge($("role-state"), p.state, p.state);
  $("role-none").hidden = true;
  for (const el of document.querySelectorAll("#peripheral-view .needs-role")) el.hidden = false;
  const ids = Object.keys(p.adapters).sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  $("role-adapters").replaceChildren(...ids.map((id) => {
    const a = p.adapters[id];
    return h("li", { dataset: { adapter: id } }, h("span", { class: "name" }, id),
      h("span", { class: "meta" }, `advertisements: ${a.activeInstances} running, ${a.availableInstances} more possible`));
  }));
  const select = $("advertise-adapter");
  if ([...select.options].slice(1).map((o) => o.value).join() !== ids.join())
    select.replaceChildren(h("option", { value: "" }, "default"), ...ids.map((id) => h("option", { value: id }, id)));
  $("centrals").replaceChildren(...p.centrals.map((c) =>
    h("li", { dataset: { central: c.address } }, h("span", { class: "name mono" }, c.address),
      h("span", { class: "actions" }, h("span", { class: "badge connected" }, "on " + c.adapter)))));
  $("central-count").textContent = String(p.centrals.length);
  renderAdvertisements(p.advertisements);
  renderServed(p.services);
}

function renderAdvertisements(list) {
  $("advertisements").replaceChildren(...list.map((a) => {
    const what = a.iBeacon ? `iBeacon ${a.iBeacon.uuid} ${a.iBeacon.major ?? 0}/${a.iBeacon.minor ?? 0}`
      : a.eddystone ? `Eddystone ${a.eddystone.url || a.eddystone.namespace}`
      : [a.localName ? `"${a.localName}"` : null, ...(a.serviceUUIDs || []).map(shortUUID)].filter(Boolean).join(" · ") || "(no data)";
    return h("li", { dataset: { advertisement: a.id } },
      h("span", { class: "name" }, `#${a.id} `, what),
      h("span", { class: "actions" },
        h("span", { class: "badge " + (a.registered ? "ok" : "bad") }, a.registered ? "on air" : "waiting"),
        h("button", { type: "button", class: "quiet", "aria-label": `stop advertisement ${a.id}`,
          onclick: () => attempt(`stop advertisement ${a.id}`, async () => {
            await api("DELETE", `/v1/peripheral/advertisements/${a.id}`);
            await refreshPeripheral();
          }) }, "Stop")),
      h("span", { class: "meta" }, `on ${a.adapter}` + (a.connectable === false || (a.iBeacon || a.eddystone) && a.connectable !== true ? " · not connectable" : " · connectable")));
  }));
  $("advertisement-count").textContent = String(list.length);
}

function renderServed(services) {
  const shape = services.map((s) => `${s.id}:${s.characteristics.map((c) => c.uuid).join(",")}`).join(";");
  if (shape !== servedShape) {
    servedShape = shape;
    servedViews.clear();
    $("served").replaceChildren(...services.map(servedServiceView));
    // The advertisement form offers what is served, until someone types there.
    const field = $("advertise-services");
    if (!field.dataset.edited) field.value = services.map((s) => shortUUID(s.uuid)).join(", ");
  }
  for (const s of services) for (const c of s.characteristics) servedViews.get(`${s.id}/${c.uuid}`)?.update(c);
  $("service-count").textContent = String(services.length);
  $("served-none").hidden = services.length > 0;
}

function servedServiceView(s) {
  const remove = h("button", { type: "button", class: "quiet", "aria-label": `remove service ${s.id}` }, "Remove");
  remove.addEventListener("click", () => attempt(`remove service ${s.id}`, async () => {
    for (const c of s.characteristics) if (claims.has(c.uuid)) await unclaim(c.uuid);
    await api("DELETE", `/v1/peripheral/services/${s.id}`);
    await refreshPeripheral();
  }));
  return h("div", { class: "service", dataset: { service: s.id, uuid: shortUUID(s.uuid) } },
    h("div", { class: "service-head" },
      h("strong", {}, nameOf("services", s.uuid, s.name) || "Service"), h("code", {}, shortUUID(s.uuid)),
      h("span", { class: "hint" }, `#${s.id} · ${s.adapter}` + (s.handle ? ` · handle ${s.handle}` : "") + (s.primary ? "" : " · secondary")),
      h("span", { class: "badge " + (s.registered ? "ok" : "bad") }, s.registered ? "served" : "not served now"),
      remove),
    ...s.characteristics.map((c) => servedCharacteristicView(s, c)));
}

/** A value in `format` as the page writes values: 0x… and, when it is text, the text. */
function valueText(value, format) {
  const bytes = bytesOf(value || "", format || "hex");
  const t = text(bytes);
  return `0x${hex(bytes) || "(empty)"}` + (t !== null && bytes.length ? `  "${t}"` : "");
}

function servedCharacteristicView(s, c) {
  const props = c.properties || [];
  const name = nameOf("characteristics", c.uuid, c.name);
  const value = h("div", { class: "value", "aria-live": "polite" });
  const badges = h("div", { class: "props" });
  const result = h("div", { class: "hint set-result", role: "status" });
  const input = h("input", { "aria-label": "value to set", spellcheck: "false", placeholder: "value" });
  const format = h("select", { "aria-label": "value format" }, ...["utf8", "hex", "base64"].map((f) => h("option", { value: f }, f)));
  const set = h("form", { class: "row write" }, input, format, h("button", { type: "submit" }, "Set"));
  set.addEventListener("submit", (event) => {
    event.preventDefault();
    attempt(`set ${name || shortUUID(c.uuid)}`, async () => {
      const r = await api("PUT", charPath(c.uuid), { value: input.value, format: format.value });
      const notifies = props.includes("notify") || props.includes("indicate");
      result.textContent = `set ${r.length} byte(s) at ${new Date().toLocaleTimeString()}`
        + (notifies ? ` · sent: ${r.sent ? "yes" : "no (no central subscribed)"}` : "");
      result.dataset.sent = String(r.sent);
      await refreshPeripheral();
    });
  });

  // "Answer reads myself": a claim over the page's WebSocket; reads get what is typed here.
  const claim = claims.get(c.uuid);
  const answer = h("input", { "aria-label": "answer to reads", spellcheck: "false", placeholder: "answer", value: claim?.value ?? "" });
  const answerFormat = h("select", { "aria-label": "answer format" }, ...["utf8", "hex", "base64"].map((f) => h("option", { value: f, selected: claim?.format === f }, f)));
  const claimBox = h("input", { type: "checkbox", class: "claim-toggle", checked: Boolean(claim) });
  const keep = () => { const k = claims.get(c.uuid); if (k) { k.value = answer.value; k.format = answerFormat.value; } };
  answer.addEventListener("input", keep);
  answerFormat.addEventListener("change", keep);
  claimBox.addEventListener("change", () => {
    if (!claimBox.checked) { unclaim(c.uuid); return; }
    wsCommand({ op: "claim", characteristic: c.uuid }).then((ack) => {
      claims.set(c.uuid, { subscription: ack.subscription, value: answer.value, format: answerFormat.value });
      schedulePeripheral();
    }, (e) => { claimBox.checked = false; showError(e, `claim ${name || shortUUID(c.uuid)}`); });
  });

  const view = {
    update(now) {
      value.textContent = valueText(now.value, now.format);
      badges.replaceChildren(...props.map((p) => h("span", { class: "badge" }, p)),
        ...(now.subscribed ? [h("span", { class: "badge ok" }, "subscribed")] : []),
        ...(now.claimed ? [h("span", { class: "badge link" }, claims.has(c.uuid) ? "answered here" : "claimed")] : []));
      claimBox.checked = claims.has(c.uuid);
    },
  };
  servedViews.set(`${s.id}/${c.uuid}`, view);
  const claimable = props.includes("read") || props.includes("write");
  return h("div", { class: "char", dataset: { uuid: shortUUID(c.uuid), handle: c.handle || "" } },
    h("div", {}, h("span", { class: "title" }, name || "Characteristic"), " ", h("code", {}, shortUUID(c.uuid)),
      c.handle ? h("span", { class: "hint" }, ` · handle ${c.handle}`) : null),
    badges,
    c.descriptors.length ? h("div", { class: "hint" }, "descriptors: ",
      c.descriptors.map((d) => `${nameOf("descriptors", d.uuid, d.name) || shortUUID(d.uuid)} ${valueText(d.value, d.format)}`).join(", ")) : null,
    value, set, result,
    claimable ? h("div", { class: "row claim" }, h("label", { class: "check" }, claimBox, "answer reads myself with"), answer, answerFormat) : null);
}

function unclaim(uuid) {
  const claim = claims.get(uuid);
  claims.delete(uuid);
  schedulePeripheral();
  return claim ? wsCommand({ op: "unclaim", subscription: claim.subscription }).catch((e) => showError(e, "unclaim")) : undefined;
}

/** Answers a claimed request: a read with the typed value from its offset on, a write with done. */
function respond(m, claim) {
  if (answered.has(m.request)) return null;
  answered.add(m.request);
  if (answered.size > 1000) answered.delete(answered.values().next().value);
  const command = { op: "respond", request: m.request };
  if (m.type === "peripheralRead") {
    const bytes = bytesOf(claim.value, claim.format).slice(m.offset || 0);
    Object.assign(command, { value: hex(bytes), format: "hex" });
  }
  wsCommand(command).catch((e) => showError(e, `answer ${m.request}`));
  return command.value ?? "";
}

function peripheralEvent(m) {
  if (m.seq !== undefined) {
    if (seenEvents.has(m.seq)) return;
    seenEvents.add(m.seq);
    if (seenEvents.size > 1000) seenEvents.delete(seenEvents.values().next().value);
  }
  const uuid = m.characteristic?.uuid;
  // With `error`, a claimed request is past its deadline: nothing to answer any more.
  const claim = m.request && uuid && !m.error ? claims.get(uuid) : null;
  const answer = claim ? respond(m, claim) : null;
  logRequest(m, answer);
  // What the view shows changed: the centrals, a subscription, a stored value, another's claim.
  if ((m.type !== "peripheralRead" && m.type !== "indicationConfirmed") || (m.request && !claim)) schedulePeripheral();
}

function logRequest(m, answer) {
  const uuid = m.characteristic?.uuid;
  const what = uuid ? (nameOf("characteristics", uuid) || shortUUID(uuid)) + (m.descriptor ? ` / ${shortUUID(m.descriptor)}` : "") : null;
  const detail = [];
  if (m.value !== undefined) detail.push(h("span", { class: "value" }, valueText(m.value, m.format)));
  if (m.offset) detail.push(` offset ${m.offset}`);
  if (m.withResponse === false) detail.push(" (without response)");
  if (m.error) detail.push(h("span", { class: "error-text" }, ` ${m.error.name} (${m.error.domain} ${m.error.code})`));
  if (m.request && !m.error) detail.push(answer !== null ? ` → answered ${answer === "" ? "done" : valueText(answer, "hex")}` : ` (request ${m.request}, claimed elsewhere)`);
  const list = $("requests");
  list.prepend(h("li", { dataset: { type: m.type } },
    h("span", { class: "time" }, new Date(m.time || Date.now()).toLocaleTimeString()), "  ",
    h("span", { class: "type" }, m.type), "  ",
    h("span", { class: "central mono" }, m.central || "(a central)"), ` on ${m.adapter || "?"}`,
    what ? ["  ", h("span", { class: "char" }, what)] : null, "  ", ...detail));
  while (list.children.length > 200) list.lastChild.remove();
  $("request-count").textContent = String(list.children.length);
}

function advertisementBody(form) {
  const f = new FormData(form);
  const body = {};
  if (f.get("adapter")) body.adapter = f.get("adapter");
  if (f.get("kind") === "iBeacon") {
    body.iBeacon = { uuid: f.get("beaconUUID").trim(), major: Number(f.get("major") || 0), minor: Number(f.get("minor") || 0),
      measuredPower: Number(f.get("measuredPower") || -59) };
    return body;
  }
  if (f.get("localName").trim()) body.localName = f.get("localName").trim();
  const uuids = f.get("serviceUUIDs").split(/[\s,]+/).filter(Boolean);
  if (uuids.length) body.serviceUUIDs = uuids;
  body.connectable = f.get("connectable") === "on";
  return body;
}

function startPeripheralView() {
  $("definition").value = EXAMPLE_SERVICE;
  $("define-example").addEventListener("click", () => { $("definition").value = EXAMPLE_SERVICE; });
  $("define").addEventListener("submit", (e) => {
    e.preventDefault();
    attempt("define a service", async () => {
      let body;
      try { body = JSON.parse($("definition").value); } catch (error) { throw new Error(`the service is not JSON: ${error.message}`); }
      await api("POST", "/v1/peripheral/services", body);
      await refreshPeripheral();
    });
  });
  $("advertise-kind").addEventListener("change", (e) => {
    for (const label of $("advertise").querySelectorAll("[data-kind]")) label.hidden = label.dataset.kind !== e.target.value;
  });
  $("advertise-services").addEventListener("input", (e) => { e.target.dataset.edited = "yes"; });
  $("advertise").addEventListener("submit", (e) => {
    e.preventDefault();
    attempt("advertise", async () => {
      await api("POST", "/v1/peripheral/advertisements", advertisementBody(e.target));
      await refreshPeripheral();
    });
  });
  $("requests-clear").addEventListener("click", () => { $("requests").replaceChildren(); $("request-count").textContent = "0"; });
  window.addEventListener("hashchange", showView);
  showView();
}

// ---- the WebSocket: events, and subscribe commands ----

let ws = null, wsNext = 1, wsRetry = 1000;
const pending = new Map();      // command id → {resolve, reject}
const outbox = [];              // commands sent before the socket is open (bounded)

function wsSend(message) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
  else if (outbox.length < 64) outbox.push(message);
}

/** Sends a command; resolves with its `ack`/`result`, rejects with its `error` (in 10 s at most). */
function wsCommand(message) {
  const id = "c" + wsNext++;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { pending.delete(id); reject(new Error(`no answer to ${message.op} in 10 s`)); }, 10000);
    pending.set(id, { resolve: (m) => { clearTimeout(timer); resolve(m); }, reject: (e) => { clearTimeout(timer); reject(e); } });
    wsSend({ ...message, id });
  });
}

function connectStream() {
  const url = location.origin.replace(/^http/, "ws") + "/v1/ws";
  ws = token.get() ? new WebSocket(url, ["gattway", "bearer." + token.get()]) : new WebSocket(url);
  ws.onopen = () => {
    wsRetry = 1000;
    setBadge($("stream"), "live", "ok");
    ws.send(JSON.stringify({ op: "subscribe", id: "events", types: ["state", "adapter", "advertisement", "connection", "sensor", "pairing", "servicesChanged", ...PERIPHERAL_EVENTS] }));
    while (outbox.length) ws.send(JSON.stringify(outbox.shift()));
    refreshAdapters();
    refreshDevices();
    refreshSensors();
    if (peripheralShown()) refreshPeripheral();
  };
  ws.onmessage = (e) => onStreamMessage(JSON.parse(e.data));
  ws.onclose = () => {
    setBadge($("stream"), "offline", "bad");
    for (const [, p] of pending) p.reject(new Error("the WebSocket closed"));
    pending.clear();
    for (const view of views.values()) { view.subscription = null; view.setSubscribed(false); }
    // Claims end with the socket: the stored values answer again.
    if (claims.size) { claims.clear(); schedulePeripheral(); }
    setTimeout(connectStream, wsRetry);
    wsRetry = Math.min(wsRetry * 2, 10000);
  };
}

function onStreamMessage(m) {
  if (m.op) {
    const p = pending.get(m.id);
    if (m.op === "error" && !p) showError(new APIError(0, m), "WebSocket");
    if (!p) return;
    pending.delete(m.id);
    m.op === "error" ? p.reject(new APIError(0, m)) : p.resolve(m);
    return;
  }
  switch (m.type) {
    case "state":
      showState(m);
      if (peripheralShown()) schedulePeripheral();
      break;
    case "adapter":
      adapterChanged(m);
      // An adapter's power or presence changes what the peripheral side can serve.
      if (peripheralShown()) schedulePeripheral();
      break;
    case "advertisement":
      mergeDevice(m.peripheral);
      renderDevices();
      break;
    case "connection":
      setDeviceState(m.device, m.state);
      // The event does not say through which adapter: the device does.
      if (m.state === "connected" && severalAdapters) refreshDevice(m.device);
      if (m.error) showError(new APIError(0, { error: m.error }), `${m.device} ${m.state}`);
      break;
    case "sensor": {
      const d = devices.get(m.device);
      if (d) { d.sensor = m.sensor; if (m.rssi !== undefined) d.rssi = m.rssi; d.lastSeen = m.time; renderDevices(); }
      const s = sensors.get(m.device) || { id: m.device, name: d?.name };
      sensors.set(m.device, { ...s, reading: m.sensor, rssi: m.rssi ?? s.rssi, updated: m.time, stale: undefined });
      renderSensors();
      break;
    }
    case "notification": {
      const view = [...views.values()].find((v) => v.subscription === m.subscription);
      if (view) view.received(m);
      break;
    }
    case "pairing":
      showPairing(m);
      break;
    case "servicesChanged":
      if (m.device === selected) { gattTree = null; views.clear(); loadGATT(); }
      break;
    case "centralConnected": case "centralDisconnected": case "subscribed": case "unsubscribed":
    case "peripheralRead": case "peripheralWrite": case "indicationConfirmed":
      peripheralEvent(m);
      break;
    case "dropped":
      showError(new Error(`${m.count} event(s) dropped: this page read too slowly`), "events");
      break;
  }
}

// ---- start ----

async function start() {
  // Every handler is attached before the first await: this deferred script runs before the page's
  // load event, and a form submitted before its handler exists would reload the page instead.
  $("token").addEventListener("submit", (e) => {
    e.preventDefault();
    token.set($("token-value").value.trim());
    $("token").hidden = true;
    if (ws) ws.close(); else connectStream();
    refreshScan();
    refreshDevices();
    refreshSensors();
    if (peripheralShown()) refreshPeripheral();
  });
  $("scan").addEventListener("submit", (e) => {
    e.preventDefault();
    attempt("scan", async () => {
      const s = await api("POST", "/v1/scan", scanBody(e.target));
      setBadge($("scanning"), s.scanning ? "scanning" : "stopped", s.scanning ? "scanning" : "");
      await refreshDevices();
    });
  });
  $("scan-stop").addEventListener("click", () => attempt("stop scan", async () => {
    await api("DELETE", "/v1/scan");
    await refreshScan();
  }));
  $("device-connect").addEventListener("click", () => {
    const id = selected;
    setDeviceState(id, "connecting");
    attempt(`connect ${id}`, async () => {
      const d = await api("POST", devicePath(id) + "/connect", { timeout: 10 });
      mergeDevice(d);
      setDeviceState(id, d.state);
    }).then(() => { if (devices.get(id)?.state === "connecting") refreshDevices(); });
  });
  $("device-disconnect").addEventListener("click", () => {
    const id = selected;
    attempt(`disconnect ${id}`, async () => {
      await api("POST", devicePath(id) + "/disconnect");
      gattTree = null;
      $("gatt").replaceChildren();
      views.clear();
      await refreshDevices();
    });
  });
  $("device-pair").addEventListener("click", () => {
    const id = selected;
    attempt(`pair ${id}`, async () => {
      const d = await api("POST", devicePath(id) + "/pair", {});
      mergeDevice(d);
      renderDeviceHead();
    });
  });
  $("device-unbond").addEventListener("click", () => {
    const id = selected;
    attempt(`forget ${id}'s bond`, async () => {
      await api("DELETE", devicePath(id) + "/bond");
      const d = devices.get(id);
      if (d) { d.paired = false; d.bonded = false; }
      renderDeviceHead();
    });
  });
  $("device-serial").addEventListener("click", () => openTerminal(true));
  $("terminal-close").addEventListener("click", closeTerminal);
  $("terminal-in").addEventListener("submit", (e) => {
    e.preventDefault();
    if (!terminal || terminal.ws.readyState !== WebSocket.OPEN) return;
    terminal.ws.send($("terminal-line").value + { lf: "\n", crlf: "\r\n", none: "" }[$("terminal-end").value]);
    $("terminal-line").value = "";
  });
  $("pairing").addEventListener("submit", (e) => { e.preventDefault(); answerPairing(true); });
  $("pairing-no").addEventListener("click", () => answerPairing(false));
  $("device-close").addEventListener("click", closeDevice);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && selected) closeDevice(); });
  startPeripheralView();

  names = await fetch("/ui/names.json").then((r) => r.json()).catch(() => names);
  await refreshState();
  await refreshAdapters();
  await refreshScan();
  // Without a valid token the socket would only be refused: it opens once one is entered.
  if (await refreshDevices()) connectStream();
  // RSSI, "last seen" and stale change without an event once a device was announced: a slow refresh.
  setInterval(() => { if (!document.hidden) { refreshDevices(); refreshSensors(); } }, 5000);
}

start();
