"""gattway's options from a configuration file (`--config`, issue 27): the Debian package's
service reads /etc/gattway/gattway.conf."""
import subprocess

import pytest

from conftest import Gateway, binary


def test_a_config_file_gives_options_and_the_command_line_wins(tmp_path):
    conf = tmp_path / "gattway.conf"
    conf.write_text("# a comment\n\n  max-body 16  \nsimulate\nno-watch\n")
    gw = Gateway(["--config", str(conf)])
    try:
        assert gw.post("/v1/scan", raw=b'{"services": ["180d", "180f"]}')[0] == 413  # the file's 16 bytes
        assert "watch started" not in "\n".join(gw.log)  # the file's no-watch beats simulate's default
    finally:
        gw.stop()
    gw = Gateway(["--config", str(conf), "--max-body", "1000"])
    try:
        assert gw.post("/v1/scan", raw=b'{"services": ["180d", "180f"]}')[0] == 200
    finally:
        gw.stop()


@pytest.mark.parametrize("lines, said", [
    ("listen 127.0.0.1:0\n\nbogus 1\n", ":3: unknown argument \"--bogus\""),
    ("no-auth yes\n", ":1: no-auth takes no value"),
    ("--listen 127.0.0.1:0\n", ":1: write the option without its dashes: listen"),
    ("# ok\nmax-body many\n", ":2: --max-body takes a positive number of bytes"),
    ("config /etc/gattway/other.conf\n", ":1: config has no place in a configuration file"),
])
def test_a_mistake_in_the_config_file_stops_gattway_with_its_line(tmp_path, lines, said):
    conf = tmp_path / "gattway.conf"
    conf.write_text(lines)
    out = subprocess.run([binary("gattway"), "--config", str(conf), "--simulate"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert f"gattway: {conf}{said}" in out.stderr


def test_a_config_file_that_cannot_be_read_stops_gattway(tmp_path):
    out = subprocess.run([binary("gattway"), "--config", str(tmp_path / "missing.conf")], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "cannot read" in out.stderr and "No such file" in out.stderr
