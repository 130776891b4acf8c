import Testing

@testable import ESPHomeAPI

/// Every message's bytes as python's protobuf writes them from aioesphomeapi's own descriptor
/// (api_pb2 of aioesphomeapi 46.23.0, protobuf 7.36.2): `make-vectors.py messages` printed
/// these rows. gattway must write the same bytes, and read them back to the same value.
struct MessageVectorsTests {
    static let address: UInt64 = 0xAABBCCDDEEFF

    static let deviceInfo: DeviceInfoResponse = {
        var info = DeviceInfoResponse()
        info.hasDeepSleep = true
        info.name = "kitchen-gw"
        info.macAddress = "AA:BB:CC:DD:EE:FF"
        info.esphomeVersion = "2025.11.0"
        info.model = "gattway"
        info.projectName = "gattway.gattway"
        info.projectVersion = "0.1.0"
        info.webserverPort = 8080
        info.legacyBluetoothProxyVersion = 5
        info.manufacturer = "gattway"
        info.friendlyName = "Kitchen"
        info.legacyVoiceAssistantVersion = 1
        info.bluetoothProxyFeatureFlags = 127
        info.suggestedArea = "Kitchen"
        info.bluetoothMacAddress = "00:1A:7D:DA:71:13"
        info.apiEncryptionSupported = true
        return info
    }()

    static let vectors: [(any APIMessage, String)] = {
        let address = MessageVectorsTests.address
        let deviceInfo = MessageVectorsTests.deviceInfo
        return [
        (HelloRequest(clientInfo: "aioesphomeapi", apiVersionMajor: 1, apiVersionMinor: 19, outgoingConnectionTarget: true),
         "0a0d61696f657370686f6d65617069100118132001"),
        (HelloResponse(apiVersionMajor: 1, apiVersionMinor: 10, serverInfo: "gattway 0.1.0", name: "kitchen-gw"),
         "0801100a1a0d6761747477617920302e312e30220a6b69746368656e2d6777"),
        (AuthenticationRequest(password: "sésame"),
         "0a0773c3a973616d65"),
        (AuthenticationResponse(invalidPassword: true),
         "0801"),
        (DisconnectRequest(reason: .provisioningClosed),
         "0801"),
        (DisconnectRequest(),
         ""),
        (PingResponse(),
         ""),
        (deviceInfo,
         "120a6b69746368656e2d67771a1141413a42423a43433a44443a45453a46462209323032352e31312e303207676174747761793801420f676174747761792e676174747761794a05302e312e3050903f58056207676174747761796a074b69746368656e7001787f8201074b69746368656e92011130303a31413a37443a44413a37313a3133980101"),
        (SubscribeLogsRequest(level: .debug, dumpConfig: true),
         "08051001"),
        (GetTimeResponse(epochSeconds: 1_733_300_000, timezone: "CET-1CEST,M3.5.0,M10.5.0/3"),
         "0d200f5067121a4345542d31434553542c4d332e352e302c4d31302e352e302f33"),
        (SubscribeBluetoothLEAdvertisementsRequest(flags: .rawAdvertisements),
         "0801"),
        (BluetoothLERawAdvertisementsResponse(advertisements: [
            BluetoothLERawAdvertisement(address: address, rssi: -67, addressType: 1, data: [0x02, 0x01, 0x06, 0x03, 0xFF, 0x4C, 0x00]),
            BluetoothLERawAdvertisement(address: 0x001A7DDA7113, rssi: -100, addressType: 0, data: []),
            BluetoothLERawAdvertisement(address: 1, rssi: 20, addressType: 0, data: [0x00])]),
         "0a1608ffddf7e6bcd72a1085011801220702010603ff4c000a0a0893e2e9eea70310c7010a0708011028220100"),
        (BluetoothDeviceRequest(address: address, requestType: .connectWithCache, addressType: 1),
         "08ffddf7e6bcd72a100418012001"),
        (BluetoothDeviceRequest(address: address, requestType: .connect),
         "08ffddf7e6bcd72a"),
        (BluetoothDeviceConnectionResponse(address: address, connected: true, mtu: 247),
         "08ffddf7e6bcd72a100118f701"),
        (BluetoothDeviceConnectionResponse(address: address, connected: false, error: -1),
         "08ffddf7e6bcd72a20ffffffffffffffffff01"),
        (BluetoothGATTGetServicesRequest(address: address),
         "08ffddf7e6bcd72a"),
        (BluetoothGATTGetServicesResponse(address: address, services: [
            BluetoothGATTService(uuid: [0x0000180D00001000, 0x800000805F9B34FB], handle: 1, characteristics: [
                BluetoothGATTCharacteristic(uuid: [], handle: 2, properties: 0x10, descriptors: [
                    BluetoothGATTDescriptor(uuid: [], handle: 4, shortUUID: 0x2902)], shortUUID: 0x2A37),
                BluetoothGATTCharacteristic(uuid: [0x0000FFE100001000, 0x800000805F9B34FB], handle: 5, properties: 0x0C, descriptors: [])]),
            BluetoothGATTService(uuid: [], handle: 9, characteristics: [], shortUUID: 0x180F)]),
         "08ffddf7e6bcd72a123e0a1180a08080d08106fbe9ecfc85908080800110011a0e100218102205100418825228b7541a170a1180a0808090fc3ffbe9ecfc8590808080011005180c12051009208f30"),
        (BluetoothGATTGetServicesDoneResponse(address: address),
         "08ffddf7e6bcd72a"),
        (BluetoothGATTReadRequest(address: address, handle: 42),
         "08ffddf7e6bcd72a102a"),
        (BluetoothGATTReadResponse(address: address, handle: 42, data: [0x00, 0x01, 0xFF]),
         "08ffddf7e6bcd72a102a1a030001ff"),
        (BluetoothGATTWriteRequest(address: address, handle: 12, response: true, data: Array("hello".utf8)),
         "08ffddf7e6bcd72a100c1801220568656c6c6f"),
        (BluetoothGATTReadDescriptorRequest(address: address, handle: 13),
         "08ffddf7e6bcd72a100d"),
        (BluetoothGATTWriteDescriptorRequest(address: address, handle: 13, data: [0x01, 0x00]),
         "08ffddf7e6bcd72a100d1a020100"),
        (BluetoothGATTNotifyRequest(address: address, handle: 12, enable: true),
         "08ffddf7e6bcd72a100c1801"),
        (BluetoothGATTNotifyDataResponse(address: address, handle: 12, data: [0x16, 0x48]),
         "08ffddf7e6bcd72a100c1a021648"),
        (BluetoothConnectionsFreeResponse(free: 2, limit: 3, allocated: [address]),
         "080210031a07ffddf7e6bcd72a"),
        (BluetoothGATTErrorResponse(address: address, handle: 12, error: 5),
         "08ffddf7e6bcd72a100c1805"),
        (BluetoothGATTWriteResponse(address: address, handle: 12),
         "08ffddf7e6bcd72a100c"),
        (BluetoothGATTNotifyResponse(address: address, handle: 12),
         "08ffddf7e6bcd72a100c"),
        (BluetoothDevicePairingResponse(address: address, succeeded: true),
         "08ffddf7e6bcd72a1001"),
        (BluetoothDeviceUnpairingResponse(address: address, succeeded: false, error: -4),
         "08ffddf7e6bcd72a18fcffffffffffffffff01"),
        (BluetoothDeviceClearCacheResponse(address: address, succeeded: true),
         "08ffddf7e6bcd72a1001"),
        (BluetoothScannerStateResponse(state: .running, mode: .active, configuredMode: .passive),
         "08021001"),
        (BluetoothScannerSetModeRequest(mode: .active),
         "0801"),
        ]
    }()

    @Test(arguments: vectors.indices)
    func writesWhatPythonWritesAndReadsItBack(_ index: Int) throws {
        let (message, expected) = Self.vectors[index]
        try check(message, hex(expected))
    }

    private func check<M: APIMessage>(_ message: M, _ expected: [UInt8]) throws {
        #expect(message.serialized() == expected, "\(M.self)")
        #expect(try M(serialized: expected) == message, "\(M.self)")
    }

    /// The ids are the descriptor's (`id` option), for every message gattway knows.
    @Test func messageIDsAreTheDescriptors() {
        let ids: [(any APIMessage.Type, UInt16)] = [
            (HelloRequest.self, 1), (HelloResponse.self, 2), (AuthenticationRequest.self, 3),
            (AuthenticationResponse.self, 4), (DisconnectRequest.self, 5), (DisconnectResponse.self, 6),
            (PingRequest.self, 7), (PingResponse.self, 8), (DeviceInfoRequest.self, 9), (DeviceInfoResponse.self, 10),
            (ListEntitiesRequest.self, 11), (ListEntitiesDoneResponse.self, 19), (SubscribeStatesRequest.self, 20),
            (SubscribeLogsRequest.self, 28), (SubscribeHomeassistantServicesRequest.self, 34), (GetTimeRequest.self, 36),
            (GetTimeResponse.self, 37), (SubscribeHomeAssistantStatesRequest.self, 38),
            (SubscribeBluetoothLEAdvertisementsRequest.self, 66), (BluetoothDeviceRequest.self, 68),
            (BluetoothDeviceConnectionResponse.self, 69), (BluetoothGATTGetServicesRequest.self, 70),
            (BluetoothGATTGetServicesResponse.self, 71), (BluetoothGATTGetServicesDoneResponse.self, 72),
            (BluetoothGATTReadRequest.self, 73), (BluetoothGATTReadResponse.self, 74), (BluetoothGATTWriteRequest.self, 75),
            (BluetoothGATTReadDescriptorRequest.self, 76), (BluetoothGATTWriteDescriptorRequest.self, 77),
            (BluetoothGATTNotifyRequest.self, 78), (BluetoothGATTNotifyDataResponse.self, 79),
            (SubscribeBluetoothConnectionsFreeRequest.self, 80), (BluetoothConnectionsFreeResponse.self, 81),
            (BluetoothGATTErrorResponse.self, 82), (BluetoothGATTWriteResponse.self, 83), (BluetoothGATTNotifyResponse.self, 84),
            (BluetoothDevicePairingResponse.self, 85), (BluetoothDeviceUnpairingResponse.self, 86),
            (UnsubscribeBluetoothLEAdvertisementsRequest.self, 87), (BluetoothDeviceClearCacheResponse.self, 88),
            (BluetoothLERawAdvertisementsResponse.self, 93), (BluetoothScannerStateResponse.self, 126),
            (BluetoothScannerSetModeRequest.self, 127),
        ]
        for (type, id) in ids { #expect(type.id == id, "\(type)") }
    }

    @Test func aClientMessageIsDecodedByItsTypeAndAnUnknownTypeIsOther() throws {
        let hello = HelloRequest(clientInfo: "aioesphomeapi", apiVersionMajor: 1, apiVersionMinor: 19)
        #expect(try ClientMessage(type: 1, payload: hello.serialized()[...]) == .hello(hello))
        let write = BluetoothGATTWriteRequest(address: Self.address, handle: 12, response: false, data: [1])
        #expect(try ClientMessage(type: 75, payload: write.serialized()[...]) == .write(write))
        #expect(try ClientMessage(type: 7, payload: []) == .ping)
        #expect(try ClientMessage(type: 1234, payload: [0xFF, 0xFF]) == .other(type: 1234))
        #expect(throws: ProtobufError.truncated) { try ClientMessage(type: 1, payload: [0x0A, 0x05, 0x61]) }
    }
}
