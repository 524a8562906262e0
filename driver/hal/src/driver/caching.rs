//! Preparing models through the compilation cache: `prepareModel` (with the driver-managed
//! cache when the driver has a state directory), `prepareModel` with cache handles and a
//! token, `prepareModelFromCache`. The cache's storage and formats are [`crate::cache`]'s.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use super::{Driver, PreparedModel};
use crate::cache::files;
use crate::cache::{
    CacheError, CacheFiles, CacheHandle, CacheHasher, DATA_CACHE_FILES, Hash, MODEL_CACHE_FILES,
    ManagedCache, blob, hash_buffers, hex,
};
use crate::types::{Deadline, ErrorStatus, ExecutionPreference, MemoryKind, Model, Priority};

impl Driver {
    /// `prepareModel`: validates, compiles for the device when it runs the whole model, and
    /// always prepares the CPU plan too (the fallback if the device goes away). With a
    /// driver-managed cache (a state directory), a model prepared before is taken from it.
    pub fn prepare_model(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
    ) -> Result<PreparedModel, ErrorStatus> {
        match self.cache.managed() {
            Some(m) => prepare_managed(
                self,
                m,
                self.cache.build_id(),
                model,
                preference,
                priority,
                deadline,
            ),
            None => self.prepare_model_uncached(model, preference, priority, deadline),
        }
    }

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
        if let Err(e) = files::write_file(*fd, bytes) {
            // The files written before this one are emptied too: no cache is left half saved.
            for fd in model_fds.iter().chain(&data_fds) {
                files::discard(*fd);
            }
            return Err(CacheError::ClientFile(e));
        }
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
fn prepare_managed(
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
            MemoryKind::Ashmem => (0, 0, 0),
            MemoryKind::MmapFd { prot, offset } => (1, prot, offset),
            MemoryKind::HardwareBufferBlob => (2, 0, 0),
            MemoryKind::HardwareBuffer => (3, 0, 0),
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
