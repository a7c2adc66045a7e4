//! The file layer: the few file operations the store makes, behind a trait so that tests can
//! put a fault-injecting layer ([`crate::FaultFs`]) in place of the real one ([`RealFs`]).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// A directory of files the store keeps its data in.
pub trait FileSystem: fmt::Debug + Send + Sync + 'static {
    /// Creates a directory and its parents, so that they are there after a crash (each new
    /// directory's parent synced).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files directly in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens a file for appending, creating it empty if it does not exist.
    fn open(&self, path: &Path) -> io::Result<Box<dyn StoreFile>>;
    /// A whole file's contents, or `None` if it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Reads `len` bytes at `offset` of an existing file (a `pread`: paged messages are read
    /// back this way). A file that is missing or shorter is an error.
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Deletes a file (a missing file is not an error).
    fn delete(&self, path: &Path) -> io::Result<()>;
    /// Renames a file over another, atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, deletions) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file the store appends to.
pub trait StoreFile: fmt::Debug + Send {
    /// Appends `data` at the end.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// The file's length.
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The operating system's files.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile {
    file: File,
    len: u64,
}

impl FileSystem for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        // The directories this creates, innermost first: each is there after a crash only
        // once its parent is synced.
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
            .collect();
        fs::create_dir_all(dir)?;
        for created in missing.iter().rev() {
            let parent = match created.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            self.sync_dir(parent)?;
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_owned());
                }
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StoreFile>> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(Box::new(RealFile { file, len }))
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match fs::read(path) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        File::open(path)?.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    fn delete(&self, path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl StoreFile for RealFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.len = len;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_dir_all_creates_missing_parents_and_accepts_existing_ones() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a/b/c");
        RealFs.create_dir_all(&deep).unwrap();
        assert!(deep.is_dir());
        RealFs.create_dir_all(&deep).unwrap();
        RealFs.create_dir_all(root.path()).unwrap();
    }
}
