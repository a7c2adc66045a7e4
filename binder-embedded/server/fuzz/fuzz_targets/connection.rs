//! Arbitrary bytes as a whole client session against the real connection (handshake and
//! state machine) over an in-memory duplex stream, on a fresh `Broker::new()`.
//!
//! The first input byte picks a valid prefix (`fuzzing::session_prefix`) sent after the
//! protocol header, so the fuzzer reaches channel and basic methods without rediscovering
//! the handshake: 0 nothing, 1 `start-ok`, 2 `+ tune-ok`, 3 `+ connection.open`, 4 `+
//! channel.open` on channel 1, 5 `+ exclusive queue.declare` of `fq` and `basic.consume` on
//! it. The rest is written as it is, then the client's side is shut down while it keeps
//! reading.
//!
//! Checked: no panic; the server's output is well-formed frames within the `frame_max` it
//! offered, and every close it sends carries a known reply code; the connection ends
//! within 10 s (virtual time) of input EOF; afterwards no connection is counted, no queue
//! the session named has a consumer or an unacknowledged delivery left, none is still
//! locked by the gone connection (its exclusive queues are deleted), and when none of them
//! survives the broker holds no message memory.

#![no_main]

use std::collections::BTreeSet;
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, basic, channel, connection, parse_class, queue};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use stream_broker::ServerConfig;
use stream_broker::fuzzing::{
    FRAME_METHOD, FRAME_OVERHEAD, Harness, PREFIX_FRAME_MAX, PROTOCOL_HEADER, decode,
    session_prefix,
};
use stream_engine::{Broker, QueueOptions, ReplyCode};

/// The `frame_max` the server offers (AMQP's minimum: many frames, many splits).
const FRAME_MAX: u32 = PREFIX_FRAME_MAX;
/// How long the connection may take to end after the client's input ends.
const END_BOUND: Duration = Duration::from_secs(10);

/// Queue names a stream of frames mentions (declare, declare-ok, bind, consume, get...).
/// `unnamed` is set when a server-named queue may exist whose name was never sent.
fn queue_names(bytes: &[u8], names: &mut BTreeSet<String>, unnamed: &mut bool) {
    let mut buf = BytesMut::from(bytes);
    while let Ok(Some(frame)) = decode(&mut buf, usize::MAX >> 1) {
        if frame.kind != FRAME_METHOD {
            continue;
        }
        let Ok(([], method)) = parse_class(&frame.payload[..]) else {
            continue;
        };
        let name = match method {
            AMQPClass::Queue(queue::AMQPMethod::Declare(d)) => {
                if d.queue.as_str().is_empty() && d.nowait {
                    *unnamed = true;
                }
                d.queue
            }
            AMQPClass::Queue(queue::AMQPMethod::DeclareOk(d)) => d.queue,
            AMQPClass::Queue(queue::AMQPMethod::Bind(b)) => b.queue,
            AMQPClass::Queue(queue::AMQPMethod::Purge(p)) => p.queue,
            AMQPClass::Queue(queue::AMQPMethod::Delete(d)) => d.queue,
            AMQPClass::Basic(basic::AMQPMethod::Consume(c)) => c.queue,
            AMQPClass::Basic(basic::AMQPMethod::Get(g)) => g.queue,
            _ => continue,
        };
        names.insert(name.as_str().to_owned());
    }
}

/// Checks the server's output: whole frames within `frame_max`, known close codes.
fn check_output(output: &[u8]) {
    if output.starts_with(b"AMQP") {
        // The answer to a protocol header it does not take: its own, and nothing else.
        assert_eq!(output, &PROTOCOL_HEADER[..], "more than a protocol header");
        return;
    }
    let mut buf = BytesMut::from(output);
    loop {
        match decode(&mut buf, FRAME_MAX as usize - FRAME_OVERHEAD) {
            Ok(Some(frame)) => {
                if frame.kind != FRAME_METHOD {
                    continue;
                }
                let method = match parse_class(&frame.payload[..]) {
                    Ok(([], m)) => m,
                    other => panic!("server sent an undecodable method: {other:?}"),
                };
                let code = match method {
                    AMQPClass::Connection(connection::AMQPMethod::Close(c)) => c.reply_code,
                    AMQPClass::Channel(channel::AMQPMethod::Close(c)) => c.reply_code,
                    _ => continue,
                };
                assert!(
                    matches!(code, 200 | 320 | 402..=406 | 501..=506 | 530 | 540),
                    "server closed with reply code {code}"
                );
            }
            Ok(None) => {
                assert!(buf.is_empty(), "server output ends inside a frame");
                return;
            }
            Err(e) => panic!("server sent a bad frame: {e}"),
        }
    }
}

fn check_broker(broker: &Broker, names: &BTreeSet<String>, unnamed: bool) {
    let conn = broker.connect();
    let ch = conn.open_channel().expect("a channel on the broker");
    let mut survivors = 0;
    for name in names {
        if let Some((_, consumers)) = broker.queue_counts(name) {
            survivors += 1;
            assert_eq!(
                consumers, 0,
                "queue '{name}' kept a consumer of a gone connection"
            );
            assert_eq!(
                broker.queue_unacked(name),
                Some(0),
                "queue '{name}' kept unacked deliveries of a gone connection"
            );
        }
        let passive = QueueOptions {
            passive: true,
            ..QueueOptions::default()
        };
        if let Err(e) = ch.queue_declare(name, passive, Default::default()) {
            assert_ne!(
                e.code,
                ReplyCode::ResourceLocked,
                "queue '{name}' still exclusive to a gone connection"
            );
        }
    }
    if survivors == 0 && !unnamed {
        assert_eq!(broker.memory_used(), 0, "message memory left with no queue");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut input = session_prefix(mode);
    input.extend_from_slice(rest);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut config = ServerConfig::default();
        config.limits.frame_max = FRAME_MAX;
        let broker = Broker::new();
        let harness = Harness::new(&config, broker.clone()).expect("a valid configuration");
        let session = tokio::time::timeout(Duration::from_secs(600), harness.session(&input))
            .await
            .expect("the session never ended");
        assert!(
            session.ended_after_eof <= END_BOUND,
            "the connection took {:?} to end after input EOF",
            session.ended_after_eof
        );
        assert_eq!(harness.connections(), 0, "a connection is still counted");
        check_output(&session.output);

        let mut names = BTreeSet::new();
        let mut unnamed = false;
        queue_names(&input[PROTOCOL_HEADER.len()..], &mut names, &mut unnamed);
        queue_names(&session.output, &mut names, &mut unnamed);
        // Pumps and confirm tasks of the gone connection finish their last steps.
        tokio::time::sleep(Duration::from_millis(50)).await;
        check_broker(&broker, &names, unnamed);
    });
});
