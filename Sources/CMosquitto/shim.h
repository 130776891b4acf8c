// libmosquitto (Debian's libmosquitto-dev): the MQTT 3.1.1/5 client the MQTT module wraps.
// Everything it needs is plain C Swift can call; the protocol constants are macros and enums
// in mqtt_protocol.h, re-exported here under names Swift imports as constants.
#ifndef GW_MOSQUITTO_SHIM_H
#define GW_MOSQUITTO_SHIM_H
#include <mosquitto.h>
#include <mqtt_protocol.h>

static const int gw_mqtt_v311 = MQTT_PROTOCOL_V311;
static const int gw_mqtt_v5 = MQTT_PROTOCOL_V5;
#endif
