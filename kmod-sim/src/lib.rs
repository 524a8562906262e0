//! `nnaccel-kmod-sim`: the simulated nnaccel kernel module.
//!
//! - [`device`]: the device model — open files, handle tables, limits;
//! - [`bo`], [`program`]: buffer objects and validated programs;
//! - [`engine`]: queues and their workers, running jobs on the CPU executor;
//! - [`dispatch`]: the one ioctl dispatch function;
//! - frontends: [`cuse`] (a real character device through `/dev/cuse`), [`fuse`] (a FUSE
//!   file that behaves as the char device, where CUSE is missing) and [`inproc`] (the device
//!   inside the calling process); [`frontend`] is what FUSE and CUSE share;
//! - [`caller`]: reaching caller memory and fds as a kernel driver would.
//!
//! Imports point one way, from the top down (`scripts/check-layers.py` checks it):
//!
//! ```text
//! fuse, cuse -> frontend
//! frontend, inproc -> dispatch -> device -> engine -> program -> bo
//! any of them -> shared, reply, caller, config, timers (leaves)
//! ```
//!
//! [`shared`] (the device's limits, counters and timers) and [`reply`] (where an ioctl's answer
//! goes) are leaves every layer may use. The engine reaches the file that owns a queue only
//! through the [`engine::QueueOwner`] trait the device model implements, never by name.

pub(crate) mod bo;
pub(crate) mod caller;
pub mod config;
pub mod cuse;
pub mod device;
pub(crate) mod dispatch;
pub(crate) mod engine;
pub mod frontend;
pub mod fuse;
#[cfg(test)]
mod fuzz_tests;
pub(crate) mod inproc;
pub mod program;
pub(crate) mod reply;
pub(crate) mod shared;
#[cfg(test)]
mod test_support;
pub(crate) mod timers;

pub use config::{Config, Faults, WaitMode};
pub use device::SimDevice;
pub use inproc::InprocFile;
