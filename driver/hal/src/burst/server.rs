//! The service side of a burst: one worker thread per burst. It takes request packets from the
//! request queue, resolves their pool slots (asking the client for unknown ones with one
//! `GetMemories` per packet), runs the request through the prepared model's normal validation
//! and execution, and writes the result packet. It waits with io_uring — a `FutexWait` on the
//! request queue's event flag together with a poll on the burst's socket, in one ring — or,
//! where the kernel lacks the futex opcodes, with the futex syscall in slices and a poll of the
//! socket between them. The socket closing (the client released the burst or died) ends the
//! worker, which frees everything the burst held.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::packet::{self, DATUM_SIZE, Datum};
use super::{BurstError, BurstMessage, CALLBACK_TIMEOUT, SlotMemory};
use crate::driver::BurstCache;
use crate::fmq::{Fmq, NOT_EMPTY, NOT_FULL, WRITER_BUSY};
use crate::frame::{self, ProtocolError, ReceivedFds};
use crate::live_sockets::LiveSockets;
use crate::types::*;
use crate::{MemoryPool, OwnerId, PreparedModel};

/// `FUTEX2_SIZE_U32`: a 32-bit futex word, shared (no `FUTEX2_PRIVATE`: the peer is another
/// process).
const FUTEX2_SIZE_U32: u32 = 0x02;
/// Sleep slice of the plain-futex fallback, between looks at the socket.
const FALLBACK_SLICE: Duration = Duration::from_millis(100);
/// Bursts one process serves at once (each is a thread, two queue mappings and a socket);
/// `ConfigureBurst` beyond it is RESOURCE_EXHAUSTED_TRANSIENT.
pub const MAX_ACTIVE_BURSTS: usize = 256;
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Holds one of the [`MAX_ACTIVE_BURSTS`] places while a worker lives.
struct Place;

impl Place {
    fn take() -> Option<Self> {
        ACTIVE
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_ACTIVE_BURSTS).then_some(n + 1)
            })
            .ok()
            .map(|_| Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The burst workers one service started: a stopping service shuts each worker's socket down
/// (the worker sees the channel close, as when its client goes, and frees the burst) and waits
/// for them a bounded time. The set also holds each client to its share of the
/// [`MAX_ACTIVE_BURSTS`] places, so that one client cannot take them all.
pub type Workers = LiveSockets;

const UD_FUTEX: u64 = 1;
const UD_POLL: u64 = 2;

/// How burst workers sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMechanism {
    /// io_uring `FUTEX_WAIT` plus a poll on the burst's socket, in one ring.
    IoUring,
    /// The futex syscall in slices, the socket polled between slices.
    Futex,
}

impl WaitMechanism {
    /// What the logs and `BurstConfigured` say.
    pub fn describe(self) -> &'static str {
        match self {
            Self::IoUring => "io_uring FutexWait + poll on the burst socket",
            Self::Futex => {
                "futex syscall (io_uring FutexWait unavailable), socket polled every 100 ms"
            }
        }
    }
}

static MECHANISM: OnceLock<WaitMechanism> = OnceLock::new();

/// Makes every burst worker of this process use the futex syscall (`nnaccel-hald
/// --burst-wait futex`), as on a kernel without io_uring's futex opcodes. Must come before the
/// first burst; false if the mechanism was already chosen otherwise.
pub fn force_futex_wait() -> bool {
    *MECHANISM.get_or_init(|| {
        tracing::info!(
            "burst workers wait with {}",
            WaitMechanism::Futex.describe()
        );
        WaitMechanism::Futex
    }) == WaitMechanism::Futex
}

/// Probes once whether io_uring exists and has `FUTEX_WAIT` (Linux 6.7+).
pub fn wait_mechanism() -> WaitMechanism {
    *MECHANISM.get_or_init(|| {
        let have = io_uring::IoUring::new(4).is_ok_and(|ring| {
            let mut probe = io_uring::Probe::new();
            ring.submitter().register_probe(&mut probe).is_ok()
                && probe.is_supported(io_uring::opcode::FutexWait::CODE)
                && probe.is_supported(io_uring::opcode::PollAdd::CODE)
        });
        let m = if have {
            WaitMechanism::IoUring
        } else {
            WaitMechanism::Futex
        };
        tracing::info!("burst workers wait with {}", m.describe());
        m
    })
}

/// How long a poller waits for a sign that its peer is running (the peer taking what it was
/// given, or writing what it is about to) before it sleeps instead: a peer that announced it is
/// busy but does not move may be waiting for this very CPU.
pub(crate) const SPIN_GRACE: Duration = Duration::from_micros(3);

/// How long the worker polls for the client to take a result, and then for its next request
/// (a client executing in a loop, woken or spinning, does each within a few µs).
pub(crate) const REQUEST_GRACE: Duration = Duration::from_micros(20);

/// `spin_loop` hints between looks at the clock while polling (a look at the queue is two
/// atomic loads; the clock is a vDSO call).
pub(crate) const SPINS_PER_LOOK: u32 = 32;

/// Wake-ups in a row that found no packet (`NOT_EMPTY` set, the queue empty) after which the
/// worker takes its client for one that floods the flag and ends the burst. A well-behaved
/// client sets the flag once per packet, so at most one wake-up per packet finds it stale.
pub(crate) const MAX_EMPTY_WAKES: u32 = 1000;

/// Pool slots one burst may have cached at once. Each may hold an fd and a mapping in the
/// service, so a client naming ever new slots without freeing them would otherwise exhaust the
/// service's fds; a packet that would pass the limit gets GENERAL_FAILURE (freeMemory makes
/// room).
pub const MAX_SLOTS_PER_BURST: usize = 1024;

/// Largest queue, in datums, a burst may bring (64 times the HAL's channel length): the worker
/// reads a whole packet into memory, so the queue's size bounds what one packet makes the
/// service allocate (about 3 MiB here, where an FMQ may be up to 64 MiB).
pub const MAX_QUEUE_DATUMS: u32 = 64 * super::CHANNEL_LENGTH;

/// Why the worker stops.
#[derive(Debug, thiserror::Error)]
enum Stop {
    /// The client closed its end or broke the channel.
    #[error("channel: {0}")]
    ChannelClosed(#[from] ProtocolError),
    /// The client set `NOT_EMPTY` again and again without writing a packet.
    #[error("the client set NOT_EMPTY {0} times without writing a packet")]
    EmptyWakes(u32),
    /// The client wrote packet after packet that does not parse.
    #[error("{0} bad packets in a row")]
    BadPackets(u32),
}

/// Bad packets in a row (ones that do not parse, each answered GENERAL_FAILURE) after which
/// the worker ends the burst: a well-behaved client never writes one, and a queue that fills
/// itself again (junk written as fast as it is read) must not keep the worker busy for ever.
pub(crate) const MAX_BAD_PACKETS: u32 = 10_000;

/// What a worker did, for tests and logs: how often it polled and how often it slept.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Polls (bounded spins) started because the client announced it was busy.
    pub polls: AtomicU64,
    /// Polls given up without a packet while the client still said it was busy (the window
    /// passed, or the client showed no progress for [`SPIN_GRACE`]).
    pub polls_timed_out: AtomicU64,
    /// Times the worker went to sleep on the futex (or the ring), counted before it clears its
    /// busy bit.
    pub sleeps: AtomicU64,
    /// Packets for which the worker did not poll although the client said it was busy,
    /// because its recent polls were given up (see [`MAX_BACKOFF`]).
    pub polls_skipped: AtomicU64,
    /// Packets served.
    pub packets: AtomicU64,
}

impl WorkerStats {
    /// The counters in one line, as the service logs them when a worker ends (`docs/burst.md`):
    /// `worker: P packets, N polls (G given up, S skipped), Z sleeps`.
    pub fn summary(&self) -> String {
        format!(
            "worker: {} packets, {} polls ({} given up, {} skipped), {} sleeps",
            self.packets.load(Ordering::Relaxed),
            self.polls.load(Ordering::Relaxed),
            self.polls_timed_out.load(Ordering::Relaxed),
            self.polls_skipped.load(Ordering::Relaxed),
            self.sleeps.load(Ordering::Relaxed),
        )
    }
}

/// A cached slot: the pool the client named, kept for the life of the burst.
#[derive(Debug)]
struct Slot {
    pool: MemoryPool,
}

/// What runs a burst's packets — in the service's worker, or on the caller's thread for a
/// burst in process: the model, the cached slots and what the driver keeps for them.
pub(crate) struct Executor {
    model: PreparedModel,
    /// The burst's client, whose memory-domain tokens its requests may name.
    owner: OwnerId,
    slots: HashMap<i32, Slot>,
    /// Per slot the BO and the mapping, and the burst's own high-performance device queue.
    cache: BurstCache,
}

impl Executor {
    pub(crate) fn new(model: PreparedModel, owner: OwnerId) -> Self {
        Self {
            model,
            owner,
            slots: HashMap::new(),
            cache: BurstCache::new(),
        }
    }

    /// Runs one request packet. `fetch` gets the pools of the slots not cached (sorted,
    /// deduplicated, non-negative, within [`MAX_SLOTS_PER_BURST`]), one per slot in order.
    pub(crate) fn execute(
        &mut self,
        datums: &[Datum],
        fetch: impl FnOnce(&[i32]) -> Result<Vec<MemoryPool>, BurstError>,
    ) -> ExecutionResult {
        let req = match packet::deserialize_request(datums) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("burst: {e}");
                return ExecutionResult::failure(ErrorStatus::GeneralFailure);
            }
        };
        if let Err(e) = self.resolve_slots(&req.slots, fetch) {
            tracing::debug!("burst: {e}");
            return ExecutionResult::failure(ErrorStatus::GeneralFailure);
        }
        let mut pools = Vec::with_capacity(req.slots.len());
        for s in &req.slots {
            match self.slots.get(s) {
                Some(slot) => pools.push(slot.pool.clone()),
                None => return ExecutionResult::failure(ErrorStatus::GeneralFailure),
            }
        }
        let request = Request {
            inputs: req.inputs,
            outputs: req.outputs,
            pools,
        };
        self.model.execute_in_burst(
            self.owner,
            &request,
            req.measure,
            &mut self.cache,
            &req.slots,
        )
    }

    /// Fetches the slots not in the cache, all at once.
    fn resolve_slots(
        &mut self,
        slots: &[i32],
        fetch: impl FnOnce(&[i32]) -> Result<Vec<MemoryPool>, BurstError>,
    ) -> Result<(), BurstError> {
        let mut unknown: Vec<i32> = slots
            .iter()
            .copied()
            .filter(|s| !self.slots.contains_key(s))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort_unstable();
        unknown.dedup();
        if let Some(s) = unknown.iter().find(|s| **s < 0) {
            return Err(BurstError::NegativeSlot(*s));
        }
        if self.slots.len() + unknown.len() > MAX_SLOTS_PER_BURST {
            return Err(BurstError::TooManySlots {
                new: unknown.len(),
                cached: self.slots.len(),
                limit: MAX_SLOTS_PER_BURST,
            });
        }
        let pools = fetch(&unknown)?;
        if pools.len() != unknown.len() {
            return Err(BurstError::BadAnswer(format!(
                "{} memories for {} slots",
                pools.len(),
                unknown.len()
            )));
        }
        for (slot, pool) in unknown.into_iter().zip(pools) {
            self.slots.insert(slot, Slot { pool });
        }
        Ok(())
    }

    /// freeMemory: forgets the slot's pool, BO and mapping.
    pub(crate) fn free(&mut self, slot: i32) {
        self.cache.forget(slot);
        match self.slots.remove(&slot) {
            Some(_) => tracing::trace!("burst slot {slot} freed"),
            None => tracing::debug!("freeMemory of unknown slot {slot} ignored"),
        }
    }
}

/// The result packet for `result` in a result queue with room for `room` datums: a result
/// that does not fit is replaced by a GENERAL_FAILURE one (2 datums, as AOSP's server does).
pub(crate) fn fit_result(result: &ExecutionResult, room: usize) -> Vec<Datum> {
    let datums = packet::serialize_result(result);
    if datums.len() <= room {
        return datums;
    }
    tracing::debug!(
        "a {}-datum result does not fit the result queue; answering GENERAL_FAILURE",
        datums.len()
    );
    packet::serialize_result(&ExecutionResult::failure(ErrorStatus::GeneralFailure))
}

struct Worker {
    exec: Executor,
    request: Fmq,
    result: Fmq,
    channel: UnixStream,
    window: Duration,
    executions: u64,
    /// Wake-ups since the last packet that found `NOT_EMPTY` set and no data.
    empty_wakes: u32,
    /// Packets in a row that did not parse.
    bad_packets: u32,
    /// Whether the worker polled since the last packet (it polls at most once per packet, so
    /// a client that stays busy without writing, or died busy, costs one window, not one per
    /// wake-up).
    polled: bool,
    /// When the client's recent polls were given up: see [`Backoff`].
    backoff: Backoff,
    stats: Arc<WorkerStats>,
}

/// Most packets the worker goes without polling after polls its client left unanswered: each
/// poll given up doubles the pause (2, 4, … this), each poll that gets its packet halves it.
///
/// A poll the client says it is busy for but does not answer — it takes neither the result
/// nor writes a request within [`REQUEST_GRACE`] — means the client is not running: it keeps
/// its bit set while it sleeps on the result queue, and on a machine with no idle CPU, once
/// woken, it waits for a CPU, often the worker's own, behind the poll; each such poll adds its
/// whole grace to the execution (issue 18: through the service under load, the default window
/// cost 20 µs more than window 0, every poll given up). After a poll given up the worker
/// sleeps at once for the next packets, as with window 0, and tries polling again after 2, 4,
/// … up to this many packets; a machine that frees up is noticed within that many packets.
/// While paused it also leaves its `WRITER_BUSY` clear when awake, so the client does not spin
/// for its result either: a client spinning for a worker that sleeps at once after the result
/// writes its next request to a sleeping worker, and both then sleep on every execution (two
/// wake-ups where window 0 costs one; measured 1.34× window 0 on an idle machine before this).
/// The controller pauses its polls for results the same way.
pub const MAX_BACKOFF: u32 = 64;

/// A pause in polling after polls given up (the worker's, and the controller's for its
/// results).
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    /// Packets (exchanges, for the controller) still to go without polling.
    skip: u32,
    /// The pause after the next poll given up (0: none yet; then 2, 4, … [`MAX_BACKOFF`]).
    next: u32,
}

impl Backoff {
    /// Whether polls are paused (packets left to skip).
    pub(crate) fn pausing(&self) -> bool {
        self.skip > 0
    }

    /// Whether to skip this packet's poll (counting it down).
    pub(crate) fn skip(&mut self) -> bool {
        if self.skip == 0 {
            return false;
        }
        self.skip -= 1;
        true
    }

    /// A poll given up (the peer said it was busy but did not answer in time): pause longer.
    pub(crate) fn given_up(&mut self) {
        self.next = (self.next * 2).clamp(2, MAX_BACKOFF);
        self.skip = self.next;
    }

    /// A poll that got its packet: pause less next time.
    pub(crate) fn answered(&mut self) {
        self.next /= 2;
        if self.next < 2 {
            self.next = 0;
        }
    }
}

/// Starts a worker for a burst on `model`, for `owner`'s requests, registered in `workers`
/// (the service's, so that stopping it ends the worker) if given. Returns the wait mechanism
/// it uses. `keep` (a budget's charge, say) is dropped when the worker ends.
#[allow(clippy::too_many_arguments)]
pub fn start(
    model: PreparedModel,
    owner: OwnerId,
    request: Fmq,
    result: Fmq,
    channel: UnixStream,
    window: Duration,
    workers: Option<&Arc<Workers>>,
    keep: Option<Box<dyn std::any::Any + Send>>,
) -> io::Result<WaitMechanism> {
    start_observed(
        model,
        owner,
        (request, result),
        channel,
        window,
        workers,
        keep,
        Arc::default(),
    )
}

/// [`start`], counting what the worker does in `stats`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_observed(
    model: PreparedModel,
    owner: OwnerId,
    (request, result): (Fmq, Fmq),
    channel: UnixStream,
    window: Duration,
    workers: Option<&Arc<Workers>>,
    keep: Option<Box<dyn std::any::Any + Send>>,
    stats: Arc<WorkerStats>,
) -> io::Result<WaitMechanism> {
    let place = Place::take().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::QuotaExceeded,
            format!("{MAX_ACTIVE_BURSTS} bursts are running"),
        )
    })?;
    let registered = workers.map(|w| w.join(owner, &channel)).transpose()?;
    channel.set_read_timeout(Some(CALLBACK_TIMEOUT))?;
    channel.set_write_timeout(Some(CALLBACK_TIMEOUT))?;
    let mechanism = wait_mechanism();
    // Awake from the start (the client may poll for a result while this bit is set), until
    // the worker sleeps or ends.
    result.announce(WRITER_BUSY);
    let worker = Worker {
        exec: Executor::new(model, owner),
        request,
        result,
        channel,
        window,
        executions: 0,
        empty_wakes: 0,
        bad_packets: 0,
        polled: false,
        backoff: Backoff::default(),
        stats,
    };
    std::thread::Builder::new()
        .name("nnaccel-burst".into())
        .spawn(move || {
            worker.run(mechanism);
            drop(place);
            drop(registered);
            drop(keep);
        })?;
    Ok(mechanism)
}

/// The io_uring half of the wait: a ring with at most one FutexWait and one poll armed.
struct Uring {
    ring: io_uring::IoUring,
    futex_armed: bool,
    poll_armed: bool,
}

impl Worker {
    fn run(mut self, mechanism: WaitMechanism) {
        tracing::debug!(
            "burst worker started: polling window {:?}, waits with {}",
            self.window,
            mechanism.describe()
        );
        let mut uring = match mechanism {
            WaitMechanism::IoUring => match io_uring::IoUring::builder()
                .setup_coop_taskrun()
                .build(4)
                .or_else(|_| io_uring::IoUring::new(4))
            {
                Ok(ring) => Some(Uring {
                    ring,
                    futex_armed: false,
                    poll_armed: false,
                }),
                Err(e) => {
                    tracing::warn!(
                        "io_uring setup failed ({e}); this burst uses the futex syscall"
                    );
                    None
                }
            },
            WaitMechanism::Futex => None,
        };
        let stop = loop {
            match self.wait_for_work(uring.as_mut()) {
                Ok(true) => {
                    if let Err(s) = self.serve_packet() {
                        break s;
                    }
                }
                Ok(false) => {}
                Err(s) => break s,
            }
        };
        // The ring goes first: its pending FutexWait names the request queue's flag word.
        drop(uring);
        // Gone: no client may poll for this worker any more.
        self.result.withdraw(WRITER_BUSY);
        if let Stop::EmptyWakes(_) | Stop::BadPackets(_) = stop {
            tracing::warn!("burst ended: {stop}");
        }
        let why = stop;
        tracing::debug!(
            "burst worker ends after {} executions ({why}); {}; freeing {} slots ({} with a \
             BO or mapping){}",
            self.executions,
            self.stats.summary(),
            self.exec.slots.len(),
            self.exec.cache.len(),
            if self.exec.cache.has_device_queue() {
                " and its high-performance device queue"
            } else {
                ""
            }
        );
    }

    /// Ok(true): a packet is ready. Ok(false): woke for the socket (handled) or spuriously.
    fn wait_for_work(&mut self, uring: Option<&mut Uring>) -> Result<bool, Stop> {
        if self.request.available_to_read() > 0 {
            return Ok(true);
        }
        if self.poll() {
            return Ok(true);
        }
        // Deferred wake: a NOT_EMPTY set since the last look means data, or is stale (set for
        // a packet already served); taking it clears it, so the next take finds it clear.
        let word = loop {
            match self.request.take_bits(NOT_EMPTY) {
                Ok(_) if self.request.available_to_read() > 0 => return Ok(true),
                Ok(_) => self.count_empty_wake()?,
                Err(word) => break word,
            }
        };
        // Asleep from here: a client that writes now sleeps too rather than poll for a worker
        // that is not running. Withdrawing first and looking at the queue after means a packet
        // written before the withdrawal is seen here, and one written after finds the bit
        // clear and wakes the worker through NOT_EMPTY.
        self.stats.sleeps.fetch_add(1, Ordering::SeqCst);
        self.result.withdraw(WRITER_BUSY);
        if self.request.available_to_read() > 0 {
            if !self.backoff.pausing() {
                self.result.announce(WRITER_BUSY);
            }
            return Ok(true);
        }
        let socket_ready = match uring {
            Some(u) => self.sleep_uring(u, word),
            None => self.sleep_futex(word),
        };
        // Awake again; while its polls are paused the worker leaves its bit clear, so that the
        // client sleeps at once after writing, as with window 0, rather than spin for a worker
        // that will not spin for it.
        if !self.backoff.pausing() {
            self.result.announce(WRITER_BUSY);
        }
        if socket_ready {
            self.drain_channel()?;
        }
        Ok(self.request.available_to_read() > 0)
    }

    /// Polls the request queue, spinning with `spin_loop`, only while the client shows it is
    /// busy and running. It starts only if the client's `WRITER_BUSY` is set (from before it
    /// writes a request until it has read the result); the client must then take the last
    /// result within [`REQUEST_GRACE`] (a client woken from the futex needs a few µs; one that
    /// takes longer is not running: preempted, perhaps by this very poll on a shared CPU), and
    /// write its next request within [`REQUEST_GRACE`] of taking it, its bit never clear for
    /// [`SPIN_GRACE`] (a client between two executions of a loop clears and sets it again at
    /// once; an idle one leaves it clear). At most the window, at most once per packet, and not
    /// while backing off after polls given up ([`MAX_BACKOFF`]) unless the client has taken
    /// the result already. True when a packet is ready.
    fn poll(&mut self) -> bool {
        if self.window.is_zero() || self.polled || !self.request.is_set(WRITER_BUSY) {
            return false;
        }
        self.polled = true;
        // A client that has taken the result already is running on another CPU, about to
        // write its next request: worth a poll even while backing off.
        let taken_at_once = self.result.available_to_read() == 0;
        if !taken_at_once && self.backoff.skip() {
            self.stats.polls_skipped.fetch_add(1, Ordering::Relaxed);
            self.result.withdraw(WRITER_BUSY);
            return false;
        }
        self.result.announce(WRITER_BUSY);
        self.stats.polls.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let mut taken = taken_at_once.then_some(start);
        let mut last_busy = start;
        loop {
            for _ in 0..SPINS_PER_LOOK {
                if self.request.available_to_read() > 0 {
                    self.backoff.answered();
                    return true;
                }
                std::hint::spin_loop();
            }
            let now = Instant::now();
            if taken.is_none() && self.result.available_to_read() == 0 {
                taken = Some(now);
            }
            let busy = self.request.is_set(WRITER_BUSY);
            if busy {
                last_busy = now;
            }
            let give_up = match taken {
                None => now - start >= REQUEST_GRACE,
                Some(at) => now - at >= REQUEST_GRACE || now - last_busy >= SPIN_GRACE,
            };
            if give_up || now - start >= self.window {
                if self.request.available_to_read() > 0 {
                    self.backoff.answered();
                    return true;
                }
                if busy {
                    self.stats.polls_timed_out.fetch_add(1, Ordering::Relaxed);
                    self.backoff.given_up();
                }
                return false;
            }
        }
    }

    /// Counts a wake-up that found the flag set and no packet; too many in a row end the burst.
    fn count_empty_wake(&mut self) -> Result<(), Stop> {
        self.empty_wakes += 1;
        if self.empty_wakes > MAX_EMPTY_WAKES {
            return Err(Stop::EmptyWakes(self.empty_wakes));
        }
        Ok(())
    }

    /// Sleeps in the ring; returns whether the socket is readable (or closed).
    fn sleep_uring(&self, u: &mut Uring, word: u32) -> bool {
        let flag = self.request.flag();
        if !u.futex_armed {
            let op = io_uring::opcode::FutexWait::new(
                flag.as_ptr().cast_const(),
                u64::from(word),
                // Woken by NOT_EMPTY only: the worker's own NOT_FULL wakes leave it asleep.
                u64::from(NOT_EMPTY),
                FUTEX2_SIZE_U32,
            )
            .build()
            .user_data(UD_FUTEX);
            // SAFETY: the word lives in the request queue's mapping, which the worker owns and
            // which outlives the ring (`run` drops the ring first; dropping it cancels the
            // wait). The kernel only compares and hashes the word.
            if unsafe { u.ring.submission().push(&op) }.is_ok() {
                u.futex_armed = true;
            }
        }
        if !u.poll_armed {
            let op = io_uring::opcode::PollAdd::new(
                io_uring::types::Fd(self.channel.as_raw_fd()),
                (libc::POLLIN | libc::POLLRDHUP | libc::POLLHUP) as u32,
            )
            .build()
            .user_data(UD_POLL);
            // SAFETY: the socket fd stays open for the worker's life, beyond the ring's.
            if unsafe { u.ring.submission().push(&op) }.is_ok() {
                u.poll_armed = true;
            }
        }
        if !u.futex_armed || !u.poll_armed {
            return self.sleep_futex(word);
        }
        loop {
            match u.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("io_uring wait failed: {e}");
                    return self.sleep_futex(word);
                }
            }
        }
        let mut socket_ready = false;
        for cqe in u.ring.completion() {
            match cqe.user_data() {
                UD_FUTEX => u.futex_armed = false,
                UD_POLL => {
                    u.poll_armed = false;
                    socket_ready = true;
                }
                _ => {}
            }
        }
        socket_ready
    }

    /// Sleeps on the futex for a slice; returns whether the socket is readable (or closed).
    fn sleep_futex(&self, word: u32) -> bool {
        let deadline = nnaccel_uapi::sys::deadline_after(FALLBACK_SLICE);
        let _ = nnaccel_uapi::sys::futex_wait_bitset(
            self.request.flag(),
            word,
            Some(deadline),
            NOT_EMPTY,
        );
        self.socket_readable()
    }

    fn socket_readable(&self) -> bool {
        let mut fds = [PollFd::new(
            &self.channel,
            PollFlags::IN | PollFlags::RDHUP | PollFlags::HUP,
        )];
        matches!(rustix::event::poll(&mut fds, Some(&ZERO)), Ok(n) if n > 0)
    }

    /// Handles every message waiting on the socket (frees; stray answers are dropped).
    fn drain_channel(&mut self) -> Result<(), Stop> {
        while self.socket_readable() {
            let msg = receive(&self.channel, Instant::now() + CALLBACK_TIMEOUT)?;
            if let (BurstMessage::FreeMemory { slot }, _) = msg {
                self.exec.free(slot);
            }
        }
        Ok(())
    }

    /// Reads one packet and answers it; a bad packet gets a GENERAL_FAILURE result, and
    /// [`MAX_BAD_PACKETS`] in a row end the burst.
    fn serve_packet(&mut self) -> Result<(), Stop> {
        self.empty_wakes = 0;
        self.polled = false;
        self.stats.packets.fetch_add(1, Ordering::Relaxed);
        let result = match self.take_packet() {
            Ok(datums) => {
                self.bad_packets = 0;
                self.request.wake(NOT_FULL);
                self.execute(&datums)
            }
            Err(e) => {
                self.bad_packets += 1;
                if self.bad_packets > MAX_BAD_PACKETS {
                    return Err(Stop::BadPackets(self.bad_packets));
                }
                tracing::debug!("burst: {e}; answering GENERAL_FAILURE");
                let _ = self.request.discard_all();
                self.request.wake(NOT_FULL);
                ExecutionResult::failure(ErrorStatus::GeneralFailure)
            }
        };
        self.executions += 1;
        self.send_result(&result);
        Ok(())
    }

    fn take_packet(&self) -> Result<Vec<Datum>, BurstError> {
        let datums = packet::read_packet(&self.request, packet::request_packet_size)?;
        // One execution is in flight per burst: the client writes the next packet only after
        // reading this one's result, so datums beyond the packet are junk, and answering them as
        // a packet of their own would put every later result one packet off.
        if self.request.available_to_read() > 0 {
            return Err(BurstError::TrailingDatums(datums.len()));
        }
        Ok(datums)
    }

    fn execute(&mut self, datums: &[Datum]) -> ExecutionResult {
        // Frees the client sent before this packet apply before its slots are resolved.
        if let Err(e) = self.drain_channel() {
            tracing::debug!("burst channel: {e}");
            return ExecutionResult::failure(ErrorStatus::GeneralFailure);
        }
        let mut frees = Vec::new();
        let channel = &self.channel;
        let result = self
            .exec
            .execute(datums, |unknown| get_memories(channel, unknown, &mut frees));
        for slot in frees {
            self.exec.free(slot);
        }
        result
    }

    fn send_result(&self, result: &ExecutionResult) {
        let datums = fit_result(result, self.result.available_to_write());
        match self.result.write(&packet::to_bytes(&datums)) {
            Ok(true) => self.result.wake(NOT_EMPTY),
            Ok(false) => tracing::debug!("the result queue is full; result dropped"),
            Err(e) => tracing::debug!("result queue: {e}"),
        }
    }
}

/// Receives one message on a burst's channel, whole by `deadline` (a client trickling a frame
/// byte by byte cannot hold the worker longer).
fn receive(channel: &UnixStream, deadline: Instant) -> Result<(BurstMessage, ReceivedFds), Stop> {
    // io_uring completions run as task work, which interrupts a blocking recvmsg with
    // EINTR before it took anything: retry.
    let (body, fds) = loop {
        match frame::recv_frame_by(channel, 1 << 20, deadline) {
            Err(frame::ProtocolError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other?,
        }
    };
    let msg = frame::decode::<BurstMessage>(&body)?;
    Ok((msg, ReceivedFds::new(fds)))
}

/// Asks the client for the pools of `unknown` slots with one `GetMemories` and waits for the
/// answer; frees that arrive meanwhile are collected in `frees`.
fn get_memories(
    channel: &UnixStream,
    unknown: &[i32],
    frees: &mut Vec<i32>,
) -> Result<Vec<MemoryPool>, BurstError> {
    let ask = frame::encode(&BurstMessage::GetMemories {
        slots: unknown.to_vec(),
    })?;
    frame::send_frame(channel, &ask, &[])?;
    let deadline = Instant::now() + CALLBACK_TIMEOUT;
    loop {
        let (msg, mut fds) = receive(channel, deadline).map_err(|e| match e {
            Stop::ChannelClosed(e) => BurstError::Channel(e),
            other => BurstError::BadAnswer(other.to_string()),
        })?;
        let entries = match msg {
            BurstMessage::FreeMemory { slot } => {
                frees.push(slot);
                continue;
            }
            BurstMessage::GetMemories { .. } => {
                return Err(BurstError::BadAnswer("the client sent getMemories".into()));
            }
            BurstMessage::Memories { entries } => entries,
        };
        if entries.len() != unknown.len() {
            return Err(BurstError::BadAnswer(format!(
                "{} memories for {} slots",
                entries.len(),
                unknown.len()
            )));
        }
        return unknown
            .iter()
            .zip(entries)
            .map(|(slot, entry)| match entry {
                SlotMemory::Memory(w) => Ok(MemoryPool::Memory(fds.memory(&w)?)),
                SlotMemory::Token(t) => Ok(MemoryPool::Token(t)),
                SlotMemory::Unknown => Err(BurstError::UnknownSlot(*slot)),
            })
            .collect();
    }
}

static ZERO: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// The polling window for a burst: the client's if it asked (capped), else none for
/// LOW_POWER and `default` otherwise.
pub fn polling_window(
    asked_us: Option<u32>,
    preference: ExecutionPreference,
    default: Duration,
) -> Duration {
    match asked_us {
        Some(us) => Duration::from_micros(u64::from(us)).min(super::MAX_POLLING_WINDOW),
        None if preference == ExecutionPreference::LowPower => Duration::ZERO,
        None => default,
    }
}

/// The burst's ends as they arrived with `ConfigureBurst`: fds 0, 1 and 2 of the frame are the
/// request queue, the result queue and the service's end of the socketpair.
#[derive(Debug)]
pub struct ReceivedEnds<'a> {
    /// The frame's fds.
    pub fds: &'a mut ReceivedFds,
    /// The request queue's descriptor.
    pub request: crate::fmq::FmqDescriptor,
    /// The result queue's descriptor.
    pub result: crate::fmq::FmqDescriptor,
    /// Kept until the worker ends (the client's share of a burst budget, say).
    pub keep: Option<Box<dyn std::any::Any + Send>>,
}

/// Checks and maps what `ConfigureBurst` brought and starts the worker.
pub fn start_from_wire(
    model: PreparedModel,
    owner: OwnerId,
    ends: ReceivedEnds<'_>,
    window: Duration,
    workers: &Arc<Workers>,
) -> Result<WaitMechanism, (ErrorStatus, String)> {
    let invalid = |m: String| (ErrorStatus::InvalidArgument, m);
    for (what, desc) in [("request", ends.request), ("result", ends.result)] {
        if desc.capacity > MAX_QUEUE_DATUMS {
            return Err(invalid(format!(
                "a {what} queue of {} datums; at most {MAX_QUEUE_DATUMS}",
                desc.capacity
            )));
        }
    }
    let fd = |fds: &mut ReceivedFds, i: usize| fds.take_fd(i).map_err(|e| invalid(e.to_string()));
    let request_fd = fd(ends.fds, 0)?;
    let result_fd = fd(ends.fds, 1)?;
    let channel_fd = fd(ends.fds, 2)?;
    // One file as both queues would have the worker read its own results as requests, for
    // ever: the queues must be two files (not two fds of one, nor one reopened).
    let file_id = |f: &std::os::fd::OwnedFd| rustix::fs::fstat(f).map(|st| (st.st_dev, st.st_ino));
    match (file_id(&request_fd), file_id(&result_fd)) {
        (Ok(a), Ok(b)) if a == b => {
            return Err(invalid(
                "the request and result queues are the same file; a burst needs two".into(),
            ));
        }
        (Ok(_), Ok(_)) => {}
        (Err(e), _) | (_, Err(e)) => return Err(invalid(format!("a queue fd: {e}"))),
    }
    let queue = |fd, desc, what: &str| {
        Fmq::from_fd(fd, desc, DATUM_SIZE as u32).map_err(|e| invalid(format!("{what}: {e}")))
    };
    let request = queue(request_fd, ends.request, "request queue")?;
    let result = queue(result_fd, ends.result, "result queue")?;
    let is_stream_socket = rustix::net::sockopt::socket_type(&channel_fd)
        .is_ok_and(|t| t == rustix::net::SocketType::STREAM);
    if !is_stream_socket {
        return Err(invalid("the burst channel is not a stream socket".into()));
    }
    let channel = UnixStream::from(channel_fd);
    start(
        model,
        owner,
        request,
        result,
        channel,
        window,
        Some(workers),
        ends.keep,
    )
    .map_err(|e| {
        let status = if e.kind() == io::ErrorKind::QuotaExceeded {
            ErrorStatus::ResourceExhaustedTransient
        } else {
            ErrorStatus::GeneralFailure
        };
        (status, format!("cannot start the burst: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls skipped after each call of `step` (true: a poll given up, false: one answered),
    /// counting the packets skipped until the next poll.
    fn pauses(backoff: &mut Backoff, steps: &[bool]) -> Vec<u32> {
        steps
            .iter()
            .map(|&given_up| {
                if given_up {
                    backoff.given_up();
                } else {
                    backoff.answered();
                }
                let mut skipped = 0;
                while backoff.skip() {
                    skipped += 1;
                }
                skipped
            })
            .collect()
    }

    #[test]
    fn polls_given_up_double_the_pause_up_to_the_cap_and_answered_polls_halve_it() {
        let mut b = Backoff::default();
        assert!(!b.skip(), "no pause before any poll was given up");
        // Given up 7 times: 2, 4, 8, 16, 32, 64, then held at MAX_BACKOFF = 64.
        assert_eq!(
            pauses(&mut b, &[true; 7]),
            vec![2, 4, 8, 16, 32, 64, 64],
            "doubling to the cap"
        );
        assert_eq!(MAX_BACKOFF, 64);
        // Answered polls pause nothing themselves, and halve the next pause: 64 → 32 → 16,
        // so the next poll given up pauses 32.
        assert_eq!(pauses(&mut b, &[false, false, true]), vec![0, 0, 32]);
        // Enough answered polls forget the pauses: 32 → 16 → 8 → 4 → 2 → 0; then 2 again.
        assert_eq!(pauses(&mut b, &[false; 5]), vec![0; 5]);
        assert_eq!(pauses(&mut b, &[true]), vec![2]);
    }

    /// A client that says it is busy but never takes a result (every poll is given up): the
    /// worker polls once at its start (the client is busy), then of 10 packets polls after
    /// packets 3 and 8 only and skips the rest (pauses of 2, 4 and 8 packets after each poll
    /// given up).
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_worker_whose_polls_go_unanswered_polls_less_and_less() {
        let driver = crate::Driver::new(crate::Backend::CpuOnly);
        let model = crate::driver_tests::prepare(&driver, &crate::driver_tests::add_model(&[1, 4]));
        let request = Fmq::create(DATUM_SIZE as u32, 64).unwrap();
        let result = Fmq::create(DATUM_SIZE as u32, 1024).unwrap();
        let peer = |q: &Fmq| {
            let fd = q.fd().try_clone_to_owned().unwrap();
            Fmq::from_fd(fd, q.descriptor(), DATUM_SIZE as u32).unwrap()
        };
        let (client_end, worker_end) = UnixStream::pair().unwrap();
        let stats = Arc::<WorkerStats>::default();
        request.announce(WRITER_BUSY);
        start_observed(
            model,
            crate::LOCAL_OWNER,
            (peer(&request), peer(&result)),
            worker_end,
            Duration::from_millis(10),
            None,
            None,
            stats.clone(),
        )
        .unwrap();
        let load = |c: &AtomicU64| c.load(Ordering::SeqCst);
        // Until the worker has polled (and given up) or skipped `n` times in all; bounded.
        let settled = |n: u64, what: &str| {
            let until = Instant::now() + Duration::from_secs(10);
            while load(&stats.polls_timed_out) + load(&stats.polls_skipped) < n {
                assert!(
                    Instant::now() < until,
                    "{what}: the worker never got past it"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        settled(1, "the poll at the start");
        for k in 1..=10u64 {
            // One datum that is no packet: answered GENERAL_FAILURE, which stays in the result
            // queue (never taken).
            assert!(request.write(&[0u8; DATUM_SIZE]).unwrap());
            request.wake(NOT_EMPTY);
            settled(k + 1, &format!("packet {k}"));
        }
        assert_eq!(load(&stats.packets), 10);
        assert_eq!(load(&stats.polls), 3, "at the start, after packets 3 and 8");
        assert_eq!(load(&stats.polls_timed_out), 3);
        assert_eq!(load(&stats.polls_skipped), 8);
        assert!(
            result.available_to_read() > 0,
            "the results were never taken"
        );
        drop(client_end);
    }
}
