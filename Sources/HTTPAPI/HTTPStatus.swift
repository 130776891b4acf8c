import BLE
import GatewayCore
import HTTPServer

/// The HTTP status of each CoreBluetooth error: the one table, in docs/api.md.
public enum HTTPStatus {
    public static func of(_ error: BLEError) -> Int {
        switch error.code {
        case .cb(let code):
            switch code {
            case .invalidParameters: return 400
            case .invalidHandle: return 404
            case .notConnected: return 409
            case .outOfSpace: return 503  // a device's operation queue is full: retry later
            case .operationCancelled: return 409
            case .connectionTimeout: return 504
            case .peripheralDisconnected: return 502
            case .uuidNotAllowed: return 403
            case .alreadyAdvertising: return 409
            case .connectionFailed: return 502
            case .connectionLimitReached: return 503
            case .unknownDevice: return 404
            case .operationNotSupported: return 501
            case .peerRemovedPairingInformation: return 502
            case .encryptionTimedOut: return 504
            case .tooManyLEPairedDevices: return 503
            case .unknown: return 503
            }
        case .att(let code):
            switch code {
            case .readNotPermitted, .writeNotPermitted, .insufficientAuthentication, .insufficientAuthorization,
                 .insufficientEncryption, .insufficientEncryptionKeySize:
                return 403
            case .invalidOffset, .invalidAttributeValueLength, .invalidPdu:
                return 400
            case .invalidHandle, .attributeNotFound:
                return 404
            default:
                return 502
            }
        }
    }
}

extension JSON.Layout {
    /// `?pretty` (`?pretty=1`, `?pretty=true`; `0` and `false` mean compact).
    init(_ request: Request) {
        guard let value = request.query["pretty"] else {
            self = .compact
            return
        }
        self = value == "0" || value.lowercased() == "false" ? .compact : .pretty
    }
}

extension Response {
    /// An error in the documented shape; `status` overrides the table.
    static func error(_ error: BLEError, status: Int? = nil, layout: JSON.Layout = .compact) -> Response {
        .json(status ?? HTTPStatus.of(error), JSON.encode(ErrorBody(error), layout))
    }

    /// The transport's own errors (unknown route, oversize body, ...) in the same shape; compact,
    /// since the transport answers them without the request at hand.
    static func error(_ error: ServerError) -> Response {
        switch error {
        case .bodyTooLarge(let limit):
            return .error(BLEError(.invalidParameters, "the request body is larger than \(limit) bytes"), status: 413)
        case .notFound(let method, let path):
            return .error(BLEError(.operationNotSupported, "no route for \(method) \(path); the routes are in openapi.yaml"), status: 404)
        case .methodNotAllowed(let allowed):
            var response = Response.error(BLEError(.operationNotSupported, "method not allowed here; allowed: \(allowed.joined(separator: ", "))"), status: 405)
            response.headers.append((name: "Allow", value: allowed.joined(separator: ", ")))
            return response
        case .badRequest(let message):
            return .error(BLEError(.invalidParameters, message), status: 400)
        case .tooManyConnections(let limit):
            return .error(BLEError(.connectionLimitReached,
                                   "gattway serves at most \(limit) connections (--max-connections) and has that many open; retry later"),
                          status: 503)
        case .tooManyConnectionsFromClient(let limit):
            return .error(BLEError(.connectionLimitReached,
                                   "this address has \(limit) connections open, as many as one client may (--max-client-connections); retry later"),
                          status: 429)
        case .unauthorized(let message, let invalidToken):
            var response = Response.error(BLEError(att: .insufficientAuthentication, message), status: 401)
            response.headers.append((name: "WWW-Authenticate",
                                     value: "Bearer realm=\"gattway\"" + (invalidToken ? ", error=\"invalid_token\"" : "")))
            return response
        case .forbidden(let message):
            return .error(BLEError(att: .insufficientAuthorization, message), status: 403)
        case .unsupportedMediaType(let message):
            var response = Response.error(BLEError(.invalidParameters, message), status: 415)
            response.headers.append((name: "Accept", value: "application/json"))
            return response
        case .tooManyRequests(let message, let retryAfter):
            var response = Response.error(BLEError(.connectionLimitReached, message), status: 429)
            response.headers.append((name: "Retry-After", value: String(retryAfter)))
            return response
        }
    }
}
