/* The floor under any libdbus client of BlueZ's advertisement stream (bench/esphome.py's
 * "floor" rows): the least a program that reads BlueZ's PropertiesChanged signals through
 * libdbus must spend, as gattway does. It discovers as gattway's watch does (SetDiscoveryFilter
 * Transport=le, DuplicateData=true; StartDiscovery on hci0), then reads every message libdbus
 * has, walking each signal's values once (each basic value read, nothing kept), and counts the
 * PropertiesChanged of Device1 that carry an RSSI (an advertisement, as the bench counts them).
 *
 * Commands on stdin, answers on stdout, a line each: "start" resets the counter and the CPU
 * mark; "stop" answers {"signals": N, "cpu_s": S}; "quit" ends. (libdbus reads its socket 2 KiB
 * at a time, so a wake-up takes a few messages at most however long it waits.)
 *
 * Built by bench/esphome.py with `cc -O2 bench/dbus_floor.c $(pkg-config --cflags --libs dbus-1)`. */
#include <dbus/dbus.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

/* Reads every value below `iter` once; answers whether a dictionary key "RSSI" was among them. */
static int walk(DBusMessageIter *iter) {
    int rssi = 0;
    for (int type; (type = dbus_message_iter_get_arg_type(iter)) != DBUS_TYPE_INVALID; dbus_message_iter_next(iter)) {
        if (dbus_type_is_container(type)) {
            if (type == DBUS_TYPE_ARRAY && dbus_message_iter_get_element_type(iter) == DBUS_TYPE_BYTE) {
                DBusMessageIter sub;
                const unsigned char *bytes;
                int n;
                dbus_message_iter_recurse(iter, &sub);
                dbus_message_iter_get_fixed_array(&sub, &bytes, &n);
                continue;
            }
            DBusMessageIter sub;
            dbus_message_iter_recurse(iter, &sub);
            rssi |= walk(&sub);
        } else {
            DBusBasicValue value;
            dbus_message_iter_get_basic(iter, &value);
            if (type == DBUS_TYPE_STRING && strcmp(value.str, "RSSI") == 0) rssi = 1;
        }
    }
    return rssi;
}

static void call(DBusConnection *bus, const char *member, DBusMessage *message) {
    DBusError error;
    dbus_error_init(&error);
    DBusMessage *reply = dbus_connection_send_with_reply_and_block(bus, message, 10000, &error);
    if (!reply) {
        fprintf(stderr, "dbus_floor: %s: %s\n", member, error.message);
        exit(1);
    }
    dbus_message_unref(reply);
    dbus_message_unref(message);
}

static void discover(DBusConnection *bus) {
    DBusMessage *m = dbus_message_new_method_call("org.bluez", "/org/bluez/hci0", "org.bluez.Adapter1", "SetDiscoveryFilter");
    DBusMessageIter args, dict, entry, variant;
    dbus_message_iter_init_append(m, &args);
    dbus_message_iter_open_container(&args, DBUS_TYPE_ARRAY, "{sv}", &dict);
    const char *transport = "Transport", *le = "le", *duplicates = "DuplicateData";
    dbus_bool_t yes = TRUE;
    dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &transport);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "s", &variant);
    dbus_message_iter_append_basic(&variant, DBUS_TYPE_STRING, &le);
    dbus_message_iter_close_container(&entry, &variant);
    dbus_message_iter_close_container(&dict, &entry);
    dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &duplicates);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "b", &variant);
    dbus_message_iter_append_basic(&variant, DBUS_TYPE_BOOLEAN, &yes);
    dbus_message_iter_close_container(&entry, &variant);
    dbus_message_iter_close_container(&dict, &entry);
    dbus_message_iter_close_container(&args, &dict);
    call(bus, "SetDiscoveryFilter", m);
    call(bus, "StartDiscovery", dbus_message_new_method_call("org.bluez", "/org/bluez/hci0", "org.bluez.Adapter1", "StartDiscovery"));
}

int main(void) {
    DBusError error;
    dbus_error_init(&error);
    DBusConnection *bus = dbus_bus_get_private(DBUS_BUS_SYSTEM, &error);
    if (!bus) {
        fprintf(stderr, "dbus_floor: %s\n", error.message);
        return 1;
    }
    dbus_bus_add_match(bus, "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'", &error);
    dbus_bus_add_match(bus, "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.ObjectManager'", &error);
    discover(bus);
    int fd = -1;
    dbus_connection_get_unix_fd(bus, &fd);
    printf("{\"pid\": %d}\n", getpid());
    fflush(stdout);

    long signals = 0;
    double mark = cpu_seconds();
    char line[64];
    for (;;) {
        struct pollfd fds[2] = {{fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) continue;
        if (fds[1].revents) {
            if (!fgets(line, sizeof line, stdin) || strncmp(line, "quit", 4) == 0) break;
            if (strncmp(line, "start", 5) == 0) {
                signals = 0;
                mark = cpu_seconds();
                printf("{\"ok\": true}\n");
            } else if (strncmp(line, "stop", 4) == 0) {
                printf("{\"signals\": %ld, \"cpu_s\": %.6f}\n", signals, cpu_seconds() - mark);
            }
            fflush(stdout);
        }
        if (fds[0].revents) {
            dbus_connection_read_write(bus, 0);
            for (DBusMessage *m; (m = dbus_connection_pop_message(bus)) != NULL; dbus_message_unref(m)) {
                if (dbus_message_get_type(m) != DBUS_MESSAGE_TYPE_SIGNAL) continue;
                DBusMessageIter iter;
                if (!dbus_message_iter_init(m, &iter)) continue;
                int rssi = walk(&iter);
                if (rssi && dbus_message_is_signal(m, "org.freedesktop.DBus.Properties", "PropertiesChanged")
                    && strncmp(dbus_message_get_path(m), "/org/bluez/hci0/dev_", 20) == 0)
                    signals++;
            }
        }
    }
    dbus_connection_close(bus);
    return 0;
}
