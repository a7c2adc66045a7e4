#!/usr/bin/env python3
"""Writes the seed corpora: hand-built AMQP 0-9-1 client sessions (valid ones, and the
malformed, oversized and out-of-order frames the server must refuse), one file each.

    python3 seeds/make_seeds.py   # from fuzz/, writes seeds/connection/ and seeds/frame_decoder/
"""
import os
import struct

HEADER = b"AMQP\x00\x00\x09\x01"


def shortstr(s):
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


def table(entries=b""):
    return struct.pack(">I", len(entries)) + entries


def bits(*flags):
    v = 0
    for i, f in enumerate(flags):
        v |= int(bool(f)) << i
    return bytes([v])


def frame(kind, channel, payload, end=0xCE):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + bytes([end])


def method(channel, cls, mid, args=b""):
    return frame(1, channel, struct.pack(">HH", cls, mid) + args)


def header(channel, size, flags=0, props=b""):
    return frame(2, channel, struct.pack(">HHQH", 60, 0, size, flags) + props)


def body(channel, data):
    return frame(3, channel, data)


HEARTBEAT = frame(8, 0, b"")


def start_ok():
    return method(0, 10, 11, table() + shortstr("PLAIN") + longstr(b"\0guest\0guest") + shortstr("en_US"))


def tune_ok(frame_max=4096, heartbeat=0):
    return method(0, 10, 31, struct.pack(">HIH", 16, frame_max, heartbeat))


def conn_open(vhost="/"):
    return method(0, 10, 40, shortstr(vhost) + shortstr("") + bits(False))


def ch_open(ch=1):
    return method(ch, 20, 10, shortstr(""))


def ch_close(ch=1):
    return method(ch, 20, 40, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))


def conn_close():
    return method(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))


def exchange_declare(ch, name, kind="direct", passive=False, durable=False, auto_delete=False):
    return method(ch, 40, 10, struct.pack(">H", 0) + shortstr(name) + shortstr(kind)
                  + bits(passive, durable, auto_delete, False, False) + table())


def queue_declare(ch, name, passive=False, durable=False, exclusive=False, auto_delete=False, nowait=False):
    return method(ch, 50, 10, struct.pack(">H", 0) + shortstr(name)
                  + bits(passive, durable, exclusive, auto_delete, nowait) + table())


def queue_bind(ch, q, ex, key):
    return method(ch, 50, 20, struct.pack(">H", 0) + shortstr(q) + shortstr(ex) + shortstr(key) + bits(False) + table())


def queue_purge(ch, q):
    return method(ch, 50, 30, struct.pack(">H", 0) + shortstr(q) + bits(False))


def queue_delete(ch, q):
    return method(ch, 50, 40, struct.pack(">H", 0) + shortstr(q) + bits(False, False, False))


def qos(ch, count, size=0, global_=False):
    return method(ch, 60, 10, struct.pack(">IH", size, count) + bits(global_))


def consume(ch, q, tag="", no_ack=False, exclusive=False):
    return method(ch, 60, 20, struct.pack(">H", 0) + shortstr(q) + shortstr(tag)
                  + bits(False, no_ack, exclusive, False) + table())


def cancel(ch, tag):
    return method(ch, 60, 30, shortstr(tag) + bits(False))


def publish(ch, ex, key, data, mandatory=False, frame_split=None):
    out = method(ch, 60, 40, struct.pack(">H", 0) + shortstr(ex) + shortstr(key) + bits(mandatory, False))
    # Properties: content-type and delivery-mode.
    out += header(ch, len(data), 0x8000 | 0x1000, shortstr("text/plain") + bytes([2]))
    step = frame_split or max(len(data), 1)
    for i in range(0, len(data), step):
        out += body(ch, data[i:i + step])
    return out


def get(ch, q, no_ack=False):
    return method(ch, 60, 70, struct.pack(">H", 0) + shortstr(q) + bits(no_ack))


def ack(ch, tag, multiple=False):
    return method(ch, 60, 80, struct.pack(">Q", tag) + bits(multiple))


def reject(ch, tag, requeue=True):
    return method(ch, 60, 90, struct.pack(">Q", tag) + bits(requeue))


def recover(ch, requeue=True):
    return method(ch, 60, 110, bits(requeue))


def nack(ch, tag, multiple=False, requeue=True):
    return method(ch, 60, 120, struct.pack(">Q", tag) + bits(multiple, requeue))


def confirm_select(ch):
    return method(ch, 85, 10, bits(False))


def tx_select(ch):
    return method(ch, 90, 10)


def tx_commit(ch):
    return method(ch, 90, 20)


def tx_rollback(ch):
    return method(ch, 90, 30)


def flow(ch, active):
    return method(ch, 20, 20, bits(active))


HANDSHAKE = start_ok() + tune_ok() + conn_open()

# Connection target: first byte is the prefix mode (0 nothing after the protocol header,
# 3 through connection.open, 4 + channel.open on 1, 5 + exclusive "fq" declared and consumed).
CONNECTION = {
    "handshake_only": bytes([0]) + HANDSHAKE + conn_close(),
    "handshake_heartbeat": bytes([0]) + start_ok() + tune_ok(heartbeat=1) + conn_open() + HEARTBEAT + conn_close(),
    "bad_vhost": bytes([0]) + start_ok() + tune_ok() + conn_open("nope"),
    "bad_login": bytes([0]) + method(0, 10, 11, table() + shortstr("PLAIN") + longstr(b"\0guest\0nope") + shortstr("en_US")),
    "amqplain_unknown_mech": bytes([0]) + method(0, 10, 11, table() + shortstr("EXTERNAL") + longstr(b"") + shortstr("en_US")),
    "tune_too_big": bytes([0]) + start_ok() + tune_ok(frame_max=1 << 20),
    "publish_get_ack": bytes([4]) + queue_declare(1, "q1") + publish(1, "", "q1", b"hello" * 10)
        + get(1, "q1") + ack(1, 1) + get(1, "q1") + queue_delete(1, "q1") + ch_close(1) + conn_close(),
    "publish_split_body": bytes([4]) + queue_declare(1, "big") + publish(1, "", "big", b"x" * 9000, frame_split=4088)
        + queue_purge(1, "big") + conn_close(),
    "exchange_bind_route": bytes([4]) + exchange_declare(1, "ex", "topic") + queue_declare(1, "", exclusive=True)
        + queue_bind(1, "", "ex", "a.*") + publish(1, "ex", "a.b", b"routed", mandatory=True)
        + publish(1, "ex", "zz", b"returned", mandatory=True) + get(1, "", no_ack=True),
    "confirms": bytes([4]) + confirm_select(1) + queue_declare(1, "cq") + publish(1, "", "cq", b"1")
        + publish(1, "", "cq", b"2") + publish(1, "nope", "cq", b"3"),
    "tx": bytes([4]) + tx_select(1) + queue_declare(1, "tq") + publish(1, "", "tq", b"t") + tx_rollback(1)
        + publish(1, "", "tq", b"u") + tx_commit(1),
    "consume_deliver_ack": bytes([5]) + qos(1, 2) + publish(1, "", "fq", b"a") + publish(1, "", "fq", b"b")
        + publish(1, "", "fq", b"c") + ack(1, 1) + nack(1, 2) + reject(1, 3, False) + recover(1),
    "consume_cancel": bytes([5]) + consume(1, "fq", "t2", no_ack=True) + publish(1, "", "fq", b"a")
        + cancel(1, "t2") + flow(1, False) + flow(1, True) + ch_close(1),
    "consume_then_eof": bytes([5]) + publish(1, "", "fq", b"unacked") + ch_open(2) + consume(2, "fq", exclusive=True),
    "two_channels": bytes([3]) + ch_open(1) + ch_open(2) + queue_declare(2, "q2", auto_delete=True)
        + consume(2, "q2") + publish(1, "", "q2", b"x") + ch_close(2) + ch_close(1),
    # Malformed, oversized and out-of-order frames.
    "oversized_frame": bytes([3]) + frame(1, 1, b"\x00" * 5000),
    "bad_frame_end": bytes([3]) + frame(1, 0, struct.pack(">HH", 20, 10) + b"\x00", end=0x00),
    "bad_frame_type": bytes([3]) + frame(9, 0, b""),
    "content_without_publish": bytes([4]) + header(1, 3) + body(1, b"abc"),
    "method_inside_content": bytes([4]) + method(1, 60, 40, struct.pack(">H", 0) + shortstr("") + shortstr("q") + bits(False, False))
        + queue_declare(1, "q"),
    # Frames of other channels may come between a publish's frames.
    "interleaved_channels": bytes([4]) + ch_open(2) + method(1, 60, 40, struct.pack(">H", 0) + shortstr("") + shortstr("q") + bits(False, False))
        + queue_declare(2, "q") + header(1, 1) + body(1, b"z") + get(2, "q", no_ack=True),
    "body_too_long": bytes([4]) + method(1, 60, 40, struct.pack(">H", 0) + shortstr("") + shortstr("q") + bits(False, False))
        + header(1, 2) + body(1, b"abcd"),
    "heartbeat_on_channel": bytes([4]) + frame(8, 1, b""),
    "content_on_channel_0": bytes([3]) + header(0, 1),
    "method_before_channel_open": bytes([3]) + queue_declare(7, "q"),
    "channel_reopen": bytes([4]) + ch_open(1),
    "prefetch_size": bytes([4]) + qos(1, 1, size=10),
    "unknown_method": bytes([4]) + method(1, 99, 1),
    "trailing_octets": bytes([4]) + method(1, 20, 10, shortstr("") + b"junk"),
    "truncated_method": bytes([4]) + method(1, 50, 10, b"\x00"),
    "bad_protocol_header": bytes([0]) + b"HTTP/1.1",
    "start_ok_twice": bytes([1]) + start_ok(),
    "channel_max_exceeded": bytes([3]) + ch_open(17),
    "update_secret": bytes([3]) + method(0, 10, 70, longstr(b"s") + shortstr("r")),
    "ack_unknown_tag": bytes([4]) + ack(1, 99),
    "passive_missing": bytes([4]) + queue_declare(1, "missing", passive=True) + ch_open(2),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for target in ("connection", "frame_decoder"):
        os.makedirs(os.path.join(here, target), exist_ok=True)
    for name, data in CONNECTION.items():
        with open(os.path.join(here, "connection", name), "wb") as f:
            f.write(data)
        # The decoder's first byte picks frame_max 4096 (index 0) and the chunk size.
        for select, suffix in ((0, "whole"), (8 * 6 + 0, "chunk7")):
            with open(os.path.join(here, "frame_decoder", f"{name}_{suffix}"), "wb") as f:
                f.write(bytes([select]) + data[1:])


if __name__ == "__main__":
    main()
