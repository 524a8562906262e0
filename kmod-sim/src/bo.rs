//! Buffer objects: device memory or an imported caller fd, mapped once.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use nnaccel_uapi::abi::*;
use nnaccel_uapi::sys::{self, Mapping};
use rustix::fs::{FileType, SealFlags};
use rustix::io::Errno;

use crate::shared::Stats;

/// One buffer object. Reference-counted: a program or an in-flight job keeps it alive after
/// its handle is closed.
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
    /// The file's offset of the mapping (for size re-checks of unsealed files).
    file_offset: u64,
    /// Whether the backing file is guaranteed not to shrink under the mapping.
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
        // never touch pages that vanished (SIGBUS). Files that cannot be sealed are re-checked
        // before every job instead (see `check_backing`).
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

    /// Base of the device's mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Whether the backing cannot shrink under the mapping (device memory, sealed memfds,
    /// dma-bufs). Jobs touch other BOs only through [`Bo::read`] and [`Bo::write`], the
    /// simulator's stand-in for the pages a kernel driver would pin: a file truncated under a
    /// mapping would fault (SIGBUS) and take the whole device down.
    pub fn size_pinned(&self) -> bool {
        self.size_pinned
    }

    /// Copies `len` bytes at `offset` (relative to the BO) out of an unpinned BO's file; a file
    /// that shrank is `EFAULT` for the job.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; len];
        sys::pread_exact(self.fd.as_fd(), self.file_offset + offset, &mut buf)
            .map_err(|_| Errno::FAULT)?;
        Ok(buf)
    }

    /// Copies `data` into an unpinned BO's file at `offset` (relative to the BO).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), Errno> {
        sys::pwrite_all(self.fd.as_fd(), self.file_offset + offset, data).map_err(|_| Errno::FAULT)
    }

    /// Brackets CPU access for dma-bufs (no-op for other kinds).
    pub fn sync(&self, flags: u64) {
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
