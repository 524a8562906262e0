//! The FUSE frontend: the device as a single regular file on a FUSE mount, so it works on any
//! Linux with FUSE. Restricted FUSE ioctls carry exactly `_IOC_SIZE(cmd)` bytes each way, which
//! is all the contract needs (arrays travel by user pointer). Mounted with `allow_other` so
//! non-root clients can open it; `--path /dev/nnaccel` works as root.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, IoctlFlags, LockOwner,
    MountOption, OpenFlags, ReplyAttr, ReplyEmpty, ReplyIoctl, ReplyOpen, Request, Session,
    SessionACL,
};

use crate::device::SimDevice;
use crate::frontend::{Frontend, KernelIoctl};
use crate::reply::Reply;

/// `FUSE_SUPER_MAGIC`: the statfs type of a FUSE mount.
pub const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

struct FuseDevice {
    dev: Arc<SimDevice>,
    uid: u32,
    gid: u32,
}

impl FuseDevice {
    fn attr(&self) -> FileAttr {
        let now = SystemTime::now();
        FileAttr {
            ino: INodeNo::ROOT,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: FileType::RegularFile,
            perm: 0o666,
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

/// The answer to one FUSE ioctl (already cut to the kernel's `out_size`).
struct FuseReply(ReplyIoctl);

impl Reply for FuseReply {
    fn send(self: Box<Self>, result: Result<Vec<u8>, rustix::io::Errno>) {
        match result {
            Ok(bytes) => self.0.ioctl(0, &bytes),
            Err(e) => self.0.error(fuser::Errno::from_i32(e.raw_os_error())),
        }
    }
}

impl Filesystem for FuseDevice {
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT {
            reply.attr(&Duration::from_secs(1), &self.attr());
        } else {
            reply.error(fuser::Errno::ENOENT);
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &std::ffi::OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // A device node has no extended attributes (LSMs ask for security.*).
        reply.error(fuser::Errno::from_i32(libc::ENODATA));
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let id = self.dev.open();
        reply.opened(
            FileHandle(id),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NONSEEKABLE,
        );
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.dev.release(fh.0);
        reply.ok();
    }

    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let io = KernelIoctl {
            file: fh.0,
            tid: req.pid(),
            cmd,
            in_data,
            out_size: out_size as usize,
        };
        self.dev.kernel_ioctl(&io, FuseReply(reply));
    }
}

/// Whether `path` is a FUSE mount point whose server died (calls fail with ENOTCONN).
fn is_stale_mount(path: &Path) -> bool {
    matches!(std::fs::metadata(path), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// Whether `path` is currently a live FUSE mount.
pub(crate) fn is_fuse_mount(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type == FUSE_SUPER_MAGIC)
}

/// Prepares `path` as a mount point: clears a stale mount a killed instance left, refuses a
/// live one, creates an empty file if nothing is there.
pub(crate) fn prepare_mount_point(path: &Path) -> io::Result<()> {
    if is_stale_mount(path) {
        tracing::warn!(
            "{}: clearing a stale mount left by a killed instance",
            path.display()
        );
        rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH)?;
    }
    if is_fuse_mount(path) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{} is already served by a running instance", path.display()),
        ));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a regular file (a real device node?)",
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(path)?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A mounted FUSE device; `run()` serves until unmounted.
pub struct FuseServer {
    session: Session<FuseDevice>,
    path: PathBuf,
}

impl std::fmt::Debug for FuseServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FuseServer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Unmounts a [`FuseServer`] from another thread (signal handling).
pub struct Unmounter(fuser::SessionUnmounter);

impl std::fmt::Debug for Unmounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unmounter")
    }
}

impl Unmounter {
    /// Unmounts; `run()` then returns.
    pub fn unmount(&mut self) -> io::Result<()> {
        self.0.unmount()
    }
}

impl FuseServer {
    /// Mounts the device at `path` (a regular file, created if missing), served by `threads`
    /// FUSE worker threads.
    pub fn mount(dev: Arc<SimDevice>, path: &Path, threads: usize) -> io::Result<Self> {
        prepare_mount_point(path)?;
        let fs = FuseDevice {
            dev,
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("nnaccel".into()),
            MountOption::Subtype("nnaccel-sim".into()),
        ];
        config.acl = if rustix::process::geteuid().is_root() {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        config.n_threads = Some(threads.max(1));
        config.clone_fd = true;
        let session = Session::new(fs, path, &config)?;
        Ok(Self {
            session,
            path: path.to_path_buf(),
        })
    }

    /// A handle that unmounts from another thread.
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter(self.session.unmount_callable())
    }

    /// Serves requests until the file system is unmounted.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Frontend for FuseServer {
    const NAME: &'static str = "fuse";

    fn stopper(&mut self) -> Box<dyn FnOnce() -> io::Result<()> + Send> {
        let mut unmounter = self.unmounter();
        Box::new(move || unmounter.unmount())
    }

    fn run(self) -> io::Result<()> {
        FuseServer::run(self)
    }
}
