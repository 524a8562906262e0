//! Integration test support: the simulated device on a FUSE file in a temp dir (or, with
//! `NNACCEL_TEST_FRONTEND=cuse`, a CUSE char device `/dev/nnaccel-t<unique>`), and the small
//! helpers every test of the ioctl harness, the lifetime tests and the bench share.
//!
//! - [`Sim`]: spawns `nnaccel-sim` on a fresh path, waits for its FUSE mount (or CUSE node),
//!   tears it down;
//! - [`require_privileges`]: root and `/dev/fuse` (`/dev/cuse`), or a visible skip (never in
//!   CI);
//! - [`with_timeout`] / [`run_with_sim`]: no test may hang; [`scaled`] stretches the limits by
//!   `NNACCEL_TEST_TIMEOUT_SCALE` (emulated guests are slow);
//! - programs ([`add_program`], ...), shared memory ([`SharedBuf`]), jobs ([`job`]), errnos
//!   ([`errno`]) and the device's live-object counters ([`LiveCounts`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use nnaccel_uapi as uapi;
pub mod models;
pub mod service;
use uapi::abi::{
    BO_ACCESS_MASK, Binding, Job, PARAM_LIVE_BOS, PARAM_LIVE_FILES, PARAM_LIVE_PROGRAMS,
    PARAM_LIVE_QUEUES,
};
use uapi::device::{Device, DeviceExt, FdDevice};
use uapi::program::{Location, Operand, Operation, Program};
use uapi::sys::{self, Mapping};

/// `FUSE_SUPER_MAGIC`: the statfs type of a live FUSE mount.
pub const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// How long the simulator may take to mount (times [`timeout_scale`]).
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default time limit of one test body in [`run_with_sim`] (times [`timeout_scale`]).
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `NNACCEL_TEST_TIMEOUT_SCALE` (a positive float, default 1): the factor applied to the
/// mount/ready timeouts and the per-test watchdog, for slow (emulated) machines.
pub fn timeout_scale() -> f64 {
    std::env::var("NNACCEL_TEST_TIMEOUT_SCALE")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f > 0.0)
        .unwrap_or(1.0)
}

/// `d` times [`timeout_scale`].
pub fn scaled(d: Duration) -> Duration {
    d.mul_f64(timeout_scale())
}

/// Which frontend of the simulator the integration tests drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// A FUSE file in a temp dir (the default).
    Fuse,
    /// A CUSE character device `/dev/nnaccel-t<unique>` (`NNACCEL_TEST_FRONTEND=cuse`).
    Cuse,
}

/// The frontend chosen by `NNACCEL_TEST_FRONTEND` (`fuse`, the default, or `cuse`).
pub fn frontend() -> Frontend {
    match std::env::var("NNACCEL_TEST_FRONTEND").as_deref() {
        Ok("cuse") => Frontend::Cuse,
        Ok("fuse") | Ok("") | Err(_) => Frontend::Fuse,
        Ok(other) => panic!("NNACCEL_TEST_FRONTEND={other}: expected fuse or cuse"),
    }
}

// ---------------------------------------------------------------------------------------------
// Privileges

/// Whether this process may run device tests: root and an openable `/dev/fuse` (or
/// `/dev/cuse` with `NNACCEL_TEST_FRONTEND=cuse`).
///
/// If not: with `CI=true` it panics (the integration tier must not be skipped in CI);
/// otherwise it prints `SKIPPED: <reason>` to stderr and returns `false`, and the caller
/// returns early.
pub fn require_privileges() -> bool {
    let control = match frontend() {
        Frontend::Fuse => "/dev/fuse",
        Frontend::Cuse => "/dev/cuse",
    };
    let reason = if !rustix::process::geteuid().is_root() {
        Some("device tests need root (run as root or in the QEMU image)".to_string())
    } else {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(control)
        {
            // Opening /dev/cuse starts a CUSE handshake the kernel drops on close: harmless.
            Ok(_) => None,
            Err(e) => Some(format!("cannot open {control}: {e}")),
        }
    };
    match reason {
        None => true,
        Some(r) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("device integration tests must not be skipped in CI: {r}")
        }
        Some(r) => {
            // Straight to fd 2: libtest captures `eprintln!`, and a skip must be visible.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {r}");
            false
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The simulator

/// Where a workspace binary is: `$<env_var>`, else `target/<profile>/<name>` next to the
/// directory of the running test binary (`target/<profile>/deps/`). Panics with the command
/// that builds it (`cargo build -p <package> --bin <name>`) when it is missing.
pub fn workspace_binary(env_var: &str, name: &str, package: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{env_var}={} is not a file", p.display());
        return p;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let exe_dir = exe.parent().expect("test binary has a directory");
    // Test and bench binaries live in target/<profile>/deps/, helper bins in target/<profile>/.
    let profile_dir = if exe_dir.file_name().is_some_and(|n| n == "deps") {
        exe_dir.parent().expect("deps has a parent")
    } else {
        exe_dir
    };
    let bin = profile_dir.join(name);
    ensure_built_once(&bin, profile_dir, name, package);
    if !bin.is_file() {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        panic!(
            "{name} is missing: {} does not exist.\nBuild it first: `cargo build{} -p {package} \
             --bin {name}` (with the same CARGO_TARGET_DIR), or set {env_var} to its path.",
            bin.display(),
            if release { " --release" } else { "" }
        );
    }
    bin
}

/// Where the `nnaccel-sim` binary is (`$NNACCEL_SIM_BIN` overrides); see [`workspace_binary`].
pub fn sim_binary() -> PathBuf {
    workspace_binary("NNACCEL_SIM_BIN", "nnaccel-sim", "nnaccel-kmod-sim")
}

/// Once per process and binary: when `bin` is missing or older than its package's sources,
/// builds it with the cargo that runs this test or bench (`$CARGO`, set by `cargo test` and
/// `cargo bench`) — cargo does not build another package's binary for this package's tests,
/// so a fresh `cargo bench` would otherwise find none — and warns if it is still stale.
/// Without `$CARGO` (a test binary run by hand, the QEMU guest) nothing is built.
fn ensure_built_once(bin: &Path, profile_dir: &Path, name: &str, package: &str) {
    static CHECKED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut checked = CHECKED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if checked.iter().any(|b| b == name) {
        return;
    }
    checked.push(name.to_string());
    if bin.is_file() && !is_stale(bin, package) {
        return;
    }
    if let (Some(cargo), Some(target_dir)) = (std::env::var_os("CARGO"), profile_dir.parent()) {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", package, "--bin", name])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        eprintln!("building {name}: {cmd:?}");
        match cmd.status() {
            Ok(s) if s.success() => return,
            Ok(s) => eprintln!("warning: building {name} failed ({s})"),
            Err(e) => eprintln!("warning: cannot run cargo to build {name}: {e}"),
        }
    }
    if bin.is_file() {
        eprintln!(
            "warning: {} is older than the sources of {package}: rebuild it \
             (`cargo build -p {package} --bins`)",
            bin.display()
        );
    }
}

/// Whether `bin` is older than its package's sources.
fn is_stale(bin: &Path, package: &str) -> bool {
    fn newest(dir: &Path) -> Option<std::time::SystemTime> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                if m.is_dir() {
                    newest(&e.path())
                } else {
                    m.modified().ok()
                }
            })
            .max()
    }
    // A binary's own package and the packages below it that change most.
    let dir = match package {
        "nnaccel-kmod-sim" => "kmod-sim/src",
        "nnaccel-service" | "nnaccelctl" => "driver",
        _ => return false,
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    newest(&src).is_some_and(|n| n > built)
}

/// Whether `path` is the root of a live FUSE mount.
// `f_type`'s width differs between architectures.
#[allow(clippy::unnecessary_cast)]
pub fn is_fuse_mounted(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|st| st.f_type as i64 == FUSE_SUPER_MAGIC)
}

/// Whether `path` is a character device node (a CUSE device).
pub fn is_char_device(path: &Path) -> bool {
    rustix::fs::stat(path).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice
    })
}

/// Whether the simulator's device at `path` is up: a live FUSE mount, or the CUSE node once
/// the simulator has said it serves it (`log`). The node alone is not enough: the kernel
/// creates it (device_add) while it handles the simulator's CUSE_INIT reply, before it
/// registers the character device, and an open in between fails with ENXIO. The simulator
/// says "serving" only after that reply's write has returned, by which time both are done.
fn device_ready(frontend: Frontend, path: &Path, log: &Path) -> bool {
    match frontend {
        Frontend::Fuse => is_fuse_mounted(path),
        Frontend::Cuse => {
            is_char_device(path)
                && std::fs::read_to_string(log).is_ok_and(|l| l.contains("serving "))
        }
    }
}

/// `umount2(path, MNT_DETACH)`, errors ignored (not mounted is fine).
pub fn lazy_unmount(path: &Path) {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; umount2 only reads it.
    let _ = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

/// A running `nnaccel-sim` serving a FUSE file in its own temp dir, or (with
/// `NNACCEL_TEST_FRONTEND=cuse`) a CUSE node `/dev/nnaccel-t<pid>-<n>`, its log in a temp dir.
///
/// Dropping it sends SIGTERM, waits up to 5 s (then SIGKILL), and lazily unmounts the file if
/// it is still mounted. If the thread is panicking, the simulator's log is printed.
#[derive(Debug)]
pub struct Sim {
    child: Mutex<Option<Child>>,
    pid: u32,
    path: PathBuf,
    log_path: PathBuf,
    // Last: removed after the mount is gone.
    dir: tempfile::TempDir,
}

impl Sim {
    /// Starts the simulator with default limits.
    pub fn new() -> Self {
        Self::start(&[])
    }

    /// Starts the simulator with `extra` arguments (`--max-bos 4`, ...) and waits for its
    /// mount or node (at most [`MOUNT_TIMEOUT`], scaled).
    pub fn start(extra: &[&str]) -> Self {
        Self::start_on(None, extra)
    }

    /// A new simulator serving `path` (where one that was killed served before): a device
    /// that died and came back.
    pub fn start_at(path: &Path, extra: &[&str]) -> Self {
        Self::start_on(Some(path), extra)
    }

    fn start_on(at: Option<&Path>, extra: &[&str]) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let bin = sim_binary();
        let dir = tempfile::Builder::new()
            .prefix("nnaccel-sim-")
            .tempdir()
            .expect("tempdir");
        let frontend = frontend();
        let (path, frontend_arg) = match frontend {
            Frontend::Fuse => (dir.path().join("nnaccel"), "fuse"),
            Frontend::Cuse => (
                PathBuf::from(format!(
                    "/dev/nnaccel-t{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                )),
                "cuse",
            ),
        };
        let path = at.map_or(path, Path::to_path_buf);
        let log_path = dir.path().join("sim.log");
        let log = File::create(&log_path).expect("create sim log");
        let log2 = log.try_clone().expect("dup sim log");
        let mut child = Command::new(&bin)
            .arg("--frontend")
            .arg(frontend_arg)
            .arg("--path")
            .arg(&path)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin.display()));
        let pid = child.id();
        let limit = scaled(MOUNT_TIMEOUT);
        let deadline = Instant::now() + limit;
        loop {
            if device_ready(frontend, &path, &log_path) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                lazy_unmount(&path);
                panic!(
                    "nnaccel-sim {extra:?} exited before mounting ({status}); its log:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                lazy_unmount(&path);
                panic!(
                    "nnaccel-sim {extra:?} did not serve {} within {limit:?}; its log:\n{}",
                    path.display(),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Self {
            child: Mutex::new(Some(child)),
            pid,
            path,
            log_path,
            dir,
        }
    }

    /// The device file (FUSE mount) or node (CUSE).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temp dir holding the device file and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Opens the device file, as any client would.
    pub fn open(&self) -> Arc<FdDevice> {
        Arc::new(FdDevice::open(&self.path).unwrap_or_else(|e| {
            panic!(
                "open {}: {e}; sim log:\n{}",
                self.path.display(),
                self.log()
            )
        }))
    }

    /// The simulator's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the simulator logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the simulator process has exited (reaps it if so).
    pub fn has_exited(&self) -> bool {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            None => true,
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
        }
    }

    /// Kills the device abruptly (SIGKILL, no unmount by the device), reaps it, then lazily
    /// unmounts the now stale mount. Open files stay open, their calls must fail.
    pub fn kill_hard(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut c) = guard.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        drop(guard);
        lazy_unmount(&self.path);
    }

    fn terminate(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = guard.take() {
            terminate_child(c, "nnaccel-sim");
        }
    }
}

/// Stops `child` with SIGTERM, and SIGKILL when it has not exited 5 s (scaled) later.
pub fn terminate_child(mut child: std::process::Child, name: &str) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + scaled(Duration::from_secs(5));
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => {
                eprintln!("{name} {} ignored SIGTERM for 5 s: SIGKILL", child.id());
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.terminate();
        // Not a mount point any more (the device unmounted itself) is fine: EINVAL, ignored.
        lazy_unmount(&self.path);
        if std::thread::panicking() {
            eprintln!(
                "---- nnaccel-sim log ({}) ----\n{}---- end of log ----",
                self.pid,
                self.log()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Never hang

/// Runs `f` on its own thread; fails the test if it does not finish within `limit`.
/// A panic inside `f` is propagated.
pub fn with_timeout<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    with_timeout_or(limit, what, || {}, f)
}

/// Like [`with_timeout`], but calls `on_timeout` (e.g. kill the device so the stuck thread is
/// released) before failing.
pub fn with_timeout_or<T: Send + 'static>(
    limit: Duration,
    what: &str,
    on_timeout: impl FnOnce(),
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(what.chars().take(15).collect())
        .spawn(move || {
            let v = f();
            let _ = tx.send(v);
        })
        .expect("spawn timeout thread");
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(RecvTimeoutError::Timeout) => {
            on_timeout();
            panic!("{what} did not finish within {limit:?}: it hung");
        }
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => panic!("{what}: thread ended without a result"),
        },
    }
}

/// What a test body gets from [`run_with_sim`].
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The device process.
    pub sim: Arc<Sim>,
    /// One open file on it.
    pub dev: Arc<FdDevice>,
}

impl Ctx {
    /// Another open file on the same device.
    pub fn open(&self) -> Arc<FdDevice> {
        self.sim.open()
    }

    /// GET_PARAM that must succeed.
    pub fn param(&self, param: u32) -> u64 {
        self.dev
            .get_param(param)
            .unwrap_or_else(|e| panic!("GET_PARAM {param}: {e}"))
    }
}

/// The shape of almost every integration test: checks privileges (returns early with a
/// visible skip outside CI), starts a simulator with `args`, opens it once, and runs `body`
/// within `limit` (on timeout the device is killed so the body's ioctls fail, then the test
/// fails).
pub fn run_with_sim_for(args: &[&str], limit: Duration, body: impl FnOnce(Ctx) + Send + 'static) {
    if !require_privileges() {
        return;
    }
    let sim = Arc::new(Sim::start(args));
    let dev = sim.open();
    let ctx = Ctx {
        sim: sim.clone(),
        dev,
    };
    with_timeout_or(
        scaled(limit),
        "test body",
        || sim.kill_hard(),
        move || body(ctx),
    );
}

/// [`run_with_sim_for`] with [`TEST_TIMEOUT`].
pub fn run_with_sim(args: &[&str], body: impl FnOnce(Ctx) + Send + 'static) {
    run_with_sim_for(args, TEST_TIMEOUT, body);
}

/// Polls `cond` every 10 ms until it holds; fails the test after `limit`.
pub fn poll_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// The errno of a failed call; fails the test if the call succeeded.
#[track_caller]
pub fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, the call succeeded with {v:?}"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("error without errno: {e}")),
    }
}

/// Name of an errno, for messages.
pub fn errno_name(e: i32) -> String {
    io::Error::from_raw_os_error(e).to_string()
}

/// Asserts that an `io::Result` failed with exactly `errno`.
#[macro_export]
macro_rules! assert_errno {
    ($call:expr, $errno:expr $(,)?) => {{
        let got = $crate::errno($call);
        let want: i32 = $errno;
        assert_eq!(
            got,
            want,
            "expected {} ({}), got {} ({})",
            want,
            $crate::errno_name(want),
            got,
            $crate::errno_name(got)
        );
    }};
}

// ---------------------------------------------------------------------------------------------
// Programs

/// NN HAL operand and operation codes the tests use.
pub mod hal {
    /// `INT32` scalar.
    pub const INT32: i32 = 1;
    /// `TENSOR_FLOAT32`.
    pub const TENSOR_FLOAT32: i32 = 3;
    /// `TENSOR_INT32`.
    pub const TENSOR_INT32: i32 = 4;
    /// `TENSOR_FLOAT16`.
    pub const TENSOR_FLOAT16: i32 = 8;
    /// `ADD`.
    pub const ADD: i32 = 0;
    /// `FLOOR`.
    pub const FLOOR: i32 = 8;
    /// `MUL`.
    pub const MUL: i32 = 18;
    /// `RELU`.
    pub const RELU: i32 = 19;
    /// `ABS`.
    pub const ABS: i32 = 38;
    /// `EXP`.
    pub const EXP: i32 = 49;
    /// `WHILE`.
    pub const WHILE: i32 = 97;
    /// Fused activation: none.
    pub const FUSED_NONE: i32 = 0;
    /// Fused activation: RELU.
    pub const FUSED_RELU: i32 = 1;
}

/// A tensor operand of `ty` with `dims`.
pub fn tensor(ty: i32, dims: &[u32], location: Location) -> Operand {
    Operand {
        operand_type: ty,
        dims: dims.to_vec(),
        scale: 0.0,
        zero_point: 0,
        location,
        channel_quant: None,
    }
}

/// A `TENSOR_FLOAT32` operand of `n` elements.
pub fn f32_vec(n: u32, location: Location) -> Operand {
    tensor(hal::TENSOR_FLOAT32, &[n], location)
}

/// An `INT32` scalar constant at `offset` of the constant section.
pub fn i32_const(offset: u64) -> Operand {
    Operand {
        operand_type: hal::INT32,
        dims: vec![],
        scale: 0.0,
        zero_point: 0,
        location: Location::Constant { offset, length: 4 },
        channel_quant: None,
    }
}

/// `out = op(a, b)` with fused `activation` over `[n]` f32 tensors (ADD, MUL, SUB, DIV).
/// Arguments: inputs `a`, `b`; output `out` (bindings 0, 1, 2).
pub fn binary_program(op: i32, n: u32, activation: i32) -> Program {
    Program {
        operands: vec![
            f32_vec(n, Location::Input),
            f32_vec(n, Location::Input),
            i32_const(0),
            f32_vec(n, Location::Output),
        ],
        operations: vec![Operation {
            operation_type: op,
            inputs: vec![0, 1, 2],
            outputs: vec![3],
        }],
        inputs: vec![0, 1],
        outputs: vec![3],
        bo_refs: vec![],
        constants: activation.to_le_bytes().to_vec(),
        relax_f32_to_f16: false,
    }
}

/// `out = a + b` over `[n]` f32.
pub fn add_program(n: u32) -> Program {
    binary_program(hal::ADD, n, hal::FUSED_NONE)
}

/// `out = a * b` over `[n]` f32.
pub fn mul_program(n: u32) -> Program {
    binary_program(hal::MUL, n, hal::FUSED_NONE)
}

/// A one-input, one-output elementwise operation (RELU, ABS, FLOOR) over `[n]` of `ty`.
pub fn unary_program(op: i32, ty: i32, n: u32) -> Program {
    Program {
        operands: vec![
            tensor(ty, &[n], Location::Input),
            tensor(ty, &[n], Location::Output),
        ],
        operations: vec![Operation {
            operation_type: op,
            inputs: vec![0],
            outputs: vec![1],
        }],
        inputs: vec![0],
        outputs: vec![1],
        bo_refs: vec![],
        constants: vec![],
        relax_f32_to_f16: false,
    }
}

/// `out = relu(a)` over `[n]` f32.
pub fn relu_program(n: u32) -> Program {
    unary_program(hal::RELU, hal::TENSOR_FLOAT32, n)
}

/// `out = a + c` where `c` is `[n]` f32 constant data in BO `bo` at offset 0 (a BO reference).
pub fn add_bo_constant_program(n: u32, bo: u32) -> Program {
    let mut p = add_program(n);
    p.operands[1] = f32_vec(
        n,
        Location::BoRef {
            slot: 0,
            offset: 0,
            length: u64::from(n) * 4,
        },
    );
    p.inputs = vec![0];
    p.bo_refs = vec![bo];
    p
}

/// Encodes a program (which must be encodable).
pub fn encode(p: &Program) -> Vec<u8> {
    p.encode().expect("encode program")
}

// ---------------------------------------------------------------------------------------------
// Shared memory and jobs

/// Little-endian bytes of f32 values.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A memfd with a shared read-write mapping of all of it (size rounded up to 4096).
#[derive(Debug)]
pub struct SharedBuf {
    /// The memfd.
    pub fd: OwnedFd,
    /// Its mapping.
    pub map: Mapping,
}

impl SharedBuf {
    /// A zeroed memfd of at least `size` bytes (a multiple of 4096, at least one page).
    pub fn new(size: usize) -> Self {
        let size = size.max(1).next_multiple_of(4096);
        let fd = sys::memfd_create(c"nnaccel-test", size as u64).expect("memfd_create");
        let map = Mapping::map_shared(fd.as_fd(), 0, size, true).expect("mmap memfd");
        Self { fd, map }
    }

    /// A memfd holding `values` at offset 0.
    pub fn with_f32(values: &[f32]) -> Self {
        let b = Self::new(values.len() * 4);
        b.write_f32(0, values);
        b
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.map.len() as u64
    }

    /// Writes f32 values at byte `offset`.
    pub fn write_f32(&self, offset: usize, values: &[f32]) {
        self.map
            .write_at(offset, &f32_bytes(values))
            .expect("write_at");
    }

    /// Reads `n` f32 values at byte `offset`.
    pub fn read_f32(&self, offset: usize, n: usize) -> Vec<f32> {
        let mut bytes = vec![0u8; n * 4];
        self.map.read_at(offset, &mut bytes).expect("read_at");
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Imports the whole memfd with `access`; must succeed.
    pub fn import(&self, dev: &(impl Device + ?Sized), access: u32) -> u32 {
        dev.bo_import(self.fd.as_fd(), 0, self.size(), access)
            .unwrap_or_else(|e| panic!("BO_IMPORT of a {}-byte memfd: {e}", self.size()))
    }
}

/// A binding of `length` bytes at `offset` of `bo`.
pub fn binding(bo: u32, offset: u64, length: u64) -> Binding {
    Binding {
        bo,
        flags: 0,
        offset,
        length,
    }
}

/// A job running `program` with `bindings`.
pub fn job(program: u32, bindings: &[Binding]) -> Job {
    let mut j = Job {
        program,
        num_bindings: bindings.len() as u32,
        ..Job::default()
    };
    j.bindings[..bindings.len()].copy_from_slice(bindings);
    j
}

/// An ADD of two `[n]` f32 vectors on memfd-backed BOs, ready to submit: inputs `a` and `b`,
/// output `out` (each its own memfd, imported with the right access), and the program.
#[derive(Debug)]
pub struct AddSetup {
    /// Elements per vector.
    pub n: u32,
    /// The program handle.
    pub program: u32,
    /// Input `a`.
    pub a: SharedBuf,
    /// Input `b`.
    pub b: SharedBuf,
    /// Output.
    pub out: SharedBuf,
    /// BO of `a` (READ).
    pub bo_a: u32,
    /// BO of `b` (READ).
    pub bo_b: u32,
    /// BO of `out` (WRITE).
    pub bo_out: u32,
}

impl AddSetup {
    /// Creates the program and imports the three buffers; `a[i] = i + 1`, `b[i] = 10 * (i + 1)`.
    pub fn new(dev: &(impl Device + ?Sized), n: u32) -> Self {
        let program = dev
            .program_create(&encode(&add_program(n)))
            .expect("PROGRAM_CREATE(ADD)");
        let av: Vec<f32> = (0..n).map(|i| (i + 1) as f32).collect();
        let bv: Vec<f32> = (0..n).map(|i| 10.0 * (i + 1) as f32).collect();
        let a = SharedBuf::with_f32(&av);
        let b = SharedBuf::with_f32(&bv);
        let out = SharedBuf::new(n as usize * 4);
        let bo_a = a.import(dev, uapi::abi::BO_ACCESS_READ);
        let bo_b = b.import(dev, uapi::abi::BO_ACCESS_READ);
        let bo_out = out.import(dev, uapi::abi::BO_ACCESS_WRITE);
        Self {
            n,
            program,
            a,
            b,
            out,
            bo_a,
            bo_b,
            bo_out,
        }
    }

    /// Bytes per vector.
    pub fn bytes(&self) -> u64 {
        u64::from(self.n) * 4
    }

    /// The job: `out = a + b`.
    pub fn job(&self) -> Job {
        let len = self.bytes();
        job(
            self.program,
            &[
                binding(self.bo_a, 0, len),
                binding(self.bo_b, 0, len),
                binding(self.bo_out, 0, len),
            ],
        )
    }

    /// `a + b` as currently in the input buffers.
    pub fn expected(&self) -> Vec<f32> {
        let n = self.n as usize;
        let a = self.a.read_f32(0, n);
        let b = self.b.read_f32(0, n);
        a.iter().zip(&b).map(|(x, y)| x + y).collect()
    }

    /// The output buffer's contents.
    pub fn output(&self) -> Vec<f32> {
        self.out.read_f32(0, self.n as usize)
    }
}

/// All access bits.
pub const RW: u32 = BO_ACCESS_MASK;

// ---------------------------------------------------------------------------------------------
// Live-object counters

/// The device's debug counters of live objects (all files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveCounts {
    /// `PARAM_LIVE_FILES`.
    pub files: u64,
    /// `PARAM_LIVE_BOS`.
    pub bos: u64,
    /// `PARAM_LIVE_PROGRAMS`.
    pub programs: u64,
    /// `PARAM_LIVE_QUEUES`.
    pub queues: u64,
}

impl LiveCounts {
    /// Reads the counters through `dev`.
    pub fn read(dev: &(impl Device + ?Sized)) -> io::Result<Self> {
        Ok(Self {
            files: dev.get_param(PARAM_LIVE_FILES)?,
            bos: dev.get_param(PARAM_LIVE_BOS)?,
            programs: dev.get_param(PARAM_LIVE_PROGRAMS)?,
            queues: dev.get_param(PARAM_LIVE_QUEUES)?,
        })
    }
}

/// Waits (≤ `limit`) until the counters read through `dev` equal `want`.
pub fn wait_for_counts(dev: &(impl Device + ?Sized), want: LiveCounts, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let now = LiveCounts::read(dev).expect("read live counters");
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "live-object counters did not return to {want:?} within {limit:?}: still {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A deadline `d` from now (absolute CLOCK_MONOTONIC ns).
pub fn deadline(d: Duration) -> u64 {
    sys::deadline_after(d)
}

/// A generous deadline for jobs that must complete.
pub fn long_deadline() -> u64 {
    deadline(Duration::from_secs(10))
}

/// What the bench binaries (`benches/`) share: how many runs, and how to report them.
pub mod bench {
    use std::time::Duration;

    /// Runs per case: `$NNACCEL_BENCH_ITERS` when it is a positive number, else `default`.
    pub fn iterations(default: usize) -> usize {
        std::env::var("NNACCEL_BENCH_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(default)
    }

    /// The median of `v` (the upper one of an even count); zero for none.
    pub fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }

    /// `d` in milliseconds, two decimals.
    pub fn ms(d: Duration) -> String {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}
