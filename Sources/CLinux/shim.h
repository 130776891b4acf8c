// Linux's epoll and eventfd, which Swift's Glibc module does not export: for the ESPHome API's
// socket thread. Nothing is linked (they are in libc).
#ifndef GATTWAY_CLINUX_SHIM_H
#define GATTWAY_CLINUX_SHIM_H
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
