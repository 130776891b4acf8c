"""What the same scenario expects of each target: the built-in simulator, or real BlueZ in the
realbluez VM (../shared/realbluez: hci0 is ours, hci1 runs the RB-Periph peripheral)."""
import os

SIM = {
    "name": "simulator",
    "args": ["--simulate"],
    "env": {},
    "heart_rate": "F0:00:00:00:00:01",
    "battery": "F0:00:00:00:00:01",
    "info": "F0:00:00:00:00:01",
    "manufacturer": "gattway simulator",
    "serial": "F0:00:00:00:00:02",
    "secure": "F0:00:00:00:00:03",
    "duplicated_180a": "F0:00:00:00:00:02",
    # KeyboardDisplay, passkey 123456; its state 12345678-...-56789abc0011 needs an authenticated Pair.
    "lock": "F0:00:00:00:00:0E",
    # UART modules ("uart" echo, MTU 247): Nordic UART, Microchip transparent UART, HM-10 FFE0/FFE1.
    "nus": "F0:00:00:00:00:0F",
    "mchp": "F0:00:00:00:00:10",
    "hm10": "F0:00:00:00:00:11",
    "connect_timeout": 10,
}


def realbluez():
    env_file = os.environ.get("RB_ENV", "/tmp/realbluez/env")
    env = {}
    with open(env_file) as f:
        for line in f:
            line = line.strip().removeprefix("export ")
            if "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                env[key] = value.strip("'\"")
    periph = env.get("RB_PERIPHERAL_ADDRESS", "00:AA:01:01:00:01")
    return {
        "name": "realbluez",
        "args": ["--adapter", env.get("RB_CENTRAL_ADAPTER", "hci0")],
        "env": {"DBUS_SYSTEM_BUS_ADDRESS": env["DBUS_SYSTEM_BUS_ADDRESS"]},
        "heart_rate": periph,
        "battery": periph,
        "info": periph,
        "manufacturer": "RealBlueZ Emulated Devices",
        "serial": periph,
        "secure": periph,
        "duplicated_180a": periph,
        "lock": None,  # no fixed-passkey device: RB-Periph pairs as its agent (RB_AGENT) allows
        # RB-Periph echoes on its FFE1 (HM-10 style) and on its Nordic UART (RX → TX); no Microchip UART.
        "nus": periph,
        "mchp": None,
        "hm10": periph,
        "connect_timeout": 20,
        "state_dir": env.get("RB_STATE_DIR", os.path.dirname(env_file)),
    }


def current():
    return realbluez() if os.environ.get("GATTWAY_TARGET") == "realbluez" else SIM
