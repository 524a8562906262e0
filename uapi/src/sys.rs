//! The thin syscall layer: every raw system call the contract needs, wrapped once, returning
//! `io::Result`. Both sides of the contract (the device and its clients) use these.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
pub use vm_memory::VolatileSlice;
use zerocopy::IntoBytes;

use crate::ioctl::{DMA_BUF_IOCTL_SYNC, DMA_HEAP_IOCTL_ALLOC, UDMABUF_CREATE};
use crate::linux::{DmaBufSync, DmaHeapAllocationData, UdmabufCreate};

/// A shared mapping of (part of) a file, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; it has no thread affinity. Access to the bytes
// goes through raw pointers whose users state their own synchronisation.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` at `offset` with `MAP_SHARED`. `offset` must be page aligned
    /// and `len` non-zero.
    pub fn map_shared(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        writable: bool,
    ) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a fresh mapping at an address the kernel chooses aliases no Rust object; the
        // mapping lives until `Drop` unmaps exactly this range.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, len })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: mappings are non-empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as a volatile view. Memory that another process can write at any moment
    /// (a client's pool, a queue ring) is read and written only through such a view, never
    /// through `&[u8]` / `&mut [u8]`: Rust's aliasing rules do not allow references to memory
    /// that changes underneath them. Values that are checked and then used are copied out
    /// first.
    pub fn volatile(&self) -> VolatileSlice<'_> {
        // SAFETY: `ptr..ptr+len` is the live mapping, which outlives the returned view (it
        // borrows `self`); a VolatileSlice never creates references into the bytes.
        unsafe { VolatileSlice::new(self.ptr.as_ptr(), self.len) }
    }

    /// Copies `dst.len()` bytes out of the mapping at `offset`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> io::Result<()> {
        let view = self.volatile();
        let src = view.subslice(offset, dst.len()).map_err(|_| einval())?;
        src.copy_to(dst);
        Ok(())
    }

    /// Copies `src` into the mapping at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> io::Result<()> {
        let view = self.volatile();
        let dst = view.subslice(offset, src.len()).map_err(|_| einval())?;
        dst.copy_from(src);
        Ok(())
    }
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping created in `map_shared`, and no
        // reference into it outlives `self` (users hold raw pointers scoped by `&self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Creates a memfd of `size` bytes (close-on-exec, sealing allowed).
pub fn memfd_create(name: &CStr, size: u64) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, size)?;
    Ok(fd)
}

/// Seals a memfd against shrinking and growing, so a peer mapping it never faults (SIGBUS).
pub fn seal_size(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK | SealFlags::GROW)?;
    Ok(())
}

/// The seals on a memfd (empty for other files).
pub fn seals(fd: BorrowedFd<'_>) -> SealFlags {
    rustix::fs::fcntl_get_seals(fd).unwrap_or(SealFlags::empty())
}

/// Size of the file behind `fd`.
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let st = rustix::fs::fstat(fd)?;
    u64::try_from(st.st_size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Filesystem magic of the file behind `fd` (`TMPFS_MAGIC`, `DMA_BUF_MAGIC`, ...).
pub fn fs_magic(fd: BorrowedFd<'_>) -> io::Result<i64> {
    let st = rustix::fs::fstatfs(fd)?;
    Ok(st.f_type as i64)
}

/// `TMPFS_MAGIC` / shmem: memfds live here.
pub const TMPFS_MAGIC: i64 = 0x0102_1994;
/// `HUGETLBFS_MAGIC`: hugetlb memfds.
pub const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
/// `DMA_BUF_MAGIC`: dma-bufs.
pub const DMA_BUF_MAGIC: i64 = 0x444d_4142;

/// Whether `fd` is shmem (a memfd or a tmpfs/hugetlbfs file): the only memory futex words may
/// live in.
pub fn is_shmem(fd: BorrowedFd<'_>) -> bool {
    matches!(fs_magic(fd), Ok(TMPFS_MAGIC) | Ok(HUGETLBFS_MAGIC))
}

/// Whether `fd` is a dma-buf.
pub fn is_dmabuf(fd: BorrowedFd<'_>) -> bool {
    matches!(fs_magic(fd), Ok(DMA_BUF_MAGIC))
}

/// `ioctl(fd, cmd, arg)`: `arg` is the command's argument struct, passed by pointer, in and
/// out. Returns the call's non-negative result.
///
/// # Safety
///
/// Whatever handles `cmd` on the file behind `fd` reads and writes the caller's memory
/// through `arg`'s pointer as it sees fit: the kernel, the file's driver, or the FUSE/CUSE
/// daemon behind it. The caller guarantees that `arg` is the struct `cmd` expects there, and
/// that the handler touches nothing but those bytes — `_IOC_SIZE(cmd)` of them, which must be
/// `arg.len()` — and only memory valid for that use through any user pointer inside it.
///
/// The file matters, not only the number: a driver may give a number any meaning, and the
/// VFS answers some commands itself before any driver sees them (`FIOCLEX`, `FIONBIO`,
/// `FIGETBSZ`, `FS_IOC_*`, `FIDEDUPERANGE`, ...), following their own rules for the argument
/// (some write through `arg` whatever its size, some read a count from it and go past it).
pub unsafe fn ioctl_raw(fd: BorrowedFd<'_>, cmd: u32, arg: &mut [u8]) -> io::Result<i32> {
    // SAFETY: the caller guarantees the handler of `cmd` on `fd` touches only `arg`, a live
    // buffer borrowed exclusively for the call (see `# Safety`).
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::c_ulong, arg.as_mut_ptr()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Current `CLOCK_MONOTONIC` time in ns.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// An absolute `CLOCK_MONOTONIC` deadline `d` from now, in ns.
pub fn deadline_after(d: Duration) -> u64 {
    monotonic_ns().saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Result of a futex wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutexWait {
    /// Woken (or spurious wake-up: callers re-check their condition).
    Woken,
    /// The word no longer held the expected value.
    ValueChanged,
    /// The absolute deadline passed.
    TimedOut,
}

/// `FUTEX_WAIT_BITSET` (shared, not private: the word is in memory shared between processes)
/// on `word` while it equals `expected`, until `deadline_ns` (absolute CLOCK_MONOTONIC) if
/// given. EINTR is reported as `Woken`: callers loop and re-check.
pub fn futex_wait(
    word: &AtomicU32,
    expected: u32,
    deadline_ns: Option<u64>,
) -> io::Result<FutexWait> {
    futex_wait_bitset(
        word,
        expected,
        deadline_ns,
        libc::FUTEX_BITSET_MATCH_ANY as u32,
    )
}

/// [`futex_wait`] woken only by wakes whose bitset shares a bit with `bitset` (libfmq's
/// EventFlag: a reader waiting for NOT_EMPTY sleeps through NOT_FULL wakes).
pub fn futex_wait_bitset(
    word: &AtomicU32,
    expected: u32,
    deadline_ns: Option<u64>,
    bitset: u32,
) -> io::Result<FutexWait> {
    let ts = deadline_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live aligned u32; the timespec outlives the call; FUTEX_WAIT_BITSET
    // only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            bitset,
        )
    };
    if rc == 0 {
        return Ok(FutexWait::Woken);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) => Ok(FutexWait::ValueChanged),
        Some(libc::EINTR) => Ok(FutexWait::Woken),
        Some(libc::ETIMEDOUT) => Ok(FutexWait::TimedOut),
        _ => Err(err),
    }
}

/// `FUTEX_WAKE` (shared) of up to `n` waiters on `word`. Returns how many were woken.
pub fn futex_wake(word: &AtomicU32, n: i32) -> io::Result<usize> {
    // SAFETY: `word` is a live aligned u32; FUTEX_WAKE does not access it beyond hashing the
    // address.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `FUTEX_WAKE_BITSET` (shared): wakes up to `n` waiters on `word` whose wait bitset shares a
/// bit with `bitset`.
pub fn futex_wake_bitset(word: &AtomicU32, n: i32, bitset: u32) -> io::Result<usize> {
    // SAFETY: `word` is a live aligned u32; FUTEX_WAKE_BITSET does not access it beyond
    // hashing the address (the timeout and second-word arguments are unused).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE_BITSET,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bitset,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `process_vm_readv` of `dst.len()` bytes at `addr` in process `pid`. A short read or a bad
/// address is `EFAULT`.
pub fn process_vm_read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` describes a live exclusively borrowed buffer; `remote` is only
    // dereferenced by the kernel in the other process, which checks it.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize != dst.len() => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        _ => Ok(()),
    }
}

/// `process_vm_writev` of `src` to `addr` in process `pid`. A short write is `EFAULT`.
pub fn process_vm_write(pid: i32, addr: u64, src: &[u8]) -> io::Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: src.as_ptr() as *mut libc::c_void,
        iov_len: src.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: src.len(),
    };
    // SAFETY: `local` describes a live buffer the kernel only reads; `remote` is checked by the
    // kernel in the other process.
    let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize != src.len() => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        _ => Ok(()),
    }
}

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this new fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// `pidfd_getfd(pidfd, targetfd, 0)`: a duplicate of another process's fd.
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, target_fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this new fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// The thread-group id (process id) of thread `tid`, from `/proc/<tid>/status`.
pub fn tgid_of(tid: i32) -> io::Result<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}

/// Sends `fd` over a connected Unix socket with `SCM_RIGHTS` (one byte of payload). Never
/// blocks: a socket whose buffer is full is `EAGAIN` (the device sends into sockets its
/// callers choose, and must not be parked by one nobody reads).
pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [fd];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !cmsg.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let n = rustix::net::sendmsg(
        sock,
        &[io::IoSlice::new(b"F")],
        &mut cmsg,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?;
    if n != 1 {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

/// Receives one fd sent with [`send_fd`].
pub fn recv_fd(sock: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    for msg in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            if let Some(fd) = fds.next() {
                return Ok(fd);
            }
        }
    }
    Err(io::Error::from_raw_os_error(libc::EBADMSG))
}

/// Borrow helper for tests and callers holding raw fds they know are open.
pub fn is_open(fd: impl AsFd) -> bool {
    rustix::io::fcntl_getfd(fd).is_ok()
}

// The dma-buf sync flags, where the HAL and the simulator have always taken them from.
pub use crate::linux::{
    DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START, DMA_BUF_SYNC_WRITE,
};

/// Brackets CPU access to a dma-buf (cache coherency, not synchronisation). Any other file is
/// `ENOTTY` without a call (as it would answer): the command is only known to mean
/// `DMA_BUF_IOCTL_SYNC` to a dma-buf.
pub fn dma_buf_sync(fd: BorrowedFd<'_>, flags: u64) -> io::Result<()> {
    if !is_dmabuf(fd) {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    let mut arg = DmaBufSync { flags };
    // SAFETY: `fd` is a dma-buf (its filesystem magic, checked above; the borrow keeps the fd
    // from being replaced meanwhile), whose ioctl handler reads exactly `struct dma_buf_sync`
    // for DMA_BUF_IOCTL_SYNC, an _IOW of that size: `arg`, borrowed for the call. The VFS
    // answers no command of type 'b' itself.
    unsafe { ioctl_raw(fd, DMA_BUF_IOCTL_SYNC, arg.as_mut_bytes()) }.map(|_| ())
}

/// Opens the character device node at `path` read-write (close-on-exec), and checks it is the
/// kernel's device of class `subsystem` (and named `name`, if given) as sysfs lists it
/// (`/sys/dev/char/MAJOR:MINOR`): what a path names is up to whoever made the node, and the
/// ioctls sent to it are only known to mean what the caller wants to that driver. Anything
/// else is `ENOTTY`, as its ioctls would be; no sysfs is `ENODEV`.
fn open_kernel_device(path: &Path, subsystem: &str, name: Option<&str>) -> io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::CharacterDevice {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    let (class, device) = char_device_identity(st.st_rdev)?;
    if class != subsystem || name.is_some_and(|n| n != device) {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    Ok(fd)
}

/// The sysfs class (`subsystem`) and device name of the character device `rdev`.
fn char_device_identity(rdev: u64) -> io::Result<(String, String)> {
    let dir = format!(
        "/sys/dev/char/{}:{}",
        rustix::fs::major(rdev),
        rustix::fs::minor(rdev)
    );
    let base = |p: std::path::PathBuf| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))
    };
    let missing = |e: io::Error| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::from_raw_os_error(libc::ENODEV)
        } else {
            e
        }
    };
    let device = base(std::fs::read_link(&dir).map_err(missing)?)?;
    let class = base(std::fs::read_link(format!("{dir}/subsystem")).map_err(missing)?)?;
    Ok((class, device))
}

/// `DMA_HEAP_IOCTL_ALLOC`: a dma-buf of `len` bytes (rounded up to pages by the heap) from the
/// dma-heap node `heap` ([`crate::linux::DMA_HEAP_SYSTEM`] or another heap under
/// `/dev/dma_heap`), read-write and close-on-exec.
pub fn dma_heap_alloc(heap: &Path, len: u64) -> io::Result<OwnedFd> {
    let heap = open_kernel_device(heap, "dma_heap", None)?;
    let mut arg = DmaHeapAllocationData {
        len,
        fd_flags: (libc::O_RDWR | libc::O_CLOEXEC) as u32,
        ..Default::default()
    };
    // SAFETY: `heap` is a dma-heap device (its sysfs class, checked on open), whose handler
    // for DMA_HEAP_IOCTL_ALLOC, an _IOWR of `struct dma_heap_allocation_data`, copies exactly
    // that struct in and out: `arg`, borrowed for the call, with no user pointer inside.
    unsafe { ioctl_raw(heap.as_fd(), DMA_HEAP_IOCTL_ALLOC, arg.as_mut_bytes()) }?;
    let raw = RawFd::try_from(arg.fd)
        .map_err(|_| io::Error::other("DMA_HEAP_IOCTL_ALLOC returned no fd"))?;
    // SAFETY: on success DMA_HEAP_IOCTL_ALLOC installed `raw` as a new fd of this process
    // that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `UDMABUF_CREATE` on [`crate::linux::UDMABUF`]: a dma-buf over `size` bytes of `memfd` at
/// `offset` (both page aligned; the memfd sealed against shrinking, not against writing),
/// close-on-exec. The udmabuf holds its own reference to the pages: `memfd` may close.
pub fn udmabuf_create(memfd: BorrowedFd<'_>, offset: u64, size: u64) -> io::Result<OwnedFd> {
    let dev = open_kernel_device(Path::new(crate::linux::UDMABUF), "misc", Some("udmabuf"))?;
    let mut arg = UdmabufCreate {
        memfd: u32::try_from(memfd.as_raw_fd()).map_err(|_| einval())?,
        flags: crate::linux::UDMABUF_FLAGS_CLOEXEC,
        offset,
        size,
    };
    // SAFETY: `dev` is the udmabuf misc device (checked on open), whose handler for
    // UDMABUF_CREATE, an _IOW of `struct udmabuf_create`, copies exactly that struct in:
    // `arg`, borrowed for the call, with no user pointer inside (the memfd is an fd number).
    let raw = unsafe { ioctl_raw(dev.as_fd(), UDMABUF_CREATE, arg.as_mut_bytes()) }?;
    // SAFETY: UDMABUF_CREATE returns a new fd of this process that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Reads exactly `buf.len()` bytes at `offset` without touching the file offset. A file
/// shorter than that is `UnexpectedEof`: the way to read a file that may shrink at any time,
/// where a mapping would fault (SIGBUS).
pub fn pread_exact(fd: BorrowedFd<'_>, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pread(fd, &mut *buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes all of `data` at `offset` without touching the file offset.
pub fn pwrite_all(fd: BorrowedFd<'_>, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match rustix::io::pwrite(fd, data, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                data = &data[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Size of whatever `fd` refers to. `fstat` for files and memfds (seeking would move a file
/// offset the client shares with us); `lseek(SEEK_END)` for dma-bufs, whose `fstat` size is 0
/// and whose seek moves nothing.
pub fn fd_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    if is_dmabuf(fd) {
        return Ok(rustix::fs::seek(fd, rustix::fs::SeekFrom::End(0))?);
    }
    Ok(rustix::fs::fstat(fd)?.st_size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_ioctl_wrappers_refuse_files_that_are_not_their_device() {
        let errno = |r: io::Result<OwnedFd>| r.err().and_then(|e| e.raw_os_error());
        // A regular file (a memfd reopened through /proc) is not a heap.
        let memfd = memfd_create(c"not-a-heap", 4096).unwrap();
        let path = format!("/proc/self/fd/{}", memfd.as_raw_fd());
        assert_eq!(
            errno(dma_heap_alloc(Path::new(&path), 4096)),
            Some(libc::ENOTTY)
        );
        assert_eq!(
            errno(dma_heap_alloc(Path::new("/nonexistent/heap"), 4096)),
            Some(libc::ENOENT)
        );
        // /dev/null is a character device, of another class.
        assert_eq!(
            errno(dma_heap_alloc(Path::new("/dev/null"), 4096)),
            Some(libc::ENOTTY)
        );
        let memfd = memfd_create(c"not-a-dma-buf", 4096).unwrap();
        let e = dma_buf_sync(memfd.as_fd(), DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
    }

    #[test]
    fn character_devices_are_known_by_their_sysfs_class_and_name() {
        let null = rustix::fs::stat("/dev/null").unwrap();
        assert_eq!(
            char_device_identity(null.st_rdev).unwrap(),
            ("mem".to_string(), "null".to_string())
        );
        assert!(open_kernel_device(Path::new("/dev/null"), "mem", Some("null")).is_ok());
        let e = open_kernel_device(Path::new("/dev/null"), "mem", Some("zero")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        let e = open_kernel_device(Path::new("/dev/null"), "misc", None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
    }
}
