extension Blocklist {
    /// gattway's default: what Web Bluetooth keeps from web pages, and the common firmware-update
    /// services. `standardText` parsed; a test holds that it parses.
    public static let standard = try! Blocklist(parsing: standardText, source: "default")

    /// The default list, in the file format, one reason per entry.
    public static let standardText = """
    # Services: a client could take over the host's input, replace the device's firmware, or
    # talk to a security key on its own.
    1812                                  # Human Interface Device: keystrokes and pointer input
    fffd                                  # FIDO: security keys' authenticator transport
    00001530-1212-efde-1523-785feabcd123  # Nordic legacy DFU: firmware update
    fe59                                  # Nordic Secure DFU (and its buttonless trigger): firmware update
    f000ffc0-0451-4000-b000-000000000000  # TI OAD: over-the-air firmware download
    8d53dc1d-1db7-4cd3-868b-8a527460aa84  # MCUmgr SMP (Zephyr, MCUboot): image upload, shell, files
    1d14d6ee-fd63-4fa1-bfa4-8f47b42119f0  # Silicon Labs OTA: firmware update
    fef5                                  # Dialog SUOTA: firmware update
    00060000-f8ce-11e4-abf4-0002a5d5c51b  # Cypress bootloader: firmware update

    # Characteristics
    2a02 exclude-writes                   # Peripheral Privacy Flag: turning privacy off makes the device trackable
    2a03 exclude-writes                   # Reconnection Address: would send the device's reconnections elsewhere
    2a25 exclude-reads                    # Serial Number String: a permanent identifier that tracks the device

    # Descriptors
    2902 exclude-writes                   # Client Characteristic Configuration: subscribe with the notifications routes
    2903 exclude-writes                   # Server Characteristic Configuration: changes what the device broadcasts

    """
}
