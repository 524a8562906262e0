//! Creating memory pools on the client side, one function per HAL pool kind (REFERENCE.md §3),
//! and [`MappedClientPool`] for a client to write its inputs and read its outputs.
//!
//! | HAL name | here | what the service does with it |
//! |---|---|---|
//! | `ashmem` | [`ashmem`]: a memfd created with `MFD_ALLOW_SEALING`, not sealed yet | the device imports it; the CPU path maps it whole and seals it against shrinking |
//! | `mmap_fd` | [`mmap_fd`]: any mappable fd (a file, a memfd) with protection and offset | imported / mapped at the offset with the protection; files re-checked for size before use |
//! | `hardware_buffer_blob` | [`hardware_buffer_blob`]: a dma-buf from `/dev/dma_heap/system`, else a udmabuf over a memfd sealed against shrinking, else a memfd sealed against any size change standing in ([`BlobSource`]) | imported; the CPU path maps it with `DMA_BUF_IOCTL_SYNC` around its access |
//! | `hardware_buffer` | [`hardware_buffer`]: a buffer from the same sources, described with **size 0** | imported by the device, never mapped by the HAL; execution I/O only, used whole |
//!
//! `hardware_buffer` has size 0 because the HAL cannot know the size of a non-BLOB
//! `AHardwareBuffer` (REFERENCE.md §3): a request argument in one must use the whole buffer
//! (offset = length = 0), and the device sizes it itself when importing it.
//!
//! The dma-heap and udmabuf ioctls are issued directly (`nnaccel_uapi::sys::dma_heap_alloc`,
//! `udmabuf_create`, with the kernel's structs from `nnaccel_uapi::linux`), the two calls
//! `dma-heap`/`udmabuf` crates would wrap; it keeps the driver free of another dependency.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use nnaccel_uapi::sys::{
    self, DMA_BUF_SYNC_END, DMA_BUF_SYNC_READ, DMA_BUF_SYNC_START, DMA_BUF_SYNC_WRITE, Mapping,
    VolatileSlice,
};
use rustix::fs::{MemfdFlags, SealFlags};

use nnaccel_hal::types::{Memory, MemoryKind};

/// The system dma-heap and the udmabuf device.
pub use nnaccel_uapi::linux::{DMA_HEAP_SYSTEM, UDMABUF};

const PAGE: u64 = 4096;

/// Where this machine's `hardware_buffer_blob` memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlobSource {
    /// A dma-buf allocated from `/dev/dma_heap/system`.
    DmaHeap,
    /// A udmabuf (`/dev/udmabuf`) over a memfd sealed against shrinking.
    Udmabuf,
    /// No dma-buf source: a memfd sealed against any size change stands in.
    SealedMemfd,
}

impl BlobSource {
    /// Short name: `dma-heap`, `udmabuf` or `sealed-memfd`.
    pub fn name(self) -> &'static str {
        match self {
            Self::DmaHeap => "dma-heap",
            Self::Udmabuf => "udmabuf",
            Self::SealedMemfd => "sealed-memfd",
        }
    }

    /// One line for `nnaccelctl info`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::DmaHeap => "dma-bufs from /dev/dma_heap/system",
            Self::Udmabuf => "udmabufs over sealed memfds (/dev/udmabuf; no /dev/dma_heap/system)",
            Self::SealedMemfd => {
                "sealed memfds standing in (neither /dev/dma_heap/system nor /dev/udmabuf usable)"
            }
        }
    }

    /// Whether buffers from this source are dma-bufs (CPU access needs `DMA_BUF_IOCTL_SYNC`).
    pub fn is_dma_buf(self) -> bool {
        !matches!(self, Self::SealedMemfd)
    }
}

impl fmt::Display for BlobSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn memfd(name: &std::ffi::CStr, size: u64) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, size)?;
    Ok(fd)
}

fn page_round(size: u64) -> io::Result<u64> {
    if size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a pool of 0 bytes",
        ));
    }
    size.checked_next_multiple_of(PAGE)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pool size overflows"))
}

/// An `ashmem` pool of `size` bytes: a zeroed memfd that allows sealing (the service seals it
/// against shrinking when it maps it; the client can still write it).
pub fn ashmem(size: u64) -> io::Result<Memory> {
    if size == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a pool of 0 bytes",
        ));
    }
    Ok(Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(memfd(c"nnaccel-ashmem", size)?),
        size,
    })
}

/// An `mmap_fd` pool: `size` bytes of `file` at `offset` (page aligned for the HAL to map it),
/// mapped with `prot` (`PROT_READ` and/or `PROT_WRITE`).
pub fn mmap_fd(file: OwnedFd, offset: u64, size: u64, prot: i32) -> Memory {
    Memory {
        kind: MemoryKind::MmapFd { prot, offset },
        fd: Arc::new(file),
        size,
    }
}

/// A dma-buf of `size` bytes (rounded up to whole pages) from `/dev/dma_heap/system`.
fn from_dma_heap(size: u64) -> io::Result<OwnedFd> {
    sys::dma_heap_alloc(Path::new(DMA_HEAP_SYSTEM), page_round(size)?)
}

/// A udmabuf of `size` bytes (rounded up to whole pages) over a fresh memfd sealed against
/// shrinking (as udmabuf requires; not against writing).
fn from_udmabuf(size: u64) -> io::Result<OwnedFd> {
    let len = page_round(size)?;
    // Fail before making the memfd where there is no udmabuf device.
    if !Path::new(UDMABUF).exists() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let backing = memfd(c"nnaccel-udmabuf", len)?;
    rustix::fs::fcntl_add_seals(&backing, SealFlags::SHRINK)?;
    // The udmabuf holds its own reference to the memfd's pages, so `backing` may close.
    sys::udmabuf_create(backing.as_fd(), 0, len)
}

/// A memfd of `size` bytes (rounded up to whole pages) sealed against shrinking and growing:
/// the stand-in for a dma-buf where the machine has none.
fn sealed_memfd(size: u64) -> io::Result<OwnedFd> {
    let fd = memfd(c"nnaccel-blob", page_round(size)?)?;
    sys::seal_size(fd.as_fd())?;
    Ok(fd)
}

/// Memory of `size` bytes from the first source that works: dma-heap, udmabuf, sealed memfd.
fn allocate_blob(size: u64) -> io::Result<(OwnedFd, BlobSource)> {
    page_round(size)?;
    match from_dma_heap(size) {
        Ok(fd) => return Ok((fd, BlobSource::DmaHeap)),
        Err(e) => tracing::trace!("{DMA_HEAP_SYSTEM}: {e}"),
    }
    match from_udmabuf(size) {
        Ok(fd) => return Ok((fd, BlobSource::Udmabuf)),
        Err(e) => tracing::trace!("{UDMABUF}: {e}"),
    }
    Ok((sealed_memfd(size)?, BlobSource::SealedMemfd))
}

/// A `hardware_buffer_blob` pool of `size` bytes, and where it came from.
pub fn hardware_buffer_blob(size: u64) -> io::Result<(Memory, BlobSource)> {
    let (fd, source) = allocate_blob(size)?;
    Ok((
        Memory {
            kind: MemoryKind::HardwareBufferBlob,
            fd: Arc::new(fd),
            size,
        },
        source,
    ))
}

/// A `hardware_buffer_blob` pool of `size` bytes from `source` only (for tests and benches
/// that must exercise one source): `NotFound`/the device's error when it is unusable here.
pub fn hardware_buffer_blob_from(source: BlobSource, size: u64) -> io::Result<Memory> {
    page_round(size)?;
    let fd = match source {
        BlobSource::DmaHeap => from_dma_heap(size)?,
        BlobSource::Udmabuf => from_udmabuf(size)?,
        BlobSource::SealedMemfd => sealed_memfd(size)?,
    };
    Ok(Memory {
        kind: MemoryKind::HardwareBufferBlob,
        fd: Arc::new(fd),
        size,
    })
}

/// A `hardware_buffer` (non-BLOB) pool with room for at least `size` bytes, from the same
/// sources as [`hardware_buffer_blob`]. Its [`Memory::size`] is 0: the HAL cannot know the
/// size of such a buffer, never maps it, and arguments in it use the whole buffer.
pub fn hardware_buffer(size: u64) -> io::Result<Memory> {
    let (fd, _) = allocate_blob(size)?;
    Ok(Memory {
        kind: MemoryKind::HardwareBuffer,
        fd: Arc::new(fd),
        size: 0,
    })
}

/// Which [`BlobSource`] this machine gives, found once by allocating (and freeing at once) one
/// page from each source in turn.
pub fn blob_source() -> BlobSource {
    static SOURCE: OnceLock<BlobSource> = OnceLock::new();
    *SOURCE.get_or_init(|| allocate_blob(PAGE).map_or(BlobSource::SealedMemfd, |(_, s)| s))
}

/// A client's mapping of one of its own pools, to write inputs and read outputs. Accesses to
/// a dma-buf are bracketed with `DMA_BUF_IOCTL_SYNC` (START before, END after).
///
/// The whole pool is mapped: `mmap_fd` at its offset with its protection, a `hardware_buffer`
/// (size 0) over the whole buffer (a client may map its own buffer; only the HAL may not).
#[derive(Debug)]
pub struct MappedClientPool {
    map: Mapping,
    memory: Memory,
    dma_buf: bool,
    writable: bool,
}

impl MappedClientPool {
    /// Maps `memory` (which must be mappable: a pipe is not).
    pub fn new(memory: &Memory) -> io::Result<Self> {
        let fd = memory.fd.as_fd();
        let (offset, writable) = match memory.kind {
            MemoryKind::MmapFd { prot, offset } => (offset, prot & libc::PROT_WRITE != 0),
            _ => (0, true),
        };
        let size = if memory.size == 0 {
            sys::fd_size(fd)?.saturating_sub(offset)
        } else {
            memory.size
        };
        let len = usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let map = Mapping::map_shared(fd, offset, len, writable)?;
        Ok(Self {
            map,
            memory: memory.clone(),
            dma_buf: sys::is_dmabuf(fd),
            writable,
        })
    }

    /// The pool.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is mapped (never).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether the client's mapping is writable.
    pub fn writable(&self) -> bool {
        self.writable
    }

    fn sync(&self, flags: u64) -> io::Result<()> {
        if self.dma_buf {
            sys::dma_buf_sync(self.memory.fd.as_fd(), flags)
        } else {
            Ok(())
        }
    }

    /// Copies `data` into the pool at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        self.sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_WRITE)?;
        let r = self.map.write_at(offset, data);
        self.sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE)?;
        r
    }

    /// Copies `len` bytes out of the pool at `offset`.
    pub fn read(&self, offset: usize, len: usize) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.sync(DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ)?;
        let r = self.map.read_at(offset, &mut out);
        self.sync(DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ)?;
        r.map(|()| out)
    }

    /// Writes f32 values (little-endian) at `offset`.
    pub fn write_f32(&self, offset: usize, values: &[f32]) -> io::Result<()> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(offset, &bytes)
    }

    /// Reads `n` f32 values (little-endian) at `offset`.
    pub fn read_f32(&self, offset: usize, n: usize) -> io::Result<Vec<f32>> {
        let len = n
            .checked_mul(4)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(self
            .read(offset, len)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// The client's mapping as a volatile view, for code that fills large inputs in place.
    /// Never a `&mut [u8]`: the service (or the device) writes outputs into the same memory
    /// while the client holds the mapping. Bracket dma-buf access with `DMA_BUF_IOCTL_SYNC`
    /// as [`MappedClientPool::write`] does.
    pub fn volatile(&self) -> VolatileSlice<'_> {
        self.map.volatile()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use nnaccel_hal::{ErrorStatus, MappedPool};

    #[test]
    fn ashmem_is_a_sealable_unsealed_memfd() {
        let m = ashmem(10_000).unwrap();
        assert_eq!(m.kind, MemoryKind::Ashmem);
        assert_eq!(m.size, 10_000);
        assert!(sys::is_shmem(m.fd.as_fd()));
        assert_eq!(sys::file_size(m.fd.as_fd()).unwrap(), 10_000);
        assert!(
            sys::seals(m.fd.as_fd()).is_empty(),
            "sealing allowed, nothing sealed yet"
        );
        rustix::fs::fcntl_add_seals(&*m.fd, SealFlags::SHRINK).expect("MFD_ALLOW_SEALING");
        assert!(ashmem(0).is_err());
    }

    #[test]
    fn mmap_fd_describes_the_file() {
        let f = memfd(c"t", 3 * PAGE).unwrap();
        let m = mmap_fd(f, PAGE, 2 * PAGE, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(
            m.kind,
            MemoryKind::MmapFd {
                prot: libc::PROT_READ | libc::PROT_WRITE,
                offset: PAGE
            }
        );
        assert_eq!(m.size, 2 * PAGE);
        let client = MappedClientPool::new(&m).unwrap();
        client.write_f32(8, &[1.5, 2.5]).unwrap();
        let hal = MappedPool::map(&m).unwrap();
        assert_eq!(
            &*hal.read(8, 8).unwrap(),
            &[1.5f32.to_le_bytes(), 2.5f32.to_le_bytes()].concat()[..]
        );
        // The client wrote at file offset PAGE + 8.
        let mut buf = [0u8; 4];
        rustix::io::pread(&*m.fd, &mut buf, PAGE + 8).unwrap();
        assert_eq!(f32::from_le_bytes(buf), 1.5);
    }

    #[test]
    fn the_clients_volatile_view_writes_what_the_hal_reads() {
        let m = ashmem(PAGE).unwrap();
        let client = MappedClientPool::new(&m).unwrap();
        let view = client.volatile();
        assert_eq!(view.len(), PAGE as usize);
        view.subslice(16, 4)
            .unwrap()
            .copy_from(&2.5f32.to_le_bytes());
        let hal = MappedPool::map(&m).unwrap();
        assert_eq!(hal.read(16, 4).unwrap(), 2.5f32.to_le_bytes());
        assert_eq!(client.read_f32(16, 1).unwrap(), vec![2.5]);
    }

    #[test]
    fn read_only_mmap_fd_refuses_client_writes() {
        let m = mmap_fd(memfd(c"t", PAGE).unwrap(), 0, PAGE, libc::PROT_READ);
        let client = MappedClientPool::new(&m).unwrap();
        assert!(!client.writable());
        assert!(client.write(0, &[1]).is_err());
        assert_eq!(client.read(0, 4).unwrap(), vec![0; 4]);
    }

    #[test]
    fn blobs_come_from_the_machines_source_and_the_hal_sees_client_writes() {
        let (m, source) = hardware_buffer_blob(5000).unwrap();
        assert_eq!(source, blob_source());
        assert_eq!(m.kind, MemoryKind::HardwareBufferBlob);
        assert_eq!(m.size, 5000);
        assert!(sys::fd_size(m.fd.as_fd()).unwrap() >= 5000);
        assert_eq!(sys::is_dmabuf(m.fd.as_fd()), source.is_dma_buf());
        let client = MappedClientPool::new(&m).unwrap();
        client.write_f32(4096, &[7.0]).unwrap();
        let hal = MappedPool::map(&m).unwrap();
        hal.begin_access(false);
        assert_eq!(&*hal.read(4096, 4).unwrap(), &7.0f32.to_le_bytes());
        hal.end_access(false);
        hal.write(0, &3.0f32.to_le_bytes()).unwrap();
        assert_eq!(client.read_f32(0, 1).unwrap(), vec![3.0]);
    }

    #[test]
    fn the_sealed_memfd_stand_in_cannot_change_size() {
        let fd = sealed_memfd(100).unwrap();
        assert_eq!(sys::file_size(fd.as_fd()).unwrap(), PAGE);
        assert!(
            rustix::fs::ftruncate(&fd, 10).is_err(),
            "shrinking must fail"
        );
        assert!(
            rustix::fs::ftruncate(&fd, 2 * PAGE).is_err(),
            "growing must fail"
        );
        let s = sys::seals(fd.as_fd());
        assert!(s.contains(SealFlags::SHRINK | SealFlags::GROW));
        assert!(!s.contains(SealFlags::WRITE));
    }

    #[test]
    fn dma_heap_and_udmabuf_work_where_present() {
        for (path, alloc) in [
            (
                DMA_HEAP_SYSTEM,
                from_dma_heap as fn(u64) -> io::Result<OwnedFd>,
            ),
            (UDMABUF, from_udmabuf),
        ] {
            if !std::path::Path::new(path).exists() {
                eprintln!("{path} absent: not tested here");
                continue;
            }
            let fd = alloc(100).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert!(sys::is_dmabuf(fd.as_fd()), "{path} gives dma-bufs");
            assert_eq!(
                sys::fd_size(fd.as_fd()).unwrap(),
                PAGE,
                "{path}: page rounded"
            );
            sys::dma_buf_sync(fd.as_fd(), DMA_BUF_SYNC_START | DMA_BUF_SYNC_WRITE).unwrap();
            sys::dma_buf_sync(fd.as_fd(), DMA_BUF_SYNC_END | DMA_BUF_SYNC_WRITE).unwrap();
        }
    }

    #[test]
    fn hardware_buffers_have_size_zero_and_the_hal_never_maps_them() {
        let m = hardware_buffer(10_000).unwrap();
        assert_eq!(m.kind, MemoryKind::HardwareBuffer);
        assert_eq!(m.size, 0);
        assert!(sys::fd_size(m.fd.as_fd()).unwrap() >= 10_000);
        assert_eq!(
            MappedPool::map(&m).unwrap_err(),
            ErrorStatus::GeneralFailure
        );
        // The client maps the whole buffer.
        let client = MappedClientPool::new(&m).unwrap();
        assert!(client.len() >= 10_000);
        client.write_f32(9996, &[4.0]).unwrap();
        assert_eq!(client.read_f32(9996, 1).unwrap(), vec![4.0]);
    }

    #[test]
    fn blob_source_names_and_descriptions() {
        for s in [
            BlobSource::DmaHeap,
            BlobSource::Udmabuf,
            BlobSource::SealedMemfd,
        ] {
            assert_eq!(s.to_string(), s.name());
            assert!(!s.describe().is_empty());
        }
        assert!(!BlobSource::SealedMemfd.is_dma_buf());
        assert!(hardware_buffer_blob(0).is_err());
    }

    #[test]
    fn a_pipe_cannot_be_mapped_by_the_client_either() {
        let (r, _w) = rustix::pipe::pipe().unwrap();
        let m = Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(r),
            size: PAGE,
        };
        assert!(MappedClientPool::new(&m).is_err());
    }
}
