//! The service side of the caching messages: cache handles arrive as lists of fd indexes into
//! the frame's fds (each fd used once), become [`CacheHandle`]s for the driver.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nnaccel_hal::cache::{CacheFiles, CacheHandle};
use nnaccel_hal::{
    Deadline, Driver, ErrorStatus, ExecutionPreference, Model, PreparedModel, Priority,
};
use nnaccel_protocol::{ProtocolError, ReceivedFds, WireCacheFiles, WireModel, model_from_wire};

/// Driver-managed cache entries on the wire: (key, bytes, last used).
pub(crate) type WireEntries = Vec<(String, u64, u64)>;

/// A failed call: its status and message.
pub(crate) type Refusal = (ErrorStatus, String);

fn take_handles(
    fds: &mut ReceivedFds,
    handles: &[Vec<u32>],
) -> Result<Vec<Vec<Arc<OwnedFd>>>, ProtocolError> {
    handles
        .iter()
        .map(|h| {
            h.iter()
                .map(|i| fds.take_fd(*i as usize).map(Arc::new))
                .collect()
        })
        .collect()
}

/// Takes the cache handles' fds out of the frame and lends them to `prepare` as
/// [`CacheFiles`].
fn with_cache_files<T>(
    fds: &mut ReceivedFds,
    cache: &WireCacheFiles,
    prepare: impl FnOnce(CacheFiles<'_>) -> T,
) -> Result<T, Refusal> {
    let model = take_handles(fds, &cache.model).map_err(invalid)?;
    let data = take_handles(fds, &cache.data).map_err(invalid)?;
    let (model, data) = (borrow(&model), borrow(&data));
    Ok(prepare(CacheFiles {
        model: &model,
        data: &data,
        token: &cache.token,
    }))
}

fn borrow(handles: &[Vec<Arc<OwnedFd>>]) -> Vec<CacheHandle<'_>> {
    handles
        .iter()
        .map(|h| h.iter().map(|f| f.as_fd()).collect())
        .collect()
}

fn codes(preference: i32, priority: i32) -> Result<(ExecutionPreference, Priority), Refusal> {
    match (
        ExecutionPreference::from_code(preference),
        Priority::from_code(priority),
    ) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err((
            ErrorStatus::InvalidArgument,
            "unknown preference or priority".into(),
        )),
    }
}

fn invalid(e: ProtocolError) -> Refusal {
    (ErrorStatus::InvalidArgument, e.to_string())
}

/// `PrepareModelWithCache`; `admit` checks the model (limits, budgets) before it is prepared
/// and what it returns comes back with the prepared model.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare_with_cache<T>(
    driver: &Driver,
    fds: &mut ReceivedFds,
    model: WireModel,
    preference: i32,
    priority: i32,
    deadline: Option<Deadline>,
    cache: &WireCacheFiles,
    admit: &dyn Fn(&Model) -> Result<T, Refusal>,
) -> Result<(PreparedModel, T), Refusal> {
    let model = model_from_wire(model, fds).map_err(invalid)?;
    let (preference, priority) = codes(preference, priority)?;
    let admitted = admit(&model)?;
    let pm = with_cache_files(fds, cache, |files| {
        driver.prepare_model_with_cache(&model, preference, priority, deadline, files)
    })?
    .map_err(|s| (s, "preparation failed".into()))?;
    Ok((pm, admitted))
}

/// `PrepareModelFromCache`.
pub(crate) fn prepare_from_cache(
    driver: &Driver,
    fds: &mut ReceivedFds,
    preference: i32,
    priority: i32,
    deadline: Option<Deadline>,
    cache: &WireCacheFiles,
) -> Result<PreparedModel, Refusal> {
    let (preference, priority) = codes(preference, priority)?;
    with_cache_files(fds, cache, |files| {
        driver.prepare_model_from_cache(preference, priority, deadline, files)
    })?
    .map_err(|s| (s, "preparation from the cache failed".into()))
}

/// `CacheList`: (enabled, entries).
pub fn list(driver: &Driver) -> Result<(bool, WireEntries), Refusal> {
    let Some(m) = driver.cache_state().managed() else {
        return Ok((false, Vec::new()));
    };
    let entries = m
        .list()
        .map_err(|e| (ErrorStatus::GeneralFailure, e.to_string()))?;
    Ok((
        true,
        entries
            .into_iter()
            .map(|e| (e.key, e.bytes, e.last_used))
            .collect(),
    ))
}

/// `CacheClear`: entries removed.
pub fn clear(driver: &Driver) -> Result<u64, Refusal> {
    match driver.cache_state().managed() {
        Some(m) => m
            .clear()
            .map(|n| n as u64)
            .map_err(|e| (ErrorStatus::GeneralFailure, e.to_string())),
        None => Ok(0),
    }
}
