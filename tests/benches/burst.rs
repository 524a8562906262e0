//! Burst against regular execution, in process (the embedded default: the burst runs on the
//! caller's thread) and through `nnaccel-hald` (over `nnaccel-sim` on FUSE, or `--cpu`): p50
//! and p99 latency of regular executions, bursts with polling window 0, and bursts with the
//! default window, with the ratios burst/regular and default window/window 0, for a tiny model
//! (one ADD of 4 floats) and a medium one (FULLY_CONNECTED 256 × 256), all in one run — once on
//! a quiet machine and once with two busy-looping processes the bench starts beside it. Under
//! the service's rows it prints the service's worker counters (`WorkerStats`, which the
//! service logs at debug level when a burst's worker ends). The same figures per backend come
//! from `nnaccelctl bench --burst [--load N]` (`nnaccel_protocol::bench`).
//!
//! The service over the device needs root and `/dev/fuse`; without them, or with `--cpu`, the
//! service runs on the CPU executor. Build the binaries of the same profile first:
//!
//! ```text
//! cargo build --release -p nnaccel-service -p nnaccelctl -p nnaccel-kmod-sim --bins
//! cargo bench -p nnaccel-tests --bench burst
//! ```
//!
//! `NNACCEL_BENCH_ITERS` sets the executions per series (default 2000).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Child, Command, ExitCode, Stdio};

use std::time::{Duration, Instant};

use nnaccel_hal::burst::BurstConfig;
use nnaccel_hal::{Backend, Driver, ErrorStatus, HalDevice, MeasureTiming, OperationType};
use nnaccel_protocol::bench;
use nnaccel_tests::Sim;
use nnaccel_tests::service::{Hald, Io3, binary_model};

/// Busy-looping processes (`sh -c 'while :; do :; done'`), killed when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(n: usize) -> Self {
        Self(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .spawn()
                        .expect("start a busy-looping process")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Both models on `device`; false if a series failed.
fn run_models(device: &dyn HalDevice, iterations: u32) -> bool {
    for (label, model) in [
        ("tiny: ADD of 4 floats", bench::tiny_model()),
        ("medium: FULLY_CONNECTED 256x256", bench::medium_model()),
    ] {
        match model.and_then(|m| bench::run(device, label, &m, iterations)) {
            Ok(lines) => {
                for l in lines {
                    println!("{l}");
                }
            }
            Err(e) => {
                eprintln!("burst bench: {e}");
                return false;
            }
        }
    }
    true
}

/// The cross-thread path on a model of this process (`configure_in_process_over_queues`: the
/// queues and a worker thread as in the service, without the socket), tiny model, window 0 and
/// the default window, with what the worker did (`WorkerStats`).
fn over_queues(driver: &Driver, iterations: u32) -> Result<(), String> {
    let pm = driver
        .prepare_model(
            &binary_model(OperationType::Add, 4),
            nnaccel_hal::ExecutionPreference::FastSingleAnswer,
            nnaccel_hal::Priority::Medium,
            None,
        )
        .map_err(|s| format!("prepare: {s}"))?;
    let pool = nnaccel_protocol::pools::ashmem(Io3::bytes_needed(4)).map_err(|e| e.to_string())?;
    let io = Io3::new(pool, 4);
    let request = io.request();
    println!("tiny: ADD of 4 floats, in process over queues and a worker thread");
    let mut no_poll_p50 = Duration::ZERO;
    for window_us in [0, 50] {
        let b = nnaccel_hal::burst::configure_in_process_over_queues(
            &pm,
            BurstConfig {
                polling_window_us: Some(window_us),
                ..BurstConfig::default()
            },
        )
        .map_err(|s| format!("configure: {s}"))?;
        let mut t = Vec::with_capacity(iterations as usize);
        for i in 0..bench::WARMUP + iterations {
            let start = Instant::now();
            let r = b.execute(&request, MeasureTiming::No);
            if i >= bench::WARMUP {
                t.push(start.elapsed());
            }
            if r.status != ErrorStatus::None {
                return Err(format!("burst execution: {}", r.status));
            }
        }
        t.sort();
        let (p50, p99) = (bench::percentile(&t, 0.5), bench::percentile(&t, 0.99));
        if window_us == 0 {
            no_poll_p50 = p50;
        }
        let st = b.worker_stats().ok_or("no worker counters")?;
        println!(
            "  window {window_us:>2} us: p50 {:>6.1} us  p99 {:>7.1} us  (p50 / window 0: {:.3}); {}",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            p50.as_secs_f64() / no_poll_p50.as_secs_f64().max(1e-12),
            st.summary(),
        );
    }
    Ok(())
}

/// What the service logged of each burst worker that ended (`WorkerStats`, at debug level):
/// the `worker: …` part of its `burst worker ends` lines, oldest first.
fn worker_ends(hald: &Hald) -> Vec<String> {
    hald.log()
        .lines()
        .filter(|l| l.contains("burst worker ends after"))
        .filter_map(|l| l.split("; ").find(|p| p.starts_with("worker: ")))
        .map(str::to_owned)
        .collect()
}

/// The service's counters for the four bursts `run_models` ran (each model: window 0, then
/// the default window), once their workers have ended and logged them.
fn print_service_workers(hald: &Hald, ended_before: usize) {
    let until = Instant::now() + Duration::from_secs(2);
    let mut ends = worker_ends(hald);
    while ends.len() < ended_before + 4 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
        ends = worker_ends(hald);
    }
    let labels = [
        "tiny, window 0",
        "tiny, default window",
        "medium, window 0",
        "medium, default window",
    ];
    println!("service's burst workers (from its log):");
    for (label, line) in labels.iter().zip(ends.iter().skip(ended_before)) {
        println!("  {label:<22} {line}");
    }
}

fn main() -> ExitCode {
    let device = !std::env::args().any(|a| a == "--cpu") && nnaccel_tests::require_privileges();
    let iterations = std::env::var("NNACCEL_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2000);
    let sim = device.then(|| Sim::start(&[]));
    let hald = match &sim {
        Some(s) => Hald::with_device(s),
        None => Hald::cpu_only(),
    };
    let client = hald.client();
    let in_process = Driver::new(Backend::CpuOnly);
    for (scenario, hogs) in [("quiet", 0), ("loaded: 2 busy-looping processes", 2)] {
        let _hogs = Hogs::start(hogs);
        println!("=== {scenario}");
        println!("--- in process (CPU executor; bursts run on the caller's thread)");
        if !run_models(&in_process, iterations) {
            return ExitCode::FAILURE;
        }
        if let Err(e) = over_queues(&in_process, iterations) {
            eprintln!("burst bench: {e}");
            return ExitCode::FAILURE;
        }
        println!("--- service: {}", client.server());
        let ended = worker_ends(&hald).len();
        if !run_models(&client, iterations) {
            return ExitCode::FAILURE;
        }
        print_service_workers(&hald, ended);
    }
    ExitCode::SUCCESS
}
