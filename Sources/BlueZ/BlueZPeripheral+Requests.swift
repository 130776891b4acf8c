import BLE
import DBus
import Synchronization

/// bluetoothd's calls on the application's characteristics and descriptors (doc/gatt-api.txt):
/// `ReadValue(options)`, `WriteValue(value, options)`, `StartNotify`, `StopNotify`, `Confirm`.
/// Reads and writes go to the request handler; its answer, or `org.bluez.Error.Failed` past the
/// deadline (a late answer is dropped), answers bluetoothd.
extension BlueZPeripheral {
    /// The options BlueZ passes with a read or a write.
    struct RequestOptions: Equatable {
        var device: ObjectPath?
        var offset = 0
        var mtu: Int?
        /// "command" (a write without response), "request", "reliable".
        var type: String?

        init(_ value: Value?) {
            let options = value?.stringDictionary ?? [:]
            device = options["device"]?.objectPath
            offset = options["offset"]?.integer ?? 0
            mtu = options["mtu"]?.integer
            type = options["type"]?.string
        }

        var central: BluetoothAddress? { device.flatMap { BlueZ.address(pathElement: $0.lastElement) } }
    }

    /// A call on a GATT object of the application (on the bus connection's thread).
    func handleGATTCall(_ call: Message) {
        guard call.sender != nil, call.sender == link.tree.owner else {
            return app.answer(call, call.errorReply(BusError(name: "org.bluez.Error.NotAuthorized", message: "only bluetoothd may use gattway's application")))
        }
        guard let path = call.path, let (_, attribute) = GATTApplication.attribute(path), attribute.characteristic >= 0,
              let service = state.withLock({ $0.services[attribute.service] }),
              service.service.characteristics.indices.contains(attribute.characteristic),
              attribute.descriptor.map(service.service.characteristics[attribute.characteristic].descriptors.indices.contains) ?? true else {
            return app.answer(call, call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "no such method")))
        }
        let characteristic = service.service.characteristics[attribute.characteristic]
        let permissions = attribute.descriptor.map { characteristic.descriptors[$0].permissions } ?? characteristic.permissions
        let interface = attribute.descriptor == nil ? BlueZ.gattCharacteristicInterface : BlueZ.gattDescriptorInterface
        switch call.member {
        case "ReadValue":
            guard permissions.allowsRead else { return app.answer(call, call.errorReply(ErrorMapping.reply(for: .readNotPermitted))) }
            let options = RequestOptions(call.body.first)
            respond(call, PeripheralRequest(attribute: attribute, kind: .read, central: options.central, offset: options.offset, mtu: options.mtu))
        case "WriteValue":
            guard permissions.allowsWrite else { return app.answer(call, call.errorReply(ErrorMapping.reply(for: .writeNotPermitted))) }
            guard let value = call.body.first?.bytes else {
                return app.answer(call, call.errorReply(BusError(name: "org.bluez.Error.InvalidArguments", message: "WriteValue needs a value")))
            }
            let options = RequestOptions(call.body.count > 1 ? call.body[1] : nil)
            respond(call, PeripheralRequest(attribute: attribute, kind: .write(value, withResponse: options.type != "command"),
                                            central: options.central, offset: options.offset, mtu: options.mtu))
        case "StartNotify" where attribute.descriptor == nil, "StopNotify" where attribute.descriptor == nil:
            let subscribed = call.member == "StartNotify"
            let was = app.properties(path, interface)?["Notifying"]?.bool ?? false
            app.update(path, interface, ["Notifying": .bool(subscribed)])
            app.answer(call, call.reply())
            if was != subscribed { events(.subscription(attribute, central: nil, subscribed: subscribed)) }
        case "Confirm" where attribute.descriptor == nil:
            app.answer(call, call.reply())
            events(.confirmed(attribute, central: nil))
        default:
            app.answer(call, call.errorReply(BusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(interface) has no \(call.member ?? "")")))
        }
    }

    /// Asks the request handler, and answers bluetoothd with its answer or, past the deadline,
    /// with a failure.
    private func respond(_ call: Message, _ request: PeripheralRequest) {
        guard pending.add(1, ordering: .relaxed).newValue <= Self.maxPending else {
            pending.subtract(1, ordering: .relaxed)
            log("peripheral: \(Self.maxPending) requests wait for answers; refusing another")
            return app.answer(call, call.errorReply(BusError(name: "org.bluez.Error.Failed", message: "too many requests waiting for an answer")))
        }
        let handler = requestHandler.withLock { $0 }
        let answered = Once()
        let deadline = requestDeadline
        let timer = Task { [weak self] in
            do { try await Task.sleep(for: deadline) } catch { return }
            guard let self, answered.claim() else { return }
            self.pending.subtract(1, ordering: .relaxed)
            self.log("peripheral: no answer to a \(Self.describe(request)) within \(Connector.seconds(deadline)); the central gets an error")
            self.app.answer(call, call.errorReply(BusError(name: "org.bluez.Error.Failed", message: "no answer within \(Connector.seconds(deadline))")))
        }
        Task { [weak self] in
            guard let self else { return }
            let response = if let handler { await handler(request) } else { self.storedResponse(request) }
            guard answered.claim() else { return }
            timer.cancel()
            self.pending.subtract(1, ordering: .relaxed)
            self.app.answer(call, Self.reply(call, request, response))
        }
    }

    /// The reply to bluetoothd for the handler's answer.
    static func reply(_ call: Message, _ request: PeripheralRequest, _ response: PeripheralResponse) -> Message {
        switch (request.kind, response) {
        case (_, .error(let code)): call.errorReply(ErrorMapping.reply(for: code))
        case (.read, .value(let bytes)): call.reply([.bytes(bytes)])
        case (.read, .done): call.reply([.bytes([])])
        case (.write, _): call.reply()
        }
    }

    /// Without a request handler: reads answer the value last set (or the first), writes succeed.
    private func storedResponse(_ request: PeripheralRequest) -> PeripheralResponse {
        guard case .read = request.kind else { return .done }
        let attribute = request.attribute
        guard let service = state.withLock({ $0.services[attribute.service] }) else { return .error(.invalidHandle) }
        let characteristic = service.service.characteristics[attribute.characteristic]
        var value = attribute.descriptor.map { characteristic.descriptors[$0].value } ?? characteristic.value
        if attribute.descriptor == nil,
           let set = app.properties(GATTApplication.path(adapter: service.adapter, attribute), BlueZ.gattCharacteristicInterface)?["Value"]?.bytes {
            value = set
        }
        guard request.offset <= value.count else { return .error(.invalidOffset) }
        return .value(Array(value[request.offset...]))
    }

    static func describe(_ request: PeripheralRequest) -> String {
        let kind = if case .read = request.kind { "read" } else { "write" }
        return "\(kind) of service \(request.attribute.service) characteristic \(request.attribute.characteristic)"
            + (request.attribute.descriptor.map { " descriptor \($0)" } ?? "")
    }
}

/// Whichever comes first of an answer and the deadline answers bluetoothd.
private final class Once: Sendable {
    private let taken = Atomic<Bool>(false)
    func claim() -> Bool { !taken.exchange(true, ordering: .acquiringAndReleasing) }
}
