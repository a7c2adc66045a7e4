//! A fault-injecting file layer for tests: files in memory, where what was appended but not
//! yet synced, and files created, deleted or renamed since their directory was last synced,
//! are lost (or come back) on a simulated crash, and syncs and appends can be made to fail.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fs::{FileSystem, StoreFile};

#[derive(Debug, Default, Clone)]
struct Content {
    data: Vec<u8>,
    /// How much of `data` a crash keeps.
    synced: usize,
}

/// Files as a POSIX file system keeps them: contents (inodes) apart from the directory
/// entries that name them. A file's data is durable up to its last sync; an entry (a file
/// created, deleted or renamed) only once its directory is synced.
#[derive(Debug, Default)]
struct Files {
    contents: BTreeMap<u64, Content>,
    next_inode: u64,
    /// What the directories hold now.
    names: BTreeMap<PathBuf, u64>,
    /// What they held when each was last synced: what a crash leaves.
    durable: BTreeMap<PathBuf, u64>,
    /// Open handles per inode: a file deleted while open stays writable.
    open: BTreeMap<u64, usize>,
    /// Entries changed since their directory was last synced: what each name now refers to
    /// (`None`: deleted). A directory sync makes its own durable.
    pending: BTreeMap<PathBuf, Option<u64>>,
}

impl Files {
    /// Names `path` (or un-names it), durable once its directory is synced.
    fn set_name(&mut self, path: &Path, inode: Option<u64>) {
        match inode {
            Some(inode) => self.names.insert(path.to_owned(), inode),
            None => self.names.remove(path),
        };
        self.pending.insert(path.to_owned(), inode);
    }

    /// Drops contents nothing refers to (no name, now or after a crash, and no open handle),
    /// once there are enough of them to be worth a pass.
    fn collect_garbage(&mut self) {
        let referenced = self.names.len() + self.durable.len() + self.open.len();
        if self.contents.len() <= 2 * referenced + 64 {
            return;
        }
        let kept: std::collections::HashSet<u64> = self
            .names
            .values()
            .chain(self.durable.values())
            .chain(self.open.keys())
            .copied()
            .collect();
        self.contents.retain(|inode, _| kept.contains(inode));
    }

    fn content(&self, path: &Path) -> Option<&Content> {
        self.contents.get(self.names.get(path)?)
    }

    fn new_inode(&mut self, content: Content) -> u64 {
        let inode = self.next_inode;
        self.next_inode += 1;
        self.contents.insert(inode, content);
        inode
    }
}

#[derive(Debug, Default)]
struct Inner {
    files: Mutex<Files>,
    /// Every sync fails while set.
    fail_syncs: AtomicBool,
    /// Every append fails, writing nothing, while set.
    fail_appends: AtomicBool,
    /// How long each append takes, in microseconds (a slow disk).
    append_delay_us: AtomicU64,
    /// After a crash the old handles refuse everything (the process is gone).
    crashed: AtomicBool,
    syncs: AtomicU64,
    /// Syncs begun (file and directory syncs, failed or not).
    syncs_begun: AtomicU64,
    /// How long each sync takes, in microseconds (a slow disk).
    sync_delay_us: AtomicU64,
}

/// Files in memory with crash and sync-failure injection. Clones share the files.
///
/// As on a real disk, a file's data is durable only up to its last successful
/// [`StoreFile::sync`], and a file created, deleted or renamed is so only once its directory
/// is synced ([`FileSystem::sync_dir`]): a crash before that loses the new file, brings the
/// deleted one back, or undoes the rename. Unsynced data is lost on a [`FaultFs::crash`];
/// [`FaultFs::crash_with_writeback`] keeps it for the files it chooses, as a disk that wrote
/// some dirty pages back before the power went, and [`FaultFs::kill`] keeps everything, as
/// a killed process finds its files. Directories themselves are not modelled: they always
/// exist.
#[derive(Debug, Default, Clone)]
pub struct FaultFs(Arc<Inner>);

impl FaultFs {
    /// An empty file system.
    pub fn new() -> Self {
        FaultFs::default()
    }

    /// Simulates a crash: returns the file system a restarted process would find (the
    /// directories as last synced, every file cut to what was synced); this one, and every
    /// file open on it, fails from now on.
    pub fn crash(&self) -> FaultFs {
        self.crash_with_writeback(|_| false)
    }

    /// A crash after the disk wrote back everything not yet synced of the files whose path
    /// `written_back` chooses (the rest is lost as by [`FaultFs::crash`]); directory entries
    /// are still as last synced.
    pub fn crash_with_writeback(&self, written_back: impl Fn(&Path) -> bool) -> FaultFs {
        self.restart_on(|files| {
            files
                .durable
                .iter()
                .map(|(path, inode)| {
                    let c = &files.contents[inode];
                    let kept = if written_back(path) {
                        c.data.len()
                    } else {
                        c.synced
                    };
                    (path.clone(), c.data[..kept].to_vec())
                })
                .collect()
        })
    }

    /// Simulates the process killed (`kill -9`), the machine still running: the kernel
    /// keeps everything written, synced or not, and every directory entry. Returns the file
    /// system a restarted process would find; this one, and every file open on it, fails
    /// from now on.
    pub fn kill(&self) -> FaultFs {
        self.restart_on(|files| {
            files
                .names
                .iter()
                .map(|(path, inode)| (path.clone(), files.contents[inode].data.clone()))
                .collect()
        })
    }

    /// Ends this file system (every handle fails from now on) and returns a new one holding,
    /// durable, the files `kept` picks from it, with their contents.
    fn restart_on(&self, kept: impl FnOnce(&Files) -> Vec<(PathBuf, Vec<u8>)>) -> FaultFs {
        let held = self.lock();
        self.0.crashed.store(true, Ordering::SeqCst);
        let mut files = Files::default();
        for (path, data) in kept(&held) {
            let synced = data.len();
            let inode = files.new_inode(Content { data, synced });
            files.names.insert(path.clone(), inode);
            files.durable.insert(path, inode);
        }
        FaultFs(Arc::new(Inner {
            files: Mutex::new(files),
            ..Inner::default()
        }))
    }

    /// Makes every sync from now on fail (or succeed again).
    pub fn fail_syncs(&self, fail: bool) {
        self.0.fail_syncs.store(fail, Ordering::SeqCst);
    }

    /// Makes every append from now on fail, writing nothing (or succeed again), as a full
    /// disk does.
    pub fn fail_appends(&self, fail: bool) {
        self.0.fail_appends.store(fail, Ordering::SeqCst);
    }

    /// Makes every append take this long (a slow or stalling disk), failed ones too.
    pub fn set_append_delay(&self, delay: std::time::Duration) {
        self.0
            .append_delay_us
            .store(micros(delay), Ordering::SeqCst);
    }

    /// Makes every sync take this long (as a real disk's does).
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.0.sync_delay_us.store(micros(delay), Ordering::SeqCst);
    }

    /// How many file syncs succeeded.
    pub fn syncs(&self) -> u64 {
        self.0.syncs.load(Ordering::SeqCst)
    }

    /// How many file and directory syncs have begun (so a test can tell that a sync is under
    /// way).
    pub fn syncs_begun(&self) -> u64 {
        self.0.syncs_begun.load(Ordering::SeqCst)
    }

    /// Counts a sync begun, waits out the sync delay, then fails if syncs are made to fail.
    fn sync_point(&self) -> io::Result<()> {
        self.0.syncs_begun.fetch_add(1, Ordering::SeqCst);
        let delay = self.0.sync_delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        if self.0.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected sync failure"));
        }
        Ok(())
    }

    /// A file's whole contents (synced or not).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.lock().content(path).map(|c| c.data.clone())
    }

    /// Replaces a file's contents (a file open on it sees them), as durable, its name too
    /// (to damage it in tests).
    pub fn set_contents(&self, path: &Path, data: Vec<u8>) {
        let synced = data.len();
        let mut files = self.lock();
        let content = Content { data, synced };
        let inode = match files.names.get(path).copied() {
            Some(inode) => {
                files.contents.insert(inode, content);
                inode
            }
            None => files.new_inode(content),
        };
        files.names.insert(path.to_owned(), inode);
        files.durable.insert(path.to_owned(), inode);
        files.pending.remove(path);
    }

    /// The paths of the files directly in `dir`.
    pub fn list_paths(&self, dir: &Path) -> Vec<PathBuf> {
        self.lock()
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect()
    }

    /// The total size of every file under `dir`.
    pub fn size_under(&self, dir: &Path) -> u64 {
        let files = self.lock();
        files
            .names
            .iter()
            .filter(|(p, _)| p.starts_with(dir))
            .map(|(_, inode)| files.contents[inode].data.len() as u64)
            .sum()
    }

    fn lock(&self) -> MutexGuard<'_, Files> {
        self.0.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn alive(&self) -> io::Result<()> {
        if self.0.crashed.load(Ordering::SeqCst) {
            Err(io::Error::other("simulated crash: the process is gone"))
        } else {
            Ok(())
        }
    }
}

/// An open file: its contents, whatever names it (as a file descriptor refers to an inode).
#[derive(Debug)]
struct FaultFile {
    fs: FaultFs,
    inode: u64,
}

impl Drop for FaultFile {
    fn drop(&mut self) {
        let mut files = self.fs.lock();
        if let Some(n) = files.open.get_mut(&self.inode) {
            *n -= 1;
            if *n == 0 {
                files.open.remove(&self.inode);
            }
        }
    }
}

impl FaultFile {
    fn with<T>(&self, f: impl FnOnce(&mut Content) -> io::Result<T>) -> io::Result<T> {
        // Checked under the lock: a crash is ordered before or after the whole operation.
        let mut files = self.fs.lock();
        self.fs.alive()?;
        let content = files
            .contents
            .get_mut(&self.inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file was deleted"))?;
        f(content)
    }
}

impl FileSystem for FaultFs {
    fn create_dir_all(&self, _: &Path) -> io::Result<()> {
        self.alive()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.alive()?;
        Ok(self
            .list_paths(dir)
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StoreFile>> {
        self.alive()?;
        let mut files = self.lock();
        let inode = match files.names.get(path) {
            Some(&inode) => inode,
            None => {
                let inode = files.new_inode(Content::default());
                files.set_name(path, Some(inode));
                inode
            }
        };
        *files.open.entry(inode).or_default() += 1;
        Ok(Box::new(FaultFile {
            fs: self.clone(),
            inode,
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.alive()?;
        Ok(self.contents(path))
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.alive()?;
        let files = self.lock();
        let content = files
            .content(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        start
            .checked_add(len)
            .and_then(|end| content.data.get(start..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))
    }

    fn delete(&self, path: &Path) -> io::Result<()> {
        self.alive()?;
        let mut files = self.lock();
        if files.names.contains_key(path) {
            files.set_name(path, None);
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.alive()?;
        let mut files = self.lock();
        let inode = *files
            .names
            .get(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        files.set_name(from, None);
        files.set_name(to, Some(inode));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.alive()?;
        self.sync_point()?;
        let mut files = self.lock();
        // Checked under the lock: a crash is ordered before or after the whole sync.
        self.alive()?;
        let synced: Vec<(PathBuf, Option<u64>)> = files
            .pending
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (path, inode) in synced {
            files.pending.remove(&path);
            match inode {
                Some(inode) => files.durable.insert(path, inode),
                None => files.durable.remove(&path),
            };
        }
        files.collect_garbage();
        Ok(())
    }
}

/// A delay in whole microseconds, as the delays are kept.
fn micros(delay: std::time::Duration) -> u64 {
    u64::try_from(delay.as_micros()).unwrap_or(u64::MAX)
}

impl StoreFile for FaultFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let delay = self.fs.0.append_delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        if self.fs.0.fail_appends.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected append failure"));
        }
        self.with(|c| {
            c.data.extend_from_slice(data);
            Ok(())
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        self.fs.sync_point()?;
        let syncs = &self.fs.0.syncs;
        self.with(|c| {
            c.synced = c.data.len();
            syncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.with(|c| {
            let len = usize::try_from(len).unwrap_or(usize::MAX).min(c.data.len());
            c.data.truncate(len);
            c.synced = c.synced.min(len);
            Ok(())
        })
    }

    fn len(&self) -> u64 {
        self.with(|c| Ok(c.data.len() as u64)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with `old` (its entry and "one" synced, "two" not) and `new` (written,
    /// its entry not synced).
    fn written() -> FaultFs {
        let fs = FaultFs::new();
        let dir = Path::new("/d");
        let mut old = fs.open(&dir.join("old")).unwrap();
        fs.sync_dir(dir).unwrap();
        old.append(b"one").unwrap();
        old.sync().unwrap();
        old.append(b"two").unwrap();
        fs.open(&dir.join("new")).unwrap().append(b"new").unwrap();
        fs
    }

    fn contents(fs: &FaultFs, name: &str) -> Option<Vec<u8>> {
        fs.read(&Path::new("/d").join(name)).unwrap()
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_a_kill_keeps_everything() {
        let crashed = written().crash();
        assert_eq!(contents(&crashed, "old").as_deref(), Some(&b"one"[..]));
        assert_eq!(contents(&crashed, "new"), None);

        let written_back = written().crash_with_writeback(|_| true);
        assert_eq!(
            contents(&written_back, "old").as_deref(),
            Some(&b"onetwo"[..])
        );
        assert_eq!(
            contents(&written_back, "new"),
            None,
            "its entry was not synced"
        );

        let killed = written().kill();
        assert_eq!(contents(&killed, "old").as_deref(), Some(&b"onetwo"[..]));
        assert_eq!(contents(&killed, "new").as_deref(), Some(&b"new"[..]));
        // What the killed process left is durable for the next one.
        let again = killed.crash();
        assert_eq!(contents(&again, "new").as_deref(), Some(&b"new"[..]));
    }
}
