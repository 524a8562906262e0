//! systemd integration without libsystemd: socket activation (`sd_listen_fds`), the notify
//! protocol (`sd_notify`) and the service watchdog, implemented over std and rustix.
//!
//! - [`listen_fds`] / [`listener_from_env`]: the sockets systemd passed (`LISTEN_PID`,
//!   `LISTEN_FDS`, fds from [`SD_LISTEN_FDS_START`]);
//! - [`Notifier`]: datagrams to `$NOTIFY_SOCKET` (`READY=1`, `STATUS=…`, `WATCHDOG=1`,
//!   `STOPPING=1`), a path or an abstract (`@name`) socket;
//! - [`watchdog_interval`] and [`spawn_watchdog`]: `WATCHDOG=1` at half of `WATCHDOG_USEC`.
//!
//! Every function is a no-op outside systemd (no variables set), so the daemon calls them
//! unconditionally. The protocols are described in `sd_listen_fds(3)`, `sd_notify(3)` and
//! `sd_watchdog_enabled(3)`; `docs/service.md` says how the units use them.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::io::{FdFlags, fcntl_getfd, fcntl_setfd};
use rustix::net::{AddressFamily, SocketType, sockopt};

/// The first passed file descriptor (`SD_LISTEN_FDS_START`).
pub(crate) const SD_LISTEN_FDS_START: RawFd = 3;

/// More passed fds than this is a malformed `LISTEN_FDS` (systemd caps a unit's sockets far
/// lower); it keeps a garbage value from making us adopt thousands of descriptors.
const MAX_LISTEN_FDS: usize = 4096;

/// The activation variables, unset once read so children do not inherit them.
const ACTIVATION_VARS: [&str; 3] = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"];

// ---------------------------------------------------------------------------------------------
// Socket activation

/// Sockets passed by socket activation: checks `LISTEN_PID == getpid()`, takes `LISTEN_FDS`
/// fds starting at 3 ([`SD_LISTEN_FDS_START`]), sets `FD_CLOEXEC` on them, and unsets
/// `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES`. Empty when not socket-activated (no
/// `LISTEN_PID`, or one naming another process: the variables were inherited, not meant for
/// us).
///
/// Call it once, early in `main`, before other threads start: it changes the environment
/// (the variables are gone afterwards, so a second call returns an empty list rather than a
/// second owner of the same fds).
///
/// # Errors
/// `InvalidInput` when `LISTEN_PID` or `LISTEN_FDS` is not a number; `EBADF` when a passed fd
/// is not open. The variables are unset in every case.
pub fn listen_fds() -> io::Result<Vec<OwnedFd>> {
    let pid = env_string("LISTEN_PID");
    let fds = env_string("LISTEN_FDS");
    unset_activation_env();
    let n = activation_count(pid?.as_deref(), fds?.as_deref(), std::process::id())?;
    // SAFETY: `activation_count` returned n > 0 only when LISTEN_PID names this process, so
    // systemd (or systemd-socket-activate) passed fds 3..3+n to us, and the variables that
    // told us so are gone: nothing else in the process takes ownership of them.
    unsafe { adopt_fds(SD_LISTEN_FDS_START, n) }
}

/// The one listening Unix stream socket passed by socket activation, as a listener; `None`
/// when not socket-activated.
///
/// # Errors
/// Those of [`listen_fds`]; `InvalidInput` when more than one socket was passed (the unit
/// has one `ListenStream=`), or when it is not a listening `AF_UNIX` `SOCK_STREAM` socket
/// (e.g. `Accept=yes` passed a connection, or the unit listens on TCP).
pub fn listener_from_env() -> io::Result<Option<UnixListener>> {
    let mut fds = listen_fds()?;
    let Some(fd) = fds.pop() else {
        return Ok(None);
    };
    if !fds.is_empty() {
        return Err(invalid(format!(
            "socket activation passed {} sockets, expected one",
            fds.len() + 1
        )));
    }
    check_unix_listener(&fd)?;
    Ok(Some(UnixListener::from(fd)))
}

/// Whether `fd` is a listening `AF_UNIX` stream socket.
fn check_unix_listener(fd: &impl AsFd) -> io::Result<()> {
    let domain = sockopt::socket_domain(fd)?;
    let ty = sockopt::socket_type(fd)?;
    let listening = sockopt::socket_acceptconn(fd)?;
    if domain != AddressFamily::UNIX || ty != SocketType::STREAM || !listening {
        return Err(invalid(format!(
            "the passed socket is not a listening AF_UNIX stream socket (family {}, type {}, \
             listening {listening})",
            domain.as_raw(),
            ty.as_raw()
        )));
    }
    Ok(())
}

/// How many fds were passed to process `me`, from the values of `LISTEN_PID` and
/// `LISTEN_FDS`. Zero when `LISTEN_PID` is unset or names another process.
fn activation_count(pid: Option<&str>, fds: Option<&str>, me: u32) -> io::Result<usize> {
    let Some(pid) = pid else { return Ok(0) };
    let pid: u32 = pid
        .trim()
        .parse()
        .map_err(|_| invalid(format!("LISTEN_PID={pid:?} is not a process id")))?;
    if pid != me {
        return Ok(0);
    }
    let Some(fds) = fds else { return Ok(0) };
    let n: usize = fds
        .trim()
        .parse()
        .map_err(|_| invalid(format!("LISTEN_FDS={fds:?} is not a count")))?;
    if n > MAX_LISTEN_FDS {
        return Err(invalid(format!("LISTEN_FDS={n} is implausibly large")));
    }
    Ok(n)
}

/// Takes ownership of fds `start..start + n`, setting `FD_CLOEXEC` on each.
///
/// # Safety
/// Those fds, where open, must be owned by nobody else in the process (nothing else will
/// close them or wrap them in another owner).
unsafe fn adopt_fds(start: RawFd, n: usize) -> io::Result<Vec<OwnedFd>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let fd = i32::try_from(i)
            .ok()
            .and_then(|i| start.checked_add(i))
            .ok_or_else(|| invalid("LISTEN_FDS overflows the fd range".into()))?;
        // Only adopt what is open: an `OwnedFd` of a closed number would later close
        // whatever else gets that number.
        if let Err(e) = check_open(fd) {
            return Err(io::Error::new(
                e.kind(),
                format!("socket-activation fd {fd} is not open: {e}"),
            ));
        }
        // SAFETY: `fd` is open (checked above) and, by this function's contract, owned by no
        // one else; it needs no cleanup but close().
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let flags = fcntl_getfd(&owned)?;
        fcntl_setfd(&owned, flags | FdFlags::CLOEXEC)?;
        out.push(owned);
    }
    Ok(out)
}

/// Whether `fd` is an open descriptor (`fcntl(F_GETFD)` succeeds).
fn check_open(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl(F_GETFD) takes no pointers and changes nothing; any integer is a valid
    // argument.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn unset_activation_env() {
    for var in ACTIVATION_VARS {
        if std::env::var_os(var).is_some() {
            // SAFETY: std's own environment accesses are serialized by its lock; the
            // remaining hazard is C code calling getenv() on another thread at this moment.
            // `listen_fds` is documented to run early in main, before other threads exist.
            unsafe { std::env::remove_var(var) };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Notify protocol

/// `sd_notify`: state datagrams (`READY=1`, `STATUS=…`, …) to `$NOTIFY_SOCKET`.
///
/// Cheap to clone (the socket is shared), so the watchdog thread can have its own.
#[derive(Debug, Clone)]
pub struct Notifier {
    socket: Arc<UnixDatagram>,
    addr: SocketAddr,
    /// `$NOTIFY_SOCKET` as given, for messages.
    target: String,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`: `None` when it is unset or empty (not started by systemd as
    /// `Type=notify`), or unusable (not a path or `@abstract` name — e.g. systemd ≥ 254's
    /// `vsock:` addresses — or no datagram socket could be created; both are logged).
    ///
    /// The variable is left set.
    pub fn from_env() -> Option<Self> {
        let value = std::env::var_os("NOTIFY_SOCKET")?;
        let Some(value) = value.to_str() else {
            tracing::warn!(?value, "NOTIFY_SOCKET is not UTF-8: notifications disabled");
            return None;
        };
        if value.is_empty() {
            return None;
        }
        match Self::new(value) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(notify_socket = value, error = %e, "notifications disabled");
                None
            }
        }
    }

    /// A notifier for `target`: an absolute path, or `@name` for the abstract socket `name`.
    ///
    /// # Errors
    /// `InvalidInput` for any other form; the error of `socket(2)`.
    pub fn new(target: &str) -> io::Result<Self> {
        let addr = if let Some(name) = target.strip_prefix('@') {
            SocketAddr::from_abstract_name(name.as_bytes())?
        } else if target.starts_with('/') {
            SocketAddr::from_pathname(target)?
        } else {
            return Err(invalid(format!(
                "NOTIFY_SOCKET={target:?}: neither an absolute path nor an @abstract name"
            )));
        };
        Ok(Self {
            socket: Arc::new(UnixDatagram::unbound()?),
            addr,
            target: target.to_string(),
        })
    }

    /// Where the notifications go (`$NOTIFY_SOCKET`).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Sends `state` (newline-separated `KEY=value` assignments) as one datagram.
    ///
    /// # Errors
    /// The send's error (e.g. `ECONNREFUSED` when nothing listens there any more), or
    /// `InvalidInput` for an empty state.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        if state.is_empty() {
            return Err(invalid("empty notification".into()));
        }
        let sent = self.socket.send_to_addr(state.as_bytes(), &self.addr)?;
        if sent != state.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("notification truncated: {sent} of {} bytes", state.len()),
            ));
        }
        Ok(())
    }

    /// `READY=1` with a `STATUS=` line: startup finished, the service serves.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.notify(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    /// `STOPPING=1`: shutdown began.
    pub fn stopping(&self) -> io::Result<()> {
        self.notify("STOPPING=1")
    }

    /// `WATCHDOG=1`: the keep-alive ping.
    pub fn watchdog(&self) -> io::Result<()> {
        self.notify("WATCHDOG=1")
    }

    /// `STATUS=…`: free-form status shown by `systemctl status`.
    pub fn status(&self, status: &str) -> io::Result<()> {
        self.notify(&format!("STATUS={}", one_line(status)))
    }
}

/// `sd_notify(0, state)`: sends `state` to `$NOTIFY_SOCKET`; `Ok(false)` (nothing sent) when
/// it is unset.
pub fn notify(state: &str) -> io::Result<bool> {
    match Notifier::from_env() {
        None => Ok(false),
        Some(n) => n.notify(state).map(|()| true),
    }
}

/// A status is one assignment: a newline inside it would start another.
fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

// ---------------------------------------------------------------------------------------------
// Watchdog

/// The interval at which to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when `WATCHDOG_PID`
/// is unset or names this process; `None` otherwise (no watchdog, or a malformed value).
pub(crate) fn watchdog_interval() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    watchdog_interval_from(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// [`watchdog_interval`] from the variables' values, for process `me`.
fn watchdog_interval_from(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok()? != me
    {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    if usec == 0 {
        return None;
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_micros(1)))
}

/// Stops the watchdog thread when dropped (and waits for it).
#[derive(Debug)]
pub struct WatchdogGuard {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl WatchdogGuard {
    /// Stops the pings now (as dropping does).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        // Dropping the sender wakes the thread at once (Disconnected).
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for WatchdogGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Spawns a thread that sends `WATCHDOG=1` every `interval` until the returned guard drops.
///
/// The pings prove only that the process is scheduled; [`spawn_watchdog_checked`] ties them to
/// the health of the serving loop.
///
/// # Errors
/// The thread could not be spawned; `InvalidInput` for a zero interval.
pub(crate) fn spawn_watchdog(notifier: Notifier, interval: Duration) -> io::Result<WatchdogGuard> {
    spawn_watchdog_checked(notifier, interval, || true)
}

/// Like [`spawn_watchdog`], but each ping is sent only when `healthy()` returns true (e.g. the
/// accept loop made progress within the last interval): a wedged service then misses its
/// pings and systemd restarts it (`Restart=on-failure` with `WatchdogSec=`).
///
/// # Errors
/// As [`spawn_watchdog`].
pub(crate) fn spawn_watchdog_checked(
    notifier: Notifier,
    interval: Duration,
    healthy: impl Fn() -> bool + Send + 'static,
) -> io::Result<WatchdogGuard> {
    if interval.is_zero() {
        return Err(invalid("watchdog interval is zero".into()));
    }
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("sd-watchdog".into())
        .spawn(move || {
            loop {
                match stopped.recv_timeout(interval) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                if !healthy() {
                    tracing::warn!("service unhealthy: watchdog ping withheld");
                    continue;
                }
                if let Err(e) = notifier.watchdog() {
                    tracing::warn!(target = notifier.target(), error = %e, "WATCHDOG=1 failed");
                }
            }
        })?;
    Ok(WatchdogGuard {
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Starts the watchdog when systemd asked for one: [`watchdog_interval`] and a notifier
/// present. `Ok(None)` otherwise.
///
/// # Errors
/// As [`spawn_watchdog`].
pub fn watchdog_from_env(notifier: Option<&Notifier>) -> io::Result<Option<WatchdogGuard>> {
    match (notifier, watchdog_interval()) {
        (Some(n), Some(interval)) => spawn_watchdog(n.clone(), interval).map(Some),
        _ => Ok(None),
    }
}

// ---------------------------------------------------------------------------------------------

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// An environment variable as a string: `Ok(None)` when unset, `InvalidInput` when it is not
/// UTF-8.
fn env_string(name: &str) -> io::Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(invalid(format!("{name}={v:?} is not UTF-8")))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;
    use std::time::Instant;

    /// The environment is process-global: every test that reads or writes the variables this
    /// module uses holds this lock.
    static ENV_LOCK: Mutex<()> = Mutex::new(());

    fn env_lock() -> std::sync::MutexGuard<'static, ()> {
        ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(var: &str, value: &str) {
        // SAFETY: callers hold ENV_LOCK; nothing in this test binary calls getenv() from C
        // concurrently with these tests.
        unsafe { std::env::set_var(var, value) };
    }

    fn unset(var: &str) {
        // SAFETY: as in `set`.
        unsafe { std::env::remove_var(var) };
    }

    fn recv_string(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).expect("recv notification");
        String::from_utf8(buf[..n].to_vec()).expect("utf-8 notification")
    }

    /// A fresh directory under the temp dir, removed on drop (the driver crate has no
    /// `tempfile` dependency).
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new() -> Self {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("nnaccel-systemd-test-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn receiver() -> (TempDir, std::path::PathBuf, UnixDatagram) {
        let dir = TempDir::new();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (dir, path, sock)
    }

    #[test]
    fn notify_to_path_socket() {
        let (_dir, path, sock) = receiver();
        let n = Notifier::new(path.to_str().unwrap()).unwrap();
        n.ready("serving on /run/nnaccel/hal.sock").unwrap();
        assert_eq!(
            recv_string(&sock),
            "READY=1\nSTATUS=serving on /run/nnaccel/hal.sock"
        );
        n.status("two\nlines").unwrap();
        assert_eq!(recv_string(&sock), "STATUS=two lines");
        n.watchdog().unwrap();
        assert_eq!(recv_string(&sock), "WATCHDOG=1");
        n.stopping().unwrap();
        assert_eq!(recv_string(&sock), "STOPPING=1");
        n.notify("RELOADING=1\nMONOTONIC_USEC=1").unwrap();
        assert_eq!(recv_string(&sock), "RELOADING=1\nMONOTONIC_USEC=1");
        assert!(n.notify("").is_err());
    }

    #[test]
    fn notify_to_abstract_socket() {
        let name = format!(
            "nnaccel-test-notify-{}-{:?}",
            std::process::id(),
            Instant::now()
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = Notifier::new(&format!("@{name}")).unwrap();
        n.ready("abstract").unwrap();
        assert_eq!(recv_string(&sock), "READY=1\nSTATUS=abstract");
    }

    #[test]
    fn notify_errors() {
        assert_eq!(
            Notifier::new("relative/path").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(Notifier::new("vsock:2:1234").is_err());
        // Nothing bound there: the send fails, it does not hang or panic.
        let dir = TempDir::new();
        let n = Notifier::new(dir.path().join("none").to_str().unwrap()).unwrap();
        assert!(n.ready("x").is_err());
    }

    #[test]
    fn notifier_from_env() {
        let _g = env_lock();
        unset("NOTIFY_SOCKET");
        assert!(Notifier::from_env().is_none());
        assert!(!notify("READY=1").unwrap());
        set("NOTIFY_SOCKET", "");
        assert!(Notifier::from_env().is_none());
        set("NOTIFY_SOCKET", "not-absolute");
        assert!(Notifier::from_env().is_none());

        let (_dir, path, sock) = receiver();
        set("NOTIFY_SOCKET", path.to_str().unwrap());
        let n = Notifier::from_env().expect("notifier");
        assert_eq!(n.target(), path.to_str().unwrap());
        n.clone().stopping().unwrap();
        assert_eq!(recv_string(&sock), "STOPPING=1");
        assert!(notify("STATUS=free").unwrap());
        assert_eq!(recv_string(&sock), "STATUS=free");
        unset("NOTIFY_SOCKET");
    }

    #[test]
    fn watchdog_interval_parsing() {
        let me = 4242;
        let f = watchdog_interval_from;
        assert_eq!(f(None, None, me), None);
        assert_eq!(f(Some("30000000"), None, me), Some(Duration::from_secs(15)));
        assert_eq!(
            f(Some("200000"), Some("4242"), me),
            Some(Duration::from_millis(100))
        );
        assert_eq!(f(Some("200000"), Some("1"), me), None, "another process's");
        assert_eq!(f(Some("200000"), Some("x"), me), None);
        assert_eq!(f(Some("0"), None, me), None);
        assert_eq!(f(Some("-5"), None, me), None);
        assert_eq!(f(Some("soon"), None, me), None);
        assert_eq!(f(Some("1"), None, me), Some(Duration::from_micros(1)));
        assert_eq!(f(None, Some("4242"), me), None);
    }

    #[test]
    fn watchdog_interval_from_env() {
        let _g = env_lock();
        unset("WATCHDOG_USEC");
        unset("WATCHDOG_PID");
        assert_eq!(watchdog_interval(), None);
        set("WATCHDOG_USEC", "3000000");
        assert_eq!(watchdog_interval(), Some(Duration::from_millis(1500)));
        set("WATCHDOG_PID", &std::process::id().to_string());
        assert_eq!(watchdog_interval(), Some(Duration::from_millis(1500)));
        set("WATCHDOG_PID", "1");
        assert_eq!(watchdog_interval(), None);
        unset("WATCHDOG_USEC");
        unset("WATCHDOG_PID");
    }

    #[test]
    fn watchdog_pings_until_dropped() {
        let (_dir, path, sock) = receiver();
        let n = Notifier::new(path.to_str().unwrap()).unwrap();
        let guard = spawn_watchdog(n, Duration::from_millis(20)).unwrap();
        for _ in 0..3 {
            assert_eq!(recv_string(&sock), "WATCHDOG=1");
        }
        let t = Instant::now();
        drop(guard);
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "drop waits at most one tick"
        );
        // Drain what was in flight, then nothing more arrives.
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        while sock.recv(&mut buf).is_ok() {}
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            sock.recv(&mut buf).is_err(),
            "a ping after the guard dropped"
        );
        assert!(spawn_watchdog(Notifier::new("/x").unwrap(), Duration::ZERO).is_err());
    }

    #[test]
    fn watchdog_checked_withholds_pings() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (_dir, path, sock) = receiver();
        let n = Notifier::new(path.to_str().unwrap()).unwrap();
        let ok = Arc::new(AtomicBool::new(false));
        let ok2 = ok.clone();
        let guard = spawn_watchdog_checked(n, Duration::from_millis(10), move || {
            ok2.load(Ordering::SeqCst)
        })
        .unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(sock.recv(&mut buf).is_err(), "pinged while unhealthy");
        ok.store(true, Ordering::SeqCst);
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(recv_string(&sock), "WATCHDOG=1");
        guard.stop();
    }

    #[test]
    fn activation_count_parsing() {
        let me = 77;
        let f = activation_count;
        assert_eq!(f(None, None, me).unwrap(), 0);
        assert_eq!(f(None, Some("2"), me).unwrap(), 0, "no LISTEN_PID");
        assert_eq!(
            f(Some("78"), Some("2"), me).unwrap(),
            0,
            "another process's"
        );
        assert_eq!(f(Some("77"), Some("2"), me).unwrap(), 2);
        assert_eq!(f(Some("77"), None, me).unwrap(), 0);
        assert_eq!(f(Some("77"), Some("0"), me).unwrap(), 0);
        assert!(f(Some("seventy"), Some("1"), me).is_err());
        assert!(f(Some("77"), Some("-1"), me).is_err());
        assert!(f(Some("77"), Some("99999999"), me).is_err());
    }

    /// Puts a listening socket and a datagram socket at two free, consecutive fd numbers;
    /// returns the first number and the listener's path.
    fn sockets_at_free_fds(dir: &std::path::Path) -> (RawFd, std::path::PathBuf) {
        let path = dir.join("listen.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (dgram, _) = UnixDatagram::pair().unwrap();
        // A free pair of numbers well above what the test harness uses.
        let base = (600..4000)
            .step_by(2)
            .find(|&fd| check_open(fd).is_err() && check_open(fd + 1).is_err())
            .expect("two free fds");
        for (src, dst) in [(listener.as_raw_fd(), base), (dgram.as_raw_fd(), base + 1)] {
            // SAFETY: dup2 onto a number that is free (checked above); the new fd is owned by
            // the code under test from here on (it adopts and closes it).
            let r = unsafe { libc::dup2(src, dst) };
            assert_eq!(r, dst, "dup2: {}", io::Error::last_os_error());
        }
        (base, path)
    }

    #[test]
    fn adopt_fds_sets_cloexec_and_owns() {
        let dir = TempDir::new();
        let (base, path) = sockets_at_free_fds(dir.path());
        // SAFETY: the two fds were made by `sockets_at_free_fds` for this call alone.
        let fds = unsafe { adopt_fds(base, 2) }.unwrap();
        assert_eq!(fds.len(), 2);
        assert_eq!(fds[0].as_raw_fd(), base);
        assert_eq!(fds[1].as_raw_fd(), base + 1);
        for fd in &fds {
            assert!(fcntl_getfd(fd).unwrap().contains(FdFlags::CLOEXEC));
        }
        check_unix_listener(&fds[0]).unwrap();
        assert!(check_unix_listener(&fds[1]).is_err(), "a datagram socket");
        let mut fds = fds.into_iter();
        let listener = UnixListener::from(fds.next().unwrap());
        let _client = UnixStream::connect(&path).unwrap();
        let (_conn, _) = listener.accept().unwrap();
        drop(fds);
        assert!(check_open(base + 1).is_err(), "dropped = closed");
    }

    #[test]
    fn adopt_fds_rejects_closed() {
        let free = (3000..9000).find(|&fd| check_open(fd).is_err()).unwrap();
        // SAFETY: the number is not open, so nothing owns it.
        let err = unsafe { adopt_fds(free, 1) }.unwrap_err();
        assert_eq!(err.raw_os_error(), None);
        assert!(err.to_string().contains("not open"), "{err}");
    }

    /// Set in the child of [`listen_fds_takes_fd_3`].
    const CHILD_ENV: &str = "NNACCEL_SD_LISTEN_CHILD";

    /// The child half of [`listen_fds_takes_fd_3`]; passes trivially when run by itself.
    #[test]
    fn listen_fds_child() {
        use std::io::Write;
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        let _g = env_lock();
        // What systemd sets after fork, before exec (we cannot know our pid before).
        set("LISTEN_PID", &std::process::id().to_string());
        set("LISTEN_FDS", "1");
        set("LISTEN_FDNAMES", "hal");
        let listener = listener_from_env().unwrap().expect("socket-activated");
        assert_eq!(listener.as_raw_fd(), SD_LISTEN_FDS_START);
        assert!(fcntl_getfd(&listener).unwrap().contains(FdFlags::CLOEXEC));
        for var in ACTIVATION_VARS {
            assert!(std::env::var_os(var).is_none(), "{var} still set");
        }
        assert!(listen_fds().unwrap().is_empty(), "taken twice");
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(b"activated").unwrap();
    }

    /// The whole protocol in a child process: a listening socket at fd 3, `LISTEN_PID` and
    /// `LISTEN_FDS` set → the child adopts it and serves a connection.
    #[test]
    fn listen_fds_takes_fd_3() {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};

        let dir = TempDir::new();
        let path = dir.path().join("hal.sock");
        let listener = UnixListener::bind(&path).unwrap();
        // Well above 3 so that dup2 in the child always makes a new, inheritable fd 3.
        let high = rustix::io::fcntl_dupfd_cloexec(&listener, 10).unwrap();
        let raw = high.as_raw_fd();
        drop(listener);
        // `module_path!()` is `<crate>::…::tests`; libtest names tests without the crate.
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            &format!("{module}::listen_fds_child"),
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_FDNAMES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let hook = move || {
            // SAFETY: dup2 takes no pointers; `raw` is open in the parent until the child has
            // been spawned, so it is open in the child at this point.
            if unsafe { libc::dup2(raw, SD_LISTEN_FDS_START) } < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        };
        // SAFETY: the hook only calls dup2, which is async-signal-safe, and allocates nothing.
        unsafe { cmd.pre_exec(hook) };
        let child = cmd.spawn().unwrap();
        drop(high);
        let mut conn = UnixStream::connect(&path).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut got = String::new();
        let read = conn.read_to_string(&mut got);
        let out = child.wait_with_output().unwrap();
        let log = format!(
            "child stdout:\n{}\nchild stderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "child failed ({}):\n{log}",
            out.status
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the child test did not run:\n{log}"
        );
        read.unwrap();
        assert_eq!(got, "activated");
    }

    #[test]
    fn listen_fds_env_handling() {
        let _g = env_lock();
        let me = std::process::id().to_string();
        for var in ACTIVATION_VARS {
            unset(var);
        }
        assert!(listen_fds().unwrap().is_empty(), "not activated");
        assert!(listener_from_env().unwrap().is_none());

        // Inherited from a parent: left alone (no fds taken), but unset.
        set("LISTEN_PID", "1");
        set("LISTEN_FDS", "3");
        set("LISTEN_FDNAMES", "a:b:c");
        assert!(listen_fds().unwrap().is_empty());
        for var in ACTIVATION_VARS {
            assert!(std::env::var_os(var).is_none(), "{var} still set");
        }

        // Ours, zero fds.
        set("LISTEN_PID", &me);
        set("LISTEN_FDS", "0");
        assert!(listen_fds().unwrap().is_empty());
        assert!(std::env::var_os("LISTEN_PID").is_none());

        // Malformed: an error, and still unset.
        set("LISTEN_PID", "garbage");
        set("LISTEN_FDS", "1");
        assert_eq!(
            listen_fds().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(std::env::var_os("LISTEN_FDS").is_none());
        set("LISTEN_PID", &me);
        set("LISTEN_FDS", "lots");
        assert!(listen_fds().is_err());
        assert!(std::env::var_os("LISTEN_PID").is_none());
    }
}
