// swift-tools-version:6.0
// A tree with deliberate violations, for Tests/architecture/check.py --self-test (never built):
// the lower layers naming a door's route or transport in code.
import PackageDescription

let package = Package(
    name: "wrong-words",
    targets: [
        .target(name: "BLE"),
        .target(name: "DBus"),
        .target(name: "Sensors", dependencies: ["BLE"]),
        .target(name: "BlueZ", dependencies: ["BLE", "DBus"]),
        .target(name: "GatewayCore", dependencies: ["BLE", "Sensors"]),
        .target(name: "HTTPAPI", dependencies: ["GatewayCore"]),
    ]
)
