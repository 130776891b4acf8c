import Access
import Glibc
import MQTTBridge

extension Options {
    package enum ParseResult: Sendable {
        case run(Options)
        /// Stop at once: the help or the version (code 0, on stdout), or a mistake (code 2, on stderr).
        case exit(code: Int32, message: String)
    }

    /// The table's options in order.
    package static let all: [Option] = table.flatMap(\.options)
    private static let byFlag: [String: Option] = Dictionary(uniqueKeysWithValues: all.flatMap { o in o.flags.map { ($0, o) } })

    /// The options of the environment (`GATTWAY_*`), then of `--config FILE`, then of the command
    /// line, each overriding the one before (repeatable ones add up); checked together, then
    /// against the exposure policy. `readFile` gives a file's text, nil when it cannot be read
    /// (errno says why).
    package static func parse(_ arguments: [String], environment: (String) -> String?, readFile: (String) -> String?,
                              version: String) -> ParseResult {
        var options = Options()
        do throws(UsageError) {
            try options.apply(environment: environment)
            let (commandLine, configFile) = try takeConfigFile(arguments)
            if let configFile { try options.apply(configFile: configFile, readFile: readFile) }
            var rest = commandLine[...]
            while let argument = rest.popFirst() {
                guard let option = byFlag[argument] else { throw UsageError("unknown argument \"\(argument)\"") }
                switch option.action {
                case .help: return .exit(code: 0, message: usage(version: version))
                case .version: return .exit(code: 0, message: "gattway \(version)")
                case .config: break  // taken out above
                case .set(let set): try set(&options, try option.value(from: &rest, given: argument), argument)
                }
            }
            try options.check()
        } catch {
            return .exit(code: 2, message: "gattway: \(error.message)\nTry gattway --help.")
        }
        options.maxStreams = min(options.maxStreams, options.maxConnections)
        if let refusal = Exposure.refusal(options.listeners, servedAnyway: options.noAuth) {
            return .exit(code: 2, message: "gattway: " + refusal)
        }
        return .run(options)
    }

    /// The environment's options: a variable that is empty counts as not set; a switch is on for
    /// 1, true or yes; a repeatable option's variable is a comma-separated list.
    mutating func apply(environment: (String) -> String?) throws(UsageError) {
        for option in Self.all {
            guard let name = option.environment, let text = environment(name), case .set(let set) = option.action else { continue }
            switch option.value {
            case .none:
                if Parse.isOn(text) { try set(&self, nil, name) }
            case .optional(_, let absent):
                if !text.isEmpty { try set(&self, text == absent ? nil : text, name) }
            case .required where option.repeatable:
                for item in text.split(separator: ",").map({ String($0.filter { !$0.isWhitespace }) }) where !item.isEmpty {
                    try set(&self, item, name)
                }
            case .required:
                if !text.isEmpty { try set(&self, text, name) }
            }
        }
    }

    /// Takes `--config FILE` out of the command line: the file and the arguments left.
    private static func takeConfigFile(_ arguments: [String]) throws(UsageError) -> (arguments: [String], file: String?) {
        var left: [String] = []
        var file: String?
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            guard let option = byFlag[argument], case .config = option.action else { left.append(argument); continue }
            guard file == nil else { throw UsageError("\(argument) may be given once") }
            guard let path = rest.popFirst(), !path.isEmpty else { throw UsageError("\(argument) needs a file") }
            file = path
        }
        return (left, file)
    }

    /// The options of a configuration file, as if given before the command line's (so a flag
    /// given both ways takes the command line's value; repeatable ones add up): a line is an
    /// option without its dashes, a space, and its value, if it takes one ("listen
    /// 0.0.0.0:8080", "auto-reconnect"); lines that start with # and empty lines are skipped.
    /// The value is the rest of the line (spaces inside kept). A mistake stops gattway with
    /// FILE:LINE and what is wrong.
    mutating func apply(configFile file: String, readFile: (String) -> String?) throws(UsageError) {
        guard let text = readFile(file) else {
            throw UsageError("--config: cannot read \(file) (\(String(cString: strerror(errno))))")
        }
        // By `isNewline`: "\r\n" is one Character, which a split at "\n" would not cut.
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = rawLine.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()
            guard let first = line.first, first != "#" else { continue }
            let name = String(line.prefix { $0 != " " && $0 != "\t" })
            let value = String(line.dropFirst(name.count).drop { $0 == " " || $0 == "\t" })
            let place = "\(file):\(number + 1)"
            guard !name.hasPrefix("-") else {
                throw UsageError("\(place): write the option without its dashes: \(name.drop { $0 == "-" })")
            }
            let flag = "--" + name
            guard let option = Self.byFlag[flag] else { throw UsageError("\(place): unknown argument \"\(flag)\"") }
            guard case .set(let set) = option.action else { throw UsageError("\(place): \(name) has no place in a configuration file") }
            var values = (value.isEmpty ? [] : [value])[...]
            do throws(UsageError) {
                try set(&self, try option.value(from: &values, given: flag), flag)
            } catch {
                throw UsageError("\(place): \(error.message)")
            }
            guard values.isEmpty else { throw UsageError("\(place): \(name) takes no value") }
        }
    }

    /// What options given together must agree on.
    mutating func check() throws(UsageError) {
        guard (tlsCertificate == nil) == (tlsKey == nil) else {
            throw UsageError("--tls-cert and --tls-key go together: give both or neither")
        }
        guard (mqttCertificate == nil) == (mqttKey == nil) else {
            throw UsageError("--mqtt-cert and --mqtt-key go together: give both or neither")
        }
        if mqtt?.tls != true && (mqttCA != nil || mqttCertificate != nil) {
            throw UsageError("--mqtt-ca, --mqtt-cert and --mqtt-key are for an mqtts:// broker")
        }
        if esphomeKey != nil && esphomePort == nil {
            throw UsageError("--esphome-key is the key of the ESPHome API: give --esphome-api [HOST:]PORT too")
        }
        if esphomeConnectionsGiven && esphomePort == nil {
            throw UsageError("--esphome-connections are the ESPHome API's: give --esphome-api [HOST:]PORT too")
        }
        if mqttExposeFile != nil && mqtt == nil {
            throw UsageError("--mqtt-expose publishes to the broker of --mqtt: give --mqtt URL too")
        }
        do {
            _ = try BridgeTopics(prefix: mqttPrefix, gatewayID: gatewayID ?? "gattway")
        } catch {
            throw UsageError(error.description)
        }
    }

    /// The bridge's topics: `--gateway-id`, else the host name made into an id.
    package func bridgeTopics(hostName: String) throws(BridgeTopics.Invalid) -> BridgeTopics {
        try BridgeTopics(prefix: mqttPrefix, gatewayID: gatewayID ?? BridgeTopics.gatewayID(fromHostName: hostName))
    }
}

extension Option {
    /// The option's value, taken from what follows it (`given` is how it was spelled).
    func value(from rest: inout ArraySlice<String>, given: String) throws(UsageError) -> String? {
        switch value {
        case .none:
            return nil
        case .required:
            guard let value = rest.popFirst() else { throw UsageError("\(given) needs a value") }
            return value
        case .optional:
            guard let next = rest.first, !next.hasPrefix("--") else { return nil }
            rest.removeFirst()
            return next
        }
    }
}
