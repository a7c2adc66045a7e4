//! A fault-injecting file layer for tests: files in memory, where what was appended but not
//! yet synced is lost on a simulated crash, and syncs can be made to fail.

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

#[derive(Debug, Default)]
struct Inner {
    files: Mutex<BTreeMap<PathBuf, Content>>,
    /// Every sync fails while set.
    fail_syncs: AtomicBool,
    /// After a crash the old handles refuse everything (the process is gone).
    crashed: AtomicBool,
    syncs: AtomicU64,
    /// How long each sync takes, in microseconds (a slow disk).
    sync_delay_us: AtomicU64,
}

/// Files in memory with crash and sync-failure injection. Clones share the files.
///
/// Deletions and renames are durable at once (as if the directory were synced right after
/// them); data is durable only up to the last successful [`StoreFile::sync`].
#[derive(Debug, Default, Clone)]
pub struct FaultFs(Arc<Inner>);

impl FaultFs {
    /// An empty file system.
    pub fn new() -> Self {
        FaultFs::default()
    }

    /// Simulates a crash: returns the file system a restarted process would find (every
    /// file cut to what was synced); this one, and every file open on it, fails from now on.
    pub fn crash(&self) -> FaultFs {
        let held = self.lock();
        self.0.crashed.store(true, Ordering::SeqCst);
        let files = held
            .iter()
            .map(|(path, c)| {
                let data = c.data[..c.synced].to_vec();
                let synced = data.len();
                (path.clone(), Content { data, synced })
            })
            .collect();
        FaultFs(Arc::new(Inner {
            files: Mutex::new(files),
            ..Inner::default()
        }))
    }

    /// Makes every sync from now on fail (or succeed again).
    pub fn fail_syncs(&self, fail: bool) {
        self.0.fail_syncs.store(fail, Ordering::SeqCst);
    }

    /// Makes every sync take this long (as a real disk's does).
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.0.sync_delay_us.store(us, Ordering::SeqCst);
    }

    /// How many syncs succeeded.
    pub fn syncs(&self) -> u64 {
        self.0.syncs.load(Ordering::SeqCst)
    }

    /// A file's whole contents (synced or not).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        self.lock().get(path).map(|c| c.data.clone())
    }

    /// Replaces a file's contents, as durable (to damage it in tests).
    pub fn set_contents(&self, path: &Path, data: Vec<u8>) {
        let synced = data.len();
        self.lock()
            .insert(path.to_owned(), Content { data, synced });
    }

    /// The paths of the files directly in `dir`.
    pub fn list_paths(&self, dir: &Path) -> Vec<PathBuf> {
        self.lock()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect()
    }

    /// The total size of every file under `dir`.
    pub fn size_under(&self, dir: &Path) -> u64 {
        self.lock()
            .iter()
            .filter(|(p, _)| p.starts_with(dir))
            .map(|(_, c)| c.data.len() as u64)
            .sum()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Content>> {
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

#[derive(Debug)]
struct FaultFile {
    fs: FaultFs,
    path: PathBuf,
}

impl FaultFile {
    fn with<T>(&self, f: impl FnOnce(&mut Content) -> io::Result<T>) -> io::Result<T> {
        // Checked under the lock: a crash is ordered before or after the whole operation.
        let mut files = self.fs.lock();
        self.fs.alive()?;
        let content = files
            .get_mut(&self.path)
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
            .lock()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StoreFile>> {
        self.alive()?;
        self.lock().entry(path.to_owned()).or_default();
        Ok(Box::new(FaultFile {
            fs: self.clone(),
            path: path.to_owned(),
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
            .get(path)
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
        self.lock().remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.alive()?;
        let mut files = self.lock();
        let mut content = files
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        // A rename is durable at once: so is what the renamed file held when it was synced.
        content.data.truncate(content.synced);
        files.insert(to.to_owned(), content);
        Ok(())
    }

    fn sync_dir(&self, _: &Path) -> io::Result<()> {
        self.alive()
    }
}

impl StoreFile for FaultFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.with(|c| {
            c.data.extend_from_slice(data);
            Ok(())
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        let delay = self.fs.0.sync_delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        let fail = self.fs.0.fail_syncs.load(Ordering::SeqCst);
        let syncs = &self.fs.0.syncs;
        self.with(|c| {
            if fail {
                return Err(io::Error::other("injected sync failure"));
            }
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
