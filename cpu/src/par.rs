//! Worker-thread policy and the worker pool for the heavy kernels (GEMM, convolutions).
//!
//! Kernels split large layers into up to [`max_threads`] parts; small layers stay on the calling
//! thread. The parts run on one process-wide pool of persistent workers, started lazily (at
//! most `max_threads() - 1` of them: the calling thread always takes a share) and asleep on a
//! condition variable between jobs, so an inference of a 60-layer network does not start and
//! join a hundred threads. The parts come in contiguous shares, one per thread: the caller
//! and each worker claim the parts of their own share one at a time, in order, and then those
//! left in the others', so a thread keeps the same rows of the image from one layer to the
//! next, and a caller whose workers are busy elsewhere (another execution, another process on
//! the same cores) finishes its job itself. A kernel that splits again from inside a part runs
//! the nested split inline. A panic in a part is caught
//! where it happens and resumed on the caller's thread once every part has finished.
//! Measurements and the choice over `std::thread::scope` and rayon: `docs/dependencies.md`.

use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Work (in flops, or flop-equivalents) below which a kernel stays single-threaded.
const PAR_MIN_FLOPS: usize = 1 << 21;

/// The most threads one kernel uses, however [`set_max_threads`], `NNACCEL_CPU_THREADS` or the
/// machine put it; front ends that take a thread count (`nnaccelctl --threads`, the service's
/// `threads` setting) accept 1 to this.
pub const MAX_THREADS: usize = 64;

/// 0 = not set by [`set_max_threads`]: use the environment or the machine.
static OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// Limits the number of threads one kernel may use, at most [`MAX_THREADS`] (0 restores the
/// default: the `NNACCEL_CPU_THREADS` environment variable if set, else the number of available
/// CPUs). Applies process-wide to executions that start afterwards; idle workers beyond the new
/// limit exit.
pub fn set_max_threads(n: usize) {
    OVERRIDE.store(n.min(MAX_THREADS), Ordering::Relaxed);
    if let Some(pool) = POOL.get() {
        // Wake the sleepers so the ones beyond the limit see it and exit.
        pool.wake.notify_all();
    }
}

/// The number of threads one kernel may use (at least 1). See [`set_max_threads`].
pub fn max_threads() -> usize {
    match OVERRIDE.load(Ordering::Relaxed) {
        0 => default_threads(),
        n => n,
    }
}

fn default_threads() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        std::env::var("NNACCEL_CPU_THREADS")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .min(MAX_THREADS)
    })
}

/// How many threads to use for `work` flops (or flop-equivalents: a kernel slower per flop
/// than the GEMM, or one that does no arithmetic, scales its count to the GEMM's rate) split
/// over at most `units` independent pieces: a second thread from [`PAR_MIN_FLOPS`] of work on
/// (about 40 µs at 50 GFLOP/s: a worker's hand-off costs a few µs when it is polling, tens
/// when it must be woken), one more per further [`PAR_MIN_FLOPS`].
pub(crate) fn threads_for(work: usize, units: usize) -> usize {
    if work < PAR_MIN_FLOPS {
        return 1;
    }
    max_threads()
        .min(units)
        .min(work / PAR_MIN_FLOPS + 1)
        .max(1)
}

/// A raw pointer to an output that may cross to a pool worker thread, for splits whose parts
/// write disjoint elements that are not contiguous runs (columns of a matrix, channels of an
/// image), which `&mut` slices cannot express.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);

impl SendPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    pub(crate) fn ptr(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: a pointer is only data; its users make each part write elements no other part
// writes, of a buffer that outlives them (`for_each_part` returns after every part has
// finished).
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

/// Runs of rows per thread that [`for_row_ranges`] makes: a thread that finishes early (or a
/// caller whose worker was not scheduled: the cores are shared) takes the runs left, instead
/// of waiting for one big share.
pub(crate) const TILES_PER_THREAD: usize = 4;

/// Splits `out` into contiguous runs of whole rows (`row_len` elements each) for `parts`
/// threads (up to [`TILES_PER_THREAD`] runs each, so the load balances) and calls
/// `f(first_row, rows)` on each, in parallel when `parts > 1`. The calling thread takes a
/// share. Returns the error of the first run (in row order) that failed. Called from inside a
/// part of another split, it runs on the calling thread alone.
pub(crate) fn for_row_ranges<T, E, F>(
    out: &mut [T],
    row_len: usize,
    parts: usize,
    f: F,
) -> Result<(), E>
where
    T: Send,
    E: Send,
    F: Fn(usize, &mut [T]) -> Result<(), E> + Sync,
{
    for_row_runs(out, row_len, parts, RowRuns::default(), f)
}

/// How [`for_row_runs`] may cut rows into runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowRuns {
    /// Runs start at multiples of this many rows (a kernel's row tile, so that no run ends in
    /// a partial tile that computes padding), at least 1.
    pub(crate) align: usize,
    /// Fewer runs per thread (down to one) rather than runs shorter than this many rows: for
    /// kernels that pay a fixed cost per run (the GEMM packs its whole B operand per call).
    pub(crate) min_rows: usize,
}

impl Default for RowRuns {
    fn default() -> Self {
        RowRuns {
            align: 1,
            min_rows: 1,
        }
    }
}

/// One run of rows (its first row and its elements), taken by the part that runs it.
type RunSlot<'a, T> = Mutex<Option<(usize, &'a mut [T])>>;

/// [`for_row_ranges`] with the runs cut as `runs` says. Runs of one split differ by at most
/// one alignment unit (13 units for 2 threads: 4 runs of 3 or 4 units, not 3 of 4 and a 1),
/// so the threads' shares stay within one unit of each other.
pub(crate) fn for_row_runs<T, E, F>(
    out: &mut [T],
    row_len: usize,
    parts: usize,
    runs: RowRuns,
    f: F,
) -> Result<(), E>
where
    T: Send,
    E: Send,
    F: Fn(usize, &mut [T]) -> Result<(), E> + Sync,
{
    let rows = out.len().checked_div(row_len).unwrap_or(0);
    let align = runs.align.max(1);
    let units = rows.div_ceil(align);
    let parts = parts.clamp(1, units.max(1));
    if parts == 1 || IN_PART.get() {
        return f(0, out);
    }
    let min_units = runs.min_rows.div_ceil(align).max(1);
    let mut tiles = TILES_PER_THREAD;
    while tiles > 1 && units / (parts * tiles) < min_units {
        tiles -= 1;
    }
    let count = (parts * tiles).min(units);
    // Run i covers units [i·units/count, (i+1)·units/count): sizes within one of each other.
    // (u128: i · units cannot overflow; the result is at most `units`.)
    let bounds = |i: usize| {
        let u = (i as u128 * units as u128 / count as u128) as usize;
        u.saturating_mul(align).min(rows)
    };
    let mut chunks: Vec<RunSlot<'_, T>> = Vec::with_capacity(count);
    let mut rest = out;
    for i in 0..count {
        let (r0, r1) = (bounds(i), bounds(i + 1));
        // The last run also takes the elements past the last whole row, if any.
        let len = if i + 1 == count {
            rest.len()
        } else {
            (r1 - r0) * row_len
        };
        let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(len);
        rest = tail;
        // Each part takes its run out of its own slot: disjoint `&mut` borrows, no unsafe.
        chunks.push(Mutex::new(Some((r0, chunk))));
    }
    // The failed run with the lowest index, and its error.
    let first_err: Mutex<Option<(usize, E)>> = Mutex::new(None);
    for_each_part_in_shares(chunks.len(), parts, |i| {
        let Some((r0, chunk)) = chunks.get(i).and_then(|slot| lock(slot).take()) else {
            return;
        };
        if let Err(e) = f(r0, chunk) {
            let mut slot = lock(&first_err);
            if slot.as_ref().is_none_or(|(j, _)| i < *j) {
                *slot = Some((i, e));
            }
        }
    });
    match first_err
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Calls `f(i)` for every `i < parts`, on the pool and the calling thread together; returns
/// when every call has returned. A panic in any call is resumed here after all have finished.
/// Called from inside a part, or with one part, it runs the calls in order on this thread.
pub fn for_each_part<F: Fn(usize) + Sync>(parts: usize, f: F) {
    for_each_part_in_shares(parts, max_threads(), f);
}

/// [`for_each_part`] with the parts in up to `shares` contiguous shares (0..parts in order),
/// one per thread that takes part: each thread runs its own share first, in order, and then
/// helps with what is left of the others. Parts next to each other in index (runs of rows
/// next to each other in an image) then go to the same thread from one operation to the next,
/// so a layer mostly reads the rows its thread wrote in the layer before, from that core's
/// own cache, where parts handed out one at a time in turn went to either thread.
pub(crate) fn for_each_part_in_shares<F: Fn(usize) + Sync>(parts: usize, shares: usize, f: F) {
    if parts <= 1 || IN_PART.get() {
        (0..parts).for_each(f);
        return;
    }
    let shares = shares.clamp(1, parts);
    let pool = POOL.get_or_init(Pool::default);
    let f: *const (dyn Fn(usize) + Sync + '_) = &f;
    // SAFETY: only the trait object's lifetime bound changes (same pointer, same layout), so
    // the pointer can sit in the `'static` queue. When it may be dereferenced: see `FnPtr`.
    let f: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
    let job = Arc::new(Job::new(FnPtr(f), parts, shares));
    pool.submit(&job, shares - 1);
    // The caller's share is the first.
    job.work(0);
    pool.retire(&job);
    // The parts the workers claimed: wait for each to finish. Poll first (they usually end
    // within microseconds of ours, and a parked caller's wake-up costs tens of µs), then park
    // (the last part unparks us).
    let start = Instant::now();
    while job.pending.load(Ordering::Acquire) != 0 {
        if start.elapsed() < IDLE_POLL {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        } else {
            std::thread::park();
        }
    }
    if let Some(p) = lock(&job.panic).take() {
        resume_unwind(p);
    }
}

/// The first part of share `s` of `shares` over `parts` parts (shares differ by at most one
/// part; `s = shares` gives `parts`).
fn share_start(s: usize, shares: usize, parts: usize) -> usize {
    // u128: s · parts cannot overflow; the result is at most `parts`.
    (s as u128 * parts as u128 / shares as u128) as usize
}

thread_local! {
    /// Whether this thread is running a part of a job (a worker, or a caller inside its share):
    /// a split requested from there runs inline.
    static IN_PART: Cell<bool> = const { Cell::new(false) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Parts run under catch_unwind and nothing panics while holding these locks; a poisoned
    // lock still holds consistent data.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The job's function, a closure on the stack of the thread in [`for_each_part`], as a raw
/// pointer (it dangles once that call returns, which a raw pointer may; workers may still hold
/// the `Arc<Job>` then). It is dereferenced only in [`Job::run`], after claiming an index
/// from a share; [`for_each_part`] returns (or unwinds: its own parts run under
/// `catch_unwind`) only after `pending` says every claimed index has finished, so every call
/// happens while the closure is alive. Later claims see exhausted indexes and never call it.
#[derive(Clone, Copy)]
struct FnPtr(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the closure is `Sync`, so calling it from other threads through a shared pointer is
// sound; the pointer is only dereferenced while the closure lives (see above).
unsafe impl Send for FnPtr {}
// SAFETY: as above.
unsafe impl Sync for FnPtr {}

/// One share of a split's parts: `next..end` are unclaimed (none once `next >= end`). On a
/// cache line of its own, so the threads claiming from different shares do not contend.
#[repr(align(64))]
struct Share {
    next: AtomicUsize,
    end: usize,
}

/// One split: its parts are claimed by index, each share's from its own cursor.
struct Job {
    f: FnPtr,
    /// Share s holds parts `share_start(s)..share_start(s + 1)`.
    shares: Box<[Share]>,
    /// Parts not yet finished.
    pending: AtomicUsize,
    /// The first panic of a part.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The thread waiting in [`for_each_part`].
    caller: Thread,
}

impl Job {
    /// A job of `parts` parts in `shares` shares (1 to `parts`), its caller this thread.
    fn new(f: FnPtr, parts: usize, shares: usize) -> Job {
        Job {
            f,
            shares: (0..shares)
                .map(|s| Share {
                    next: AtomicUsize::new(share_start(s, shares, parts)),
                    end: share_start(s + 1, shares, parts),
                })
                .collect(),
            pending: AtomicUsize::new(parts),
            panic: Mutex::new(None),
            caller: std::thread::current(),
        }
    }

    /// Claims and runs parts until none is left: share `home` first (taken modulo the
    /// shares), then the others in turn.
    fn work(&self, home: usize) {
        let was = IN_PART.replace(true);
        let (first, rest) = self.shares.split_at(home % self.shares.len());
        for share in rest.iter().chain(first) {
            loop {
                let i = share.next.fetch_add(1, Ordering::Relaxed);
                if i >= share.end {
                    break;
                }
                self.run(i);
            }
        }
        IN_PART.set(was);
    }

    /// Runs claimed part `i` and counts it finished.
    fn run(&self, i: usize) {
        let f = self.f.0;
        // SAFETY: part `i` of this job was claimed from its share by the caller of this
        // function and its `pending` count is not yet released, so the caller is still
        // waiting in `for_each_part` and the closure is alive (see `FnPtr`).
        let call = || unsafe { (*f)(i) };
        if let Err(p) = catch_unwind(AssertUnwindSafe(call)) {
            lock(&self.panic).get_or_insert(p);
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.caller.unpark();
        }
    }

    fn exhausted(&self) -> bool {
        self.shares
            .iter()
            .all(|s| s.next.load(Ordering::Relaxed) >= s.end)
    }
}

/// What the workers share.
#[derive(Default)]
struct Pool {
    state: Mutex<State>,
    /// Signalled when a job is queued or the thread limit changes.
    wake: Condvar,
    /// Jobs submitted so far: what polling workers watch.
    submitted: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// Jobs with parts possibly left, oldest first.
    queue: VecDeque<Arc<Job>>,
    /// Live workers.
    workers: usize,
    /// Workers waiting on the condition variable (the others are working or polling, and
    /// see a new job without a notification).
    sleeping: usize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// How long a worker that ran out of work polls for the next job before it sleeps: the kernels
/// of one inference follow each other within microseconds, and a worker caught awake saves the
/// caller a wake-up (tens of µs on a virtual machine). Kept short: on cores shared with other
/// processes the poll takes time from them (MobileNet at 2 threads ran as fast with 0, 10 and
/// 50 µs on a quiet machine, docs/dependencies.md).
const IDLE_POLL: Duration = Duration::from_micros(20);

impl Pool {
    /// Queues `job` and makes sure up to `helpers` workers (within the thread limit) are there
    /// and awake to help.
    fn submit(&'static self, job: &Arc<Job>, helpers: usize) {
        let want = max_threads().saturating_sub(1).min(helpers);
        let mut st = lock(&self.state);
        st.queue.push_back(Arc::clone(job));
        self.submitted.fetch_add(1, Ordering::Relaxed);
        while st.workers < want {
            // Workers are numbered from 1 as they start (the caller's share is 0): a worker
            // takes the same share of every job, so the same rows from one layer to the next.
            let home = st.workers + 1;
            let spawned = std::thread::Builder::new()
                .name("nnaccel-cpu".into())
                .spawn(move || self.worker(home));
            // Without a new thread the caller and the existing workers do the work.
            if spawned.is_err() {
                break;
            }
            st.workers += 1;
        }
        // Only sleepers need a notification (each is a futex system call).
        let sleepers = st.sleeping.min(want);
        drop(st);
        for _ in 0..sleepers {
            self.wake.notify_one();
        }
    }

    /// Takes `job` off the queue (its parts are all claimed).
    fn retire(&self, job: &Arc<Job>) {
        lock(&self.state).queue.retain(|j| !Arc::ptr_eq(j, job));
    }

    fn worker(&self, home: usize) {
        // A worker only runs the executor's kernels: its large blocks start on a cache line.
        let _aligned = crate::cache_aligned::aligning();
        let mut st = lock(&self.state);
        // Whether this worker has polled since it last found work: it sleeps only after that.
        let mut polled = false;
        loop {
            if st.workers > max_threads().saturating_sub(1) {
                st.workers -= 1;
                return;
            }
            // Jobs whose parts are all claimed need no help (their callers retire them too).
            st.queue.retain(|j| !j.exhausted());
            if let Some(job) = st.queue.front().cloned() {
                drop(st);
                job.work(home);
                drop(job);
                polled = false;
                st = lock(&self.state);
                continue;
            }
            if !polled {
                let seen = self.submitted.load(Ordering::Relaxed);
                drop(st);
                // A submit seen while polling may be over by the time the lock is held: poll
                // again then; sleep only after a quiet poll.
                polled = !self.poll_for_submit(seen);
                st = lock(&self.state);
                continue;
            }
            // Counted under the lock it found the queue empty under, so a submit either
            // came before (and the queue was not empty) or sees this sleeper.
            st.sleeping += 1;
            st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            st.sleeping -= 1;
            polled = false;
        }
    }

    /// Spins until a job is submitted after `seen` (true) or [`IDLE_POLL`] has passed (false).
    fn poll_for_submit(&self, seen: usize) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.submitted.load(Ordering::Relaxed) != seen {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= IDLE_POLL {
                return false;
            }
        }
    }
}

/// Runs `f` with the thread limit at 1, 2 and 3, checks that it returns the same each time,
/// and returns that (the limit is left at 2, which other tests of the process expect).
#[cfg(test)]
pub(crate) fn same_at_thread_counts<R: PartialEq + std::fmt::Debug>(f: impl Fn() -> R) -> R {
    set_max_threads(1);
    let one = f();
    for t in [2, 3] {
        set_max_threads(t);
        let r = f();
        assert!(r == one, "{t} threads differ from one");
    }
    set_max_threads(2);
    one
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_max_threads_caps_at_max_threads() {
        // The limit is process-wide and another test sets 2 concurrently: whichever store
        // wins, the count read back is within the cap.
        set_max_threads(MAX_THREADS * 4);
        assert!(max_threads() <= MAX_THREADS, "{}", max_threads());
        // Other tests in this process expect the split the large-layer test sets.
        set_max_threads(2);
    }

    /// `out[r] = r * 3 + 1` for every row, written by whichever part owns the row.
    fn fill_rows(out: &mut [u64], row_len: usize, parts: usize) -> Result<(), String> {
        for_row_ranges(out, row_len, parts, |r0, chunk| {
            for (i, row) in chunk.chunks_mut(row_len).enumerate() {
                row.fill((r0 + i) as u64 * 3 + 1);
            }
            Ok(())
        })
    }

    #[test]
    fn split_results_equal_one_thread() {
        for (rows, row_len, parts) in [(1, 4, 2), (7, 3, 2), (100, 5, 3), (64, 1, 8), (5, 2, 9)] {
            let mut one = vec![0u64; rows * row_len];
            fill_rows(&mut one, row_len, 1).unwrap();
            let mut many = vec![0u64; rows * row_len];
            fill_rows(&mut many, row_len, parts).unwrap();
            assert_eq!(one, many, "rows {rows} × {row_len}, {parts} parts");
            // Every row was written by its own formula, not left at zero.
            assert!(many.iter().all(|&v| v % 3 == 1));
        }
    }

    /// Runs a job of `parts` parts in `shares` shares on this thread alone, as the thread
    /// whose share is `home`: the parts in the order it ran them, whether the job was left
    /// exhausted, and its parts left pending.
    fn run_alone(parts: usize, shares: usize, home: usize) -> (Vec<usize>, bool, usize) {
        let order = Mutex::new(Vec::new());
        let f = |i: usize| lock(&order).push(i);
        let f: *const (dyn Fn(usize) + Sync + '_) = &f;
        // SAFETY: only the lifetime bound changes; `job` runs its parts here, while `f` lives,
        // and no other thread sees it.
        let f: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        let job = Job::new(FnPtr(f), parts, shares);
        job.work(home);
        let left = (job.exhausted(), job.pending.load(Ordering::Relaxed));
        (order.into_inner().unwrap(), left.0, left.1)
    }

    #[test]
    fn a_thread_runs_its_own_share_in_order_before_the_others() {
        // 10 parts in 3 shares: 0..3, 3..6, 6..10. A thread whose share is the second runs it,
        // then the third, then the first.
        let (order, exhausted, pending) = run_alone(10, 3, 1);
        assert_eq!(order, [3, 4, 5, 6, 7, 8, 9, 0, 1, 2]);
        assert!(exhausted);
        assert_eq!(pending, 0);
        // Shares differ by at most one part and cover every part.
        let starts: Vec<usize> = (0..=3).map(|s| share_start(s, 3, 10)).collect();
        assert_eq!(starts, [0, 3, 6, 10]);
    }

    #[test]
    fn a_home_past_the_shares_wraps_around() {
        // A third worker (home 3) on a job of two shares starts with the second.
        assert_eq!(run_alone(4, 2, 3).0, [2, 3, 0, 1]);
    }

    #[test]
    fn every_part_runs_exactly_once() {
        let counts: Vec<AtomicUsize> = (0..37).map(|_| AtomicUsize::new(0)).collect();
        for shares in [1, 2, 3, 37, 100] {
            counts.iter().for_each(|c| c.store(0, Ordering::Relaxed));
            for_each_part_in_shares(counts.len(), shares, |i| {
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                "{shares} shares"
            );
        }
    }

    #[test]
    fn the_first_failing_run_in_row_order_is_returned() {
        let mut out = vec![0u8; 40];
        let r = for_row_ranges(
            &mut out,
            1,
            4,
            |r0, _| {
                if r0 >= 11 { Err(r0) } else { Ok(()) }
            },
        );
        // 16 runs (4 threads · 4) of 40 rows start at ⌊i·40/16⌋ = 0, 2, 5, 7, 10, 12, …: the
        // first failing one (start ≥ 11) starts at row 12.
        assert_eq!(r, Err(12));
    }

    /// `(first row, rows, elements)` of every run [`for_row_runs`] makes, in row order.
    fn runs_of(
        len: usize,
        row_len: usize,
        parts: usize,
        runs: RowRuns,
    ) -> Vec<(usize, usize, usize)> {
        let mut out = vec![0u8; len];
        let seen = Mutex::new(Vec::new());
        for_row_runs(&mut out, row_len, parts, runs, |r0, chunk| {
            lock(&seen).push((r0, chunk.len() / row_len, chunk.len()));
            Ok::<(), ()>(())
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        seen
    }

    #[test]
    fn runs_start_on_tile_boundaries_and_differ_by_at_most_one_tile() {
        // 49 rows in tiles of 4: 13 tiles (the last one short) over 2 threads · 4 runs = 8
        // runs of ⌊13·(i+1)/8⌋ − ⌊13·i/8⌋ tiles: 1, 2, 1, 2, 2, 1, 2, 2.
        let runs = runs_of(
            49 * 3,
            3,
            2,
            RowRuns {
                align: 4,
                min_rows: 1,
            },
        );
        let starts: Vec<usize> = runs.iter().map(|r| r.0).collect();
        assert_eq!(starts, [0, 4, 12, 16, 24, 32, 36, 44]);
        let rows: Vec<usize> = runs.iter().map(|r| r.1).collect();
        assert_eq!(rows, [4, 8, 4, 8, 8, 4, 8, 5]);
    }

    #[test]
    fn runs_shorter_than_min_rows_give_way_to_fewer_runs() {
        // 196 rows, 2 threads, at least 64 rows a run: 8, 6 and 4 runs would be shorter, so
        // one run per thread.
        let runs = runs_of(
            196,
            1,
            2,
            RowRuns {
                align: 1,
                min_rows: 64,
            },
        );
        assert_eq!(runs, [(0, 98, 98), (98, 98, 98)]);
        // Fewer rows than one run's minimum: still one run per thread.
        assert_eq!(
            runs_of(
                10,
                1,
                2,
                RowRuns {
                    align: 1,
                    min_rows: 64
                }
            )
            .len(),
            2
        );
    }

    #[test]
    fn elements_past_the_last_whole_row_go_to_the_last_run() {
        // 3 rows of 3 and one element more, 3 threads: one row each, the last gets 4 elements.
        assert_eq!(
            runs_of(10, 3, 3, RowRuns::default()),
            [(0, 1, 3), (1, 1, 3), (2, 1, 4)]
        );
    }

    #[test]
    fn nested_splits_run_inline_without_deadlock() {
        let mut out = vec![0u64; 64 * 8];
        for_row_ranges(&mut out, 8, 4, |r0, chunk| {
            // A nested split inside a part: runs on this thread, with the same results.
            assert!(IN_PART.get());
            for_row_ranges(chunk, 8, 4, |q0, rows| {
                for (i, row) in rows.chunks_mut(8).enumerate() {
                    row.fill((r0 + q0 + i) as u64);
                }
                Ok::<(), ()>(())
            })
        })
        .unwrap();
        for (r, row) in out.chunks(8).enumerate() {
            assert!(row.iter().all(|&v| v == r as u64), "row {r}: {row:?}");
        }
        assert!(!IN_PART.get(), "the caller's flag is restored");
    }

    #[test]
    fn a_panicking_part_reaches_the_caller_after_all_parts_finish() {
        let finished = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            for_each_part(8, |i| {
                if i == 5 {
                    panic!("part five fails");
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }));
        let payload = r.expect_err("the panic propagates");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"part five fails"));
        // The other seven parts ran to the end before the caller resumed the panic.
        assert_eq!(finished.load(Ordering::Relaxed), 7);
        // The pool still works afterwards.
        let mut out = vec![0u64; 30];
        fill_rows(&mut out, 3, 2).unwrap();
        assert_eq!(out[27], 9 * 3 + 1);
    }

    #[test]
    fn concurrent_callers_lose_no_work() {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|t| {
                    s.spawn(move || {
                        let mut n = 0;
                        while n < 300 {
                            let rows = 10 + (t * 7 + n) % 50;
                            let mut out = vec![0u64; rows * 4];
                            fill_rows(&mut out, 4, 2 + n % 3).unwrap();
                            for (r, row) in out.chunks(4).enumerate() {
                                assert!(row.iter().all(|&v| v == r as u64 * 3 + 1));
                            }
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            for h in handles {
                assert_eq!(h.join().unwrap(), 300);
            }
        });
    }

    #[test]
    fn parts_use_pool_threads_and_survive_a_resize() {
        // Whatever limit another test set concurrently, a split finishes and writes every row.
        for n in [1, 3, 2] {
            set_max_threads(n);
            let mut out = vec![0u64; 200];
            fill_rows(&mut out, 2, 4).unwrap();
            assert!(
                out.chunks(2)
                    .enumerate()
                    .all(|(r, row)| row[0] == r as u64 * 3 + 1)
            );
        }
        set_max_threads(2);
    }
}
