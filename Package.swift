// swift-tools-version:6.0
// gattway: BLE devices over HTTP, on BlueZ via D-Bus.
// Dependencies point one way: executables → Gateway → (HTTPServer, BLE); BlueZ → (DBus, BLE);
// Simulator → (DBus, BLE). Only CDBus/CMicroHTTPD touch C.
import PackageDescription

let package = Package(
    name: "gattway",
    products: [
        .executable(name: "gattway", targets: ["gattway"]),
        .executable(name: "gattway-sim", targets: ["gattway-sim"]),
    ],
    targets: [
        // C libraries from Debian. Each header also carries `gw_` inline shims for what Swift
        // cannot call (variadics, macros), so no separate C target is needed.
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),

        // Tools for code that runs on several threads, for every layer.
        .target(name: "Threading"),
        .target(name: "DBus", dependencies: ["CDBus", "Threading"]),
        .target(name: "BLE"),
        .target(name: "BlueZ", dependencies: ["DBus", "BLE", "Threading"]),
        .target(name: "Simulator", dependencies: ["DBus", "BLE"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "Threading"]),
        .target(name: "Gateway", dependencies: ["HTTPServer", "BLE", "Threading"]),

        .executableTarget(name: "gattway", dependencies: ["Gateway", "BlueZ", "Simulator", "DBus"]),
        .executableTarget(name: "gattway-sim", dependencies: ["Simulator", "DBus"]),

        .testTarget(name: "ThreadingTests", dependencies: ["Threading"]),
        .testTarget(name: "BLETests", dependencies: ["BLE"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus"]),
        // CMicroHTTPD for GnuTLS: the TLS tests' client.
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "CMicroHTTPD"]),
        .testTarget(name: "SimulatorTests", dependencies: ["Simulator", "DBus", "BLE"]),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "BLE", "Threading", "Simulator"]),
        .testTarget(name: "GatewayTests", dependencies: ["Gateway", "HTTPServer", "BLE", "Threading"]),
    ],
    swiftLanguageModes: [.v6]
)
