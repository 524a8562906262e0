//! Hostile fds against `nnaccel-hald` (issue 16, items 1 and 2; docs/service.md, "Threat
//! model"): memfds sealed against writing given as output pools, memfds shrunk under the
//! service, pipes, sockets and directories given as pools, and a device that dies and comes
//! back. After each attack the daemon is alive, the attacking request got INVALID_ARGUMENT,
//! and a well-behaved client still executes on the device (its jobs counted by the device)
//! with no byte of its pool changing after its final reply.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nnaccel_hal::{ErrorStatus, Memory, MemoryKind, OperationType};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tests::service::*;
use nnaccel_tests::{Sim, require_privileges, scaled, with_timeout};
use rustix::fs::SealFlags;

const N: u32 = 256;

fn limit() -> Duration {
    scaled(Duration::from_secs(120))
}

/// Runs `body` with a simulator and a service over it (root and FUSE needed: under CI=true
/// `require_privileges` fails rather than skips).
fn with_device_service(body: impl FnOnce(&Sim, &Hald) + Send + 'static) {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "hostile fd test", move || {
        let sim = Sim::new();
        let hald = Hald::with_device(&sim);
        body(&sim, &hald);
        drop(hald);
        drop(sim);
    });
}

fn memfd(size: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create(
        c"nnaccel-hostile",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, size).unwrap();
    fd
}

fn ashmem_over(fd: OwnedFd, size: u64) -> Memory {
    Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(fd),
        size,
    }
}

/// An ADD request: inputs from a well-formed pool 0, the output in `out` (pool 1).
fn request_with_output(inputs: &Memory, out: &Memory) -> nnaccel_hal::Request {
    let len = N * 4;
    request(
        vec![arg(0, 0, len), arg(0, len, len)],
        vec![arg(1, 0, len)],
        &[inputs, out],
    )
}

/// An ADD request whose inputs are in `pool` (pool 1), the output in a well-formed pool 0.
fn request_with_input(out: &Memory, pool: &Memory) -> nnaccel_hal::Request {
    let len = N * 4;
    request(
        vec![arg(1, 0, len), arg(1, 0, len)],
        vec![arg(0, 0, len)],
        &[out, pool],
    )
}

fn jobs_completed(c: &ServiceClient) -> u64 {
    c.info()
        .unwrap()
        .device_jobs_completed
        .expect("a device service reports its device's jobs")
}

/// The daemon is alive and a new, well-behaved client prepares on the device, executes there
/// (the device's job counter moves), gets the right sum, and its pool does not change after
/// the final reply.
#[track_caller]
fn assert_serves_on_device(hald: &Hald, what: &str) {
    assert!(!hald.has_exited(), "{what}: the daemon died");
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, N)).unwrap();
    assert!(
        pm.runs_on_device(),
        "{what}: placement is no longer the device"
    );
    let before = jobs_completed(&c);
    assert_serves(&*pm, what);
    assert!(
        jobs_completed(&c) > before,
        "{what}: the well-behaved execution did not run on the device"
    );
}

/// One well-behaved execution through `pm`: right result, pool untouched after the reply.
#[track_caller]
fn assert_serves(pm: &dyn nnaccel_hal::HalPreparedModel, what: &str) {
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(N)).unwrap(), N);
    let (a, b) = inputs(N, 3.0);
    io.set(&a, &b);
    let r = execute(pm, &io.request());
    assert_eq!(r.status, ErrorStatus::None, "{what}: {r:?}");
    assert_eq!(io.out(), sum(&a, &b), "{what}: the output");
    let view = MappedClientPool::new(&io.pool).unwrap();
    let after_reply = view.read(0, view.len()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        view.read(0, view.len()).unwrap(),
        after_reply,
        "{what}: the pool changed after the final reply"
    );
}

/// Executes `req` on a fresh device-placed model of a new client; the status.
fn attack(hald: &Hald, req: &nnaccel_hal::Request) -> ErrorStatus {
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, N)).unwrap();
    execute(&*pm, req).status
}

fn input_pool() -> Memory {
    pools::ashmem(u64::from(N) * 8).unwrap()
}

/// Fails before the fix: the sealed memfd could not be mapped writable, the HAL mapped it
/// read-only, took it for writable from the fd's O_RDWR, and the CPU fallback's output write
/// killed nnaccel-hald with SIGSEGV.
#[test]
fn output_pool_sealed_against_writing_is_refused_and_the_daemon_lives() {
    with_device_service(|_sim, hald| {
        let fd = memfd(u64::from(N) * 4);
        rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE).unwrap();
        let out = ashmem_over(fd, u64::from(N) * 4);
        let status = attack(hald, &request_with_output(&input_pool(), &out));
        assert_eq!(status, ErrorStatus::InvalidArgument, "F_SEAL_WRITE output");
        assert_serves_on_device(hald, "after an F_SEAL_WRITE output");
    });
}

/// As above with F_SEAL_FUTURE_WRITE (writable shared mappings refused, the fd still O_RDWR).
#[test]
fn output_pool_sealed_against_future_writes_is_refused_and_the_daemon_lives() {
    with_device_service(|_sim, hald| {
        let fd = memfd(u64::from(N) * 4);
        rustix::fs::fcntl_add_seals(&fd, SealFlags::FUTURE_WRITE).unwrap();
        let out = ashmem_over(fd, u64::from(N) * 4);
        let status = attack(hald, &request_with_output(&input_pool(), &out));
        assert_eq!(
            status,
            ErrorStatus::InvalidArgument,
            "F_SEAL_FUTURE_WRITE output"
        );
        assert_serves_on_device(hald, "after an F_SEAL_FUTURE_WRITE output");
    });
}

/// Executions whose output pool is a memfd that another thread keeps shrinking to 0 and
/// growing back while the request is in flight, and leaves at 0 once it sees it sealed. Fails before the fix: the pool's size was
/// checked before it was sealed against shrinking, so a shrink between the two left a mapping
/// past the end of the file, and the first access raised SIGBUS (in nnaccel-hald on the CPU
/// path, in the device on the device path). Now the service seals first and checks the size
/// after: each such request is INVALID_ARGUMENT or succeeds, and nobody dies.
fn shrink_race(hald: &Hald, rounds: usize) {
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, N)).unwrap();
    let size = u64::from(N) * 4;
    let inputs = input_pool();
    for round in 0..rounds {
        let fd = Arc::new(memfd(size));
        let out = Memory {
            kind: MemoryKind::Ashmem,
            fd: fd.clone(),
            size,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let shrinker = {
            let (fd, stop) = (fd.clone(), stop.clone());
            std::thread::spawn(move || {
                // Shrink, and stay shrunk once the service has sealed the pool at that size:
                // a service that checked the size before sealing now maps past the end.
                while !stop.load(Ordering::Relaxed) {
                    if rustix::fs::ftruncate(&*fd, 0).is_err() {
                        break;
                    }
                    if rustix::fs::fcntl_get_seals(&*fd)
                        .is_ok_and(|s| s.contains(SealFlags::SHRINK))
                    {
                        break;
                    }
                    let _ = rustix::fs::ftruncate(&*fd, size);
                }
            })
        };
        let status = execute(&*pm, &request_with_output(&inputs, &out)).status;
        stop.store(true, Ordering::Relaxed);
        shrinker.join().unwrap();
        assert!(
            matches!(
                status,
                ErrorStatus::None | ErrorStatus::InvalidArgument | ErrorStatus::GeneralFailure
            ),
            "round {round}: {status:?}"
        );
        assert!(
            !hald.has_exited(),
            "round {round}: the daemon died; its log:\n{}",
            hald.log()
        );
        // Once the service has the pool, the client can no longer shrink it.
        if status == ErrorStatus::None {
            assert!(
                rustix::fs::ftruncate(&*fd, 0).is_err(),
                "round {round}: a pool the service used can still shrink"
            );
        }
    }
}

#[test]
fn memfd_shrunk_while_passed_on_the_device_path_raises_no_sigbus() {
    with_device_service(|_sim, hald| {
        shrink_race(hald, 300);
        assert_serves_on_device(hald, "after shrinking pools");
    });
}

#[test]
fn memfd_shrunk_while_passed_on_the_cpu_path_raises_no_sigbus() {
    with_timeout(limit(), "cpu shrink test", || {
        let hald = Hald::cpu_only();
        shrink_race(&hald, 300);
        assert!(!hald.has_exited(), "the daemon died");
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, N)).unwrap();
        assert_serves(&*pm, "after shrinking pools (CPU)");
    });
}

/// A memfd sealed with F_SEAL_SEAL but not F_SEAL_SHRINK: the service cannot pin its size,
/// so it refuses it (docs/service.md, "Item 1").
#[test]
fn memfd_whose_size_cannot_be_pinned_is_refused() {
    with_device_service(|_sim, hald| {
        let fd = memfd(u64::from(N) * 8);
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SEAL).unwrap();
        let pool = ashmem_over(fd, u64::from(N) * 8);
        let out = pools::ashmem(u64::from(N) * 4).unwrap();
        let status = attack(hald, &request_with_input(&out, &pool));
        assert_eq!(status, ErrorStatus::InvalidArgument, "unpinnable memfd");
        assert_serves_on_device(hald, "after an unpinnable memfd");
    });
}

/// Gives `fd` as a request's input pool. Fails before the fix: BO_IMPORT answered ENODEV and
/// the HAL declared the device gone for every client until a restart.
fn refused_as_pool(fd: OwnedFd, what: &str) {
    let what = what.to_string();
    with_device_service(move |_sim, hald| {
        let pool = ashmem_over(fd, u64::from(N) * 4);
        let out = pools::ashmem(u64::from(N) * 4).unwrap();
        let status = attack(hald, &request_with_input(&out, &pool));
        assert_eq!(status, ErrorStatus::InvalidArgument, "{what} as a pool");
        assert_serves_on_device(hald, &format!("after a {what} as a pool"));
    });
}

#[test]
fn pipe_as_pool_is_refused_and_the_device_stays_everyones() {
    let (r, _w) = rustix::pipe::pipe().unwrap();
    refused_as_pool(r, "pipe");
}

#[test]
fn socket_as_pool_is_refused_and_the_device_stays_everyones() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    refused_as_pool(OwnedFd::from(a), "socket");
}

#[test]
fn directory_as_pool_is_refused_and_the_device_stays_everyones() {
    let dir = std::fs::File::open("/tmp").unwrap();
    refused_as_pool(OwnedFd::from(dir), "directory");
}

#[test]
fn character_device_as_pool_is_refused_and_the_device_stays_everyones() {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    refused_as_pool(OwnedFd::from(null), "character device");
}

/// Prepares until a new model is placed on the device again (within 10 s, scaled): the
/// daemon probes a missing or dead device at most once a second.
#[track_caller]
fn wait_for_device_placement(hald: &Hald, c: &ServiceClient, what: &str) {
    let deadline = Instant::now() + scaled(Duration::from_secs(10));
    loop {
        let pm = prepare(c, &binary_model(OperationType::Add, N)).unwrap();
        if pm.runs_on_device() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} was never adopted; log:\n{}",
            hald.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The simulator killed, then a new one started on the same path: the running daemon adopts
/// it again (no restart), says so in its info, and new models run on the device. Fails before
/// the fix: a gone device stayed gone until the service restarted.
#[test]
fn a_device_that_dies_and_comes_back_is_adopted_again_without_a_restart() {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "device re-adoption test", || {
        let first = Sim::new();
        let hald = Hald::with_device(&first);
        assert_serves_on_device(&hald, "at start");
        let pid = hald.pid();

        first.kill_hard();
        // The daemon notices (a health probe) and serves on the CPU meanwhile.
        let c = hald.client();
        let deadline = Instant::now() + scaled(Duration::from_secs(10));
        loop {
            let pm = prepare(&c, &binary_model(OperationType::Add, N)).unwrap();
            if !pm.runs_on_device() {
                assert_serves(&*pm, "while the device is gone");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the dead device was never noticed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let info = c.info().unwrap();
        assert!(info.driver.contains("gone"), "info while gone: {info:?}");

        let second = Sim::start_at(first.path(), &[]);
        wait_for_device_placement(&hald, &c, "the device that came back");
        assert_eq!(hald.pid(), pid);
        assert_serves_on_device(&hald, "after the device came back");
        let info = c.info().unwrap();
        assert!(
            info.driver.contains("lost 1 ") && info.driver.contains("adopted again 1 "),
            "info after re-adoption: {info:?}"
        );
        assert!(hald.log().contains("adopted"), "the adoption is logged");
        drop(hald);
        drop(second);
        drop(first);
    });
}

/// The service started before its device (a module loaded later, a simulator started after
/// the daemon): it serves on the CPU, then finds the device when it first answers, with no
/// restart, and new models run on it. Fails before the fix: a device that could not be opened
/// at start was never looked for again.
#[test]
fn a_device_that_appears_after_the_service_started_is_adopted_without_a_restart() {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "late device test", || {
        let dir = tempfile::tempdir().unwrap();
        let node = match nnaccel_tests::frontend() {
            nnaccel_tests::Frontend::Fuse => dir.path().join("nnaccel"),
            nnaccel_tests::Frontend::Cuse => {
                std::path::PathBuf::from(format!("/dev/nnaccel-late-{}", std::process::id()))
            }
        };
        let hald = Hald::start(&[std::ffi::OsStr::new("--device"), node.as_os_str()]);
        let pid = hald.pid();
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, N)).unwrap();
        assert!(!pm.runs_on_device(), "no device yet, yet placed on it");
        assert_serves(&*pm, "before the device exists");
        let info = c.info().unwrap();
        assert!(info.driver.contains("not answering yet"), "info: {info:?}");

        let sim = Sim::start_at(&node, &[]);
        wait_for_device_placement(&hald, &c, "the device that appeared");
        assert_eq!(hald.pid(), pid, "the daemon restarted");
        assert_serves_on_device(&hald, "after the device appeared");
        assert!(hald.log().contains("adopted"), "the adoption is logged");
        drop(hald);
        drop(sim);
    });
}
