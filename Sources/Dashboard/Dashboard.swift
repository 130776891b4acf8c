/// The dashboard's files (`Resources/`), built into the binary (SwiftPM's `embedInCode`), as the
/// gateway serves them: the page at `/`, the rest under `/ui/`. No I/O and no HTTP here; the
/// Gateway's router serves them.
public enum Dashboard {
    /// One file and how to answer for it.
    public struct Asset: Sendable {
        /// Where it is served.
        public let path: String
        public let contentType: String
        public let bytes: [UInt8]
        /// A strong validator of `bytes` (`"…"`, quotes included): a 64-bit FNV-1a hash.
        public let etag: String

        init(_ path: String, _ contentType: String, _ bytes: [UInt8]) {
            self.path = path
            self.contentType = contentType
            self.bytes = bytes
            etag = "\"" + Self.fnv1a(bytes) + "\""
        }

        private static func fnv1a(_ bytes: [UInt8]) -> String {
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            let hex = String(hash, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }
    }

    /// The page.
    public static let index = Asset("/", "text/html; charset=utf-8", PackageResources.index_html)

    /// Everything the page loads, by path.
    public static let assets: [String: Asset] = Dictionary(uniqueKeysWithValues: [
        Asset("/ui/app.js", "text/javascript; charset=utf-8", PackageResources.app_js),
        Asset("/ui/style.css", "text/css; charset=utf-8", PackageResources.style_css),
        Asset("/ui/names.json", "application/json", PackageResources.names_json),
        Asset("/ui/icon.svg", "image/svg+xml", PackageResources.icon_svg),
    ].map { ($0.path, $0) })

    /// What the page may do (`Content-Security-Policy`): its own scripts, styles and API, nothing
    /// inline, from nowhere else, and not inside another site's frame. `connect-src 'self'` covers
    /// the WebSocket of the same host and port (CSP Level 3).
    public static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}
