//! The NN HAL: types, validation, and the device interface.

pub mod convert;
pub mod domain;
pub mod driver;
pub mod interface;
pub mod memory;
pub mod types;
pub mod validate;

pub use domain::{BufferDesc, BufferRole, DeviceBuffer, LOCAL_OWNER, OwnerId};
pub use driver::{Backend, Driver, ExecutionHandle, Placement, PreparedModel};
pub use interface::{HalBuffer, HalDevice, HalPreparedModel, execute_async};
pub use memory::MappedPool;
pub use types::*;

#[cfg(test)]
mod driver_tests;
