//! The driver-managed cache: compiled models kept by the service for clients that pass no cache
//! files, keyed by model content, bounded in total size, oldest-used evicted first.
//!
//! Directory `programs/` under the state directory; one file per entry, named by the 64-hex
//! key (SHA-256 over the build id, the model-cache bytes and the data-cache bytes, so the key
//! depends on content, never on fds or names). An entry is: magic `NNMC`, version u32 LE,
//! model length u64 LE, data length u64 LE, SHA-256 of model ‖ data, model bytes, data bytes.
//! Entries are written crash-safely (temp file, fsync, rename) and verified when read: a
//! damaged entry is deleted and counts as a miss. A hit refreshes the entry's mtime, which is
//! what eviction orders by.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use std::os::fd::AsFd;

use super::files::{MAX_CACHE_FILE_BYTES, MemfdBuffer, read_chunks, read_hashing_aside};
use super::records::write_atomically;
use super::{CacheError, Hash, hex};

const MAGIC: [u8; 4] = *b"NNMC";
const VERSION: u32 = 1;
const HEADER: usize = 4 + 4 + 8 + 8 + 32;
/// Default bound on the total size of the entries.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// Directory of the entries, under the state directory.
pub const PROGRAMS_DIR: &str = "programs";

/// One entry, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The 64-hex content key.
    pub key: String,
    /// Bytes on disk.
    pub bytes: u64,
    /// Last used (written or hit), seconds since the epoch.
    pub last_used: u64,
}

/// The cache directory and its bound.
#[derive(Debug)]
pub struct ManagedCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Serialises this process's writers and evictions.
    lock: Mutex<()>,
}

impl ManagedCache {
    /// The cache under `state_dir`, bounded to `max_bytes` (0 turns it off). Its directory is
    /// created with the first entry.
    pub fn open(state_dir: &Path, max_bytes: u64) -> Result<Self, CacheError> {
        let dir = state_dir.join(PROGRAMS_DIR);
        Ok(Self {
            dir,
            max_bytes,
            lock: Mutex::new(()),
        })
    }

    /// Whether entries are stored at all.
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// The key of a model in cached form.
    pub fn key(build_id: &str, model: &[u8], data: &[u8]) -> Hash {
        let mut h = Sha256::new();
        h.update((build_id.len() as u64).to_le_bytes());
        h.update(build_id.as_bytes());
        h.update((model.len() as u64).to_le_bytes());
        h.update(model);
        h.update(data);
        h.finalize().into()
    }

    fn path(&self, key: &Hash) -> PathBuf {
        self.dir.join(format!("{}.nnc", hex(key)))
    }

    /// The model bytes and the data (in a memfd) stored under `key`, verified; None on a miss.
    /// A damaged entry is removed and is a miss.
    pub fn get(&self, key: &Hash) -> Result<Option<(Vec<u8>, MemfdBuffer)>, CacheError> {
        let path = self.path(key);
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CacheError::io(&path, e)),
        };
        match read_entry(&file) {
            Ok(Some(entry)) => {
                let _ = fs::File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                Ok(Some(entry))
            }
            Ok(None) => {
                tracing::warn!("{} is damaged; removing it", path.display());
                let _ = fs::remove_file(&path);
                Ok(None)
            }
            Err(e) => Err(CacheError::io(&path, e)),
        }
    }

    /// Stores an entry, then evicts the least recently used ones beyond the bound.
    pub fn put(&self, key: &Hash, model: &[u8], data: &[u8]) -> Result<(), CacheError> {
        let size = (HEADER + model.len() + data.len()) as u64;
        if !self.enabled() || size > self.max_bytes {
            return Ok(());
        }
        let mut h = Sha256::new();
        h.update(model);
        h.update(data);
        let sum: Hash = h.finalize().into();
        let mut bytes = Vec::with_capacity(size as usize);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&(model.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&sum);
        bytes.extend_from_slice(model);
        bytes.extend_from_slice(data);
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        write_atomically(&self.path(key), &bytes)?;
        self.evict(Some(key))
    }

    /// Every entry, most recently used first.
    pub fn list(&self) -> Result<Vec<Entry>, CacheError> {
        let mut entries = Vec::new();
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(entries),
            Err(e) => return Err(CacheError::io(&self.dir, e)),
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(key) = name.strip_suffix(".nnc") else {
                continue;
            };
            if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            let last_used = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            entries.push(Entry {
                key: key.to_string(),
                bytes: meta.len(),
                last_used,
            });
        }
        entries.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.key.cmp(&b.key)));
        Ok(entries)
    }

    /// Removes every entry; returns how many.
    pub fn clear(&self) -> Result<usize, CacheError> {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = self.list()?;
        for e in &entries {
            let p = self.dir.join(format!("{}.nnc", e.key));
            fs::remove_file(&p).map_err(|err| CacheError::io(&p, err))?;
        }
        Ok(entries.len())
    }

    /// Evicts least-recently-used entries until the total fits; `keep` is never evicted.
    fn evict(&self, keep: Option<&Hash>) -> Result<(), CacheError> {
        let keep = keep.map(|k| hex(k));
        let mut entries = self.list()?;
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        // Oldest last in `entries`: pop from the back.
        while total > self.max_bytes {
            let Some(e) = entries.pop() else { break };
            if Some(&e.key) == keep.as_ref() {
                continue;
            }
            let p = self.dir.join(format!("{}.nnc", e.key));
            if fs::remove_file(&p).is_ok() {
                tracing::debug!("driver-managed cache: evicted {}", e.key);
                total = total.saturating_sub(e.bytes);
            }
        }
        Ok(())
    }
}

/// Reads an entry: the model bytes into memory, the data into a memfd, checking the header
/// and the checksum on the way. None when damaged.
fn read_entry(file: &fs::File) -> std::io::Result<Option<(Vec<u8>, MemfdBuffer)>> {
    let mut header = [0u8; HEADER];
    match nnaccel_uapi::sys::pread_exact(file.as_fd(), 0, &mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(w)
    };
    if header[..4] != MAGIC || header[4..8] != VERSION.to_le_bytes() {
        return Ok(None);
    }
    let (model_len, data_len) = (word(8), word(16));
    if model_len > MAX_CACHE_FILE_BYTES || data_len > MAX_CACHE_FILE_BYTES {
        return Ok(None);
    }
    let mut h = Sha256::new();
    let mut model = Vec::new();
    let mut data = MemfdBuffer::new();
    read_hashing_aside(
        &mut |c| h.update(c),
        &mut |c| {
            let room = (model_len as usize).saturating_sub(model.len());
            let (m, d) = c.split_at(room.min(c.len()));
            model.extend_from_slice(m);
            data.append(d)
        },
        |sink| read_chunks(file.as_fd(), HEADER as u64, MAX_CACHE_FILE_BYTES, sink),
    )?;
    let sum: Hash = h.finalize().into();
    let complete = model.len() as u64 == model_len && data.len() == data_len;
    Ok((complete && sum[..] == header[24..HEADER]).then_some((model, data)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nnaccel-managed-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn entries_round_trip_and_damaged_ones_are_misses() {
        let d = dir("rt");
        let c = ManagedCache::open(&d, 1 << 20).unwrap();
        let k = ManagedCache::key("b", b"model", b"data");
        assert!(c.get(&k).unwrap().is_none());
        c.put(&k, b"model", b"data").unwrap();
        let (m, buf) = c.get(&k).unwrap().unwrap();
        assert_eq!(m, b"model");
        let mut data = [0u8; 4];
        buf.read_at(0, &mut data).unwrap();
        assert_eq!((&data, buf.len()), (b"data", 4));
        let p = c.path(&k);
        let mut bytes = fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0x40;
        fs::write(&p, &bytes).unwrap();
        assert!(c.get(&k).unwrap().is_none());
        assert!(!p.exists(), "a damaged entry is removed");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_total_size_stays_bounded_and_the_least_recently_used_goes_first() {
        let d = dir("evict");
        let entry = HEADER as u64 + 1000;
        let c = ManagedCache::open(&d, 3 * entry).unwrap();
        let keys: Vec<Hash> = (0..4u8)
            .map(|i| ManagedCache::key("b", &[i], b""))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            c.put(k, &vec![i as u8; 1000], b"").unwrap();
            // mtimes have one-second resolution in the listing: space the uses out.
            let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            fs::File::options()
                .append(true)
                .open(c.path(k))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        let listed = c.list().unwrap();
        assert_eq!(listed.len(), 3);
        assert!(listed.iter().map(|e| e.bytes).sum::<u64>() <= 3 * entry);
        assert!(
            c.get(&keys[0]).unwrap().is_none(),
            "the oldest entry was evicted"
        );
        assert_eq!(c.clear().unwrap(), 3);
        assert!(c.list().unwrap().is_empty());
        let _ = fs::remove_dir_all(&d);
    }
}
