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

/// A device reached through a file descriptor: an open nnaccel node (`/dev/nnaccel`, or a FUSE
/// or CUSE node of the simulator). Its ioctls go out as nnaccel commands, so the fd must be
/// one: see [`FdDevice::ioctl`].
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
    /// Commands of another type than nnaccel's are `ENOTTY` without a call (the answer the
    /// device gives them), and an `arg` of another length than `_IOC_SIZE(cmd)` is `EINVAL`:
    /// what makes the call sound for any `cmd` and `arg` (see the SAFETY comment).
    fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
        if ioc_type(cmd) != NNACCEL_IOCTL_TYPE {
            return Err(io::Error::from_raw_os_error(libc::ENOTTY));
        }
        if arg.len() != ioc_size(cmd) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `fd` is an nnaccel device (the kernel driver, or the simulator behind a FUSE
        // or CUSE node), and `cmd` has its type 0xBA, which the VFS answers no command of and
        // no other driver uses (ioctl-number.rst), so the device handles it: a known command
        // copies exactly its `_IOC_SIZE(cmd)`-byte struct in and out (FUSE and CUSE copy
        // exactly that many bytes for any command), and writes through no user pointer
        // (PROGRAM_CREATE only reads `data_len` bytes at `data_ptr`); an unknown one is
        // ENOTTY. `arg` is those bytes, borrowed exclusively for the call.
        unsafe { sys::ioctl_raw(self.fd.as_fd(), cmd, arg) }.map(|_| ())
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

    /// JOB_CANCEL `seq` on `queue_id` (0 = default queue). `Ok(true)` when the job was
    /// cancelled, `Ok(false)` when it had already ended (`EALREADY`); either way the device
    /// writes none of its outputs after this returned.
    fn job_cancel(&self, queue_id: u32, seq: u64) -> io::Result<bool> {
        let mut a = JobCancel {
            queue_id,
            seq,
            flags: 0,
        };
        match self.call(NNACCEL_IOCTL_JOB_CANCEL, &mut a) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EALREADY) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl<D: Device + ?Sized> DeviceExt for D {}

// ---------------------------------------------------------------------------------------------
// Owning handles
//
// As kvm-ioctls' `VmFd`/`VcpuFd` own their fds, these own a handle of one open device file:
// they hold the device (an `Arc`, so the file outlives them) and release the object on `Drop`.
// The raw handle stays available for building ioctl arguments (`Job`, `Binding`, program BO
// references).

/// What [`BufferObject`] and [`LoadedProgram`] share: a handle of `dev` and the call that
/// releases it.
#[derive(Debug)]
struct OwnedHandle {
    dev: Arc<dyn Device>,
    /// Handles are never 0 (docs/uapi.md): 0 once disowned.
    handle: u32,
    release: fn(&dyn Device, u32) -> io::Result<()>,
}

impl OwnedHandle {
    /// The release call now, with its result; `Drop` then has nothing left to do.
    fn release_now(mut self) -> io::Result<()> {
        let handle = self.disown();
        (self.release)(&*self.dev, handle)
    }

    fn disown(&mut self) -> u32 {
        std::mem::take(&mut self.handle)
    }
}

impl Drop for OwnedHandle {
    fn drop(&mut self) {
        if self.handle != 0 {
            // `Drop` cannot report an error, and this one needs no handling: the release fails
            // only for a handle the file does not hold (impossible: this value owns it), a
            // malformed argument (impossible: built here), or a device that is gone, whose file
            // releases every object when it closes. uapi has no log to send it to.
            let _ = (self.release)(&*self.dev, self.handle);
        }
    }
}

/// A buffer object of one device file (BO_CREATE or BO_IMPORT), closed (BO_CLOSE) on drop.
#[derive(Debug)]
pub struct BufferObject(OwnedHandle);

impl BufferObject {
    fn owning(dev: Arc<dyn Device>, handle: u32) -> Self {
        Self(OwnedHandle {
            dev,
            handle,
            release: |dev, handle| dev.bo_close(handle),
        })
    }

    /// BO_CREATE: `size` bytes of device memory.
    pub fn create(dev: Arc<dyn Device>, size: u64) -> io::Result<Self> {
        let handle = dev.bo_create(size)?;
        Ok(Self::owning(dev, handle))
    }

    /// BO_IMPORT: `size` bytes of `fd` at `offset`, with `access` (`BO_ACCESS_*`).
    pub fn import(
        dev: Arc<dyn Device>,
        fd: BorrowedFd<'_>,
        offset: u64,
        size: u64,
        access: u32,
    ) -> io::Result<Self> {
        let handle = dev.bo_import(fd, offset, size, access)?;
        Ok(Self::owning(dev, handle))
    }

    /// The handle, for ioctl arguments (bindings, program BO references). Valid while `self`
    /// lives.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The device file the BO belongs to.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.0.dev
    }

    /// BO_INFO.
    pub fn info(&self) -> io::Result<BoInfo> {
        self.0.dev.bo_info(self.0.handle)
    }

    /// BO_EXPORT: an fd for the BO's memory.
    pub fn export(&self) -> io::Result<OwnedFd> {
        self.0.dev.bo_export(self.0.handle)
    }

    /// BO_CLOSE now, with its result (`Drop` closes too, but cannot report an error).
    pub fn close(self) -> io::Result<()> {
        self.0.release_now()
    }

    /// Gives the handle up without closing it: the BO stays on the device until its file
    /// closes, and `Drop` makes no call. For a device that is gone or hung, where BO_CLOSE
    /// would fail or block. Returns the handle (0 if already given up).
    pub fn disown(&mut self) -> u32 {
        self.0.disown()
    }
}

/// A program loaded on one device file (PROGRAM_CREATE), destroyed (PROGRAM_DESTROY) on drop.
/// Not to be confused with [`crate::program::Program`], the encoded program it is made from.
#[derive(Debug)]
pub struct LoadedProgram(OwnedHandle);

impl LoadedProgram {
    /// PROGRAM_CREATE from encoded bytes ([`crate::program::Program::encode`]).
    pub fn create(dev: Arc<dyn Device>, program: &[u8]) -> io::Result<Self> {
        let handle = dev.program_create(program)?;
        Ok(Self(OwnedHandle {
            dev,
            handle,
            release: |dev, handle| dev.program_destroy(handle),
        }))
    }

    /// The handle, for [`Job::program`]. Valid while `self` lives.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The device file the program belongs to.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.0.dev
    }

    /// PROGRAM_DESTROY now, with its result (`Drop` destroys too, but cannot report an error).
    pub fn destroy(self) -> io::Result<()> {
        self.0.release_now()
    }

    /// Gives the handle up without destroying the program: it stays on the device until its
    /// file closes, and `Drop` makes no call. For a device that is gone or hung. Returns the
    /// handle (0 if already given up).
    pub fn disown(&mut self) -> u32 {
        self.0.disown()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A device that hands out handle 7 for every create and records each close, so the unit
    /// tests see exactly which calls the owning types make (no device node needed).
    #[derive(Debug, Default)]
    struct Recorder {
        calls: Mutex<Vec<(&'static str, u32)>>,
    }

    impl Device for Recorder {
        fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
            let handle_at = |arg: &mut [u8], at: usize| {
                arg[at..at + 4].copy_from_slice(&7u32.to_ne_bytes());
            };
            let record = |name, handle_bytes: &[u8]| {
                let h = u32::from_ne_bytes([
                    handle_bytes[0],
                    handle_bytes[1],
                    handle_bytes[2],
                    handle_bytes[3],
                ]);
                self.calls.lock().unwrap().push((name, h));
            };
            match cmd {
                NNACCEL_IOCTL_BO_CREATE => handle_at(arg, 12),
                NNACCEL_IOCTL_BO_IMPORT => handle_at(arg, 24),
                NNACCEL_IOCTL_PROGRAM_CREATE => handle_at(arg, 20),
                NNACCEL_IOCTL_BO_CLOSE => record("BO_CLOSE", &arg[..4]),
                NNACCEL_IOCTL_PROGRAM_DESTROY => record("PROGRAM_DESTROY", &arg[..4]),
                _ => return Err(io::Error::from_raw_os_error(libc::ENOTTY)),
            }
            Ok(())
        }
    }

    fn recorder() -> (Arc<Recorder>, Arc<dyn Device>) {
        let r = Arc::new(Recorder::default());
        let dev: Arc<dyn Device> = r.clone();
        (r, dev)
    }

    fn calls(r: &Recorder) -> Vec<(&'static str, u32)> {
        r.calls.lock().unwrap().clone()
    }

    #[test]
    fn a_dropped_buffer_object_closes_its_handle_once() {
        let (r, dev) = recorder();
        let bo = BufferObject::create(dev.clone(), 4096).unwrap();
        assert_eq!(bo.handle(), 7);
        assert!(calls(&r).is_empty());
        drop(bo);
        assert_eq!(calls(&r), [("BO_CLOSE", 7)]);
        let memfd = sys::memfd_create(c"bo", 4096).unwrap();
        let bo = BufferObject::import(dev, memfd.as_fd(), 0, 4096, BO_ACCESS_READ).unwrap();
        bo.close().unwrap();
        assert_eq!(calls(&r), [("BO_CLOSE", 7), ("BO_CLOSE", 7)]);
    }

    #[test]
    fn a_dropped_program_destroys_its_handle_once() {
        let (r, dev) = recorder();
        let p = LoadedProgram::create(dev.clone(), &[1, 2, 3]).unwrap();
        assert_eq!(p.handle(), 7);
        drop(p);
        assert_eq!(calls(&r), [("PROGRAM_DESTROY", 7)]);
        LoadedProgram::create(dev, &[1]).unwrap().destroy().unwrap();
        assert_eq!(calls(&r).len(), 2);
    }

    #[test]
    fn a_disowned_handle_is_not_closed() {
        let (r, dev) = recorder();
        let mut bo = BufferObject::create(dev.clone(), 4096).unwrap();
        assert_eq!(bo.disown(), 7);
        assert_eq!(bo.disown(), 0, "given up once");
        drop(bo);
        let mut p = LoadedProgram::create(dev, &[1]).unwrap();
        assert_eq!(p.disown(), 7);
        drop(p);
        assert!(calls(&r).is_empty());
    }

    #[test]
    fn fd_devices_send_only_nnaccel_commands_of_their_exact_size() {
        // A memfd stands in for a file the VFS answers FIGETBSZ (`_IO(0, 2)`) for: the kernel
        // would write an int through the argument pointer, whatever its length.
        let dev = FdDevice::from_fd(sys::memfd_create(c"not-a-device", 4096).unwrap());
        let e = dev.ioctl(2, &mut []).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        let mut short = [0u8; 8];
        let e = dev.ioctl(NNACCEL_IOCTL_GET_PARAM, &mut short).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        // The right size reaches the file, which answers as a memfd does.
        let e = dev.get_param(0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
    }

    #[test]
    fn a_failed_create_owns_nothing() {
        #[derive(Debug)]
        struct Refuses;
        impl Device for Refuses {
            fn ioctl(&self, _: u32, _: &mut [u8]) -> io::Result<()> {
                Err(io::Error::from_raw_os_error(libc::EBADF))
            }
        }
        let dev: Arc<dyn Device> = Arc::new(Refuses);
        let e = BufferObject::create(dev.clone(), 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        let e = LoadedProgram::create(dev, &[1]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }
}
