//! Worker-thread policy for the heavy kernels (GEMM, convolutions).
//!
//! Kernels split large layers across up to [`max_threads`] scoped threads (the calling thread
//! does one share of the work); small layers stay on the calling thread, where spawning would
//! cost more than it saves.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Work (in flops, or flop-equivalents) below which a kernel stays single-threaded.
const PAR_MIN_FLOPS: usize = 1 << 22;

/// The most threads one kernel uses, however [`set_max_threads`], `NNACCEL_CPU_THREADS` or the
/// machine put it; front ends that take a thread count (`nnaccelctl --threads`, the service's
/// `threads` setting) accept 1 to this.
pub const MAX_THREADS: usize = 64;

/// 0 = not set by [`set_max_threads`]: use the environment or the machine.
static OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// Limits the number of threads one kernel may use, at most [`MAX_THREADS`] (0 restores the
/// default: the `NNACCEL_CPU_THREADS` environment variable if set, else the number of available
/// CPUs). Applies process-wide to executions that start afterwards.
pub fn set_max_threads(n: usize) {
    OVERRIDE.store(n.min(MAX_THREADS), Ordering::Relaxed);
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

/// How many threads to use for `work` flops split over at most `units` independent pieces.
pub(crate) fn threads_for(work: usize, units: usize) -> usize {
    if work < PAR_MIN_FLOPS {
        return 1;
    }
    max_threads()
        .min(units)
        .min(work / (PAR_MIN_FLOPS / 2))
        .max(1)
}

/// Splits `out` into `parts` contiguous runs of whole rows (`row_len` elements each) and calls
/// `f(first_row, rows)` on each, in parallel when `parts > 1`. The calling thread takes the
/// first run. Returns the first error.
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
    if parts == 1 {
        return f(0, out);
    }
    let per = rows.div_ceil(parts);
    std::thread::scope(|s| {
        let f = &f;
        let mut chunks = out.chunks_mut(per * row_len).enumerate();
        let first = chunks.next();
        let handles: Vec<_> = chunks
            .map(|(i, chunk)| s.spawn(move || f(i * per, chunk)))
            .collect();
        let mut result = match first {
            Some((_, chunk)) => f(0, chunk),
            None => Ok(()),
        };
        for h in handles {
            let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            if result.is_ok() {
                result = r;
            }
        }
        result
    })
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
}
