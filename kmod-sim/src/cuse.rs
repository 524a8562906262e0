//! The CUSE frontend: a real character device node (its own major/minor, visible to udev)
//! served through `/dev/cuse` by the same dispatch function as the FUSE frontend.
//!
//! The protocol is the FUSE wire protocol (`include/uapi/linux/fuse.h`) with a CUSE_INIT
//! handshake that names the device (`DEVNAME=<name>`); the kernel then creates `/dev/<name>`.
//! Ioctls stay *restricted* (no `CUSE_UNRESTRICTED_IOCTL`): the kernel copies exactly
//! `_IOC_SIZE(cmd)` bytes in (for `_IOW`) and out (for `_IOR`), as with FUSE, which is all
//! the contract needs (arrays travel by user pointer).
//!
//! `/dev/cuse` does not support `FUSE_DEV_IOC_CLONE`, so the worker threads share one channel
//! fd (the kernel allows concurrent reads; each request goes to one reader). Every reply is
//! one `write(2)` of the whole message, so replies from other threads (a WAIT answered later by
//! the engine) never interleave. Closing the channel fd removes the node.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::device::SimDevice;
use crate::frontend::{Frontend, KernelIoctl};
use crate::reply::Reply;

/// The CUSE control device.
pub(crate) const CUSE_DEVICE: &str = "/dev/cuse";

const FUSE_KERNEL_VERSION: u32 = 7;
/// The highest protocol minor this server speaks (the reply carries min(kernel's, this)).
const FUSE_KERNEL_MINOR_MAX: u32 = 31;
/// CUSE needs at least 7.11 (the kernel refuses older replies).
const FUSE_KERNEL_MINOR_MIN: u32 = 11;

const FUSE_OPEN: u32 = 14;
const FUSE_READ: u32 = 15;
const FUSE_WRITE: u32 = 16;
const FUSE_RELEASE: u32 = 18;
const FUSE_FLUSH: u32 = 25;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_DESTROY: u32 = 38;
const FUSE_IOCTL: u32 = 39;
const FUSE_POLL: u32 = 40;
const CUSE_INIT: u32 = 4096;

const FOPEN_DIRECT_IO: u32 = 1 << 0;
const FOPEN_NONSEEKABLE: u32 = 1 << 2;

/// Largest READ/WRITE payload announced (reads and writes are refused anyway; ioctl
/// arguments are at most 16 KiB).
const MAX_IO: u32 = 64 * 1024;
/// Read buffer: the kernel wants room for a header, a `fuse_write_in` and `max_write` bytes.
const READ_BUF: usize = MAX_IO as usize + 4096;

/// `struct fuse_in_header`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct InHeader {
    len: u32,
    opcode: u32,
    unique: u64,
    nodeid: u64,
    uid: u32,
    gid: u32,
    pid: u32,
    total_extlen: u16,
    padding: u16,
}

/// `struct fuse_out_header`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct OutHeader {
    len: u32,
    error: i32,
    unique: u64,
}

/// `struct cuse_init_in`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct CuseInitIn {
    major: u32,
    minor: u32,
    unused: u32,
    flags: u32,
}

/// `struct cuse_init_out`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct CuseInitOut {
    major: u32,
    minor: u32,
    unused: u32,
    flags: u32,
    max_read: u32,
    max_write: u32,
    dev_major: u32,
    dev_minor: u32,
    spare: [u32; 10],
}

/// `struct fuse_open_out`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct OpenOut {
    fh: u64,
    open_flags: u32,
    backing_id: i32,
}

/// `struct fuse_release_in`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct ReleaseIn {
    fh: u64,
    flags: u32,
    release_flags: u32,
    lock_owner: u64,
}

/// `struct fuse_ioctl_in`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct IoctlIn {
    fh: u64,
    flags: u32,
    cmd: u32,
    arg: u64,
    in_size: u32,
    out_size: u32,
}

/// `struct fuse_ioctl_out`.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
struct IoctlOut {
    result: i32,
    flags: u32,
    in_iovs: u32,
    out_iovs: u32,
}

const _: () = {
    assert!(size_of::<InHeader>() == 40);
    assert!(size_of::<OutHeader>() == 16);
    assert!(size_of::<CuseInitIn>() == 16);
    assert!(size_of::<CuseInitOut>() == 72);
    assert!(size_of::<OpenOut>() == 16);
    assert!(size_of::<ReleaseIn>() == 24);
    assert!(size_of::<IoctlIn>() == 32);
    assert!(size_of::<IoctlOut>() == 16);
};

/// One whole reply message: `fuse_out_header` (len, `-errno` or 0, unique) and the payload.
fn message(unique: u64, error: i32, parts: &[&[u8]]) -> Vec<u8> {
    let len = size_of::<OutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
    let header = OutHeader {
        len: u32::try_from(len).unwrap_or(u32::MAX),
        error,
        unique,
    };
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(header.as_bytes());
    for p in parts {
        msg.extend_from_slice(p);
    }
    msg
}

/// Splits a request read from the channel into its header and the bytes after it.
fn parse_request(buf: &[u8]) -> Option<(InHeader, &[u8])> {
    let (header, _) = InHeader::read_from_prefix(buf).ok()?;
    let len = usize::try_from(header.len).ok()?;
    if len < size_of::<InHeader>() || len > buf.len() {
        return None;
    }
    Some((header, &buf[size_of::<InHeader>()..len]))
}

/// The CUSE_INIT reply: protocol version, limits, a dynamic major/minor and `DEVNAME=name`.
fn init_reply(unique: u64, init: &CuseInitIn, name: &str) -> Vec<u8> {
    let out = CuseInitOut {
        major: FUSE_KERNEL_VERSION,
        minor: init.minor.min(FUSE_KERNEL_MINOR_MAX),
        // Not CUSE_UNRESTRICTED_IOCTL: restricted ioctls carry exactly _IOC_SIZE bytes.
        flags: 0,
        max_read: MAX_IO,
        max_write: MAX_IO,
        ..CuseInitOut::default()
    };
    let mut info = format!("DEVNAME={name}").into_bytes();
    info.push(0);
    message(unique, 0, &[out.as_bytes(), &info])
}

/// The device name CUSE gets for `path`: `/dev/<name>` gives `<name>` (the kernel creates the
/// node as `/dev/<DEVNAME>`). `None` for any other path.
pub(crate) fn devname_for(path: &Path) -> Option<String> {
    let rest = path.strip_prefix("/dev").ok()?;
    let name = rest.to_str()?;
    let ok = !name.is_empty()
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && !name.contains(['\0', '='])
        && name.len() < 256;
    ok.then(|| name.to_string())
}

/// Whether CUSE can serve `path`: `/dev/cuse` exists and `path` is `/dev/<name>` (one
/// component, the node CUSE creates).
pub fn can_serve(path: &Path) -> bool {
    Path::new(CUSE_DEVICE).exists()
        && path.parent() == Some(Path::new("/dev"))
        && devname_for(path).is_some()
}

fn errno_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// The channel: the `/dev/cuse` fd every reply is written to.
#[derive(Debug)]
struct Channel {
    fd: OwnedFd,
}

impl Channel {
    /// Writes one whole reply. ENOENT means the request is gone (interrupted, or its caller
    /// died): nothing to do.
    fn send(&self, msg: &[u8]) {
        loop {
            match rustix::io::write(&self.fd, msg) {
                Ok(n) if n == msg.len() => return,
                Ok(n) => {
                    tracing::error!("cuse: short reply write ({n} of {} bytes)", msg.len());
                    return;
                }
                Err(Errno::INTR) => continue,
                Err(Errno::NOENT) => return,
                Err(e) => {
                    tracing::debug!("cuse: writing a reply failed: {e}");
                    return;
                }
            }
        }
    }

    fn reply_err(&self, unique: u64, e: Errno) {
        self.send(&message(unique, -e.raw_os_error(), &[]));
    }

    fn reply_ok(&self, unique: u64, payload: &[u8]) {
        self.send(&message(unique, 0, &[payload]));
    }
}

/// The answer to one FUSE_IOCTL (already cut to the kernel's `out_size`), sent from whichever
/// thread completes it. If it is dropped without being sent, the caller gets EIO rather than
/// waiting forever.
struct CuseReply {
    channel: Weak<Channel>,
    unique: u64,
    sent: bool,
}

impl CuseReply {
    fn finish(&mut self, result: Result<Vec<u8>, Errno>) {
        self.sent = true;
        // The server is gone: the kernel already failed the request.
        let Some(channel) = self.channel.upgrade() else {
            return;
        };
        match result {
            Ok(bytes) => {
                let out = IoctlOut::default();
                channel.send(&message(self.unique, 0, &[out.as_bytes(), &bytes]));
            }
            Err(e) => channel.reply_err(self.unique, e),
        }
    }
}

impl Reply for CuseReply {
    fn send(mut self: Box<Self>, result: Result<Vec<u8>, Errno>) {
        self.finish(result);
    }
}

impl Drop for CuseReply {
    fn drop(&mut self) {
        if !self.sent {
            self.finish(Err(Errno::IO));
        }
    }
}

/// Stops a running [`CuseServer`] from another thread (signal handling).
#[derive(Debug, Clone)]
pub struct Stopper(Arc<OwnedFd>);

impl Stopper {
    /// Asks every worker to stop; `run()` then returns and the node goes away.
    pub fn stop(&self) {
        // The counter stays non-zero: every worker's poll sees it.
        let _ = rustix::io::write(&*self.0, &1u64.to_ne_bytes());
    }
}

/// A character device registered through CUSE; `run()` serves it until stopped.
#[derive(Debug)]
pub struct CuseServer {
    dev: Arc<SimDevice>,
    channel: Arc<Channel>,
    stop: Arc<OwnedFd>,
    node: PathBuf,
    /// The node was made here (no devtmpfs): removed when the server ends.
    made_node: bool,
    threads: usize,
}

impl CuseServer {
    /// Registers the device as `path` (which must be `/dev/<name>` and not exist yet) and
    /// waits until its node is there. Served by `threads` worker threads.
    pub fn start(dev: Arc<SimDevice>, path: &Path, threads: usize) -> io::Result<Self> {
        let name = devname_for(path).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a CUSE device must be /dev/<name>", path.display()),
            )
        })?;
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists already (another instance, or another device)",
                    path.display()
                ),
            ));
        }
        let fd = rustix::fs::open(
            CUSE_DEVICE,
            OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| io::Error::other(format!("cannot open {CUSE_DEVICE}: {e}")))?;
        let channel = Arc::new(Channel { fd });
        let stop = Arc::new(rustix::event::eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?);
        handshake(&channel, &name)?;
        let made_node = wait_for_node(&channel, path, &name)?;
        Ok(Self {
            dev,
            channel,
            stop,
            node: path.to_path_buf(),
            made_node,
            threads: threads.max(1),
        })
    }

    /// The device node.
    pub fn path(&self) -> &Path {
        &self.node
    }

    /// A handle that stops the server from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.stop.clone())
    }

    /// Serves requests until stopped (or until the kernel ends the connection), then closes
    /// the channel, which removes the node.
    pub fn run(self) -> io::Result<()> {
        let mut workers = Vec::with_capacity(self.threads);
        for i in 0..self.threads {
            let dev = self.dev.clone();
            let channel = self.channel.clone();
            let stop = self.stop.clone();
            let handle = std::thread::Builder::new()
                .name(format!("cuse-{i}"))
                .spawn(move || worker(&dev, &channel, &stop))?;
            workers.push(handle);
        }
        let mut result = Ok(());
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(io::Error::other("a CUSE worker panicked")),
            }
        }
        if self.made_node {
            let _ = std::fs::remove_file(&self.node);
        }
        // Dropping the last reference to the channel closes /dev/cuse: the kernel aborts the
        // connection (open files get ENOTCONN) and removes the node. Replies still parked hold
        // only weak references.
        drop(self.channel);
        result
    }
}

impl Frontend for CuseServer {
    const NAME: &'static str = "cuse";

    fn stopper(&mut self) -> Box<dyn FnOnce() -> io::Result<()> + Send> {
        let stopper = CuseServer::stopper(self);
        Box::new(move || {
            stopper.stop();
            Ok(())
        })
    }

    fn run(self) -> io::Result<()> {
        CuseServer::run(self)
    }
}

/// Reads CUSE_INIT and answers it with the device name.
fn handshake(channel: &Channel, name: &str) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    let deadline = Instant::now() + Duration::from_secs(10);
    let n = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no CUSE_INIT from the kernel",
            ));
        }
        let mut fds = [PollFd::new(&channel.fd, PollFlags::IN)];
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(errno_io(e)),
        }
        match rustix::io::read(&channel.fd, &mut buf) {
            Ok(n) => break n,
            Err(Errno::AGAIN | Errno::INTR) => continue,
            Err(e) => return Err(errno_io(e)),
        }
    };
    let (header, payload) = parse_request(&buf[..n])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed CUSE request"))?;
    if header.opcode != CUSE_INIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected CUSE_INIT, got opcode {}", header.opcode),
        ));
    }
    let (init, _) = CuseInitIn::read_from_prefix(payload)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "short CUSE_INIT"))?;
    if init.major != FUSE_KERNEL_VERSION || init.minor < FUSE_KERNEL_MINOR_MIN {
        channel.reply_err(header.unique, Errno::PROTO);
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "kernel FUSE protocol {}.{} (need 7.{FUSE_KERNEL_MINOR_MIN}+)",
                init.major, init.minor
            ),
        ));
    }
    tracing::debug!(
        "cuse: kernel protocol {}.{}, flags {:#x}",
        init.major,
        init.minor,
        init.flags
    );
    let msg = init_reply(header.unique, &init, name);
    let written = rustix::io::write(&channel.fd, &msg).map_err(errno_io)?;
    if written != msg.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short CUSE_INIT reply",
        ));
    }
    Ok(())
}

/// Whether `path` is a character device node.
fn is_char_device(path: &Path) -> bool {
    rustix::fs::stat(path).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice
    })
}

/// Whether the kernel ended the connection (it refused the device, e.g. a duplicate name).
fn channel_dead(channel: &Channel) -> bool {
    let mut fds = [PollFd::new(&channel.fd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// Waits for the kernel's node (devtmpfs makes it while the init reply is processed). Without
/// devtmpfs on /dev, makes the node itself from `/sys/class/cuse/<name>/dev`; returns whether
/// it did.
fn wait_for_node(channel: &Channel, path: &Path, name: &str) -> io::Result<bool> {
    let start = Instant::now();
    let sys_dev = Path::new("/sys/class/cuse").join(name).join("dev");
    loop {
        if is_char_device(path) {
            return Ok(false);
        }
        if channel_dead(channel) {
            return Err(io::Error::other(format!(
                "the kernel refused the CUSE device {name:?} (name in use?)"
            )));
        }
        let waited = start.elapsed();
        if waited >= Duration::from_secs(1) {
            if let Ok(s) = std::fs::read_to_string(&sys_dev) {
                if let Some((major, minor)) = s.trim().split_once(':') {
                    if let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) {
                        tracing::info!("no devtmpfs node for {name}: making {}", path.display());
                        rustix::fs::mknodat(
                            rustix::fs::CWD,
                            path,
                            rustix::fs::FileType::CharacterDevice,
                            Mode::RUSR | Mode::WUSR,
                            rustix::fs::makedev(major, minor),
                        )
                        .map_err(errno_io)?;
                        return Ok(true);
                    }
                }
            }
        }
        if waited >= Duration::from_secs(10) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} did not appear", path.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One worker: waits for a request or the stop signal, reads, dispatches.
fn worker(dev: &Arc<SimDevice>, channel: &Arc<Channel>, stop: &OwnedFd) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    let signal_stop = || {
        let _ = rustix::io::write(stop, &1u64.to_ne_bytes());
    };
    loop {
        let mut fds = [
            PollFd::new(&channel.fd, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => {
                signal_stop();
                return Err(errno_io(e));
            }
        }
        if !fds[1].revents().is_empty() {
            return Ok(());
        }
        let n = match rustix::io::read(&channel.fd, &mut buf) {
            Ok(n) => n,
            Err(Errno::AGAIN | Errno::INTR) => continue,
            // The request was aborted between poll and read.
            Err(Errno::NOENT) => continue,
            Err(Errno::NODEV) => {
                tracing::info!("cuse: the kernel ended the connection");
                signal_stop();
                return Ok(());
            }
            Err(e) => {
                tracing::error!("cuse: reading a request failed: {e}");
                signal_stop();
                return Err(errno_io(e));
            }
        };
        let Some((header, payload)) = parse_request(&buf[..n]) else {
            tracing::warn!("cuse: dropping a malformed request ({n} bytes)");
            continue;
        };
        if !handle(dev, channel, &header, payload) {
            signal_stop();
            return Ok(());
        }
    }
}

/// Handles one request; returns `false` when the server must stop (FUSE_DESTROY).
fn handle(dev: &Arc<SimDevice>, channel: &Arc<Channel>, h: &InHeader, payload: &[u8]) -> bool {
    let unique = h.unique;
    match h.opcode {
        FUSE_OPEN => {
            let out = OpenOut {
                fh: dev.open(),
                open_flags: FOPEN_DIRECT_IO | FOPEN_NONSEEKABLE,
                backing_id: 0,
            };
            channel.reply_ok(unique, out.as_bytes());
        }
        FUSE_RELEASE => match ReleaseIn::read_from_prefix(payload) {
            Ok((r, _)) => {
                dev.release(r.fh);
                channel.reply_ok(unique, &[]);
            }
            Err(_) => channel.reply_err(unique, Errno::INVAL),
        },
        FUSE_FLUSH => channel.reply_ok(unique, &[]),
        FUSE_IOCTL => ioctl(dev, channel, h, payload),
        // The interrupted request is answered when it completes (WAIT has its own deadline).
        FUSE_INTERRUPT => {}
        // Readiness is not meaningful for this device: the kernel then reports the default
        // mask and stops asking.
        FUSE_POLL => channel.reply_err(unique, Errno::NOSYS),
        FUSE_READ | FUSE_WRITE => channel.reply_err(unique, Errno::INVAL),
        FUSE_DESTROY => {
            channel.reply_ok(unique, &[]);
            return false;
        }
        other => {
            tracing::debug!("cuse: unsupported opcode {other}");
            channel.reply_err(unique, Errno::NOSYS);
        }
    }
    true
}

fn ioctl(dev: &Arc<SimDevice>, channel: &Arc<Channel>, h: &InHeader, payload: &[u8]) {
    let Ok((io, in_data)) = IoctlIn::read_from_prefix(payload) else {
        return channel.reply_err(h.unique, Errno::INVAL);
    };
    let in_len = (io.in_size as usize).min(in_data.len());
    let kio = KernelIoctl {
        file: io.fh,
        tid: h.pid,
        cmd: io.cmd,
        in_data: &in_data[..in_len],
        out_size: io.out_size as usize,
    };
    let reply = CuseReply {
        channel: Arc::downgrade(channel),
        unique: h.unique,
        sent: false,
    };
    dev.kernel_ioctl(&kio, reply);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devname_is_the_path_below_dev() {
        assert_eq!(
            devname_for(Path::new("/dev/nnaccel")).as_deref(),
            Some("nnaccel")
        );
        assert_eq!(
            devname_for(Path::new("/dev/accel/nnaccel0")).as_deref(),
            Some("accel/nnaccel0")
        );
        assert_eq!(devname_for(Path::new("/dev")), None);
        assert_eq!(devname_for(Path::new("/dev/")), None);
        assert_eq!(devname_for(Path::new("/tmp/nnaccel")), None);
        assert_eq!(devname_for(Path::new("/dev/../tmp/x")), None);
        assert_eq!(devname_for(Path::new("/dev/a=b")), None);
        assert_eq!(devname_for(Path::new("nnaccel")), None);
    }

    #[test]
    fn only_dev_children_are_served_by_cuse_in_auto_mode() {
        assert!(!can_serve(Path::new("/tmp/nnaccel")));
        assert!(!can_serve(Path::new("/dev/accel/nnaccel0")));
    }

    #[test]
    fn init_reply_has_the_negotiated_version_and_the_name() {
        let init = CuseInitIn {
            major: 7,
            minor: 41,
            unused: 0,
            flags: 1,
        };
        let msg = init_reply(99, &init, "nnaccel");
        let (h, rest) = OutHeader::read_from_prefix(&msg).unwrap();
        assert_eq!(h.len as usize, msg.len());
        assert_eq!((h.error, h.unique), (0, 99));
        let (out, info) = CuseInitOut::read_from_prefix(rest).unwrap();
        assert_eq!((out.major, out.minor), (7, FUSE_KERNEL_MINOR_MAX));
        assert_eq!(out.flags, 0, "restricted ioctls only");
        assert_eq!((out.dev_major, out.dev_minor), (0, 0));
        assert_eq!(info, b"DEVNAME=nnaccel\0");
        let older = CuseInitIn { minor: 20, ..init };
        let msg = init_reply(1, &older, "x");
        let (out, _) = CuseInitOut::read_from_prefix(&msg[16..]).unwrap();
        assert_eq!(out.minor, 20);
    }

    #[test]
    fn requests_are_split_by_their_length_field() {
        let h = InHeader {
            len: 44,
            opcode: FUSE_IOCTL,
            unique: 5,
            pid: 7,
            ..InHeader::default()
        };
        let mut buf = h.as_bytes().to_vec();
        buf.extend_from_slice(&[1, 2, 3, 4, 9, 9]);
        let (got, payload) = parse_request(&buf).unwrap();
        assert_eq!((got.opcode, got.unique, got.pid), (FUSE_IOCTL, 5, 7));
        assert_eq!(payload, &[1, 2, 3, 4]);
        // A length beyond what was read, or shorter than the header, is malformed.
        let bad = InHeader { len: 400, ..h };
        assert!(parse_request(bad.as_bytes()).is_none());
        let bad = InHeader { len: 8, ..h };
        assert!(parse_request(bad.as_bytes()).is_none());
        assert!(parse_request(&[0u8; 10]).is_none());
    }

    #[test]
    fn error_replies_are_a_bare_header() {
        let msg = message(3, -libc::ENOSYS, &[]);
        let (h, rest) = OutHeader::read_from_prefix(&msg).unwrap();
        assert_eq!((h.len, h.error, h.unique), (16, -libc::ENOSYS, 3));
        assert!(rest.is_empty());
    }
}
