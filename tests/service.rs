//! The HAL service end to end, with three processes: `nnaccel-sim` serving a FUSE device file,
//! `nnaccel-hald` on a temp socket over it (or `--cpu`), and this test as the client (plus a
//! child client process where a client must die), through `nnaccel_protocol::client::ServiceClient`.
//!
//! Covered: the four pool kinds for execution I/O and both constant lifetimes; every bad-pool
//! case with its code; clients that close or shrink pools after handing them over; a client
//! killed mid-execution; 16 concurrent clients; a killed service; malformed protocol messages;
//! zero copy (the device writes through the client's own mapping); device versus CPU results.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::CString;
use std::io::{IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nnaccel_hal::{
    ErrorStatus, ExecutionResult, HalDevice, HalPreparedModel, Memory, MemoryKind, Model,
    OperationType,
};
use nnaccel_protocol as protocol;
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::{self, BlobSource, MappedClientPool};
use nnaccel_protocol::{
    self, ClientMessage, FdList, PROTOCOL_VERSION, ProtocolError, ServiceMessage, WireMemory,
    WirePool,
};
use nnaccel_tests::service::*;
// rustix's `net` feature comes with the nnaccel dependency.
use nnaccel_tests::{Sim, poll_until, require_privileges, scaled, with_timeout};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

const PAGE: u64 = 4096;

/// The test body's time limit.
fn limit() -> Duration {
    scaled(Duration::from_secs(90))
}

/// Runs `body` with a simulator and a service over it (root and FUSE needed, else a visible
/// skip), within the time limit.
fn with_device_service(sim_args: &[&str], body: impl FnOnce(&Sim, &Hald) + Send + 'static) {
    if !require_privileges() {
        return;
    }
    let sim_args: Vec<String> = sim_args.iter().map(|s| s.to_string()).collect();
    with_timeout(limit(), "service test", move || {
        let args: Vec<&str> = sim_args.iter().map(String::as_str).collect();
        let sim = Sim::start(&args);
        let hald = Hald::with_device(&sim);
        body(&sim, &hald);
        drop(hald);
        drop(sim);
    });
}

/// Runs `body` with a CPU-only service (no privileges needed).
fn with_cpu_service(body: impl FnOnce(&Hald) + Send + 'static) {
    with_timeout(limit(), "cpu service test", move || {
        let hald = Hald::cpu_only();
        body(&hald);
    });
}

fn memfd_named(name: &str, size: u64) -> OwnedFd {
    let c = CString::new(name).unwrap();
    let fd = rustix::fs::memfd_create(
        c.as_c_str(),
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, size).unwrap();
    fd
}

fn ashmem_named(name: &str, size: u64) -> Memory {
    Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(memfd_named(name, size)),
        size,
    }
}

/// A regular file of `size` bytes in `dir`, opened read-write.
fn regular_file(dir: &std::path::Path, name: &str, size: u64) -> (std::path::PathBuf, OwnedFd) {
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(size).unwrap();
    (path, OwnedFd::from(f))
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

fn round64(x: u32) -> u32 {
    x.next_multiple_of(64)
}

#[track_caller]
fn assert_ok(r: &ExecutionResult, what: &str) {
    assert_eq!(r.status, ErrorStatus::None, "{what}: {r:?}");
}

fn jobs_completed(c: &ServiceClient) -> u64 {
    c.info()
        .unwrap()
        .device_jobs_completed
        .expect("a device service reports its device's jobs")
}

// ---------------------------------------------------------------------------------------------
// Pool kinds and constant lifetimes

/// Runs ADD through `io` and checks the result.
fn run_add_in(client: &ServiceClient, pm: &dyn HalPreparedModel, io: &Io3, what: &str, seed: f32) {
    let (a, b) = inputs(io.n, seed);
    io.set(&a, &b);
    let r = execute(pm, &io.request());
    assert_ok(&r, what);
    assert_eq!(io.out(), sum(&a, &b), "{what}: the output");
    let _ = client;
}

#[test]
fn all_four_pool_kinds_carry_execution_io_on_the_device() {
    with_device_service(&[], |_sim, hald| {
        let c = hald.client();
        let n = 1000;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        assert!(
            pm.runs_on_device(),
            "ADD of two f32 vectors runs on the device"
        );
        let need = Io3::bytes_needed(n);
        let before = jobs_completed(&c);

        // ashmem.
        let io = Io3::new(pools::ashmem(need).unwrap(), n);
        run_add_in(&c, &*pm, &io, "ashmem", 1.0);

        // mmap_fd over a regular file.
        let dir = tempfile::tempdir().unwrap();
        let (_, file) = regular_file(dir.path(), "pool.bin", need);
        let io = Io3::new(pools::mmap_fd(file, 0, need, RW), n);
        run_add_in(&c, &*pm, &io, "mmap_fd over a file", 2.0);

        // mmap_fd over a memfd, at an offset.
        let fd = memfd_named("nnaccel-offset", PAGE + need);
        let io = Io3::new(pools::mmap_fd(fd, PAGE, need, RW), n);
        run_add_in(&c, &*pm, &io, "mmap_fd over a memfd at an offset", 3.0);
        let whole = MappedClientPool::new(&pools::mmap_fd(
            rustix::io::dup(&*io.pool.fd).unwrap(),
            0,
            PAGE + need,
            libc::PROT_READ,
        ))
        .unwrap();
        assert_eq!(
            whole
                .read_f32(PAGE as usize + io.off(2) as usize, 1)
                .unwrap(),
            io.out()[..1].to_vec(),
            "the output landed at the pool's file offset"
        );

        // hardware_buffer_blob.
        let (blob, source) = pools::hardware_buffer_blob(need).unwrap();
        assert_eq!(source, pools::blob_source());
        let io = Io3::new(blob, n);
        run_add_in(
            &c,
            &*pm,
            &io,
            &format!("hardware_buffer_blob ({source})"),
            4.0,
        );

        // hardware_buffer: inputs, each in its own buffer used whole; output in ashmem.
        let (a, b) = inputs(n, 5.0);
        let ha = pools::hardware_buffer(u64::from(n) * 4).unwrap();
        let hb = pools::hardware_buffer(u64::from(n) * 4).unwrap();
        MappedClientPool::new(&ha)
            .unwrap()
            .write_f32(0, &a)
            .unwrap();
        MappedClientPool::new(&hb)
            .unwrap()
            .write_f32(0, &b)
            .unwrap();
        let out = pools::ashmem(u64::from(n) * 4).unwrap();
        let out_map = MappedClientPool::new(&out).unwrap();
        let req = request(
            vec![arg(0, 0, 0), arg(1, 0, 0)],
            vec![arg(2, 0, n * 4)],
            &[&ha, &hb, &out],
        );
        let r = execute(&*pm, &req);
        assert_ok(&r, "hardware_buffer inputs");
        assert_eq!(out_map.read_f32(0, n as usize).unwrap(), sum(&a, &b));

        assert_eq!(
            jobs_completed(&c) - before,
            5,
            "every execution ran on the device"
        );
    });
}

/// A hardware_buffer (size 0, used whole: offset = length = 0) as an execution *output* on the
/// device. Fails while `run_on_device` (driver/hal/src/driver/on_device.rs) compares the argument's
/// length 0 with the output's byte size and answers OUTPUT_INSUFFICIENT_SIZE.
/// hardware_buffer_blob from each source this machine has — a dma-buf from the system
/// dma-heap, a udmabuf over a sealed memfd, the sealed memfd standing in — carries a job that
/// the device runs (its job counter moves) and whose output the client reads back through its
/// own mapping (DMA_BUF_IOCTL_SYNC around the access). A missing dma-buf source is skipped here
/// and fails under `NNACCEL_REQUIRE_KERNEL_FEATURES=1` (the QEMU guest, which has both).
#[test]
fn hardware_buffer_blob_from_every_source_runs_on_the_device() {
    let require = std::env::var("NNACCEL_REQUIRE_KERNEL_FEATURES").is_ok_and(|v| v == "1");
    with_device_service(&[], move |_sim, hald| {
        let c = hald.client();
        let n = 512;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        assert!(pm.runs_on_device());
        for (i, source) in [
            BlobSource::DmaHeap,
            BlobSource::Udmabuf,
            BlobSource::SealedMemfd,
        ]
        .into_iter()
        .enumerate()
        {
            let pool = match pools::hardware_buffer_blob_from(source, Io3::bytes_needed(n)) {
                Ok(p) => p,
                Err(e) => {
                    assert!(!require, "{}: {e} (required here)", source.name());
                    eprintln!("SKIPPED {}: {e}", source.name());
                    continue;
                }
            };
            assert_eq!(
                nnaccel_uapi::sys::is_dmabuf(pool.fd.as_fd()),
                source.is_dma_buf(),
                "{}: a dma-buf exactly when the source makes one",
                source.name()
            );
            let before = jobs_completed(&c);
            let io = Io3::new(pool, n);
            run_add_in(&c, &*pm, &io, source.name(), 3.0 + i as f32);
            assert!(
                jobs_completed(&c) > before,
                "{}: the job ran on the device",
                source.name()
            );
        }
    });
}

#[test]
fn hardware_buffer_outputs_work_on_the_device() {
    with_device_service(&[], |_sim, hald| {
        let c = hald.client();
        let n = 256;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        let (a, b) = inputs(n, 7.0);
        let io = pools::ashmem(u64::from(n) * 8).unwrap();
        let io_map = MappedClientPool::new(&io).unwrap();
        io_map.write_f32(0, &a).unwrap();
        io_map.write_f32(n as usize * 4, &b).unwrap();
        let hout = pools::hardware_buffer(u64::from(n) * 4).unwrap();
        let out_map = MappedClientPool::new(&hout).unwrap();
        let req = request(
            vec![arg(0, 0, n * 4), arg(0, n * 4, n * 4)],
            vec![arg(1, 0, 0)],
            &[&io, &hout],
        );
        let r = execute(&*pm, &req);
        assert_ok(&r, "hardware_buffer output");
        assert_eq!(out_map.read_f32(0, n as usize).unwrap(), sum(&a, &b));
    });
}

#[test]
fn cpu_only_service_runs_mappable_pools_and_refuses_hardware_buffer() {
    with_cpu_service(|hald| {
        let c = hald.client();
        assert!(c.info().unwrap().device_live.is_none());
        let n = 300;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        assert!(!pm.runs_on_device());
        let need = Io3::bytes_needed(n);
        let io = Io3::new(pools::ashmem(need).unwrap(), n);
        run_add_in(&c, &*pm, &io, "ashmem (cpu)", 1.0);
        let dir = tempfile::tempdir().unwrap();
        let (_, file) = regular_file(dir.path(), "pool.bin", PAGE + need);
        let io = Io3::new(pools::mmap_fd(file, PAGE, need, RW), n);
        run_add_in(&c, &*pm, &io, "mmap_fd over a file at an offset (cpu)", 2.0);
        let (blob, _) = pools::hardware_buffer_blob(need).unwrap();
        let io = Io3::new(blob, n);
        run_add_in(&c, &*pm, &io, "hardware_buffer_blob (cpu)", 3.0);

        // The CPU path cannot map a hardware_buffer: GENERAL_FAILURE, as input or output.
        let hb = pools::hardware_buffer(u64::from(n) * 4).unwrap();
        let plain = pools::ashmem(u64::from(n) * 8).unwrap();
        let req = request(
            vec![arg(0, 0, 0), arg(1, 0, n * 4)],
            vec![arg(1, n * 4, n * 4)],
            &[&hb, &plain],
        );
        assert_eq!(execute(&*pm, &req).status, ErrorStatus::GeneralFailure);
        let req = request(
            vec![arg(1, 0, n * 4), arg(1, 0, n * 4)],
            vec![arg(0, 0, 0)],
            &[&hb, &plain],
        );
        assert_eq!(execute(&*pm, &req).status, ErrorStatus::GeneralFailure);
        // And the connection carries on.
        run_add_in(
            &c,
            &*pm,
            &Io3::new(pools::ashmem(need).unwrap(), n),
            "after",
            4.0,
        );
    });
}

fn check_constant_lifetimes(c: &ServiceClient, on_device: bool) {
    let n = 512;
    let constant: Vec<f32> = (0..n).map(|i| (i as f32) * 0.25 - 3.0).collect();
    let x: Vec<f32> = (0..n).map(|i| 1000.0 + i as f32).collect();
    let expected = sum(&x, &constant);
    let dir = tempfile::tempdir().unwrap();

    // CONSTANT_COPY.
    let copy = add_constant_model(n, ConstantIn::Copy(constant.clone()));
    // CONSTANT_REFERENCE in ashmem, at offset 64.
    let ash = pools::ashmem(64 + u64::from(n) * 4).unwrap();
    MappedClientPool::new(&ash)
        .unwrap()
        .write_f32(64, &constant)
        .unwrap();
    let in_ashmem = add_constant_model(n, ConstantIn::Reference(ash, 64));
    // CONSTANT_REFERENCE in mmap_fd over a file, the pool at file offset 4096, the value at
    // offset 128 of the pool.
    let (_, file) = regular_file(dir.path(), "weights.bin", 2 * PAGE);
    let weights = pools::mmap_fd(file, PAGE, PAGE, libc::PROT_READ);
    let w = MappedClientPool::new(&pools::mmap_fd(
        rustix::io::dup(&*weights.fd).unwrap(),
        0,
        2 * PAGE,
        RW,
    ))
    .unwrap();
    w.write_f32(PAGE as usize + 128, &constant).unwrap();
    let in_file = add_constant_model(n, ConstantIn::Reference(weights, 128));
    // CONSTANT_REFERENCE in mmap_fd over a memfd.
    let mfd = pools::mmap_fd(
        memfd_named("nnaccel-weights", PAGE),
        0,
        PAGE,
        libc::PROT_READ,
    );
    MappedClientPool::new(&pools::mmap_fd(
        rustix::io::dup(&*mfd.fd).unwrap(),
        0,
        PAGE,
        RW,
    ))
    .unwrap()
    .write_f32(0, &constant)
    .unwrap();
    let in_memfd = add_constant_model(n, ConstantIn::Reference(mfd, 0));

    for (what, model) in [
        ("CONSTANT_COPY", copy),
        ("CONSTANT_REFERENCE in ashmem", in_ashmem),
        ("CONSTANT_REFERENCE in mmap_fd over a file", in_file),
        ("CONSTANT_REFERENCE in mmap_fd over a memfd", in_memfd),
    ] {
        assert_eq!(
            c.get_supported_operations(&model).unwrap(),
            vec![true],
            "{what}"
        );
        let pm = prepare(c, &model).unwrap_or_else(|s| panic!("{what}: prepare: {s}"));
        assert_eq!(pm.runs_on_device(), on_device, "{what}: placement");
        let io = pools::ashmem(u64::from(n) * 8).unwrap();
        let map = MappedClientPool::new(&io).unwrap();
        map.write_f32(0, &x).unwrap();
        let req = request(vec![arg(0, 0, n * 4)], vec![arg(0, n * 4, n * 4)], &[&io]);
        for round in 0..2 {
            let r = execute(&*pm, &req);
            assert_ok(&r, what);
            assert_eq!(
                map.read_f32(n as usize * 4, n as usize).unwrap(),
                expected,
                "{what} #{round}"
            );
        }
    }
}

#[test]
fn both_constant_lifetimes_in_ashmem_and_mmap_fd_on_the_device() {
    with_device_service(&[], |_sim, hald| {
        check_constant_lifetimes(&hald.client(), true)
    });
}

#[test]
fn both_constant_lifetimes_in_ashmem_and_mmap_fd_on_the_cpu() {
    with_cpu_service(|hald| check_constant_lifetimes(&hald.client(), false));
}

// ---------------------------------------------------------------------------------------------
// Bad pools

fn check_bad_pools(c: &ServiceClient) {
    let n = 64u32;
    let len = n * 4;
    let pm = prepare(c, &binary_model(OperationType::Add, n)).unwrap();
    let pool = pools::ashmem(PAGE).unwrap();
    let size = PAGE as u32;
    let exec = |inputs: Vec<_>, outputs: Vec<_>, pools: &[&Memory]| {
        execute(&*pm, &request(inputs, outputs, pools)).status
    };
    let good_out = || vec![arg(0, 2 * len, len)];

    // Offset or length past the end of the pool.
    assert_eq!(
        exec(
            vec![arg(0, size - len + 4, len), arg(0, 0, len)],
            good_out(),
            &[&pool]
        ),
        ErrorStatus::InvalidArgument,
        "input ends 4 bytes past the pool"
    );
    assert_eq!(
        exec(
            vec![arg(0, size, len), arg(0, 0, len)],
            good_out(),
            &[&pool]
        ),
        ErrorStatus::InvalidArgument,
        "input starts at the end of the pool"
    );
    assert_eq!(
        exec(
            vec![arg(0, 0, len), arg(0, 0, len)],
            vec![arg(0, 0, size + 4)],
            &[&pool]
        ),
        ErrorStatus::InvalidArgument,
        "output longer than the pool"
    );
    // offset + length overflowing u32.
    assert_eq!(
        exec(
            vec![arg(0, u32::MAX - 3, len), arg(0, 0, len)],
            good_out(),
            &[&pool]
        ),
        ErrorStatus::InvalidArgument,
        "offset + length overflows u32"
    );
    assert_eq!(
        exec(
            vec![arg(0, 0, len), arg(0, 0, len)],
            vec![arg(0, u32::MAX, u32::MAX)],
            &[&pool]
        ),
        ErrorStatus::InvalidArgument,
        "output offset + length overflows u32"
    );
    // A pool index out of range.
    assert_eq!(
        exec(vec![arg(1, 0, len), arg(0, 0, len)], good_out(), &[&pool]),
        ErrorStatus::InvalidArgument,
        "pool index out of range"
    );

    // A pool larger than its file: it cannot be mapped.
    let short = Memory {
        size: 2 * PAGE,
        ..pool.clone()
    };
    assert_eq!(
        exec(
            vec![arg(0, 0, len), arg(0, len, len)],
            vec![arg(0, PAGE as u32 + 8, len)],
            &[&short]
        ),
        ErrorStatus::GeneralFailure,
        "a pool past the end of its file"
    );
    // An mmap_fd whose offset + size overflows u64.
    let wrap = pools::mmap_fd(
        rustix::io::dup(&*pool.fd).unwrap(),
        u64::MAX - PAGE + 1,
        PAGE,
        RW,
    );
    assert_eq!(
        exec(vec![arg(0, 0, len), arg(0, len, len)], good_out(), &[&wrap]),
        ErrorStatus::GeneralFailure,
        "an mmap_fd offset + size overflowing u64"
    );
    // A pipe as an ashmem pool is not memory: refused at the door (docs/service.md, "Threat
    // model").
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let pipe = Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(r),
        size: PAGE,
    };
    assert_eq!(
        exec(vec![arg(0, 0, len), arg(0, len, len)], good_out(), &[&pipe]),
        ErrorStatus::InvalidArgument,
        "a pipe as ashmem"
    );
    // A pipe holding a CONSTANT_REFERENCE: preparation fails with INVALID_ARGUMENT.
    let model = add_constant_model(n, ConstantIn::Reference(pipe.clone(), 0));
    assert_eq!(
        prepare(c, &model).unwrap_err(),
        ErrorStatus::InvalidArgument,
        "constants in a pipe"
    );

    // A CONSTANT_REFERENCE past the end of its pool, or overflowing: INVALID_ARGUMENT.
    for (offset, what) in [
        (PAGE as u32 - 8, "past the end"),
        (u32::MAX - 3, "overflowing u32"),
    ] {
        let model = add_constant_model(n, ConstantIn::Reference(pool.clone(), offset));
        assert_eq!(
            c.get_supported_operations(&model).unwrap_err(),
            ErrorStatus::InvalidArgument,
            "{what}"
        );
        assert_eq!(
            prepare(c, &model).unwrap_err(),
            ErrorStatus::InvalidArgument,
            "{what}"
        );
    }

    // hardware_buffer holding a constant: unsupported, and preparation fails.
    let hb = pools::hardware_buffer(PAGE).unwrap();
    let model = add_constant_model(n, ConstantIn::Reference(hb, 0));
    assert_eq!(c.get_supported_operations(&model).unwrap(), vec![false]);
    assert_eq!(prepare(c, &model).unwrap_err(), ErrorStatus::GeneralFailure);

    // The connection and the prepared model still work.
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
    run_add_in(c, &*pm, &io, "after the bad pools", 9.0);
}

#[test]
fn bad_pools_get_the_right_codes_on_the_device() {
    with_device_service(&[], |_sim, hald| check_bad_pools(&hald.client()));
}

#[test]
fn bad_pools_get_the_right_codes_on_the_cpu() {
    with_cpu_service(|hald| check_bad_pools(&hald.client()));
}

/// A connection spoken to frame by frame.
struct Raw {
    s: UnixStream,
}

impl Raw {
    fn connect(hald: &Hald) -> Self {
        let s = UnixStream::connect(hald.socket()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        Self { s }
    }

    fn hello(hald: &Hald) -> Self {
        let raw = Self::connect(hald);
        let hello = ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            client: "raw test client".into(),
        };
        assert!(matches!(
            raw.call(&hello, &[]),
            ServiceMessage::Hello { .. }
        ));
        raw
    }

    fn send(&self, msg: &ClientMessage, fds: &[BorrowedFd<'_>]) {
        protocol::send_frame(&self.s, &protocol::encode(msg).unwrap(), fds).unwrap();
    }

    fn recv(&self) -> Result<ServiceMessage, ProtocolError> {
        let (body, _) = protocol::recv_frame(&self.s, protocol::DEFAULT_MAX_MESSAGE_BYTES)?;
        protocol::decode(&body)
    }

    fn call(&self, msg: &ClientMessage, fds: &[BorrowedFd<'_>]) -> ServiceMessage {
        self.send(msg, fds);
        self.recv().unwrap()
    }

    /// The service answers an error with `status` and keeps the connection.
    #[track_caller]
    fn expect_error(&self, msg: &ClientMessage, fds: &[BorrowedFd<'_>], status: ErrorStatus) {
        match self.call(msg, fds) {
            ServiceMessage::Error { status: s, message } => {
                assert_eq!(s, status.code(), "{message}")
            }
            // An execution the service decoded answers with its status.
            ServiceMessage::Executed { status: s, .. } => assert_eq!(s, status.code()),
            other => panic!("expected an error {status}, got {other:?}"),
        }
        assert!(matches!(
            self.call(&ClientMessage::Info, &[]),
            ServiceMessage::Info(_)
        ));
    }

    /// The connection was dropped, possibly after an INVALID_ARGUMENT error reply.
    #[track_caller]
    fn expect_dropped(&self, what: &str) {
        let mut replies = 0;
        loop {
            match self.recv() {
                Ok(ServiceMessage::Error { status, .. }) => {
                    assert_eq!(status, ErrorStatus::InvalidArgument.code(), "{what}");
                    replies += 1;
                    assert!(replies <= 1, "{what}: more than one reply");
                }
                Ok(other) => panic!("{what}: unexpected answer {other:?}"),
                Err(ProtocolError::Closed) => return,
                Err(ProtocolError::Io(e)) if e.raw_os_error() == Some(libc::ECONNRESET) => return,
                Err(e) => panic!("{what}: the connection was not closed: {e}"),
            }
        }
    }
}

fn prepare_raw(raw: &Raw, model: &Model) -> u64 {
    let mut fds = FdList::default();
    let wire = protocol::model_to_wire(model, &mut fds);
    let msg = ClientMessage::PrepareModel {
        model: wire,
        preference: 1,
        priority: 100,
        timeout_ns: None,
    };
    match raw.call(&msg, fds.fds()) {
        ServiceMessage::Prepared { model_id, .. } => model_id,
        other => panic!("prepare: {other:?}"),
    }
}

fn check_wire_pools(hald: &Hald) {
    let raw = Raw::hello(hald);
    let n = 16;
    let memfd = pools::ashmem(PAGE).unwrap();
    let good = WireMemory {
        kind: 0,
        prot: 0,
        offset: 0,
        size: PAGE,
        fd_index: 0,
    };

    // An unknown pool name (kind 9) in a model: INVALID_ARGUMENT, the connection stays.
    let model = add_constant_model(n, ConstantIn::Reference(memfd.clone(), 0));
    let mut fds = FdList::default();
    let mut wire = protocol::model_to_wire(&model, &mut fds);
    wire.pools[0].kind = 9;
    for msg in [
        ClientMessage::GetSupportedOperations {
            model: wire.clone(),
        },
        ClientMessage::PrepareModel {
            model: wire.clone(),
            preference: 1,
            priority: 100,
            timeout_ns: None,
        },
    ] {
        raw.expect_error(&msg, &[memfd.fd.as_fd()], ErrorStatus::InvalidArgument);
    }

    // In a request: kind 9; an fd index with no fd behind it; the same fd for two pools.
    let model_id = prepare_raw(&raw, &binary_model(OperationType::Add, n));
    let execute_with = |pools: Vec<WirePool>| ClientMessage::Execute {
        model_id,
        request: protocol::WireRequest {
            inputs: vec![
                protocol::WireArgument {
                    has_no_value: false,
                    location: [0, 0, n * 4, 0],
                    dimensions: vec![],
                },
                protocol::WireArgument {
                    has_no_value: false,
                    location: [0, 64, n * 4, 0],
                    dimensions: vec![],
                },
            ],
            outputs: vec![protocol::WireArgument {
                has_no_value: false,
                location: [pools.len() as u32 - 1, 128, n * 4, 0],
                dimensions: vec![],
            }],
            pools,
        },
        measure: false,
        timeout_ns: None,
    };
    let fd = [memfd.fd.as_fd()];
    raw.expect_error(
        &execute_with(vec![WirePool::Memory(WireMemory {
            kind: 9,
            ..good.clone()
        })]),
        &fd,
        ErrorStatus::InvalidArgument,
    );
    raw.expect_error(
        &execute_with(vec![WirePool::Memory(WireMemory {
            fd_index: 1,
            ..good.clone()
        })]),
        &fd,
        ErrorStatus::InvalidArgument,
    );
    raw.expect_error(
        &execute_with(vec![WirePool::Memory(good.clone())]),
        &[],
        ErrorStatus::InvalidArgument,
    );
    raw.expect_error(
        &execute_with(vec![
            WirePool::Memory(good.clone()),
            WirePool::Memory(good.clone()),
        ]),
        &fd,
        ErrorStatus::InvalidArgument,
    );
    // A memory-domain token this connection never allocated.
    raw.expect_error(
        &execute_with(vec![WirePool::Memory(good.clone()), WirePool::Token(1)]),
        &fd,
        ErrorStatus::InvalidArgument,
    );
    // A model id this connection does not hold.
    raw.expect_error(
        &ClientMessage::ReleaseModel { model_id: 999 },
        &[],
        ErrorStatus::InvalidArgument,
    );
    // The well-formed version of the same request works.
    match raw.call(&execute_with(vec![WirePool::Memory(good)]), &fd) {
        ServiceMessage::Executed { status, .. } => assert_eq!(status, 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_pool_names_and_bad_fd_indexes_are_invalid_arguments_on_the_device() {
    with_device_service(&[], |_sim, hald| check_wire_pools(hald));
}

#[test]
fn unknown_pool_names_and_bad_fd_indexes_are_invalid_arguments_on_the_cpu() {
    with_cpu_service(check_wire_pools);
}

// ---------------------------------------------------------------------------------------------
// Clients closing or shrinking pools after handing them over

fn check_closed_pools(c: &ServiceClient) {
    let n = 128;
    let constant: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let dir = tempfile::tempdir().unwrap();
    // Constants in ashmem and in a file; the client keeps no fd, mapping or file of either
    // once the model is prepared.
    let ash = pools::ashmem(PAGE).unwrap();
    MappedClientPool::new(&ash)
        .unwrap()
        .write_f32(0, &constant)
        .unwrap();
    let (path, file) = regular_file(dir.path(), "c.bin", PAGE);
    let fpool = pools::mmap_fd(file, 0, PAGE, RW);
    MappedClientPool::new(&fpool)
        .unwrap()
        .write_f32(0, &constant)
        .unwrap();
    let mut prepared = Vec::new();
    for pool in [ash, fpool] {
        let model = add_constant_model(n, ConstantIn::Reference(pool, 0));
        prepared.push(prepare(c, &model).unwrap());
        // `model` and `pool` go here: the client's fds are closed.
    }
    std::fs::remove_file(&path).unwrap();
    let io = pools::ashmem(PAGE).unwrap();
    let map = MappedClientPool::new(&io).unwrap();
    map.write_f32(0, &x).unwrap();
    let req = request(vec![arg(0, 0, n * 4)], vec![arg(0, 2048, n * 4)], &[&io]);
    for pm in &prepared {
        assert_ok(
            &execute(&**pm, &req),
            "after the client closed its constant pool",
        );
        assert_eq!(map.read_f32(2048, n as usize).unwrap(), sum(&x, &constant));
    }
    // A request pool closed by the client once the call returned: the service keeps nothing.
    drop(req);
    drop(map);
    drop(io);
    assert_eq!(c.info().unwrap().prepared_models, 2);
}

#[test]
fn a_client_closing_its_pools_after_handing_them_over_changes_nothing_on_the_device() {
    with_device_service(&[], |_sim, hald| check_closed_pools(&hald.client()));
}

#[test]
fn a_client_closing_its_pools_after_handing_them_over_changes_nothing_on_the_cpu() {
    with_cpu_service(|hald| check_closed_pools(&hald.client()));
}

/// How the service ended ("still running" if it did not).
fn death(hald: &Hald) -> String {
    std::thread::sleep(Duration::from_millis(50));
    match hald.exit_status() {
        Some(s) => match std::os::unix::process::ExitStatusExt::signal(&s) {
            Some(libc::SIGBUS) => "killed by SIGBUS".into(),
            Some(sig) => format!("killed by signal {sig}"),
            None => format!("exited: {s}"),
        },
        None => "still running".into(),
    }
}

/// The service is alive and another client's work is unaffected.
fn assert_service_serves(hald: &Hald, what: &str) {
    assert!(
        !hald.has_exited(),
        "{what}: the service died ({})",
        death(hald)
    );
    let c = hald.client();
    let n = 32;
    let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
    run_add_in(&c, &*pm, &io, what, 11.0);
}

fn check_shrunk_pools(hald: &Hald) {
    let c = hald.client();
    let n = 256;
    let constant: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let io = pools::ashmem(PAGE).unwrap();
    let map = MappedClientPool::new(&io).unwrap();
    map.write_f32(0, &vec![1.0; n as usize]).unwrap();
    let req = request(vec![arg(0, 0, n * 4)], vec![arg(0, 2048, n * 4)], &[&io]);

    // A memfd holding constants: the service (or the device) sealed it against shrinking.
    let ash = pools::ashmem(PAGE).unwrap();
    MappedClientPool::new(&ash)
        .unwrap()
        .write_f32(0, &constant)
        .unwrap();
    let keep = ash.fd.clone();
    let pm = prepare(&c, &add_constant_model(n, ConstantIn::Reference(ash, 0))).unwrap();
    assert!(
        rustix::fs::ftruncate(&*keep, 0).is_err(),
        "a memfd the service maps cannot shrink"
    );
    assert_ok(&execute(&*pm, &req), "sealed memfd constants");

    // A file holding constants, truncated after preparation: an error or a result, no crash.
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = regular_file(dir.path(), "c.bin", PAGE);
    let fpool = pools::mmap_fd(file, 0, PAGE, libc::PROT_READ);
    let keep = fpool.fd.clone();
    let pm = prepare(&c, &add_constant_model(n, ConstantIn::Reference(fpool, 0))).unwrap();
    rustix::fs::ftruncate(&*keep, 0).unwrap();
    let r = execute(&*pm, &req);
    assert!(
        matches!(r.status, ErrorStatus::None | ErrorStatus::GeneralFailure),
        "constants in a truncated file: {:?}; the service: {}",
        r.status,
        death(hald)
    );
    assert_service_serves(hald, "after constants in a file were truncated");
    rustix::fs::ftruncate(&*keep, PAGE).unwrap();
    assert_ok(&execute(&*pm, &req), "the file has its size back");

    // A request pool in a file truncated before the call.
    let (_, file) = regular_file(dir.path(), "io.bin", PAGE);
    let fio = pools::mmap_fd(file, 0, PAGE, RW);
    rustix::fs::ftruncate(&*fio.fd, 100).unwrap();
    let req2 = request(vec![arg(0, 0, n * 4)], vec![arg(0, 2048, n * 4)], &[&fio]);
    assert_eq!(
        execute(&*pm, &req2).status,
        ErrorStatus::GeneralFailure,
        "a shrunk request file"
    );
    assert_service_serves(hald, "after a shrunk request pool");
}

#[test]
fn shrinking_pools_never_crash_the_service_on_the_device() {
    with_device_service(&[], |_sim, hald| check_shrunk_pools(hald));
}

#[test]
fn shrinking_pools_never_crash_the_service_on_the_cpu() {
    with_cpu_service(check_shrunk_pools);
}

/// A client truncating and restoring a file-backed request pool in a loop while the service
/// executes over it: errors or results, never a SIGBUS in the service. (The CPU path checks
/// the file's size, then reads its mapping; a shrink between the two is the race this probes.
/// On the device path the device maps the file, and a failed import falls back to the CPU.)
fn shrink_during_executions(hald: &Hald, sim: Option<&Sim>) {
    {
        let c = hald.client();
        let n = 1024u32;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let size = Io3::bytes_needed(n).next_multiple_of(PAGE);
        let (_, file) = regular_file(dir.path(), "io.bin", size);
        let io = pools::mmap_fd(file, 0, size, RW);
        let len = n * 4;
        let off = round64(len);
        let req = request(
            vec![arg(0, 0, len), arg(0, off, len)],
            vec![arg(0, 2 * off, len)],
            &[&io],
        );
        let stop = Arc::new(AtomicBool::new(false));
        let fd = io.fd.clone();
        let stop2 = stop.clone();
        let shrinker = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let _ = rustix::fs::ftruncate(&*fd, 0);
                let _ = rustix::fs::ftruncate(&*fd, size);
            }
        });
        let (mut ok, mut failed) = (0, 0);
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            match execute(&*pm, &req).status {
                ErrorStatus::None => ok += 1,
                ErrorStatus::GeneralFailure => failed += 1,
                s => panic!(
                    "unexpected {s} after {ok} results and {failed} failures; the service: {}",
                    death(hald)
                ),
            }
        }
        stop.store(true, Ordering::Relaxed);
        shrinker.join().unwrap();
        eprintln!("{ok} results, {failed} GENERAL_FAILUREs");
        assert_service_serves(hald, "after a file shrank during executions");
        if let Some(sim) = sim {
            assert!(
                !sim.has_exited(),
                "the device (nnaccel-sim) died while a client shrank a file it had imported \
                 ({ok} results, {failed} failures); its log:\n{}",
                sim.log()
            );
        }
    }
}

#[test]
fn a_pool_file_shrinking_during_executions_never_crashes_the_service_on_the_cpu() {
    with_cpu_service(|hald| shrink_during_executions(hald, None));
}

#[test]
fn a_pool_file_shrinking_during_executions_never_crashes_the_service_on_the_device() {
    with_device_service(&[], |sim, hald| shrink_during_executions(hald, Some(sim)));
}

/// A client labelling an unsealed memfd `hardware_buffer_blob` (only dma-bufs are pinned) and
/// truncating it after preparation must not crash a CPU-only service: `MappedPool::map`
/// (driver/hal/src/memory.rs) does not trust the label, so the memfd is sealed (the truncation
/// fails) or, where it cannot be, its bytes are copied rather than read through a mapping whose
/// pages could vanish.
#[test]
fn a_mislabelled_blob_that_shrinks_does_not_crash_the_service() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let n = 256;
        let constant: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let blob = Memory {
            kind: MemoryKind::HardwareBufferBlob,
            fd: Arc::new(memfd_named("nnaccel-not-a-dma-buf", PAGE)),
            size: PAGE,
        };
        MappedClientPool::new(&blob)
            .unwrap()
            .write_f32(0, &constant)
            .unwrap();
        let keep = blob.fd.clone();
        let pm = prepare(&c, &add_constant_model(n, ConstantIn::Reference(blob, 0))).unwrap();
        let io = pools::ashmem(PAGE).unwrap();
        let req = request(vec![arg(0, 0, n * 4)], vec![arg(0, 2048, n * 4)], &[&io]);
        assert_ok(&execute(&*pm, &req), "before the shrink");
        if rustix::fs::ftruncate(&*keep, 0).is_err() {
            // Sealed by the service: the right policy; nothing left to test.
            return;
        }
        let r = execute(&*pm, &req);
        assert!(
            matches!(r.status, ErrorStatus::None | ErrorStatus::GeneralFailure),
            "constants in a shrunk pseudo-blob: {:?}; the service: {}",
            r.status,
            death(hald)
        );
        assert_service_serves(hald, "after a mislabelled blob shrank");
    });
}

// ---------------------------------------------------------------------------------------------
// A client killed mid-execution

const CHILD_SOCKET_ENV: &str = "NNACCEL_TEST_SERVICE_CHILD_SOCKET";

/// Not a test: the body of the child client process of
/// `a_client_killed_mid_execution_releases_everything` (it re-executes this binary with
/// `CHILD_SOCKET_ENV` set). Without that variable it does nothing.
#[test]
fn child_client_process() {
    let Some(c) = child_client(CHILD_SOCKET_ENV) else {
        return;
    };
    let n = 4096;
    let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
    let (a, b) = inputs(n, 1.0);
    io.set(&a, &b);
    let req = io.request();
    say_ready();
    loop {
        let _ = execute(&*pm, &req);
    }
}

#[test]
fn a_client_killed_mid_execution_releases_everything() {
    with_device_service(&["--fault-delay-job-ms", "500"], |_sim, hald| {
        let c = hald.only_client();
        let baseline = c.info().unwrap();
        assert_eq!(baseline.prepared_models, 0);
        let (mut child, ready) = spawn_child_test(
            "child_client_process",
            CHILD_SOCKET_ENV,
            hald.socket().as_os_str(),
        );
        poll_until(
            scaled(Duration::from_secs(20)),
            "the child's prepared model",
            || c.info().unwrap().prepared_models == 1,
        );
        let during = c.info().unwrap();
        assert_eq!(during.connections, baseline.connections + 1);
        let (b, d) = (baseline.device_live.unwrap(), during.device_live.unwrap());
        assert!(
            d[2] > b[2] && d[3] > b[3],
            "the child's program and queue: {b:?} -> {d:?}"
        );
        assert!(ready.join().unwrap(), "the child never said ready");
        // Mid-execution: each job takes 500 ms.
        std::thread::sleep(Duration::from_millis(250));
        child.kill().unwrap();
        child.wait().unwrap();
        poll_until(
            scaled(Duration::from_secs(10)),
            "the service releasing the child's objects",
            || {
                let now = c.info().unwrap();
                now.prepared_models == baseline.prepared_models
                    && now.connections == baseline.connections
                    && now.device_live == baseline.device_live
            },
        );
        assert_service_serves(hald, "after a client was killed mid-execution");
    });
}

// ---------------------------------------------------------------------------------------------
// Concurrency

#[test]
fn sixteen_clients_execute_concurrently_with_correct_results() {
    with_device_service(&[], |_sim, hald| {
        let socket = hald.socket().to_path_buf();
        let before = jobs_completed(&hald.client());
        let threads: Vec<_> = (0..16u32)
            .map(|t| {
                let socket = socket.clone();
                std::thread::spawn(move || {
                    let c = ServiceClient::connect(&socket).unwrap();
                    let n = 64 + 16 * t;
                    let model = if t % 2 == 0 {
                        binary_model(OperationType::Add, n)
                    } else {
                        add_mul_model(n)
                    };
                    let pm = prepare(&c, &model).unwrap();
                    assert!(pm.runs_on_device(), "client {t}");
                    let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
                    let req = io.request();
                    for i in 0..50 {
                        let (a, b) = inputs(n, (t * 100 + i) as f32);
                        io.set(&a, &b);
                        let r = execute(&*pm, &req);
                        assert_ok(&r, &format!("client {t} execution {i}"));
                        let want: Vec<f32> = if t % 2 == 0 {
                            sum(&a, &b)
                        } else {
                            a.iter().zip(&b).map(|(x, y)| (x + y) * y).collect()
                        };
                        assert_eq!(io.out(), want, "client {t} execution {i}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = hald.client();
        assert_eq!(jobs_completed(&c) - before, 16 * 50, "all on the device");
        assert_eq!(
            c.info().unwrap().prepared_models,
            0,
            "released as the clients went"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// A killed service

#[test]
fn a_killed_service_fails_every_call_with_device_unavailable() {
    with_device_service(&[], |_sim, hald| {
        let c = hald.client();
        let n = 64;
        let model = binary_model(OperationType::Add, n);
        let pm = prepare(&c, &model).unwrap();
        let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
        run_add_in(&c, &*pm, &io, "before", 1.0);
        hald.kill_hard();
        let req = io.request();
        let one_second = scaled(Duration::from_secs(1));
        type Call = Box<dyn FnOnce() -> ErrorStatus + Send>;
        let calls: Vec<(&str, Call)> = vec![
            ("execute", {
                let pm = pm.clone();
                Box::new(move || execute(&*pm, &req).status)
            }),
            ("prepare", {
                let (c, model) = (c.clone(), model.clone());
                Box::new(move || prepare(&c, &model).unwrap_err())
            }),
            ("getCapabilities", {
                let c = c.clone();
                Box::new(move || c.get_capabilities().unwrap_err())
            }),
            ("getSupportedOperations", {
                let (c, model) = (c.clone(), model.clone());
                Box::new(move || c.get_supported_operations(&model).unwrap_err())
            }),
            ("info", {
                let c = c.clone();
                Box::new(move || c.info().unwrap_err())
            }),
        ];
        for (what, call) in calls {
            let status = with_timeout(one_second, what, call);
            assert_eq!(status, ErrorStatus::DeviceUnavailable, "{what}");
        }
        // Dropping the prepared model (a release call) does not hang either.
        with_timeout(one_second, "release", move || drop(pm));
        assert!(
            ServiceClient::connect(hald.socket()).is_err(),
            "nobody serves the socket"
        );
    });
}

#[test]
fn a_service_killed_mid_execution_fails_the_call_with_device_unavailable() {
    with_device_service(&["--fault-delay-job-ms", "3000"], |_sim, hald| {
        let c = hald.client();
        let n = 64;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
        let req = io.request();
        let (r, took) = result_after_killing(hald, move || execute(&*pm, &req));
        assert_eq!(r.status, ErrorStatus::DeviceUnavailable);
        assert!(
            took < scaled(Duration::from_secs(1)),
            "answered {took:?} after the kill"
        );
    });
}

/// The device dying under a job in flight: the service's execution falls back to its CPU plan
/// and answers promptly, with the right result. Fails while the device path
/// (`submit_and_wait`, driver/hal/src/driver/on_device.rs) sleeps on the ring's completion futex until
/// DEVICE_TIMEOUT (30 s): a dead device never wakes it, and nothing else is watched meanwhile.
#[test]
fn a_device_killed_mid_execution_falls_back_to_the_cpu_promptly() {
    with_device_service(&["--fault-delay-job-ms", "3000"], |sim, hald| {
        let c = hald.client();
        let n = 64;
        let pm = prepare(&c, &binary_model(OperationType::Add, n)).unwrap();
        assert!(pm.runs_on_device());
        let io = Arc::new(Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n));
        let (a, b) = inputs(n, 2.0);
        io.set(&a, &b);
        let (tx, rx) = std::sync::mpsc::channel();
        let io2 = io.clone();
        std::thread::spawn(move || {
            let r = execute(&*pm, &io2.request());
            let _ = tx.send((r, Instant::now()));
        });
        std::thread::sleep(Duration::from_millis(300));
        sim.kill_hard();
        let killed = Instant::now();
        let limit = scaled(Duration::from_secs(5));
        let (r, answered) = rx.recv_timeout(limit).unwrap_or_else(|_| {
            panic!("no answer within {limit:?} of the device's death (the service still waits on the dead device's ring)")
        });
        assert_ok(&r, "after the device died");
        assert_eq!(io.out(), sum(&a, &b));
        eprintln!(
            "answered {:?} after the device died",
            answered.saturating_duration_since(killed)
        );
        assert_service_serves(hald, "after the device died");
    });
}

// ---------------------------------------------------------------------------------------------
// Malformed messages

fn header(len: u32, nfds: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(16);
    h.extend_from_slice(&protocol::FRAME_MAGIC);
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&nfds.to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    h
}

fn check_malformed(hald: &Hald) {
    // A client connected before, with a prepared model.
    let good = hald.only_client();
    let n = 32;
    let pm = prepare(&good, &binary_model(OperationType::Add, n)).unwrap();
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
    run_add_in(&good, &*pm, &io, "before", 1.0);
    let connections = good.info().unwrap().connections;
    let open_fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", hald.pid()))
            .unwrap()
            .count()
    };
    let fds_before = open_fds();

    type Attack = Box<dyn Fn(&Raw)>;
    let attacks: Vec<(&str, bool, Attack)> = vec![
        (
            "garbage bytes",
            false,
            Box::new(|r: &Raw| (&r.s).write_all(b"GARBAGEGARBAGE!!").unwrap()),
        ),
        (
            "a frame announcing 1 GiB",
            true,
            Box::new(|r: &Raw| (&r.s).write_all(&header(1 << 30, 0)).unwrap()),
        ),
        (
            "a frame announcing 1 GiB before Hello",
            false,
            Box::new(|r: &Raw| (&r.s).write_all(&header(1 << 30, 0)).unwrap()),
        ),
        (
            "a valid frame with a body that does not decode",
            true,
            Box::new(|r: &Raw| protocol::send_frame(&r.s, &[0xff; 9], &[]).unwrap()),
        ),
        (
            "a message with trailing bytes",
            true,
            Box::new(|r: &Raw| {
                let mut body = protocol::encode(&ClientMessage::Info).unwrap();
                body.push(0);
                protocol::send_frame(&r.s, &body, &[]).unwrap()
            }),
        ),
        (
            "a header announcing fds that did not come",
            true,
            Box::new(|r: &Raw| {
                let body = protocol::encode(&ClientMessage::Info).unwrap();
                let mut frame = header(body.len() as u32, 2);
                frame.extend_from_slice(&body);
                (&r.s).write_all(&frame).unwrap()
            }),
        ),
        (
            "bad reserved bytes",
            true,
            Box::new(|r: &Raw| {
                let mut h = header(0, 0);
                h[15] = 1;
                (&r.s).write_all(&h).unwrap()
            }),
        ),
        (
            "a message before Hello",
            false,
            Box::new(|r: &Raw| r.send(&ClientMessage::Info, &[])),
        ),
        (
            "a wrong protocol version",
            false,
            Box::new(|r: &Raw| {
                r.send(
                    &ClientMessage::Hello {
                        version: PROTOCOL_VERSION + 1,
                        client: "from the future".into(),
                    },
                    &[],
                )
            }),
        ),
        (
            "a second Hello",
            true,
            Box::new(|r: &Raw| {
                r.send(
                    &ClientMessage::Hello {
                        version: PROTOCOL_VERSION,
                        client: "again".into(),
                    },
                    &[],
                )
            }),
        ),
        (
            "half a header, then the client closes its end for writing",
            true,
            Box::new(|r: &Raw| {
                (&r.s).write_all(&protocol::FRAME_MAGIC).unwrap();
                r.s.shutdown(std::net::Shutdown::Write).unwrap();
            }),
        ),
    ];
    for (what, after_hello, attack) in attacks {
        let raw = if after_hello {
            Raw::hello(hald)
        } else {
            Raw::connect(hald)
        };
        attack(&raw);
        if what == "a second Hello" {
            // An error reply; the connection stays (Hello is a well-formed message).
            match raw.recv().unwrap() {
                ServiceMessage::Error { status, .. } => {
                    assert_eq!(status, ErrorStatus::InvalidArgument.code())
                }
                other => panic!("{what}: {other:?}"),
            }
            assert!(matches!(
                raw.call(&ClientMessage::Info, &[]),
                ServiceMessage::Info(_)
            ));
        } else {
            raw.expect_dropped(what);
        }
        drop(raw);
        assert!(!hald.has_exited(), "{what}: the service died");
        run_add_in(&good, &*pm, &io, what, 2.0);
        poll_until(
            scaled(Duration::from_secs(5)),
            "the dropped connection to go",
            || good.info().unwrap().connections == connections,
        );
    }
    poll_until(
        scaled(Duration::from_secs(5)),
        "the service to close every fd it received",
        || open_fds() == fds_before,
    );
    // A new client is welcome too.
    assert_service_serves(hald, "after the malformed messages");
}

/// Sends an Info frame whose header announces `n` fds, with `n` fds attached.
fn send_with_fds(r: &Raw, n: usize) {
    let fds: Vec<OwnedFd> = (0..n).map(|_| memfd_named("nnaccel-fd-flood", 0)).collect();
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(n))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    assert!(cmsg.push(SendAncillaryMessage::ScmRights(&borrowed)));
    let body = protocol::encode(&ClientMessage::Info).unwrap();
    let mut frame = header(body.len() as u32, n as u32);
    frame.extend_from_slice(&body);
    let sent = rustix::net::sendmsg(
        &r.s,
        &[IoSlice::new(&frame)],
        &mut cmsg,
        SendFlags::NOSIGNAL,
    )
    .unwrap();
    assert_eq!(sent, frame.len());
}

/// 64 fds on a frame are fine; 65 or more break the limit and drop the connection, and the
/// service closes every fd it received. Fails while `recv_frame` (driver/hal/src/frame.rs)
/// relies on MSG_CTRUNC alone: rustix's `cmsg_space!` adds alignment slack, so its buffer takes
/// 66 fds, and 65 or 66 fds announced in the header are accepted.
#[test]
fn more_than_64_fds_on_a_frame_are_refused() {
    with_cpu_service(|hald| {
        let open_fds = || {
            std::fs::read_dir(format!("/proc/{}/fd", hald.pid()))
                .unwrap()
                .count()
        };
        // Count fds once this connection is the only one.
        let _watcher = hald.only_client();
        let fds_before = open_fds();
        let raw = Raw::hello(hald);
        send_with_fds(&raw, protocol::MAX_FDS_PER_FRAME);
        assert!(
            matches!(raw.recv().unwrap(), ServiceMessage::Info(_)),
            "64 fds are within the limit"
        );
        for n in [65, 66, 67, 100] {
            let raw = Raw::hello(hald);
            send_with_fds(&raw, n);
            raw.expect_dropped(&format!("{n} fds on one frame"));
        }
        drop(raw);
        poll_until(
            scaled(Duration::from_secs(5)),
            "the service to close every fd it received",
            || open_fds() == fds_before,
        );
        assert_service_serves(hald, "after frames with too many fds");
    });
}

#[test]
fn a_connection_holds_at_most_256_prepared_models() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let model = binary_model(OperationType::Add, 4);
        let mut held: Vec<_> = (0..256)
            .map(|i| prepare(&c, &model).unwrap_or_else(|s| panic!("model {i}: {s}")))
            .collect();
        assert_eq!(
            prepare(&c, &model).unwrap_err(),
            ErrorStatus::ResourceExhaustedTransient
        );
        // Another connection has its own allowance.
        let other = hald.client();
        let pm = prepare(&other, &model).unwrap();
        assert_eq!(other.info().unwrap().prepared_models, 257);
        drop(pm);
        // Releasing one makes room.
        held.pop();
        held.push(prepare(&c, &model).unwrap());
        drop(held);
        assert_eq!(c.info().unwrap().prepared_models, 0);
    });
}

#[test]
fn malformed_messages_drop_only_their_connection() {
    with_cpu_service(check_malformed);
}

#[test]
fn malformed_messages_drop_only_their_connection_on_the_device() {
    with_device_service(&[], |_sim, hald| check_malformed(hald));
}

// ---------------------------------------------------------------------------------------------
// Zero copy

#[test]
fn zero_copy_the_device_writes_through_the_clients_own_mapping() {
    with_device_service(&["--fault-delay-job-ms", "200"], |sim, hald| {
        let c = hald.client();
        let n = 64 * 1024; // 256 KiB per tensor
        let pm = prepare(&c, &binary_model(OperationType::Mul, n)).unwrap();
        assert!(pm.runs_on_device());
        let tag = format!("nnaccel-zc-{}", std::process::id());
        let in_name = format!("{tag}-in");
        let out_name = format!("{tag}-out");
        let bytes = u64::from(n) * 4;
        let input = ashmem_named(&in_name, 2 * bytes);
        let output = ashmem_named(&out_name, bytes);
        let in_map = MappedClientPool::new(&input).unwrap();
        let out_map = MappedClientPool::new(&output).unwrap();
        let req = request(
            vec![arg(0, 0, n * 4), arg(0, n * 4, n * 4)],
            vec![arg(1, 0, n * 4)],
            &[&input, &output],
        );
        let hald_pid = hald.pid();
        let sim_pid = sim.pid();
        for round in 0..3u32 {
            let (a, b) = inputs(n, round as f32);
            in_map.write_f32(0, &a).unwrap();
            in_map.write_f32(n as usize * 4, &b).unwrap();
            let before = jobs_completed(&c);
            // While the job runs (200 ms), watch who maps the client's memfds.
            let watching = Arc::new(AtomicBool::new(true));
            let w = watching.clone();
            let (in_n, out_n) = (in_name.clone(), out_name.clone());
            let watcher = std::thread::spawn(move || {
                let (mut sim_saw, mut hald_saw) = (false, false);
                while w.load(Ordering::Relaxed) {
                    sim_saw |= maps_contain(sim_pid, &out_n) && maps_contain(sim_pid, &in_n);
                    hald_saw |= maps_contain(hald_pid, &out_n) || maps_contain(hald_pid, &in_n);
                    std::thread::sleep(Duration::from_millis(2));
                }
                (sim_saw, hald_saw)
            });
            let r = execute(&*pm, &req);
            watching.store(false, Ordering::Relaxed);
            let (sim_saw, hald_saw) = watcher.join().unwrap();
            assert_ok(&r, "zero-copy MUL");
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
            assert_eq!(
                out_map.read_f32(0, n as usize).unwrap(),
                want,
                "round {round}"
            );
            assert_eq!(
                jobs_completed(&c) - before,
                1,
                "exactly one device job per execution"
            );
            assert!(
                sim_saw,
                "the device maps the client's memfds while it runs the job"
            );
            assert!(!hald_saw, "the service never maps the client's memfds");
        }
        assert!(!maps_contain(hald_pid, &tag));
    });
}

// ---------------------------------------------------------------------------------------------
// Device versus CPU

fn run_models(c: &ServiceClient) -> Vec<Vec<f32>> {
    let n = 777;
    let (a, b) = inputs(n, 3.5);
    let mut results = Vec::new();
    for model in [
        binary_model(OperationType::Add, n),
        binary_model(OperationType::Mul, n),
        add_mul_model(n),
    ] {
        let pm = prepare(c, &model).unwrap();
        let io = Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n);
        io.set(&a, &b);
        assert_ok(&execute(&*pm, &io.request()), "binary model");
        results.push(io.out());
    }
    let (batch, ins, units) = (3usize, 40usize, 7usize);
    let w: Vec<f32> = (0..units * ins)
        .map(|i| ((i * 37 % 19) as f32 - 9.0) * 0.125)
        .collect();
    let bias: Vec<f32> = (0..units).map(|i| i as f32 - 2.0).collect();
    let x: Vec<f32> = (0..batch * ins)
        .map(|i| ((i * 11 % 23) as f32) * 0.25)
        .collect();
    let pm = prepare(
        c,
        &fully_connected_model(batch as u32, ins as u32, &w, &bias),
    )
    .unwrap();
    let io = pools::ashmem(PAGE).unwrap();
    let map = MappedClientPool::new(&io).unwrap();
    map.write_f32(0, &x).unwrap();
    let xb = (batch * ins * 4) as u32;
    let ob = (batch * units * 4) as u32;
    let req = request(vec![arg(0, 0, xb)], vec![arg(0, 2048, ob)], &[&io]);
    assert_ok(&execute(&*pm, &req), "FULLY_CONNECTED");
    let out = map.read_f32(2048, batch * units).unwrap();
    let want = fully_connected_reference(batch, ins, &x, &w, &bias);
    for (g, w) in out.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "FULLY_CONNECTED: {out:?} vs {want:?}"
        );
    }
    results.push(out);
    results
}

#[test]
fn the_device_and_the_cpu_fallback_give_the_same_results() {
    if !require_privileges() {
        return;
    }
    let on_cpu = with_timeout(limit(), "cpu service", || {
        run_models(&Hald::cpu_only().client())
    });
    with_device_service(&[], move |_sim, hald| {
        let c = hald.client();
        let before = jobs_completed(&c);
        let on_device = run_models(&c);
        assert!(jobs_completed(&c) > before, "the device ran some of them");
        for (i, (d, p)) in on_device.iter().zip(&on_cpu).enumerate() {
            assert_eq!(d.len(), p.len());
            for (x, y) in d.iter().zip(p) {
                assert!(
                    (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                    "model {i}: device {x} vs cpu {y}"
                );
            }
        }
    });
}

/// A refused preparation's error frame names the operation, its operand type and the rule
/// (issue 17), and the client keeps it for its caller (`nnaccelctl` prints it).
#[test]
fn a_refused_preparation_names_the_operation_in_the_error_frame() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let mut model = binary_model(OperationType::Add, 4);
        model.operations[0].operation_type = OperationType::While;
        assert!(prepare(&c, &model).is_err());
        let why = c.last_error().expect("an error message");
        assert!(
            why.starts_with("operation 0 (WHILE, TENSOR_FLOAT32): "),
            "{why}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Control flow: IF and WHILE from a client, and a loop that does not end

/// `WHILE i < n: i = i + 1`, over `[1]` f32: inputs `i` (input-output) and `n` (input-only),
/// output the final `i`. The condition and body are referenced subgraphs.
fn counting_while_model() -> Model {
    use nnaccel_hal::OperandType;
    let mut cond = ModelBuilder::new();
    let (ci, cn) = (cond.input(&[1]), cond.input(&[1]));
    let less = cond.output_of(OperandType::TensorBool8, &[1]);
    cond.operation(OperationType::Less, &[ci, cn], &[less]);
    let mut body = ModelBuilder::new();
    let (bi, _bn) = (body.input(&[1]), body.input(&[1]));
    let one = body.constant_copy(&[1], &[1.0]);
    let none = body.int32(0);
    let next = body.output(&[1]);
    body.operation(OperationType::Add, &[bi, one, none], &[next]);
    let mut m = ModelBuilder::new();
    let (i, n) = (m.input(&[1]), m.input(&[1]));
    let (c, b) = (m.subgraph(cond), m.subgraph(body));
    let out = m.output(&[1]);
    m.operation(OperationType::While, &[c, b, i, n], &[out]);
    m.build()
}

#[test]
fn while_loops_from_a_client_count_to_their_bound() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let pm = prepare(&c, &counting_while_model()).unwrap();
        let io = Io3::new(ashmem_named("while", Io3::bytes_needed(1)), 1);
        for (i, n, want) in [(0.0, 5.0, 5.0), (2.5, 4.0, 4.5), (7.0, 5.0, 7.0)] {
            io.set(&[i], &[n]);
            let r = execute(&*pm, &io.request());
            assert_ok(&r, "WHILE");
            assert_eq!(io.out(), [want], "WHILE {i} < {n}");
        }
    });
}

#[test]
fn an_endless_while_loop_times_out_while_other_clients_are_served() {
    with_cpu_service(|hald| {
        let looping = hald.client();
        let pm = prepare(&looping, &counting_while_model()).unwrap();
        let io = Io3::new(ashmem_named("endless", Io3::bytes_needed(1)), 1);
        // i + 1 stops growing at 2^24 and never reaches an infinite bound.
        io.set(&[0.0], &[f32::INFINITY]);
        let request = io.request();
        let done = Arc::new(AtomicBool::new(false));
        let loop_done = done.clone();
        let endless = std::thread::spawn(move || {
            let r = execute(&*pm, &request);
            loop_done.store(true, Ordering::SeqCst);
            r
        });
        // Another client's executions go on while the loop runs.
        let other = hald.client();
        let add = prepare(&other, &binary_model(OperationType::Add, 4)).unwrap();
        let add_io = Io3::new(ashmem_named("add", Io3::bytes_needed(4)), 4);
        run_add_in(&other, &*add, &add_io, "ADD beside an endless loop", 1.0);
        assert!(
            !done.load(Ordering::SeqCst),
            "the loop ended before the other client was served"
        );
        let r = endless.join().unwrap();
        assert_eq!(r.status, ErrorStatus::MissedDeadlineTransient, "{r:?}");
        assert!(r.output_shapes.is_empty(), "{r:?}");
        // The looping client's connection still works.
        let pm = prepare(&looping, &counting_while_model()).unwrap();
        io.set(&[0.0], &[3.0]);
        assert_ok(&execute(&*pm, &io.request()), "WHILE after the timeout");
        assert_eq!(io.out(), [3.0]);
    });
}

#[test]
fn a_while_loop_stops_at_the_execution_deadline() {
    with_cpu_service(|hald| {
        let c = hald.client();
        let pm = prepare(&c, &counting_while_model()).unwrap();
        let io = Io3::new(ashmem_named("deadline", Io3::bytes_needed(1)), 1);
        io.set(&[0.0], &[f32::INFINITY]);
        let deadline = Instant::now() + Duration::from_millis(200);
        let r = pm.execute_synchronously(
            &io.request(),
            nnaccel_hal::MeasureTiming::No,
            Some(deadline),
        );
        assert!(
            matches!(
                r.status,
                ErrorStatus::MissedDeadlineTransient | ErrorStatus::MissedDeadlinePersistent
            ),
            "{r:?}"
        );
    });
}
