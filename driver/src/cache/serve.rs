//! The service side of the caching messages: cache handles arrive as lists of fd indexes into
//! the frame's fds (each fd used once), become [`CacheHandle`]s for the driver.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::{CacheHandle, Token};
use crate::hal::{Deadline, Driver, ErrorStatus, ExecutionPreference, PreparedModel, Priority};
use crate::protocol::{ProtocolError, ReceivedFds, WireModel, model_from_wire};

/// Driver-managed cache entries on the wire: (key, bytes, last used).
pub type WireEntries = Vec<(String, u64, u64)>;

/// A failed call: its status and message.
pub type Refusal = (ErrorStatus, String);

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

/// The model-cache and data-cache handles' fds.
#[allow(clippy::type_complexity)]
fn take_both(
    fds: &mut ReceivedFds,
    model_cache: &[Vec<u32>],
    data_cache: &[Vec<u32>],
) -> Result<(Vec<Vec<Arc<OwnedFd>>>, Vec<Vec<Arc<OwnedFd>>>), Refusal> {
    Ok((
        take_handles(fds, model_cache).map_err(invalid)?,
        take_handles(fds, data_cache).map_err(invalid)?,
    ))
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

/// `PrepareModelWithCache`.
#[allow(clippy::too_many_arguments)]
pub fn prepare_with_cache(
    driver: &Driver,
    fds: &mut ReceivedFds,
    model: WireModel,
    preference: i32,
    priority: i32,
    deadline: Option<Deadline>,
    model_cache: &[Vec<u32>],
    data_cache: &[Vec<u32>],
    token: &Token,
) -> Result<PreparedModel, Refusal> {
    let model = model_from_wire(model, fds).map_err(invalid)?;
    let (preference, priority) = codes(preference, priority)?;
    let (mc, dc) = take_both(fds, model_cache, data_cache)?;
    driver
        .prepare_model_with_cache(
            &model,
            preference,
            priority,
            deadline,
            &borrow(&mc),
            &borrow(&dc),
            token,
        )
        .map_err(|s| (s, "preparation failed".into()))
}

/// `PrepareModelFromCache`.
#[allow(clippy::too_many_arguments)]
pub fn prepare_from_cache(
    driver: &Driver,
    fds: &mut ReceivedFds,
    preference: i32,
    priority: i32,
    deadline: Option<Deadline>,
    model_cache: &[Vec<u32>],
    data_cache: &[Vec<u32>],
    token: &Token,
) -> Result<PreparedModel, Refusal> {
    let (preference, priority) = codes(preference, priority)?;
    let (mc, dc) = take_both(fds, model_cache, data_cache)?;
    driver
        .prepare_model_from_cache(
            preference,
            priority,
            deadline,
            &borrow(&mc),
            &borrow(&dc),
            token,
        )
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
