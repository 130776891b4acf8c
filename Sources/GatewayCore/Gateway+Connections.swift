import BLE

/// Connecting and disconnecting for clients of every door.
extension Gateway {
    package static let defaultConnectTimeout = 30.0
    package static let maximumConnectTimeout = 300.0

    /// A client's connect: `timeout` in seconds; kept connected as `autoReconnect`
    /// (or `--auto-reconnect`) says; through `adapter` when one is named.
    package func connect(_ id: BluetoothAddress, timeout: Double?, autoReconnect: Bool?, adapter: String? = nil) async throws(BLEError) -> DeviceBody {
        DeviceBody(try await connectPeripheral(id, timeout: timeout, autoReconnect: autoReconnect, adapter: adapter))
    }

    /// `connect`, answering the device as the central has it (its MTU, for a door that says it).
    package func connectPeripheral(_ id: BluetoothAddress, timeout: Double?, autoReconnect: Bool?,
                                   adapter: String? = nil) async throws(BLEError) -> PeripheralInfo {
        let timeout = timeout ?? Self.defaultConnectTimeout
        guard timeout > 0, timeout <= Self.maximumConnectTimeout else {
            throw BLEError(.invalidParameters, "timeout must be more than 0 and at most \(Int(Self.maximumConnectTimeout)) seconds")
        }
        let keep = autoReconnect ?? self.autoReconnect
        // Kept from now on, even if this attempt fails: the central tries again.
        if keep { restoration.kept(id, true) }
        return try await autoConnections.clientConnects(id) { () async throws(BLEError) in
            try await self.central.connect(id, timeout: .milliseconds(Int(timeout * 1000)), autoReconnect: keep, adapter: adapter)
        }
    }

    /// A client's disconnect: no longer kept connected either.
    package func disconnect(_ id: BluetoothAddress) async throws(BLEError) -> DeviceBody {
        restoration.kept(id, false)
        return DeviceBody(try await autoConnections.clientDisconnects(id) { () async throws(BLEError) in
            try await self.central.disconnect(id)
        })
    }
}
