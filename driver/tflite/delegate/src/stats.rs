//! This process's delegate counters, for the tests and the log.

use std::sync::atomic::{AtomicU64, Ordering};

/// What [`crate::nnaccel_tflite_delegate_stats`] copies out (`#[repr(C)]`, six `u64`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NnaccelDelegateStats {
    /// Delegates created.
    pub delegates: u64,
    /// Nodes claimed, over every delegate Prepare.
    pub nodes_claimed: u64,
    /// Partitions (delegate kernels) prepared through the HAL.
    pub partitions: u64,
    /// Executions through the HAL that succeeded.
    pub executions: u64,
    /// Of those, executions through a burst.
    pub burst_executions: u64,
    /// Executions that failed (reported to the interpreter).
    pub failed_executions: u64,
}

static DELEGATES: AtomicU64 = AtomicU64::new(0);
static NODES_CLAIMED: AtomicU64 = AtomicU64::new(0);
static PARTITIONS: AtomicU64 = AtomicU64::new(0);
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);
static BURST_EXECUTIONS: AtomicU64 = AtomicU64::new(0);
static FAILED_EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// A delegate was created.
pub fn delegate_created() {
    DELEGATES.fetch_add(1, Ordering::Relaxed);
}

/// `n` nodes were claimed.
pub fn claimed(n: usize) {
    NODES_CLAIMED.fetch_add(n as u64, Ordering::Relaxed);
}

/// A partition was prepared.
pub fn partition_prepared() {
    PARTITIONS.fetch_add(1, Ordering::Relaxed);
}

/// An execution finished: `ok` or not, through a burst or not.
pub fn executed(ok: bool, burst: bool) {
    if !ok {
        FAILED_EXECUTIONS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    EXECUTIONS.fetch_add(1, Ordering::Relaxed);
    if burst {
        BURST_EXECUTIONS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters now.
pub fn snapshot() -> NnaccelDelegateStats {
    NnaccelDelegateStats {
        delegates: DELEGATES.load(Ordering::Relaxed),
        nodes_claimed: NODES_CLAIMED.load(Ordering::Relaxed),
        partitions: PARTITIONS.load(Ordering::Relaxed),
        executions: EXECUTIONS.load(Ordering::Relaxed),
        burst_executions: BURST_EXECUTIONS.load(Ordering::Relaxed),
        failed_executions: FAILED_EXECUTIONS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_move_by_what_is_recorded() {
        let before = snapshot();
        claimed(3);
        executed(true, true);
        executed(true, false);
        executed(false, true);
        let after = snapshot();
        // Other tests in this binary may count too: at least what this one added.
        assert!(after.nodes_claimed >= before.nodes_claimed + 3);
        assert!(after.executions >= before.executions + 2);
        assert!(after.burst_executions > before.burst_executions);
        assert!(after.failed_executions > before.failed_executions);
        assert_eq!(std::mem::size_of::<NnaccelDelegateStats>(), 48);
    }
}
