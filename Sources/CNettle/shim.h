// Nettle's AES-CCM for Swift. Nettle's public names are macros over `nettle_`-prefixed
// functions; Swift does not import those macros, so Swift calls the prefixed names.
#ifndef GATTWAY_CNETTLE_SHIM_H
#define GATTWAY_CNETTLE_SHIM_H
#include <nettle/aes.h>
#include <nettle/ccm.h>
#endif
