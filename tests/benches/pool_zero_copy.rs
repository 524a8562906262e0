//! Zero copy versus the socket: the execution time of a model with a 16 MiB input through a
//! memfd pool via `nnaccel-hald` (the device imports the client's memfds; the service copies
//! nothing), next to the time it takes to move the same 16 MiB through a Unix socket — raw
//! (a socket pair, send + receive) and through the service's own socket (a frame carrying 16
//! MiB of operand values, received and decoded by the service).
//!
//! The model: `out = x + c`, x a `[4194304]` f32 input (16 MiB), c a broadcast `[1]`
//! CONSTANT_COPY, out `[4194304]` (16 MiB) — an operation the engine runs at memory speed.
//!
//! Needs root and `/dev/fuse` (the simulator serves a FUSE file); exits 1 otherwise. Build the
//! binaries of the same profile first:
//!
//! ```text
//! cargo build --release -p nnaccel-service -p nnaccelctl -p nnaccel-kmod-sim --bins
//! cargo bench -p nnaccel-tests --bench pool_zero_copy
//! ```
//!
//! `NNACCEL_BENCH_ITERS` sets the number of timed runs (default 20).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nnaccel_hal::{ErrorStatus, MeasureTiming, OperationType};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_protocol::{self as protocol, ClientMessage, PROTOCOL_VERSION, ServiceMessage};
use nnaccel_tests::Sim;
use nnaccel_tests::bench::{iterations, median, ms};
use nnaccel_tests::service::*;

const ELEMENTS: u32 = 4 << 20;
const BYTES: u64 = ELEMENTS as u64 * 4;
const CONSTANT: f32 = 0.5;

fn gib_s(d: Duration) -> String {
    format!(
        "{:.2} GiB/s",
        BYTES as f64 / d.as_secs_f64() / f64::from(1u32 << 30)
    )
}

/// `out = x + c` over 16 MiB: times `iters` executions through `c`; returns (median wall
/// time, median device-or-executor time) and whether it ran on the device.
fn time_execution(c: &ServiceClient, iters: usize) -> (Duration, Duration, bool) {
    let mut b = ModelBuilder::new();
    let x = b.input(&[ELEMENTS]);
    let k = b.constant_copy(&[1], &[CONSTANT]);
    let act = b.int32(0);
    let out = b.output(&[ELEMENTS]);
    b.operation(OperationType::Add, &[x, k, act], &[out]);
    let model = b.build();
    let pm = prepare(c, &model).expect("prepare the 16 MiB ADD");
    let input = pools::ashmem(BYTES).unwrap();
    let output = pools::ashmem(BYTES).unwrap();
    let in_map = MappedClientPool::new(&input).unwrap();
    let out_map = MappedClientPool::new(&output).unwrap();
    let values: Vec<f32> = (0..ELEMENTS).map(|i| (i % 1000) as f32).collect();
    in_map.write_f32(0, &values).unwrap();
    let req = request(
        vec![arg(0, 0, BYTES as u32)],
        vec![arg(1, 0, BYTES as u32)],
        &[&input, &output],
    );
    let run = || {
        let t = Instant::now();
        let r = pm.execute_synchronously(&req, MeasureTiming::Yes, None);
        let wall = t.elapsed();
        assert_eq!(r.status, ErrorStatus::None, "{r:?}");
        (wall, Duration::from_micros(r.timing.time_on_device_us))
    };
    run();
    let check = out_map.read_f32(0, 1000).unwrap();
    assert!(
        check
            .iter()
            .enumerate()
            .all(|(i, v)| *v == i as f32 + CONSTANT),
        "wrong output"
    );
    let (walls, devs): (Vec<_>, Vec<_>) = (0..iters).map(|_| run()).unzip();
    (median(walls), median(devs), pm.runs_on_device())
}

/// 16 MiB sent on one end of a socket pair and received on the other (two copies: into the
/// kernel and out of it), as any frame carrying the input would be.
fn time_socket_pair(iters: usize) -> Duration {
    let (a, mut bsock) = UnixStream::pair().unwrap();
    let data = vec![7u8; BYTES as usize];
    let mut sink = vec![0u8; BYTES as usize];
    let mut times = Vec::with_capacity(iters);
    for i in 0..=iters {
        let t = Instant::now();
        std::thread::scope(|s| {
            let mut a = &a;
            let data = &data;
            s.spawn(move || a.write_all(data).unwrap());
            bsock.read_exact(&mut sink).unwrap();
        });
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    median(times)
}

/// A GetSupportedOperations frame whose model carries 16 MiB of operand values, sent to the
/// service, received, decoded and answered: what moving the input through the service's
/// socket costs before any execution.
fn time_service_socket(hald: &Hald, iters: usize) -> Duration {
    let s = UnixStream::connect(hald.socket()).unwrap();
    let call = |msg: &ClientMessage| {
        protocol::send_frame(&s, &protocol::encode(msg).unwrap(), &[]).unwrap();
        let (body, _) = protocol::recv_frame(&s, protocol::DEFAULT_MAX_MESSAGE_BYTES).unwrap();
        protocol::decode::<ServiceMessage>(&body).unwrap()
    };
    let hello = ClientMessage::Hello {
        version: PROTOCOL_VERSION,
        client: "pool_zero_copy bench".into(),
    };
    assert!(matches!(call(&hello), ServiceMessage::Hello { .. }));
    let mut b = ModelBuilder::new();
    let x = b.input(&[4]);
    let k = b.constant_copy(&[1], &[CONSTANT]);
    let act = b.int32(0);
    let out = b.output(&[4]);
    b.operation(OperationType::Add, &[x, k, act], &[out]);
    let mut model = b.build();
    model.operand_values.resize(BYTES as usize, 3);
    let mut fds = protocol::FdList::default();
    let msg = ClientMessage::GetSupportedOperations {
        model: protocol::model_to_wire(&model, &mut fds),
    };
    let mut times = Vec::with_capacity(iters);
    for i in 0..=iters {
        let t = Instant::now();
        let answer = call(&msg);
        assert!(
            matches!(answer, ServiceMessage::SupportedOperations { .. }),
            "{answer:?}"
        );
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    median(times)
}

fn privileged() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("needs root (the simulated device serves a FUSE file)".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(|_| ())
        .map_err(|e| format!("cannot open /dev/fuse: {e}"))
}

fn main() -> ExitCode {
    if let Err(why) = privileged() {
        eprintln!("pool_zero_copy: {why}");
        return ExitCode::FAILURE;
    }
    let iters = iterations(20);
    let sim = Sim::start(&[]);
    let hald = Hald::with_device(&sim);
    let client = hald.client();
    let jobs_before = client.info().unwrap().device_jobs_completed.unwrap_or(0);
    let (exec, dev, on_device) = time_execution(&client, iters);
    let jobs = client.info().unwrap().device_jobs_completed.unwrap_or(0) - jobs_before;
    let cpu = Hald::cpu_only();
    let (cpu_exec, cpu_time, _) = time_execution(&cpu.client(), iters);
    drop(cpu);
    let pair = time_socket_pair(iters);
    let service = time_service_socket(&hald, iters);

    println!(
        "pool_zero_copy: out = x + c, x and out 16 MiB of f32 (4 Mi elements), median of {iters} runs"
    );
    println!(
        "  execution via nnaccel-hald, memfd pools, {}: {} (engine {}; {jobs} device jobs)",
        if on_device {
            "device imports them (zero copy)"
        } else {
            "CPU fallback"
        },
        ms(exec),
        ms(dev)
    );
    println!(
        "  execution via nnaccel-hald --cpu, memfd pools mapped by the service: {} (executor {})",
        ms(cpu_exec),
        ms(cpu_time)
    );
    println!(
        "  16 MiB through a Unix socket pair (send + receive): {} ({})",
        ms(pair),
        gib_s(pair)
    );
    println!(
        "  16 MiB through the service socket (a frame received and decoded by nnaccel-hald): {} ({})",
        ms(service),
        gib_s(service)
    );
    println!(
        "  copying the input through the socket instead would add {} (bare socket pair) to {} \
         (the service's socket and decoder) per execution: {:.0}% to {:.0}% of the zero-copy \
         execution, and the output back as much again",
        ms(pair),
        ms(service),
        pair.as_secs_f64() / exec.as_secs_f64() * 100.0,
        service.as_secs_f64() / exec.as_secs_f64() * 100.0
    );
    drop(hald);
    drop(sim);
    ExitCode::SUCCESS
}
