import BLE
import Testing

@Suite struct StateTests {
    static let managerStates: [(ManagerState, Int, String)] = [
        (.unknown, 0, "unknown"),
        (.resetting, 1, "resetting"),
        (.unsupported, 2, "unsupported"),
        (.unauthorized, 3, "unauthorized"),
        (.poweredOff, 4, "poweredOff"),
        (.poweredOn, 5, "poweredOn"),
    ]

    @Test(arguments: managerStates)
    func managerStateHasApplesValueAndName(state: ManagerState, raw: Int, name: String) {
        #expect(state.rawValue == raw)
        #expect(ManagerState(rawValue: raw) == state)
        #expect(state.name == name)
    }

    @Test func managerStateTableIsComplete() {
        #expect(ManagerState.allCases == Self.managerStates.map(\.0))
        #expect(ManagerState(rawValue: 6) == nil)
    }

    static let peripheralStates: [(PeripheralState, Int, String)] = [
        (.disconnected, 0, "disconnected"),
        (.connecting, 1, "connecting"),
        (.connected, 2, "connected"),
        (.disconnecting, 3, "disconnecting"),
    ]

    @Test(arguments: peripheralStates)
    func peripheralStateHasApplesValueAndName(state: PeripheralState, raw: Int, name: String) {
        #expect(state.rawValue == raw)
        #expect(PeripheralState(rawValue: raw) == state)
        #expect(state.name == name)
    }

    @Test func peripheralStateTableIsComplete() {
        #expect(PeripheralState.allCases == Self.peripheralStates.map(\.0))
        #expect(PeripheralState(rawValue: 4) == nil)
    }
}
