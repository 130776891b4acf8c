// libdbus for Swift. The DBUS_TYPE_* and other constants are macros, which Swift cannot
// import, so they are re-exported here as `gw_` constants.
#ifndef GATTWAY_CDBUS_SHIM_H
#define GATTWAY_CDBUS_SHIM_H
#include <dbus/dbus.h>
#include <poll.h>
#include <sys/eventfd.h>

static const int GW_DBUS_TYPE_INVALID = DBUS_TYPE_INVALID;
static const int GW_DBUS_TYPE_BYTE = DBUS_TYPE_BYTE;
static const int GW_DBUS_TYPE_BOOLEAN = DBUS_TYPE_BOOLEAN;
static const int GW_DBUS_TYPE_INT16 = DBUS_TYPE_INT16;
static const int GW_DBUS_TYPE_UINT16 = DBUS_TYPE_UINT16;
static const int GW_DBUS_TYPE_INT32 = DBUS_TYPE_INT32;
static const int GW_DBUS_TYPE_UINT32 = DBUS_TYPE_UINT32;
static const int GW_DBUS_TYPE_INT64 = DBUS_TYPE_INT64;
static const int GW_DBUS_TYPE_UINT64 = DBUS_TYPE_UINT64;
static const int GW_DBUS_TYPE_DOUBLE = DBUS_TYPE_DOUBLE;
static const int GW_DBUS_TYPE_STRING = DBUS_TYPE_STRING;
static const int GW_DBUS_TYPE_OBJECT_PATH = DBUS_TYPE_OBJECT_PATH;
static const int GW_DBUS_TYPE_SIGNATURE = DBUS_TYPE_SIGNATURE;
static const int GW_DBUS_TYPE_UNIX_FD = DBUS_TYPE_UNIX_FD;
static const int GW_DBUS_TYPE_ARRAY = DBUS_TYPE_ARRAY;
static const int GW_DBUS_TYPE_VARIANT = DBUS_TYPE_VARIANT;
static const int GW_DBUS_TYPE_STRUCT = DBUS_TYPE_STRUCT;
static const int GW_DBUS_TYPE_DICT_ENTRY = DBUS_TYPE_DICT_ENTRY;

static const int GW_DBUS_MESSAGE_TYPE_METHOD_CALL = DBUS_MESSAGE_TYPE_METHOD_CALL;
static const int GW_DBUS_MESSAGE_TYPE_METHOD_RETURN = DBUS_MESSAGE_TYPE_METHOD_RETURN;
static const int GW_DBUS_MESSAGE_TYPE_ERROR = DBUS_MESSAGE_TYPE_ERROR;
static const int GW_DBUS_MESSAGE_TYPE_SIGNAL = DBUS_MESSAGE_TYPE_SIGNAL;

static const unsigned int GW_DBUS_WATCH_READABLE = DBUS_WATCH_READABLE;
static const unsigned int GW_DBUS_WATCH_WRITABLE = DBUS_WATCH_WRITABLE;
static const unsigned int GW_DBUS_WATCH_ERROR = DBUS_WATCH_ERROR;
static const unsigned int GW_DBUS_WATCH_HANGUP = DBUS_WATCH_HANGUP;

static const int GW_DBUS_NAME_FLAG_DO_NOT_QUEUE = DBUS_NAME_FLAG_DO_NOT_QUEUE;
static const int GW_DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER;

/// A zeroed DBusError (DBUS_ERROR_INIT is a macro).
static inline DBusError gw_dbus_error_init(void) {
    DBusError e;
    dbus_error_init(&e);
    return e;
}

#endif
