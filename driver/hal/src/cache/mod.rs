//! Compilation caching (NN HAL 1.2 `getNumberOfCacheFilesNeeded`, `prepareModel` with cache
//! handles, `prepareModelFromCache`), and the driver-managed cache for clients that pass no
//! cache files. See `docs/caching.md`.
//!
//! - [`blob`]: the cached form of a prepared model (model cache: structure and placement; data
//!   cache: constants), decoded strictly.
//! - [`records`]: the {token → SHA-256} records, crash-safe in the state directory and reset
//!   when the driver build changes.
//! - [`files`]: whole-file `pread`/`pwrite` on client fds under `flock`.
//! - [`managed`]: the driver-managed cache (bounded, least recently used evicted).

pub mod blob;
pub mod client;
pub mod files;
pub mod managed;
pub mod records;

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::{Deadline, Driver, ErrorStatus, ExecutionPreference, Model, PreparedModel, Priority};
pub use managed::{Entry, ManagedCache};
pub use records::RecordStore;

/// BYTE_SIZE_OF_CACHE_TOKEN.
pub const TOKEN_LEN: usize = 32;
/// MAX_NUMBER_OF_CACHE_FILES, per kind.
pub const MAX_NUMBER_OF_CACHE_FILES: u32 = 32;
/// Model-cache files this driver asks for.
pub const MODEL_CACHE_FILES: u32 = 1;
/// Data-cache files this driver asks for.
pub const DATA_CACHE_FILES: u32 = 1;
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

    fn records(&self) -> std::sync::MutexGuard<'_, RecordStore> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The hash a token's record holds: SHA-256 over the model-cache files, then the data-cache
/// files, each kind introduced by a tag and its file count, each file followed by its length
/// (so bytes can be hashed as they stream in, and moving bytes between files changes it).
#[derive(Debug, Default)]
pub struct CacheHasher(Sha256);

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
pub fn hash_buffers(model: &[Vec<u8>], data: &[Vec<u8>]) -> Hash {
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

/// The single fd of each handle, checking the counts this driver asked for.
fn single_fds<'a>(
    cache: &CacheFiles<'a>,
) -> Result<(Vec<BorrowedFd<'a>>, Vec<BorrowedFd<'a>>), CacheError> {
    let (model_cache, data_cache) = (cache.model, cache.data);
    if model_cache.len() != MODEL_CACHE_FILES as usize
        || data_cache.len() != DATA_CACHE_FILES as usize
    {
        return Err(CacheError::Handles(format!(
            "{} model and {} data cache handles; this driver uses {MODEL_CACHE_FILES} and {DATA_CACHE_FILES}",
            model_cache.len(),
            data_cache.len()
        )));
    }
    let one = |hs: &[CacheHandle<'a>]| {
        hs.iter()
            .map(|h| match h.as_slice() {
                [fd] => Ok(*fd),
                fds => Err(CacheError::Handles(format!(
                    "a cache handle with {} fds; each must hold one",
                    fds.len()
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok((one(model_cache)?, one(data_cache)?))
}

impl Driver {
    /// `getNumberOfCacheFilesNeeded`: (model cache files, data cache files).
    pub fn get_number_of_cache_files_needed(&self) -> (u32, u32) {
        (MODEL_CACHE_FILES, DATA_CACHE_FILES)
    }

    /// `prepareModel` with cache handles and a token: prepares, then saves the model and data
    /// caches and records `token → hash`. A cache that cannot be saved (wrong handle counts, a
    /// read-only fd, ...) is logged and never fails the preparation; the token's record is
    /// dropped then, so stale files never load. With both lists empty the token is ignored.
    pub fn prepare_model_with_cache(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<PreparedModel, ErrorStatus> {
        if cache.model.is_empty() && cache.data.is_empty() {
            return self.prepare_model(model, preference, priority, deadline);
        }
        let pm = self.prepare_model_uncached(model, preference, priority, deadline)?;
        let state = self.cache_state();
        match save(model, pm.runs_on_device(), &cache) {
            Ok(hash) => {
                if let Err(e) = state.records().insert(*cache.token, hash) {
                    tracing::warn!("cache saved but its record was not: {e}");
                }
            }
            Err(e) => {
                tracing::info!("compilation cache not saved: {e}");
                if let Err(e) = state.records().remove(cache.token) {
                    tracing::warn!("cannot drop the token's record: {e}");
                }
            }
        }
        Ok(pm)
    }

    /// `prepareModelFromCache`: reads every file into memory first, hashes those buffers,
    /// checks the hash against the token's record, then decodes from the buffers only. Any
    /// mismatch is GENERAL_FAILURE.
    pub fn prepare_model_from_cache(
        &self,
        preference: ExecutionPreference,
        _priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<PreparedModel, ErrorStatus> {
        let failed = |e: CacheError| {
            tracing::info!("prepareModelFromCache: {e}");
            ErrorStatus::GeneralFailure
        };
        let start = Instant::now();
        let (model_fds, data_fds) = single_fds(&cache).map_err(failed)?;
        // Every file is read once, into private memory, and hashed as it streams in; nothing
        // is read from the files again.
        let mut hasher = CacheHasher::default();
        hasher.kind(false, model_fds.len());
        let mut model_bytes = Vec::new();
        for fd in &model_fds {
            let len = files::read_file_with(*fd, files::MAX_MODEL_CACHE_BYTES, &mut |c| {
                hasher.bytes(c);
                model_bytes.extend_from_slice(c);
                Ok(())
            })
            .map_err(|e| failed(CacheError::ClientFile(e)))?;
            hasher.end_file(len);
        }
        hasher.kind(true, data_fds.len());
        let mut data = files::MemfdBuffer::new();
        for fd in &data_fds {
            let len = files::read_hashing_aside(
                &mut |c| hasher.bytes(c),
                &mut |c| data.append(c),
                |sink| files::read_file_with(*fd, files::MAX_CACHE_FILE_BYTES, sink),
            )
            .map_err(|e| failed(CacheError::ClientFile(e)))?;
            hasher.end_file(len);
        }
        let read = start.elapsed();
        if self.cache_state().records().get(cache.token) != Some(hasher.finish()) {
            return Err(failed(CacheError::Mismatch));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ErrorStatus::MissedDeadlineTransient);
        }
        let (model, on_device) = blob::decode(&model_bytes, data).map_err(failed)?;
        let decoded = start.elapsed();
        let pm = self
            .prepare_from_parts(&model, on_device, preference)
            .map_err(|_| ErrorStatus::GeneralFailure)?;
        tracing::debug!(
            "prepared from the cache in {:?} (read and hashed {read:?}, decoded {decoded:?})",
            start.elapsed()
        );
        Ok(pm)
    }
}

/// Writes the caches of `model`; the hash of what was written.
fn save(model: &Model, on_device: bool, cache: &CacheFiles<'_>) -> Result<Hash, CacheError> {
    let (model_fds, data_fds) = single_fds(cache)?;
    let enc = blob::encode(model, on_device)?;
    let (model_bufs, data_bufs) = (vec![enc.model], vec![enc.data]);
    for (fd, bytes) in model_fds
        .iter()
        .zip(&model_bufs)
        .chain(data_fds.iter().zip(&data_bufs))
    {
        files::write_file(*fd, bytes).map_err(CacheError::ClientFile)?;
    }
    Ok(hash_buffers(&model_bufs, &data_bufs))
}

/// `prepareModel` through the driver-managed cache. What compilation produces here is the
/// model's structure and its placement (the device program is built from them and the
/// constants, which come with every preparation), so an entry holds the model-cache form and
/// the key covers everything compilation depends on: the build, the device, the structure
/// (types, shapes, lifetimes, constant locations and lengths, operations) and the kinds and
/// sizes of the constant pools — not the constant values, which placement never depends on.
/// A hit validates the model and builds its plans with no probing; anything unexpected falls
/// back to the full path, which also answers every error with its proper code.
pub(crate) fn prepare_managed(
    driver: &Driver,
    cache: &ManagedCache,
    build_id: &str,
    model: &Model,
    preference: ExecutionPreference,
    priority: Priority,
    deadline: Option<Deadline>,
) -> Result<PreparedModel, ErrorStatus> {
    let start = Instant::now();
    let Ok(structure) = blob::encode_structure(model) else {
        return driver.prepare_model_uncached(model, preference, priority, deadline);
    };
    let mut identity = format!("{build_id}\n{}\n", driver.description());
    for p in &model.pools {
        let (kind, prot, offset) = match p.kind {
            crate::MemoryKind::Ashmem => (0, 0, 0),
            crate::MemoryKind::MmapFd { prot, offset } => (1, prot, offset),
            crate::MemoryKind::HardwareBufferBlob => (2, 0, 0),
            crate::MemoryKind::HardwareBuffer => (3, 0, 0),
        };
        identity.push_str(&format!("pool {kind} {prot} {offset} {}\n", p.size));
    }
    let wanted = blob::without_placement(&structure.model);
    let key = ManagedCache::key(&identity, wanted, &[]);
    let found = cache
        .get(&key)
        .map_err(|e| tracing::warn!("driver-managed cache: {e}"))
        .ok()
        .flatten();
    if let Some((stored, _)) = found
        && blob::without_placement(&stored) == wanted
    {
        let on_device = blob::placement(&stored);
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ErrorStatus::MissedDeadlineTransient);
        }
        let moved = blob::with_large_copies_referenced(model)
            .map_err(|e| tracing::debug!("driver-managed cache: {e}"))
            .ok()
            .flatten();
        match driver.prepare_from_parts(moved.as_ref().unwrap_or(model), on_device, preference) {
            Ok(pm) => {
                tracing::debug!(
                    "driver-managed cache hit {} in {:?}",
                    hex(&key),
                    start.elapsed()
                );
                return Ok(pm);
            }
            Err(s) => tracing::debug!("driver-managed cache entry not usable ({s:?})"),
        }
    }
    let pm = driver.prepare_model_uncached(model, preference, priority, deadline)?;
    let mut stored = structure.model;
    blob::set_placement(&mut stored, pm.runs_on_device());
    if let Err(e) = cache.put(&key, &stored, &[]) {
        tracing::warn!("driver-managed cache: {e}");
    }
    Ok(pm)
}
