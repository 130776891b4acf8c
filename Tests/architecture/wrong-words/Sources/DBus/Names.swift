let owner = #"the ESPHome proxy's "name""#
let dtd = "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd"
