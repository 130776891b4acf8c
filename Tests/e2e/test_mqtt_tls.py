"""Issue 14: the MQTT bridge on a broker that wants more than a plain connection: `mqtts://` with
client certificates, and a user and password. One mosquitto has three listeners: an anonymous
plain one (the test's own clients watch there), TLS that requires a client certificate signed by
a CA made here with openssl, and plain with a password file (mosquitto_passwd)."""
import os
import re
import subprocess
import time

import pytest

from conftest import wait_for
from mqttbroker import Broker, Client, start_gateway

BTHOME = "F0:00:00:00:00:06"

OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1
extendedKeyUsage = serverAuth
[client]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
"""


class PKI:
    """A throwaway CA (and a second, unrelated one), a server certificate for 127.0.0.1 and a
    client certificate, all EC P-256, valid for a day."""

    def __init__(self, directory):
        self.directory = directory
        self.config = directory / "openssl.cnf"
        self.config.write_text(OPENSSL_CONFIG)
        self.ca = self._make("ca", "gattway test CA", "ca")
        self.other_ca = self._make("other-ca", "some other CA", "ca")
        self.server = self._make("server", "127.0.0.1", "server", signer="ca")
        self.client = self._make("client", "gattway test client", "client", signer="ca")

    def _make(self, name, subject, extensions, signer=None):
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        command = ["openssl", "req", "-x509", "-config", str(self.config), "-extensions", extensions,
                   "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                   "-subj", f"/CN={subject}", "-keyout", str(key), "-out", str(cert)]
        if signer:
            command += ["-CA", str(self.directory / f"{signer}.pem"), "-CAkey", str(self.directory / f"{signer}.key")]
        subprocess.run(command, check=True, capture_output=True, timeout=30)
        return str(cert), str(key)


USER, PASSWORD = "upstairs", "s3cret:with@odd%chars"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return PKI(tmp_path_factory.mktemp("mqtt-pki"))


@pytest.fixture
def broker(tmp_path, pki):
    passwords = tmp_path / "passwords"
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), USER, PASSWORD], check=True, capture_output=True, timeout=30)
    os.chmod(passwords, 0o600)
    # As root mosquitto becomes user "mosquitto" unless told otherwise, and could not read these files.
    stay = ["user root"] if os.geteuid() == 0 else []
    b = Broker(tmp_path, listeners=[
        [*stay, "cafile " + pki.ca[0], "certfile " + pki.server[0], "keyfile " + pki.server[1],
         "require_certificate true", "allow_anonymous true"],
        ["allow_anonymous false", "password_file " + str(passwords)],
    ])
    yield b
    b.stop()


def tls_url(broker):
    return f"mqtts://127.0.0.1:{broker.ports[0]}"


def password_url(broker, user, password):
    from urllib.parse import quote
    return f"mqtt://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{broker.ports[1]}"


def failures(gw, pattern):
    """The bridge's log lines (after their time stamp) that match."""
    return [line for line in gw.log if re.match(r"\S+ mqtt: ", line) and re.search(pattern, line)]


def refused_and_retried(broker, gw, gateway_id, pattern):
    """The gateway logs why it cannot connect, at least twice (it tries again), never gets
    online, and its HTTP API answers meanwhile."""
    watcher = Client(broker, f"gattway/{gateway_id}/#")
    try:
        # The first attempt, and the next after 1 s (the one after that waits 4 s more).
        deadline = time.monotonic() + 15
        while len(failures(gw, pattern)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # the log has no event to wait on but its lines
        assert len(failures(gw, pattern)) >= 2, failures(gw, "")
        assert not failures(gw, "connected to"), failures(gw, "")
        assert watcher.last(f"gattway/{gateway_id}/availability") is None
        status, body, _ = gw.get("/v1/state")
        assert status == 200 and body["state"] == "poweredOn"
        assert gw.proc.poll() is None
    finally:
        watcher.close()


def test_mqtts_with_a_client_certificate_publishes_availability_and_sensors(broker, pki):
    watcher = Client(broker, "gattway/gw-tls/availability", f"gattway/gw-tls/sensors/{BTHOME}")
    gw = start_gateway(tls_url(broker), "gw-tls", "--mqtt-ca", pki.ca[0], "--mqtt-cert", pki.client[0],
                       "--mqtt-key", pki.client[1])
    try:
        assert watcher.wait(lambda: watcher.last("gattway/gw-tls/availability")
                            and watcher.last(f"gattway/gw-tls/sensors/{BTHOME}"), 15), gw.log
        assert watcher.last("gattway/gw-tls/availability")[1] == b"online"
        assert watcher.json(f"gattway/gw-tls/sensors/{BTHOME}")["gateway"] == "gw-tls"
        assert failures(gw, f"connected to mqtts://127.0.0.1:{broker.ports[0]} "), gw.log
        assert gw.stop() == 0
        assert watcher.wait(lambda: watcher.last("gattway/gw-tls/availability")[1] == b"offline")
    finally:
        gw.stop()
        watcher.close()


def test_a_broker_certificate_from_another_ca_is_refused_with_a_clear_error_and_tried_again(broker, pki):
    gw = start_gateway(tls_url(broker), "gw-wrong-ca", "--mqtt-ca", pki.other_ca[0], "--mqtt-cert", pki.client[0],
                       "--mqtt-key", pki.client[1])
    try:
        refused_and_retried(broker, gw, "gw-wrong-ca", r"certificate verify failed")
    finally:
        gw.stop()


def test_no_client_certificate_is_refused_with_a_clear_error_and_tried_again(broker, pki):
    gw = start_gateway(tls_url(broker), "gw-no-cert", "--mqtt-ca", pki.ca[0])
    try:
        refused_and_retried(broker, gw, "gw-no-cert", r"certificate required|peer did not return a certificate|handshake failure")
    finally:
        gw.stop()


def test_the_right_user_and_password_connect(broker):
    watcher = Client(broker, "gattway/gw-user/availability")
    gw = start_gateway(password_url(broker, USER, PASSWORD), "gw-user")
    try:
        assert watcher.wait(lambda: watcher.last("gattway/gw-user/availability"), 15), gw.log
        assert watcher.last("gattway/gw-user/availability")[1] == b"online"
        # The password never reaches the log.
        assert not any(PASSWORD in line for line in gw.log)
        assert wait_for(lambda: any(f"mqtt://{USER}:***@127.0.0.1:{broker.ports[1]}" in line for line in gw.log), 5), gw.log
    finally:
        gw.stop()
        watcher.close()


def test_a_wrong_password_is_refused_with_a_clear_error_and_tried_again(broker):
    gw = start_gateway(password_url(broker, USER, "N0tTheP4ssword"), "gw-wrong-pw")
    try:
        refused_and_retried(broker, gw, "gw-wrong-pw", r"[Nn]ot authori[sz]ed|[Bb]ad user name or password")
        assert not any("N0tTheP4ssword" in line for line in gw.log)
    finally:
        gw.stop()
