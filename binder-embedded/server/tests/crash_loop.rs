//! The crash loop: `stream-broker --data-dir` is killed with SIGKILL at random moments while
//! a client publishes persistent messages with confirms to a durable fanout (two durable
//! queues, so each message is written once for both) and consumes and acknowledges one of
//! the queues. After every restart:
//!
//! * every confirmed message is in both queues, once (a message published but not confirmed
//!   may be there or not);
//! * no message whose acknowledgement is known to be on disk comes back, and no message
//!   retired by an earlier round comes back;
//! * a message whose delivery is known to be on disk comes back flagged redelivered.
//!
//! "Known to be on disk": the store writes in the order the broker made the changes and a
//! confirm is sent after the sync that covers its message, so an acknowledgement (or a
//! delivery) is on disk once a message published after the client sent it (or received it)
//! is confirmed. Each round then drains both queues, acknowledges everything, and publishes
//! a confirmed fence message, so the next round starts from a known state.
//!
//! `CRASH_LOOP_ROUNDS` sets the number of kills (default 10); `CRASH_LOOP_SEED` replays a
//! run (the seed is printed); `CRASH_LOOP_DURABILITY` passes a `--durability` mode.
//!
//! SIGKILL loses what the broker had not yet handed to the kernel, not what the kernel had
//! not yet synced: this loop proves that confirms follow the writes, that recovery rebuilds
//! every queue from what was written, and that acknowledgements and deliveries are ordered
//! with publishes. Writes lost before a sync (power loss) are the store's fault-injecting
//! file layer tests (`stream-store`'s `tests/faults.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "common/process.rs"]
mod process;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, ExchangeKind};

const EXCHANGE: &str = "crash.fan";
/// Consumed and acknowledged while the broker runs.
const CONSUMED: &str = "crash.consumed";
/// Only drained between rounds.
const KEPT: &str = "crash.kept";

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A broker child process and the address it listens on.
struct BrokerProcess {
    child: Child,
    addr: String,
}

impl BrokerProcess {
    fn start(dir: &Path) -> BrokerProcess {
        let mut command = process::stream_broker();
        command
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(
                std::env::var("CRASH_LOOP_DURABILITY")
                    .map(|mode| vec!["--durability".to_owned(), mode])
                    .unwrap_or_default(),
            )
            .stderr(Stdio::inherit());
        // Recovery of a large store may take a while before the listening line.
        let (child, addr) = process::spawn_until(
            command,
            "local_addr=",
            "local_addr",
            Duration::from_secs(120),
        );
        BrokerProcess { child, addr }
    }

    fn uri(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    /// SIGKILL: no shutdown, no flush.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM: a clean shutdown.
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
}

/// What the client did in one round, to judge what the restarted broker must hold.
#[derive(Debug, Default)]
struct Round {
    /// The fence: confirmed and alone in both queues when the round started.
    fence: u64,
    /// Published (confirmed or not), besides the fence.
    published: BTreeSet<u64>,
    confirmed: BTreeSet<u64>,
    /// Per id delivered from `CONSUMED`: the first id published after the client received it.
    delivered: BTreeMap<u64, u64>,
    /// Per id acknowledged in `CONSUMED`: the first id published after the ack was sent.
    acked: BTreeMap<u64, u64>,
}

impl Round {
    /// Whether a change the client made before publishing `next` is known to be on disk.
    fn on_disk(&self, next: u64) -> bool {
        self.confirmed.range(next..).next().is_some()
    }
}

async fn connect(broker: &BrokerProcess) -> lapin::Connection {
    lapin::Connection::connect(&broker.uri(), Default::default())
        .await
        .expect("connect to stream-broker")
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn id_of(data: &[u8]) -> u64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a body that is not an id: {data:?}"))
}

async fn declare(ch: &lapin::Channel) {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        EXCHANGE.into(),
        ExchangeKind::Fanout,
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();
    for queue in [CONSUMED, KEPT] {
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(queue.into(), durable, FieldTable::default())
            .await
            .unwrap();
        ch.queue_bind(
            queue.into(),
            EXCHANGE.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
}

/// Drains a queue with `basic.get`: `(id, redelivered)` in order, and the last tag.
async fn drain(ch: &lapin::Channel, queue: &str) -> (Vec<(u64, bool)>, Option<u64>) {
    let mut got = Vec::new();
    let mut last = None;
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
    {
        got.push((id_of(&m.delivery.data), m.delivery.redelivered));
        last = Some(m.delivery.delivery_tag);
    }
    (got, last)
}

/// Checks what a restarted broker holds against the round before the kill.
fn check(round: &Round, queue: &str, got: &[(u64, bool)]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for &(id, redelivered) in got {
        if !seen.insert(id) {
            return Err(format!("{queue}: message {id} is there twice"));
        }
        if id < round.fence {
            return Err(format!(
                "{queue}: message {id}, retired before this round, came back"
            ));
        }
        if id != round.fence && !round.published.contains(&id) {
            return Err(format!("{queue}: message {id} was never published"));
        }
        if queue == CONSUMED {
            if let Some(&next) = round.acked.get(&id) {
                if round.on_disk(next) {
                    return Err(format!(
                        "{queue}: message {id} came back though its ack was on disk"
                    ));
                }
            }
            if let Some(&next) = round.delivered.get(&id) {
                if round.on_disk(next) && !redelivered {
                    return Err(format!(
                        "{queue}: message {id} was delivered before the crash but is not \
                         flagged redelivered"
                    ));
                }
            }
        } else if redelivered {
            return Err(format!(
                "{queue}: message {id} was never delivered but is flagged redelivered"
            ));
        }
    }
    // Fence 0: the first start, with nothing before it.
    let fence = (round.fence != 0).then_some(round.fence);
    for id in fence.into_iter().chain(round.confirmed.iter().copied()) {
        let acked = queue == CONSUMED && round.acked.contains_key(&id);
        if !acked && !seen.contains(&id) {
            return Err(format!("{queue}: confirmed message {id} is missing"));
        }
    }
    Ok(())
}

/// Drains and checks both queues, acknowledges everything and publishes the next fence.
async fn settle_round(
    conn: &lapin::Connection,
    round: &Round,
    next_fence: u64,
) -> Result<usize, String> {
    let ch = conn.create_channel().await.unwrap();
    declare(&ch).await;
    let mut kept = 0;
    for queue in [CONSUMED, KEPT] {
        let (got, last) = drain(&ch, queue).await;
        check(round, queue, &got)?;
        kept += got.len();
        if let Some(tag) = last {
            ch.basic_ack(tag, BasicAckOptions { multiple: true })
                .await
                .unwrap();
        }
    }
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            EXCHANGE.into(),
            "".into(),
            BasicPublishOptions::default(),
            next_fence.to_string().as_bytes(),
            persistent(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        matches!(confirm, Confirmation::Ack(_)),
        "fence {next_fence}: {confirm:?}"
    );
    ch.close(200, "round settled".into()).await.unwrap();
    Ok(kept)
}

/// Publishes (up to 32 in flight) and consumes until the connection dies.
async fn workload(conn: lapin::Connection, round: Arc<Mutex<Round>>, next: Arc<AtomicU64>) {
    let publisher = conn.create_channel().await.unwrap();
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let reader = conn.create_channel().await.unwrap();
    reader
        .basic_qos(20, BasicQosOptions::default())
        .await
        .unwrap();
    let mut consumer = reader
        .basic_consume(
            CONSUMED.into(),
            "crash-loop".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let consume = {
        let round = round.clone();
        let next = next.clone();
        async move {
            while let Some(Ok(delivery)) = consumer.next().await {
                let id = id_of(&delivery.data);
                round
                    .lock()
                    .unwrap()
                    .delivered
                    .insert(id, next.load(Ordering::SeqCst));
                if delivery.ack(BasicAckOptions::default()).await.is_err() {
                    break;
                }
                round
                    .lock()
                    .unwrap()
                    .acked
                    .insert(id, next.load(Ordering::SeqCst));
            }
        }
    };
    let publish = async move {
        let mut in_flight = FuturesUnordered::new();
        loop {
            while in_flight.len() < 32 {
                let id = next.load(Ordering::SeqCst);
                round.lock().unwrap().published.insert(id);
                let sent = publisher
                    .basic_publish(
                        EXCHANGE.into(),
                        "".into(),
                        BasicPublishOptions::default(),
                        id.to_string().as_bytes(),
                        persistent(),
                    )
                    .await;
                next.store(id + 1, Ordering::SeqCst);
                let Ok(confirm) = sent else { return };
                in_flight.push(async move { (id, confirm.await) });
            }
            match in_flight.next().await {
                Some((id, Ok(Confirmation::Ack(_)))) => {
                    round.lock().unwrap().confirmed.insert(id);
                }
                Some((id, Ok(other))) => panic!("message {id} was not acked: {other:?}"),
                Some((_, Err(_))) | None => return,
            }
        }
    };
    futures::join!(consume, publish);
}

#[test]
fn confirmed_messages_survive_kill_9_and_acknowledged_ones_stay_gone() {
    let rounds: u64 = std::env::var("CRASH_LOOP_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let seed: u64 = std::env::var("CRASH_LOOP_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("crash loop: {rounds} rounds, CRASH_LOOP_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut confirmed, mut redelivered, mut kept) = (0usize, 0usize, 0usize);
    // The first fence starts the first round.
    let mut fence = 1;
    let broker = BrokerProcess::start(dir.path());
    runtime.block_on(async {
        let conn = connect(&broker).await;
        let round = Round {
            fence: 0,
            ..Round::default()
        };
        settle_round(&conn, &round, fence).await.unwrap();
    });
    let mut broker = Some(broker);
    for n in 0..rounds {
        let running = broker.take().unwrap();
        let round = Arc::new(Mutex::new(Round {
            fence,
            ..Round::default()
        }));
        let next = Arc::new(AtomicU64::new(fence + 1));
        let lifetime = Duration::from_millis(50 + rng.below(600));
        runtime.block_on(async {
            let conn = connect(&running).await;
            let work = tokio::spawn(workload(conn, round.clone(), next.clone()));
            tokio::time::sleep(lifetime).await;
            running.kill();
            // The client sees its connection die; bounded in case it does not.
            let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
        });
        let round = std::mem::take(&mut *round.lock().unwrap());
        confirmed += round.confirmed.len();
        redelivered += round
            .delivered
            .keys()
            .filter(|id| !round.acked.contains_key(id))
            .count();
        let restarted = BrokerProcess::start(dir.path());
        fence = next.load(Ordering::SeqCst) + 1;
        runtime.block_on(async {
            let conn = connect(&restarted).await;
            match settle_round(&conn, &round, fence).await {
                Ok(k) => kept += k,
                Err(e) => panic!(
                    "round {n} (killed after {lifetime:?}, CRASH_LOOP_SEED={seed}): {e}\n\
                     confirmed {} of {} published, {} delivered, {} acked",
                    round.confirmed.len(),
                    round.published.len(),
                    round.delivered.len(),
                    round.acked.len()
                ),
            }
        });
        broker = Some(restarted);
    }
    broker.take().unwrap().stop();
    println!(
        "crash loop: {rounds} kills, {confirmed} confirmed messages checked, {kept} found \
         after restarts, {redelivered} delivered but unacknowledged at a kill"
    );
    assert!(
        confirmed as u64 >= rounds,
        "the workload confirmed only {confirmed} messages in {rounds} rounds: the test checked \
         next to nothing"
    );
}
