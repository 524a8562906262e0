//! What a prepared model keeps per operation (issue 16, "prepared-model memory in proportion
//! to the model: measure it"): the figure behind the service's `PREPARED_BYTES_PER_OPERATION`
//! charge to the model-memory budget (docs/service.md, "Model limits").
//!
//! The model: a chain of N ADDs over `[4]` f32 (`t1 = a + b`, `t2 = t1 + b`, …), one
//! temporary per operation, the smallest operation a client can send, so the per-operation
//! overhead dominates. For each N it prints:
//!
//! - **heap kept**: bytes still allocated in this process while the prepared model lives,
//!   above what was allocated before `prepare_model` (a counting global allocator), per
//!   operation: the in-process driver on the CPU executor, and on the embedded simulated
//!   device (its programs count too);
//! - **heap peak**: the most allocated at once during the preparation, per operation;
//! - **daemon RSS**: how much `nnaccel-hald --cpu` grew (VmRSS) while holding the prepared
//!   model, per operation, and what it gave back when the model was released.
//!
//! ```text
//! cargo bench -p nnaccel-tests --bench prepared_memory
//! ```
//!
//! `NNACCEL_BENCH_OPS` sets the chain lengths (comma-separated; default 1000,10000,100000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nnaccel_cpu::CacheAligned;
use nnaccel_hal::{Backend, Driver, Model, OperationType};
use nnaccel_service::PREPARED_BYTES_PER_OPERATION;
use nnaccel_tests::service::*;

/// The allocator of the project's programs ([`CacheAligned`]), counting the bytes live now and the most live at once.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `CacheAligned` with the caller's arguments unchanged; the counters
// are plain atomics and never affect what is allocated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc`'s contract.
        let p = unsafe { CacheAligned.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from `alloc`/`realloc` above with `layout`.
        unsafe { CacheAligned.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::realloc`'s contract.
        let p = unsafe { CacheAligned.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            let now = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A chain of `ops` ADDs over `[4]` f32: inputs a, b; one temporary per operation; output
/// the last sum.
fn add_chain(ops: u32) -> Model {
    let mut b = ModelBuilder::new();
    let a = b.input(&[4]);
    let x = b.input(&[4]);
    let act = b.int32(0);
    let mut prev = a;
    for i in 0..ops {
        let out = if i + 1 == ops {
            b.output(&[4])
        } else {
            b.temporary(&[4])
        };
        b.operation(OperationType::Add, &[prev, x, act], &[out]);
        prev = out;
    }
    b.build()
}

/// (bytes kept per operation, peak bytes per operation, on the device) of preparing `model`
/// on `driver`.
fn heap_per_operation(driver: &Driver, model: &Model, ops: u32) -> (f64, f64, bool) {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let pm = prepare(driver, model).expect("prepare the ADD chain");
    let kept = LIVE.load(Ordering::SeqCst).saturating_sub(before);
    let peak = PEAK.load(Ordering::SeqCst).saturating_sub(before);
    let on_device = pm.runs_on_device();
    drop(pm);
    let per = |b: usize| b as f64 / f64::from(ops);
    (per(kept), per(peak), on_device)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn embedded_device() -> Driver {
    use nnaccel_kmod_sim::{Config, InprocFile, SimDevice};
    let sim = SimDevice::new(Config::default()).expect("the embedded simulated device");
    let file: Arc<dyn nnaccel_uapi::Device> = Arc::new(InprocFile::open(&sim));
    Driver::new(Backend::Device(file))
}

fn main() {
    let chains: Vec<u32> = std::env::var("NNACCEL_BENCH_OPS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<u32>| !v.is_empty())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000]);
    println!(
        "prepared-model memory per operation (a chain of ADDs over [4] f32); the service \
         charges {PREPARED_BYTES_PER_OPERATION} B/op"
    );
    let cpu = Driver::new(Backend::CpuOnly);
    let device = embedded_device();
    let hald = Hald::start_configured(
        &[std::ffi::OsStr::new("--cpu")],
        &[("NNACCEL_LOG", "warn")],
        "max_model_operations = 1000000\nmax_model_operands = 4000000\n",
    );
    let client = hald.client();
    println!(
        "{:>8}  {:>14} {:>14}  {:>17} {:>17}  {:>16} {:>16}  {:>7}",
        "ops",
        "cpu kept B/op",
        "cpu peak B/op",
        "device kept B/op",
        "device peak B/op",
        "daemon RSS B/op",
        "given back B/op",
        "charged"
    );
    for &ops in &chains {
        let model = add_chain(ops);
        let (cpu_kept, cpu_peak, _) = heap_per_operation(&cpu, &model, ops);
        let (dev_kept, dev_peak, on_device) = heap_per_operation(&device, &model, ops);
        let before = rss_kib(hald.pid());
        let pm = prepare(&client, &model).expect("prepare through the service");
        let held = rss_kib(hald.pid());
        drop(pm);
        // The release is a message; wait for the daemon to act on it (an info round trip).
        let _ = client.info();
        let after = rss_kib(hald.pid());
        let per_kib = |kib: i64| kib as f64 * 1024.0 / f64::from(ops);
        let grew = per_kib(held as i64 - before as i64);
        let back = per_kib(held as i64 - after as i64);
        let worst = cpu_kept.max(dev_kept).max(grew);
        println!(
            "{ops:>8}  {cpu_kept:>14.0} {cpu_peak:>14.0}  {dev_kept:>17.0}{} {dev_peak:>16.0}  \
             {grew:>16.0} {back:>16.0}  {:>6.2}x",
            if on_device { " " } else { "*" },
            PREPARED_BYTES_PER_OPERATION as f64 / worst.max(1.0),
        );
    }
    println!(
        "(* = the chain did not lower to the device and runs on the CPU there; charged = the \
         service's charge over the largest figure measured: above 1 means the budget \
         over-counts)"
    );
}
