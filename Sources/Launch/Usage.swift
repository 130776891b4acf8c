extension Options {
    /// `--help`: made from the table, a section a heading, then the environment.
    package static func usage(version: String) -> String {
        let config = all.first { if case .config = $0.action { true } else { false } }
        var lines = [
            "gattway \(version): Bluetooth Low Energy devices over HTTP, on BlueZ.",
            "",
            "Usage: gattway [\(config?.synopsis ?? "")] [OPTION]...",
        ]
        for section in table {
            lines += ["", section.title + ":"]
            for option in section.options where !option.flags.isEmpty {
                lines += Help.entry(option.synopsis, option.help, column: 23)
            }
        }
        lines += ["", "Environment:"]
        lines += Help.entry("DBUS_SYSTEM_BUS_ADDRESS", "the system bus to find BlueZ on (default unix:path=/run/dbus/system_bus_socket)",
                            column: 28)
        let defaults = all.filter { !$0.flags.isEmpty && $0.environment != nil }.map { option in
            option.environment! + (environmentNote(option).map { " (\($0))" } ?? "")
        }
        lines += Help.wrap(defaults.joined(separator: ", "), indent: 2)
        lines += Help.wrap("defaults for the options above; flags (and --config) win", indent: 28)
        for option in all where option.flags.isEmpty {
            lines += Help.entry(option.name, option.help, column: 28)
        }
        lines += Help.entry("JOURNAL_STREAM", """
            set by systemd when stderr is the journal's stream: each line then starts with its priority \
            (<6>, <4>, <3>) instead of the time
            """, column: 28)
        lines += Help.entry("NOTIFY_SOCKET, WATCHDOG_USEC", """
            set by systemd (Type=notify, WatchdogSec=): gattway says READY=1 once it serves, and WATCHDOG=1 \
            every third of WATCHDOG_USEC while its HTTP server and its D-Bus thread answer
            """, column: 28)
        lines += ["", """
            API: /v1/state, /v1/adapters, /v1/scan, /v1/devices[/{id}[/connect|/disconnect|/gatt|
            /services|/characteristics/{char}[/value|/notifications]]], /v1/sensors[/{id}], the
            peripheral role on /v1/peripheral[/services|/characteristics/{char}/value|/advertisements]
            (gattway advertises and serves GATT services defined there), live events on /v1/events
            (SSE) and /v1/ws (WebSocket). Errors are JSON with CoreBluetooth codes. See docs/,
            openapi.yaml.
            """]
        return lines.joined(separator: "\n")
    }

    /// How the environment gives an option, where it differs from its flag: "1 or true".
    static func environmentNote(_ option: Option) -> String? {
        switch option.value {
        case .none: "1 or true"
        case .optional(let name, let absent): "\(name), or \"\(absent)\""
        case .required: option.repeatable ? "comma-separated" : nil
        }
    }
}

/// The help's layout: 95 columns, a name on the left, its description wrapped on the right.
enum Help {
    static let width = 95

    /// `name` at column 2 and `text` from `column` on, beside it when it fits, else below it.
    static func entry(_ name: String, _ text: String, column: Int) -> [String] {
        let lines = wrap(text, indent: column)
        let head = "  " + name
        guard head.count < column, let first = lines.first else { return [head] + lines }
        return [head + first.dropFirst(head.count)] + lines.dropFirst()
    }

    /// `text` in lines of at most `width` columns (a longer word stands alone), each indented.
    static func wrap(_ text: String, indent: Int) -> [String] {
        let pad = String(repeating: " ", count: indent)
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && indent + line.count + 1 + word.count > width {
                lines.append(pad + line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        if !line.isEmpty { lines.append(pad + line) }
        return lines
    }
}
