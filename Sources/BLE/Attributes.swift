/// Which characteristic a request means, as the client named it: by handle or UUID, within one
/// service or among all of the device's characteristics. The central resolves it once.
public struct CharacteristicRef: Sendable, Hashable, CustomStringConvertible {
    public var service: AttributeSelector?
    public var characteristic: AttributeSelector

    public init(service: AttributeSelector? = nil, _ characteristic: AttributeSelector) {
        self.service = service
        self.characteristic = characteristic
    }

    public static func handle(_ handle: UInt16) -> Self { Self(.handle(handle)) }

    public var description: String { service.map { "\(characteristic) in service \($0)" } ?? characteristic.description }

    /// The one characteristic this names in `services`, or why there is none.
    public func pick(in services: [GATTService]) throws(BLEError) -> GATTCharacteristic {
        let candidates: [GATTCharacteristic]
        if let service {
            candidates = try service.pick(services, kind: "service", handle: \.handle, uuid: \.uuid).characteristics
        } else {
            candidates = services.flatMap(\.characteristics)
        }
        return try characteristic.pick(candidates, kind: "characteristic", handle: \.handle, uuid: \.uuid)
    }
}

/// Which descriptor a request means: among one characteristic's descriptors, or the device's.
public struct DescriptorRef: Sendable, Hashable, CustomStringConvertible {
    public var characteristic: CharacteristicRef?
    public var descriptor: AttributeSelector

    public init(characteristic: CharacteristicRef? = nil, _ descriptor: AttributeSelector) {
        self.characteristic = characteristic
        self.descriptor = descriptor
    }

    public static func handle(_ handle: UInt16) -> Self { Self(.handle(handle)) }

    public var description: String { characteristic.map { "\(descriptor) of characteristic \($0)" } ?? descriptor.description }

    public func pick(in services: [GATTService]) throws(BLEError) -> GATTDescriptor {
        let candidates = try characteristic.map { ref throws(BLEError) in try ref.pick(in: services).descriptors }
            ?? services.flatMap(\.characteristics).flatMap(\.descriptors)
        return try descriptor.pick(candidates, kind: "descriptor", handle: \.handle, uuid: \.uuid)
    }
}

/// An attribute's value as read, with the attribute it came from.
public struct AttributeValue: Sendable, Equatable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public var value: [UInt8]

    public init(handle: UInt16, uuid: BluetoothUUID, value: [UInt8]) {
        self.handle = handle
        self.uuid = uuid
        self.value = value
    }
}

/// What a write did.
public struct WriteOutcome: Sendable, Equatable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public var type: WriteType
    /// Bytes written.
    public var written: Int
    /// ATT writes that carried them: more than one when a value was fragmented.
    public var writes: Int

    public init(handle: UInt16, uuid: BluetoothUUID, type: WriteType, written: Int, writes: Int) {
        self.handle = handle
        self.uuid = uuid
        self.type = type
        self.written = written
        self.writes = writes
    }
}

/// How a value is written: the pieces, or why it cannot be. A write with response may be long
/// (the stack makes prepared writes up to 512 bytes); one without response carries at most
/// MTU - 3 bytes, so a longer value goes as consecutive fragments when `fragment` allows.
public struct WritePlan: Sendable, Equatable {
    /// Bytes per ATT write.
    public var chunk: Int
    public var writes: Int

    public init(length: Int, type: WriteType, mtu: Int?, fragment: Bool) throws(BLEError) {
        let limit = type.maximumWriteValueLength(mtu: mtu)
        if length > limit && (type == .withResponse || !fragment) {
            let how = type == .withResponse ? "with response" : "without response in one packet (allow fragmenting to split it)"
            throw BLEError(att: .invalidAttributeValueLength, "the value is \(length) bytes; at most \(limit) can be written \(how)")
        }
        chunk = type == .withResponse ? max(length, 1) : limit
        writes = max(1, (length + chunk - 1) / chunk)
    }

    /// The value cut into `writes` pieces (one empty piece for an empty value).
    public func pieces(_ value: [UInt8]) -> [ArraySlice<UInt8>] {
        guard !value.isEmpty else { return [value[...]] }
        return stride(from: 0, to: value.count, by: chunk).map { value[$0..<min($0 + chunk, value.count)] }
    }
}

/// The property checks of every operation, in one place: CoreBluetooth answers these with ATT
/// codes before anything goes on the air.
extension GATTCharacteristic {
    public func requireReadable() throws(BLEError) {
        guard properties.contains(.read) else {
            throw BLEError(att: .readNotPermitted, "characteristic \(label) cannot be read; its properties: \(propertyList)")
        }
    }

    public func requireWritable(_ type: WriteType) throws(BLEError) {
        guard properties.contains(type == .withResponse ? .write : .writeWithoutResponse) else {
            throw BLEError(att: .writeNotPermitted, "characteristic \(label) cannot be written \(type == .withResponse ? "with" : "without") response; its properties: \(propertyList)")
        }
    }

    public func requireNotifiable() throws(BLEError) {
        guard !properties.isDisjoint(with: [.notify, .indicate]) else {
            throw BLEError(att: .requestNotSupported, "characteristic \(label) neither notifies nor indicates")
        }
    }

    /// "0x0027 (2a37)".
    public var label: String { AttributeSelector.label(handle, uuid) }

    private var propertyList: String { properties.names.isEmpty ? "none" : properties.names.joined(separator: ", ") }
}

extension GATTDescriptor {
    /// "0x0029 (2902)".
    public var label: String { AttributeSelector.label(handle, uuid) }
}

extension AttributeSelector {
    /// An attribute as people read it: "0x0027 (2a37)".
    static func label(_ handle: UInt16, _ uuid: BluetoothUUID) -> String {
        "\(format(handle)) (\(uuid.shortForm ?? uuid.uuidString))"
    }
}
