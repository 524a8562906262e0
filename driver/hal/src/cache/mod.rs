//! The compilation cache's storage: the cached form of a prepared model, the token records,
//! client cache files and the driver-managed cache, with their checks. It knows nothing of
//! the driver; `driver::caching` prepares models through it (NN HAL 1.2
//! `getNumberOfCacheFilesNeeded`, `prepareModel` with cache handles, `prepareModelFromCache`,
//! and the driver-managed cache for clients that pass no cache files). See `docs/caching.md`.
//!
//! - [`blob`]: the cached form of a prepared model (model cache: structure and placement; data
//!   cache: constants), decoded strictly.
//! - [`records`]: the {token → SHA-256} records, crash-safe in the state directory and reset
//!   when the driver build changes.
//! - [`files`]: whole-file `pread`/`pwrite` on client fds under `flock`.
//! - [`managed`]: the driver-managed cache (bounded, least recently used evicted).

pub mod blob;
pub mod files;
pub mod managed;
pub mod records;

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use sha2::{Digest, Sha256};

pub use managed::{Entry, ManagedCache};
pub use records::RecordStore;

/// BYTE_SIZE_OF_CACHE_TOKEN.
pub(crate) const TOKEN_LEN: usize = 32;
/// MAX_NUMBER_OF_CACHE_FILES, per kind.
pub(crate) const MAX_NUMBER_OF_CACHE_FILES: u32 = 32;
/// Model-cache files this driver asks for.
pub(crate) const MODEL_CACHE_FILES: u32 = 1;
/// Data-cache files this driver asks for.
pub(crate) const DATA_CACHE_FILES: u32 = 1;
// NN HAL 1.2: each count is at most MAX_NUMBER_OF_CACHE_FILES.
const _: () = assert!(
    MODEL_CACHE_FILES <= MAX_NUMBER_OF_CACHE_FILES && DATA_CACHE_FILES <= MAX_NUMBER_OF_CACHE_FILES
);
/// Environment variable that overrides the driver build identity (tests only: it lets a test
/// play "a new driver build" without rebuilding).
pub const BUILD_ID_ENV: &str = "NNACCEL_BUILD_ID";

/// A cache token.
pub type Token = [u8; TOKEN_LEN];
/// A SHA-256.
pub type Hash = [u8; 32];

/// One cache handle: the fds of one `hidl_handle` (valid handles hold exactly one).
pub type CacheHandle<'a> = Vec<BorrowedFd<'a>>;

/// The cache arguments of `prepareModel` and `prepareModelFromCache`: the model- and
/// data-cache handles and the token that names them.
#[derive(Debug, Clone, Copy)]
pub struct CacheFiles<'a> {
    /// Model-cache handles, as many as `getNumberOfCacheFilesNeeded` asks for.
    pub model: &'a [CacheHandle<'a>],
    /// Data-cache handles, likewise.
    pub data: &'a [CacheHandle<'a>],
    /// The token.
    pub token: &'a Token,
}

/// Cache errors (logged; the HAL answers GENERAL_FAILURE for a failed load and never fails a
/// preparation because its cache could not be written).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A file of the state directory.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A client cache file.
    #[error("cache file: {0}")]
    ClientFile(io::Error),
    /// The model cannot be put in cached form.
    #[error("cannot encode the model: {0}")]
    Encode(String),
    /// Cache bytes that do not decode.
    #[error("corrupt cache: {0}")]
    Corrupt(String),
    /// A model cache of another schema version (written by an older or newer driver).
    #[error("model-cache format {found}, this driver reads format {expected} only")]
    Format {
        /// The version in the file.
        found: u32,
        /// The version this driver writes and reads.
        expected: u32,
    },
    /// Wrong number of cache files or of fds in a handle.
    #[error("{0}")]
    Handles(String),
    /// No record for the token, or the files do not match it.
    #[error("the cache files do not match the record of this token")]
    Mismatch,
}

impl CacheError {
    fn io(path: &Path, source: io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The driver build identity: `$NNACCEL_BUILD_ID` if set, else the crate version and the
/// SHA-256 of the running executable (computed once per process).
pub fn build_id() -> String {
    if let Ok(id) = std::env::var(BUILD_ID_ENV)
        && !id.is_empty()
    {
        return id;
    }
    static EXE: OnceLock<String> = OnceLock::new();
    EXE.get_or_init(|| {
        let exe = std::fs::File::open("/proc/self/exe").and_then(|mut f| {
            let mut h = Sha256::new();
            io::copy(&mut f, &mut h)?;
            Ok(h.finalize())
        });
        match exe {
            Ok(h) => format!("{}+{}", env!("CARGO_PKG_VERSION"), hex(&h[..16])),
            Err(e) => {
                tracing::warn!("cannot hash the executable ({e}); caches key on the version only");
                env!("CARGO_PKG_VERSION").to_string()
            }
        }
    })
    .clone()
}

/// The caching state of a driver: records and, with a state directory, the managed cache.
#[derive(Debug)]
pub struct CacheState {
    build_id: String,
    state_dir: Option<PathBuf>,
    records: Mutex<RecordStore>,
    managed: Option<ManagedCache>,
}

impl CacheState {
    /// Records in memory only, no managed cache (a driver without a state directory).
    pub fn in_memory() -> Self {
        let build_id = build_id();
        Self {
            records: Mutex::new(RecordStore::in_memory(&build_id)),
            build_id,
            state_dir: None,
            managed: None,
        }
    }

    /// Records and managed cache under `state_dir` (created if missing); `managed_max_bytes`
    /// bounds the managed cache (0 turns it off).
    pub fn open(state_dir: &Path, managed_max_bytes: u64) -> Result<Self, CacheError> {
        let build_id = build_id();
        let records = RecordStore::open(state_dir, &build_id)?;
        let managed = if managed_max_bytes > 0 {
            Some(ManagedCache::open(state_dir, managed_max_bytes)?)
        } else {
            None
        };
        Ok(Self {
            build_id,
            state_dir: Some(state_dir.to_path_buf()),
            records: Mutex::new(records),
            managed,
        })
    }

    /// The build identity records are keyed to.
    pub fn build_id(&self) -> &str {
        &self.build_id
    }

    /// The state directory, if any.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// The managed cache, if on.
    pub fn managed(&self) -> Option<&ManagedCache> {
        self.managed.as_ref()
    }

    pub(crate) fn records(&self) -> std::sync::MutexGuard<'_, RecordStore> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The hash a token's record holds: SHA-256 over the model-cache files, then the data-cache
/// files, each kind introduced by a tag and its file count, each file followed by its length
/// (so bytes can be hashed as they stream in, and moving bytes between files changes it).
#[derive(Debug, Default)]
pub(crate) struct CacheHasher(Sha256);

impl CacheHasher {
    /// Starts the model (`data` false) or data (`data` true) files, `count` of them.
    pub fn kind(&mut self, data: bool, count: usize) {
        self.0.update([if data { 2u8 } else { 1u8 }]);
        self.0.update((count as u64).to_le_bytes());
    }

    /// Bytes of the current file.
    pub fn bytes(&mut self, b: &[u8]) {
        self.0.update(b);
    }

    /// Ends a file of `len` bytes.
    pub fn end_file(&mut self, len: u64) {
        self.0.update(len.to_le_bytes());
    }

    /// The hash.
    pub fn finish(self) -> Hash {
        self.0.finalize().into()
    }
}

/// The record hash of whole buffers (see [`CacheHasher`]).
pub(crate) fn hash_buffers(model: &[Vec<u8>], data: &[Vec<u8>]) -> Hash {
    let mut h = CacheHasher::default();
    for (is_data, files) in [(false, model), (true, data)] {
        h.kind(is_data, files.len());
        for f in files {
            h.bytes(f);
            h.end_file(f.len() as u64);
        }
    }
    h.finish()
}
