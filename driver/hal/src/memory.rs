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
//!
//! A mapped pool is memory the client can write at any moment, so the HAL never holds a
//! `&[u8]` or `&mut [u8]` into it (Rust's aliasing rules do not allow references to memory that
//! changes underneath them, and a value read twice through one may differ between the check
//! and the use). Every access is a copy through the mapping's volatile view
//! ([`Mapping::volatile`]): [`MappedPool::read`] into an owned buffer, [`MappedPool::write`]
//! out of one, [`MappedPool::constants`] into a private snapshot kept for the pool's lifetime.

use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock, PoisonError};

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
    /// The private copy [`MappedPool::constants`] takes on first use (mapped pools only).
    snapshot: OnceLock<Vec<u8>>,
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
        // Pin the size first and check it after: a client shrinking the file between a check
        // and the seal would otherwise leave a mapping past its end (SIGBUS on access).
        let size_pinned = if sys::is_dmabuf(fd) {
            true
        } else if sys::is_shmem(fd) {
            sys::seals(fd).contains(SealFlags::SHRINK)
                || rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK).is_ok()
        } else {
            false
        };
        crate::pool_fd::check_size(memory).map_err(|e| general(format!("pool: {e}")))?;
        // A read-only mapping of an ashmem region the client opened read-only (or sealed
        // against writing) still works, for reading: the pool is writable only when the
        // writable mapping was granted, so no write ever lands in a read-only mapping
        // (SIGSEGV). Unpinned pools are mapped too, once, to hold them to the HAL's rule that
        // a pool be mappable; the mapping is dropped at once.
        let (map, mapped_writable) = match Mapping::map_shared(fd, offset, len, writable) {
            Ok(map) => (map, writable),
            Err(_) if writable => (
                Mapping::map_shared(fd, offset, len, false)
                    .map_err(|e| general(format!("mmap failed: {e}")))?,
                false,
            ),
            Err(e) => return Err(general(format!("mmap failed: {e}"))),
        };
        let writable = mapped_writable
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
            snapshot: OnceLock::new(),
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
                snapshot: OnceLock::new(),
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

    /// A copy of the bytes at `offset..offset + len`, taken through the mapping's volatile
    /// view or out of an unpinned file (a file that shrank under the range is
    /// GENERAL_FAILURE). The copy is the caller's own: the client writing the pool meanwhile
    /// changes the pool, not the copy, so the caller may check a value and then use it.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, ErrorStatus> {
        let mut buf = vec![0u8; len];
        self.read_into(offset, &mut buf)?;
        Ok(buf)
    }

    /// [`MappedPool::read`] into `dst` (`dst.len()` bytes at `offset`).
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<(), ErrorStatus> {
        match offset.checked_add(dst.len()) {
            Some(end) if end <= self.len => {}
            _ => return Err(general("range outside the pool")),
        }
        match &self.backing {
            Backing::Mapped(map) => map
                .read_at(offset, dst)
                .map_err(|_| general("range outside the pool")),
            Backing::Snapshot(copy) => {
                dst.copy_from_slice(&copy[offset..offset + dst.len()]);
                Ok(())
            }
            Backing::File => sys::pread_exact(
                self.memory.fd.as_fd(),
                self.file_offset + offset as u64,
                dst,
            )
            .map_err(|e| general(format!("cannot read the pool's file: {e}"))),
        }
    }

    /// The whole pool as a model's constants, in memory the client cannot write: the private
    /// copy taken at preparation for an unpinned file, else one taken (through the volatile
    /// view) on the first call and kept as long as the pool.
    ///
    /// A copy, not the mapping, because the CPU executor reads constants through `&[u8]` and
    /// trusts them once checked (index tensors, shapes), and a client may write its pool at any
    /// time. Once, not per execution, because NN HAL forbids changing a model's constants after
    /// the model is finished: the snapshot is the model, and a client that breaks the rule gets
    /// the values of the snapshot's moment rather than a torn read. Taken on first use rather
    /// than at preparation so that models that only ever run on the device (which reads the
    /// pool itself) cost no copy and no second set of weights.
    pub fn constants(&self) -> Result<&[u8], ErrorStatus> {
        if let Backing::Snapshot(copy) = &self.backing {
            return Ok(copy);
        }
        if let Some(copy) = self.snapshot.get() {
            return Ok(copy);
        }
        self.begin_access(false);
        let copied = self.read(0, self.len);
        self.end_access(false);
        let copied = copied?;
        // Two threads may copy at once; one copy is kept (the same bytes, per the rule above).
        Ok(self.snapshot.get_or_init(|| copied))
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

/// How many pools [`RecentPools`] keeps mapped, at most.
pub const RECENT_POOLS: usize = 4;

/// The most bytes [`RecentPools`] keeps mapped: a larger pool is mapped per execution, where
/// the mapping's cost is small beside the execution's.
pub const RECENT_POOL_BYTES: usize = 64 << 20;

/// The pools the last regular executions of one prepared model mapped, kept mapped for the
/// next ones.
///
/// A client runs execution after execution on the same memory (an `ANeuralNetworksMemory`
/// lives across executions), and mapping a pool, faulting in the pages an execution touches
/// and unmapping it costs about 6 µs per execution on this project's test machine: as much as
/// a small model's whole run (`docs/performance.md`). A burst keeps its mappings by slot
/// (REFERENCE.md §5); regular executions find theirs here, by the identity of the file.
///
/// Reusing a mapping gives the execution what a new one would:
/// - **The same file.** The key is the file's `(st_dev, st_ino)`, read from the fd of this
///   request. A kept pool holds its own fd open, so its inode is not freed, and its number not
///   given to another file, while the entry lives.
/// - **The same range.** The key holds the request's kind (with mmap_fd's offset and
///   protection) and size. Only pools whose size cannot change are kept (a memfd sealed
///   against shrinking, a dma-buf), so the range checked when the pool was mapped is still
///   inside the file.
/// - **No more access than this fd grants.** The key holds the fd's access mode and the
///   file's seals (but `F_SEAL_SHRINK`, which every kept memfd has): a read-only fd, or a memfd
///   sealed against writing since, gets a mapping of its own, as it would without the cache.
///
/// What a client sees: up to [`RECENT_POOLS`] pools and [`RECENT_POOL_BYTES`] bytes of its
/// memory stay mapped here after its executions return, until newer pools push them out or the
/// prepared model is freed; meanwhile a kept memfd cannot be sealed with `F_SEAL_WRITE` (the
/// kernel refuses while a writable shared mapping exists), as with a burst's cache.
#[derive(Debug, Default)]
pub struct RecentPools {
    /// Most recently used first.
    kept: std::sync::Mutex<KeptPools>,
}

type KeptPools = std::collections::VecDeque<(PoolIdentity, Arc<MappedPool>)>;

/// What makes two request pools the same mapping (see [`RecentPools`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PoolIdentity {
    dev: u64,
    ino: u64,
    kind: MemoryKind,
    size: u64,
    access: rustix::fs::OFlags,
    seals: SealFlags,
}

impl PoolIdentity {
    /// The identity of `memory`'s file as its fd shows it now; None when the fd cannot be
    /// asked (the mapping then fails with its own error).
    fn of(memory: &Memory) -> Option<Self> {
        let fd = memory.fd.as_fd();
        let st = rustix::fs::fstat(fd).ok()?;
        let access = rustix::fs::fcntl_getfl(fd).ok()? & rustix::fs::OFlags::RWMODE;
        Some(Self {
            dev: st.st_dev,
            ino: st.st_ino,
            kind: memory.kind,
            size: memory.size,
            access,
            seals: sys::seals(fd) - SealFlags::SHRINK,
        })
    }
}

impl RecentPools {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// `memory` mapped: the kept mapping of the same pool, or a new one ([`MappedPool::map`]),
    /// kept when its size is pinned and it fits [`RECENT_POOL_BYTES`].
    pub fn map(&self, memory: &Memory) -> Result<Arc<MappedPool>, ErrorStatus> {
        let Some(id) = PoolIdentity::of(memory) else {
            return MappedPool::map(memory).map(Arc::new);
        };
        if let Some(pool) = self.find(&id) {
            return Ok(pool);
        }
        // Mapped without the lock: a file whose fstat or mmap blocks (one on FUSE) holds up
        // this execution only.
        let pool = Arc::new(MappedPool::map(memory)?);
        if !matches!(pool.backing, Backing::Mapped(_)) || pool.len > RECENT_POOL_BYTES {
            return Ok(pool);
        }
        let mut kept = self.lock();
        if !kept.iter().any(|(k, _)| *k == id) {
            kept.push_front((id, pool.clone()));
            let mut bytes = 0usize;
            let within = kept
                .iter()
                .take_while(|(_, p)| {
                    bytes += p.len;
                    bytes <= RECENT_POOL_BYTES
                })
                .count();
            kept.truncate(within.min(RECENT_POOLS));
        }
        Ok(pool)
    }

    /// The kept pool `id`, made the most recently used.
    fn find(&self, id: &PoolIdentity) -> Option<Arc<MappedPool>> {
        let mut kept = self.lock();
        let at = kept.iter().position(|(k, _)| k == id)?;
        let entry = kept.remove(at)?;
        let pool = entry.1.clone();
        kept.push_front(entry);
        Some(pool)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeptPools> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many pools are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::OFlags;
    use std::os::fd::AsRawFd;

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
    fn reads_are_copies_the_client_cannot_change_afterwards() {
        let m = memfd(4096);
        let client = Mapping::map_shared(m.fd.as_fd(), 0, 4096, true).unwrap();
        client.write_at(0, &[7; 16]).unwrap();
        let p = MappedPool::map(&m).unwrap();
        let copy = p.read(0, 16).unwrap();
        client.write_at(0, &[9; 16]).unwrap();
        assert_eq!(copy, [7; 16], "the copy is ours");
        let mut into = [0u8; 4];
        p.read_into(12, &mut into).unwrap();
        assert_eq!(into, [9; 4], "a new read sees the client's write");
        assert_eq!(
            p.read_into(4094, &mut into),
            Err(ErrorStatus::GeneralFailure)
        );
    }

    #[test]
    fn constants_are_snapshotted_once_on_first_use() {
        let m = memfd(8192);
        let client = Mapping::map_shared(m.fd.as_fd(), 0, 8192, true).unwrap();
        client.write_at(100, &[1, 2, 3]).unwrap();
        let p = MappedPool::map_constants(&m).unwrap();
        let first = p.constants().unwrap();
        assert_eq!(first.len(), 8192);
        assert_eq!(&first[100..103], &[1, 2, 3]);
        // A client breaking the rule (constants are fixed once the model is finished) changes
        // its pool, not the model the HAL runs.
        client.write_at(100, &[4, 5, 6]).unwrap();
        assert_eq!(&p.constants().unwrap()[100..103], &[1, 2, 3]);
        assert_eq!(&*p.read(100, 3).unwrap(), &[4, 5, 6]);
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

    /// `memory` through a new fd of its own (as the service receives one per request).
    fn again(memory: &Memory) -> Memory {
        Memory {
            fd: Arc::new(memory.fd.try_clone().unwrap()),
            ..memory.clone()
        }
    }

    #[test]
    fn recent_pools_map_a_pool_once_across_executions_through_new_fds() {
        let recent = RecentPools::new();
        let m = memfd(4096);
        let first = recent.map(&m).unwrap();
        let second = recent.map(&again(&m)).unwrap();
        assert!(Arc::ptr_eq(&first, &second), "the kept mapping is reused");
        assert_eq!(recent.len(), 1);
        // The mapping is shared, not a snapshot: the client's writes show.
        let client = Mapping::map_shared(m.fd.as_fd(), 0, 4096, true).unwrap();
        client.write_at(8, &[5; 4]).unwrap();
        assert_eq!(second.read(8, 4).unwrap(), [5; 4]);
    }

    #[test]
    fn recent_pools_tell_files_apart_and_keep_the_newest_few() {
        let recent = RecentPools::new();
        let pools: Vec<Memory> = (0..RECENT_POOLS + 1).map(|_| memfd(4096)).collect();
        let mapped: Vec<_> = pools.iter().map(|m| recent.map(m).unwrap()).collect();
        for (i, (m, p)) in pools.iter().zip(&mapped).enumerate() {
            p.write(0, &[i as u8]).unwrap();
            let client = Mapping::map_shared(m.fd.as_fd(), 0, 4096, false).unwrap();
            let mut b = [0u8];
            client.read_at(0, &mut b).unwrap();
            assert_eq!(b, [i as u8], "pool {i} is its own file");
        }
        assert_eq!(recent.len(), RECENT_POOLS);
        let oldest = recent.map(&pools[0]).unwrap();
        assert!(!Arc::ptr_eq(&oldest, &mapped[0]), "the oldest was let go");
        let newest = recent.map(&pools[RECENT_POOLS]).unwrap();
        assert!(Arc::ptr_eq(&newest, &mapped[RECENT_POOLS]));
    }

    #[test]
    fn recent_pools_never_hand_a_writable_mapping_to_a_read_only_fd() {
        let recent = RecentPools::new();
        let m = memfd(4096);
        let writable = recent.map(&m).unwrap();
        assert!(writable.writable());
        let path = format!("/proc/self/fd/{}", m.fd.as_raw_fd());
        let ro =
            rustix::fs::open(path.as_str(), OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap();
        let read_only = recent
            .map(&Memory {
                fd: Arc::new(ro),
                ..m.clone()
            })
            .unwrap();
        assert!(!Arc::ptr_eq(&writable, &read_only));
        assert!(!read_only.writable());
        assert_eq!(read_only.write(0, &[1]), Err(ErrorStatus::GeneralFailure));
    }

    #[test]
    fn recent_pools_map_anew_once_the_client_seals_against_writing() {
        let recent = RecentPools::new();
        let m = memfd(4096);
        let before = recent.map(&m).unwrap();
        rustix::fs::fcntl_add_seals(&*m.fd, SealFlags::FUTURE_WRITE).unwrap();
        let after = recent.map(&m).unwrap();
        assert!(!Arc::ptr_eq(&before, &after));
        assert!(!after.writable(), "a new mapping follows the new seal");
    }

    #[test]
    fn recent_pools_keep_neither_unpinned_files_nor_large_pools() {
        let recent = RecentPools::new();
        // A memfd that cannot take the shrink seal is used through pread/pwrite: not kept.
        let unpinned = memfd(4096);
        rustix::fs::fcntl_add_seals(&*unpinned.fd, SealFlags::SEAL).unwrap();
        let p = recent.map(&unpinned).unwrap();
        p.write(0, &[3]).unwrap();
        assert_eq!(p.read(0, 1).unwrap(), [3]);
        assert!(recent.is_empty());
        let large = memfd(RECENT_POOL_BYTES as u64 + 4096);
        recent.map(&large).unwrap();
        assert!(recent.is_empty());
        // A pool of the request's size differs from one of the whole file.
        let whole = memfd(8192);
        let part = Memory {
            size: 4096,
            ..whole.clone()
        };
        let (a, b) = (recent.map(&whole).unwrap(), recent.map(&part).unwrap());
        assert_eq!((a.len(), b.len()), (8192, 4096));
        assert_eq!(recent.len(), 2);
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
