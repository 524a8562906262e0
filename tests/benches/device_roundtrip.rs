//! Round-trip latency of the simulated device through its FUSE file, in one run:
//!
//! - GET_PARAM: one ioctl;
//! - a small job (ADD of 4 floats) through SUBMIT + WAIT: two ioctls;
//! - the same job through a shared-memory ring queue: no ioctl (doorbell futex; the client
//!   spins ~50 µs, then sleeps on the completion futex).
//!
//! Prints the median and p99 in µs and the ratio of the ioctl path to the ring path. Asserts
//! no timings. Run: `cargo bench -p nnaccel-tests --bench device_roundtrip` (root, /dev/fuse,
//! and `cargo build --release -p nnaccel-kmod-sim` first). `NNACCEL_BENCH_ITERS` overrides
//! the iteration count. Without `--bench` (as `cargo test --all-targets` runs it) it does a
//! short smoke run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nnaccel_tests::uapi::abi::{PARAM_API_VERSION, QUEUE_FLAG_HIGH_PERFORMANCE};
use nnaccel_tests::uapi::device::{Device, DeviceExt, RingQueue};
use nnaccel_tests::{AddSetup, Sim, deadline, long_deadline};

struct Stats {
    name: &'static str,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
}

fn measure(name: &'static str, warmup: usize, iters: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..warmup {
        f();
    }
    let mut ns: Vec<u64> = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        f();
        ns.push(t.elapsed().as_nanos() as u64);
    }
    ns.sort_unstable();
    let pick = |q: f64| ns[((ns.len() as f64 - 1.0) * q).round() as usize] as f64 / 1000.0;
    let mean_us = ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0;
    Stats {
        name,
        p50_us: pick(0.5),
        p99_us: pick(0.99),
        mean_us,
    }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let privileged = rustix::process::geteuid().is_root()
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .is_ok();
    if !privileged {
        if bench_mode {
            eprintln!(
                "device_roundtrip needs root and /dev/fuse (it mounts the simulated device with \
                 FUSE); run it as root."
            );
            std::process::exit(1);
        }
        eprintln!("SKIPPED: device_roundtrip smoke run needs root and /dev/fuse");
        return;
    }
    let default_iters = if bench_mode { 20_000 } else { 200 };
    let iters: usize = std::env::var("NNACCEL_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_iters)
        .max(1);
    let warmup = (iters / 10).max(10);

    let sim = Sim::new();
    let dev = sim.open();
    let add = AddSetup::new(&*dev, 4);
    let job = add.job();
    let mut ring = RingQueue::create(dev.clone() as Arc<dyn Device>, 64, 0).expect("QUEUE_CREATE");

    let get_param = measure("GET_PARAM ioctl", warmup, iters, || {
        dev.get_param(PARAM_API_VERSION).expect("GET_PARAM");
    });
    let ioctl_job = measure("job: SUBMIT+WAIT ioctls", warmup, iters, || {
        let seq = dev.submit(&job).expect("SUBMIT");
        let w = dev.wait(0, seq, long_deadline()).expect("WAIT");
        assert_eq!(w.status, 0);
    });
    let ring_job = measure("job: ring queue (futex)", warmup, iters, || {
        let seq = ring.submit(&job).expect("ring submit");
        let c = ring
            .wait(
                seq,
                Duration::from_micros(50),
                Some(deadline(Duration::from_secs(10))),
            )
            .expect("ring wait");
        assert_eq!(c.status, 0);
    });
    // The same with the burst hint: the engine polls the doorbell briefly before sleeping.
    let mut hp_ring = RingQueue::create(
        dev.clone() as Arc<dyn Device>,
        64,
        QUEUE_FLAG_HIGH_PERFORMANCE,
    )
    .expect("QUEUE_CREATE (high performance)");
    let hp_ring_job = measure("job: ring, HIGH_PERFORMANCE", warmup, iters, || {
        let seq = hp_ring.submit(&job).expect("ring submit");
        let c = hp_ring
            .wait(
                seq,
                Duration::from_micros(50),
                Some(deadline(Duration::from_secs(10))),
            )
            .expect("ring wait");
        assert_eq!(c.status, 0);
    });
    assert_eq!(
        add.output(),
        add.expected(),
        "the jobs computed the wrong result"
    );

    println!();
    println!("nnaccel device round trips through FUSE ({iters} iterations after {warmup} warm-up)");
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "operation", "p50 µs", "p99 µs", "mean µs"
    );
    for s in [&get_param, &ioctl_job, &ring_job, &hp_ring_job] {
        println!(
            "{:<28} {:>10.1} {:>10.1} {:>10.1}",
            s.name, s.p50_us, s.p99_us, s.mean_us
        );
    }
    println!();
    println!(
        "ratio ioctl job p50 / ring job p50: {:.2}x",
        ioctl_job.p50_us / ring_job.p50_us.max(0.001)
    );
    println!(
        "ratio ioctl job p50 / GET_PARAM p50: {:.2}x",
        ioctl_job.p50_us / get_param.p50_us.max(0.001)
    );
    println!(
        "ratio ioctl job p99 / ring job p99: {:.2}x",
        ioctl_job.p99_us / ring_job.p99_us.max(0.001)
    );
    println!(
        "ratio ioctl job p50 / HIGH_PERFORMANCE ring job p50: {:.2}x",
        ioctl_job.p50_us / hp_ring_job.p50_us.max(0.001)
    );
    drop(hp_ring);
    drop(ring);
    drop(dev);
    drop(sim);
}
