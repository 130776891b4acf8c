// Nettle for Swift: AES-CCM (BTHome), and for the ESPHome API's Noise handshake X25519,
// ChaCha20-Poly1305 (RFC 8439), SHA-256 and HMAC-SHA256; base64 for its key. Nettle's public
// names are macros over `nettle_`-prefixed functions; Swift does not import those macros, so
// Swift calls the prefixed names.
#ifndef GATTWAY_CNETTLE_SHIM_H
#define GATTWAY_CNETTLE_SHIM_H
#include <nettle/aes.h>
#include <nettle/base64.h>
#include <nettle/ccm.h>
#include <nettle/chacha-poly1305.h>
#include <nettle/curve25519.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#endif
