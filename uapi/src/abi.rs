//! The ioctl argument structs and the shared-memory queue ring layout.
//!
//! Rules (the kernel's `botching-up-ioctls.rst`): fixed-width fields only, explicit padding,
//! every struct a multiple of 8 bytes, reserved/pad fields and unknown flags must be zero
//! (`EINVAL` otherwise), arrays as a `u64` user pointer plus a count. Every struct here has a
//! compile-time size and offset check at the bottom of this file, and `include/nnaccel.h`
//! mirrors it for C (checked by a test that compiles the header).

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// Version of this contract reported by [`PARAM_API_VERSION`]: major in the high 16 bits.
/// Minor 1 added the per-job timeout ([`Job::timeout_ns`]) and JOB_CANCEL ([`CAP_JOB_CANCEL`]).
pub const NNACCEL_API_VERSION: u64 = (1 << 16) | 1;

// ---------------------------------------------------------------------------------------------
// GET_PARAM

/// API version (`major << 16 | minor`).
pub const PARAM_API_VERSION: u32 = 0;
/// Capability bits (`CAP_*`).
pub const PARAM_CAPABILITIES: u32 = 1;
/// Most buffer objects one open file may hold.
pub const PARAM_MAX_BOS: u32 = 2;
/// Largest buffer object, in bytes.
pub const PARAM_MAX_BO_SIZE: u32 = 3;
/// Total device memory for BO_CREATE, in bytes.
pub const PARAM_DEVICE_MEMORY_SIZE: u32 = 4;
/// Device memory in use, in bytes.
pub const PARAM_DEVICE_MEMORY_USED: u32 = 5;
/// Largest program accepted by PROGRAM_CREATE, in bytes.
pub const PARAM_MAX_PROGRAM_SIZE: u32 = 6;
/// Most ring entries a queue may have (and the default queue's depth).
pub const PARAM_MAX_QUEUE_DEPTH: u32 = 7;
/// Most bindings in one job ([`MAX_BINDINGS`]).
pub const PARAM_MAX_BINDINGS: u32 = 8;
/// Debug counter: open files on the device.
pub const PARAM_LIVE_FILES: u32 = 9;
/// Debug counter: live buffer objects (all files).
pub const PARAM_LIVE_BOS: u32 = 10;
/// Debug counter: live programs (all files).
pub const PARAM_LIVE_PROGRAMS: u32 = 11;
/// Debug counter: live queues (all files), the default queues included.
pub const PARAM_LIVE_QUEUES: u32 = 12;
/// Debug counter: jobs completed since the device started.
pub const PARAM_JOBS_COMPLETED: u32 = 13;
/// How engine workers wait for doorbells: [`WAIT_MODE_FUTEX`] or [`WAIT_MODE_IO_URING`].
pub const PARAM_ENGINE_WAIT_MODE: u32 = 14;
/// Most programs one open file may hold.
pub const PARAM_MAX_PROGRAMS: u32 = 15;
/// Most queues one open file may hold (the default queue not counted).
pub const PARAM_MAX_QUEUES: u32 = 16;
/// One past the highest parameter number.
pub const PARAM_COUNT: u32 = 17;

/// The device can allocate device memory (BO_CREATE).
pub const CAP_BO_CREATE: u64 = 1 << 0;
/// The device imports memfd and other mappable fds.
pub const CAP_BO_IMPORT: u64 = 1 << 1;
/// The device imports dma-bufs (and brackets CPU access with DMA_BUF_IOCTL_SYNC).
pub const CAP_BO_IMPORT_DMABUF: u64 = 1 << 2;
/// BO_EXPORT is available.
pub const CAP_BO_EXPORT: u64 = 1 << 3;
/// Shared-memory submission rings (QUEUE_CREATE).
pub const CAP_QUEUE_RING: u64 = 1 << 4;
/// Fault injection is compiled in (debug builds of the simulator only).
pub const CAP_FAULT_INJECTION: u64 = 1 << 5;
/// Per-job timeouts ([`Job::timeout_ns`]) and JOB_CANCEL (API 1.1).
pub const CAP_JOB_CANCEL: u64 = 1 << 6;

/// Engine workers wait on doorbells with the futex syscall.
pub const WAIT_MODE_FUTEX: u64 = 1;
/// Engine workers wait on doorbells with io_uring `FUTEX_WAIT`.
pub const WAIT_MODE_IO_URING: u64 = 2;

/// `NNACCEL_IOCTL_GET_PARAM` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct GetParam {
    /// In: `PARAM_*`.
    pub param: u32,
    /// Must be zero.
    pub pad: u32,
    /// Out: the value.
    pub value: u64,
}

// ---------------------------------------------------------------------------------------------
// Buffer objects

/// BO access: the device may read it.
pub const BO_ACCESS_READ: u32 = 1 << 0;
/// BO access: the device may write it.
pub const BO_ACCESS_WRITE: u32 = 1 << 1;
/// All BO access bits.
pub const BO_ACCESS_MASK: u32 = BO_ACCESS_READ | BO_ACCESS_WRITE;

/// BO_CREATE flags: none defined yet; must be zero.
pub const BO_CREATE_FLAGS_MASK: u32 = 0;

/// Kind of a buffer object, as reported by BO_INFO.
pub const BO_KIND_DEVICE: u32 = 1;
/// Imported from a memfd (or other shmem file).
pub const BO_KIND_MEMFD: u32 = 2;
/// Imported from a dma-buf.
pub const BO_KIND_DMABUF: u32 = 3;
/// Imported from another mappable file.
pub const BO_KIND_FILE: u32 = 4;

/// Import offsets are multiples of this (the page size the device maps with); sizes are not.
pub const BO_IMPORT_ALIGN: u64 = 4096;

/// `NNACCEL_IOCTL_BO_CREATE` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct BoCreate {
    /// In: size in bytes, non-zero, at most `PARAM_MAX_BO_SIZE`.
    pub size: u64,
    /// In: must be zero.
    pub flags: u32,
    /// Out: the handle (never 0).
    pub handle: u32,
}

/// `NNACCEL_IOCTL_BO_IMPORT` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct BoImport {
    /// In: the caller's fd.
    pub fd: i32,
    /// In: `BO_ACCESS_*`, at least one bit.
    pub access: u32,
    /// In: offset into the file, a multiple of [`BO_IMPORT_ALIGN`].
    pub offset: u64,
    /// In: size in bytes, non-zero; `offset + size` must lie within the file.
    pub size: u64,
    /// Out: the handle (never 0).
    pub handle: u32,
    /// Must be zero.
    pub pad: u32,
}

/// `NNACCEL_IOCTL_BO_EXPORT` argument.
///
/// A kernel driver would `fd_install()` the new fd into the caller's table. The simulated
/// device cannot reach into another process's fd table, so the caller names one end of a
/// connected `AF_UNIX` socket and the fd arrives on it with `SCM_RIGHTS`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct BoExport {
    /// In: the handle.
    pub handle: u32,
    /// In: must be zero.
    pub flags: u32,
    /// In: the caller's `AF_UNIX` socket the fd is sent on.
    pub socket_fd: i32,
    /// Must be zero.
    pub pad: u32,
}

/// `NNACCEL_IOCTL_BO_INFO` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct BoInfo {
    /// In: the handle.
    pub handle: u32,
    /// Out: `BO_KIND_*`.
    pub kind: u32,
    /// Out: size in bytes.
    pub size: u64,
    /// Out: `BO_ACCESS_*`.
    pub access: u32,
    /// Must be zero.
    pub pad: u32,
    /// Must be zero.
    pub reserved: u64,
}

/// `NNACCEL_IOCTL_BO_CLOSE` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct BoClose {
    /// In: the handle.
    pub handle: u32,
    /// Must be zero.
    pub pad: u32,
}

// ---------------------------------------------------------------------------------------------
// Programs

/// `NNACCEL_IOCTL_PROGRAM_CREATE` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ProgramCreate {
    /// In: user pointer to the encoded program ([`crate::program`]).
    pub data_ptr: u64,
    /// In: its length, non-zero, at most `PARAM_MAX_PROGRAM_SIZE`.
    pub data_len: u64,
    /// In: must be zero.
    pub flags: u32,
    /// Out: the handle (never 0).
    pub handle: u32,
}

/// `NNACCEL_IOCTL_PROGRAM_DESTROY` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ProgramDestroy {
    /// In: the handle.
    pub handle: u32,
    /// Must be zero.
    pub pad: u32,
}

// ---------------------------------------------------------------------------------------------
// Jobs

/// Most bindings (program arguments) one job carries.
pub const MAX_BINDINGS: usize = 32;

/// One program argument: a byte range of a buffer object.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Binding {
    /// A BO handle of the submitting file.
    pub bo: u32,
    /// Must be zero.
    pub flags: u32,
    /// Offset into the BO, a multiple of the argument's element size.
    pub offset: u64,
    /// Length in bytes, at least the argument's size; `offset + length` within the BO.
    pub length: u64,
}

/// Job flags: none defined yet; must be zero.
pub const JOB_FLAGS_MASK: u32 = 0;

/// One job: run `program` with `bindings[..num_bindings]` as its arguments (inputs first, then
/// outputs, in the program's order).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Job {
    /// Opaque to the device; echoed in the completion.
    pub user_data: u64,
    /// A program handle of the submitting file.
    pub program: u32,
    /// Must be zero.
    pub flags: u32,
    /// Number of valid entries in `bindings`; equals the program's argument count.
    pub num_bindings: u32,
    /// Must be zero.
    pub pad: u32,
    /// Absolute `CLOCK_MONOTONIC` deadline in ns, 0 = none (API 1.1; the field was a reserved
    /// zero before). A job still unfinished then completes with `-ETIMEDOUT` and never writes
    /// its outputs; only its own queue sees it, the next job runs as usual.
    pub timeout_ns: u64,
    /// The arguments.
    pub bindings: [Binding; MAX_BINDINGS],
}

impl Default for Job {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `NNACCEL_IOCTL_SUBMIT` argument: one job on the file's default queue (queue id 0).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Submit {
    /// In: must be zero.
    pub flags: u32,
    /// Must be zero.
    pub pad: u32,
    /// Out: the job's sequence number on the default queue (never 0).
    pub seq: u64,
    /// In: the job.
    pub job: Job,
}

/// `NNACCEL_IOCTL_WAIT` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Wait {
    /// In: the queue (0 = the file's default queue).
    pub queue_id: u32,
    /// In: must be zero.
    pub flags: u32,
    /// In: the sequence number to wait for (already submitted).
    pub seq: u64,
    /// In: absolute `CLOCK_MONOTONIC` deadline in ns; `ETIMEDOUT` once it passes.
    pub deadline_ns: u64,
    /// Out: the job's status: 0 or a negative errno.
    pub status: i32,
    /// Must be zero.
    pub pad: u32,
    /// Out: time the engine spent on the job, in ns.
    pub device_time_ns: u64,
    /// Out: the job's `user_data`.
    pub user_data: u64,
}

/// `NNACCEL_IOCTL_JOB_CANCEL` argument: ends one submitted job.
///
/// Once the call returned 0, the device never writes the job's output BOs again: a job not
/// started completes with `-ECANCELED` without running, a running one is stopped or its
/// results discarded and it completes with `-ECANCELED`. `EALREADY` when the job had already
/// ended (its outputs, if it succeeded, were written before the call).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct JobCancel {
    /// In: the queue (0 = the file's default queue).
    pub queue_id: u32,
    /// In: must be zero.
    pub flags: u32,
    /// In: the job's sequence number (already submitted).
    pub seq: u64,
}

// ---------------------------------------------------------------------------------------------
// Queues

/// QUEUE_CREATE flags: the client asks the device to stay in its high-performance state while
/// the queue lives (a burst's hint).
pub const QUEUE_FLAG_HIGH_PERFORMANCE: u32 = 1 << 0;
/// All QUEUE_CREATE flags.
pub const QUEUE_FLAGS_MASK: u32 = QUEUE_FLAG_HIGH_PERFORMANCE;

/// `NNACCEL_IOCTL_QUEUE_CREATE` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct QueueCreate {
    /// In: a memfd (shmem file) holding the ring; futex words must live in shmem.
    pub memfd: i32,
    /// In: `QUEUE_FLAG_*`.
    pub flags: u32,
    /// In: offset of the ring in the memfd, page aligned.
    pub offset: u64,
    /// In: bytes available for the ring, at least `ring_size(entries)`.
    pub size: u64,
    /// In: ring entries, a power of two from 1 to `PARAM_MAX_QUEUE_DEPTH`.
    pub entries: u32,
    /// Out: the queue id (never 0).
    pub queue_id: u32,
    /// Must be zero.
    pub reserved: u64,
}

/// `NNACCEL_IOCTL_QUEUE_DESTROY` argument.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct QueueDestroy {
    /// In: the queue id.
    pub queue_id: u32,
    /// Must be zero.
    pub pad: u32,
}

// ---------------------------------------------------------------------------------------------
// The queue ring in shared memory
//
// ```text
//   0  RingHeader (512 bytes; each producer/consumer word on its own cache line)
// 512  submission entries: entries × Job (800 bytes each)
//  …   completion entries: entries × Completion (32 bytes each)
// ```
// Sequence numbers start at 1: the job at ring position p (0-based, ever increasing) has
// seq = p + 1 and lives in submission slot `p % entries`; its completion lands in completion
// slot `p % entries`. The client may have at most `entries` jobs whose completions it has not
// read yet.

/// Ring magic, "NNQR" little-endian; written by the device at QUEUE_CREATE.
pub const RING_MAGIC: u32 = u32::from_le_bytes(*b"NNQR");
/// Ring layout version.
pub const RING_VERSION: u32 = 1;
/// Offset of the submission entries.
pub const RING_SQ_OFFSET: usize = size_of::<RingHeader>();

/// The ring header. All fields are accessed atomically through [`crate::ring`].
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RingHeader {
    /// `RING_MAGIC`, written by the device.
    pub magic: u32,
    /// `RING_VERSION`.
    pub version: u32,
    /// Number of entries (power of two).
    pub entries: u32,
    /// `size_of::<Job>()`.
    pub job_size: u32,
    /// `size_of::<Completion>()`.
    pub completion_size: u32,
    /// Device-reported fatal ring error (positive errno), 0 while healthy.
    pub error: u32,
    _pad0: [u8; 40],
    /// Producer (client) position: jobs published so far. Release-stored by the client.
    pub sq_tail: u64,
    _pad1: [u8; 56],
    /// Consumer (device) position: jobs taken so far. Release-stored by the device.
    pub sq_head: u64,
    _pad2: [u8; 56],
    /// Doorbell futex word: the client increments it after publishing and wakes the engine.
    pub sq_doorbell: u32,
    /// Non-zero while the engine is about to sleep or sleeping on `sq_doorbell`.
    pub sq_engine_sleeping: u32,
    _pad3: [u8; 56],
    /// Sequence number of the last completed job. Release-stored by the device.
    pub cq_seq: u64,
    /// Completion futex word: the device increments it after each completion and wakes.
    pub cq_doorbell: u32,
    /// Non-zero while some client thread sleeps on `cq_doorbell`.
    pub cq_waiters: u32,
    _pad4: [u8; 48],
    _reserved: [u8; 192],
}

/// One completion entry.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Completion {
    /// The job's sequence number.
    pub seq: u64,
    /// The job's `user_data`.
    pub user_data: u64,
    /// 0, or a negative errno.
    pub status: i32,
    /// Must be zero.
    pub pad: u32,
    /// Engine time for the job, in ns.
    pub device_time_ns: u64,
}

/// Bytes a ring of `entries` entries occupies, or `None` on overflow.
pub const fn ring_size(entries: u32) -> Option<usize> {
    let n = entries as usize;
    let jobs = match n.checked_mul(size_of::<Job>()) {
        Some(v) => v,
        None => return None,
    };
    let comps = match n.checked_mul(size_of::<Completion>()) {
        Some(v) => v,
        None => return None,
    };
    match RING_SQ_OFFSET.checked_add(jobs) {
        Some(v) => v.checked_add(comps),
        None => None,
    }
}

/// Offset of the completion entries of a ring with `entries` entries.
pub const fn ring_cq_offset(entries: u32) -> usize {
    RING_SQ_OFFSET + entries as usize * size_of::<Job>()
}

// ---------------------------------------------------------------------------------------------
// Compile-time layout checks: every struct, every field.

macro_rules! assert_layout {
    ($ty:ty, size = $size:expr, align = $align:expr, { $($field:ident @ $off:expr),* $(,)? }) => {
        const _: () = assert!(size_of::<$ty>() == $size);
        const _: () = assert!(align_of::<$ty>() == $align);
        const _: () = assert!(size_of::<$ty>() % 8 == 0);
        $( const _: () = assert!(std::mem::offset_of!($ty, $field) == $off); )*
    };
}
// For the kernel's structs in `linux.rs` too.
pub(crate) use assert_layout;

assert_layout!(GetParam, size = 16, align = 8, { param @ 0, pad @ 4, value @ 8 });
assert_layout!(BoCreate, size = 16, align = 8, { size @ 0, flags @ 8, handle @ 12 });
assert_layout!(BoImport, size = 32, align = 8,
    { fd @ 0, access @ 4, offset @ 8, size @ 16, handle @ 24, pad @ 28 });
assert_layout!(BoExport, size = 16, align = 4, { handle @ 0, flags @ 4, socket_fd @ 8, pad @ 12 });
assert_layout!(BoInfo, size = 32, align = 8,
    { handle @ 0, kind @ 4, size @ 8, access @ 16, pad @ 20, reserved @ 24 });
assert_layout!(BoClose, size = 8, align = 4, { handle @ 0, pad @ 4 });
assert_layout!(ProgramCreate, size = 24, align = 8,
    { data_ptr @ 0, data_len @ 8, flags @ 16, handle @ 20 });
assert_layout!(ProgramDestroy, size = 8, align = 4, { handle @ 0, pad @ 4 });
assert_layout!(Binding, size = 24, align = 8, { bo @ 0, flags @ 4, offset @ 8, length @ 16 });
assert_layout!(Job, size = 800, align = 8, {
    user_data @ 0, program @ 8, flags @ 12, num_bindings @ 16, pad @ 20, timeout_ns @ 24,
    bindings @ 32,
});
assert_layout!(JobCancel, size = 16, align = 8, { queue_id @ 0, flags @ 4, seq @ 8 });
assert_layout!(Submit, size = 816, align = 8, { flags @ 0, pad @ 4, seq @ 8, job @ 16 });
assert_layout!(Wait, size = 48, align = 8, {
    queue_id @ 0, flags @ 4, seq @ 8, deadline_ns @ 16, status @ 24, pad @ 28,
    device_time_ns @ 32, user_data @ 40,
});
assert_layout!(QueueCreate, size = 40, align = 8, {
    memfd @ 0, flags @ 4, offset @ 8, size @ 16, entries @ 24, queue_id @ 28, reserved @ 32,
});
assert_layout!(QueueDestroy, size = 8, align = 4, { queue_id @ 0, pad @ 4 });
assert_layout!(RingHeader, size = 512, align = 64, {
    magic @ 0, version @ 4, entries @ 8, job_size @ 12, completion_size @ 16, error @ 20,
    sq_tail @ 64, sq_head @ 128, sq_doorbell @ 192, sq_engine_sleeping @ 196,
    cq_seq @ 256, cq_doorbell @ 264, cq_waiters @ 268,
});
assert_layout!(Completion, size = 32, align = 8,
    { seq @ 0, user_data @ 8, status @ 16, pad @ 20, device_time_ns @ 24 });

/// One struct's layout: C name, size, (field, offset) pairs.
pub type StructLayout = (&'static str, usize, &'static [(&'static str, usize)]);

/// Every ABI struct with its size and field offsets, for the C header test and docs.
pub const LAYOUTS: &[StructLayout] = &[
    (
        "nnaccel_get_param",
        size_of::<GetParam>(),
        &[("param", 0), ("pad", 4), ("value", 8)],
    ),
    (
        "nnaccel_bo_create",
        size_of::<BoCreate>(),
        &[("size", 0), ("flags", 8), ("handle", 12)],
    ),
    (
        "nnaccel_bo_import",
        size_of::<BoImport>(),
        &[
            ("fd", 0),
            ("access", 4),
            ("offset", 8),
            ("size", 16),
            ("handle", 24),
            ("pad", 28),
        ],
    ),
    (
        "nnaccel_bo_export",
        size_of::<BoExport>(),
        &[("handle", 0), ("flags", 4), ("socket_fd", 8), ("pad", 12)],
    ),
    (
        "nnaccel_bo_info",
        size_of::<BoInfo>(),
        &[
            ("handle", 0),
            ("kind", 4),
            ("size", 8),
            ("access", 16),
            ("pad", 20),
            ("reserved", 24),
        ],
    ),
    (
        "nnaccel_bo_close",
        size_of::<BoClose>(),
        &[("handle", 0), ("pad", 4)],
    ),
    (
        "nnaccel_program_create",
        size_of::<ProgramCreate>(),
        &[
            ("data_ptr", 0),
            ("data_len", 8),
            ("flags", 16),
            ("handle", 20),
        ],
    ),
    (
        "nnaccel_program_destroy",
        size_of::<ProgramDestroy>(),
        &[("handle", 0), ("pad", 4)],
    ),
    (
        "nnaccel_binding",
        size_of::<Binding>(),
        &[("bo", 0), ("flags", 4), ("offset", 8), ("length", 16)],
    ),
    (
        "nnaccel_job",
        size_of::<Job>(),
        &[
            ("user_data", 0),
            ("program", 8),
            ("flags", 12),
            ("num_bindings", 16),
            ("pad", 20),
            ("timeout_ns", 24),
            ("bindings", 32),
        ],
    ),
    (
        "nnaccel_job_cancel",
        size_of::<JobCancel>(),
        &[("queue_id", 0), ("flags", 4), ("seq", 8)],
    ),
    (
        "nnaccel_submit",
        size_of::<Submit>(),
        &[("flags", 0), ("pad", 4), ("seq", 8), ("job", 16)],
    ),
    (
        "nnaccel_wait",
        size_of::<Wait>(),
        &[
            ("queue_id", 0),
            ("flags", 4),
            ("seq", 8),
            ("deadline_ns", 16),
            ("status", 24),
            ("pad", 28),
            ("device_time_ns", 32),
            ("user_data", 40),
        ],
    ),
    (
        "nnaccel_queue_create",
        size_of::<QueueCreate>(),
        &[
            ("memfd", 0),
            ("flags", 4),
            ("offset", 8),
            ("size", 16),
            ("entries", 24),
            ("queue_id", 28),
            ("reserved", 32),
        ],
    ),
    (
        "nnaccel_queue_destroy",
        size_of::<QueueDestroy>(),
        &[("queue_id", 0), ("pad", 4)],
    ),
    (
        "nnaccel_ring_header",
        size_of::<RingHeader>(),
        &[
            ("magic", 0),
            ("version", 4),
            ("entries", 8),
            ("job_size", 12),
            ("completion_size", 16),
            ("error", 20),
            ("sq_tail", 64),
            ("sq_head", 128),
            ("sq_doorbell", 192),
            ("sq_engine_sleeping", 196),
            ("cq_seq", 256),
            ("cq_doorbell", 264),
            ("cq_waiters", 268),
        ],
    ),
    (
        "nnaccel_completion",
        size_of::<Completion>(),
        &[
            ("seq", 0),
            ("user_data", 8),
            ("status", 16),
            ("pad", 20),
            ("device_time_ns", 24),
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_size_counts_header_jobs_and_completions() {
        assert_eq!(ring_size(1), Some(512 + 800 + 32));
        assert_eq!(ring_size(64), Some(512 + 64 * 832));
        assert_eq!(ring_cq_offset(64), 512 + 64 * 800);
    }

    #[test]
    fn default_job_is_all_zero() {
        assert!(Job::default().as_bytes().iter().all(|b| *b == 0));
    }
}
