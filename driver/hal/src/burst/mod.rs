//! Burst executions over fast message queues (HAL 1.2 `IBurstContext`; `docs/burst.md`).
//!
//! The client creates a request and a result queue ([`crate::fmq`]) and a socketpair — the
//! burst's own channel — and sends `ConfigureBurst` with the two memfds and one end of the
//! socketpair on its service connection. The service starts one worker thread per burst
//! ([`server`]); the client's [`controller::ExecutionBurstController`] writes request packets
//! ([`packet`]) and reads result packets. On the burst channel the worker asks for unknown pool
//! slots (`GetMemories`) and the client answers, or frees a slot; either side seeing the channel
//! close tears its half of the burst down.

pub mod controller;
pub mod packet;
pub mod server;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::fmq::{Fmq, FmqError};
use crate::frame::{ProtocolError, WireMemory};
use crate::{ErrorStatus, PreparedModel};

pub use controller::{ExecutionBurstController, configure};

/// Datums in each of the burst's queues (the HAL's channel length).
pub const CHANNEL_LENGTH: u32 = 1024;
/// The polling window before a worker sleeps, unless the preference is LOW_POWER (then 0) or
/// the service's configuration or the burst says otherwise.
pub const DEFAULT_POLLING_WINDOW: Duration = Duration::from_micros(50);
/// Largest polling window a burst may ask for.
pub const MAX_POLLING_WINDOW: Duration = Duration::from_millis(10);
/// How long the worker waits for the client's answer to `GetMemories`.
pub const CALLBACK_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a burst packet or a burst's callback exchange failed. The execution it belongs to
/// answers GENERAL_FAILURE (`crate::error`); the message goes to the log.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BurstError {
    /// The queue's shared counters are corrupt.
    #[error("queue: {0}")]
    Queue(#[from] FmqError),
    /// The datums break the packet layout.
    #[error(transparent)]
    Packet(#[from] packet::PacketError),
    /// The burst's socket failed or carried a malformed frame.
    #[error("channel: {0}")]
    Channel(#[from] ProtocolError),
    /// The queue held no datum.
    #[error("no datum")]
    NoDatum,
    /// The first datum announces a packet the queue cannot hold.
    #[error("a packet of {size} datums does not fit the {capacity}-datum queue")]
    TooLarge {
        /// Announced size.
        size: usize,
        /// Queue capacity in datums.
        capacity: usize,
    },
    /// Fewer datums than announced.
    #[error("truncated packet of {0} datums")]
    Truncated(usize),
    /// More datums after a whole packet (one execution is in flight per burst).
    #[error("datums follow a packet of {0}")]
    TrailingDatums(usize),
    /// A pool slot below zero.
    #[error("negative slot {0}")]
    NegativeSlot(i32),
    /// A packet's new slots would pass the per-burst limit.
    #[error("{new} new slots with {cached} cached pass the {limit}-slot limit")]
    TooManySlots {
        /// Slots the packet adds.
        new: usize,
        /// Slots cached already.
        cached: usize,
        /// The limit.
        limit: usize,
    },
    /// The client answered getMemories with something else, or the wrong number of entries.
    #[error("bad getMemories answer: {0}")]
    BadAnswer(String),
    /// The client says it has no such slot.
    #[error("the client has no slot {0}")]
    UnknownSlot(i32),
}

/// What the client says a slot holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotMemory {
    /// Shared memory; its fd rides on the frame.
    Memory(WireMemory),
    /// A memory-domain token (1.3).
    Token(u32),
    /// The client knows no such slot.
    Unknown,
}

/// Messages on a burst's own socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BurstMessage {
    /// Service → client: the memories behind these slots (sorted, no duplicates).
    GetMemories {
        /// Slots.
        slots: Vec<i32>,
    },
    /// Client → service: the answer, one entry per slot asked for, in order.
    Memories {
        /// Entries.
        entries: Vec<SlotMemory>,
    },
    /// Client → service: forget a slot (its mapping and device buffer go).
    FreeMemory {
        /// Slot.
        slot: i32,
    },
}

/// What a client asks of a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstConfig {
    /// The worker's polling window in µs; None lets the service choose from the execution
    /// preference (0 for LOW_POWER, its configured default otherwise).
    pub polling_window_us: Option<u32>,
    /// Datums in the result queue ([`CHANNEL_LENGTH`] normally; conformance tests use 8).
    pub result_length: u32,
}

impl Default for BurstConfig {
    fn default() -> Self {
        Self {
            polling_window_us: None,
            result_length: CHANNEL_LENGTH,
        }
    }
}

/// A burst on a model prepared in this process: its packets run on the caller's thread with
/// the same slot cache, packet checks and executor as a worker's, without crossing a thread.
pub(crate) fn configure_in_process(
    model: &PreparedModel,
    config: BurstConfig,
) -> Result<ExecutionBurstController, ErrorStatus> {
    let window = window_of(model, config);
    Ok(controller::configure_local(
        fallback_of(model),
        server::Executor::new(model.clone(), crate::LOCAL_OWNER),
        config.result_length,
        controller::BurstInfo {
            polling_window: window,
            wait: IN_CALLER_THREAD.into(),
        },
    ))
}

/// What [`controller::BurstInfo::wait`] says of a burst that runs on the caller's thread.
pub const IN_CALLER_THREAD: &str = "nothing (no worker: packets run on the caller's thread)";

/// The polling window of a burst on a model of this process (no service configuration).
fn window_of(model: &PreparedModel, config: BurstConfig) -> Duration {
    server::polling_window(
        config.polling_window_us,
        model.preference(),
        DEFAULT_POLLING_WINDOW,
    )
}

fn fallback_of(model: &PreparedModel) -> controller::Fallback {
    let fallback_model = model.clone();
    Box::new(move |r, m| fallback_model.execute_synchronously(r, m, None))
}

/// A burst on a model prepared in this process over the queues, the channel and a worker
/// thread, as through the service but without the socket: for tests of the worker and for
/// measurements. Its worker's counters are [`ExecutionBurstController::worker_stats`].
pub fn configure_in_process_over_queues(
    model: &PreparedModel,
    config: BurstConfig,
) -> Result<ExecutionBurstController, ErrorStatus> {
    let window = window_of(model, config);
    let stats = std::sync::Arc::<server::WorkerStats>::default();
    let worker_stats = stats.clone();
    controller::configure_observed(
        fallback_of(model),
        config.result_length,
        Some(stats),
        |ends| {
            let peer = |q: &Fmq| {
                let fd = q
                    .fd()
                    .try_clone_to_owned()
                    .map_err(|_| ErrorStatus::GeneralFailure)?;
                Fmq::from_fd(fd, q.descriptor(), packet::DATUM_SIZE as u32)
                    .map_err(|_| ErrorStatus::GeneralFailure)
            };
            let wait = server::start_observed(
                model.clone(),
                crate::LOCAL_OWNER,
                (peer(ends.request)?, peer(ends.result)?),
                ends.channel,
                window,
                None,
                None,
                worker_stats,
            )
            .map_err(|_| ErrorStatus::GeneralFailure)?;
            Ok(controller::BurstInfo {
                polling_window: window,
                wait: wait.describe().into(),
            })
        },
    )
}
