//! Replays the connection fuzz target's seed corpus (`fuzz/seeds/connection/`, written by
//! `fuzz/seeds/make_seeds.py`) through the same harness the target uses: every session
//! ends within 10 s of its input's end and leaves no connection counted, and the malformed,
//! oversized and out-of-order ones are closed with the reply code RabbitMQ uses.

use std::path::Path;
use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, channel, connection, parse_class};
use bytes::BytesMut;
use stream_broker::ServerConfig;
use stream_broker::fuzzing::{FRAME_METHOD, Harness, PREFIX_FRAME_MAX, decode, session_prefix};
use stream_engine::Broker;

/// The first connection or channel close the server sent: (channel, code).
fn first_close(output: &[u8]) -> Option<(u16, u16)> {
    let mut buf = BytesMut::from(output);
    while let Ok(Some(frame)) = decode(&mut buf, 1 << 20) {
        if frame.kind != FRAME_METHOD {
            continue;
        }
        match parse_class(&frame.payload[..]) {
            Ok((_, AMQPClass::Connection(connection::AMQPMethod::Close(c)))) => {
                return Some((0, c.reply_code));
            }
            Ok((_, AMQPClass::Channel(channel::AMQPMethod::Close(c)))) => {
                return Some((frame.channel, c.reply_code));
            }
            _ => {}
        }
    }
    None
}

async fn replay(input: &[u8]) -> (Option<(u16, u16)>, Duration, usize) {
    let mut config = ServerConfig::default();
    config.limits.frame_max = PREFIX_FRAME_MAX;
    let harness = Harness::new(&config, Broker::new()).unwrap();
    let (mode, rest) = input.split_first().unwrap();
    let mut bytes = session_prefix(*mode);
    bytes.extend_from_slice(rest);
    let session = tokio::time::timeout(Duration::from_secs(600), harness.session(&bytes))
        .await
        .expect("the session ends");
    (
        first_close(&session.output),
        session.ended_after_eof,
        harness.connections(),
    )
}

#[tokio::test(start_paused = true)]
async fn every_seed_session_ends_and_is_closed_with_the_right_code() {
    // (seed, the first close: channel and reply code), as RabbitMQ closes them.
    let expected: &[(&str, Option<(u16, u16)>)] = &[
        ("handshake_only", None),
        ("oversized_frame", Some((0, 501))),
        ("bad_frame_end", Some((0, 501))),
        ("bad_frame_type", Some((0, 501))),
        ("content_without_publish", Some((0, 505))),
        ("method_inside_content", Some((0, 505))),
        ("body_too_long", Some((0, 505))),
        ("heartbeat_on_channel", Some((0, 505))),
        ("content_on_channel_0", Some((0, 505))),
        ("method_before_channel_open", Some((0, 504))),
        ("channel_reopen", Some((0, 504))),
        ("prefetch_size", Some((0, 540))),
        ("bad_vhost", Some((0, 530))),
        ("tune_too_big", Some((0, 530))),
        // Accepted with update-secret-ok, as RabbitMQ does for its internal users.
        ("update_secret", None),
        ("passive_missing", Some((1, 404))),
        ("ack_unknown_tag", Some((1, 406))),
        ("amqplain_unknown_mech", Some((0, 503))),
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/connection");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    assert!(
        seeds.len() >= 30,
        "seed corpus missing in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for path in &seeds {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let input = std::fs::read(path).unwrap();
        let (close, after_eof, open) = replay(&input).await;
        assert!(
            after_eof <= Duration::from_secs(10),
            "{name}: ended {after_eof:?} after EOF"
        );
        assert_eq!(open, 0, "{name}: a connection is still counted");
        if let Some((_, want)) = expected.iter().find(|(n, _)| *n == name)
            && close != *want
        {
            failures.push(format!("{name}: closed with {close:?}, expected {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
