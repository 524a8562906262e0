//! Hostile clients against nnaccel-hald's limits (docs/service.md, "Threat model": "Budgets per
//! client", "Connections", "Bursts", "Admin operations", "Model limits"). Each test attacks one
//! limit, checks the refusal (an error frame naming the limit, then a close where the
//! connection is at fault), and then that the daemon is alive and a well-behaved client still
//! executes on the (FUSE-simulated) device. Clients of another uid run as `nobody` in a child
//! process (this test binary again, under `setpriv`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nnaccel_hal::burst::packet;
use nnaccel_hal::fmq::Fmq;
use nnaccel_hal::{ErrorStatus, OperationType};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools;
use nnaccel_protocol::{self as protocol, ClientMessage, FdList, ServiceMessage};
use nnaccel_tests::service::*;
use nnaccel_tests::{Sim, require_privileges, scaled, with_timeout};

const NOBODY: u32 = 65534;
/// The socket a child running as another uid connects to.
const CHILD_SOCKET: &str = "NNACCEL_HOSTILE_LIMITS_SOCKET";

fn limit() -> Duration {
    scaled(Duration::from_secs(120))
}

fn call(sock: &UnixStream, msg: &ClientMessage, fds: &FdList<'_>) -> ServiceMessage {
    protocol::send_frame(sock, &protocol::encode(msg).unwrap(), fds.fds()).unwrap();
    let (body, _) = protocol::recv_frame(sock, 1 << 20).unwrap();
    protocol::decode(&body).unwrap()
}

fn hello(sock: &UnixStream) -> ServiceMessage {
    let hello = ClientMessage::Hello {
        version: protocol::PROTOCOL_VERSION,
        client: "hostile_limits".into(),
    };
    call(sock, &hello, &FdList::default())
}

/// The error frame the service sends before it closes, then end-of-file; both within `within`.
fn error_then_close(sock: &UnixStream, within: Duration) -> (i32, String) {
    sock.set_read_timeout(Some(within)).unwrap();
    let (body, _) = protocol::recv_frame(sock, 1 << 20)
        .unwrap_or_else(|e| panic!("no error frame within {within:?}: {e}"));
    let ServiceMessage::Error { status, message } = protocol::decode(&body).unwrap() else {
        panic!("not an error frame");
    };
    let mut rest = [0u8; 1];
    assert_eq!(
        (&*sock).read(&mut rest).unwrap(),
        0,
        "closed after the error"
    );
    (status, message)
}

/// The daemon is alive and a well-behaved client executes `a + b` on the device.
fn served_on_the_device(hald: &Hald) {
    assert!(!hald.has_exited(), "the daemon died; log:\n{}", hald.log());
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, 8)).unwrap();
    assert!(pm.runs_on_device(), "a well-behaved client lost the device");
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(8)).unwrap(), 8);
    let (a, b) = inputs(8, 2.0);
    io.set(&a, &b);
    let r = execute(pm.as_ref(), &io.request());
    assert_eq!(r.status, ErrorStatus::None, "{r:?}");
    assert_eq!(io.out(), sum(&a, &b));
}

fn with_device(config: &str) -> (Sim, Hald) {
    assert!(require_privileges(), "needs root and /dev/fuse");
    let sim = Sim::new();
    let hald = Hald::start_configured(
        &[OsStr::new("--device"), sim.path().as_os_str()],
        &[],
        config,
    );
    (sim, hald)
}

/// Lets another uid reach the service's socket.
fn open_socket_to_all(hald: &Hald) {
    std::fs::set_permissions(hald.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(hald.socket(), std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// Runs the child test `name` of this binary as uid/gid `NOBODY`; whether it passed.
fn run_as_nobody(hald: &Hald, name: &str) -> bool {
    open_socket_to_all(hald);
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("setpriv");
    die_with_parent(&mut cmd);
    let out = cmd
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_SOCKET, hald.socket())
        .stdin(Stdio::null())
        .output()
        .expect("setpriv");
    println!(
        "child {name}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.success()
}

#[test]
fn a_stalled_frame_body_gets_an_error_frame_and_a_close() {
    with_timeout(limit(), "stalled frame body", || {
        let (_sim, hald) = with_device("frame_timeout_ms = 500\n");
        let sock = UnixStream::connect(hald.socket()).unwrap();
        hello(&sock);
        // Announce 64 MiB, send 100 bytes, stop.
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(&protocol::FRAME_MAGIC);
        header[4..8].copy_from_slice(&((64u32 << 20) - 1).to_le_bytes());
        (&sock).write_all(&header).unwrap();
        (&sock).write_all(&[0u8; 100]).unwrap();
        let started = Instant::now();
        let (status, message) = error_then_close(&sock, scaled(Duration::from_secs(5)));
        assert_eq!(status, ErrorStatus::InvalidArgument.code());
        assert!(message.contains("in time"), "{message}");
        assert!(started.elapsed() < scaled(Duration::from_secs(5)));
        served_on_the_device(&hald);
    });
}

#[test]
fn an_idle_connection_holding_nothing_is_closed_after_the_idle_timeout() {
    with_timeout(limit(), "idle connection", || {
        let (_sim, hald) = with_device("idle_timeout_ms = 500\n");
        let sock = UnixStream::connect(hald.socket()).unwrap();
        hello(&sock);
        let (_, message) = error_then_close(&sock, scaled(Duration::from_secs(5)));
        assert!(message.contains("idle timeout"), "{message}");
        served_on_the_device(&hald);
    });
}

#[test]
fn connections_beyond_the_per_uid_cap_are_refused_by_name_and_freed_places_come_back() {
    with_timeout(limit(), "connection cap", || {
        let (_sim, hald) = with_device("[budgets]\nconnections = { per_uid = 4 }\n");
        let first = hald.only_client();
        let mut held: Vec<ServiceClient> = (0..3).map(|_| hald.client()).collect();
        let fifth = UnixStream::connect(hald.socket()).unwrap();
        let (status, message) = error_then_close(&fifth, scaled(Duration::from_secs(5)));
        assert_eq!(status, ErrorStatus::ResourceExhaustedTransient.code());
        assert!(message.contains("connections 4 of 4 in use"), "{message}");
        assert!(message.starts_with("uid 0:"), "{message}");
        drop(first);
        held.pop();
        std::thread::sleep(Duration::from_millis(200));
        served_on_the_device(&hald);
    });
}

#[test]
fn a_model_planning_eight_1gib_temporaries_is_refused_before_anything_is_allocated() {
    with_timeout(limit(), "huge temporaries", || {
        let (sim, hald) = with_device("");
        let c = hald.client();
        let status = prepare(&c, &huge_temporaries_model()).err();
        assert_eq!(status, Some(ErrorStatus::ResourceExhaustedPersistent));
        assert!(!sim.has_exited(), "the simulator died");
        served_on_the_device(&hald);
    });
}

#[test]
fn one_memfd_as_both_burst_queues_is_refused() {
    with_timeout(limit(), "aliased burst queues", || {
        let (_sim, hald) = with_device("");
        let (conn, model_id) = prepared_connection(hald.socket()).unwrap();
        let queue = Fmq::create(packet::DATUM_SIZE as u32, 1024).unwrap();
        let (_channel, theirs) = UnixStream::pair().unwrap();
        let mut fds = FdList::default();
        fds.push(queue.fd());
        fds.push(queue.fd());
        fds.push(theirs.as_fd());
        let configure = ClientMessage::ConfigureBurst {
            model_id,
            request_fmq: queue.descriptor(),
            result_fmq: queue.descriptor(),
            polling_window_us: Some(0),
        };
        match call(&conn, &configure, &fds) {
            ServiceMessage::Error { status, message } => {
                assert_eq!(status, ErrorStatus::InvalidArgument.code());
                assert!(message.contains("same file"), "{message}");
            }
            other => panic!("configured a burst over one queue file: {other:?}"),
        }
        served_on_the_device(&hald);
    });
}

/// A new connection (handshake done) with `a + b` prepared on it, or the service's refusal.
fn prepared_connection(socket: &Path) -> Result<(UnixStream, u64), String> {
    let conn = UnixStream::connect(socket).unwrap();
    hello(&conn);
    let prepare = ClientMessage::PrepareModel {
        model: protocol::model_to_wire(
            &binary_model(OperationType::Add, 8),
            &mut FdList::default(),
        ),
        preference: 1,
        priority: 100,
        timeout_ns: None,
    };
    match call(&conn, &prepare, &FdList::default()) {
        ServiceMessage::Prepared { model_id, .. } => Ok((conn, model_id)),
        other => Err(format!("{other:?}")),
    }
}

/// A burst configured on its own connection, or the service's refusal.
fn configure_raw_burst(socket: &Path) -> Result<(UnixStream, Fmq, Fmq, UnixStream), String> {
    let (conn, model_id) = prepared_connection(socket)?;
    let request = Fmq::create(packet::DATUM_SIZE as u32, 64).unwrap();
    let result = Fmq::create(packet::DATUM_SIZE as u32, 64).unwrap();
    let (channel, theirs) = UnixStream::pair().unwrap();
    let mut fds = FdList::default();
    fds.push(request.fd());
    fds.push(result.fd());
    fds.push(theirs.as_fd());
    let configure = ClientMessage::ConfigureBurst {
        model_id,
        request_fmq: request.descriptor(),
        result_fmq: result.descriptor(),
        polling_window_us: Some(0),
    };
    match call(&conn, &configure, &fds) {
        ServiceMessage::BurstConfigured { .. } => Ok((conn, request, result, channel)),
        other => Err(format!("{other:?}")),
    }
}

/// Child body: as another uid, configures one burst (prints `ready` when it did).
#[test]
fn child_another_uid_configures_a_burst() {
    let Some(socket) = std::env::var_os(CHILD_SOCKET) else {
        return;
    };
    configure_raw_burst(Path::new(&socket)).expect("another uid gets a burst place");
    say_ready();
}

#[test]
fn many_connections_of_one_uid_cannot_take_every_burst_place_from_another_uid() {
    with_timeout(limit(), "burst places per uid", || {
        let (_sim, hald) = with_device(
            "[budgets]\nconnections = { per_uid = 512 }\n\
             device_queues = { per_uid = 512, global = 512 }\n",
        );
        let mut held = Vec::new();
        let refusal = loop {
            match configure_raw_burst(hald.socket()) {
                Ok(b) => held.push(b),
                Err(e) => break e,
            }
            assert!(held.len() <= 256, "no limit at all");
        };
        assert!(
            refusal.contains("bursts 64 of 64 in use"),
            "{refusal} after {}",
            held.len()
        );
        assert!(
            run_as_nobody(&hald, "child_another_uid_configures_a_burst"),
            "another uid found no burst place; log:\n{}",
            hald.log()
        );
        // The hostile uid took every device queue this config allows it; once it goes, they
        // come back.
        drop(held);
        std::thread::sleep(scaled(Duration::from_secs(1)));
        served_on_the_device(&hald);
    });
}

/// Child body: as another uid, CacheClear and CacheList are refused.
#[test]
fn child_non_admin_cache_operations_are_refused() {
    let Some(socket) = std::env::var_os(CHILD_SOCKET) else {
        return;
    };
    let c = ServiceClient::connect(Path::new(&socket)).unwrap();
    assert_eq!(c.cache_clear().err(), Some(ErrorStatus::InvalidArgument));
    assert_eq!(c.cache_list().err(), Some(ErrorStatus::InvalidArgument));
    let info = c.info().unwrap();
    assert_eq!(
        info.device_live, None,
        "global device counts for a non-admin"
    );
    assert_eq!(info.connections, 1, "its own connections only");
    say_ready();
}

#[test]
fn cache_clear_and_list_from_a_non_admin_uid_are_refused() {
    with_timeout(limit(), "admin operations", || {
        let (_sim, hald) = with_device("");
        let _other = hald.client();
        assert!(
            run_as_nobody(&hald, "child_non_admin_cache_operations_are_refused"),
            "a non-admin uid used an admin operation"
        );
        // Root still may.
        assert!(hald.client().cache_list().is_ok());
        served_on_the_device(&hald);
    });
}

/// Child body: as another uid, one execution on the device.
#[test]
fn child_another_uid_is_served_on_the_device() {
    let Some(client) = child_client(CHILD_SOCKET) else {
        return;
    };
    let pm = prepare(&client, &binary_model(OperationType::Add, 8)).expect("prepare");
    assert!(pm.runs_on_device(), "the other uid lost the device");
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(8)).unwrap(), 8);
    let (a, b) = inputs(8, 5.0);
    io.set(&a, &b);
    let r = execute(pm.as_ref(), &io.request());
    assert_eq!(r.status, ErrorStatus::None, "{r:?}");
    assert_eq!(io.out(), sum(&a, &b));
}

/// The figure of issue 16, item 4: about 10 000 idle connections used up the daemon's fds and
/// well-behaved clients were refused. At the default budgets, one uid opening 10 000
/// connections holds its 64, every other one gets an error frame and a close, the daemon's fd
/// count stays bounded, and another uid is still served on the device.
#[test]
fn ten_thousand_connections_of_one_uid_leave_the_daemon_fds_and_the_device_to_others() {
    const CONNECTIONS: usize = 10_000;
    with_timeout(limit(), "10 000 connections", || {
        let (_sim, hald) = with_device("");
        // This process holds every connection it opens: room for them.
        let want = CONNECTIONS as u64 + 1024;
        let rl = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if rl.current.is_none_or(|c| c < want) {
            let max = rl.maximum.map_or(want, |m| m.max(want));
            rustix::process::setrlimit(
                rustix::process::Resource::Nofile,
                rustix::process::Rlimit {
                    current: Some(want),
                    maximum: Some(max),
                },
            )
            .expect("raise RLIMIT_NOFILE (root)");
        }
        let fds = |pid: u32| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .count()
        };
        let before = fds(hald.pid());
        let mut held = Vec::with_capacity(CONNECTIONS);
        let mut peak = before;
        for i in 0..CONNECTIONS {
            held.push(UnixStream::connect(hald.socket()).expect("connect"));
            if i % 500 == 0 {
                peak = peak.max(fds(hald.pid()));
            }
        }
        // The refused ones are closed by the daemon: it holds at most the uid's 64, two fds
        // each (the connection, and the clone the service keeps to shut it down on stop).
        let bound = before + 2 * 64 + 8;
        let deadline = Instant::now() + scaled(Duration::from_secs(10));
        let mut now = fds(hald.pid());
        while now > bound && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            now = fds(hald.pid());
        }
        println!(
            "{CONNECTIONS} connections: daemon fds {before} before, {peak} peak sampled, {now} \
             while they are held"
        );
        assert!(
            now <= bound,
            "the daemon holds {now} fds (from {before}) for one uid's connections"
        );
        let last = held.pop().unwrap();
        let (status, message) = error_then_close(&last, scaled(Duration::from_secs(5)));
        assert_eq!(status, ErrorStatus::ResourceExhaustedTransient.code());
        assert!(message.contains("connections 64 of 64 in use"), "{message}");
        assert!(
            run_as_nobody(&hald, "child_another_uid_is_served_on_the_device"),
            "another uid was not served; log:\n{}",
            hald.log()
        );
        drop(held);
        std::thread::sleep(scaled(Duration::from_secs(1)));
        served_on_the_device(&hald);
    });
}
