/// A message from a client, decoded by its type. A type this module does not know is `.other`:
/// the server passes it on and the door skips it, as the API wants of both sides.
public enum ClientMessage: Sendable, Equatable {
    case hello(HelloRequest)
    case authentication(AuthenticationRequest)
    case disconnect(DisconnectRequest)
    case disconnectResponse
    case ping
    case pingResponse
    case deviceInfo
    case listEntities
    case subscribeStates
    case subscribeLogs(SubscribeLogsRequest)
    case subscribeHomeAssistantServices
    case subscribeHomeAssistantStates
    case getTime
    case time(GetTimeResponse)
    case subscribeAdvertisements(SubscribeBluetoothLEAdvertisementsRequest)
    case unsubscribeAdvertisements
    case device(BluetoothDeviceRequest)
    case getServices(BluetoothGATTGetServicesRequest)
    case read(BluetoothGATTReadRequest)
    case write(BluetoothGATTWriteRequest)
    case readDescriptor(BluetoothGATTReadDescriptorRequest)
    case writeDescriptor(BluetoothGATTWriteDescriptorRequest)
    case notify(BluetoothGATTNotifyRequest)
    case subscribeConnectionsFree
    case setScannerMode(BluetoothScannerSetModeRequest)
    /// A type this module does not decode.
    case other(type: UInt16)

    /// The message of `type` in `payload`; throws when a known type's payload is not protobuf.
    public init(type: UInt16, payload: ArraySlice<UInt8>) throws(ProtobufError) {
        func decode<M: APIMessage>(_: M.Type) throws(ProtobufError) -> M { try M(serialized: payload) }
        switch type {
        case HelloRequest.id: self = .hello(try decode(HelloRequest.self))
        case AuthenticationRequest.id: self = .authentication(try decode(AuthenticationRequest.self))
        case DisconnectRequest.id: self = .disconnect(try decode(DisconnectRequest.self))
        case DisconnectResponse.id: self = .disconnectResponse
        case PingRequest.id: self = .ping
        case PingResponse.id: self = .pingResponse
        case DeviceInfoRequest.id: self = .deviceInfo
        case ListEntitiesRequest.id: self = .listEntities
        case SubscribeStatesRequest.id: self = .subscribeStates
        case SubscribeLogsRequest.id: self = .subscribeLogs(try decode(SubscribeLogsRequest.self))
        case SubscribeHomeassistantServicesRequest.id: self = .subscribeHomeAssistantServices
        case SubscribeHomeAssistantStatesRequest.id: self = .subscribeHomeAssistantStates
        case GetTimeRequest.id: self = .getTime
        case GetTimeResponse.id: self = .time(try decode(GetTimeResponse.self))
        case SubscribeBluetoothLEAdvertisementsRequest.id:
            self = .subscribeAdvertisements(try decode(SubscribeBluetoothLEAdvertisementsRequest.self))
        case UnsubscribeBluetoothLEAdvertisementsRequest.id: self = .unsubscribeAdvertisements
        case BluetoothDeviceRequest.id: self = .device(try decode(BluetoothDeviceRequest.self))
        case BluetoothGATTGetServicesRequest.id: self = .getServices(try decode(BluetoothGATTGetServicesRequest.self))
        case BluetoothGATTReadRequest.id: self = .read(try decode(BluetoothGATTReadRequest.self))
        case BluetoothGATTWriteRequest.id: self = .write(try decode(BluetoothGATTWriteRequest.self))
        case BluetoothGATTReadDescriptorRequest.id: self = .readDescriptor(try decode(BluetoothGATTReadDescriptorRequest.self))
        case BluetoothGATTWriteDescriptorRequest.id: self = .writeDescriptor(try decode(BluetoothGATTWriteDescriptorRequest.self))
        case BluetoothGATTNotifyRequest.id: self = .notify(try decode(BluetoothGATTNotifyRequest.self))
        case SubscribeBluetoothConnectionsFreeRequest.id: self = .subscribeConnectionsFree
        case BluetoothScannerSetModeRequest.id: self = .setScannerMode(try decode(BluetoothScannerSetModeRequest.self))
        default: self = .other(type: type)
        }
    }
}
