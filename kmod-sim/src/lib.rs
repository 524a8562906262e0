//! `nnaccel-kmod-sim`: the simulated nnaccel kernel module.
//!
//! - [`device`]: the device model — open files, handle tables, limits, counters;
//! - [`bo`], [`program`]: buffer objects and validated programs;
//! - [`engine`]: queues and their workers, running jobs on the CPU executor;
//! - [`dispatch`]: the one ioctl dispatch function;
//! - frontends: [`cuse`] (a real character device through `/dev/cuse`), [`fuse`] (a FUSE
//!   file that behaves as the char device, where CUSE is missing) and [`inproc`] (the device
//!   inside the calling process);
//! - [`caller`]: reaching caller memory and fds as a kernel driver would.

pub mod bo;
pub mod caller;
pub mod config;
pub mod cuse;
pub mod device;
pub mod dispatch;
pub mod engine;
pub mod fuse;
#[cfg(test)]
mod fuzz_tests;
pub mod inproc;
pub mod program;
pub mod timers;

pub use config::{Config, Faults, WaitMode};
pub use device::SimDevice;
pub use inproc::InprocFile;
