//! Buffer objects: device memory or an imported caller fd, mapped once.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use nnaccel_uapi::abi::*;
use nnaccel_uapi::sys::{
    self, DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START, DMA_BUF_SYNC_WRITE, Mapping,
    VolatileSlice,
};
use rustix::fs::{FileType, SealFlags};
use rustix::io::Errno;

use crate::shared::Stats;

/// One buffer object. Reference-counted: an in-flight job keeps it alive after its handle is
/// closed (a program does not: it copied its constants at PROGRAM_CREATE).
#[derive(Debug)]
pub struct Bo {
    /// `BO_KIND_*`.
    pub kind: u32,
    /// `BO_ACCESS_*`.
    pub access: u32,
    /// Size in bytes.
    pub size: u64,
    map: Mapping,
    fd: OwnedFd,
    /// The file's offset of the mapping (unpinned BOs are read and written through the file).
    file_offset: u64,
    /// Whether the backing cannot shrink under the mapping (device memory, sealed memfds,
    /// dma-bufs): only then is the mapping touched. Other files (which cannot be sealed) are
    /// read and written with pread/pwrite, where a truncated file is an error, not a fault.
    size_pinned: bool,
    device_bytes: u64,
    stats: Arc<Stats>,
}

impl Bo {
    /// BO_CREATE: device memory, charged against the device's memory size.
    pub fn create(stats: &Arc<Stats>, size: u64, device_memory: u64) -> Result<Self, Errno> {
        stats
            .memory_used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(size)
                    .filter(|total| *total <= device_memory)
            })
            .map_err(|_| Errno::NOMEM)?;
        let charged = ChargeGuard { stats, bytes: size };
        let fd = sys::memfd_create(c"nnaccel-bo", size).map_err(|_| Errno::NOMEM)?;
        // Sealed so an exported fd cannot shrink the memory under the device.
        sys::seal_size(fd.as_fd()).map_err(|_| Errno::NOMEM)?;
        let len = usize::try_from(size).map_err(|_| Errno::NOMEM)?;
        let map = Mapping::map_shared(fd.as_fd(), 0, len, true).map_err(|_| Errno::NOMEM)?;
        std::mem::forget(charged);
        stats.live_bos.fetch_add(1, Ordering::SeqCst);
        Ok(Self {
            kind: BO_KIND_DEVICE,
            access: BO_ACCESS_MASK,
            size,
            map,
            fd,
            file_offset: 0,
            size_pinned: true,
            device_bytes: size,
            stats: stats.clone(),
        })
    }

    /// BO_IMPORT of an fd already taken from the caller. The argument fields were checked.
    pub fn import(
        stats: &Arc<Stats>,
        fd: OwnedFd,
        offset: u64,
        size: u64,
        access: u32,
    ) -> Result<Self, Errno> {
        let st = rustix::fs::fstat(&fd)?;
        let kind = if sys::is_dmabuf(fd.as_fd()) {
            BO_KIND_DMABUF
        } else if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
            if sys::is_shmem(fd.as_fd()) {
                BO_KIND_MEMFD
            } else {
                BO_KIND_FILE
            }
        } else {
            // Pipes, sockets, ttys, directories: nothing to map.
            return Err(Errno::NODEV);
        };
        let file_size = sys::fd_size(fd.as_fd()).map_err(|_| Errno::NODEV)?;
        match offset.checked_add(size) {
            Some(end) if end <= file_size => {}
            _ => return Err(Errno::INVAL),
        }
        // A memfd is sealed against shrinking on import, as udmabuf requires, so the device can
        // never touch pages that vanished (SIGBUS). Files that cannot be sealed are reached
        // through the file instead (see `Bo::read`).
        let size_pinned = match kind {
            BO_KIND_MEMFD => {
                let have = sys::seals(fd.as_fd());
                have.contains(SealFlags::SHRINK)
                    || rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).is_ok()
            }
            BO_KIND_DMABUF => true,
            _ => false,
        };
        let len = usize::try_from(size).map_err(|_| Errno::INVAL)?;
        let map = Mapping::map_shared(fd.as_fd(), offset, len, access & BO_ACCESS_WRITE != 0)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::NODEV))?;
        stats.live_bos.fetch_add(1, Ordering::SeqCst);
        Ok(Self {
            kind,
            access,
            size,
            map,
            fd,
            file_offset: offset,
            size_pinned,
            device_bytes: 0,
            stats: stats.clone(),
        })
    }

    /// The backing fd (for export and dma-buf syncs).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Copies `len` bytes at `offset` (relative to the BO) into an owned buffer. The range was
    /// checked against the BO's size; a file that shrank under an unpinned BO is `EFAULT`.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = zeroed(len)?;
        self.sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ);
        let read = if self.size_pinned {
            self.view(offset, len).map(|src| {
                src.copy_to(&mut buf);
            })
        } else {
            sys::pread_exact(self.fd.as_fd(), self.file_offset + offset, &mut buf)
                .map_err(|_| Errno::FAULT)
        };
        self.sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ);
        read.map(|()| buf)
    }

    /// Copies `data` into the BO at `offset` (relative to the BO). The range was checked
    /// against the BO's size; a file that shrank under an unpinned BO is `EFAULT`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), Errno> {
        self.sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_WRITE);
        let written = if self.size_pinned {
            self.view(offset, data.len()).map(|dst| dst.copy_from(data))
        } else {
            sys::pwrite_all(self.fd.as_fd(), self.file_offset + offset, data)
                .map_err(|_| Errno::FAULT)
        };
        self.sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE);
        written
    }

    /// `len` bytes at `offset` of the mapping, as a volatile view: the only way the device
    /// touches a BO's pages. Every BO maps memory a client can write at any moment (its own
    /// memfd or dma-buf, or device memory it mapped after BO_EXPORT), and Rust allows no
    /// `&[u8]` to memory that changes underneath it; the view copies with volatile accesses
    /// and makes no reference into the bytes. Only for size-pinned BOs: pages of a file
    /// truncated under the mapping would fault (SIGBUS) and take the whole device down.
    fn view(&self, offset: u64, len: usize) -> Result<VolatileSlice<'_>, Errno> {
        let offset = usize::try_from(offset).map_err(|_| Errno::FAULT)?;
        self.map
            .volatile()
            .subslice(offset, len)
            .map_err(|_| Errno::FAULT)
    }

    /// Brackets CPU access for dma-bufs (no-op for other kinds).
    fn sync(&self, flags: u64) {
        if self.kind == BO_KIND_DMABUF {
            let _ = sys::dma_buf_sync(self.fd.as_fd(), flags);
        }
    }
}

impl Drop for Bo {
    fn drop(&mut self) {
        self.stats.live_bos.fetch_sub(1, Ordering::SeqCst);
        self.stats
            .memory_used
            .fetch_sub(self.device_bytes, Ordering::SeqCst);
    }
}

/// A zeroed owned buffer for a copy of BO bytes; `ENOMEM` rather than an abort if it cannot
/// be had (its length comes from a client's program or binding).
pub fn zeroed(len: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = Vec::new();
    buf.try_reserve_exact(len).map_err(|_| Errno::NOMEM)?;
    buf.resize(len, 0);
    Ok(buf)
}

/// Returns charged device memory if creation fails half-way.
struct ChargeGuard<'a> {
    stats: &'a Stats,
    bytes: u64,
}

impl Drop for ChargeGuard<'_> {
    fn drop(&mut self) {
        self.stats
            .memory_used
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}
