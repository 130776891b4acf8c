// libmicrohttpd for Swift. MHD_start_daemon and MHD_upgrade_action are variadic, and
// MHD_SIZE_UNKNOWN is a macro: Swift cannot call or import them, so these `gw_` wrappers can.
// GnuTLS (which libmicrohttpd links anyway) provides the SHA-1 of the WebSocket handshake.
#ifndef GATTWAY_CMICROHTTPD_SHIM_H
#define GATTWAY_CMICROHTTPD_SHIM_H
#include <stdint.h>
#include <stddef.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
// Not in Swift's Glibc module; the WebSocket socket loop uses them.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <microhttpd.h>
#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>

static const uint64_t GW_MHD_SIZE_UNKNOWN = MHD_SIZE_UNKNOWN;
static const ssize_t GW_MHD_CONTENT_READER_END_OF_STREAM = MHD_CONTENT_READER_END_OF_STREAM;
static const ssize_t GW_MHD_CONTENT_READER_END_WITH_ERROR = MHD_CONTENT_READER_END_WITH_ERROR;

/// Starts a daemon with an MHD_OPTION_END-terminated option array.
static inline struct MHD_Daemon *gw_mhd_start(unsigned int flags, uint16_t port,
                                              MHD_AccessHandlerCallback handler, void *handler_cls,
                                              struct MHD_OptionItem *options) {
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/// Closes an upgraded (WebSocket) connection; the only way to release its socket.
static inline enum MHD_Result gw_mhd_upgrade_close(struct MHD_UpgradeResponseHandle *urh) {
    return MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

/// The port the daemon listens on (for port 0, the one the kernel chose); 0 if unknown.
/// MHD_get_daemon_info is variadic.
static inline uint16_t gw_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// The peer address of a connection, or NULL. MHD_get_connection_info is variadic.
static inline const struct sockaddr *gw_mhd_client_address(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info ? info->client_addr : NULL;
}

/// The socket of a connection, or -1. MHD_get_connection_info is variadic.
static inline int gw_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

/// The daemon serving a connection, or NULL. MHD_get_connection_info is variadic.
static inline struct MHD_Daemon *gw_mhd_connection_daemon(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
    return info ? info->daemon : NULL;
}

/// SHA-1 of `size` bytes into `digest` (20 bytes); 0 on success.
static inline int gw_sha1(const void *data, size_t size, unsigned char *digest) {
    return gnutls_hash_fast(GNUTLS_DIG_SHA1, data, size, digest);
}

#endif
