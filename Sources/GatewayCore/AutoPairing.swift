import BLE
import Synchronization
import Threading

/// `--pairing-keys`: devices whose passkey (or PIN code) is known pair without a client's help.
/// A read, write or subscription that the device refuses for want of an authenticated or
/// encrypted link, on a device that is not paired and has a key, pairs with that key and is
/// tried once more; a pairing question for such a device (one BlueZ or the device starts) is
/// answered with it; and a client's pairing without an answer uses it.
///
/// Operations on a device with a key take turns here, so that when several need the pairing at
/// once the first pairs and the others, after it, find the device paired (and connected again:
/// bluetoothd drops the link after the refusal, and `Pair` connects; the pairing answers once
/// that link is ready, and a link that went down after it is connected again before the
/// operation is tried again). Devices without a key never wait here.
package final class AutoPairing: Sendable {
    /// How long a pairing started here may take, questions included.
    package static let timeout = Duration.seconds(30)
    /// How long connecting again after it may take (a client's connect's default).
    package static let connectTimeout = Duration.seconds(30)

    private let keys = Mutex(PairingKeys())
    private let turns = SerialQueues<BluetoothAddress>(maxWaiting: 64, maxWait: .seconds(90))
    private let log: @Sendable (String) -> Void

    package init(keys: PairingKeys = PairingKeys(), log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.keys.withLock { $0 = keys }
        self.log = log
    }

    /// The key of `id`, if the file has one.
    package func key(_ id: BluetoothAddress) -> PairingAnswer? { keys.withLock { $0[id] } }

    /// SIGHUP: the file read again.
    package func replaceKeys(_ keys: PairingKeys) { self.keys.withLock { $0 = keys } }

    package var keyCount: Int { keys.withLock { $0.count } }

    /// The ATT errors that say the link needs pairing first: insufficient authentication or
    /// encryption, and 0x0E, which bluetoothd reports when the pairing it starts by itself for
    /// a MITM-protected attribute cannot succeed (it then drops the link; `Pair` connects again).
    static func needsPairing(_ error: BLEError) -> Bool {
        guard case .att(let code) = error.code else { return false }
        return [.insufficientAuthentication, .insufficientEncryption, .insufficientEncryptionKeySize, .unlikelyError].contains(code)
    }

    /// Runs `operation` (`what`, for the log); when it fails because the link needs pairing and
    /// `id` has a key and is not paired, pairs with the key and runs it once more. A failed
    /// pairing is what the operation throws then, its message saying so.
    package func retrying<T>(_ id: BluetoothAddress, _ what: @autoclosure () -> String, on central: Central,
                             _ operation: () async throws(BLEError) -> T) async throws(BLEError) -> T {
        guard let key = key(id) else { return try await operation() }
        return try await turns.run(id, refused: { BLEError(.outOfSpace, "too many operations are waiting for device \(id)'s pairing; retry later (\($0))") }) { () async throws(BLEError) -> T in
            do throws(BLEError) {
                return try await operation()
            } catch where Self.needsPairing(error) {
                guard let info = try? await central.peripheral(id), !info.paired else { throw error }
                log("\(id): \(what()) needs pairing (\(error.name)): pairing with the pairing keys file's key")
                let paired: PeripheralInfo
                do throws(BLEError) {
                    paired = try await central.pair(id, answer: key, timeout: Self.timeout)
                } catch {
                    log("\(id): pairing with the pairing keys file's key failed: \(error)")
                    var refused = error
                    refused.message = "\(what()) needs pairing, and pairing with the pairing keys file's key failed: \(error.message)"
                    throw refused
                }
                // The operation ran on a connected device: it is tried again on one, as a client
                // would connect it (the link may have gone down after the pairing's answer).
                if paired.state != .connected {
                    log("\(id): paired with the pairing keys file's key, but not connected; connecting again")
                    do throws(BLEError) {
                        _ = try await central.connect(id, timeout: Self.connectTimeout, autoReconnect: false)
                    } catch {
                        var failed = error
                        failed.message = "\(what()) needs pairing; paired with the pairing keys file's key, but connecting again failed: \(error.message)"
                        throw failed
                    }
                }
                log("\(id): paired with the pairing keys file's key; trying the \(what()) again")
                return try await operation()
            }
        }
    }

    /// Waits until the operations on `id` that went before are done (a pairing among them):
    /// what reads a keyed device's tree before an operation sees it as the pairing left it.
    /// At once for a device without a key.
    package func waitForTurn(_ id: BluetoothAddress) async {
        guard key(id) != nil else { return }
        _ = await turns.run(id) { () async in }
    }

    /// A question of a pairing: answered at once when the file has what it asks for `id`.
    package func asked(_ id: BluetoothAddress, _ request: PairingRequest, on central: Central) {
        guard let key = key(id), key.answers(request) else { return }
        Task {
            do throws(BLEError) {
                try await central.answerPairing(id, key)
                log("\(id): the pairing's \(request.name) question answered with the pairing keys file's key")
            } catch {
                // Answered already (the key went up front with a pairing started here), or over.
            }
        }
    }
}
