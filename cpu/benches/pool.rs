//! Per-split dispatch cost of the executor's worker pool against the alternatives: a fresh
//! `std::thread::scope` per split (what `par.rs` did before) and a rayon `ThreadPool` (`scope`
//! with one spawn per extra part). Each split has `T` parts of `WORK` (a short dependent
//! arithmetic loop per part: 0 = empty parts, the pure dispatch cost); the figure is the median
//! time of one split over many, in µs, next to the same parts run in order on one thread.
//!
//! `cargo bench -p nnaccel-cpu --bench pool` (`NNACCEL_BENCH_THREADS=T`, default 2). Results
//! and the choice: `docs/dependencies.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Parts that ran on a thread other than the caller's.
static HELPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static IS_MAIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Work of one part: `iters` dependent multiply-adds (about 1 ns each).
fn part(iters: u64, sink: &AtomicU64) {
    if !IS_MAIN.get() {
        HELPED.fetch_add(1, Ordering::Relaxed);
    }
    let mut x = 1u64;
    for i in 0..iters {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    sink.fetch_add(x, Ordering::Relaxed);
}

/// Median µs of one call of `split` over `reps` calls, after warm-ups.
fn median_us(reps: usize, mut split: impl FnMut()) -> f64 {
    for _ in 0..20 {
        split();
    }
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            split();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let threads: usize = std::env::var("NNACCEL_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2);
    nnaccel_cpu::set_max_threads(threads);
    let rayon_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    let sink = AtomicU64::new(0);
    IS_MAIN.set(true);
    println!("{threads} parts per split; median µs per split (lower is better)");
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "work/part", "inline", "ours", "scope", "rayon", "ours helped"
    );
    for iters in [0u64, 1_000, 10_000, 100_000] {
        let reps = if iters >= 100_000 { 300 } else { 3000 };
        let sink = &sink;
        let inline = median_us(reps, || (0..threads).for_each(|_| part(iters, sink)));
        let helped0 = HELPED.load(Ordering::Relaxed);
        let ours = median_us(reps, || {
            nnaccel_cpu::for_each_part(threads, |_| part(iters, sink));
        });
        // Share of the parts our pool's workers took (the rest ran on the caller).
        let helped =
            (HELPED.load(Ordering::Relaxed) - helped0) as f64 / ((reps + 20) * threads) as f64;
        let scope = median_us(reps, || {
            std::thread::scope(|s| {
                for _ in 1..threads {
                    s.spawn(|| part(iters, sink));
                }
                part(iters, sink);
            });
        });
        let rayon = median_us(reps, || {
            rayon_pool.scope(|s| {
                for _ in 1..threads {
                    s.spawn(|_| part(iters, sink));
                }
                part(iters, sink);
            });
        });
        println!(
            "{iters:>10} {inline:>10.2} {ours:>10.2} {scope:>10.2} {rayon:>10.2} {:>11.0}%",
            helped * 100.0
        );
    }
    black_box(sink.load(Ordering::Relaxed));
}
