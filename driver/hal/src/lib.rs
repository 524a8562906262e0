//! `nnaccel-hal`: the NN HAL core of the userspace driver.
//!
//! It owns model and request checks ([`validate`]), placement, lowering to device programs and
//! execution on the device or the CPU executor ([`driver`]), memory pools ([`memory`]), the
//! checks every received pool fd passes first ([`pool_fd`]), memory domains ([`domain`]), the
//! server side of bursts with the fast message queues they run on ([`burst`], [`fmq`]), the compilation cache with its own on-disk schema ([`cache`]), the
//! device handle ([`device`]), and the socket frames with attached fds that the burst callback
//! channel and the service protocol share ([`frame`]). [`interface`] holds the HAL traits
//! that every backend (this crate's [`Driver`], the service's client) implements; [`error`]
//! maps each error type to the NN HAL status a client sees.
//!
//! It reaches the device only through `nnaccel-uapi` and a file descriptor (or the in-process
//! device behind the same trait), and runs models through `nnaccel-cpu`. It may not import the
//! simulated device (`nnaccel-kmod-sim`), the service protocol, the service or the CLI: those
//! are layers above it.

pub mod burst;
pub mod cache;
pub(crate) mod convert;
pub mod device;
pub mod domain;
pub mod driver;
pub mod error;
pub mod fmq;
pub mod frame;
pub(crate) mod interface;
pub mod live_sockets;
pub mod memory;
pub mod pool_fd;
pub mod types;
pub mod validate;

pub use device::{DeviceInfo, LiveObjects, open_node};
pub use domain::{BufferDesc, BufferRole, DeviceBuffer, LOCAL_OWNER, OwnerId};
pub use driver::{
    Backend, DeviceHealth, Driver, ExecutionHandle, Placement, PreparedModel, REPROBE_INTERVAL,
};
pub use interface::{HalBuffer, HalDevice, HalPreparedModel, execute_async};
pub use memory::MappedPool;
pub use types::*;

#[cfg(test)]
mod driver_tests;
