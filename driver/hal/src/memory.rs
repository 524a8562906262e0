//! Mapping memory pools for CPU access (the sample driver's `RunTimePoolInfo`).
//!
//! | kind | mapping |
//! |---|---|
//! | ashmem (memfd) | the whole region, read-write |
//! | mmap_fd | `size` bytes at `offset` with the given protection; `msync` after a write |
//! | hardware_buffer_blob | the whole dma-buf; CPU access bracketed with `DMA_BUF_IOCTL_SYNC` |
//! | hardware_buffer | never mapped by the HAL: device I/O only |
//!
//! A pool whose size can change under a mapping would make an access past its end fault
//! (SIGBUS) in this process. memfds are therefore sealed against shrinking when first mapped
//! (or must already be) and dma-bufs never shrink: those are used through a mapping. Any other
//! file (a regular file behind mmap_fd, a memfd the client sealed against adding seals) is
//! never accessed through a mapping: its bytes are copied with `pread`/`pwrite`, so a client
//! truncating it gets a failed execution, not a crashed service. Constants in such a pool are
//! copied once at preparation.

use std::borrow::Cow;
use std::os::fd::AsFd;

use nnaccel_uapi::sys::{
    self, DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START, DMA_BUF_SYNC_WRITE, Mapping,
};
use rustix::fs::SealFlags;

use super::types::{ErrorStatus, Memory, MemoryKind};

/// A pool made accessible to this process.
#[derive(Debug)]
pub struct MappedPool {
    backing: Backing,
    memory: Memory,
    file_offset: u64,
    len: usize,
    writable: bool,
}

/// How the bytes of a pool are reached.
#[derive(Debug)]
enum Backing {
    /// A shared mapping of a pool whose size cannot change.
    Mapped(Mapping),
    /// `pread`/`pwrite` on a file that may shrink at any time.
    File,
    /// A private copy taken at preparation (constants in an unpinned file).
    Snapshot(Vec<u8>),
}

fn general(msg: impl std::fmt::Display) -> ErrorStatus {
    tracing::debug!("memory pool: {msg}");
    ErrorStatus::GeneralFailure
}

impl MappedPool {
    /// Maps `memory`; GENERAL_FAILURE when it cannot be mapped (as the HAL requires).
    pub fn map(memory: &Memory) -> Result<Self, ErrorStatus> {
        let fd = memory.fd.as_fd();
        let len = usize::try_from(memory.size).map_err(|_| general("size does not fit"))?;
        if len == 0 {
            return Err(general("empty pool"));
        }
        let (offset, writable) = match memory.kind {
            MemoryKind::Ashmem | MemoryKind::HardwareBufferBlob => (0, true),
            MemoryKind::MmapFd { prot, offset } => {
                if prot & libc::PROT_READ == 0 {
                    return Err(general("mmap_fd without PROT_READ"));
                }
                if offset % 4096 != 0 {
                    return Err(general("mmap_fd offset not page aligned"));
                }
                (offset, prot & libc::PROT_WRITE != 0)
            }
            MemoryKind::HardwareBuffer => {
                return Err(general("hardware_buffer cannot be mapped by the HAL"));
            }
        };
        let end = offset
            .checked_add(memory.size)
            .ok_or_else(|| general("offset + size overflows"))?;
        let file_size =
            sys::fd_size(fd).map_err(|e| general(format!("cannot size the pool: {e}")))?;
        if end > file_size {
            return Err(general(format!(
                "pool of {} bytes at {offset} is past the end of its {file_size}-byte file",
                memory.size
            )));
        }
        let size_pinned = if sys::is_dmabuf(fd) {
            true
        } else if sys::is_shmem(fd) {
            sys::seals(fd).contains(SealFlags::SHRINK)
                || rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK).is_ok()
        } else {
            false
        };
        // A read-only mapping of an ashmem region the client opened read-only still works.
        // Unpinned pools are mapped too, once, to hold them to the HAL's rule that a pool be
        // mappable; the mapping is dropped at once.
        let map = Mapping::map_shared(fd, offset, len, writable)
            .or_else(|_| {
                if writable {
                    Mapping::map_shared(fd, offset, len, false)
                } else {
                    Err(std::io::Error::from_raw_os_error(libc::EACCES))
                }
            })
            .map_err(|e| general(format!("mmap failed: {e}")))?;
        let writable = writable
            && rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::RDWR));
        Ok(Self {
            backing: if size_pinned {
                Backing::Mapped(map)
            } else {
                Backing::File
            },
            memory: memory.clone(),
            file_offset: offset,
            len,
            writable,
        })
    }

    /// Maps a model's pool of constants: as [`MappedPool::map`], but the bytes of an unpinned
    /// file are copied now, so executions never read a file the client may have truncated.
    /// A hardware_buffer pool is kept unmapped and empty: preparation refuses any model whose
    /// constants live in one, so such a pool is present but unused.
    pub fn map_constants(memory: &Memory) -> Result<Self, ErrorStatus> {
        if memory.kind == MemoryKind::HardwareBuffer {
            return Ok(Self {
                backing: Backing::Snapshot(Vec::new()),
                memory: memory.clone(),
                file_offset: 0,
                len: 0,
                writable: false,
            });
        }
        let mut pool = Self::map(memory)?;
        if matches!(pool.backing, Backing::File) {
            let mut copy = vec![0u8; pool.len];
            sys::pread_exact(pool.memory.fd.as_fd(), pool.file_offset, &mut copy)
                .map_err(|e| general(format!("cannot read the constants' pool: {e}")))?;
            pool.backing = Backing::Snapshot(copy);
            pool.writable = false;
        }
        Ok(pool)
    }

    /// The pool description.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the pool is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the HAL may write outputs into it.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Starts CPU access (dma-buf sync; no-op for other kinds).
    pub fn begin_access(&self, write: bool) {
        if self.memory.kind == MemoryKind::HardwareBufferBlob {
            let dir = if write {
                DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE
            } else {
                DMA_BUF_SYNC_READ
            };
            let _ = sys::dma_buf_sync(self.memory.fd.as_fd(), DMA_BUF_SYNC_START | dir);
        }
    }

    /// Ends CPU access: dma-buf sync, and `msync` of a written mmap_fd.
    pub fn end_access(&self, wrote: bool) {
        match self.memory.kind {
            MemoryKind::HardwareBufferBlob => {
                let dir = if wrote {
                    DMA_BUF_SYNC_READ | DMA_BUF_SYNC_WRITE
                } else {
                    DMA_BUF_SYNC_READ
                };
                let _ = sys::dma_buf_sync(self.memory.fd.as_fd(), DMA_BUF_SYNC_END | dir);
            }
            MemoryKind::MmapFd { .. } if wrote => {
                let Backing::Mapped(map) = &self.backing else {
                    return;
                };
                // SAFETY: msync on exactly the range this object mapped and still owns.
                let _ = unsafe {
                    rustix::mm::msync(map.as_ptr().cast(), map.len(), rustix::mm::MsyncFlags::SYNC)
                };
            }
            _ => {}
        }
    }

    /// The bytes at `offset..offset + len`: borrowed from the shared mapping, or copied out of
    /// an unpinned file (a file that shrank under the range is GENERAL_FAILURE).
    ///
    /// Mapped memory is shared with the client, which may write it at any time; callers treat
    /// it as plain data (never as sizes or indexes they trust).
    pub fn read(&self, offset: usize, len: usize) -> Result<Cow<'_, [u8]>, ErrorStatus> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => return Err(general("range outside the pool")),
        }
        match &self.backing {
            Backing::Mapped(map) => {
                let ptr = map.as_ptr().wrapping_add(offset);
                // SAFETY: the range lies inside the live mapping (checked above) of a file
                // that cannot shrink, and the mapping outlives the returned borrow of `self`.
                // See the caveat on shared contents in the doc comment.
                Ok(Cow::Borrowed(unsafe {
                    std::slice::from_raw_parts(ptr, len)
                }))
            }
            Backing::Snapshot(copy) => Ok(Cow::Borrowed(&copy[offset..offset + len])),
            Backing::File => {
                let mut buf = vec![0u8; len];
                sys::pread_exact(
                    self.memory.fd.as_fd(),
                    self.file_offset + offset as u64,
                    &mut buf,
                )
                .map_err(|e| general(format!("cannot read the pool's file: {e}")))?;
                Ok(Cow::Owned(buf))
            }
        }
    }

    /// Copies `data` into the pool at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), ErrorStatus> {
        if !self.writable {
            return Err(general("pool is read-only"));
        }
        match offset.checked_add(data.len()) {
            Some(end) if end <= self.len => {}
            _ => return Err(general("range outside the pool")),
        }
        match &self.backing {
            Backing::Mapped(map) => map
                .write_at(offset, data)
                .map_err(|_| general("range outside the pool")),
            Backing::File => sys::pwrite_all(
                self.memory.fd.as_fd(),
                self.file_offset + offset as u64,
                data,
            )
            .map_err(|e| general(format!("cannot write the pool's file: {e}"))),
            Backing::Snapshot(_) => Err(general("pool is read-only")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn memfd(size: u64) -> Memory {
        let fd = sys::memfd_create(c"pool-test", size).unwrap();
        Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(fd),
            size,
        }
    }

    #[test]
    fn ashmem_maps_and_is_sealed_against_shrinking() {
        let m = memfd(8192);
        let p = MappedPool::map(&m).unwrap();
        p.write(100, &[1, 2, 3]).unwrap();
        assert_eq!(&*p.read(100, 3).unwrap(), &[1, 2, 3]);
        assert!(
            rustix::fs::ftruncate(&*m.fd, 10).is_err(),
            "shrinking a mapped pool must fail"
        );
    }

    #[test]
    fn hardware_buffer_is_never_mapped() {
        let m = Memory {
            kind: MemoryKind::HardwareBuffer,
            ..memfd(4096)
        };
        assert_eq!(
            MappedPool::map(&m).unwrap_err(),
            ErrorStatus::GeneralFailure
        );
    }

    #[test]
    fn pool_past_the_end_of_its_file_fails() {
        let m = Memory {
            size: 8192,
            ..memfd(4096)
        };
        assert_eq!(
            MappedPool::map(&m).unwrap_err(),
            ErrorStatus::GeneralFailure
        );
    }

    #[test]
    fn mmap_fd_respects_protection_and_offset() {
        let base = memfd(3 * 4096);
        let m = Memory {
            kind: MemoryKind::MmapFd {
                prot: libc::PROT_READ,
                offset: 4096,
            },
            fd: base.fd.clone(),
            size: 4096,
        };
        let p = MappedPool::map(&m).unwrap();
        assert!(!p.writable());
        assert!(p.write(0, &[1]).is_err());
        let bad = Memory {
            kind: MemoryKind::MmapFd {
                prot: libc::PROT_READ,
                offset: 100,
            },
            ..m
        };
        assert_eq!(
            MappedPool::map(&bad).unwrap_err(),
            ErrorStatus::GeneralFailure
        );
    }

    #[test]
    fn a_pipe_cannot_be_mapped() {
        let (r, _w) = rustix::pipe::pipe().unwrap();
        let m = Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(r),
            size: 4096,
        };
        assert_eq!(
            MappedPool::map(&m).unwrap_err(),
            ErrorStatus::GeneralFailure
        );
    }
}
