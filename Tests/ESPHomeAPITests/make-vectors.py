#!/usr/bin/env python3
"""Prints the byte vectors of ESPHomeAPITests, made by the client's own libraries.

    .build/venv/bin/python Tests/ESPHomeAPITests/make-vectors.py messages   # MessageVectors.swift's rows
    .build/venv/bin/python Tests/ESPHomeAPITests/make-vectors.py scalars    # ProtobufTests' AllTypes rows
    .build/venv/bin/python Tests/ESPHomeAPITests/make-vectors.py noise      # NoiseTests' constants

`messages` encodes aioesphomeapi's api_pb2 messages (the descriptor aioesphomeapi ships) with
python's protobuf; `scalars` a message of every scalar type built here with descriptor_pb2 (the
API's messages have no double, fixed64 or 64-bit signed field); `noise` runs
Noise_NNpsk0_25519_ChaChaPoly_SHA256 with the `noiseprotocol` package that aioesphomeapi itself
uses, both sides, with fixed ephemeral keys, and the prologue and frames of aioesphomeapi's
_frame_helper/noise.py. The Swift tests hold the printed hex; nothing here runs in `swift test`.
Made with aioesphomeapi 46.23.0, protobuf 7.36.2 (upb), noiseprotocol 0.3.1.
"""
import sys

ADDRESS = 0xAABBCCDDEEFF


def row(swift, message):
    print(f'    ({swift},\n     "{message.SerializeToString().hex()}"),')


def messages():
    from aioesphomeapi import api_pb2 as pb

    a = ADDRESS
    uuid128 = [0x0000180D00001000, 0x800000805F9B34FB]
    rows = [
        ('HelloRequest(clientInfo: "aioesphomeapi", apiVersionMajor: 1, apiVersionMinor: 19, outgoingConnectionTarget: true)',
         pb.HelloRequest(client_info="aioesphomeapi", api_version_major=1, api_version_minor=19, outgoing_connection_target=True)),
        ('HelloResponse(apiVersionMajor: 1, apiVersionMinor: 10, serverInfo: "gattway 0.1.0", name: "kitchen-gw")',
         pb.HelloResponse(api_version_major=1, api_version_minor=10, server_info="gattway 0.1.0", name="kitchen-gw")),
        ('AuthenticationRequest(password: "sésame")', pb.AuthenticationRequest(password="sésame")),
        ('AuthenticationResponse(invalidPassword: true)', pb.AuthenticationResponse(invalid_password=True)),
        ('DisconnectRequest(reason: .provisioningClosed)', pb.DisconnectRequest(reason=1)),
        ('DisconnectRequest()', pb.DisconnectRequest()),
        ('PingResponse()', pb.PingResponse()),
        ('deviceInfo', pb.DeviceInfoResponse(
            has_deep_sleep=True, name="kitchen-gw", mac_address="AA:BB:CC:DD:EE:FF", esphome_version="2025.11.0",
            model="gattway", project_name="gattway.gattway", project_version="0.1.0", webserver_port=8080,
            legacy_bluetooth_proxy_version=5, manufacturer="gattway", friendly_name="Kitchen",
            legacy_voice_assistant_version=1, bluetooth_proxy_feature_flags=127, suggested_area="Kitchen",
            bluetooth_mac_address="00:1A:7D:DA:71:13", api_encryption_supported=True)),
        ('SubscribeLogsRequest(level: .debug, dumpConfig: true)', pb.SubscribeLogsRequest(level=5, dump_config=True)),
        ('GetTimeResponse(epochSeconds: 1_733_300_000, timezone: "CET-1CEST,M3.5.0,M10.5.0/3")',
         pb.GetTimeResponse(epoch_seconds=1733300000, timezone="CET-1CEST,M3.5.0,M10.5.0/3")),
        ('SubscribeBluetoothLEAdvertisementsRequest(flags: .rawAdvertisements)',
         pb.SubscribeBluetoothLEAdvertisementsRequest(flags=1)),
        ('BluetoothLERawAdvertisementsResponse(advertisements: [\n'
         '        BluetoothLERawAdvertisement(address: address, rssi: -67, addressType: 1, data: [0x02, 0x01, 0x06, 0x03, 0xFF, 0x4C, 0x00]),\n'
         '        BluetoothLERawAdvertisement(address: 0x001A7DDA7113, rssi: -100, addressType: 0, data: []),\n'
         '        BluetoothLERawAdvertisement(address: 1, rssi: 20, addressType: 0, data: [0x00])])',
         pb.BluetoothLERawAdvertisementsResponse(advertisements=[
             pb.BluetoothLERawAdvertisement(address=a, rssi=-67, address_type=1, data=bytes([2, 1, 6, 3, 0xFF, 0x4C, 0])),
             pb.BluetoothLERawAdvertisement(address=0x001A7DDA7113, rssi=-100),
             pb.BluetoothLERawAdvertisement(address=1, rssi=20, data=b"\x00")])),
        ('BluetoothDeviceRequest(address: address, requestType: .connectWithCache, addressType: 1)',
         pb.BluetoothDeviceRequest(address=a, request_type=4, has_address_type=True, address_type=1)),
        ('BluetoothDeviceRequest(address: address, requestType: .connect)', pb.BluetoothDeviceRequest(address=a, request_type=0)),
        ('BluetoothDeviceConnectionResponse(address: address, connected: true, mtu: 247)',
         pb.BluetoothDeviceConnectionResponse(address=a, connected=True, mtu=247)),
        ('BluetoothDeviceConnectionResponse(address: address, connected: false, error: -1)',
         pb.BluetoothDeviceConnectionResponse(address=a, connected=False, error=-1)),
        ('BluetoothGATTGetServicesRequest(address: address)', pb.BluetoothGATTGetServicesRequest(address=a)),
        ('BluetoothGATTGetServicesResponse(address: address, services: [\n'
         '        BluetoothGATTService(uuid: [0x0000180D00001000, 0x800000805F9B34FB], handle: 1, characteristics: [\n'
         '            BluetoothGATTCharacteristic(uuid: [], handle: 2, properties: 0x10, descriptors: [\n'
         '                BluetoothGATTDescriptor(uuid: [], handle: 4, shortUUID: 0x2902)], shortUUID: 0x2A37),\n'
         '            BluetoothGATTCharacteristic(uuid: [0x0000FFE100001000, 0x800000805F9B34FB], handle: 5, properties: 0x0C, descriptors: [])]),\n'
         '        BluetoothGATTService(uuid: [], handle: 9, characteristics: [], shortUUID: 0x180F)])',
         pb.BluetoothGATTGetServicesResponse(address=a, services=[
             pb.BluetoothGATTService(uuid=uuid128, handle=1, characteristics=[
                 pb.BluetoothGATTCharacteristic(handle=2, properties=0x10, short_uuid=0x2A37, descriptors=[
                     pb.BluetoothGATTDescriptor(handle=4, short_uuid=0x2902)]),
                 pb.BluetoothGATTCharacteristic(uuid=[0x0000FFE100001000, 0x800000805F9B34FB], handle=5, properties=0x0C)]),
             pb.BluetoothGATTService(handle=9, short_uuid=0x180F)])),
        ('BluetoothGATTGetServicesDoneResponse(address: address)', pb.BluetoothGATTGetServicesDoneResponse(address=a)),
        ('BluetoothGATTReadRequest(address: address, handle: 42)', pb.BluetoothGATTReadRequest(address=a, handle=42)),
        ('BluetoothGATTReadResponse(address: address, handle: 42, data: [0x00, 0x01, 0xFF])',
         pb.BluetoothGATTReadResponse(address=a, handle=42, data=b"\x00\x01\xff")),
        ('BluetoothGATTWriteRequest(address: address, handle: 12, response: true, data: Array("hello".utf8))',
         pb.BluetoothGATTWriteRequest(address=a, handle=12, response=True, data=b"hello")),
        ('BluetoothGATTReadDescriptorRequest(address: address, handle: 13)', pb.BluetoothGATTReadDescriptorRequest(address=a, handle=13)),
        ('BluetoothGATTWriteDescriptorRequest(address: address, handle: 13, data: [0x01, 0x00])',
         pb.BluetoothGATTWriteDescriptorRequest(address=a, handle=13, data=b"\x01\x00")),
        ('BluetoothGATTNotifyRequest(address: address, handle: 12, enable: true)',
         pb.BluetoothGATTNotifyRequest(address=a, handle=12, enable=True)),
        ('BluetoothGATTNotifyDataResponse(address: address, handle: 12, data: [0x16, 0x48])',
         pb.BluetoothGATTNotifyDataResponse(address=a, handle=12, data=b"\x16\x48")),
        ('BluetoothConnectionsFreeResponse(free: 2, limit: 3, allocated: [address])',
         pb.BluetoothConnectionsFreeResponse(free=2, limit=3, allocated=[a])),
        ('BluetoothGATTErrorResponse(address: address, handle: 12, error: 5)', pb.BluetoothGATTErrorResponse(address=a, handle=12, error=5)),
        ('BluetoothGATTWriteResponse(address: address, handle: 12)', pb.BluetoothGATTWriteResponse(address=a, handle=12)),
        ('BluetoothGATTNotifyResponse(address: address, handle: 12)', pb.BluetoothGATTNotifyResponse(address=a, handle=12)),
        ('BluetoothDevicePairingResponse(address: address, succeeded: true)', pb.BluetoothDevicePairingResponse(address=a, paired=True)),
        ('BluetoothDeviceUnpairingResponse(address: address, succeeded: false, error: -4)',
         pb.BluetoothDeviceUnpairingResponse(address=a, success=False, error=-4)),
        ('BluetoothDeviceClearCacheResponse(address: address, succeeded: true)', pb.BluetoothDeviceClearCacheResponse(address=a, success=True)),
        ('BluetoothScannerStateResponse(state: .running, mode: .active, configuredMode: .passive)',
         pb.BluetoothScannerStateResponse(state=2, mode=1, configured_mode=0)),
        ('BluetoothScannerSetModeRequest(mode: .active)', pb.BluetoothScannerSetModeRequest(mode=1)),
    ]
    for swift, message in rows:
        row(swift, message)


def scalars():
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf import message_factory

    # syntax = "proto3"; message AllTypes { int32 i32 = 1; int64 i64 = 2; uint32 u32 = 3;
    # uint64 u64 = 4; sint32 s32 = 5; sint64 s64 = 6; bool b = 7; fixed32 f32 = 8;
    # fixed64 f64 = 9; float f = 10; double d = 11; string s = 12; bytes by = 13;
    # repeated uint32 ru32 = 14; repeated uint64 ru64 = 15; Nested inner = 16;
    # repeated string rs = 17; repeated Nested rn = 18; }  message Nested { uint32 u32 = 1; }
    F = descriptor_pb2.FieldDescriptorProto
    fields = [("i32", F.TYPE_INT32), ("i64", F.TYPE_INT64), ("u32", F.TYPE_UINT32), ("u64", F.TYPE_UINT64),
              ("s32", F.TYPE_SINT32), ("s64", F.TYPE_SINT64), ("b", F.TYPE_BOOL), ("f32", F.TYPE_FIXED32),
              ("f64", F.TYPE_FIXED64), ("f", F.TYPE_FLOAT), ("d", F.TYPE_DOUBLE), ("s", F.TYPE_STRING),
              ("by", F.TYPE_BYTES), ("ru32", F.TYPE_UINT32), ("ru64", F.TYPE_UINT64), ("inner", F.TYPE_MESSAGE),
              ("rs", F.TYPE_STRING), ("rn", F.TYPE_MESSAGE)]
    file = descriptor_pb2.FileDescriptorProto(name="alltypes.proto", package="t", syntax="proto3")
    nested = file.message_type.add(name="Nested")
    nested.field.add(name="u32", number=1, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    message = file.message_type.add(name="AllTypes")
    for number, (name, kind) in enumerate(fields, start=1):
        label = F.LABEL_REPEATED if name.startswith("r") else F.LABEL_OPTIONAL
        field = message.field.add(name=name, number=number, type=kind, label=label)
        if kind == F.TYPE_MESSAGE:
            field.type_name = ".t.Nested"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    AllTypes = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.AllTypes"))
    Nested = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Nested"))

    cases = [
        ("AllTypes()", AllTypes()),
        ("AllTypes(i32: -1, i64: -2, u32: .max, u64: .max, s32: -3, s64: .min, b: true)",
         AllTypes(i32=-1, i64=-2, u32=2**32 - 1, u64=2**64 - 1, s32=-3, s64=-2**63, b=True)),
        ("AllTypes(i32: .max, i64: .max, u32: 300, u64: 1 << 35, s32: .min, s64: 64)",
         AllTypes(i32=2**31 - 1, i64=2**63 - 1, u32=300, u64=2**35, s32=-2**31, s64=64)),
        ("AllTypes(f32: 0xDEADBEEF, f64: 0x0102030405060708, f: 1.5, d: -2.25)",
         AllTypes(f32=0xDEADBEEF, f64=0x0102030405060708, f=1.5, d=-2.25)),
        ("AllTypes(f: -0.0, d: -0.0)", AllTypes(f=-0.0, d=-0.0)),
        ('AllTypes(s: "grüße ✓", by: [0, 255, 128])', AllTypes(s="grüße ✓", by=b"\x00\xff\x80")),
        ("AllTypes(ru32: [0, 1, 300, .max], ru64: [1 << 63])", AllTypes(ru32=[0, 1, 300, 2**32 - 1], ru64=[2**63])),
        ("AllTypes(u32: 7, inner: Nested())", AllTypes(u32=7, inner=Nested())),
        ('AllTypes(inner: Nested(u32: 5), rs: ["a", "", "ü"], rn: [Nested(), Nested(u32: 1)])',
         AllTypes(inner=Nested(u32=5), rs=["a", "", "ü"], rn=[Nested(), Nested(u32=1)])),
    ]
    for swift, value in cases:
        row(swift, value)


def noise():
    from noise.connection import Keypair, NoiseConnection

    name = b"Noise_NNpsk0_25519_ChaChaPoly_SHA256"
    prologue = b"NoiseAPIInit\x00\x00"  # aioesphomeapi: the prologue after an empty client hello
    psk = bytes(range(32))
    client_ephemeral = bytes([0x11] * 32)
    server_ephemeral = bytes([0x22] * 32)

    def side(initiator, ephemeral):
        connection = NoiseConnection.from_name(name)
        connection.set_as_initiator() if initiator else connection.set_as_responder()
        connection.set_psks(psk)
        connection.set_prologue(prologue)
        connection.set_keypair_from_private_bytes(Keypair.EPHEMERAL, ephemeral)
        connection.start_handshake()
        return connection

    client = side(True, client_ephemeral)
    server = side(False, server_ephemeral)

    first = client.write_message()
    server.read_message(first)
    second = server.write_message()
    client.read_message(second)
    assert client.handshake_finished and server.handshake_finished

    def message(type_, payload):
        return bytes([type_ >> 8, type_ & 0xFF, len(payload) >> 8, len(payload) & 0xFF]) + payload

    out = {
        "psk": psk, "clientEphemeral": client_ephemeral, "serverEphemeral": server_ephemeral,
        "clientHandshake": first, "serverHandshake": second,
        "handshakeHash": server.get_handshake_hash(),
        # HelloRequest then PingRequest, as the client seals them; HelloResponse then PingResponse.
        "clientHello": client.encrypt(message(1, bytes.fromhex("0a0d61696f657370686f6d6561706910011813"))),
        "clientPing": client.encrypt(message(7, b"")),
        "serverHello": server.encrypt(message(2, bytes.fromhex("080110"))),
        "serverPing": server.encrypt(message(8, b"")),
    }
    for key, value in out.items():
        print(f'    static let {key} = hex("{value.hex()}")')


{"messages": messages, "scalars": scalars, "noise": noise}[sys.argv[1]]()
