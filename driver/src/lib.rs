//! `nnaccel`: the HAL side of the stack. It reaches the device only through
//! [`nnaccel_uapi::Device`] — a device node, or an in-process device behind the same trait.

pub mod device;
pub mod hal;
pub mod modelfile;

pub use device::{DeviceInfo, LiveObjects, open_node};
