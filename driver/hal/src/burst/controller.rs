//! The client side of a burst (`ExecutionBurstController`): serialises requests into the
//! request queue, reads results from the result queue, keeps the slot cache, and answers the
//! worker's `GetMemories` on a small callback thread (like a binder callback). One execution is
//! in flight at a time; a request whose packet does not fit the queue, or a burst whose channel
//! is gone, runs as a regular execution instead. A burst on a model of this process runs its
//! packets on the caller's thread instead ([`configure_local`]): the same packets, slot cache
//! and executor as the worker, without the queues, the channel or a second thread.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::packet::{self, BurstRequest, DATUM_SIZE, Datum};
use super::server::{Backoff, Executor, WorkerStats};
use super::{BurstError, BurstMessage, CHANNEL_LENGTH, SlotMemory};
use crate::fmq::{Fmq, NOT_EMPTY, NOT_FULL, WRITER_BUSY};
use crate::frame::{self, FdList};
use crate::types::*;

/// A regular execution of the same prepared model: the fallback.
pub type Fallback = Box<dyn Fn(&Request, MeasureTiming) -> ExecutionResult + Send + Sync>;

/// What the service said about the burst it started.
#[derive(Debug, Clone)]
pub struct BurstInfo {
    /// The worker's polling window (the controller polls its result queue as long).
    pub polling_window: Duration,
    /// How the worker sleeps.
    pub wait: String,
}

/// The two queues and the channel, as handed to the service by [`configure`]'s callback.
#[derive(Debug)]
pub struct BurstEnds<'a> {
    /// The request queue.
    pub request: &'a Fmq,
    /// The result queue.
    pub result: &'a Fmq,
    /// The service's end of the socketpair.
    pub channel: UnixStream,
}

/// How long the controller sleeps at a time while waiting for a result before it looks at
/// the channel's state again (the callback thread also wakes it at once when the channel dies).
const WAIT_SLICE: Duration = Duration::from_millis(250);

/// The key of a memory object in the slot cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MemoryKey {
    /// A shared memory: the identity of its fd object, its kind and size.
    Memory {
        fd: usize,
        kind: MemoryKind,
        size: u64,
    },
    /// A memory-domain token.
    Token(u32),
}

/// What a slot holds, for answering `GetMemories`. Memories are held weakly: the cache never
/// keeps a client's memory alive.
#[derive(Debug, Clone)]
enum SlotValue {
    Memory {
        fd: Weak<OwnedFd>,
        kind: MemoryKind,
        size: u64,
    },
    Token(u32),
}

/// What each slot holds, as the client answers `GetMemories` from it.
#[derive(Debug, Default)]
struct SlotTable {
    values: Mutex<HashMap<i32, SlotValue>>,
    /// Slots handed to the worker (or the local executor) so far.
    memories_sent: AtomicU64,
}

impl SlotTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, SlotValue>> {
        self.values.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pools of `slots` for the local executor, as the callback thread would send them.
    fn fetch(&self, slots: &[i32]) -> Result<Vec<MemoryPool>, BurstError> {
        let map = self.lock();
        self.memories_sent
            .fetch_add(slots.len() as u64, Ordering::Relaxed);
        slots
            .iter()
            .map(|s| match map.get(s) {
                Some(SlotValue::Memory { fd, kind, size }) => fd
                    .upgrade()
                    .map(|fd| {
                        MemoryPool::Memory(Memory {
                            kind: *kind,
                            fd,
                            size: *size,
                        })
                    })
                    .ok_or(BurstError::UnknownSlot(*s)),
                Some(SlotValue::Token(t)) => Ok(MemoryPool::Token(*t)),
                None => Err(BurstError::UnknownSlot(*s)),
            })
            .collect()
    }
}

#[derive(Debug)]
struct Shared {
    request: Fmq,
    result: Fmq,
    channel: UnixStream,
    send: Mutex<()>,
    slots: Arc<SlotTable>,
    invalid: AtomicBool,
}

impl Shared {
    fn send(&self, msg: &BurstMessage, fds: &FdList<'_>) -> bool {
        let Ok(body) = frame::encode(msg) else {
            return false;
        };
        let _g = self.send.lock().unwrap_or_else(PoisonError::into_inner);
        frame::send_frame(&self.channel, &body, fds.fds()).is_ok()
    }

    fn invalidate(&self) {
        self.invalid.store(true, Ordering::SeqCst);
        self.result.wake(NOT_EMPTY);
    }
}

#[derive(Debug, Default)]
struct Cache {
    by_key: HashMap<MemoryKey, i32>,
    free: Vec<i32>,
    next: i32,
}

/// How a burst reaches what runs its packets.
enum Link {
    /// The queues and the channel to a worker thread (the service's, or one of this process).
    Queues {
        shared: Arc<Shared>,
        callback: Option<JoinHandle<()>>,
        /// The worker's counters, when it runs in this process.
        stats: Option<Arc<WorkerStats>>,
    },
    /// The model is in this process: packets run on the caller's thread.
    Local {
        exec: Box<Mutex<Executor>>,
        /// Datums the result queue would hold (results beyond it fail as over the queues).
        result_length: usize,
    },
}

/// A burst on one prepared model.
pub struct ExecutionBurstController {
    link: Link,
    slots: Arc<SlotTable>,
    cache: Mutex<Cache>,
    fallback: Fallback,
    info: BurstInfo,
    fallbacks: AtomicU64,
    /// The pause in polling for results after polls that ended without one.
    backoff: Mutex<Backoff>,
}

impl std::fmt::Debug for ExecutionBurstController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionBurstController")
            .field("info", &self.info)
            .field("valid", &self.is_valid())
            .finish_non_exhaustive()
    }
}

/// A burst whose packets run on the caller's thread with `exec` (a model of this process):
/// the slot cache, packets and results are those of a burst over queues, results larger than
/// `result_length` datums fail alike, and no thread is crossed.
pub(crate) fn configure_local(
    fallback: Fallback,
    exec: Executor,
    result_length: u32,
    info: BurstInfo,
) -> ExecutionBurstController {
    ExecutionBurstController {
        link: Link::Local {
            exec: Box::new(Mutex::new(exec)),
            result_length: result_length as usize,
        },
        slots: Arc::default(),
        cache: Mutex::new(Cache::default()),
        fallback,
        info,
        fallbacks: AtomicU64::new(0),
        backoff: Mutex::default(),
    }
}

/// Creates the queues (`result_length` datums for the result queue; the request queue has
/// [`CHANNEL_LENGTH`]) and the socketpair, hands them to `start` (which sends them to the
/// service), and starts the callback thread.
pub fn configure(
    fallback: Fallback,
    result_length: u32,
    start: impl FnOnce(BurstEnds<'_>) -> Result<BurstInfo, ErrorStatus>,
) -> Result<ExecutionBurstController, ErrorStatus> {
    configure_observed(fallback, result_length, None, start)
}

/// [`configure`] for a worker of this process whose counters are `stats`.
pub(crate) fn configure_observed(
    fallback: Fallback,
    result_length: u32,
    stats: Option<Arc<WorkerStats>>,
    start: impl FnOnce(BurstEnds<'_>) -> Result<BurstInfo, ErrorStatus>,
) -> Result<ExecutionBurstController, ErrorStatus> {
    let fail = |e: &dyn std::fmt::Display| {
        tracing::debug!("burst setup: {e}");
        ErrorStatus::GeneralFailure
    };
    let request = Fmq::create(DATUM_SIZE as u32, CHANNEL_LENGTH).map_err(|e| fail(&e))?;
    let result = Fmq::create(DATUM_SIZE as u32, result_length).map_err(|e| fail(&e))?;
    let (mine, theirs) = UnixStream::pair().map_err(|e| fail(&e))?;
    let info = start(BurstEnds {
        request: &request,
        result: &result,
        channel: theirs,
    })?;
    let slots = Arc::<SlotTable>::default();
    let shared = Arc::new(Shared {
        request,
        result,
        channel: mine,
        send: Mutex::new(()),
        slots: slots.clone(),
        invalid: AtomicBool::new(false),
    });
    let s = shared.clone();
    let callback = std::thread::Builder::new()
        .name("nnaccel-burst-cb".into())
        .spawn(move || callback_thread(&s))
        .map_err(|e| fail(&e))?;
    Ok(ExecutionBurstController {
        link: Link::Queues {
            shared,
            callback: Some(callback),
            stats,
        },
        slots,
        cache: Mutex::new(Cache::default()),
        fallback,
        info,
        fallbacks: AtomicU64::new(0),
        backoff: Mutex::default(),
    })
}

/// Answers the worker's `GetMemories` until the channel closes; then invalidates the burst
/// and wakes a reader waiting on the result queue.
fn callback_thread(s: &Shared) {
    loop {
        let msg = match frame::recv_frame(&s.channel, 1 << 20) {
            Ok((body, _fds)) => frame::decode::<BurstMessage>(&body),
            Err(e) => {
                tracing::debug!("burst channel closed: {e}");
                break;
            }
        };
        let slots = match msg {
            Ok(BurstMessage::GetMemories { slots }) => slots,
            Ok(other) => {
                tracing::debug!("unexpected burst message {other:?}");
                break;
            }
            Err(e) => {
                tracing::debug!("bad burst message: {e}");
                break;
            }
        };
        let values: Vec<Option<SlotValue>> = {
            let map = s.slots.lock();
            slots.iter().map(|k| map.get(k).cloned()).collect()
        };
        // Send duplicates of the fds, and let go of the client's memories before sending:
        // the service may answer the execution as soon as it has the fds, and a memory the
        // client drops after that answer must be dead to the next `sweep`, which a strong
        // reference held here across the send would make racy.
        let held: Vec<Option<Memory>> = values
            .iter()
            .map(|v| match v {
                Some(SlotValue::Memory { fd, kind, size }) => {
                    let dup = fd.upgrade()?.try_clone();
                    match dup {
                        Ok(dup) => Some(Memory {
                            kind: *kind,
                            fd: Arc::new(dup),
                            size: *size,
                        }),
                        Err(e) => {
                            tracing::warn!("cannot duplicate a burst memory's fd: {e}");
                            None
                        }
                    }
                }
                _ => None,
            })
            .collect();
        let mut fds = FdList::default();
        let entries = values
            .iter()
            .zip(&held)
            .map(|(v, m)| match (v, m) {
                (_, Some(m)) => SlotMemory::Memory(fds.add(m)),
                (Some(SlotValue::Token(t)), _) => SlotMemory::Token(*t),
                _ => SlotMemory::Unknown,
            })
            .collect();
        s.slots
            .memories_sent
            .fetch_add(slots.len() as u64, Ordering::Relaxed);
        if !s.send(&BurstMessage::Memories { entries }, &fds) {
            break;
        }
    }
    s.invalidate();
}

fn key_of(pool: &MemoryPool) -> (MemoryKey, SlotValue) {
    match pool {
        MemoryPool::Memory(m) => (
            MemoryKey::Memory {
                fd: Arc::as_ptr(&m.fd) as usize,
                kind: m.kind,
                size: m.size,
            },
            SlotValue::Memory {
                fd: Arc::downgrade(&m.fd),
                kind: m.kind,
                size: m.size,
            },
        ),
        MemoryPool::Token(t) => (MemoryKey::Token(*t), SlotValue::Token(*t)),
    }
}

impl ExecutionBurstController {
    /// What the service said about the burst.
    pub fn info(&self) -> &BurstInfo {
        &self.info
    }

    /// Whether the burst still works (false once the service or the channel is gone).
    pub fn is_valid(&self) -> bool {
        match &self.link {
            Link::Queues { shared, .. } => !shared.invalid.load(Ordering::SeqCst),
            Link::Local { .. } => true,
        }
    }

    /// Whether the burst's packets run on the caller's thread (a model of this process).
    pub fn runs_on_caller_thread(&self) -> bool {
        matches!(self.link, Link::Local { .. })
    }

    /// The counters of the burst's worker, when it is a thread of this process.
    pub fn worker_stats(&self) -> Option<&WorkerStats> {
        match &self.link {
            Link::Queues { stats, .. } => stats.as_deref(),
            Link::Local { .. } => None,
        }
    }

    /// Executions that ran as regular executions instead.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Slots the worker fetched with `GetMemories` so far.
    pub fn memories_sent(&self) -> u64 {
        self.slots.memories_sent.load(Ordering::Relaxed)
    }

    /// Whether the burst's worker is awake (polling or executing) rather than asleep on the
    /// futex, as it announces in the result queue's flag (`fmq::WRITER_BUSY`).
    /// Always false for a burst whose packets run on the caller's thread (it has no worker).
    pub fn worker_awake(&self) -> bool {
        match &self.link {
            Link::Queues { shared, .. } => shared.result.is_set(WRITER_BUSY),
            Link::Local { .. } => false,
        }
    }

    /// Slots in the cache.
    pub fn cached_slots(&self) -> usize {
        self.lock_cache().by_key.len()
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of each pool, allocating (and reusing freed) slots for new memories.
    fn slots_for(&self, cache: &mut Cache, pools: &[MemoryPool]) -> Vec<i32> {
        let mut out = Vec::with_capacity(pools.len());
        for pool in pools {
            let (key, value) = key_of(pool);
            if let Some(s) = cache.by_key.get(&key) {
                out.push(*s);
                continue;
            }
            self.sweep(cache);
            let slot = cache.free.pop().unwrap_or_else(|| {
                cache.next += 1;
                cache.next - 1
            });
            cache.by_key.insert(key, slot);
            self.slots.lock().insert(slot, value);
            out.push(slot);
        }
        out
    }

    /// Frees the slots of memories the client has dropped since.
    fn sweep(&self, cache: &mut Cache) {
        let dead: Vec<(MemoryKey, i32)> = {
            let slots = self.slots.lock();
            cache
                .by_key
                .iter()
                .filter(|(_, s)| {
                    matches!(slots.get(s), Some(SlotValue::Memory { fd, .. }) if fd.strong_count() == 0)
                })
                .map(|(k, s)| (*k, *s))
                .collect()
        };
        for (k, s) in dead {
            cache.by_key.remove(&k);
            self.release_slot(cache, s);
        }
    }

    fn release_slot(&self, cache: &mut Cache, slot: i32) {
        let known = self.slots.lock().remove(&slot).is_some();
        if known {
            cache.free.push(slot);
        }
        match &self.link {
            Link::Queues { shared, .. } => {
                shared.send(&BurstMessage::FreeMemory { slot }, &FdList::default());
            }
            Link::Local { exec, .. } => exec
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .free(slot),
        }
    }

    /// `freeMemory(slot)`: the service drops what it cached for the slot; the slot may be
    /// reused. Unknown and already freed slots are sent too (the service must cope).
    pub fn free_memory(&self, slot: i32) {
        let mut cache = self.lock_cache();
        cache.by_key.retain(|_, s| *s != slot);
        self.release_slot(&mut cache, slot);
    }

    /// The slot a memory has in the cache, if any.
    pub fn slot_of(&self, pool: &MemoryPool) -> Option<i32> {
        self.lock_cache().by_key.get(&key_of(pool).0).copied()
    }

    /// One execution over the burst; a regular execution when the packet does not fit or the
    /// burst is no longer valid.
    pub fn execute(&self, request: &Request, measure: MeasureTiming) -> ExecutionResult {
        let mut cache = self.lock_cache();
        // The answer to getMemories carries one fd per new slot, at most a frame's worth.
        if !self.is_valid() || request.pools.len() > frame::MAX_FDS_PER_FRAME {
            drop(cache);
            return self.fall_back(request, measure);
        }
        let slots = self.slots_for(&mut cache, &request.pools);
        let datums = packet::serialize_request(&BurstRequest {
            inputs: request.inputs.clone(),
            outputs: request.outputs.clone(),
            slots,
            measure,
        });
        if datums.len() > CHANNEL_LENGTH as usize {
            drop(cache);
            return self.fall_back(request, measure);
        }
        let answer = match &self.link {
            Link::Queues { shared, .. } => self.exchange(shared, &packet::to_bytes(&datums)),
            Link::Local {
                exec,
                result_length,
            } => Ok(self.run_local(exec, &datums, *result_length)),
        };
        match answer {
            Ok(result) => packet::deserialize_result(&result).unwrap_or_else(|e| {
                tracing::debug!("burst result: {e}");
                ExecutionResult::failure(ErrorStatus::GeneralFailure)
            }),
            Err(Exchange::NotSent) => {
                drop(cache);
                self.fall_back(request, measure)
            }
            Err(Exchange::Failed(s)) => ExecutionResult::failure(s),
        }
    }

    /// Sends raw bytes as a request packet and returns the raw result datums. For conformance
    /// tests and tools that must send what a well-behaved controller never would.
    pub fn execute_raw(&self, bytes: &[u8]) -> Result<Vec<Datum>, ErrorStatus> {
        let _cache = self.lock_cache();
        if !self.is_valid() {
            return Err(ErrorStatus::DeviceUnavailable);
        }
        match &self.link {
            Link::Queues { shared, .. } => self.exchange(shared, bytes).map_err(|e| match e {
                Exchange::NotSent => ErrorStatus::GeneralFailure,
                Exchange::Failed(s) => s,
            }),
            // What the request queue refuses to carry.
            Link::Local { .. }
                if bytes.len() % DATUM_SIZE != 0
                    || bytes.len() > CHANNEL_LENGTH as usize * DATUM_SIZE =>
            {
                Err(ErrorStatus::GeneralFailure)
            }
            Link::Local {
                exec,
                result_length,
            } => Ok(self.run_local(exec, &packet::from_bytes(bytes), *result_length)),
        }
    }

    /// Runs a request packet on this thread, as the worker would: an empty packet gets the
    /// worker's GENERAL_FAILURE; pools come from the slot table as `GetMemories` would.
    fn run_local(
        &self,
        exec: &Mutex<Executor>,
        datums: &[Datum],
        result_length: usize,
    ) -> Vec<Datum> {
        let mut exec = exec.lock().unwrap_or_else(PoisonError::into_inner);
        let result = exec.execute(datums, |unknown| self.slots.fetch(unknown));
        super::server::fit_result(&result, result_length)
    }

    fn fall_back(&self, request: &Request, measure: MeasureTiming) -> ExecutionResult {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        (self.fallback)(request, measure)
    }

    /// Writes one packet and waits for one result packet. Callers hold the cache lock, so one
    /// execution is in flight.
    fn exchange(&self, s: &Shared, bytes: &[u8]) -> Result<Vec<Datum>, Exchange> {
        // Busy from before the write until the result is read: the worker may poll for the
        // request meanwhile (and stops when the bit goes).
        s.request.announce(WRITER_BUSY);
        let r = self.send_and_wait(s, bytes);
        s.request.withdraw(WRITER_BUSY);
        r
    }

    fn send_and_wait(&self, s: &Shared, bytes: &[u8]) -> Result<Vec<Datum>, Exchange> {
        match s.request.write(bytes) {
            Ok(true) => s.request.wake(NOT_EMPTY),
            Ok(false) => return Err(Exchange::NotSent),
            Err(e) => {
                tracing::debug!("request queue: {e}");
                return Err(Exchange::NotSent);
            }
        }
        let window = self.info.polling_window;
        let sent = Instant::now();
        let until = sent + window;
        // As the worker does (`server::MAX_BACKOFF`): after polls that ended without the
        // result — the worker executing longer than the window, or not running — this side
        // sleeps at once for the next exchanges, 2, 4, … 64 of them, as with window 0.
        let mut backoff = self.backoff.lock().unwrap_or_else(PoisonError::into_inner);
        let mut may_poll = !window.is_zero() && !backoff.skip();
        let mut spun = false;
        loop {
            if s.result.available_to_read() > 0 {
                if spun {
                    backoff.answered();
                }
                return read_result(&s.result);
            }
            if s.invalid.load(Ordering::SeqCst) {
                return Err(Exchange::Failed(ErrorStatus::GeneralFailure));
            }
            // Poll while the worker is awake (its WRITER_BUSY in the result queue's flag), shows
            // it runs (it took the request, or it is within SPIN_GRACE of the write) and the
            // window lasts; a sleeping worker is woken by NOT_EMPTY and takes a while, and an
            // awake one that does not take the request may be waiting for this CPU, so the
            // client sleeps then. The worker setting or clearing the bit changes the word this
            // side sleeps on, so a sleep about to start looks again.
            let now = Instant::now();
            let running = s.result.is_set(WRITER_BUSY)
                && (s.request.available_to_read() == 0 || now < sent + super::server::SPIN_GRACE);
            if may_poll && running && now < until {
                spun = true;
                for _ in 0..super::server::SPINS_PER_LOOK {
                    if s.result.available_to_read() > 0 {
                        break;
                    }
                    std::hint::spin_loop();
                }
                continue;
            }
            if std::mem::take(&mut spun) {
                // At most one poll per exchange.
                backoff.given_up();
                may_poll = false;
            }
            let deadline = nnaccel_uapi::sys::deadline_after(WAIT_SLICE);
            match s.result.wait(NOT_EMPTY, Some(deadline)) {
                Ok(_) | Err(crate::fmq::FmqError::TimedOut) => {}
                Err(e) => {
                    tracing::debug!("result queue: {e}");
                    return Err(Exchange::Failed(ErrorStatus::GeneralFailure));
                }
            }
        }
    }
}

fn read_result(q: &Fmq) -> Result<Vec<Datum>, Exchange> {
    let bad = |why: BurstError| {
        tracing::debug!("burst result: {why}");
        let _ = q.discard_all();
        Exchange::Failed(ErrorStatus::GeneralFailure)
    };
    let datums = packet::read_packet(q, packet::result_packet_size).map_err(bad)?;
    q.wake(NOT_FULL);
    Ok(datums)
}

enum Exchange {
    /// Nothing reached the service: a regular execution can run instead.
    NotSent,
    /// The packet went; no good result came back.
    Failed(ErrorStatus),
}

impl Drop for ExecutionBurstController {
    fn drop(&mut self) {
        if let Link::Queues {
            shared, callback, ..
        } = &mut self.link
        {
            // The worker sees the channel close and frees the burst; the callback thread ends.
            let _ = rustix::net::shutdown(shared.channel.as_fd(), rustix::net::Shutdown::Both);
            if let Some(t) = callback.take() {
                let _ = t.join();
            }
        }
    }
}
