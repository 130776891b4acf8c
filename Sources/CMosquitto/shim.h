// libmosquitto (Debian's libmosquitto-dev): the MQTT 3.1.1/5 client the MQTT module wraps.
// It is not linked but opened (dlopen) when an MQTT client is first made: without --mqtt
// gattway does not map it, nor the OpenSSL it brings (2.1 MB of an idle gattway's 19 MB).
// Its headers give the types, the signatures (each table entry has the type of the function it
// holds, so the two cannot differ) and the protocol constants, which are macros and enums in
// mqtt_protocol.h re-exported here under names Swift imports as constants.
#ifndef GW_MOSQUITTO_SHIM_H
#define GW_MOSQUITTO_SHIM_H
#include <dlfcn.h>
#include <stddef.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>

static const int gw_mqtt_v311 = MQTT_PROTOCOL_V311;
static const int gw_mqtt_v5 = MQTT_PROTOCOL_V5;

// The library's soname: what Debian's libmosquitto1 installs (the unversioned .so is -dev's).
#define GW_MOSQUITTO_LIBRARY "libmosquitto.so.1"

// The functions the MQTT module calls, mosquitto_NAME as table.NAME.
#define GW_MOSQUITTO_FUNCTIONS(X) \
    X(lib_init) X(strerror) X(reason_string) X(new) X(destroy) X(threaded_set) X(user_data_set) \
    X(int_option) X(username_pw_set) X(tls_set) X(will_set_v5) X(connect_async) X(loop_forever) \
    X(disconnect_v5) X(publish_v5) X(subscribe_v5) X(connect_v5_callback_set) \
    X(disconnect_v5_callback_set) X(publish_v5_callback_set) X(message_v5_callback_set) \
    X(log_callback_set) X(property_add_string) X(property_add_binary) X(property_read_string) \
    X(property_read_binary) X(property_free_all)

struct gw_mosquitto {
#define GW_MOSQUITTO_FIELD(name) __typeof__(mosquitto_##name) *_Nonnull name;
    GW_MOSQUITTO_FUNCTIONS(GW_MOSQUITTO_FIELD)
#undef GW_MOSQUITTO_FIELD
};

// Opens the library and fills `table`: NULL, or why not (dlerror's text, valid until the next
// dl call). The handle is never closed: the functions are used until the process ends.
static inline const char *_Nullable gw_mosquitto_load(struct gw_mosquitto *_Nonnull table) {
    void *library = dlopen(GW_MOSQUITTO_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return dlerror();
#define GW_MOSQUITTO_LOOKUP(name) \
    if ((*(void **)&table->name = dlsym(library, "mosquitto_" #name)) == NULL) return dlerror();
    GW_MOSQUITTO_FUNCTIONS(GW_MOSQUITTO_LOOKUP)
#undef GW_MOSQUITTO_LOOKUP
    return NULL;
}
#endif
