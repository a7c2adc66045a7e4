#!/usr/bin/env python3
"""Frame-level reproductions of the differences from RabbitMQ that the clients' own suites
found, each checked the way RabbitMQ 3.10 behaves (frames encoded with pika's codec, on a raw
socket).

    python3 rabbitmq_diffs.py --port 5673

1. Both sides close channel 1 at once (amqp091-go TestChannelExceptionWithCloseIssue43): a
   publish to a missing exchange, then channel.close without waiting. The server answers with
   channel.close 404 and channel.close-ok; the client then sends the close-ok the server's
   close asks for. RabbitMQ takes it, and channel 2 opens on the same connection.
2. Two connection.close in a row (amqp091-go TestConcurrentClose, where goroutines close at
   once): RabbitMQ answers both with close-ok and leaves the socket to the client.
3. connection.update-secret for a user of the internal user database (pika's TestUpdateSecret):
   RabbitMQ answers update-secret-ok, as that backend's state never expires, and the
   connection goes on.

Prints `ok - ...` or `FAIL - ...` per case and `rabbitmq_diffs: N passed, N failed`; exit status 1
when a case differs from RabbitMQ.
"""

import argparse
import socket
import sys

from pika import frame, spec


class Peer:
    """A raw AMQP 0-9-1 client."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, channel, method):
        self.sock.sendall(frame.Method(channel, method).marshal())

    def send_frame(self, f):
        self.sock.sendall(f.marshal())

    def read(self, seconds=1.0):
        """Methods (and "EOF") read within `seconds`."""
        self.sock.settimeout(seconds)
        out = []
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    out.append("EOF")
                    break
                self.buf += data
                while True:
                    used, f = frame.decode_frame(self.buf)
                    if not f:
                        break
                    self.buf = self.buf[used:]
                    out.append(getattr(f, "method", f))
        except socket.timeout:
            pass
        except ConnectionResetError:
            out.append("EOF")
        return out

    def open(self):
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.read(0.5)
        self.send(0, spec.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                             response="\0guest\0guest"))
        self.read(0.5)
        self.send(0, spec.Connection.TuneOk(channel_max=100, frame_max=131072, heartbeat=0))
        self.send(0, spec.Connection.Open(virtual_host="/"))
        got = self.read(0.5)
        if not any(isinstance(m, spec.Connection.OpenOk) for m in got):
            raise RuntimeError(f"the handshake did not end in open-ok: {got}")

    def close(self):
        self.sock.close()


def names(methods):
    return [m if isinstance(m, str) else m.NAME for m in methods]


def simultaneous_channel_close(port):
    peer = Peer(port)
    peer.open()
    peer.send(1, spec.Channel.Open())
    peer.read(0.5)
    peer.send(1, spec.Basic.Publish(exchange="close-repro-missing-exchange", routing_key=""))
    peer.send_frame(frame.Header(1, 0, spec.BasicProperties()))
    peer.send(1, spec.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    first = peer.read()
    peer.send(1, spec.Channel.CloseOk())
    peer.send(2, spec.Channel.Open())
    second = peer.read()
    peer.close()
    ok = (
        [m.NAME for m in first if not isinstance(m, str)] == ["Channel.Close", "Channel.CloseOk"]
        and names(second) == ["Channel.OpenOk"]
    )
    return ok, f"answers {names(first)}, then {names(second)}"


def double_connection_close(port):
    peer = Peer(port)
    peer.open()
    close = spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    peer.send(0, close)
    peer.send(0, close)
    got = peer.read(1.0)
    peer.close()
    return names(got) == ["Connection.CloseOk", "Connection.CloseOk"], f"answers {names(got)}"


def update_secret(port):
    peer = Peer(port)
    peer.open()
    peer.send(0, spec.Connection.UpdateSecret(new_secret="another-secret", reason="rotation"))
    first = peer.read()
    peer.send(1, spec.Channel.Open())
    second = peer.read()
    peer.close()
    ok = names(first) == ["Connection.UpdateSecretOk"] and names(second) == ["Channel.OpenOk"]
    return ok, f"answers {names(first)}, then {names(second)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    passed = failed = 0
    for name, case in [
        ("simultaneous channel.close, then close-ok: the connection lives on",
         simultaneous_channel_close),
        ("two connection.close: both answered with close-ok, the socket left to the client",
         double_connection_close),
        ("update-secret: answered with update-secret-ok, the connection goes on", update_secret),
    ]:
        ok, detail = case(args.port)
        if ok:
            passed += 1
            print(f"ok - {name}", flush=True)
        else:
            failed += 1
            print(f"FAIL - {name}: {detail}", flush=True)
    print(f"rabbitmq_diffs: {passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
