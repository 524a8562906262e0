//! Burst against regular execution through `nnaccel-hald` (over `nnaccel-sim` on FUSE): p50
//! and p99 latency of regular executions over the socket, bursts with polling window 0, and
//! bursts with the service's default window, with the ratios burst/regular, for a tiny model
//! (one ADD of 4 floats) and a medium one (FULLY_CONNECTED 256 × 256), all in one run. The
//! same figures come from `nnaccelctl bench --burst --service SOCKET`
//! (`nnaccel_protocol::bench`).
//!
//! Needs root and `/dev/fuse`; exits 1 otherwise. Build the binaries of the same profile first:
//!
//! ```text
//! cargo build --release -p nnaccel-service -p nnaccelctl -p nnaccel-kmod-sim --bins
//! cargo bench -p nnaccel-tests --bench burst
//! ```
//!
//! `NNACCEL_BENCH_ITERS` sets the executions per series (default 2000); `--cpu` benches a
//! CPU-only service instead of the device.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::ExitCode;

use nnaccel_protocol::bench;
use nnaccel_tests::Sim;
use nnaccel_tests::service::Hald;

fn main() -> ExitCode {
    let cpu = std::env::args().any(|a| a == "--cpu");
    if !cpu && !nnaccel_tests::require_privileges() {
        eprintln!("burst bench: needs root and /dev/fuse (or --cpu)");
        return ExitCode::FAILURE;
    }
    let iterations = std::env::var("NNACCEL_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2000);
    let sim = (!cpu).then(|| Sim::start(&[]));
    let hald = match &sim {
        Some(s) => Hald::with_device(s),
        None => Hald::cpu_only(),
    };
    let client = hald.client();
    println!("service: {}", client.server());
    for (label, model) in [
        ("tiny: ADD of 4 floats", bench::tiny_model()),
        ("medium: FULLY_CONNECTED 256x256", bench::medium_model()),
    ] {
        match model.and_then(|m| bench::run(&client, label, &m, iterations)) {
            Ok(lines) => {
                for l in lines {
                    println!("{l}");
                }
            }
            Err(e) => {
                eprintln!("burst bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
