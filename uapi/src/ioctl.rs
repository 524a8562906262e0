//! The ioctl number table: every command of `/dev/nnaccel` in one place.
//!
//! Numbers are built exactly as the kernel's `_IOC()` macro builds them (asm-generic layout:
//! nr in bits 0..8, type in 8..16, size in 16..30, direction in 30..32). The type code is
//! [`NNACCEL_IOCTL_TYPE`]; see `docs/uapi.md` for why that value was chosen.

use crate::abi::{
    BoClose, BoCreate, BoExport, BoImport, BoInfo, GetParam, JobCancel, ProgramCreate,
    ProgramDestroy, QueueCreate, QueueDestroy, Submit, Wait,
};
use crate::linux::{DmaBufSync, DmaHeapAllocationData, UdmabufCreate};

/// The ioctl type code of nnaccel. 0xBA is not listed in the kernel's
/// `Documentation/userspace-api/ioctl/ioctl-number.rst` (the neighbours 0xB6/0xB7 are FPGA DFL,
/// remoteproc and nsfs; 0xC0 is iowarrior), so the whole 0x00–0xFF sequence space is ours.
pub const NNACCEL_IOCTL_TYPE: u32 = 0xBA;

/// No data transfer.
pub const IOC_NONE: u32 = 0;
/// Userspace writes, the device reads (`_IOW`).
pub const IOC_WRITE: u32 = 1;
/// The device writes, userspace reads (`_IOR`).
pub const IOC_READ: u32 = 2;

const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// Largest argument size the ioctl size field can carry (and FUSE will copy): 16383 bytes.
pub const IOC_SIZE_MAX: usize = (1 << IOC_SIZEBITS) - 1;

/// `_IOC(dir, type, nr, size)`.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(
        size <= IOC_SIZE_MAX,
        "ioctl argument struct too large for the size field"
    );
    (dir << IOC_DIRSHIFT)
        | (ty << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}

/// `_IOC_DIR(cmd)`.
pub const fn ioc_dir(cmd: u32) -> u32 {
    (cmd >> IOC_DIRSHIFT) & 0x3
}
/// `_IOC_TYPE(cmd)`.
pub const fn ioc_type(cmd: u32) -> u32 {
    (cmd >> IOC_TYPESHIFT) & 0xff
}
/// `_IOC_NR(cmd)`.
pub const fn ioc_nr(cmd: u32) -> u32 {
    (cmd >> IOC_NRSHIFT) & 0xff
}
/// `_IOC_SIZE(cmd)`.
pub const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

const fn iowr<T>(nr: u32) -> u32 {
    ioc(IOC_READ | IOC_WRITE, NNACCEL_IOCTL_TYPE, nr, size_of::<T>())
}
const fn iow<T>(nr: u32) -> u32 {
    ioc(IOC_WRITE, NNACCEL_IOCTL_TYPE, nr, size_of::<T>())
}

/// Query one parameter (API version, capabilities, limits, live-object counters).
pub const NNACCEL_IOCTL_GET_PARAM: u32 = iowr::<GetParam>(0x00);
/// Allocate a buffer object in device memory.
pub const NNACCEL_IOCTL_BO_CREATE: u32 = iowr::<BoCreate>(0x01);
/// Import a caller fd (memfd, dma-buf, other mappable file) as a buffer object.
pub const NNACCEL_IOCTL_BO_IMPORT: u32 = iowr::<BoImport>(0x02);
/// Export a buffer object as an fd, delivered over a caller-named Unix socket.
pub const NNACCEL_IOCTL_BO_EXPORT: u32 = iowr::<BoExport>(0x03);
/// Describe a buffer object.
pub const NNACCEL_IOCTL_BO_INFO: u32 = iowr::<BoInfo>(0x04);
/// Drop the caller's handle to a buffer object.
pub const NNACCEL_IOCTL_BO_CLOSE: u32 = iow::<BoClose>(0x05);
/// Validate and load a compiled program.
pub const NNACCEL_IOCTL_PROGRAM_CREATE: u32 = iowr::<ProgramCreate>(0x06);
/// Unload a program.
pub const NNACCEL_IOCTL_PROGRAM_DESTROY: u32 = iow::<ProgramDestroy>(0x07);
/// Register a submission/completion ring that lives in a caller memfd.
pub const NNACCEL_IOCTL_QUEUE_CREATE: u32 = iowr::<QueueCreate>(0x08);
/// Stop and unregister a queue.
pub const NNACCEL_IOCTL_QUEUE_DESTROY: u32 = iow::<QueueDestroy>(0x09);
/// Submit one job on the file's default queue (for simple clients).
pub const NNACCEL_IOCTL_SUBMIT: u32 = iowr::<Submit>(0x0A);
/// Wait for a sequence number on a queue, with an absolute CLOCK_MONOTONIC deadline.
pub const NNACCEL_IOCTL_WAIT: u32 = iowr::<Wait>(0x0B);
/// End one submitted job; once it returned the device never writes that job's outputs (API 1.1).
pub const NNACCEL_IOCTL_JOB_CANCEL: u32 = iow::<JobCancel>(0x0C);

/// Every command with its name, for tables, tracing and golden tests.
pub const ALL_IOCTLS: &[(&str, u32)] = &[
    ("GET_PARAM", NNACCEL_IOCTL_GET_PARAM),
    ("BO_CREATE", NNACCEL_IOCTL_BO_CREATE),
    ("BO_IMPORT", NNACCEL_IOCTL_BO_IMPORT),
    ("BO_EXPORT", NNACCEL_IOCTL_BO_EXPORT),
    ("BO_INFO", NNACCEL_IOCTL_BO_INFO),
    ("BO_CLOSE", NNACCEL_IOCTL_BO_CLOSE),
    ("PROGRAM_CREATE", NNACCEL_IOCTL_PROGRAM_CREATE),
    ("PROGRAM_DESTROY", NNACCEL_IOCTL_PROGRAM_DESTROY),
    ("QUEUE_CREATE", NNACCEL_IOCTL_QUEUE_CREATE),
    ("QUEUE_DESTROY", NNACCEL_IOCTL_QUEUE_DESTROY),
    ("SUBMIT", NNACCEL_IOCTL_SUBMIT),
    ("WAIT", NNACCEL_IOCTL_WAIT),
    ("JOB_CANCEL", NNACCEL_IOCTL_JOB_CANCEL),
];

/// The name of a command, if it is one of ours.
pub fn ioctl_name(cmd: u32) -> Option<&'static str> {
    ALL_IOCTLS.iter().find(|(_, c)| *c == cmd).map(|(n, _)| *n)
}

// ---------------------------------------------------------------------------------------------
// Other drivers' commands this stack issues: the kernel's numbers, built from the structs in
// [`crate::linux`] as the kernel's headers build them.

/// `DMA_HEAP_IOCTL_ALLOC` = `_IOWR('H', 0x0, struct dma_heap_allocation_data)`
/// (`include/uapi/linux/dma-heap.h`).
pub const DMA_HEAP_IOCTL_ALLOC: u32 = ioc(
    IOC_READ | IOC_WRITE,
    b'H' as u32,
    0x0,
    size_of::<DmaHeapAllocationData>(),
);
/// `UDMABUF_CREATE` = `_IOW('u', 0x42, struct udmabuf_create)` (`include/uapi/linux/udmabuf.h`).
pub const UDMABUF_CREATE: u32 = ioc(IOC_WRITE, b'u' as u32, 0x42, size_of::<UdmabufCreate>());
/// `DMA_BUF_IOCTL_SYNC` = `_IOW('b', 0, struct dma_buf_sync)` (`include/uapi/linux/dma-buf.h`).
pub const DMA_BUF_IOCTL_SYNC: u32 = ioc(IOC_WRITE, b'b' as u32, 0, size_of::<DmaBufSync>());

/// Every kernel command this stack issues, with its name.
pub const LINUX_IOCTLS: &[(&str, u32)] = &[
    ("DMA_HEAP_IOCTL_ALLOC", DMA_HEAP_IOCTL_ALLOC),
    ("UDMABUF_CREATE", UDMABUF_CREATE),
    ("DMA_BUF_IOCTL_SYNC", DMA_BUF_IOCTL_SYNC),
];

#[cfg(test)]
mod tests {
    use super::*;

    // Golden values: if one of these changes, the ABI changed. Never edit them to make a test
    // pass; add a new command instead.
    #[test]
    fn ioctl_numbers_are_pinned() {
        assert_eq!(NNACCEL_IOCTL_GET_PARAM, 0xC010_BA00);
        assert_eq!(NNACCEL_IOCTL_BO_CREATE, 0xC010_BA01);
        assert_eq!(NNACCEL_IOCTL_BO_IMPORT, 0xC020_BA02);
        assert_eq!(NNACCEL_IOCTL_BO_EXPORT, 0xC010_BA03);
        assert_eq!(NNACCEL_IOCTL_BO_INFO, 0xC020_BA04);
        assert_eq!(NNACCEL_IOCTL_BO_CLOSE, 0x4008_BA05);
        assert_eq!(NNACCEL_IOCTL_PROGRAM_CREATE, 0xC018_BA06);
        assert_eq!(NNACCEL_IOCTL_PROGRAM_DESTROY, 0x4008_BA07);
        assert_eq!(NNACCEL_IOCTL_QUEUE_CREATE, 0xC028_BA08);
        assert_eq!(NNACCEL_IOCTL_QUEUE_DESTROY, 0x4008_BA09);
        assert_eq!(NNACCEL_IOCTL_SUBMIT, 0xC330_BA0A);
        assert_eq!(NNACCEL_IOCTL_WAIT, 0xC030_BA0B);
        assert_eq!(NNACCEL_IOCTL_JOB_CANCEL, 0x4010_BA0C);
    }

    // Golden values of the kernel's commands, as the kernel headers give them (and as `strace`
    // prints them). They are the kernel's ABI: never edit them to make a test pass.
    #[test]
    fn kernel_ioctl_numbers_are_pinned() {
        assert_eq!(DMA_HEAP_IOCTL_ALLOC, 0xC018_4800);
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
        assert_eq!(DMA_BUF_IOCTL_SYNC, 0x4008_6200);
        for (name, cmd) in LINUX_IOCTLS {
            assert_ne!(ioc_type(*cmd), NNACCEL_IOCTL_TYPE, "{name}");
            assert_eq!(ioctl_name(*cmd), None, "{name} is not ours");
        }
    }

    #[test]
    fn every_command_decodes_to_our_type_and_a_distinct_nr() {
        let mut nrs: Vec<u32> = ALL_IOCTLS.iter().map(|(_, c)| ioc_nr(*c)).collect();
        for (name, cmd) in ALL_IOCTLS {
            assert_eq!(ioc_type(*cmd), NNACCEL_IOCTL_TYPE, "{name}");
            assert_ne!(ioc_dir(*cmd), IOC_NONE, "{name} carries an argument struct");
            assert!(ioc_size(*cmd) <= IOC_SIZE_MAX, "{name}");
            assert_eq!(
                ioc_size(*cmd) % 8,
                0,
                "{name} struct is a multiple of 8 bytes"
            );
        }
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), ALL_IOCTLS.len());
    }

    #[test]
    fn ioc_helpers_round_trip() {
        let cmd = ioc(IOC_READ | IOC_WRITE, 0xBA, 0x2A, 1234);
        assert_eq!(ioc_dir(cmd), IOC_READ | IOC_WRITE);
        assert_eq!(ioc_type(cmd), 0xBA);
        assert_eq!(ioc_nr(cmd), 0x2A);
        assert_eq!(ioc_size(cmd), 1234);
        assert_eq!(ioctl_name(NNACCEL_IOCTL_WAIT), Some("WAIT"));
        assert_eq!(ioctl_name(0), None);
    }
}
