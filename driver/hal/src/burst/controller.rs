//! The client side of a burst (`ExecutionBurstController`): serialises requests into the
//! request queue, reads results from the result queue, keeps the slot cache, and answers the
//! worker's `GetMemories` on a small callback thread (like a binder callback). One execution is
//! in flight at a time; a request whose packet does not fit the queue, or a burst whose channel
//! is gone, runs as a regular execution instead.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::packet::{self, BurstRequest, DATUM_SIZE, Datum};
use super::{BurstMessage, CHANNEL_LENGTH, SlotMemory};
use crate::fmq::{Fmq, NOT_EMPTY, NOT_FULL};
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

#[derive(Debug)]
struct Shared {
    request: Fmq,
    result: Fmq,
    channel: UnixStream,
    send: Mutex<()>,
    slots: Mutex<HashMap<i32, SlotValue>>,
    invalid: AtomicBool,
    memories_sent: AtomicU64,
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

/// A burst on one prepared model.
pub struct ExecutionBurstController {
    shared: Arc<Shared>,
    cache: Mutex<Cache>,
    fallback: Fallback,
    info: BurstInfo,
    callback: Option<JoinHandle<()>>,
    fallbacks: AtomicU64,
}

impl std::fmt::Debug for ExecutionBurstController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionBurstController")
            .field("info", &self.info)
            .field("invalid", &self.shared.invalid.load(Ordering::Relaxed))
            .finish_non_exhaustive()
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
    let shared = Arc::new(Shared {
        request,
        result,
        channel: mine,
        send: Mutex::new(()),
        slots: Mutex::new(HashMap::new()),
        invalid: AtomicBool::new(false),
        memories_sent: AtomicU64::new(0),
    });
    let s = shared.clone();
    let callback = std::thread::Builder::new()
        .name("nnaccel-burst-cb".into())
        .spawn(move || callback_thread(&s))
        .map_err(|e| fail(&e))?;
    Ok(ExecutionBurstController {
        shared,
        cache: Mutex::new(Cache::default()),
        fallback,
        info,
        callback: Some(callback),
        fallbacks: AtomicU64::new(0),
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
            let map = s.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.iter().map(|k| map.get(k).cloned()).collect()
        };
        // Hold the memories alive while their fds are sent.
        let held: Vec<Option<Memory>> = values
            .iter()
            .map(|v| match v {
                Some(SlotValue::Memory { fd, kind, size }) => fd.upgrade().map(|fd| Memory {
                    kind: *kind,
                    fd,
                    size: *size,
                }),
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
        s.memories_sent
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
        !self.shared.invalid.load(Ordering::SeqCst)
    }

    /// Executions that ran as regular executions instead.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Slots the worker fetched with `GetMemories` so far.
    pub fn memories_sent(&self) -> u64 {
        self.shared.memories_sent.load(Ordering::Relaxed)
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
            self.shared
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(slot, value);
            out.push(slot);
        }
        out
    }

    /// Frees the slots of memories the client has dropped since.
    fn sweep(&self, cache: &mut Cache) {
        let dead: Vec<(MemoryKey, i32)> = {
            let slots = self
                .shared
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
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
        let known = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&slot)
            .is_some();
        if known {
            cache.free.push(slot);
        }
        self.shared
            .send(&BurstMessage::FreeMemory { slot }, &FdList::default());
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
        if datums.len() > self.shared.request.capacity() {
            drop(cache);
            return self.fall_back(request, measure);
        }
        match self.exchange(&packet::to_bytes(&datums)) {
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
        self.exchange(bytes).map_err(|e| match e {
            Exchange::NotSent => ErrorStatus::GeneralFailure,
            Exchange::Failed(s) => s,
        })
    }

    fn fall_back(&self, request: &Request, measure: MeasureTiming) -> ExecutionResult {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        (self.fallback)(request, measure)
    }

    /// Writes one packet and waits for one result packet. Callers hold the cache lock, so one
    /// execution is in flight.
    fn exchange(&self, bytes: &[u8]) -> Result<Vec<Datum>, Exchange> {
        let s = &self.shared;
        match s.request.write(bytes) {
            Ok(true) => s.request.wake(NOT_EMPTY),
            Ok(false) => return Err(Exchange::NotSent),
            Err(e) => {
                tracing::debug!("request queue: {e}");
                return Err(Exchange::NotSent);
            }
        }
        let until = Instant::now() + self.info.polling_window;
        loop {
            if s.result.available_to_read() > 0 {
                return self.read_result();
            }
            if !self.is_valid() {
                return Err(Exchange::Failed(ErrorStatus::GeneralFailure));
            }
            if Instant::now() < until {
                std::thread::yield_now();
                continue;
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

    fn read_result(&self) -> Result<Vec<Datum>, Exchange> {
        let q = &self.shared.result;
        let bad = |why: super::BurstError| {
            tracing::debug!("burst result: {why}");
            let _ = q.discard_all();
            Exchange::Failed(ErrorStatus::GeneralFailure)
        };
        let datums = packet::read_packet(q, packet::result_packet_size).map_err(bad)?;
        q.wake(NOT_FULL);
        Ok(datums)
    }
}

enum Exchange {
    /// Nothing reached the service: a regular execution can run instead.
    NotSent,
    /// The packet went; no good result came back.
    Failed(ErrorStatus),
}

impl Drop for ExecutionBurstController {
    fn drop(&mut self) {
        // The worker sees the channel close and frees the burst; the callback thread ends.
        let _ = rustix::net::shutdown(self.shared.channel.as_fd(), rustix::net::Shutdown::Both);
        if let Some(t) = self.callback.take() {
            let _ = t.join();
        }
    }
}
