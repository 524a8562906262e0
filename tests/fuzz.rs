//! Fuzz target 3, end to end (docs/testing.md, tier 4): mutated protocol frames through a live
//! `nnaccel-hald`, past the decoder into the service's handlers (prepare, execute, allocate,
//! copies, bursts, caching) on a connection that said Hello and prepared a model. Every frame
//! gets an answer in the protocol or drops its own connection only; the service stays up, serves
//! a new client, and closes every fd it received once the connections are gone.
//!
//! CPU-only (no privileges needed); the in-process targets are tests/fuzz_units/.
//! Also here: random ioctls through the simulator's device file (root and FUSE, like tier 2).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use nnaccel_hal::fmq::Fmq;
use nnaccel_hal::{Memory, MemoryKind, OperationType};
use nnaccel_protocol::*;
use nnaccel_tests::service::*;
use nnaccel_tests::uapi::fuzz::{self, Rng};
use nnaccel_tests::uapi::sys;
use nnaccel_tests::{poll_until, scaled, with_timeout};

const N: u32 = 8;

fn memfd(size: u64) -> OwnedFd {
    sys::memfd_create(c"fuzz-service", size).unwrap()
}

/// The client side of one raw connection: Hello said, one model prepared.
struct Conn {
    s: UnixStream,
    model_id: u64,
}

/// The answer to one frame: a message, or the connection dropped.
fn call(s: &UnixStream, body: &[u8], fds: &[BorrowedFd<'_>]) -> Option<ServiceMessage> {
    send_frame(s, body, fds).ok()?;
    match recv_frame(s, DEFAULT_MAX_MESSAGE_BYTES) {
        Ok((reply, _fds)) => Some(
            decode::<ServiceMessage>(&reply)
                .unwrap_or_else(|e| panic!("the service answered outside its protocol: {e}")),
        ),
        Err(ProtocolError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            panic!("the service neither answered nor closed the connection")
        }
        Err(_) => None,
    }
}

impl Conn {
    fn open(hald: &Hald) -> Self {
        let s = UnixStream::connect(hald.socket()).unwrap();
        s.set_read_timeout(Some(scaled(Duration::from_secs(20))))
            .unwrap();
        s.set_write_timeout(Some(scaled(Duration::from_secs(20))))
            .unwrap();
        let hello = ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            client: "fuzz".into(),
        };
        assert!(matches!(
            call(&s, &encode(&hello).unwrap(), &[]),
            Some(ServiceMessage::Hello { .. })
        ));
        let model = binary_model(OperationType::Add, N);
        let mut fds = FdList::default();
        let prepare = ClientMessage::PrepareModel {
            model: model_to_wire(&model, &mut fds),
            preference: 1,
            priority: 90,
            timeout_ns: None,
        };
        let model_id = match call(&s, &encode(&prepare).unwrap(), fds.fds()) {
            Some(ServiceMessage::Prepared { model_id, .. }) => model_id,
            m => panic!("prepare: {m:?}"),
        };
        Self { s, model_id }
    }
}

/// The valid messages the mutations start from, with the fds each carries.
fn seeds(model_id: u64, pool: &Memory, queues: &[Fmq; 2]) -> Vec<(ClientMessage, Vec<OwnedFd>)> {
    let model = binary_model(OperationType::Add, N);
    let bytes = N * 4;
    let req = request(
        vec![arg(0, 0, bytes), arg(0, 64, bytes)],
        vec![arg(0, 128, bytes)],
        &[pool],
    );
    let dup = |fd: BorrowedFd<'_>| fd.try_clone_to_owned().unwrap();
    let owned = |list: &FdList<'_>| list.fds().iter().map(|f| dup(*f)).collect::<Vec<_>>();
    let mut f = FdList::default();
    let wire_model = model_to_wire(&model, &mut f);
    let model_fds = owned(&f);
    let mut f = FdList::default();
    let wire_request = request_to_wire(&req, &mut f);
    let request_fds = owned(&f);
    let mut f = FdList::default();
    let memory = memory_to_wire(pool, &mut f);
    let role = WireRole {
        model_index: 0,
        io_index: 0,
        frequency: 1.0,
    };
    let two = || vec![memfd(0), memfd(0)];
    vec![
        (ClientMessage::GetCapabilities, vec![]),
        (ClientMessage::Info, vec![]),
        (
            ClientMessage::GetSupportedOperations {
                model: wire_model.clone(),
            },
            model_fds.iter().map(|f| dup(f.as_fd())).collect(),
        ),
        (
            ClientMessage::PrepareModel {
                model: wire_model,
                preference: 1,
                priority: 90,
                timeout_ns: Some(10_000_000_000),
            },
            model_fds,
        ),
        (
            ClientMessage::Execute {
                model_id,
                request: wire_request,
                measure: true,
                timeout_ns: None,
            },
            request_fds,
        ),
        (
            ClientMessage::Allocate {
                dimensions: vec![N],
                model_ids: vec![model_id],
                input_roles: vec![role],
                output_roles: vec![],
            },
            vec![],
        ),
        (
            ClientMessage::CopyTo {
                token: 1,
                memory: memory.clone(),
            },
            owned(&f),
        ),
        (
            ClientMessage::CopyFrom {
                token: 1,
                memory,
                dimensions: vec![N],
            },
            owned(&f),
        ),
        (ClientMessage::FreeBuffer { token: 1 }, vec![]),
        (
            ClientMessage::ConfigureBurst {
                model_id,
                request_fmq: queues[0].descriptor(),
                result_fmq: queues[1].descriptor(),
                polling_window_us: Some(0),
            },
            queues.iter().map(|q| dup(q.fd())).collect(),
        ),
        (ClientMessage::GetNumberOfCacheFilesNeeded, vec![]),
        (
            ClientMessage::PrepareModelFromCache {
                preference: 1,
                priority: 90,
                timeout_ns: None,
                cache: WireCacheFiles {
                    model: vec![vec![0]],
                    data: vec![vec![1]],
                    token: [3; 32],
                },
            },
            two(),
        ),
        (ClientMessage::CacheList, vec![]),
        (ClientMessage::ReleaseModel { model_id }, vec![]),
    ]
}

fn open_fds(hald: &Hald) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", hald.pid()))
        .unwrap()
        .count()
}

#[test]
fn mutated_frames_through_a_live_service_get_answers_or_drop_only_their_connection() {
    with_timeout(scaled(Duration::from_secs(300)), "service fuzz", || {
        let hald = Hald::cpu_only();
        let good = hald.client();
        poll_until(
            scaled(Duration::from_secs(5)),
            "earlier clients to go",
            || good.info().unwrap().connections == 1,
        );
        let fds_before = open_fds(&hald);
        let pool = Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(memfd(4096)),
            size: 4096,
        };
        let (mut answered, mut dropped) = (0usize, 0usize);
        let mut conn: Option<Conn> = None;
        fuzz::run("service", 1500, |rng: &mut Rng| {
            let c = conn.get_or_insert_with(|| Conn::open(&hald));
            let queues = [Fmq::create(24, 16).unwrap(), Fmq::create(24, 16).unwrap()];
            let mut messages = seeds(c.model_id, &pool, &queues);
            let (msg, seed_fds) = messages.swap_remove(rng.below(messages.len()));
            let mut body = encode(&msg).unwrap();
            match rng.below(8) {
                0 => {
                    let n = rng.below(48);
                    body = rng.bytes(n);
                }
                1 | 2 => {}
                _ => fuzz::mutate(rng, &mut body),
            }
            let fds: Vec<OwnedFd> = if rng.chance(1, 6) {
                (0..rng.below(4)).map(|_| memfd(4096)).collect()
            } else {
                seed_fds
            };
            let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
            match call(&c.s, &body, &borrowed) {
                Some(_) => answered += 1,
                None => {
                    dropped += 1;
                    conn = None;
                }
            }
            assert!(!hald.has_exited(), "the service died; log:\n{}", hald.log());
        });
        drop(conn);
        println!("service frames: {answered} answered, {dropped} dropped their connection");
        assert!(answered > 0 && (dropped > 0 || fuzz::cases(1500) < 100));
        // A new client is served, and every fd the fuzzed connections sent is closed.
        let fresh = hald.client();
        assert!(prepare(&fresh, &binary_model(OperationType::Add, N)).is_ok());
        drop(fresh);
        poll_until(
            scaled(Duration::from_secs(10)),
            "fuzzed connections to go",
            || good.info().unwrap().connections == 1,
        );
        poll_until(
            scaled(Duration::from_secs(10)),
            "the service to close every fd it received",
            || open_fds(&hald) == fds_before,
        );
    });
}

/// Sets the fd field of fd-carrying commands to numbers no process has open: the device
/// resolves them in this test process, where other tests run.
fn no_foreign_fds(cmd: u32, arg: &mut [u8], rng: &mut Rng) {
    use nnaccel_tests::uapi::ioctl::*;
    let at = match cmd {
        NNACCEL_IOCTL_BO_IMPORT | NNACCEL_IOCTL_QUEUE_CREATE => 0,
        NNACCEL_IOCTL_BO_EXPORT => 8,
        _ => return,
    };
    let fd: i32 = if rng.chance(1, 2) { -1 } else { 1 << 30 };
    arg[at..at + 4].copy_from_slice(&fd.to_le_bytes());
}

/// Whether `cmd` is of an ioctl type the VFS answers some commands of before any driver sees
/// them (`do_vfs_ioctl`: FIOCLEX, FIONBIO, FIOQSIZE, FIONREAD ('T'); FIBMAP, FIGETBSZ (0);
/// FIFREEZE, FS_IOC_FSGETXATTR, FS_IOC_RESVSP ('X'); FS_IOC_FIEMAP, FS_IOC_GETFLAGS ('f');
/// FICLONE, FIDEDUPERANGE (0x94); FS_IOC_GETFSUUID (0x15)). Those follow their own rules for
/// the argument, whatever its size — some write through it, FIDEDUPERANGE reads a count from it
/// and goes past it — so the random commands skip the whole types; the device answers ENOTTY to
/// all of them anyway.
fn vfs_answers(cmd: u32) -> bool {
    use nnaccel_tests::uapi::ioctl::ioc_type;
    matches!(ioc_type(cmd), 0x00 | 0x15 | 0x54 | 0x58 | 0x66 | 0x94)
}

/// Fuzz target 1 through the real frontend: random command numbers (ours, ours with another
/// size or direction, anything) with random argument bytes through `ioctl(2)` on the
/// simulator's device file, so the kernel's FUSE (or CUSE) ioctl path and the frontend's
/// handling of it are in the loop. Every call is success or an errno; afterwards the device
/// answers, still runs, and holds no object of the closed file.
#[test]
fn random_ioctls_through_the_device_file_get_an_errno_or_success() {
    use nnaccel_tests::uapi::DeviceExt;
    use nnaccel_tests::uapi::abi::*;
    use nnaccel_tests::uapi::ioctl::*;
    nnaccel_tests::run_with_sim(&[], |ctx| {
        let live = |dev: &dyn Fn(u32) -> u64| {
            [PARAM_LIVE_BOS, PARAM_LIVE_PROGRAMS, PARAM_LIVE_QUEUES].map(dev)
        };
        let before = live(&|p| ctx.param(p));
        let file = ctx.open();
        let (mut ok, mut failed) = (0usize, 0usize);
        fuzz::run("ioctl-file", 10_000, |rng| {
            let known = rng.pick(ALL_IOCTLS).1;
            let cmd = match rng.below(6) {
                0 => rng.u32(),
                1 => known ^ (1 << (16 + rng.below(16))),
                2 => ioc(
                    rng.below(4) as u32,
                    NNACCEL_IOCTL_TYPE,
                    rng.below(32) as u32,
                    rng.below(1024),
                ),
                _ => known,
            };
            let mut arg = if rng.chance(1, 2) {
                rng.bytes(ioc_size(cmd))
            } else {
                vec![0u8; ioc_size(cmd)]
            };
            if cmd == NNACCEL_IOCTL_WAIT {
                // A deadline in the past: a WAIT for a job never submitted must not sleep.
                arg[16..24].copy_from_slice(&0u64.to_le_bytes());
            }
            no_foreign_fds(cmd, &mut arg, rng);
            if vfs_answers(cmd) {
                // Not the device's to answer (see `vfs_answers`).
                return;
            }
            // SAFETY: `file` is the simulator's device node (FUSE or CUSE, restricted ioctls)
            // and `cmd` is of a type the VFS answers no command of (`vfs_answers`), so the
            // frontend receives it and the kernel copies exactly `_IOC_SIZE(cmd)` bytes in and
            // out of `arg`, which is that long and borrowed for the call.
            match unsafe { sys::ioctl_raw(file.as_fd(), cmd, &mut arg) } {
                Ok(_) => ok += 1,
                Err(e) => {
                    failed += 1;
                    let errno = e.raw_os_error();
                    assert!(
                        errno.is_some_and(|e| e > 0 && e < 4096),
                        "{cmd:#x}: {e} is not an errno"
                    );
                }
            }
        });
        println!("ioctls through the file: {ok} succeeded, {failed} failed");
        assert!(failed > 0 && (ok > 0 || fuzz::cases(10_000) < 100));
        assert_eq!(
            file.get_param(PARAM_API_VERSION).ok(),
            Some(NNACCEL_API_VERSION)
        );
        drop(file);
        poll_until(
            scaled(Duration::from_secs(10)),
            "the file's objects to go",
            || live(&|p| ctx.param(p)) == before,
        );
        assert!(!ctx.sim.has_exited(), "the simulator died");
    });
}
