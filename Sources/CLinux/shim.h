// Linux things Swift's Glibc module does not export: epoll and eventfd (the ESPHome API's socket
// thread, the management channel's reader), recvmmsg (declared by glibc only under _GNU_SOURCE),
// and the Bluetooth management socket (Management).
// Nothing is linked (they are in libc).
#ifndef GATTWAY_CLINUX_SHIM_H
#define GATTWAY_CLINUX_SHIM_H
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

// The kernel's Bluetooth socket ABI, written here rather than taken from libbluetooth-dev (not a
// build dependency for four numbers and a struct; they are stable kernel ABI).
// include/linux/socket.h
#ifndef AF_BLUETOOTH
#define AF_BLUETOOTH 31
#endif
// include/net/bluetooth/bluetooth.h
static const int GW_BTPROTO_HCI = 1;
// include/net/bluetooth/hci_sock.h: "no controller" and the management channel.
static const unsigned short GW_HCI_DEV_NONE = 0xffff;
static const unsigned short GW_HCI_CHANNEL_CONTROL = 3;

// include/net/bluetooth/hci_sock.h's struct sockaddr_hci.
struct gw_sockaddr_hci {
    sa_family_t hci_family;
    unsigned short hci_dev;
    unsigned short hci_channel;
};

/// Binds a BTPROTO_HCI socket to the management (control) channel, for no controller in
/// particular; bind's result (errno set on -1).
static inline int gw_bind_hci_control(int fd) {
    struct gw_sockaddr_hci address;
    memset(&address, 0, sizeof(address));
    address.hci_family = AF_BLUETOOTH;
    address.hci_dev = GW_HCI_DEV_NONE;
    address.hci_channel = GW_HCI_CHANNEL_CONTROL;
    return bind(fd, (const struct sockaddr *)&address, sizeof(address));
}

// recvmmsg(2)'s struct mmsghdr (stable kernel ABI).
struct gw_mmsghdr {
    struct msghdr msg_hdr;
    unsigned int msg_len;
};

/// Reads up to `count` datagrams in one call, without waiting; the number read (-1, errno set).
static inline int gw_recvmmsg(int fd, struct gw_mmsghdr *messages, unsigned int count) {
    return (int)syscall(SYS_recvmmsg, fd, messages, count, MSG_DONTWAIT, (void *)0);
}
#endif
