//! [`DiskStore`]: the engine's `MessageStore` on disk. Its methods run under the broker's
//! lock, so they only encode and hand a command to the writer thread ([`crate::writer`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use stream_engine::{
    BindingDef, Durability, ExchangeDef, MessageStore, PolicyDef, Published, QueueDef, Recovered,
    Removal, StoreError, StoredMessage,
};
use tokio::sync::oneshot;

use crate::codec;
use crate::config::{ConfigError, StoreConfig, SyncMode};
use crate::frame;
use crate::fs::{FileSystem, RealFs};
use crate::meta::MetaOp;
use crate::read;
use crate::recovery;
use crate::writer::{Cmd, Shared, StoreStats, Writer};

/// The store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A setting is wrong.
    #[error("bad store settings")]
    Config(#[from] ConfigError),
    /// What is on disk could not be read back.
    #[error("cannot recover the store")]
    Recover(#[from] StoreError),
    /// The writer thread could not be started.
    #[error("cannot start the store's writer thread")]
    Thread(#[source] std::io::Error),
}

/// The trait's calls' side: the channel to the writer, and which message the current
/// publication wrote.
#[derive(Debug)]
struct Caller {
    tx: Option<Sender<Cmd>>,
    last_publication: Option<u64>,
    current: u64,
    next_id: u64,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    /// The file layer, for reading paged messages back.
    fs: Arc<dyn FileSystem>,
    mode: SyncMode,
    caller: Mutex<Caller>,
    shared: Arc<Shared>,
    recovered: Mutex<Option<Recovered>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    clean_start: bool,
    truncated: u64,
}

/// A message store in a directory (see the crate docs). Clones share the store; the last
/// one dropped closes it cleanly (as [`DiskStore::close`] does).
#[derive(Debug, Clone)]
pub struct DiskStore(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn closed() -> StoreError {
    StoreError::Failed {
        detail: "the message store is closed".into(),
    }
}

impl DiskStore {
    /// Opens (or creates) the store in `dir` on the real file system, recovering what it
    /// holds; the broker then takes it through [`MessageStore::recover`].
    pub fn open(dir: impl AsRef<Path>, config: StoreConfig) -> Result<DiskStore, OpenError> {
        DiskStore::open_with(Arc::new(RealFs), dir, config)
    }

    /// Opens the store on the given file layer (a [`FaultFs`](crate::FaultFs) in tests).
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        config: StoreConfig,
    ) -> Result<DiskStore, OpenError> {
        config.validate()?;
        let dir = dir.as_ref().to_owned();
        let rebuilt = recovery::recover(fs.as_ref(), &dir)?;
        let shared = Arc::new(Shared::default());
        let next_id = rebuilt.next_id;
        let clean_start = rebuilt.clean;
        let truncated = rebuilt.truncated;
        let mut rebuilt = rebuilt;
        let recovered = std::mem::take(&mut rebuilt.recovered);
        let writer = Writer::new(
            fs.clone(),
            dir.clone(),
            config.clone(),
            shared.clone(),
            rebuilt,
        )?;
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("stream-store-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(OpenError::Thread)?;
        Ok(DiskStore(Arc::new(Inner {
            dir,
            fs,
            mode: config.mode,
            caller: Mutex::new(Caller {
                tx: Some(tx),
                last_publication: None,
                current: 0,
                next_id,
            }),
            shared,
            recovered: Mutex::new(Some(recovered)),
            writer: Mutex::new(Some(handle)),
            clean_start,
            truncated,
        })))
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.0.dir
    }

    /// Whether this start used the clean-shutdown marker (no full scan).
    pub fn started_clean(&self) -> bool {
        self.0.clean_start
    }

    /// Bytes cut off damaged or torn file tails at this start.
    pub fn truncated_at_start(&self) -> u64 {
        self.0.truncated
    }

    /// Syncs done so far (each covering a batch of records).
    pub fn syncs(&self) -> u64 {
        self.0.shared.syncs.load(Ordering::Relaxed)
    }

    /// Times the writer lent its picture to readers (see [`Shared::lends`]).
    #[cfg(test)]
    pub(crate) fn lends(&self) -> u64 {
        self.0.shared.lends.load(Ordering::Relaxed)
    }

    /// What the store holds, once the writer has handled every earlier call.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Stats(tx))?;
        rx.recv().map_err(|_| closed())
    }

    /// Writes and syncs everything, leaves the clean-shutdown marker and stops the writer.
    /// Later calls fail their publishes; closing again does nothing.
    pub fn close(&self) -> Result<(), StoreError> {
        self.0.close()
    }

    fn send(&self, cmd: Cmd) -> Result<(), StoreError> {
        self.0.send(cmd)
    }
}

impl Inner {
    fn send(&self, cmd: Cmd) -> Result<(), StoreError> {
        match &lock(&self.caller).tx {
            Some(tx) => {
                let deletes = matches!(cmd, Cmd::Meta(MetaOp::QueueDeleted(_)));
                tx.send(cmd).map_err(|_| closed())?;
                let sent = self.shared.sent.fetch_add(1, Ordering::Release) + 1;
                if deletes {
                    self.shared.deleted_at.fetch_max(sent, Ordering::Release);
                }
                Ok(())
            }
            None => Err(closed()),
        }
    }

    fn close(&self) -> Result<(), StoreError> {
        let Some(tx) = lock(&self.caller).tx.take() else {
            return Ok(());
        };
        let (reply, done) = mpsc::channel();
        let sent = tx.send(Cmd::Close(reply)).is_ok();
        drop(tx);
        let result = if sent {
            done.recv().unwrap_or_else(|_| Err(closed()))
        } else {
            Err(closed())
        };
        if let Some(handle) = lock(&self.writer).take() {
            let _ = handle.join();
        }
        result
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn failed_now(detail: String) -> Durability {
    Durability::refused(StoreError::Failed { detail })
}

impl MessageStore for DiskStore {
    fn keeps_messages(&self) -> bool {
        true
    }

    fn recover(&self) -> Result<Recovered, StoreError> {
        lock(&self.0.recovered)
            .take()
            .ok_or_else(|| StoreError::Failed {
                detail: "the store was recovered already (one broker per store)".into(),
            })
    }

    fn exchange_declared(&self, exchange: &ExchangeDef) {
        let _ = self.send(Cmd::Meta(MetaOp::ExchangeDeclared(exchange.clone())));
    }

    fn exchange_deleted(&self, name: &str) {
        let _ = self.send(Cmd::Meta(MetaOp::ExchangeDeleted(name.to_owned())));
    }

    fn queue_declared(&self, queue: &QueueDef) {
        let _ = self.send(Cmd::Meta(MetaOp::QueueDeclared(0, queue.clone())));
    }

    fn queue_deleted(&self, name: &str) {
        let _ = self.send(Cmd::Meta(MetaOp::QueueDeleted(name.to_owned())));
    }

    fn binding_added(&self, binding: &BindingDef) {
        let _ = self.send(Cmd::Meta(MetaOp::BindingAdded(binding.clone())));
    }

    fn binding_removed(&self, binding: &BindingDef) {
        let _ = self.send(Cmd::Meta(MetaOp::BindingRemoved(binding.clone())));
    }

    fn policy_set(&self, policy: &PolicyDef) {
        let _ = self.send(Cmd::Meta(MetaOp::PolicySet(policy.clone())));
    }

    fn policy_cleared(&self, name: &str) {
        let _ = self.send(Cmd::Meta(MetaOp::PolicyCleared(name.to_owned())));
    }

    fn operator_policy_set(&self, policy: &PolicyDef) {
        let _ = self.send(Cmd::Meta(MetaOp::OperatorPolicySet(policy.clone())));
    }

    fn operator_policy_cleared(&self, name: &str) {
        let _ = self.send(Cmd::Meta(MetaOp::OperatorPolicyCleared(name.to_owned())));
    }

    fn enqueued(&self, message: &StoredMessage<'_>) -> Durability {
        if let Some(detail) = self.0.shared.failure() {
            return failed_now(detail);
        }
        let (waiter, durability) = match self.0.mode {
            SyncMode::Sync => {
                let (tx, rx) = oneshot::channel();
                let durability =
                    Durability::pending(async move { rx.await.unwrap_or_else(|_| Err(closed())) });
                (Some(tx), durability)
            }
            SyncMode::Interval(_) | SyncMode::None => (None, Durability::Durable),
        };
        let mut caller = lock(&self.0.caller);
        let cmd = if caller.last_publication == Some(message.publication) {
            Cmd::Ref {
                id: caller.current,
                queue: message.queue.to_owned(),
                seq: message.seq,
                waiter,
            }
        } else {
            let published = message.published();
            let mut out = codec::out_for(&published);
            codec::put_published(&mut out, &published);
            if out.0.len() > frame::MAX_PAYLOAD - 1024 {
                return failed_now(format!(
                    "a message of {} bytes is over the store's record limit",
                    out.0.len()
                ));
            }
            let id = caller.next_id;
            if id > crate::index::MAX_ID {
                // Only a damaged data directory names ids this high (2^61 messages).
                return failed_now("no message id left in the store's range".into());
            }
            caller.next_id += 1;
            caller.current = id;
            caller.last_publication = Some(message.publication);
            Cmd::Message {
                id,
                queue: message.queue.to_owned(),
                seq: message.seq,
                body: out.0,
                waiter,
            }
        };
        match &caller.tx {
            Some(tx) if tx.send(cmd).is_ok() => {
                self.0.shared.sent.fetch_add(1, Ordering::Release);
                durability
            }
            _ => failed_now("the message store is closed".into()),
        }
    }

    fn delivered(&self, queue: &str, seq: u64) {
        let _ = self.send(Cmd::Delivered {
            queue: queue.to_owned(),
            seq,
        });
    }

    fn removed(&self, queue: &str, seq: u64, why: Removal) {
        let _ = self.send(Cmd::Removed {
            queue: queue.to_owned(),
            seq,
            replaced: matches!(why, Removal::DeadLettered | Removal::Moved),
        });
    }

    fn pages(&self) -> bool {
        true
    }

    fn failure(&self) -> Option<String> {
        self.0.shared.failure()
    }

    fn read(&self, queue: &str, seqs: &[u64]) -> Result<Vec<Published>, StoreError> {
        read::read(self.0.fs.as_ref(), &self.0.dir, &self.0.shared, queue, seqs)
    }
}
