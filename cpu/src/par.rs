//! Worker-thread policy and the worker pool for the heavy kernels (GEMM, convolutions).
//!
//! Kernels split large layers into up to [`max_threads`] parts; small layers stay on the calling
//! thread. The parts run on one process-wide pool of persistent workers, started lazily (at
//! most `max_threads() - 1` of them: the calling thread always takes a share) and asleep on a
//! condition variable between jobs, so an inference of a 60-layer network does not start and
//! join a hundred threads. Parts are claimed one at a time from a shared counter by the caller
//! and by whichever workers are awake, so a caller whose workers are busy elsewhere (another
//! execution, another process on the same cores) finishes its job itself. A kernel that
//! splits again from inside a part runs the nested split inline. A panic in a part is caught
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

/// How many threads to use for `work` flops split over at most `units` independent pieces:
/// one per [`PAR_MIN_FLOPS`] of work (about 100 µs at 20 GFLOP/s), so that waking a worker
/// (a few µs) stays a small fraction of its share.
pub(crate) fn threads_for(work: usize, units: usize) -> usize {
    if work < PAR_MIN_FLOPS {
        return 1;
    }
    max_threads().min(units).min(work / PAR_MIN_FLOPS).max(1)
}

/// Runs of rows per thread that [`for_row_ranges`] makes: a thread that finishes early (or a
/// caller whose worker was not scheduled: the cores are shared) takes the runs left, instead
/// of waiting for one big share.
const TILES_PER_THREAD: usize = 4;

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
    let rows = out.len().checked_div(row_len).unwrap_or(0);
    let parts = parts.clamp(1, rows.max(1));
    if parts == 1 || IN_PART.get() {
        return f(0, out);
    }
    let per = rows.div_ceil(parts.saturating_mul(TILES_PER_THREAD).min(rows));
    // Each part takes its run out of its own slot: disjoint `&mut` borrows, no unsafe.
    let chunks: Vec<Mutex<Option<&mut [T]>>> = out
        .chunks_mut(per * row_len)
        .map(|c| Mutex::new(Some(c)))
        .collect();
    // The failed run with the lowest index, and its error.
    let first_err: Mutex<Option<(usize, E)>> = Mutex::new(None);
    for_each_part(chunks.len(), |i| {
        let Some(chunk) = chunks.get(i).and_then(|slot| lock(slot).take()) else {
            return;
        };
        if let Err(e) = f(i * per, chunk) {
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
    if parts <= 1 || IN_PART.get() {
        (0..parts).for_each(f);
        return;
    }
    let pool = POOL.get_or_init(Pool::default);
    let f: *const (dyn Fn(usize) + Sync + '_) = &f;
    // SAFETY: only the trait object's lifetime bound changes (same pointer, same layout), so
    // the pointer can sit in the `'static` queue. When it may be dereferenced: see `FnPtr`.
    let f: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
    let job = Arc::new(Job {
        f: FnPtr(f),
        parts,
        next: AtomicUsize::new(0),
        pending: AtomicUsize::new(parts),
        panic: Mutex::new(None),
        caller: std::thread::current(),
    });
    pool.submit(&job, parts - 1);
    job.work();
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
/// the `Arc<Job>` then). It is dereferenced only in [`Job::work`], after claiming an index
/// below `parts`; [`for_each_part`] returns (or unwinds: its own parts run under
/// `catch_unwind`) only after `pending` says every claimed index has finished, so every call
/// happens while the closure is alive. Later claims see exhausted indexes and never call it.
#[derive(Clone, Copy)]
struct FnPtr(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the closure is `Sync`, so calling it from other threads through a shared pointer is
// sound; the pointer is only dereferenced while the closure lives (see above).
unsafe impl Send for FnPtr {}
// SAFETY: as above.
unsafe impl Sync for FnPtr {}

/// One split: its parts are claimed by index from `next`.
struct Job {
    f: FnPtr,
    parts: usize,
    /// The next unclaimed part.
    next: AtomicUsize,
    /// Parts not yet finished.
    pending: AtomicUsize,
    /// The first panic of a part.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The thread waiting in [`for_each_part`].
    caller: Thread,
}

impl Job {
    /// Claims and runs parts until none is left.
    fn work(&self) {
        let was = IN_PART.replace(true);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.parts {
                break;
            }
            let f = self.f.0;
            // SAFETY: index `i` < `parts` was claimed above and its `pending` count is not yet
            // released, so the caller is still waiting in `for_each_part` and the closure is
            // alive (see `FnPtr`).
            let call = || unsafe { (*f)(i) };
            if let Err(p) = catch_unwind(AssertUnwindSafe(call)) {
                lock(&self.panic).get_or_insert(p);
            }
            if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.caller.unpark();
            }
        }
        IN_PART.set(was);
    }

    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.parts
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
            let spawned = std::thread::Builder::new()
                .name("nnaccel-cpu".into())
                .spawn(move || self.worker());
            // Without a new thread the caller and the existing workers do the work.
            if spawned.is_err() {
                break;
            }
            st.workers += 1;
        }
        drop(st);
        for _ in 0..want {
            self.wake.notify_one();
        }
    }

    /// Takes `job` off the queue (its parts are all claimed).
    fn retire(&self, job: &Arc<Job>) {
        lock(&self.state).queue.retain(|j| !Arc::ptr_eq(j, job));
    }

    fn worker(&self) {
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
                job.work();
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
            st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
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

    #[test]
    fn every_part_runs_exactly_once() {
        let counts: Vec<AtomicUsize> = (0..37).map(|_| AtomicUsize::new(0)).collect();
        for_each_part(counts.len(), |i| {
            counts[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn the_first_failing_run_in_row_order_is_returned() {
        let mut out = vec![0u8; 40];
        let r = for_row_ranges(
            &mut out,
            1,
            4,
            |r0, _| {
                if r0 >= 10 { Err(r0) } else { Ok(()) }
            },
        );
        // Runs of 40 / (4 threads · 4 runs) → 3 rows start at 0, 3, …, 9, 12: the first
        // failing one starts at row 12.
        assert_eq!(r, Err(12));
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
