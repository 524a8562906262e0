//! The {token → SHA-256} records of client-managed caches, persisted in the state directory.
//!
//! File `cache-records` (format 1): magic `NNCR`, version u32 LE, build-id length u32 LE and
//! bytes, record count u32 LE, then per record the 32-byte token and the 32-byte hash, then the
//! SHA-256 of everything before it. Written crash-safely: a temp file in the same directory,
//! fsync, rename over the old file, fsync of the directory. A file written by another driver
//! build, or one that fails its checksum, is discarded (every record reset), so caches saved by
//! an older driver never load.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::{CacheError, Hash, Token};

const MAGIC: [u8; 4] = *b"NNCR";
const VERSION: u32 = 1;
/// Most records kept; the oldest is dropped beyond it.
pub const MAX_RECORDS: usize = 4096;
/// The records file in the state directory.
pub const RECORDS_FILE: &str = "cache-records";

/// The records, in insertion order (oldest first).
#[derive(Debug)]
pub struct RecordStore {
    path: Option<PathBuf>,
    build_id: String,
    records: VecDeque<(Token, Hash)>,
}

impl RecordStore {
    /// Records kept in memory only (no state directory).
    pub fn in_memory(build_id: &str) -> Self {
        Self {
            path: None,
            build_id: build_id.to_string(),
            records: VecDeque::new(),
        }
    }

    /// Loads the records of `dir` for this `build_id`; records of another build, or a damaged
    /// file, are reset (and the file rewritten empty). The directory is created with the first
    /// record.
    pub fn open(dir: &Path, build_id: &str) -> Result<Self, CacheError> {
        let path = dir.join(RECORDS_FILE);
        let mut store = Self {
            path: Some(path.clone()),
            build_id: build_id.to_string(),
            records: VecDeque::new(),
        };
        match fs::read(&path) {
            Ok(bytes) => match parse(&bytes) {
                Some((id, records)) if id == build_id => store.records = records,
                Some((id, _)) => {
                    tracing::info!(
                        "cache records were written by driver build {id:?}; this is {build_id:?}: resetting them"
                    );
                    store.persist()?;
                }
                None => {
                    tracing::warn!("{} is damaged; resetting the cache records", path.display());
                    store.persist()?;
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(CacheError::io(&path, e)),
        }
        Ok(store)
    }

    /// The hash recorded for `token`.
    pub fn get(&self, token: &Token) -> Option<Hash> {
        self.records
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, h)| *h)
    }

    /// Records `token → hash` (replacing an older record) and persists.
    pub fn insert(&mut self, token: Token, hash: Hash) -> Result<(), CacheError> {
        self.records.retain(|(t, _)| *t != token);
        self.records.push_back((token, hash));
        while self.records.len() > MAX_RECORDS {
            self.records.pop_front();
        }
        self.persist()
    }

    /// Forgets `token` (persisting if it had a record).
    pub fn remove(&mut self, token: &Token) -> Result<(), CacheError> {
        let before = self.records.len();
        self.records.retain(|(t, _)| t != token);
        if self.records.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn persist(&self) -> Result<(), CacheError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut bytes = Vec::with_capacity(48 + self.build_id.len() + 64 * self.records.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&(self.build_id.len() as u32).to_le_bytes());
        bytes.extend_from_slice(self.build_id.as_bytes());
        bytes.extend_from_slice(&(self.records.len() as u32).to_le_bytes());
        for (t, h) in &self.records {
            bytes.extend_from_slice(t);
            bytes.extend_from_slice(h);
        }
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum);
        write_atomically(path, &bytes)
    }
}

/// Writes `bytes` to `path` crash-safely: temp file, fsync, rename, fsync of the directory
/// (created first if missing).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| CacheError::io(dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Unique per call, not just per process: two threads of one process may write the same
    // file at once (two record stores on one directory; the managed cache serializes its own
    // writes), and a shared temp file would be truncated by one while the other renames it.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp.{}.{n}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(|e| CacheError::io(path, e))
}

/// Parses a records file: (build id, records), or None when it is damaged.
fn parse(bytes: &[u8]) -> Option<(String, VecDeque<(Token, Hash)>)> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let mut r = Reader(body);
    if r.take(4)? != MAGIC || r.u32()? != VERSION {
        return None;
    }
    let id_len = r.u32()? as usize;
    let id = String::from_utf8(r.take(id_len)?.to_vec()).ok()?;
    let count = r.u32()? as usize;
    if count > MAX_RECORDS {
        return None;
    }
    let mut records = VecDeque::with_capacity(count);
    for _ in 0..count {
        let token: Token = r.take(32)?.try_into().ok()?;
        let hash: Hash = r.take(32)?.try_into().ok()?;
        records.push_back((token, hash));
    }
    r.0.is_empty().then_some((id, records))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn records_survive_reopening_and_reset_on_another_build() {
        let dir = tempfile_dir();
        let mut s = RecordStore::open(&dir, "build-a").unwrap();
        s.insert([1; 32], [2; 32]).unwrap();
        s.insert([3; 32], [4; 32]).unwrap();
        let s = RecordStore::open(&dir, "build-a").unwrap();
        assert_eq!(s.get(&[1; 32]), Some([2; 32]));
        assert_eq!(s.get(&[3; 32]), Some([4; 32]));
        let s = RecordStore::open(&dir, "build-b").unwrap();
        assert!(s.is_empty());
        // The reset is persisted: going back to build-a finds nothing either.
        let s = RecordStore::open(&dir, "build-a").unwrap();
        assert!(s.is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_records_file_is_reset_not_trusted() {
        let dir = tempfile_dir();
        let mut s = RecordStore::open(&dir, "b").unwrap();
        s.insert([1; 32], [2; 32]).unwrap();
        let path = dir.join(RECORDS_FILE);
        let mut bytes = fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let s = RecordStore::open(&dir, "b").unwrap();
        assert!(s.get(&[1; 32]).is_none());
        // Truncated files too.
        fs::write(&path, &bytes[..10]).unwrap();
        assert!(RecordStore::open(&dir, "b").unwrap().is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_oldest_record_goes_beyond_the_limit_and_replacing_keeps_one() {
        let mut s = RecordStore::in_memory("b");
        for i in 0..=MAX_RECORDS {
            let mut t = [0u8; 32];
            t[..8].copy_from_slice(&(i as u64).to_le_bytes());
            s.insert(t, [1; 32]).unwrap();
        }
        assert_eq!(s.len(), MAX_RECORDS);
        assert!(s.get(&[0; 32]).is_none());
        let mut t = [0u8; 32];
        t[0] = 5;
        s.insert(t, [9; 32]).unwrap();
        assert_eq!(s.len(), MAX_RECORDS);
        assert_eq!(s.get(&t), Some([9; 32]));
    }

    fn tempfile_dir() -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let d = std::env::temp_dir().join(format!("nnaccel-records-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }
}
