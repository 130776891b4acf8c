"""gattway as a systemd service (issue 27), without systemd: the configuration file (`--config`)
that the Debian package's service reads, and log lines for the journal (JOURNAL_STREAM)."""
import os
import re
import subprocess

import pytest

from conftest import Gateway, binary

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


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


def run_with_stderr_pipe(args, journal_stream):
    """gattway's stderr on a pipe; JOURNAL_STREAM names that pipe (or what `journal_stream`
    makes of its device and inode)."""
    read_end, write_end = os.pipe()
    st = os.fstat(write_end)
    env = {**os.environ, "JOURNAL_STREAM": journal_stream(st.st_dev, st.st_ino)}
    proc = subprocess.Popen([binary("gattway"), *args], stdout=subprocess.DEVNULL, stderr=write_end, env=env)
    os.close(write_end)
    return proc, os.fdopen(read_end, errors="replace")


def read_until_listening(proc, stream):
    lines = []
    for line in stream:
        lines.append(line.rstrip("\n"))
        if "listening on" in line:
            break
    proc.terminate()
    proc.wait(10)
    return lines + [line.rstrip("\n") for line in stream]


def test_on_the_journal_lines_carry_a_priority_and_no_time():
    proc, stream = run_with_stderr_pipe(["--simulate", "--listen", "127.0.0.1:0", "--state-dir", "none"],
                                        lambda dev, ino: f"{dev}:{ino}")
    lines = read_until_listening(proc, stream)
    assert any(line.startswith("<6>gattway ") and "listening on http://" in line for line in lines), lines
    assert all(re.match(r"^<[0-7]>", line) for line in lines), lines
    assert not any(TIMESTAMP.match(line[3:]) for line in lines), lines
    # An error, several lines long: each line has its prefix.
    proc, stream = run_with_stderr_pipe(["--bogus"], lambda dev, ino: f"{dev}:{ino}")
    assert proc.wait(10) == 2
    assert stream.read().splitlines() == ['<3>gattway: unknown argument "--bogus"', "<3>Try gattway --help."]


def test_a_journal_stream_that_is_not_stderr_is_ignored():
    """A child of a service inherits JOURNAL_STREAM with its stderr elsewhere."""
    proc, stream = run_with_stderr_pipe(["--simulate", "--listen", "127.0.0.1:0", "--state-dir", "none"],
                                        lambda dev, ino: f"{dev}:{ino + 1}")
    lines = read_until_listening(proc, stream)
    assert lines and all(TIMESTAMP.match(line) for line in lines), lines
