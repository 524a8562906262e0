//! A state tensor passed along a chain of 100 executions (`state = state + x`, one ADD),
//! through memory-domain buffers versus through shared-memory pools, via `nnaccel-hald`.
//!
//! - buffers: two device buffers (allocate with roles input 0 and output 0) used in turn as
//!   input and output; each request names two tokens and one pool (x), so one fd travels and
//!   the device binds the buffers' BOs directly;
//! - pools: two ashmem pools used in turn; each request carries three fds, which the service
//!   imports as BOs for that execution (BO_IMPORT + BO_CLOSE each).
//!
//! Both chains must give `state0 + 100 x`. Printed: the median time of a chain, per
//! execution, and the ratio, for each state size, on the device and CPU-only services.
//!
//! Needs root and `/dev/fuse`. Build the binaries of the same profile first:
//!
//! ```text
//! cargo build --release -p nnaccel-service -p nnaccelctl -p nnaccel-kmod-sim --bins
//! cargo bench -p nnaccel-tests --bench domains
//! ```
//!
//! `NNACCEL_BENCH_ITERS` sets the number of timed chains per case (default 5).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnaccel_hal::{
    BufferDesc, BufferRole, DataLocation, ErrorStatus, HalBuffer, HalDevice, HalPreparedModel,
    MeasureTiming, Memory, MemoryPool, OperationType, Request, RequestArgument,
};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tests::Sim;
use nnaccel_tests::bench::{iterations, median, ms};
use nnaccel_tests::service::*;

const CHAIN: usize = 100;

fn whole(pool_index: u32, length: u32) -> RequestArgument {
    RequestArgument {
        has_no_value: false,
        location: DataLocation {
            pool_index,
            offset: 0,
            length,
            padding: 0,
        },
        dimensions: vec![],
    }
}

fn pool_of(values: &[f32]) -> Memory {
    let m = pools::ashmem(values.len() as u64 * 4).unwrap();
    MappedClientPool::new(&m)
        .unwrap()
        .write_f32(0, values)
        .unwrap();
    m
}

fn check(got: &[f32], state0: &[f32], x: &[f32], what: &str) {
    for (i, ((g, s), x)) in got.iter().zip(state0).zip(x).enumerate() {
        let want = s + CHAIN as f32 * x;
        assert!(
            (g - want).abs() < 1e-3,
            "{what}: element {i} is {g}, want {want}"
        );
    }
}

/// Runs the chain: `requests[0]`, `requests[1]`, ... alternately, [`CHAIN`] times.
fn run_chain(pm: &Arc<dyn HalPreparedModel>, requests: &[Request]) -> Duration {
    let start = Instant::now();
    for i in 0..CHAIN {
        let r = pm.execute_synchronously(&requests[i % 2], MeasureTiming::No, None);
        assert_eq!(r.status, ErrorStatus::None, "{r:?}");
    }
    start.elapsed()
}

/// One chain through two device buffers; returns its time (the executions only).
fn chain_through_buffers(
    c: &ServiceClient,
    pm: &Arc<dyn HalPreparedModel>,
    n: u32,
    state0: &[f32],
    x: &Memory,
) -> Duration {
    let role = BufferRole {
        model_index: 0,
        io_index: 0,
        frequency: 1.0,
    };
    let bufs: Vec<Arc<dyn HalBuffer>> = (0..2)
        .map(|_| {
            c.allocate(
                &BufferDesc::default(),
                std::slice::from_ref(pm),
                &[role],
                &[role],
            )
            .unwrap()
        })
        .collect();
    bufs[0].copy_from(&pool_of(state0), &[]).unwrap();
    let requests: Vec<Request> = (0..2)
        .map(|i| Request {
            inputs: vec![whole(0, 0), whole(1, n * 4)],
            outputs: vec![whole(2, 0)],
            pools: vec![
                MemoryPool::Token(bufs[i].token()),
                MemoryPool::Memory(x.clone()),
                MemoryPool::Token(bufs[1 - i].token()),
            ],
        })
        .collect();
    let took = run_chain(pm, &requests);
    let out = pools::ashmem(u64::from(n) * 4).unwrap();
    bufs[CHAIN % 2].copy_to(&out).unwrap();
    let got = MappedClientPool::new(&out)
        .unwrap()
        .read_f32(0, n as usize)
        .unwrap();
    check(&got, state0, &read(x, n), "buffers");
    took
}

fn read(m: &Memory, n: u32) -> Vec<f32> {
    MappedClientPool::new(m)
        .unwrap()
        .read_f32(0, n as usize)
        .unwrap()
}

/// The same chain through two shared-memory pools.
fn chain_through_pools(
    pm: &Arc<dyn HalPreparedModel>,
    n: u32,
    state0: &[f32],
    x: &Memory,
) -> Duration {
    let states = [pool_of(state0), pools::ashmem(u64::from(n) * 4).unwrap()];
    let requests: Vec<Request> = (0..2)
        .map(|i| Request {
            inputs: vec![whole(0, n * 4), whole(1, n * 4)],
            outputs: vec![whole(2, n * 4)],
            pools: vec![
                MemoryPool::Memory(states[i].clone()),
                MemoryPool::Memory(x.clone()),
                MemoryPool::Memory(states[1 - i].clone()),
            ],
        })
        .collect();
    let took = run_chain(pm, &requests);
    check(&read(&states[CHAIN % 2], n), state0, &read(x, n), "pools");
    took
}

fn bench(label: &str, c: &ServiceClient) {
    for n in [32 * 32 * 8u32, 256 * 256 * 8] {
        let pm = prepare(c, &binary_model(OperationType::Add, n)).unwrap();
        let state0: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
        let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25).collect();
        let x = pool_of(&xs);
        let (mut with_buffers, mut with_pools) = (Vec::new(), Vec::new());
        // One warm-up chain each, then the timed ones, interleaved.
        chain_through_buffers(c, &pm, n, &state0, &x);
        chain_through_pools(&pm, n, &state0, &x);
        for _ in 0..iterations(5) {
            with_buffers.push(chain_through_buffers(c, &pm, n, &state0, &x));
            with_pools.push(chain_through_pools(&pm, n, &state0, &x));
        }
        let (b, p) = (median(with_buffers), median(with_pools));
        println!(
            "{label:<11} state {:>8} B ({} on the device): {CHAIN} executions through device buffers {} ({:.1} µs each), through shared-memory pools {} ({:.1} µs each); pools/buffers = {:.2}",
            n * 4,
            if pm.runs_on_device() { "runs" } else { "not" },
            ms(b),
            b.as_secs_f64() * 1e6 / CHAIN as f64,
            ms(p),
            p.as_secs_f64() * 1e6 / CHAIN as f64,
            p.as_secs_f64() / b.as_secs_f64()
        );
    }
}

fn main() -> ExitCode {
    if !nnaccel_tests::require_privileges() {
        eprintln!("domains bench: needs root and /dev/fuse");
        return ExitCode::FAILURE;
    }
    let sim = Sim::start(&[]);
    let hald = Hald::with_device(&sim);
    bench("device", &hald.client());
    drop(hald);
    drop(sim);
    let cpu = Hald::cpu_only();
    bench("cpu-only", &cpu.client());
    ExitCode::SUCCESS
}
