//! nnaccel-hald under systemd's protocols, without PID 1 systemd: the units pass
//! `systemd-analyze verify`, socket activation through `systemd-socket-activate`, the notify
//! protocol through a `NOTIFY_SOCKET` this test binds (READY=1, WATCHDOG=1 at half of
//! WATCHDOG_USEC, STOPPING=1 and exit 0 on SIGTERM), the example configuration, and
//! `scripts/install.sh` into a staging directory.
//!
//! The daemon runs with `--cpu` (no device, no privileges) except in the test that opens the
//! simulated device, which needs root and `/dev/fuse` like every FUSE test
//! ([`require_privileges`]). Missing host tools (`systemd-analyze`, `systemd-socket-activate`
//! from Debian's `systemd` package, installed by `scripts/setup.sh`) skip visibly, and fail
//! under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nnaccel_tests::{Sim, poll_until, require_privileges, workspace_binary};

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where the units and the example configuration live.
fn unit_dir() -> PathBuf {
    repo().join("systemd")
}

/// What the committed service unit runs; `scripts/install.sh` installs the binary there.
const INSTALLED_HALD: &str = "/usr/local/libexec/nnaccel/nnaccel-hald";

// ---------------------------------------------------------------------------------------------
// Binaries and tools

fn hald_binary() -> PathBuf {
    workspace_binary("NNACCEL_HALD_BIN", "nnaccel-hald", "nnaccel-service")
}

fn ctl_binary() -> PathBuf {
    workspace_binary("NNACCEL_CTL_BIN", "nnaccelctl", "nnaccelctl")
}

/// A host tool on `PATH`, or a visible skip (a failure under `CI=true`).
fn require_tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = format!("{name} is not installed (Debian's `systemd` package; scripts/setup.sh)");
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("must not be skipped in CI: {why}");
        }
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    }
    found
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nnaccel-systemd-")
        .tempdir()
        .expect("tempdir")
}

fn output_text(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------------------------------------
// The notify socket and the daemon

/// A datagram socket standing in for systemd's notify socket.
struct NotifySocket {
    sock: UnixDatagram,
    /// The value for `NOTIFY_SOCKET`.
    env: String,
}

impl NotifySocket {
    /// Bound at a path in `dir`.
    fn at_path(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).expect("bind notify socket");
        Self {
            sock,
            env: path.to_str().expect("utf-8 temp path").to_string(),
        }
    }

    /// Bound in the abstract namespace (`@name`).
    fn abstract_ns() -> Self {
        let name = format!(
            "nnaccel-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).expect("bind abstract notify socket");
        Self {
            sock,
            env: format!("@{name}"),
        }
    }

    /// The next message, or `None` after `limit`.
    fn recv(&self, limit: Duration) -> Option<String> {
        self.sock
            .set_read_timeout(Some(limit.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("recv on the notify socket: {e}"),
        }
    }

    /// Waits (≤ `limit`) for a message with the assignment `key=...`; returns that message.
    /// Fails the test with everything received and the daemon's log otherwise.
    fn expect(&self, key: &str, limit: Duration, daemon: &Daemon) -> String {
        self.wait_for(key, limit).unwrap_or_else(|seen| {
            panic!(
                "no {key} within {limit:?}; received {seen:?}\n{}",
                daemon.describe()
            )
        })
    }

    /// The first message (≤ `limit`) with the assignment `key=...`, or all the others.
    fn wait_for(&self, key: &str, limit: Duration) -> Result<String, Vec<String>> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(seen);
            }
            if let Some(m) = self.recv(left) {
                if m.lines().any(|l| l.starts_with(&format!("{key}="))) {
                    return Ok(m);
                }
                seen.push(m);
            }
        }
    }
}

/// The `STATUS=` value of a notification.
fn status_of(msg: &str) -> &str {
    msg.lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or("")
}

/// A running nnaccel-hald (or systemd-socket-activate that becomes it), its output in a log
/// file. Dropping it kills it (SIGKILL) if it is still running, and prints the log when the
/// test is failing.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    fn spawn(mut cmd: Command, dir: &Path) -> Self {
        let log = dir.join("hald.log");
        let out = fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .env("NNACCEL_LOG", "debug");
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
        Self {
            child: Some(child),
            log,
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn describe(&self) -> String {
        format!(
            "---- daemon log ({}) ----\n{}---- end of log ----",
            self.pid(),
            self.log()
        )
    }

    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid()).expect("child pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Waits (≤ `limit`) for the exit status.
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().expect("not yet reaped");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "the daemon did not exit within {limit:?}\n{}",
                    self.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.describe());
        }
    }
}

/// `nnaccel-hald --cpu --socket <dir>/hal.sock` with `NOTIFY_SOCKET` and the given
/// variables.
fn hald_cpu(dir: &Path, notify: &NotifySocket, env: &[(&str, &str)]) -> (Daemon, PathBuf) {
    let socket = dir.join("hal.sock");
    let mut cmd = Command::new(hald_binary());
    cmd.arg("--cpu")
        .arg("--socket")
        .arg(&socket)
        .env("NOTIFY_SOCKET", &notify.env)
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .envs(env.iter().copied());
    (Daemon::spawn(cmd, dir), socket)
}

/// `nnaccelctl info --service SOCKET`: a real client's handshake and request.
fn ctl_info(socket: &Path) -> Output {
    Command::new(ctl_binary())
        .arg("info")
        .arg("--service")
        .arg(socket)
        .stdin(Stdio::null())
        .output()
        .expect("run nnaccelctl")
}

/// SIGTERM → STOPPING=1 arrives and the daemon exits 0.
fn terminate_cleanly(daemon: &mut Daemon, notify: &NotifySocket) {
    daemon.signal(rustix::process::Signal::TERM);
    let stopping = notify.wait_for("STOPPING", Duration::from_secs(10));
    let status = daemon.wait(Duration::from_secs(15));
    assert!(
        stopping.is_ok() && status.success(),
        "after SIGTERM: STOPPING=1 {}, exit status {status}\n{}",
        match &stopping {
            Ok(_) => "received".to_string(),
            Err(seen) => format!("missing (received {seen:?})"),
        },
        daemon.describe()
    );
}

const READY_LIMIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// The units

/// Copies the units into `dir` with `ExecStart=` pointing at `hald` (verify requires the
/// binary to exist).
fn staged_units(dir: &Path, hald: &Path) -> (PathBuf, PathBuf) {
    let service = fs::read_to_string(unit_dir().join("nnaccel-hald.service")).unwrap();
    let socket = fs::read_to_string(unit_dir().join("nnaccel-hald.socket")).unwrap();
    assert!(
        service.contains(&format!("ExecStart={INSTALLED_HALD}\n")),
        "the service unit must run {INSTALLED_HALD} (scripts/install.sh puts it there)"
    );
    let service = service.replace(INSTALLED_HALD, hald.to_str().unwrap());
    let sp = dir.join("nnaccel-hald.service");
    let kp = dir.join("nnaccel-hald.socket");
    fs::write(&sp, service).unwrap();
    fs::write(&kp, socket).unwrap();
    (sp, kp)
}

#[test]
fn units_pass_systemd_analyze_verify() {
    let Some(analyze) = require_tool("systemd-analyze") else {
        return;
    };
    let dir = tempdir();
    let (service, socket) = staged_units(dir.path(), &hald_binary());
    let out = Command::new(analyze)
        .arg("verify")
        .arg("--man=no")
        .arg(&service)
        .arg(&socket)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run systemd-analyze");
    // verify exits 0 on mere warnings (an unknown key is "ignored"): any line about our
    // units is a failure too. Lines about the host's own units are not ours to fix.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("nnaccel")).collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify:\n{}",
        output_text(&out)
    );
}

/// A broken unit makes the verify step fail: the test above is not vacuous.
#[test]
fn verify_catches_a_missing_binary() {
    let Some(analyze) = require_tool("systemd-analyze") else {
        return;
    };
    let dir = tempdir();
    let (service, socket) = staged_units(dir.path(), &dir.path().join("no-such-binary"));
    let out = Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&service)
        .arg(&socket)
        .current_dir(dir.path())
        .output()
        .expect("run systemd-analyze");
    assert!(!out.status.success(), "{}", output_text(&out));
}

/// The directives the design depends on (docs/service.md) are there.
#[test]
fn units_are_hardened() {
    let service = fs::read_to_string(unit_dir().join("nnaccel-hald.service")).unwrap();
    let socket = fs::read_to_string(unit_dir().join("nnaccel-hald.socket")).unwrap();
    let lines = |s: &str| -> Vec<String> {
        s.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    let service = lines(&service);
    let socket = lines(&socket);
    for want in [
        "Type=notify",
        "WatchdogSec=30s",
        "Restart=on-failure",
        "StateDirectory=nnaccel",
        "RuntimeDirectory=nnaccel",
        "RuntimeDirectoryPreserve=yes",
        "ConfigurationDirectory=nnaccel",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "RestrictAddressFamilies=AF_UNIX",
        "SystemCallFilter=@system-service",
        "SystemCallArchitectures=native",
        "DevicePolicy=closed",
        "DeviceAllow=/dev/nnaccel rw",
        "DeviceAllow=/dev/dma_heap/system rw",
        "DeviceAllow=/dev/udmabuf rw",
        "CapabilityBoundingSet=",
        "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes",
        "RestrictRealtime=yes",
        "RestrictNamespaces=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
    ] {
        assert!(service.iter().any(|l| l == want), "service lacks {want}");
    }
    for want in [
        "ListenStream=/run/nnaccel/hal.sock",
        "SocketMode=0660",
        "SocketGroup=render",
        "Accept=no",
        "WantedBy=sockets.target",
    ] {
        assert!(socket.iter().any(|l| l == want), "socket lacks {want}");
    }
}

// ---------------------------------------------------------------------------------------------
// The notify protocol

#[test]
fn notify_ready_watchdog_and_stopping() {
    let dir = tempdir();
    let notify = NotifySocket::at_path(dir.path());
    let (mut daemon, socket) = hald_cpu(dir.path(), &notify, &[("WATCHDOG_USEC", "200000")]);
    let ready = notify.expect("READY", READY_LIMIT, &daemon);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(
        status_of(&ready).to_lowercase().contains("cpu"),
        "READY=1's STATUS says it runs CPU-only: {ready:?}"
    );
    // READY=1 means serving: a client gets through at once.
    assert!(socket.exists(), "READY=1 before the socket exists");
    let info = ctl_info(&socket);
    assert!(
        info.status.success(),
        "nnaccelctl info --service:\n{}\n{}",
        output_text(&info),
        daemon.describe()
    );

    // WATCHDOG=1 every 100 ms (half of 200 ms): several within a few seconds.
    let start = Instant::now();
    for _ in 0..4 {
        notify.expect("WATCHDOG", Duration::from_secs(5), &daemon);
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "4 pings took {:?}",
        start.elapsed()
    );

    terminate_cleanly(&mut daemon, &notify);
}

#[test]
fn notify_to_an_abstract_socket() {
    let dir = tempdir();
    let notify = NotifySocket::abstract_ns();
    let (mut daemon, _socket) = hald_cpu(dir.path(), &notify, &[]);
    notify.expect("READY", READY_LIMIT, &daemon);
    terminate_cleanly(&mut daemon, &notify);
}

/// No WATCHDOG_USEC, or one meant for another process (WATCHDOG_PID): no pings.
#[test]
fn no_watchdog_pings_unless_asked() {
    for env in [
        &[][..],
        &[("WATCHDOG_USEC", "100000"), ("WATCHDOG_PID", "1")][..],
    ] {
        let dir = tempdir();
        let notify = NotifySocket::at_path(dir.path());
        let (mut daemon, _socket) = hald_cpu(dir.path(), &notify, env);
        notify.expect("READY", READY_LIMIT, &daemon);
        let deadline = Instant::now() + Duration::from_millis(600);
        while let Some(m) = notify.recv(deadline.saturating_duration_since(Instant::now())) {
            assert!(
                !m.lines().any(|l| l == "WATCHDOG=1"),
                "WATCHDOG=1 with {env:?}\n{}",
                daemon.describe()
            );
        }
        terminate_cleanly(&mut daemon, &notify);
    }
}

/// READY=1 waits for the device and names it (root and /dev/fuse: the simulated device).
#[test]
fn ready_names_the_opened_device() {
    if !require_privileges() {
        return;
    }
    let sim = Sim::new();
    let dir = tempdir();
    let notify = NotifySocket::at_path(dir.path());
    let mut cmd = Command::new(hald_binary());
    cmd.arg("--device")
        .arg(sim.path())
        .arg("--socket")
        .arg(dir.path().join("hal.sock"))
        .env("NOTIFY_SOCKET", &notify.env)
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS");
    let mut daemon = Daemon::spawn(cmd, dir.path());
    let ready = notify.expect("READY", READY_LIMIT, &daemon);
    let status = status_of(&ready);
    assert!(
        status.contains(sim.path().to_str().unwrap())
            && !status.to_lowercase().contains("cpu executor only"),
        "READY=1's STATUS names the device it opened: {ready:?}\n{}",
        daemon.describe()
    );
    terminate_cleanly(&mut daemon, &notify);
}

/// A device that cannot be opened: still READY=1 (CPU-only), and the status says why.
#[test]
fn ready_says_why_it_runs_cpu_only() {
    let dir = tempdir();
    let notify = NotifySocket::at_path(dir.path());
    let missing = dir.path().join("no-such-device");
    let mut cmd = Command::new(hald_binary());
    cmd.arg("--device")
        .arg(&missing)
        .arg("--socket")
        .arg(dir.path().join("hal.sock"))
        .env("NOTIFY_SOCKET", &notify.env)
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS");
    let mut daemon = Daemon::spawn(cmd, dir.path());
    let ready = notify.expect("READY", READY_LIMIT, &daemon);
    let status = status_of(&ready);
    assert!(
        status.to_lowercase().contains("cpu") && status.contains(missing.to_str().unwrap()),
        "STATUS says CPU-only and names the device it could not open: {ready:?}"
    );
    terminate_cleanly(&mut daemon, &notify);
}

// ---------------------------------------------------------------------------------------------
// Socket activation

#[test]
fn socket_activation_through_systemd_socket_activate() {
    let Some(activate) = require_tool("systemd-socket-activate") else {
        return;
    };
    let dir = tempdir();
    let notify = NotifySocket::at_path(dir.path());
    let socket = dir.path().join("activated.sock");
    // The daemon must serve the inherited socket, not bind its own.
    let unused = dir.path().join("not-used.sock");
    let mut cmd = Command::new(activate);
    cmd.arg("--listen")
        .arg(&socket)
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify.env))
        .arg("--setenv=NNACCEL_LOG=debug")
        .arg(hald_binary())
        .arg("--cpu")
        .arg("--socket")
        .arg(&unused);
    let mut daemon = Daemon::spawn(cmd, dir.path());
    // systemd-socket-activate listens, then execs the daemon (same pid) on the first
    // connection.
    poll_until(Duration::from_secs(10), "the activation socket", || {
        socket.exists()
    });
    let info = ctl_info(&socket);
    assert!(
        info.status.success(),
        "nnaccelctl info through the activated socket:\n{}\n{}",
        output_text(&info),
        daemon.describe()
    );
    notify.expect("READY", READY_LIMIT, &daemon);
    let comm = fs::read_to_string(format!("/proc/{}/comm", daemon.pid())).unwrap_or_default();
    assert_eq!(comm.trim(), "nnaccel-hald", "the activated process");
    assert!(
        !unused.exists(),
        "--socket was bound although LISTEN_FDS was set"
    );
    // Later connections reach the same process.
    for _ in 0..3 {
        let again = ctl_info(&socket);
        assert!(again.status.success(), "{}", output_text(&again));
    }
    assert!(daemon.running());
    terminate_cleanly(&mut daemon, &notify);
}

/// Connections made before the daemon is up wait in the backlog and are served.
#[test]
fn socket_activation_keeps_early_connections() {
    let Some(activate) = require_tool("systemd-socket-activate") else {
        return;
    };
    let dir = tempdir();
    let socket = dir.path().join("activated.sock");
    let mut cmd = Command::new(activate);
    cmd.arg("--listen")
        .arg(&socket)
        .arg(hald_binary())
        .arg("--cpu")
        .arg("--socket")
        .arg(dir.path().join("not-used.sock"));
    let mut daemon = Daemon::spawn(cmd, dir.path());
    poll_until(Duration::from_secs(10), "the activation socket", || {
        socket.exists()
    });
    // Raw connections first (they trigger the exec), then a real client.
    let early: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(&socket).expect("connect to the activation socket"))
        .collect();
    let info = ctl_info(&socket);
    assert!(
        info.status.success(),
        "{}\n{}",
        output_text(&info),
        daemon.describe()
    );
    drop(early);
    assert!(daemon.running(), "clients that left without a word");
    daemon.signal(rustix::process::Signal::TERM);
    let status = daemon.wait(Duration::from_secs(15));
    assert!(status.success(), "{status}\n{}", daemon.describe());
}

// ---------------------------------------------------------------------------------------------
// Configuration and installation

/// The example configuration, with every key uncommented, is accepted (the daemon rejects
/// unknown keys).
#[test]
fn example_config_is_accepted() {
    let dir = tempdir();
    let example = fs::read_to_string(unit_dir().join("hald.toml.example")).unwrap();
    let mut keys = 0;
    let uncommented: String = example
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(kv) if kv.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')) => {
                keys += 1;
                format!("{kv}\n")
            }
            // A table header (`# [budgets]`), so the keys under it land in their table.
            Some(table) if table.starts_with('[') && table.ends_with(']') => format!("{table}\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    assert!(keys >= 4, "the example shows the keys: {uncommented}");
    let config = dir.path().join("hald.toml");
    fs::write(&config, uncommented).unwrap();
    let notify = NotifySocket::at_path(dir.path());
    let mut cmd = Command::new(hald_binary());
    cmd.arg("--config")
        .arg(&config)
        .arg("--cpu")
        .arg("--socket")
        .arg(dir.path().join("hal.sock"))
        .env("NOTIFY_SOCKET", &notify.env)
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS");
    let mut daemon = Daemon::spawn(cmd, dir.path());
    notify.expect("READY", READY_LIMIT, &daemon);
    terminate_cleanly(&mut daemon, &notify);
}

fn install_sh() -> PathBuf {
    repo().join("scripts/install.sh")
}

/// `scripts/install.sh --no-build --destdir D` with stand-in binaries in `target`.
fn run_install(target: &Path, destdir: &Path, extra: &[&str]) -> Output {
    Command::new("bash")
        .arg(install_sh())
        .arg("--no-build")
        .arg("--target-dir")
        .arg(target)
        .arg("--destdir")
        .arg(destdir)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run install.sh")
}

fn fake_release(dir: &Path) -> PathBuf {
    let release = dir.join("target/release");
    fs::create_dir_all(&release).unwrap();
    for bin in ["nnaccel-hald", "nnaccelctl", "nnaccel-sim"] {
        let p = release.join(bin);
        fs::write(&p, format!("#!/bin/sh\necho {bin}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.join("target")
}

#[test]
fn install_script_stages_everything() {
    let dir = tempdir();
    let target = fake_release(dir.path());
    let dest = dir.path().join("root");

    // --dry-run changes nothing.
    let out = run_install(&target, &dest, &["--dry-run"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(!dest.exists(), "--dry-run wrote files");

    let out = run_install(&target, &dest, &[]);
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for hint in [
        "systemctl daemon-reload",
        "systemctl enable --now nnaccel-hald.socket",
        "nnaccel-sim --path /dev/nnaccel",
    ] {
        assert!(
            stdout.contains(hint),
            "install.sh does not say {hint:?}:\n{stdout}"
        );
    }
    let exec = |p: &str| {
        let m = fs::metadata(dest.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(m.permissions().mode() & 0o111 != 0, "{p} is not executable");
    };
    exec("usr/local/libexec/nnaccel/nnaccel-hald");
    exec("usr/local/bin/nnaccelctl");
    exec("usr/local/sbin/nnaccel-sim");
    let service = fs::read_to_string(dest.join("etc/systemd/system/nnaccel-hald.service")).unwrap();
    assert!(service.contains(&format!("ExecStart={INSTALLED_HALD}\n")));
    assert!(
        dest.join("etc/systemd/system/nnaccel-hald.socket")
            .is_file()
    );
    assert!(dest.join("etc/udev/rules.d/70-nnaccel.rules").is_file());
    assert!(
        dest.join("usr/local/share/doc/nnaccel/service.md")
            .is_file()
    );
    let config = dest.join("etc/nnaccel/hald.toml");
    assert_eq!(
        fs::read_to_string(&config).unwrap(),
        fs::read_to_string(unit_dir().join("hald.toml.example")).unwrap()
    );

    // An existing configuration is kept.
    fs::write(&config, "cpu = true\n").unwrap();
    let out = run_install(&target, &dest, &[]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(fs::read_to_string(&config).unwrap(), "cpu = true\n");

    // --uninstall removes what was installed, and keeps the edited configuration.
    let out = run_install(&target, &dest, &["--uninstall"]);
    assert!(out.status.success(), "{}", output_text(&out));
    for gone in [
        "usr/local/libexec/nnaccel/nnaccel-hald",
        "usr/local/bin/nnaccelctl",
        "usr/local/sbin/nnaccel-sim",
        "etc/systemd/system/nnaccel-hald.service",
        "etc/systemd/system/nnaccel-hald.socket",
        "etc/udev/rules.d/70-nnaccel.rules",
    ] {
        assert!(!dest.join(gone).exists(), "{gone} is still there");
    }
    assert!(
        config.is_file(),
        "--uninstall removed an edited configuration"
    );
}

/// Another prefix: the units run the binary from there.
#[test]
fn install_script_honours_prefix() {
    let dir = tempdir();
    let target = fake_release(dir.path());
    let dest = dir.path().join("root");
    let out = run_install(&target, &dest, &["--prefix", "/opt/nnaccel"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        dest.join("opt/nnaccel/libexec/nnaccel/nnaccel-hald")
            .is_file()
    );
    let service = fs::read_to_string(dest.join("etc/systemd/system/nnaccel-hald.service")).unwrap();
    assert!(
        service.contains("ExecStart=/opt/nnaccel/libexec/nnaccel/nnaccel-hald\n"),
        "{service}"
    );
    assert!(!service.contains("/usr/local"), "{service}");
}

#[test]
fn install_script_is_shellcheck_clean() {
    let Some(shellcheck) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("shellcheck"))
            .find(|p| p.is_file())
    }) else {
        let _ = writeln!(std::io::stderr(), "SKIPPED: shellcheck is not installed");
        return;
    };
    let out = Command::new(shellcheck)
        .arg(install_sh())
        .output()
        .expect("run shellcheck");
    assert!(out.status.success(), "{}", output_text(&out));
}
