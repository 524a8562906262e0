//! The in-process frontend: the device as an object in the calling process, reached through
//! the same [`Device`] trait as a device fd. User pointers and fds are resolved against this
//! process exactly as they would be against a remote caller.

use std::io;
use std::sync::{Arc, mpsc};

use nnaccel_uapi::Device;
use rustix::io::Errno;

use crate::caller::Caller;
use crate::device::SimDevice;
use crate::reply::Reply;

/// One open file of an in-process device. Dropping it is `close()`.
#[derive(Debug)]
pub struct InprocFile {
    dev: Arc<SimDevice>,
    file: u64,
    caller: Caller,
}

impl InprocFile {
    /// Opens the device.
    pub fn open(dev: &Arc<SimDevice>) -> Self {
        Self {
            dev: dev.clone(),
            file: dev.open(),
            caller: Caller::current(),
        }
    }

    /// The device behind this file.
    pub fn device(&self) -> &Arc<SimDevice> {
        &self.dev
    }
}

struct ChannelReply(mpsc::SyncSender<Result<Vec<u8>, Errno>>);

impl Reply for ChannelReply {
    fn send(self: Box<Self>, result: Result<Vec<u8>, Errno>) {
        let _ = self.0.send(result);
    }
}

impl Device for InprocFile {
    fn ioctl(&self, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.dev.ioctl(
            self.file,
            &self.caller,
            cmd,
            arg,
            Box::new(ChannelReply(tx)),
        );
        let reply = rx
            .recv()
            .map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
        let bytes = reply.map_err(io::Error::from)?;
        // Like the kernel's copy_to_user of an _IOR struct: the reply is the whole struct or
        // nothing.
        if !bytes.is_empty() {
            if bytes.len() != arg.len() {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            arg.copy_from_slice(&bytes);
        }
        Ok(())
    }
}

impl Drop for InprocFile {
    fn drop(&mut self) {
        self.dev.release(self.file);
    }
}
