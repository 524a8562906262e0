//! The client side of compilation caching, as Android's runtime does it: the token derived
//! from the model's content and the device's identity, cache files named from the token in a
//! directory the client owns, prepareModelFromCache first and a full preparation that saves
//! the cache when that fails.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use nnaccel_hal::cache::{Token, blob, hex};
use nnaccel_hal::{
    Deadline, ErrorStatus, ExecutionPreference, HalDevice, HalPreparedModel, Model, Priority,
};

/// The token of `model` on the device described by `device_identity`: SHA-256 over the
/// model's content (structure and every constant, pools included) and the identity.
pub(crate) fn derive_token(model: &Model, device_identity: &str) -> Result<Token, ErrorStatus> {
    let enc = blob::encode(model, false).map_err(|e| {
        tracing::debug!("cannot derive a cache token: {e}");
        ErrorStatus::InvalidArgument
    })?;
    let mut h = Sha256::new();
    h.update(b"nnaccel cache token v1\0");
    h.update((device_identity.len() as u64).to_le_bytes());
    h.update(device_identity.as_bytes());
    h.update((enc.model.len() as u64).to_le_bytes());
    h.update(blob::without_placement(&enc.model));
    h.update(&enc.data);
    Ok(h.finalize().into())
}

/// The cache file names of `token`: 64 hex characters, then `1` (model cache) or `2` (data
/// cache), then the file's index.
pub(crate) fn cache_file_names(
    token: &Token,
    model_files: u32,
    data_files: u32,
) -> (Vec<String>, Vec<String>) {
    let stem = hex(token);
    (
        (0..model_files).map(|i| format!("{stem}1{i}")).collect(),
        (0..data_files).map(|i| format!("{stem}2{i}")).collect(),
    )
}

/// Opens a cache file read-write, creating it with mode 0600 (its content is kept).
pub fn open_cache_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// How a preparation through a cache directory went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Prepared from the cache files.
    Hit,
    /// Prepared fully; the cache files were (re)written.
    Saved,
}

/// The cache files of one model in a cache directory, open.
#[derive(Debug)]
pub(crate) struct OpenCacheFiles {
    /// The token.
    pub token: Token,
    /// Model-cache files, opened read-write.
    pub model: Vec<File>,
    /// Data-cache files, opened read-write.
    pub data: Vec<File>,
}

impl OpenCacheFiles {
    /// Opens (creating, mode 0600) the files `dev` needs for `model` in `dir`.
    pub fn open(dev: &dyn HalDevice, model: &Model, dir: &Path) -> io::Result<Self> {
        let (nm, nd) = dev
            .get_number_of_cache_files_needed()
            .map_err(|s| io::Error::other(format!("getNumberOfCacheFilesNeeded: {}", s.name())))?;
        let token = derive_token(model, &dev.description())
            .map_err(|s| io::Error::other(format!("cache token: {}", s.name())))?;
        std::fs::create_dir_all(dir)?;
        let (model_names, data_names) = cache_file_names(&token, nm, nd);
        let open = |name: &String| open_cache_file(&dir.join(name));
        Ok(Self {
            token,
            model: model_names.iter().map(open).collect::<io::Result<_>>()?,
            data: data_names.iter().map(open).collect::<io::Result<_>>()?,
        })
    }
}

/// Prepares `model` through the cache directory `dir`: from the cache when its files are
/// valid for this model and device, else fully, saving the cache.
pub fn prepare_with_cache_dir(
    dev: &dyn HalDevice,
    model: &Model,
    preference: ExecutionPreference,
    priority: Priority,
    deadline: Option<Deadline>,
    dir: &Path,
) -> Result<(Arc<dyn HalPreparedModel>, CacheOutcome), ErrorStatus> {
    let files = OpenCacheFiles::open(dev, model, dir).map_err(|e| {
        tracing::warn!("cache directory {}: {e}", dir.display());
        ErrorStatus::GeneralFailure
    })?;
    let (model_cache, data_cache) = (handles(&files.model), handles(&files.data));
    let cache = nnaccel_hal::cache::CacheFiles {
        model: &model_cache,
        data: &data_cache,
        token: &files.token,
    };
    match dev.prepare_model_from_cache(preference, priority, deadline, cache) {
        Ok(pm) => Ok((pm, CacheOutcome::Hit)),
        Err(ErrorStatus::MissedDeadlineTransient) => Err(ErrorStatus::MissedDeadlineTransient),
        Err(_) => dev
            .prepare_model_with_cache(model, preference, priority, deadline, cache)
            .map(|pm| (pm, CacheOutcome::Saved)),
    }
}

/// One handle per file, each with its one fd.
pub fn handles(files: &[File]) -> Vec<nnaccel_hal::cache::CacheHandle<'_>> {
    files.iter().map(|f| vec![f.as_fd()]).collect()
}
