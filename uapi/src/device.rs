//! How clients reach a device: one trait with one method, the ioctl. The character device
//! (a real fd on `/dev/nnaccel` or a FUSE/CUSE node) and the in-process device of
//! `nnaccel-kmod-sim` both implement it, so everything above it is the same code.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::abi::*;
use crate::ioctl::*;
use crate::ring::{Producer, RingError, RingView};
use crate::sys::{self, Mapping};

/// A device file: an open `/dev/nnaccel` or something that behaves exactly like one.
pub trait Device: Send + Sync + fmt::Debug {
    /// Issues `cmd` with its argument struct's bytes (`_IOC_SIZE(cmd)` of them), in and out.
    fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()>;
}

/// A device reached through a file descriptor.
#[derive(Debug)]
pub struct FdDevice {
    fd: OwnedFd,
}

impl FdDevice {
    /// Opens a device node read-write.
    pub fn open(path: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(Self { fd })
    }

    /// Wraps an already open device fd.
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }
}

impl AsFd for FdDevice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Device for FdDevice {
    fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
        if arg.len() != ioc_size(cmd) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        sys::ioctl_raw(self.fd.as_fd(), cmd, arg).map(|_| ())
    }
}

/// Typed calls for every ioctl, on any [`Device`].
pub trait DeviceExt: Device {
    /// Issues `cmd` with a typed argument struct.
    fn call<T: IntoBytes + FromBytes + Immutable>(&self, cmd: u32, arg: &mut T) -> io::Result<()> {
        if size_of::<T>() != ioc_size(cmd) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.ioctl(cmd, arg.as_mut_bytes())
    }

    /// GET_PARAM.
    fn get_param(&self, param: u32) -> io::Result<u64> {
        let mut a = GetParam {
            param,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_GET_PARAM, &mut a)?;
        Ok(a.value)
    }

    /// BO_CREATE: device memory of `size` bytes.
    fn bo_create(&self, size: u64) -> io::Result<u32> {
        let mut a = BoCreate {
            size,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_BO_CREATE, &mut a)?;
        Ok(a.handle)
    }

    /// BO_IMPORT: `size` bytes of `fd` at `offset`.
    fn bo_import(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        size: u64,
        access: u32,
    ) -> io::Result<u32> {
        let mut a = BoImport {
            fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            access,
            offset,
            size,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_BO_IMPORT, &mut a)?;
        Ok(a.handle)
    }

    /// BO_EXPORT: an fd for the BO's memory (arrives over a socket pair made here).
    fn bo_export(&self, handle: u32) -> io::Result<OwnedFd> {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let mut a = BoExport {
            handle,
            socket_fd: std::os::fd::AsRawFd::as_raw_fd(&theirs),
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_BO_EXPORT, &mut a)?;
        drop(theirs);
        sys::recv_fd(ours.as_fd())
    }

    /// BO_INFO.
    fn bo_info(&self, handle: u32) -> io::Result<BoInfo> {
        let mut a = BoInfo {
            handle,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_BO_INFO, &mut a)?;
        Ok(a)
    }

    /// BO_CLOSE.
    fn bo_close(&self, handle: u32) -> io::Result<()> {
        self.call(NNACCEL_IOCTL_BO_CLOSE, &mut BoClose { handle, pad: 0 })
    }

    /// PROGRAM_CREATE from encoded bytes.
    fn program_create(&self, program: &[u8]) -> io::Result<u32> {
        let mut a = ProgramCreate {
            data_ptr: program.as_ptr() as u64,
            data_len: program.len() as u64,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_PROGRAM_CREATE, &mut a)?;
        Ok(a.handle)
    }

    /// PROGRAM_DESTROY.
    fn program_destroy(&self, handle: u32) -> io::Result<()> {
        self.call(
            NNACCEL_IOCTL_PROGRAM_DESTROY,
            &mut ProgramDestroy { handle, pad: 0 },
        )
    }

    /// QUEUE_CREATE over `size` bytes of `memfd` at `offset`.
    fn queue_create(
        &self,
        memfd: BorrowedFd<'_>,
        offset: u64,
        size: u64,
        entries: u32,
        flags: u32,
    ) -> io::Result<u32> {
        let mut a = QueueCreate {
            memfd: std::os::fd::AsRawFd::as_raw_fd(&memfd),
            flags,
            offset,
            size,
            entries,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_QUEUE_CREATE, &mut a)?;
        Ok(a.queue_id)
    }

    /// QUEUE_DESTROY.
    fn queue_destroy(&self, queue_id: u32) -> io::Result<()> {
        self.call(
            NNACCEL_IOCTL_QUEUE_DESTROY,
            &mut QueueDestroy { queue_id, pad: 0 },
        )
    }

    /// SUBMIT on the default queue; returns the sequence number.
    fn submit(&self, job: &Job) -> io::Result<u64> {
        let mut a = Submit {
            job: *job,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_SUBMIT, &mut a)?;
        Ok(a.seq)
    }

    /// WAIT for `seq` on `queue_id` (0 = default queue) until `deadline_ns`.
    fn wait(&self, queue_id: u32, seq: u64, deadline_ns: u64) -> io::Result<Wait> {
        let mut a = Wait {
            queue_id,
            seq,
            deadline_ns,
            ..Default::default()
        };
        self.call(NNACCEL_IOCTL_WAIT, &mut a)?;
        Ok(a)
    }
}

impl<D: Device + ?Sized> DeviceExt for D {}

/// A shared-memory queue owned by a client: the memfd, the device's queue id and the producer.
/// Destroyed on the device when dropped.
#[derive(Debug)]
pub struct RingQueue {
    dev: Arc<dyn Device>,
    id: u32,
    producer: Producer,
    _memfd: OwnedFd,
}

impl RingQueue {
    /// Creates a ring of `entries` entries in a new memfd and registers it.
    pub fn create(dev: Arc<dyn Device>, entries: u32, flags: u32) -> io::Result<Self> {
        let size = ring_size(entries).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let size = size.next_multiple_of(4096);
        let memfd = sys::memfd_create(c"nnaccel-ring", size as u64)?;
        sys::seal_size(memfd.as_fd())?;
        let map = Arc::new(Mapping::map_shared(memfd.as_fd(), 0, size, true)?);
        let id = dev.queue_create(memfd.as_fd(), 0, size as u64, entries, flags)?;
        let view = RingView::new(map, 0, entries).map_err(ring_to_io)?;
        let producer = Producer::new(view).map_err(ring_to_io)?;
        Ok(Self {
            dev,
            id,
            producer,
            _memfd: memfd,
        })
    }

    /// The device's queue id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Publishes a job; no ioctl.
    pub fn submit(&mut self, job: &Job) -> Result<u64, RingError> {
        self.producer.submit(job)
    }

    /// Waits for `seq`: spin for `spin`, then sleep on the completion futex until the deadline.
    pub fn wait(
        &mut self,
        seq: u64,
        spin: Duration,
        deadline_ns: Option<u64>,
    ) -> Result<Completion, RingError> {
        self.producer.wait(seq, spin, deadline_ns)
    }

    /// The producer, for callers that manage several jobs in flight.
    pub fn producer(&mut self) -> &mut Producer {
        &mut self.producer
    }
}

impl Drop for RingQueue {
    fn drop(&mut self) {
        let _ = self.dev.queue_destroy(self.id);
    }
}

/// Maps ring errors to errno-carrying I/O errors.
pub fn ring_to_io(e: RingError) -> io::Error {
    match e {
        RingError::Io(e) => e,
        RingError::Full => io::Error::from_raw_os_error(libc::EBUSY),
        RingError::Device(errno) => io::Error::from_raw_os_error(errno),
        RingError::TimedOut(_) => io::Error::from_raw_os_error(libc::ETIMEDOUT),
        RingError::BadSeq(_) | RingError::BadRegion(_) => {
            io::Error::from_raw_os_error(libc::EINVAL)
        }
    }
}

/// A deadline `d` from now, for [`DeviceExt::wait`].
pub fn deadline_in(d: Duration) -> u64 {
    sys::deadline_after(d)
}
