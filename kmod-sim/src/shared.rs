//! What every file, object and queue of one device shares: its limits, counters and timers.
//!
//! A leaf below [`crate::bo`], [`crate::program`], [`crate::engine`] and [`crate::device`]:
//! they all count into [`Stats`] and read [`DeviceCore`], so these live apart from the device
//! model that owns those objects, and imports point one way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::io::Errno;

use crate::config::{Config, WaitMode};
use crate::timers::Timers;

/// Live-object counters and totals, visible through GET_PARAM.
#[derive(Debug, Default)]
pub struct Stats {
    /// Open files.
    pub live_files: AtomicU64,
    /// Live BOs (all files; a BO an in-flight job holds counts until the job ends).
    pub live_bos: AtomicU64,
    /// Live programs.
    pub live_programs: AtomicU64,
    /// Live queues, default queues included.
    pub live_queues: AtomicU64,
    /// Jobs completed since start.
    pub jobs_completed: AtomicU64,
    /// Device memory in use.
    pub memory_used: AtomicU64,
}

/// What every file and queue of a device shares.
#[derive(Debug)]
pub struct DeviceCore {
    /// Limits and switches.
    pub config: Config,
    /// Counters.
    pub stats: Arc<Stats>,
    /// WAIT deadlines.
    pub timers: Timers,
    /// The wait mode engine workers actually use.
    pub wait_mode: WaitMode,
    ioctl_count: AtomicU64,
    job_count: AtomicU64,
}

impl DeviceCore {
    /// A core for `config` whose engine workers wait with `wait_mode` (already resolved
    /// against what the kernel has).
    pub fn new(config: Config, wait_mode: WaitMode) -> std::io::Result<Self> {
        Ok(Self {
            config,
            stats: Arc::default(),
            timers: Timers::new()?,
            wait_mode,
            ioctl_count: AtomicU64::new(0),
            job_count: AtomicU64::new(0),
        })
    }

    /// Fault injection: counts an ioctl; returns the fault to apply to it, if any.
    pub fn ioctl_fault(&self) -> Option<Errno> {
        let faults = self.config.faults;
        if !crate::config::FAULT_INJECTION || !faults.any() {
            return None;
        }
        let n = self.ioctl_count.fetch_add(1, Ordering::SeqCst) + 1;
        if faults.exit_on_ioctl == n {
            tracing::warn!("fault injection: exiting abruptly on ioctl {n}");
            // SAFETY: `_exit` ends the process at once; nothing runs after it. That abrupt end
            // (no unmount, no clean-up) is the point of this fault.
            unsafe { libc::_exit(1) };
        }
        (faults.fail_ioctl == n).then_some(Errno::IO)
    }

    /// Fault injection: counts a job; returns (delay, drop its completion).
    pub fn job_fault(&self) -> (u64, bool) {
        let faults = self.config.faults;
        if !crate::config::FAULT_INJECTION || !faults.any() {
            return (0, false);
        }
        let n = self.job_count.fetch_add(1, Ordering::SeqCst) + 1;
        (faults.delay_job_ms, faults.drop_completion == n)
    }
}
