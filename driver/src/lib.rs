//! `nnaccel`: the HAL side of the stack. It reaches the device only through
//! [`nnaccel_uapi::Device`] — a device node, or an in-process device behind the same trait.

pub mod burst;
pub mod cache;
pub mod client;
pub mod device;
pub mod fmq;
pub mod hal;
pub mod live_sockets;
pub mod modelfile;
pub mod pools;
pub mod protocol;
pub mod service;

pub use device::{DeviceInfo, LiveObjects, open_node};

#[cfg(test)]
mod fuzz_tests;
