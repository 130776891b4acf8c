import DBus
import Glibc

// Deliberate: the management channel knows no D-Bus (it is read beside BlueZ, not through it).
