//! Queues and the engine: one worker per queue takes jobs in order (from the shared ring or
//! from SUBMIT), runs them on the CPU executor, posts completions and answers WAITs.
//!
//! Ring workers sleep on the ring's doorbell futex: with io_uring `FUTEX_WAIT` where the kernel
//! has it (probed once per device), with the futex syscall otherwise.
//!
//! The executor never sees client memory: a job's inputs are copied out of their BOs before it
//! runs and its outputs copied back after (see `execute`).
//!
//! Cancellation and timeouts (JOB_CANCEL, `Job::timeout_ns`): each queue has a fence, a lock
//! under which the copy-back runs and under which JOB_CANCEL records its cancel. Whichever
//! takes it first wins: a cancel that returned 0 was recorded before any copy-back started, so
//! the copy-back sees it and writes nothing; a copy-back that started first ends the job, and
//! the cancel answers `EALREADY`. A job past its timeout is ended the same way by the engine
//! itself (checked before it starts, while it waits out an injected delay, and at copy-back),
//! and completes with `-ETIMEDOUT`; the queue goes on with its next job.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nnaccel_cpu::{ExecError, InputArg};
use nnaccel_uapi::abi::*;
use nnaccel_uapi::ring::RingView;
use nnaccel_uapi::sys;
use rustix::io::Errno;
use zerocopy::IntoBytes;

use crate::bo::{Bo, zeroed};
use crate::config::WaitMode;
use crate::program::LoadedProgram;
use crate::reply::Reply;
use crate::shared::DeviceCore;
use crate::timers::TimerKey;

/// Completions remembered per queue for WAIT.
const COMPLETION_RECORDS: usize = 4096;
/// How long a ring worker polls before sleeping when the client asked for high performance.
const HIGH_PERFORMANCE_POLL: Duration = Duration::from_micros(50);

/// `FUTEX2_SIZE_U32`: futex2 flag for a 32-bit word (shared: no `FUTEX2_PRIVATE`).
const FUTEX2_SIZE_U32: u32 = 0x02;

/// Picks the engine's wait mode, probing io_uring for `FUTEX_WAIT`.
pub(crate) fn resolve_wait_mode(asked: WaitMode) -> std::io::Result<WaitMode> {
    let have = io_uring_futex_supported();
    match asked {
        WaitMode::Futex => Ok(WaitMode::Futex),
        WaitMode::IoUring if have => Ok(WaitMode::IoUring),
        WaitMode::IoUring => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "io_uring FUTEX_WAIT is not supported by this kernel (needs Linux 6.7+)",
        )),
        WaitMode::Auto if have => Ok(WaitMode::IoUring),
        WaitMode::Auto => {
            tracing::info!("io_uring FUTEX_WAIT unavailable; engine workers use the futex syscall");
            Ok(WaitMode::Futex)
        }
    }
}

/// Whether io_uring exists here and has the `FUTEX_WAIT` opcode.
pub(crate) fn io_uring_futex_supported() -> bool {
    let Ok(ring) = io_uring::IoUring::new(2) else {
        return false;
    };
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_err() {
        return false;
    }
    probe.is_supported(io_uring::opcode::FutexWait::CODE)
}

/// A job whose handles were resolved and whose bindings were checked.
#[derive(Debug)]
pub struct ResolvedJob {
    /// Echoed in the completion.
    pub user_data: u64,
    /// Absolute `CLOCK_MONOTONIC` deadline in ns, 0 = none.
    pub timeout_ns: u64,
    /// The program.
    pub program: Arc<LoadedProgram>,
    /// (BO, offset, length) per argument: inputs, then outputs.
    pub bindings: Vec<(Arc<Bo>, u64, u64)>,
}

/// The open file a queue belongs to, as the engine sees it: where its counters live and
/// where ring jobs are resolved. The device model's file implements it; a trait, so that the
/// engine sits below the device model rather than importing it.
pub trait QueueOwner: Send + Sync {
    /// The file's id (names the worker thread).
    fn file_id(&self) -> u64;
    /// The device the file belongs to.
    fn core(&self) -> &Arc<DeviceCore>;
    /// Resolves and checks a job copied out of the ring against the file's handles.
    fn resolve_job(&self, job: &Job) -> Result<ResolvedJob, Errno>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Waiter {
    seq: u64,
    arg: Wait,
    reply: Box<dyn Reply>,
    timer: Option<TimerKey>,
}

#[derive(Default)]
struct QueueState {
    /// Default queue: validated jobs not yet taken by the worker.
    pending: VecDeque<(u64, ResolvedJob)>,
    /// Default queue: last sequence number handed out.
    submitted: u64,
    /// Recent completions by sequence number.
    records: BTreeMap<u64, Completion>,
    /// Every seq below this was evicted from `records`.
    evicted_below: u64,
    waiters: HashMap<u64, Waiter>,
    next_waiter: u64,
    /// Set once the queue stopped: new WAITs fail.
    dead: Option<Errno>,
}

/// What JOB_CANCEL and the copy-back of outputs agree on, under one lock.
#[derive(Default)]
struct Fence {
    /// Every job up to this seq has ended: its outputs were written or discarded.
    ended: u64,
    /// Jobs cancelled before they ended, with the status they complete with.
    cancelled: BTreeMap<u64, i32>,
}

impl Fence {
    /// The status a job ends with if it was cancelled or is past its timeout.
    fn stopped(&self, seq: u64, timeout_ns: u64) -> Option<i32> {
        if let Some(st) = self.cancelled.get(&seq) {
            return Some(*st);
        }
        (timeout_ns != 0 && sys::monotonic_ns() >= timeout_ns).then_some(-libc::ETIMEDOUT)
    }

    /// Marks every job up to `seq` ended.
    fn end(&mut self, seq: u64) {
        self.ended = self.ended.max(seq);
        self.cancelled = self.cancelled.split_off(&(self.ended + 1));
    }
}

struct Ring {
    view: RingView,
    _memfd: OwnedFd,
    poll: Duration,
}

struct Shared {
    id: u32,
    core: Arc<DeviceCore>,
    /// Weak: the file owns its queues, not the other way round.
    file: Weak<dyn QueueOwner>,
    ring: Option<Ring>,
    state: Mutex<QueueState>,
    cond: Condvar,
    stop: AtomicBool,
    /// Serialises JOB_CANCEL with the copy-back of outputs.
    fence: Mutex<Fence>,
    /// Signalled on every cancel, so a job waiting out an injected delay notices it.
    fence_cond: Condvar,
}

/// A queue: the file's default queue (SUBMIT) or a ring in shared memory.
pub struct Queue {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("id", &self.shared.id)
            .field("ring", &self.shared.ring.is_some())
            .finish()
    }
}

impl Queue {
    /// The file's default queue (id 0), fed by SUBMIT.
    pub fn new_default<F: QueueOwner + 'static>(file: &Arc<F>) -> Result<Arc<Self>, Errno> {
        Self::start(file, 0, None)
    }

    /// A ring queue over a mapped, initialised ring.
    pub fn new_ring<F: QueueOwner + 'static>(
        file: &Arc<F>,
        id: u32,
        view: RingView,
        memfd: OwnedFd,
        flags: u32,
    ) -> Result<Arc<Self>, Errno> {
        let poll = if flags & QUEUE_FLAG_HIGH_PERFORMANCE != 0 {
            HIGH_PERFORMANCE_POLL
        } else {
            Duration::ZERO
        };
        Self::start(
            file,
            id,
            Some(Ring {
                view,
                _memfd: memfd,
                poll,
            }),
        )
    }

    fn start<F: QueueOwner + 'static>(
        file: &Arc<F>,
        id: u32,
        ring: Option<Ring>,
    ) -> Result<Arc<Self>, Errno> {
        let owner: Weak<F> = Arc::downgrade(file);
        let shared = Arc::new(Shared {
            id,
            core: file.core().clone(),
            file: owner,
            ring,
            state: Mutex::default(),
            cond: Condvar::new(),
            stop: AtomicBool::new(false),
            fence: Mutex::default(),
            fence_cond: Condvar::new(),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("nnaccel-engine-{}-{id}", file.file_id()))
            .spawn(move || {
                if s.ring.is_some() {
                    ring_worker(&s)
                } else {
                    default_worker(&s)
                }
            })
            .map_err(|_| Errno::NOMEM)?;
        shared.core.stats.live_queues.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(Self {
            shared,
            worker: Mutex::new(Some(worker)),
        }))
    }

    /// SUBMIT: queue a validated job; returns its sequence number. `EBUSY` when full.
    pub fn push(&self, job: ResolvedJob) -> Result<u64, Errno> {
        let mut st = lock(&self.shared.state);
        if st.dead.is_some() {
            return Err(Errno::CANCELED);
        }
        if st.pending.len() >= self.shared.core.config.max_queue_depth as usize {
            return Err(Errno::BUSY);
        }
        st.submitted += 1;
        let seq = st.submitted;
        st.pending.push_back((seq, job));
        drop(st);
        self.shared.cond.notify_one();
        Ok(seq)
    }

    /// WAIT: answers now if `seq` completed, else when it completes or the deadline passes.
    pub fn wait(&self, arg: Wait, reply: Box<dyn Reply>) {
        let s = &self.shared;
        let mut st = lock(&s.state);
        if let Some(c) = st.records.get(&arg.seq) {
            let out = fill_wait(arg, c);
            drop(st);
            return reply.send(Ok(out));
        }
        let submitted = match &s.ring {
            Some(r) => r.view.sq_tail().load(Ordering::Acquire),
            None => st.submitted,
        };
        if arg.seq == 0 || arg.seq > submitted || arg.seq < st.evicted_below {
            drop(st);
            return reply.send(Err(Errno::INVAL));
        }
        if let Some(e) = st.dead {
            drop(st);
            return reply.send(Err(e));
        }
        if arg.deadline_ns <= sys::monotonic_ns() {
            drop(st);
            return reply.send(Err(Errno::TIMEDOUT));
        }
        let id = st.next_waiter;
        st.next_waiter += 1;
        let weak = Arc::downgrade(s);
        let timer = s.core.timers.add(arg.deadline_ns, move || {
            if let Some(s) = weak.upgrade() {
                let w = lock(&s.state).waiters.remove(&id);
                if let Some(w) = w {
                    w.reply.send(Err(Errno::TIMEDOUT));
                }
            }
        });
        st.waiters.insert(
            id,
            Waiter {
                seq: arg.seq,
                arg,
                reply,
                timer: Some(timer),
            },
        );
    }

    /// JOB_CANCEL: ends job `seq`. After `Ok`, the device never writes the job's outputs; it
    /// completes with `-ECANCELED` (at once if it had not started). `EALREADY` when it had
    /// already ended; `EINVAL` for 0, a seq never submitted, or one past what the queue can
    /// hold (so a client cannot make the device remember unbounded cancels).
    pub fn cancel(&self, seq: u64) -> Result<(), Errno> {
        let s = &self.shared;
        let (submitted, depth) = match &s.ring {
            Some(r) => (
                r.view.sq_tail().load(Ordering::Acquire),
                u64::from(r.view.entries()),
            ),
            None => (
                lock(&s.state).submitted,
                u64::from(s.core.config.max_queue_depth),
            ),
        };
        if seq == 0 || seq > submitted {
            return Err(Errno::INVAL);
        }
        let mut f = lock(&s.fence);
        if seq <= f.ended {
            return Err(Errno::ALREADY);
        }
        if seq > f.ended.saturating_add(depth).saturating_add(1) {
            return Err(Errno::INVAL);
        }
        f.cancelled.entry(seq).or_insert(-libc::ECANCELED);
        drop(f);
        s.fence_cond.notify_all();
        Ok(())
    }

    /// Stops the worker (finishing the job in hand), fails waiters and pending jobs with
    /// `ECANCELED`, and marks a ring dead so its clients stop waiting.
    pub fn shutdown(&self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        {
            let _st = lock(&s.state);
            s.cond.notify_all();
        }
        if let Some(r) = &s.ring {
            r.view.sq_doorbell().fetch_add(1, Ordering::SeqCst);
            let _ = sys::futex_wake(r.view.sq_doorbell(), i32::MAX);
        }
        if let Some(w) = lock(&self.worker).take() {
            let _ = w.join();
        }
        let (waiters, pending) = {
            let mut st = lock(&s.state);
            st.dead = Some(Errno::CANCELED);
            (
                std::mem::take(&mut st.waiters),
                std::mem::take(&mut st.pending),
            )
        };
        drop(pending);
        for (_, w) in waiters {
            if let Some(t) = w.timer {
                s.core.timers.cancel(t);
            }
            w.reply.send(Err(Errno::CANCELED));
        }
        if let Some(r) = &s.ring {
            if r.view.error().load(Ordering::SeqCst) == 0 {
                cancel_unstarted(&r.view);
                r.view.fail(libc::ECANCELED);
            }
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if lock(&self.worker).is_some() {
            self.shutdown();
        }
        self.shared
            .core
            .stats
            .live_queues
            .fetch_sub(1, Ordering::SeqCst);
    }
}

/// Completes every job the client published but the engine never took with `-ECANCELED`, so
/// a client waiting on one gets an answer rather than only the ring's error.
fn cancel_unstarted(view: &RingView) {
    let head = view.sq_head().load(Ordering::Acquire);
    let tail = view.sq_tail().load(Ordering::Acquire);
    if tail <= head || tail - head > u64::from(view.entries()) {
        return;
    }
    for pos in head..tail {
        let user_data = view.read_job(pos).map(|j| j.user_data).unwrap_or(0);
        let c = Completion {
            seq: pos + 1,
            user_data,
            status: -libc::ECANCELED,
            pad: 0,
            device_time_ns: 0,
        };
        let _ = view.write_completion(pos, &c);
    }
    view.sq_head().store(tail, Ordering::Release);
    view.publish_completion(tail);
}

fn fill_wait(mut arg: Wait, c: &Completion) -> Vec<u8> {
    arg.status = c.status;
    arg.device_time_ns = c.device_time_ns;
    arg.user_data = c.user_data;
    arg.as_bytes().to_vec()
}

fn default_worker(s: &Shared) {
    loop {
        let next = {
            let mut st = lock(&s.state);
            loop {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(j) = st.pending.pop_front() {
                    break j;
                }
                st = s.cond.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let (seq, job) = next;
        let (status, time) = run_job(s, seq, &job);
        complete(s, seq, job.user_data, status, time);
    }
}

fn ring_worker(s: &Shared) {
    let Some(ring) = &s.ring else { return };
    let view = &ring.view;
    let entries = u64::from(view.entries());
    let mut uring = match s.core.wait_mode {
        WaitMode::IoUring => match io_uring::IoUring::new(2) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(
                    "queue {}: io_uring setup failed ({e}); using the futex syscall",
                    s.id
                );
                None
            }
        },
        _ => None,
    };
    // `head` and `tail` are the engine's own copies of the ring counters, loaded once and then
    // checked and used: the client can rewrite the shared words at any moment.
    let mut head = view.sq_head().load(Ordering::Acquire);
    loop {
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let tail = view.sq_tail().load(Ordering::Acquire);
        if tail == head {
            if !ring.poll.is_zero() && poll_for_work(s, view, head, ring.poll) {
                continue;
            }
            sleep_on_doorbell(s, view, head, uring.as_mut());
            continue;
        }
        if tail < head || tail - head > entries {
            tracing::warn!(
                "queue {}: client corrupted the ring (head {head}, tail {tail})",
                s.id
            );
            view.fail(libc::EPROTO);
            let waiters = std::mem::take(&mut lock(&s.state).waiters);
            for (_, w) in waiters {
                w.reply.send(Err(Errno::PROTO));
            }
            lock(&s.state).dead = Some(Errno::PROTO);
            return;
        }
        // Copy the descriptor out before checking it: the client may rewrite the slot.
        let job = view.read_job(head);
        head += 1;
        view.sq_head().store(head, Ordering::Release);
        let seq = head;
        let (user_data, status, time) = match job {
            Ok(job) => {
                let resolved = s
                    .file
                    .upgrade()
                    .ok_or(Errno::CANCELED)
                    .and_then(|f| f.resolve_job(&job));
                match resolved {
                    Ok(r) => {
                        let (st, t) = run_job(s, seq, &r);
                        (job.user_data, st, t)
                    }
                    Err(e) => (job.user_data, -e.raw_os_error(), 0),
                }
            }
            Err(_) => (0, -libc::EFAULT, 0),
        };
        complete(s, seq, user_data, status, time);
    }
}

fn poll_for_work(s: &Shared, view: &RingView, head: u64, window: Duration) -> bool {
    let until = Instant::now() + window;
    while Instant::now() < until {
        if view.sq_tail().load(Ordering::Acquire) != head || s.stop.load(Ordering::Relaxed) {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

fn sleep_on_doorbell(
    s: &Shared,
    view: &RingView,
    head: u64,
    uring: Option<&mut io_uring::IoUring>,
) {
    let seen = view.sq_doorbell().load(Ordering::SeqCst);
    view.sq_engine_sleeping().store(1, Ordering::SeqCst);
    if view.sq_tail().load(Ordering::SeqCst) == head && !s.stop.load(Ordering::SeqCst) {
        match uring {
            Some(u) => uring_futex_wait(u, view, seen),
            None => {
                let _ = sys::futex_wait(view.sq_doorbell(), seen, None);
            }
        }
    }
    view.sq_engine_sleeping().store(0, Ordering::SeqCst);
}

fn uring_futex_wait(u: &mut io_uring::IoUring, view: &RingView, seen: u32) {
    let op = io_uring::opcode::FutexWait::new(
        view.sq_doorbell().as_ptr().cast_const(),
        u64::from(seen),
        u64::from(u32::MAX),
        FUTEX2_SIZE_U32,
    )
    .build()
    .user_data(1);
    // SAFETY: the futex word lives in the ring mapping, which `view` keeps alive until after
    // this function returns; we wait for the operation's completion below before returning,
    // so the kernel never uses the address after that.
    if unsafe { u.submission().push(&op) }.is_err() {
        let _ = sys::futex_wait(view.sq_doorbell(), seen, None);
        return;
    }
    loop {
        match u.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => break,
        }
    }
    // Result: 0 (woken), -EAGAIN (value changed): either way the caller re-checks the ring.
    u.completion().for_each(drop);
}

/// Runs job `seq` of queue `s` on the CPU executor, fenced against JOB_CANCEL and its timeout.
/// Returns (status, device time in ns).
fn run_job(s: &Shared, seq: u64, job: &ResolvedJob) -> (i32, u64) {
    let start = Instant::now();
    let status = match run_fenced(s, seq, job) {
        Ok(()) => 0,
        Err(e) => e,
    };
    // Whatever happened, the job has ended: a later cancel answers EALREADY.
    lock(&s.fence).end(seq);
    (
        status,
        u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
    )
}

/// Error: the negative errno the job completes with.
fn run_fenced(s: &Shared, seq: u64, job: &ResolvedJob) -> Result<(), i32> {
    if let Some(st) = lock(&s.fence).stopped(seq, job.timeout_ns) {
        return Err(st);
    }
    let faults = &s.core.config.faults;
    let delay = faults.delay_job_ms;
    let output_bytes: u64 = job.program.outputs.iter().map(|o| o.bytes).sum();
    if crate::config::FAULT_INJECTION
        && delay > 0
        && output_bytes >= faults.delay_job_min_output_bytes
    {
        injected_delay(s, seq, job.timeout_ns, Duration::from_millis(delay))?;
    }
    let outputs = compute(job).map_err(|e| -e.raw_os_error())?;
    // The copy-back runs under the fence: a cancel either came first (nothing is written) or
    // waits until the outputs are in place and then finds the job ended.
    let mut f = lock(&s.fence);
    if let Some(st) = f.stopped(seq, job.timeout_ns) {
        return Err(st);
    }
    let written = write_back(job, &outputs);
    f.end(seq);
    drop(f);
    written.map_err(|e| -e.raw_os_error())
}

/// Fault injection: the job takes `delay` longer, unless it is cancelled or times out first.
fn injected_delay(s: &Shared, seq: u64, timeout_ns: u64, delay: Duration) -> Result<(), i32> {
    let until = Instant::now() + delay;
    let mut f = lock(&s.fence);
    loop {
        if let Some(st) = f.stopped(seq, timeout_ns) {
            return Err(st);
        }
        let now = Instant::now();
        if now >= until || s.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut left = until - now;
        if timeout_ns != 0 {
            let to_timeout = timeout_ns.saturating_sub(sys::monotonic_ns());
            left = left.min(Duration::from_nanos(to_timeout));
        }
        // Wake now and then so a stopping queue is not held up by the whole delay.
        left = left.min(Duration::from_millis(100));
        f = s
            .fence_cond
            .wait_timeout(f, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}

/// Runs one job on owned copies of its tensors; returns its outputs without writing them.
///
/// Every BO maps memory a client can write at any moment, so the executor never sees it: the
/// inputs are copied out first, the executor writes owned output buffers, and those are copied
/// back once it returned (`write_back`; constants were copied at PROGRAM_CREATE). A client
/// writing its buffers while the job runs can change which bytes were copied, never what the
/// executor reads while it runs; an output it reads before the completion may be half written,
/// as on any device. Outputs are written back only if the job succeeded.
fn compute(job: &ResolvedJob) -> Result<Vec<Vec<u8>>, Errno> {
    Staged::copy_in(job)?.run(&job.program)
}

/// Copies a job's outputs into their BOs.
fn write_back(job: &ResolvedJob, outputs: &[Vec<u8>]) -> Result<(), Errno> {
    let n_in = job.program.inputs.len();
    // Every output is written back even if one fails (a file that shrank), as far as it can.
    let mut written = Ok(());
    for ((bo, off, _), data) in job.bindings[n_in..].iter().zip(outputs) {
        written = written.and(bo.write(*off, data));
    }
    written
}

#[cfg(test)]
fn execute(job: &ResolvedJob) -> Result<(), Errno> {
    write_back(job, &compute(job)?)
}

/// A job's inputs, copied out of client memory.
struct Staged {
    inputs: Vec<Vec<u8>>,
}

impl Staged {
    /// Copies each input binding (exactly its argument's size) into an owned buffer.
    fn copy_in(job: &ResolvedJob) -> Result<Self, Errno> {
        let n_in = job.program.inputs.len();
        let inputs = job.bindings[..n_in]
            .iter()
            .zip(&job.program.inputs)
            .map(|((bo, off, _), spec)| bo.read(*off, spec.bytes as usize))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { inputs })
    }

    /// Runs `program` on the staged inputs; returns one owned buffer per output, exactly its
    /// size (the bytes of a binding past its tensor are left as they are).
    fn run(&self, program: &LoadedProgram) -> Result<Vec<Vec<u8>>, Errno> {
        let inputs: Vec<InputArg<'_>> = self
            .inputs
            .iter()
            .map(|data| InputArg::Value {
                data,
                dimensions: Vec::new(),
            })
            .collect();
        let mut outputs = program
            .outputs
            .iter()
            .map(|spec| zeroed(spec.bytes as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out: Vec<&mut [u8]> = outputs.iter_mut().map(Vec::as_mut_slice).collect();
        match program.graph.execute(&program.pools(), &inputs, &mut out) {
            Ok(_) => Ok(outputs),
            Err(ExecError::InvalidArgument(m)) => {
                tracing::debug!("job rejected by the executor: {m}");
                Err(Errno::INVAL)
            }
            Err(e) => {
                tracing::debug!("job failed: {e}");
                Err(Errno::IO)
            }
        }
    }
}

fn complete(s: &Shared, seq: u64, user_data: u64, status: i32, device_time_ns: u64) {
    lock(&s.fence).end(seq);
    s.core.stats.jobs_completed.fetch_add(1, Ordering::SeqCst);
    let (_, drop_it) = s.core.job_fault();
    if drop_it {
        tracing::warn!(
            "fault injection: dropping the completion of seq {seq} on queue {}",
            s.id
        );
        return;
    }
    let c = Completion {
        seq,
        user_data,
        status,
        pad: 0,
        device_time_ns,
    };
    if let Some(r) = &s.ring {
        let _ = r.view.write_completion(seq - 1, &c);
        r.view.publish_completion(seq);
    }
    let ready: Vec<Waiter> = {
        let mut st = lock(&s.state);
        st.records.insert(seq, c);
        while st.records.len() > COMPLETION_RECORDS {
            if let Some((old, _)) = st.records.pop_first() {
                st.evicted_below = old + 1;
            }
        }
        let ids: Vec<u64> = st
            .waiters
            .iter()
            .filter(|(_, w)| w.seq == seq)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| st.waiters.remove(&id))
            .collect()
    };
    for w in ready {
        if let Some(t) = w.timer {
            s.core.timers.cancel(t);
        }
        w.reply.send(Ok(fill_wait(w.arg, &c)));
    }
}

#[cfg(test)]
mod tests {
    use nnaccel_uapi::program::Location;

    use super::*;
    use crate::test_support::{
        add_program, client_memory, client_read, client_write, f32_bytes, f32s, import,
    };

    /// `out = a + b` with `a` and `b` inputs, bound to BOs over fresh client memory (sealable
    /// or not); returns the job and the memory of a, b and out.
    fn add_job(sealable: bool, out_len: u64) -> (ResolvedJob, [OwnedFd; 3]) {
        let stats = Arc::default();
        let bytes = add_program(Location::Input, Location::Input, vec![]);
        let program = Arc::new(LoadedProgram::load(&stats, &bytes, |_| Err(Errno::NOENT)).unwrap());
        let mem = [(); 3].map(|()| client_memory(4096, sealable));
        let bindings = vec![
            (import(&stats, &mem[0]), 0, 16),
            (import(&stats, &mem[1]), 0, 16),
            (import(&stats, &mem[2]), 0, out_len),
        ];
        let job = ResolvedJob {
            user_data: 0,
            timeout_ns: 0,
            program,
            bindings,
        };
        (job, mem)
    }

    #[test]
    fn the_executor_runs_on_inputs_copied_before_it_started() {
        let (job, mem) = add_job(true, 16);
        client_write(&mem[0], 0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
        client_write(&mem[1], 0, &f32_bytes(&[10.0; 4]));
        let staged = Staged::copy_in(&job).unwrap();
        // The client rewrites its inputs after the copy, as a racing writer would mid-job.
        client_write(&mem[0], 0, &f32_bytes(&[-100.0; 4]));
        client_write(&mem[1], 0, &f32_bytes(&[-100.0; 4]));
        let outputs = staged.run(&job.program).unwrap();
        assert_eq!(f32s(&outputs[0]), [11.0, 12.0, 13.0, 14.0]);
    }

    #[test]
    fn a_job_writes_back_only_its_output_tensor_whether_the_bo_is_pinned_or_not() {
        for sealable in [true, false] {
            let (job, mem) = add_job(sealable, 32);
            // A sealable memfd was sealed on import (its BO is read through the mapping);
            // the other is reached through the file.
            let sealed = sys::seals(std::os::fd::AsFd::as_fd(&mem[2]))
                .contains(rustix::fs::SealFlags::SHRINK);
            assert_eq!(sealed, sealable);
            client_write(&mem[0], 0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
            client_write(&mem[1], 0, &f32_bytes(&[0.5; 4]));
            client_write(&mem[2], 0, &[0xab; 32]);
            execute(&job).unwrap();
            let out = client_read(&mem[2], 0, 32);
            assert_eq!(
                f32s(&out[..16]),
                [1.5, 2.5, 3.5, 4.5],
                "sealable: {sealable}"
            );
            assert_eq!(out[16..], [0xab; 16], "sealable: {sealable}");
        }
    }
}
