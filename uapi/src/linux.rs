//! The Linux kernel's own ABI structs this stack passes to ioctls of other drivers: dma-heap
//! allocation, udmabuf creation and dma-buf CPU-access sync (REFERENCE.md §8). Laid out as the
//! kernel's `include/uapi/linux/{dma-heap,udmabuf,dma-buf}.h` define them, checked at compile
//! time like [`crate::abi`]; their ioctl numbers are in [`crate::ioctl`] with ours, and the
//! calls are in [`crate::sys`].

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The system dma-heap: page-backed dma-bufs (`CONFIG_DMABUF_HEAPS_SYSTEM`).
pub const DMA_HEAP_SYSTEM: &str = "/dev/dma_heap/system";
/// The udmabuf device: dma-bufs over memfd pages (`CONFIG_UDMABUF`).
pub const UDMABUF: &str = "/dev/udmabuf";

/// `struct dma_heap_allocation_data`, the argument of `DMA_HEAP_IOCTL_ALLOC`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DmaHeapAllocationData {
    /// In: bytes to allocate (the heap rounds up to pages).
    pub len: u64,
    /// Out: the new dma-buf fd.
    pub fd: u32,
    /// In: flags of the new fd: an access mode and `O_CLOEXEC` ([`DMA_HEAP_VALID_FD_FLAGS`]).
    pub fd_flags: u32,
    /// In: heap-specific flags; none are defined, must be zero.
    pub heap_flags: u64,
}

/// The fd flags `DMA_HEAP_IOCTL_ALLOC` accepts (`DMA_HEAP_VALID_FD_FLAGS`).
pub const DMA_HEAP_VALID_FD_FLAGS: u32 = (libc::O_CLOEXEC | libc::O_ACCMODE) as u32;

/// `struct udmabuf_create`, the argument of `UDMABUF_CREATE`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct UdmabufCreate {
    /// In: a memfd sealed with `F_SEAL_SHRINK` and not `F_SEAL_WRITE`.
    pub memfd: u32,
    /// In: `UDMABUF_FLAGS_*`.
    pub flags: u32,
    /// In: page-aligned offset into the memfd.
    pub offset: u64,
    /// In: page-aligned size.
    pub size: u64,
}

/// `UDMABUF_FLAGS_CLOEXEC`: the new dma-buf fd is close-on-exec.
pub const UDMABUF_FLAGS_CLOEXEC: u32 = 0x01;

/// `struct dma_buf_sync`, the argument of `DMA_BUF_IOCTL_SYNC`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DmaBufSync {
    /// In: `DMA_BUF_SYNC_START` or `_END`, with `_READ` and/or `_WRITE`.
    pub flags: u64,
}

/// dma-buf sync: CPU reads (`1 << 0`).
pub const DMA_BUF_SYNC_READ: u64 = 1;
/// dma-buf sync: CPU writes (`2 << 0`).
pub const DMA_BUF_SYNC_WRITE: u64 = 2;
/// dma-buf sync: start of CPU access (`0 << 2`).
pub const DMA_BUF_SYNC_START: u64 = 0;
/// dma-buf sync: end of CPU access (`1 << 2`).
pub const DMA_BUF_SYNC_END: u64 = 4;

// Compile-time layout checks: every struct, every field, as the kernel headers have them.
crate::abi::assert_layout!(DmaHeapAllocationData, size = 24, align = 8,
    { len @ 0, fd @ 8, fd_flags @ 12, heap_flags @ 16 });
crate::abi::assert_layout!(UdmabufCreate, size = 24, align = 8,
    { memfd @ 0, flags @ 4, offset @ 8, size @ 16 });
crate::abi::assert_layout!(DmaBufSync, size = 8, align = 8, { flags @ 0 });
