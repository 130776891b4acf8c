// swift-tools-version:6.0
// A tree with deliberate violations, for Tests/architecture/check.py --self-test (never built).
import PackageDescription

let package = Package(
    name: "wrong-imports",
    targets: [
        .target(name: "BLE"),
        .target(name: "HTTPServer"),
        .target(name: "GatewayCore", dependencies: ["BLE", "HTTPServer"]),
        .target(name: "HTTPAPI", dependencies: ["GatewayCore", "HTTPServer"]),
        .target(name: "MQTTBridge", dependencies: ["GatewayCore"]),
        .target(name: "DBus"),
        .target(name: "Management", dependencies: ["BLE", "DBus"]),
    ]
)
