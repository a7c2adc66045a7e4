//! The writer thread: the only code that writes the store's files. The trait's calls hand it
//! commands through a channel; it takes every command waiting, appends their records, syncs
//! once for all of them (group commit), then releases their durability points, and between
//! batches deletes dead segments and compacts sparse ones.

use std::collections::{BTreeSet, HashMap};

use rustc_hash::FxHashSet as HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use stream_engine::StoreError;
use tokio::sync::oneshot;

use crate::clean;
use crate::config::{StoreConfig, SyncMode};
use crate::frame;
use crate::fs::{FileSystem, StoreFile};
use crate::index::{Index, RefLoc};
use crate::layout::{self, AckKind, Key, RefEntry, SegRecord};
use crate::meta::{Meta, MetaOp};
use crate::recovery::Rebuilt;

/// Resolved once the record it waits for is synced.
pub(crate) type Waiter = oneshot::Sender<Result<(), StoreError>>;

/// What the trait's calls hand the writer.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// A change of the durable declarations (a queue's incarnation is assigned here).
    Meta(MetaOp),
    /// A message, first queue of its publication: `body` is the encoded `Published`.
    Message {
        id: u64,
        queue: String,
        seq: u64,
        body: Vec<u8>,
        waiter: Option<Waiter>,
    },
    /// Another queue of message `id`'s publication.
    Ref {
        id: u64,
        queue: String,
        seq: u64,
        waiter: Option<Waiter>,
    },
    Delivered {
        queue: String,
        seq: u64,
    },
    Removed {
        queue: String,
        seq: u64,
        /// The broker stored a copy first (a dead letter, a re-drive): the removal must not
        /// reach the disk before that copy.
        replaced: bool,
    },
    /// What the store holds now (answered in order with the other commands).
    Stats(Sender<StoreStats>),
    /// Flush, sync, write the clean-shutdown marker and stop.
    Close(Sender<Result<(), StoreError>>),
}

/// Figures about a store's files, for tests and measurements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Segment files on disk.
    pub segments: usize,
    /// Their total size in bytes.
    pub segment_bytes: u64,
    /// Messages with at least one live reference.
    pub live_messages: usize,
    /// Live references (a message in each durable queue holding it).
    pub live_references: usize,
    /// Segments compacted so far.
    pub compactions: u64,
    /// Segments deleted so far.
    pub deleted_segments: u64,
}

/// The writer's index and metadata, lent to readers of paged messages between batches.
#[derive(Debug, Default)]
pub(crate) struct Picture {
    /// `None` while the writer works on it.
    pub index: Option<Index>,
    pub meta: Option<Meta>,
    /// Commands the writer had handled when it lent them (and written to the files, unless
    /// it failed: see `unwritten`).
    pub handled: u64,
    /// Records the index places in the active segment that are not in its file: once the
    /// writer has failed, what it could not append, and what it was sent afterwards.
    pub unwritten: Option<Unwritten>,
}

/// The tail of the active segment that a failed writer keeps in memory: the broker may have
/// paged the messages already (it enqueued them before the store failed), and it reads them
/// back from here.
#[derive(Debug, Default)]
pub(crate) struct Unwritten {
    /// The active segment.
    pub seg: u32,
    /// The offset in it of `bytes`' first byte.
    pub from: u64,
    pub bytes: Vec<u8>,
}

impl Unwritten {
    /// Whether the record at `offset` of segment `seg` is here rather than in the files.
    pub fn holds(&self, seg: u32, offset: u64) -> bool {
        seg == self.seg && offset >= self.from
    }
}

/// State the writer shares with the trait's calls.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Where every live record is: the writer takes it for each batch and gives it back
    /// once the batch's records are in the files (before the sync), so a reader that finds a
    /// location finds the bytes there.
    pub picture: Mutex<Picture>,
    /// Signalled whenever the writer gives the picture back.
    pub picture_back: Condvar,
    /// Commands sent to the writer (a reader waits until the writer has handled as many).
    pub sent: AtomicU64,
    /// The count of commands sent up to the latest queue deletion. A reader trusts no
    /// location before the writer has handled as many: until then its picture may still
    /// hold the deleted queue, whose messages have the same positions as those of a queue
    /// declared since under the same name.
    pub deleted_at: AtomicU64,
    /// Why the store stopped keeping messages, once a write or sync failed.
    pub failed: Mutex<Option<String>>,
    /// Successful syncs of a batch.
    pub syncs: AtomicU64,
    /// Batches written.
    pub batches: AtomicU64,
    /// Times the writer lent its picture (after every batch, and every sync deadline that
    /// woke it): how a test tells that a writer with nothing to do sleeps.
    pub lends: AtomicU64,
}

impl Shared {
    pub fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// How large a failed writer's active segment may grow, what it holds in memory included
/// (see [`Unwritten`]): every offset stays within the index's 32 bits.
const UNWRITTEN_LIMIT: u64 = 3 << 30;

/// More than a segment record and its frame take beyond the body and the queue's name.
const RECORD_OVERHEAD: usize = 64;

fn failed(detail: &str) -> StoreError {
    StoreError::Failed {
        detail: detail.to_owned(),
    }
}

#[derive(Debug)]
pub(crate) struct Writer {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    config: StoreConfig,
    shared: Arc<Shared>,
    meta: Meta,
    meta_file: Box<dyn StoreFile>,
    meta_seq: u64,
    meta_records: usize,
    meta_buf: Vec<u8>,
    index: Index,
    active: u32,
    active_file: Box<dyn StoreFile>,
    seg_buf: Vec<u8>,
    ack_files: HashMap<u32, Box<dyn StoreFile>>,
    ack_bufs: HashMap<u32, Vec<u8>>,
    /// Files appended to since their last sync (segments, ack files) and the metadata log.
    dirty_segs: BTreeSet<u32>,
    dirty_acks: BTreeSet<u32>,
    dirty_meta: bool,
    dirty_dir: bool,
    waiters: Vec<Waiter>,
    /// In `interval` mode, the removals a copy replaced (see [`Cmd::Removed`]), with their
    /// home segments: they wait for the next sync, which syncs their copies before it writes
    /// them. Every other acknowledgement is written with its batch.
    held: Vec<(u32, Key)>,
    /// The last message's id and body: a later queue of its publication may refer to it
    /// after the first queue already dropped it.
    last_message: Option<(u64, Vec<u8>)>,
    max_id: u64,
    failure: Option<String>,
    /// Commands received so far.
    handled: u64,
    next_sync: Option<Instant>,
    compactions: u64,
    deleted: u64,
}

impl Writer {
    /// Sets up the writer on what recovery rebuilt: a fresh active segment.
    pub fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        config: StoreConfig,
        shared: Arc<Shared>,
        rebuilt: Rebuilt,
    ) -> Result<Writer, StoreError> {
        let meta_file = fs.open(&dir.join(layout::META))?;
        let active = rebuilt.next_segment;
        let active_file = fs.open(&layout::segment_path(&dir, active))?;
        // New files are there after a crash only once their directory is synced: in a fresh
        // data directory that is the metadata log (and the segments directory) too.
        fs.sync_dir(&dir.join(layout::SEGMENTS))?;
        fs.sync_dir(&dir)?;
        let mut index = rebuilt.index;
        index.segs.insert(active, Default::default());
        let acks = rebuilt.acks;
        let stale = rebuilt.stale;
        let mut writer = Writer {
            fs,
            dir,
            config,
            shared,
            meta: rebuilt.meta,
            meta_file,
            meta_seq: rebuilt.meta_seq,
            meta_records: rebuilt.meta_records,
            meta_buf: Vec::new(),
            index,
            active,
            active_file,
            seg_buf: Vec::new(),
            ack_files: HashMap::new(),
            ack_bufs: HashMap::new(),
            dirty_segs: BTreeSet::new(),
            dirty_acks: BTreeSet::new(),
            dirty_meta: false,
            dirty_dir: false,
            waiters: Vec::new(),
            held: Vec::new(),
            last_message: None,
            max_id: rebuilt.next_id.saturating_sub(1),
            failure: None,
            handled: 0,
            next_sync: None,
            compactions: 0,
            deleted: 0,
        };
        let floor = rebuilt.incarnation_floor;
        if floor > writer.meta.next_incarnation {
            writer.meta_op(MetaOp::NextIncarnation(floor));
        }
        if !acks.is_empty() || writer.dirty_meta {
            for (home, kind, key) in &acks {
                writer.ack(*home, *kind, key);
            }
            writer.write_and_sync()?;
        }
        for seg in stale {
            if seg != writer.active && writer.index.segs.contains_key(&seg) {
                writer.compact(seg)?;
            }
        }
        writer.maintain()?;
        writer.lend();
        Ok(writer)
    }

    /// Lends the index and metadata to readers (between batches, and before a sync).
    fn lend(&mut self) {
        let mut p = self
            .shared
            .picture
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Empty unless the writer failed: each batch appends what it buffered.
        p.unwritten = (!self.seg_buf.is_empty()).then(|| {
            let bytes = std::mem::take(&mut self.seg_buf);
            let end = self.index.segs.get(&self.active).map_or(0, |s| s.bytes);
            Unwritten {
                seg: self.active,
                from: end - bytes.len() as u64,
                bytes,
            }
        });
        p.index = Some(std::mem::take(&mut self.index));
        p.meta = Some(std::mem::take(&mut self.meta));
        p.handled = self.handled;
        drop(p);
        self.shared.lends.fetch_add(1, Ordering::Relaxed);
        self.shared.picture_back.notify_all();
    }

    /// Takes the index and metadata back from readers.
    fn take_back(&mut self) {
        let mut p = self
            .shared
            .picture
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(index) = p.index.take() {
            self.index = index;
        }
        if let Some(meta) = p.meta.take() {
            self.meta = meta;
        }
        if let Some(unwritten) = p.unwritten.take() {
            self.seg_buf = unwritten.bytes;
        }
    }

    /// Closes cleanly with the index and metadata at hand, then lends them for good.
    fn close_lent(&mut self) -> Result<(), StoreError> {
        self.take_back();
        let result = self.close();
        self.lend();
        result
    }

    /// Runs until closed (or until every sender is gone).
    pub fn run(mut self, rx: Receiver<Cmd>) {
        loop {
            let first = match self.next_sync {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(cmd) => Some(cmd),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        let _ = self.close_lent();
                        return;
                    }
                },
                None => match rx.recv() {
                    Ok(cmd) => Some(cmd),
                    Err(_) => {
                        let _ = self.close_lent();
                        return;
                    }
                },
            };
            self.take_back();
            let mut next = first;
            let mut taken = 0;
            while let Some(cmd) = next {
                self.handled += 1;
                match cmd {
                    Cmd::Close(reply) => {
                        let result = self.close();
                        self.lend();
                        let _ = reply.send(result);
                        return;
                    }
                    Cmd::Stats(reply) => {
                        self.end_batch();
                        let _ = reply.send(self.stats());
                    }
                    other => self.handle(other),
                }
                taken += 1;
                next = if taken < self.config.max_batch {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            self.end_batch();
            self.lend();
        }
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            segments: self.index.segs.len(),
            segment_bytes: self.index.segment_bytes(),
            live_messages: self.index.message_count(),
            live_references: self.index.ref_count(),
            compactions: self.compactions,
            deleted_segments: self.deleted,
        }
    }

    fn key(&self, queue: &str, seq: u64) -> Option<Key> {
        Some(Key {
            queue: Arc::from(queue),
            incarnation: self.meta.incarnation(queue)?,
            seq,
        })
    }

    fn handle(&mut self, cmd: Cmd) {
        // A failed writer writes nothing more, but readers of paged messages still look in
        // the index: a message the broker enqueued before it learned of the failure is kept
        // in memory (the broker may have paged it: that is its only copy), and a removal or
        // a queue deleted (or declared again) leaves the index all the same.
        let failed = self.failure.is_some();
        match cmd {
            Cmd::Meta(op) if failed => {
                self.apply_meta(op);
            }
            Cmd::Meta(op) => self.meta_op(op),
            Cmd::Message {
                id,
                queue,
                seq,
                body,
                waiter,
            } => {
                self.message(id, &queue, seq, &body, waiter);
                self.last_message = Some((id, body));
            }
            Cmd::Ref {
                id,
                queue,
                seq,
                waiter,
            } => self.reference(id, &queue, seq, waiter),
            Cmd::Delivered { queue, seq } => {
                let Some(key) = self.key(&queue, seq).filter(|_| !failed) else {
                    return;
                };
                if let Some(home) = self.index.set_delivered(&key) {
                    self.ack(home, AckKind::Delivered, &key);
                }
            }
            Cmd::Removed {
                queue,
                seq,
                replaced,
            } => {
                let Some(key) = self.key(&queue, seq) else {
                    return;
                };
                let Some(home) = self.index.remove_ref(&key) else {
                    return;
                };
                if failed {
                    return;
                }
                if replaced && matches!(self.config.mode, SyncMode::Interval(_)) {
                    self.held.push((home, key));
                } else {
                    self.ack(home, AckKind::Removed, &key);
                }
            }
            Cmd::Stats(_) | Cmd::Close(_) => {}
        }
    }

    fn fail_waiter(&self, waiter: Option<Waiter>) {
        if let Some(w) = waiter {
            let detail = self.failure.as_deref().unwrap_or("the store failed");
            let _ = w.send(Err(failed(detail)));
        }
    }

    fn meta_op(&mut self, op: MetaOp) {
        if matches!(op, MetaOp::QueueDeclared(..))
            && self.meta.next_incarnation >= crate::meta::MAX_INCARNATION
        {
            self.fail(&failed("no queue incarnation left to hand out"));
            return;
        }
        let op = self.apply_meta(op);
        self.meta_seq += 1;
        self.meta_records += 1;
        frame::push(&mut self.meta_buf, self.meta_seq, &op.encode());
        self.dirty_meta = true;
    }

    /// Applies a change of the declarations to the metadata and the index (a declared queue
    /// gets its incarnation here); returns it as the log records it.
    fn apply_meta(&mut self, op: MetaOp) -> MetaOp {
        let op = match op {
            MetaOp::QueueDeclared(_, q) => MetaOp::QueueDeclared(self.meta.next_incarnation, q),
            MetaOp::QueueDeleted(name) => {
                self.index.remove_queue(&name);
                MetaOp::QueueDeleted(name)
            }
            other => other,
        };
        self.meta.apply(&op);
        op
    }

    /// Appends a segment record to the active segment; returns its offset and length.
    fn push_segment(&mut self, payload: &[u8]) -> (u64, u32) {
        let stat = self.index.segs.entry(self.active).or_default();
        stat.seq += 1;
        let offset = stat.bytes;
        let before = self.seg_buf.len();
        frame::push(&mut self.seg_buf, stat.seq, payload);
        let len = (self.seg_buf.len() - before) as u32;
        stat.bytes += u64::from(len);
        self.dirty_segs.insert(self.active);
        (offset, len)
    }

    /// Starts a new active segment once the current one is full.
    fn roll_if_full(&mut self) -> Result<(), StoreError> {
        let bytes = self.index.segs.get(&self.active).map_or(0, |s| s.bytes);
        if bytes < self.config.segment_bytes {
            return Ok(());
        }
        self.active_file.append(&self.seg_buf)?;
        self.seg_buf.clear();
        if self.config.mode != SyncMode::None {
            self.active_file.sync()?;
            self.dirty_segs.remove(&self.active);
        }
        // In `none` mode it stays dirty, for the clean close to sync.
        let next = self.active + 1;
        self.active_file = self.fs.open(&layout::segment_path(&self.dir, next))?;
        self.active = next;
        self.index.segs.insert(next, Default::default());
        self.dirty_dir = true;
        Ok(())
    }

    /// The store stops keeping messages: it refuses every later one, and says why (once).
    fn fail(&mut self, e: &StoreError) {
        if self.failure.is_some() {
            return;
        }
        let detail = match source_text(e) {
            cause if cause.is_empty() => e.to_string(),
            cause => format!("{e}: {cause}"),
        };
        tracing::error!(
            dir = %self.dir.display(),
            error = %detail,
            mode = ?self.config.mode,
            "message store failed: persistent messages in durable queues are refused from now on (541 INTERNAL_ERROR); in sync mode what it confirmed is on disk, in interval and none modes what it had not written is lost at the next start; restart once the cause is fixed"
        );
        *self.shared.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(detail.clone());
        self.failure = Some(detail);
        // Nothing is synced any more: the writer sleeps until the next command.
        self.next_sync = None;
    }

    fn message(&mut self, id: u64, queue: &str, seq: u64, body: &[u8], waiter: Option<Waiter>) {
        let Some(key) = self.key(queue, seq) else {
            let _ =
                waiter.map(|w| w.send(Err(failed("message for a queue the store does not know"))));
            return;
        };
        if !self.make_room(body.len() + queue.len() + RECORD_OVERHEAD) {
            self.fail_waiter(waiter);
            return;
        }
        self.max_id = self.max_id.max(id);
        let entry = RefEntry {
            key: key.clone(),
            delivered: false,
        };
        let (offset, len) = self.push_segment(&layout::encode_message(id, &[entry], body));
        self.index.add_message(id, self.active, offset, len, 1);
        self.index.add_ref(
            key,
            RefLoc {
                id,
                home: self.active,
                delivered: false,
                record: None,
            },
        );
        self.await_write(waiter);
    }

    fn reference(&mut self, id: u64, queue: &str, seq: u64, waiter: Option<Waiter>) {
        if self.index.message(id).is_none() {
            // Its first queue dropped it already: write it again for this one.
            match self.last_message.take() {
                Some((last, body)) if last == id => {
                    self.message(id, queue, seq, &body, waiter);
                    self.last_message = Some((last, body));
                }
                other => {
                    self.last_message = other;
                    let _ = waiter.map(|w| w.send(Err(failed("reference to an unknown message"))));
                }
            }
            return;
        }
        let Some(key) = self.key(queue, seq) else {
            let _ =
                waiter.map(|w| w.send(Err(failed("message for a queue the store does not know"))));
            return;
        };
        if !self.make_room(queue.len() + RECORD_OVERHEAD) {
            self.fail_waiter(waiter);
            return;
        }
        let entry = RefEntry {
            key: key.clone(),
            delivered: false,
        };
        let (offset, len) = self.push_segment(&layout::encode_ref(id, &entry));
        self.index.add_message_ref(id);
        self.index.add_ref(
            key,
            RefLoc {
                id,
                home: self.active,
                delivered: false,
                record: Some((offset, len)),
            },
        );
        self.await_write(waiter);
    }

    /// Whether the next record, of about `len` bytes, can go into the active segment, which
    /// is rolled over first when full. Once the writer has failed nothing is rolled (nor
    /// written): records stay in the active segment's unwritten tail, kept in memory for
    /// readers (see [`Unwritten`]), while the segment stays within [`UNWRITTEN_LIMIT`].
    fn make_room(&mut self, len: usize) -> bool {
        if self.failure.is_none()
            && let Err(e) = self.roll_if_full()
        {
            self.fail(&e);
        }
        self.failure.is_none()
            || self.index.segs.get(&self.active).map_or(0, |s| s.bytes) + len as u64
                <= UNWRITTEN_LIMIT
    }

    /// Has `waiter` told when the batch's records are written (at once that they will not
    /// be, once the writer has failed).
    fn await_write(&mut self, waiter: Option<Waiter>) {
        if self.failure.is_some() {
            self.fail_waiter(waiter);
        } else {
            self.waiters.extend(waiter);
        }
    }

    fn ack(&mut self, home: u32, kind: AckKind, key: &Key) {
        let Some(stat) = self.index.segs.get_mut(&home) else {
            return;
        };
        stat.ack_seq += 1;
        let buf = self.ack_bufs.entry(home).or_default();
        frame::push(buf, stat.ack_seq, &layout::encode_ack(kind, key));
        self.dirty_acks.insert(home);
    }

    /// Writes what the batch buffered, syncs per the mode, releases the waiters, then
    /// deletes and compacts segments (after every batch in `none` mode, otherwise only after
    /// a synced one).
    fn end_batch(&mut self) {
        if self.failure.is_none() {
            let sync = match self.config.mode {
                SyncMode::Sync => true,
                SyncMode::None => false,
                SyncMode::Interval(every) => {
                    let now = Instant::now();
                    match self.next_sync {
                        Some(at) if now >= at => true,
                        Some(_) => false,
                        None => {
                            self.next_sync = Some(now + every);
                            false
                        }
                    }
                }
            };
            let written = if sync {
                self.release_held();
                self.write_records().and_then(|()| {
                    // Readers of paged messages need not wait for the sync: the records are
                    // in the files.
                    self.lend();
                    let synced = self.sync_then_acks();
                    self.take_back();
                    synced
                })
            } else {
                // In `interval` mode the removals a copy replaced wait for the sync (see
                // `held`); nothing else depends on unsynced data.
                self.write_records().and_then(|()| self.write_acks())
            };
            match written {
                Ok(()) => {
                    for w in self.waiters.drain(..) {
                        let _ = w.send(Ok(()));
                    }
                    // Deleting a segment makes its removals final: only once what replaced
                    // them (a dead letter's copy) is synced.
                    if sync || self.config.mode == SyncMode::None {
                        if let Err(e) = self.maintain() {
                            self.fail(&e);
                        }
                    }
                }
                Err(e) => self.fail(&e),
            }
            self.shared.batches.fetch_add(1, Ordering::Relaxed);
        }
        if self.failure.is_some() {
            for w in std::mem::take(&mut self.waiters) {
                self.fail_waiter(Some(w));
            }
        }
    }

    /// Appends the buffered message and metadata records to their files.
    fn write_records(&mut self) -> Result<(), StoreError> {
        if !self.seg_buf.is_empty() {
            self.active_file.append(&self.seg_buf)?;
            self.seg_buf.clear();
        }
        if !self.meta_buf.is_empty() {
            self.meta_file.append(&self.meta_buf)?;
            self.meta_buf.clear();
        }
        Ok(())
    }

    /// Appends the buffered acknowledgements to their segments' ack files.
    fn write_acks(&mut self) -> Result<(), StoreError> {
        for (seg, buf) in self.ack_bufs.iter_mut() {
            if buf.is_empty() {
                continue;
            }
            let file = match self.ack_files.entry(*seg) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    self.dirty_dir = true;
                    v.insert(self.fs.open(&layout::ack_path(&self.dir, *seg))?)
                }
            };
            file.append(buf)?;
            buf.clear();
        }
        Ok(())
    }

    /// Writes and syncs everything buffered (the records are already written when the batch
    /// lends its index out).
    fn write_and_sync(&mut self) -> Result<(), StoreError> {
        self.release_held();
        self.write_records()?;
        self.sync_then_acks()
    }

    /// Buffers the removals `held` since the last sync with the other acknowledgements, for
    /// the sync about to run to write after the records (with the index at hand: not while
    /// it is lent out).
    fn release_held(&mut self) {
        for (home, key) in std::mem::take(&mut self.held) {
            self.ack(home, AckKind::Removed, &key);
        }
    }

    /// Syncs the written records, then writes and syncs the acknowledgements (with the
    /// removals `held` since the last sync). A removal in an ack file may be what a record
    /// of the same batch replaces (a dead letter's copy, perhaps into a queue declared in
    /// that batch, perhaps in a segment created in it), and a disk may write unsynced data
    /// in any order: so the acknowledgements reach the ack files only once the metadata log,
    /// the active segment and the segments directory (new files' entries) are synced, and a
    /// crash can never keep a removal without the copy.
    fn sync_then_acks(&mut self) -> Result<(), StoreError> {
        let any = !self.dirty_segs.is_empty()
            || !self.dirty_acks.is_empty()
            || self.dirty_meta
            || self.dirty_dir;
        if std::mem::take(&mut self.dirty_meta) {
            self.meta_file.sync()?;
        }
        for seg in std::mem::take(&mut self.dirty_segs) {
            if seg == self.active {
                self.active_file.sync()?;
            } else {
                // A segment `none` mode rolled without a sync (only a clean close gets here).
                self.fs
                    .open(&layout::segment_path(&self.dir, seg))?
                    .sync()?;
            }
        }
        if std::mem::take(&mut self.dirty_dir) {
            self.fs.sync_dir(&self.dir.join(layout::SEGMENTS))?;
        }
        self.write_acks()?;
        if std::mem::take(&mut self.dirty_dir) {
            // Ack files opened just now.
            self.fs.sync_dir(&self.dir.join(layout::SEGMENTS))?;
        }
        for seg in std::mem::take(&mut self.dirty_acks) {
            if let Some(f) = self.ack_files.get_mut(&seg) {
                f.sync()?;
            }
        }
        if let SyncMode::Interval(_) = self.config.mode {
            self.next_sync = None;
        }
        if any {
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Deletes segments with nothing live, compacts one sparse segment, and rewrites the
    /// metadata log once it is mostly history.
    fn maintain(&mut self) -> Result<(), StoreError> {
        self.delete_dead()?;
        if let Some(seg) = self.index.sparse_segment(self.active) {
            self.compact(seg)?;
            self.delete_dead()?;
        }
        if self.meta_records > 2 * self.meta.live_records() + 256 {
            self.rewrite_meta()?;
        }
        Ok(())
    }

    fn delete_dead(&mut self) -> Result<(), StoreError> {
        let dead = self.index.dead_segments(self.active);
        if dead.is_empty() {
            return Ok(());
        }
        for seg in dead {
            self.ack_files.remove(&seg);
            self.ack_bufs.remove(&seg);
            self.dirty_acks.remove(&seg);
            self.dirty_segs.remove(&seg);
            self.fs.delete(&layout::segment_path(&self.dir, seg))?;
            self.fs.delete(&layout::ack_path(&self.dir, seg))?;
            self.index.forget_segment(seg);
            self.deleted += 1;
        }
        if self.config.mode != SyncMode::None {
            self.fs.sync_dir(&self.dir.join(layout::SEGMENTS))?;
        } else {
            // For the clean close to sync.
            self.dirty_dir = true;
        }
        Ok(())
    }

    /// Copies a segment's live records into the active segment, syncs them, and leaves the
    /// old segment dead (deleted next).
    fn compact(&mut self, seg: u32) -> Result<(), StoreError> {
        let path = layout::segment_path(&self.dir, seg);
        let data = self.fs.read(&path)?.unwrap_or_default();
        let names = &mut crate::codec::Interner::default();
        // The segment's live message records: those the index places at their offset (a
        // dead copy of a message rewritten elsewhere has the same id, not the same place).
        let mut live = Vec::new();
        for f in frame::scan(&data).frames {
            let Ok(SegRecord::Message { id, refs, body }) =
                layout::decode_segment(f.payload, names)
            else {
                continue;
            };
            if self
                .index
                .message(id)
                .is_some_and(|m| m.seg == seg && u64::from(m.offset) == f.offset)
            {
                live.push((id, refs, body));
            }
        }
        let expected = self.index.segs.get(&seg).map_or(0, |s| s.live);
        let records = self.index.ref_records_in.get(&seg).map_or(0, HashSet::len);
        if (live.len() + records) as u64 != expected {
            return Err(StoreError::Corrupt {
                detail: format!(
                    "segment {seg} holds {expected} live records but {} could be read for its compaction",
                    live.len() + records
                ),
            });
        }
        let ids: HashSet<u64> = live.iter().map(|(id, _, _)| *id).collect();
        let mut own = self.index.own_refs_of(&ids);
        for (id, listed, body) in live {
            // Its live references: those its record lists that are still inline, and those
            // with records of their own (which the new record will list).
            let mut keys: Vec<Key> = listed
                .into_iter()
                .map(|r| r.key)
                .filter(|k| self.index.is_inline_ref(k, id))
                .collect();
            keys.extend(own.remove(&id).unwrap_or_default());
            keys.sort_by(|a, b| (&a.queue, a.seq).cmp(&(&b.queue, b.seq)));
            keys.dedup();
            let refs: Vec<RefEntry> = keys
                .iter()
                .map(|k| RefEntry {
                    key: k.clone(),
                    delivered: self.index.get_ref(k).is_some_and(|r| r.delivered),
                })
                .collect();
            self.roll_if_full()?;
            let (offset, len) = self.push_segment(&layout::encode_message(id, &refs, body));
            self.index.move_message(id, &keys, self.active, offset, len);
        }
        let keys: Vec<Key> = self
            .index
            .ref_records_in
            .get(&seg)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        for key in keys {
            let Some(loc) = self.index.get_ref(&key) else {
                continue;
            };
            self.roll_if_full()?;
            let entry = RefEntry {
                key: key.clone(),
                delivered: loc.delivered,
            };
            let (offset, len) = self.push_segment(&layout::encode_ref(loc.id, &entry));
            self.index.add_ref(
                key,
                RefLoc {
                    home: self.active,
                    record: Some((offset, len)),
                    ..loc
                },
            );
        }
        self.active_file.append(&self.seg_buf)?;
        self.seg_buf.clear();
        if self.config.mode != SyncMode::None {
            self.active_file.sync()?;
            self.dirty_segs.remove(&self.active);
        }
        self.compactions += 1;
        Ok(())
    }

    fn rewrite_meta(&mut self) -> Result<(), StoreError> {
        let tmp = self.dir.join(layout::META_TMP);
        self.fs.delete(&tmp)?;
        let mut file = self.fs.open(&tmp)?;
        let mut buf = Vec::new();
        let ops = self.meta.snapshot();
        for (i, op) in ops.iter().enumerate() {
            frame::push(&mut buf, i as u64 + 1, &op.encode());
        }
        file.append(&buf)?;
        file.sync()?;
        let path = self.dir.join(layout::META);
        self.fs.rename(&tmp, &path)?;
        self.fs.sync_dir(&self.dir)?;
        self.meta_file = self.fs.open(&path)?;
        self.meta_seq = ops.len() as u64;
        self.meta_records = ops.len();
        self.dirty_meta = false;
        Ok(())
    }

    /// Writes and syncs everything, then the clean-shutdown marker.
    fn close(&mut self) -> Result<(), StoreError> {
        if let Some(f) = &self.failure {
            return Err(failed(f));
        }
        self.dirty_segs.insert(self.active);
        self.dirty_meta = true;
        self.write_and_sync()?;
        for w in self.waiters.drain(..) {
            let _ = w.send(Ok(()));
        }
        let marker = clean::encode(&self.index, self.max_id + 1);
        let tmp = self.dir.join("clean.tmp");
        self.fs.delete(&tmp)?;
        let mut file = self.fs.open(&tmp)?;
        file.append(&marker)?;
        file.sync()?;
        self.fs.rename(&tmp, &self.dir.join(layout::CLEAN))?;
        self.fs.sync_dir(&self.dir)?;
        Ok(())
    }
}

/// The innermost cause of a store error, for failure texts.
fn source_text(e: &StoreError) -> String {
    let mut text = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = s.to_string();
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use stream_engine::{FieldTable, MessageStore, QueueDef, QueueOptions};

    use crate::fs::FileSystem;
    use crate::meta::{MAX_INCARNATION, MetaOp};
    use crate::{DiskStore, FaultFs, StoreConfig, frame, layout};

    /// A metadata log (damaged, or 2^62 declarations old) whose next incarnation is the last:
    /// a declaration fails the store rather than write a record the next start could not
    /// read, and the store still opens afterwards.
    #[test]
    fn a_declaration_past_the_last_incarnation_fails_the_store_rather_than_write_it() {
        let fs = FaultFs::new();
        let dir = Path::new("/exhausted");
        fs.create_dir_all(&dir.join(layout::SEGMENTS)).unwrap();
        let mut log = Vec::new();
        frame::push(
            &mut log,
            1,
            &MetaOp::NextIncarnation(MAX_INCARNATION).encode(),
        );
        fs.open(&dir.join(layout::META))
            .unwrap()
            .append(&log)
            .unwrap();
        let open = || DiskStore::open_with(Arc::new(fs.clone()), dir, StoreConfig::default());
        let store = open().unwrap();
        store.queue_declared(&QueueDef {
            name: "q".to_owned(),
            options: QueueOptions {
                durable: true,
                ..QueueOptions::default()
            },
            arguments: FieldTable::new(),
        });
        assert!(store.close().is_err(), "the store failed");
        drop(store);
        open().unwrap().close().unwrap();
    }

    /// A writer that failed in `interval` mode sleeps until the next command: the sync
    /// deadline set before the failure no longer wakes it (it woke at once, over and over,
    /// keeping a core busy until the process ended).
    #[test]
    fn a_failed_writer_in_interval_mode_sleeps() {
        use stream_engine::{Broker, BrokerConfig, Message, TryPublish};

        // The broker's timer wants a runtime; the test needs no task of its own.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let fs = FaultFs::new();
        let config = StoreConfig {
            mode: crate::SyncMode::Interval(Duration::from_millis(10)),
            ..StoreConfig::default()
        };
        let store =
            DiskStore::open_with(Arc::new(fs.clone()), Path::new("/failed"), config).unwrap();
        let broker: Broker = Broker::with_store(BrokerConfig::default(), store.clone()).unwrap();
        let conn = broker.connect();
        let ch = conn.open_channel().unwrap();
        let durable = QueueOptions {
            durable: true,
            ..QueueOptions::default()
        };
        ch.queue_declare("q", durable, FieldTable::new()).unwrap();
        fs.fail_appends(true);
        let mut m = Message::new("lost");
        m.properties.delivery_mode = Some(2);
        // `interval` mode confirms at once; the writer fails on the batch.
        assert!(matches!(
            ch.try_basic_publish("", "q", Default::default(), m),
            TryPublish::Done(Ok(_))
        ));
        let deadline = Instant::now() + Duration::from_secs(10);
        while MessageStore::failure(&store).is_none() {
            assert!(Instant::now() < deadline, "the store did not fail");
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = store.lends();
        std::thread::sleep(Duration::from_millis(200));
        let woken = store.lends() - before;
        assert!(woken <= 1, "the failed writer woke {woken} times in 200 ms");
    }
}
