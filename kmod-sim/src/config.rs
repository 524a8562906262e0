//! Device limits and debug switches.

/// How engine workers wait on queue doorbells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// io_uring `FUTEX_WAIT` where the kernel has it, the futex syscall otherwise.
    #[default]
    Auto,
    /// Always the futex syscall.
    Futex,
    /// Always io_uring (device creation fails where the kernel lacks the opcode).
    IoUring,
}

/// Whether fault injection is compiled in: debug builds (tests), or release builds with the
/// `fault-injection` feature. Release packages leave it out.
pub const FAULT_INJECTION: bool = cfg!(any(debug_assertions, feature = "fault-injection"));

/// Fault injection for reliability tests. All zero = off. Counted across the whole device,
/// 1-based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Every job sleeps this long in the engine (cut short by JOB_CANCEL or its timeout).
    pub delay_job_ms: u64,
    /// Only jobs whose outputs add up to at least this many bytes are delayed (0 = every
    /// job): a slow model next to fast ones on the same device.
    pub delay_job_min_output_bytes: u64,
    /// The Nth ioctl fails with `EIO`.
    pub fail_ioctl: u64,
    /// The Nth job's completion is never posted.
    pub drop_completion: u64,
    /// The process exits abruptly (no clean-up, no unmount) on the Nth ioctl.
    pub exit_on_ioctl: u64,
}

impl Faults {
    /// Whether any fault is armed.
    pub fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// Limits and behaviour of one simulated device.
#[derive(Clone, Debug)]
pub struct Config {
    /// Total bytes of device memory (BO_CREATE).
    pub device_memory: u64,
    /// Largest single BO, created or imported.
    pub max_bo_size: u64,
    /// BOs per open file.
    pub max_bos: u32,
    /// Programs per open file.
    pub max_programs: u32,
    /// Ring queues per open file.
    pub max_queues: u32,
    /// Most entries of a ring, and the default queue's depth.
    pub max_queue_depth: u32,
    /// Largest program accepted by PROGRAM_CREATE.
    pub max_program_size: u64,
    /// Doorbell waiting.
    pub wait_mode: WaitMode,
    /// Debug fault injection (honoured only with the `fault-injection` feature).
    pub faults: Faults,
    /// Operation types this device lacks, like a real NPU: a program using one is refused
    /// with `EOPNOTSUPP` at PROGRAM_CREATE (the HAL then places those operations on the CPU).
    /// Empty by default (`nnaccel-sim --without-ops CONV_2D,TANH`).
    pub without_ops: Vec<nnaccel_cpu::OperationType>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            device_memory: 256 << 20,
            max_bo_size: 1 << 30,
            max_bos: 4096,
            max_programs: 1024,
            max_queues: 64,
            max_queue_depth: 1024,
            max_program_size: 64 << 20,
            wait_mode: WaitMode::Auto,
            faults: Faults::default(),
            without_ops: Vec::new(),
        }
    }
}
