//! `nnaccel-uapi`: the contract between `/dev/nnaccel` and its users.
//!
//! - [`ioctl`]: the ioctl number table (ours, and the kernel commands this stack issues);
//! - [`abi`]: the `#[repr(C)]` argument structs and the shared-memory queue ring layout;
//! - [`program`]: the binary format of compiled programs;
//! - [`ring`]: access to a queue ring and the client's producer side;
//! - [`device`]: the [`device::Device`] trait every frontend implements, typed calls on it, and
//!   the owning handles ([`BufferObject`], [`LoadedProgram`], [`RingQueue`]) whose `Drop`
//!   releases the kernel object;
//! - [`linux`]: the kernel's own structs for the dma-heap, udmabuf and dma-buf ioctls;
//! - [`sys`]: the thin syscall layer both sides share.
//!
//! `include/nnaccel.h` carries the same ABI for C.

pub mod abi;
pub mod device;
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
pub mod ioctl;
pub mod linux;
pub mod program;
pub mod ring;
pub mod sys;

pub use device::{BufferObject, Device, DeviceExt, FdDevice, LoadedProgram, RingQueue};
