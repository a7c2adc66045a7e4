#!/usr/bin/env python3
"""pika (PyPI) against an AMQP 0-9-1 broker: publish with confirms, consume with prefetch and
manual acks, and the refusals RabbitMQ gives for the same mistakes.

    python3 pika_smoke.py --port 5673 [--host 127.0.0.1] [--messages 1000] [--prefetch 10]

Every check prints one line (`ok - ...` or `FAIL - ...`); the last line is
`pika_smoke: N passed, N failed`. The exit status is 1 when any check failed, 2 when the
broker could not be reached at all. The script uses only names it creates (prefixed
`pika-smoke-` and a random suffix) and deletes them, so it can also be pointed at a RabbitMQ
to check the script itself.
"""

import argparse
import sys
import time
import uuid

import pika
from pika import exceptions as px


class Checks:
    """Counts and prints the checks."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, condition, name, detail=""):
        """Records one check; returns the condition."""
        if condition:
            self.passed += 1
            print(f"ok - {name}", flush=True)
        else:
            self.failed += 1
            suffix = f": {detail}" if detail else ""
            print(f"FAIL - {name}{suffix}", flush=True)
        return condition


def params(args, user="guest", password="guest", vhost=None):
    """Connection parameters for the broker under test."""
    return pika.ConnectionParameters(
        host=args.host,
        port=args.port,
        virtual_host=args.vhost if vhost is None else vhost,
        credentials=pika.PlainCredentials(user, password),
        connection_attempts=1,
        socket_timeout=5,
        blocked_connection_timeout=30,
    )


def capabilities(checks, conn):
    """The capabilities pika reads from connection.start."""
    checks.check(conn.publisher_confirms_supported, "capability publisher_confirms")
    checks.check(conn.basic_nack_supported, "capability basic.nack")
    checks.check(conn.consumer_cancel_notify_supported, "capability consumer_cancel_notify")
    checks.check(
        conn.exchange_exchange_bindings_supported, "capability exchange_exchange_bindings"
    )


def publish_with_confirms(checks, ch, exchange, queue, count):
    """Publishes `count` messages, each confirmed by the broker; then a mandatory unroutable
    one, which must come back as a return."""
    ch.confirm_delivery()
    started = time.monotonic()
    nacked = unroutable = 0
    for i in range(count):
        try:
            ch.basic_publish(
                exchange,
                "k",
                f"message {i}".encode(),
                pika.BasicProperties(
                    content_type="text/plain",
                    delivery_mode=1,
                    message_id=str(i),
                    headers={"i": i, "smoke": "pika"},
                ),
                mandatory=True,
            )
        except px.NackError:
            nacked += 1
        except px.UnroutableError:
            unroutable += 1
    elapsed = time.monotonic() - started
    checks.check(
        nacked == 0 and unroutable == 0,
        f"{count} publishes confirmed ({elapsed:.2f} s)",
        f"{nacked} nacked, {unroutable} returned",
    )
    try:
        ch.basic_publish(exchange, "no-such-key", b"lost", mandatory=True)
        checks.check(False, "mandatory unroutable publish is returned", "it was confirmed")
    except px.UnroutableError as e:
        returned = e.messages[0] if e.messages else None
        checks.check(
            returned is not None
            and returned.method.reply_code == 312
            and returned.body == b"lost",
            "mandatory unroutable publish is returned (312 NO_ROUTE)",
            repr(returned.method if returned else e),
        )
    declared = ch.queue_declare(queue, passive=True)
    checks.check(
        declared.method.message_count == count,
        f"passive declare counts {count} ready",
        f"message_count={declared.method.message_count}",
    )


def consume_with_prefetch(checks, ch, queue, count, prefetch):
    """Consumes `count` messages with `basic.qos(prefetch)` and manual acks, checking order,
    properties and that never more than `prefetch` deliveries are unacknowledged. Every tenth
    full window is held unacknowledged for a while: the broker must not send more meanwhile."""
    ch.basic_qos(prefetch_count=prefetch)
    unacked = []
    received = 0
    max_unacked = 0
    held_windows = 0
    holding = False
    idle_in_a_row = 0
    windows = 0
    order_ok = properties_ok = redelivered_none = True
    for method, props, body in ch.consume(queue, auto_ack=False, inactivity_timeout=0.2):
        if method is None:
            idle_in_a_row += 1
            if holding:
                # The window stayed full and nothing more came: the limit held.
                held_windows += 1
                holding = False
            if unacked:
                ch.basic_ack(unacked[-1], multiple=True)
                unacked.clear()
            if idle_in_a_row > 50:
                checks.check(False, "consumer received everything", f"stalled at {received}")
                break
            continue
        idle_in_a_row = 0
        if body != f"message {received}".encode():
            order_ok = False
        if props.headers != {"i": received, "smoke": "pika"} or props.message_id != str(
            received
        ):
            properties_ok = False
        if method.redelivered:
            redelivered_none = False
        received += 1
        unacked.append(method.delivery_tag)
        max_unacked = max(max_unacked, len(unacked))
        if holding:
            # A delivery beyond the full window: counted in max_unacked; settle and go on.
            holding = False
            ch.basic_ack(unacked[-1], multiple=True)
            unacked.clear()
        elif len(unacked) >= prefetch:
            windows += 1
            if windows % 10 == 1 and received < count:
                holding = True
                continue
            if windows % 2 == 0:
                ch.basic_ack(unacked[-1], multiple=True)
            else:
                for tag in unacked:
                    ch.basic_ack(tag)
            unacked.clear()
        if received == count:
            if unacked:
                ch.basic_ack(unacked[-1], multiple=True)
                unacked.clear()
            break
    requeued = ch.cancel()
    checks.check(received == count, f"consumed {count}", f"received {received}")
    checks.check(order_ok, "deliveries in publish order")
    checks.check(properties_ok, "headers and message-id kept")
    checks.check(redelivered_none, "no delivery flagged redelivered")
    checks.check(
        max_unacked <= prefetch,
        f"at most {prefetch} unacked at a time",
        f"saw {max_unacked} unacked",
    )
    checks.check(
        held_windows >= 5,
        "a full window held back further deliveries",
        f"held {held_windows} windows",
    )
    checks.check(requeued == 0, "cancel requeued nothing", f"requeued {requeued}")
    declared = ch.queue_declare(queue, passive=True)
    checks.check(
        declared.method.message_count == 0 and declared.method.consumer_count == 0,
        "queue empty after acks",
        f"message_count={declared.method.message_count}, "
        f"consumer_count={declared.method.consumer_count}",
    )


def get_nack_reject(checks, ch, exchange, queue):
    """basic.get, nack with requeue (redelivered), reject without requeue (gone), get-empty."""
    ch.basic_publish(exchange, "k", b"again")
    method, _, body = ch.basic_get(queue)
    checks.check(
        method is not None and body == b"again" and not method.redelivered,
        "basic.get returns the message",
    )
    if method is None:
        return
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = ch.basic_get(queue)
    checks.check(
        method is not None and body == b"again" and method.redelivered,
        "nack with requeue: redelivered",
    )
    if method is None:
        return
    ch.basic_reject(method.delivery_tag, requeue=False)
    method, _, _ = ch.basic_get(queue)
    checks.check(method is None, "reject without requeue: gone (get-empty)")


def refusals(checks, args):
    """Wrong password, unknown vhost, passive declares of missing entities."""
    try:
        pika.BlockingConnection(params(args, password="wrong-password")).close()
        checks.check(False, "wrong password refused", "the connection opened")
    except (px.ProbableAuthenticationError, px.AuthenticationError) as e:
        checks.check("403" in str(e), "wrong password refused (403 ACCESS_REFUSED)", repr(e))
    except px.AMQPError as e:
        checks.check(False, "wrong password refused", f"unexpected {e!r}")

    vhost = "pika-smoke-no-such-vhost"
    try:
        pika.BlockingConnection(params(args, vhost=vhost)).close()
        checks.check(False, "unknown vhost refused", "the connection opened")
    except (px.ProbableAccessDeniedError, px.ConnectionClosedByBroker) as e:
        text = str(e)
        checks.check(
            "530" in text and "NOT_ALLOWED" in text,
            "unknown vhost refused (530 NOT_ALLOWED)",
            repr(e),
        )
    except px.AMQPError as e:
        checks.check(False, "unknown vhost refused", f"unexpected {e!r}")

    conn = pika.BlockingConnection(params(args))
    missing = f"pika-smoke-missing-{uuid.uuid4().hex[:8]}"
    ch = conn.channel()
    try:
        ch.queue_declare(missing, passive=True)
        checks.check(False, "passive declare of a missing queue", "it was declared")
    except px.ChannelClosedByBroker as e:
        checks.check(
            e.reply_code == 404 and e.reply_text.startswith("NOT_FOUND"),
            "passive declare of a missing queue: 404 NOT_FOUND",
            repr(e),
        )
    ch = conn.channel()
    try:
        ch.exchange_declare(missing, passive=True)
        checks.check(False, "passive declare of a missing exchange", "it was declared")
    except px.ChannelClosedByBroker as e:
        checks.check(
            e.reply_code == 404 and e.reply_text.startswith("NOT_FOUND"),
            "passive declare of a missing exchange: 404 NOT_FOUND",
            repr(e),
        )
    ch = conn.channel()
    ch.queue_declare(missing, auto_delete=True)
    try:
        ch.queue_declare(missing, durable=True)
        checks.check(False, "redeclare with other properties", "it was accepted")
    except px.ChannelClosedByBroker as e:
        checks.check(
            e.reply_code == 406 and e.reply_text.startswith("PRECONDITION_FAILED"),
            "redeclare with other properties: 406 PRECONDITION_FAILED",
            repr(e),
        )
    ch = conn.channel()
    checks.check(ch.is_open, "the connection survives channel errors")
    ch.queue_delete(missing)
    conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--vhost", default="/")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=10)
    args = parser.parse_args()
    checks = Checks()
    try:
        conn = pika.BlockingConnection(params(args))
    except px.AMQPError as e:
        print(f"pika_smoke: cannot connect to {args.host}:{args.port}: {e!r}", flush=True)
        return 2
    suffix = uuid.uuid4().hex[:8]
    exchange = f"pika-smoke-x-{suffix}"
    queue = f"pika-smoke-q-{suffix}"
    try:
        capabilities(checks, conn)
        ch = conn.channel()
        ch.exchange_declare(exchange, "direct", auto_delete=False)
        ch.queue_declare(queue, auto_delete=False)
        ch.queue_bind(queue, exchange, "k")
        publish_with_confirms(checks, ch, exchange, queue, args.messages)
        consume_with_prefetch(checks, ch, queue, args.messages, args.prefetch)
        get_nack_reject(checks, ch, exchange, queue)
        ch.queue_delete(queue)
        ch.exchange_delete(exchange)
        conn.close()
        refusals(checks, args)
    except px.AMQPError as e:
        checks.check(False, "no unexpected client error", repr(e))
    print(f"pika_smoke: {checks.passed} passed, {checks.failed} failed", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
