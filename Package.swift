// swift-tools-version:6.0
// gattway: BLE devices over HTTP, on BlueZ via D-Bus.
// Dependencies point one way: executables → doors (HTTPAPI, MQTTBridge, ESPHomeProxy) → GatewayCore → (BLE, Sensors);
// HTTPAPI → (Access → HTTPServer, Dashboard); ESPHomeProxy → ESPHomeAPI → (CNettle, CLinux, Threading); BlueZ → (DBus, BLE);
// executables → Launch (options, start and teardown) → (Access, the doors' option types);
// executables → MQTT → (CMosquitto, Threading); executables → Avahi → DBus; Simulator → (DBus, BLE, AESCCM, Management, Sockets);
// Sensors → (AESCCM, BLE); Management → (CLinux, BLE, Threading) and nothing else of ours. No door imports another door; the core imports no door and no transport (Tests/architecture/check.py checks it). Only
// CDBus/CMicroHTTPD/CNettle/CMosquitto/CLinux touch C.
import PackageDescription

// The release binary is linked by lld with its relative relocations packed (DT_RELR, glibc
// 2.36+: Debian 12 and the image's bookworm): a position-independent binary otherwise carries
// ~1 MB of R_X86_64_RELATIVE entries that the loader reads, all of them, at every start. Measured
// on bench.py's rss rig: idle RSS 19.6 → 18.5 MB, and 20.2 → 19.0 MB after 1000 requests and
// 100 WebSocket notifications. lld ships with the Swift toolchain (and the swift:6.3 image);
// debug builds, tests and the fuzz build keep the default linker (gold).
// libstdc++ (which the static Swift runtime needs) is linked statically too: the shared one is
// 1 MB of an idle gattway, 0.7 MB of it data the loader relocates (idle RSS 17.75 → 16.96 MB).
// The toolchain's own link arguments ask for -lstdc++ before anything a package can add, so
// Sources/gattway/Linking/ is searched first: its libstdc++.so is a linker script that names the archive,
// libstdc++.a, from the compiler's directory.
// The functions that run at start and idle are laid out together (Sources/gattway/Linking/gattway.order, written
// by bench/order.py from a callgrind run of the rss rig): the kernel maps 64 kB around every page
// touched, and ~0.9 MB of running code spread over 10 MB of .text kept 7 MB of it resident. Idle
// RSS 16.96 → 14.42 MB. Names the order no longer matches are skipped, new code goes after it.
let releaseLinking: [LinkerSetting] = [
    .unsafeFlags(["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                  "-L", Context.packageDirectory + "/Sources/gattway/Linking",
                  "-Xlinker", "--symbol-ordering-file=" + Context.packageDirectory + "/Sources/gattway/Linking/gattway.order",
                  "-Xlinker", "--no-warn-symbol-ordering"], .when(configuration: .release)),
]

let package = Package(
    name: "gattway",
    products: [
        .executable(name: "gattway", targets: ["gattway"]),
        .executable(name: "gattway-sim", targets: ["gattway-sim"]),
    ],
    targets: [
        // C libraries from Debian. Each header also carries `gw_` inline shims for what Swift
        // cannot call (variadics, macros, code between fork and exec), so no separate C target is needed.
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        // Nettle, for AES-CCM with the 4-byte tags of BTHome (GnuTLS's AEAD API has 8 and 16 only),
        // and the ESPHome API's Noise handshake (X25519, ChaCha20-Poly1305, SHA-256, HMAC).
        .systemLibrary(name: "CNettle", pkgConfig: "nettle", providers: [.apt(["nettle-dev"])]),
        // libmosquitto's headers (libmosquitto-dev), for the MQTT bridge (`--mqtt`). Not linked (no
        // pkgConfig: it would add -lmosquitto): the MQTT module opens the library when it is used.
        .systemLibrary(name: "CMosquitto"),
        // epoll, eventfd and the Bluetooth management socket's address (in libc or the kernel's ABI;
        // Glibc's module leaves them out), for the ESPHome API's server and the management channel.
        .systemLibrary(name: "CLinux"),

        // Tools for code that runs on several threads, for every layer.
        .target(name: "Threading"),
        .target(name: "DBus", dependencies: ["CDBus", "Threading"]),
        .target(name: "BLE"),
        .target(name: "AESCCM", dependencies: ["CNettle"]),
        // Advertisement decoders (BTHome, ATC1441/PVVX, MiBeacon, Ruuvi, iBeacon, Eddystone): pure logic.
        .target(name: "Sensors", dependencies: ["BLE", "AESCCM"]),
        .target(name: "BlueZ", dependencies: ["DBus", "BLE", "Threading", "Management"]),
        // The kernel's Bluetooth management socket: advertisements as the controller reported them
        // (device-found events), read on a thread of its own; knowing nothing of D-Bus or the gateway.
        .target(name: "Management", dependencies: ["CLinux", "BLE", "Threading"]),
        .target(name: "Simulator", dependencies: ["DBus", "BLE", "AESCCM", "Management", "Sockets"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "Sockets", "Threading"]),
        // TCP listening sockets, for the servers that are not HTTP (the ESPHome API, serial ports).
        .target(name: "Sockets"),
        // Who may do what: tokens, origins, CORS, rates, media types, in front of the routes,
        // and the exposure policy (no listener beyond loopback without credentials, unless told).
        .target(name: "Access", dependencies: ["HTTPServer", "Sockets", "Threading"]),
        // The browser dashboard's static files, embedded in the binary; served by Gateway.
        .target(name: "Dashboard", exclude: ["make-names.py"], resources: [
            .embedInCode("Resources/index.html"), .embedInCode("Resources/app.js"), .embedInCode("Resources/style.css"),
            .embedInCode("Resources/names.json"), .embedInCode("Resources/icon.svg"),
        ]),
        // What every door shares: the event hub, notification holds, restoration, kept and
        // `connect=auto` connections, the value cache, the blocklisted central, the sensor board.
        .target(name: "GatewayCore", dependencies: ["BLE", "Sensors", "Threading"]),
        // The doors. The HTTP API: routes, models, SSE and WebSocket streams, the dashboard's route.
        .target(name: "HTTPAPI", dependencies: ["GatewayCore", "SerialBridge", "HTTPServer", "Access", "BLE", "Sensors", "Threading", "Dashboard"]),
        // The MQTT bridge: topics, Home Assistant discovery, commands, the characteristic exposer,
        // over a MessageBroker (the executable hands it the MQTT client).
        .target(name: "MQTTBridge", dependencies: ["GatewayCore", "BLE", "Sensors", "Threading"]),
        // An MQTT client over libmosquitto (reconnect, last will, QoS/retain, MQTT 5 properties),
        // knowing nothing of gattway; the executable hands it to the MQTT bridge.
        .target(name: "MQTT", dependencies: ["CMosquitto", "Threading"]),
        // The ESPHome native API (protobuf messages, plaintext and Noise frames, a TCP server on a
        // thread of its own), knowing nothing of gattway.
        .target(name: "ESPHomeAPI", dependencies: ["CNettle", "CLinux", "Sockets", "Threading"]),
        // A DNS-SD service announced through avahi-daemon's D-Bus API (the ESPHome API's
        // `_esphomelib._tcp`), knowing nothing of gattway.
        .target(name: "Avahi", dependencies: ["DBus"]),
        // The ESPHome-API door (`--esphome-api`): gattway as a Home Assistant Bluetooth proxy.
        // What it takes from the gateway's core is in one file (Core.swift).
        .target(name: "ESPHomeProxy", dependencies: ["ESPHomeAPI", "GatewayCore", "BLE", "Threading"]),

        // The serial-port door: a device's UART as a serial port (profiles, line framing, paced
        // writes), shared by its TCP ports (`--serial`) and the HTTP API's WebSocket route.
        .target(name: "SerialBridge", dependencies: ["GatewayCore", "BLE", "Sockets", "Threading"]),

        // How gattway is launched: its options, described once in a table (command line, --config,
        // GATTWAY_* and --help come from it), and the services it starts, stopped in reverse.
        // The executable's wiring, apart so that it can be tested; only executables import it.
        .target(name: "Launch", dependencies: ["Access", "BLE", "ESPHomeAPI", "MQTT", "MQTTBridge", "SerialBridge"]),
        .executableTarget(name: "gattway", dependencies: ["Launch", "GatewayCore", "HTTPAPI", "MQTTBridge", "ESPHomeProxy", "ESPHomeAPI", "SerialBridge", "Sockets", "Avahi", "Access",
                                                          "HTTPServer", "BlueZ", "Simulator", "DBus", "Sensors", "MQTT", "Threading"],
                          exclude: ["Linking"], linkerSettings: releaseLinking),
        .executableTarget(name: "gattway-sim", dependencies: ["Simulator", "DBus", "Threading"]),

        .testTarget(name: "ThreadingTests", dependencies: ["Threading"]),
        .testTarget(name: "BLETests", dependencies: ["BLE"]),
        .testTarget(name: "SensorsTests", dependencies: ["Sensors", "AESCCM", "BLE"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus"]),
        // Frames/*.hex: frames one per line, hand-made from the spec and recorded with btmon.
        .testTarget(name: "ManagementTests", dependencies: ["Management", "BLE"], exclude: ["Frames"]),
        // CMicroHTTPD for GnuTLS: the TLS tests' client.
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "CMicroHTTPD"]),
        // Sensors decodes what the simulator's sensors advertise.
        .testTarget(name: "SimulatorTests", dependencies: ["Simulator", "DBus", "BLE", "Sensors", "Management", "Sockets"]),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "BLE", "Threading", "Simulator", "Management"]),
        .testTarget(name: "AccessTests", dependencies: ["Access", "HTTPServer"]),
        .testTarget(name: "LaunchTests", dependencies: ["Launch", "Access", "BLE"]),
        .testTarget(name: "MQTTTests", dependencies: ["MQTT"]),
        // Fakes the gateway's tests share (a Central, a broker).
        .target(name: "GatewayTesting", dependencies: ["GatewayCore", "BLE", "Sensors", "Threading"], path: "Tests/GatewayTesting"),
        .testTarget(name: "SerialBridgeTests", dependencies: ["SerialBridge", "GatewayCore", "GatewayTesting", "BLE"]),
        .testTarget(name: "GatewayCoreTests", dependencies: ["GatewayCore", "GatewayTesting", "BLE", "Sensors", "Threading"]),
        .testTarget(name: "HTTPAPITests", dependencies: ["HTTPAPI", "GatewayCore", "GatewayTesting", "HTTPServer", "BLE", "Sensors",
                                                         "Threading", "Dashboard"]),
        .testTarget(name: "MQTTBridgeTests", dependencies: ["MQTTBridge", "GatewayCore", "GatewayTesting", "BLE", "Sensors"]),
        // make-vectors.py writes the protobuf and Noise vectors the tests compare with.
        .testTarget(name: "ESPHomeAPITests", dependencies: ["ESPHomeAPI"], exclude: ["make-vectors.py"]),
        .testTarget(name: "ESPHomeProxyTests", dependencies: ["ESPHomeProxy", "ESPHomeAPI", "GatewayCore", "GatewayTesting", "BLE"]),
    ],
    swiftLanguageModes: [.v6]
)

// libFuzzer targets, built and run only by Tests/fuzz/run (which sets GATTWAY_FUZZ=1): absent
// from this manifest otherwise, so `swift build`, `swift test` and the Docker image never see
// them. Each is Tests/fuzz/<name>/ with its seeds in Tests/fuzz/corpus/<name>/; a new one is a
// line here and those two directories.
if Context.environment["GATTWAY_FUZZ"] == "1" {
    func fuzzTarget(_ name: String, _ dependencies: [Target.Dependency]) -> Target {
        .executableTarget(name: "fuzz-\(name)", dependencies: ["FuzzSupport"] + dependencies, path: "Tests/fuzz/\(name)")
    }
    package.targets += [
        .target(name: "FuzzSupport", path: "Tests/fuzz/FuzzSupport"),
        fuzzTarget("websocket", ["HTTPServer"]),
        fuzzTarget("names", ["BLE", "DBus", "BlueZ", "HTTPServer"]),
        fuzzTarget("bodies", ["HTTPAPI", "GatewayCore", "HTTPServer", "BLE", "BlueZ", "DBus"]),
        fuzzTarget("sensors", ["Sensors", "BLE"]),
        fuzzTarget("management", ["Management", "BLE"]),
    ]
}
