import Access
import BLE
import Glibc
import HTTPAPI
import HTTPServer
import Launch
import MQTTBridge
import Sensors

/// A start step that failed: what gattway says, and its exit status (2: what it was given cannot
/// be used; 1: something it needs would not start).
struct StartFailure: Error {
    let message: String
    let status: Int32
    init(_ message: String, status: Int32) {
        self.message = message
        self.status = status
    }
}

/// What the options' files give, read before anything starts: a file that cannot be used stops
/// gattway (exit 2) with nothing to undo.
struct Loaded {
    let access: AccessControl
    let blocklist: Blocklist
    let sensorKeys: SensorKeys
    let pairingKeys: PairingKeys
    let exposed: [ExposedCharacteristic]
    let tls: TLSCredentials?

    static func load(_ options: Options) throws(StartFailure) -> Loaded {
        do {
            let access = try accessControl(options)
            let blocklist = try options.blocklist()
            let sensorKeys = try options.sensorKeys()  // FILE:LINE: what is wrong
            if let file = options.sensorKeysFile { log("sensors: \(sensorKeys.count) bind key(s) from \(file)") }
            let pairingKeys = try options.pairingKeys()
            if let file = options.pairingKeysFile { log("pairing: \(pairingKeys.count) key(s) from \(file)") }
            return Loaded(access: access, blocklist: blocklist, sensorKeys: sensorKeys, pairingKeys: pairingKeys,
                          exposed: try exposedCharacteristics(options), tls: try tlsCredentials(options))
        } catch {
            throw StartFailure(error.message, status: 2)
        }
    }

    /// Tokens, origins and rates in front of the routes; the log says who may use them.
    private static func accessControl(_ options: Options) throws(UsageError) -> AccessControl {
        let tokens: TokenSet
        let origins: OriginPolicy
        do {
            tokens = try options.tokens.load(readFile: readFile)
            origins = try OriginPolicy(allowing: options.allowedOrigins)
        } catch {
            throw UsageError("\(error)")
        }
        if tokens.isEmpty {
            log("access: no tokens: whoever can reach \(options.host) may use every route"
                + (Exposure.isLoopback(options.host) ? " (loopback: this machine only)" : " (--no-auth)"))
        } else {
            log("access: \(tokens.count) token(s), \(tokens.readOnlyCount) read-only; every route but GET /v1/state needs one")
        }
        if !options.allowedOrigins.isEmpty { log("access: pages from \(options.allowedOrigins.joined(separator: ", ")) may use the API") }
        return AccessControl(.init(tokens: tokens, origins: origins, requestsPerSecond: options.rateLimit,
                                   requestBurst: 2 * options.rateLimit, openPaths: API.openPaths,
                                   queryTokenRoutes: API.queryTokenRoutes), log: log)
    }

    private static func tlsCredentials(_ options: Options) throws(UsageError) -> TLSCredentials? {
        guard let certificate = options.tlsCertificate, let key = options.tlsKey else { return nil }
        do {
            return try TLSCredentials(certificateFile: certificate, keyFile: key)
        } catch {
            throw UsageError("TLS: \(error)")
        }
    }
}
