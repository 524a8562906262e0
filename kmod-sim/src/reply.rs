//! Where an ioctl's answer goes. A leaf: the engine answers WAITs through it long after the
//! dispatcher returned, and every frontend implements it.

use rustix::io::Errno;

/// Where an ioctl's answer goes: the reply bytes (the updated argument struct, or nothing for
/// write-only commands) or an errno.
pub trait Reply: Send {
    /// Sends the answer. Called exactly once.
    fn send(self: Box<Self>, result: Result<Vec<u8>, Errno>);
}
