//! What the FUSE and CUSE frontends share: taking an ioctl as the kernel hands it to a
//! FUSE-protocol server, and the [`Frontend`] lifecycle `nnaccel-sim` runs either one by.

use std::io;

use rustix::io::Errno;

use crate::caller::Caller;
use crate::device::SimDevice;
use crate::reply::Reply;

/// A server that serves the device until it is stopped: the FUSE file or the CUSE node.
pub trait Frontend {
    /// Its name in logs: `"fuse"`, `"cuse"`.
    const NAME: &'static str;

    /// A handle that stops [`Frontend::run`] from another thread (signal handling).
    fn stopper(&mut self) -> Box<dyn FnOnce() -> io::Result<()> + Send>;

    /// Serves requests until stopped (or until the kernel ends the session).
    fn run(self) -> io::Result<()>;
}

/// One ioctl as the kernel delivers it through FUSE or CUSE.
#[derive(Debug)]
pub struct KernelIoctl<'a> {
    /// The file handle the open returned.
    pub file: u64,
    /// The calling thread (the kernel reports threads, not processes).
    pub tid: u32,
    /// The command.
    pub cmd: u32,
    /// The argument bytes the kernel copied in.
    pub in_data: &'a [u8],
    /// How many bytes the kernel copies back out.
    pub out_size: usize,
}

impl SimDevice {
    /// Dispatches an ioctl delivered by FUSE or CUSE. Both keep ioctls *restricted*: the
    /// kernel copies in `_IOC_SIZE(cmd)` bytes only for `_IOW` commands and copies out at most
    /// `out_size`, so the argument is padded to its struct (the dispatcher checks direction
    /// and size on the whole struct either way) and the reply is cut to what the kernel takes.
    pub fn kernel_ioctl(&self, io: &KernelIoctl<'_>, reply: impl Reply + 'static) {
        let reply = Box::new(CutReply {
            inner: reply,
            out_size: io.out_size,
        });
        let caller = match Caller::from_thread(io.tid) {
            Ok(c) => c,
            Err(e) => return reply.send(Err(e)),
        };
        let size = nnaccel_uapi::ioctl::ioc_size(io.cmd);
        let mut arg = io.in_data[..io.in_data.len().min(size)].to_vec();
        arg.resize(size, 0);
        self.ioctl(io.file, &caller, io.cmd, &arg, reply);
    }
}

/// A reply cut to the bytes the kernel copies out.
struct CutReply<R> {
    inner: R,
    out_size: usize,
}

impl<R: Reply> Reply for CutReply<R> {
    fn send(self: Box<Self>, result: Result<Vec<u8>, Errno>) {
        let CutReply { inner, out_size } = *self;
        Box::new(inner).send(result.map(|mut bytes| {
            bytes.truncate(out_size);
            bytes
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use nnaccel_uapi::abi::{GetParam, NNACCEL_API_VERSION, PARAM_API_VERSION};
    use nnaccel_uapi::ioctl::NNACCEL_IOCTL_GET_PARAM;
    use zerocopy::{FromBytes, IntoBytes};

    use super::*;
    use crate::Config;

    struct Chan(mpsc::Sender<Result<Vec<u8>, Errno>>);

    impl Reply for Chan {
        fn send(self: Box<Self>, result: Result<Vec<u8>, Errno>) {
            let _ = self.0.send(result);
        }
    }

    fn this_thread() -> u32 {
        rustix::thread::gettid().as_raw_nonzero().get() as u32
    }

    #[test]
    fn kernel_ioctl_pads_a_short_argument_and_cuts_the_reply_to_out_size() {
        let dev = SimDevice::new(Config::default()).unwrap();
        let file = dev.open();
        let arg = GetParam {
            param: PARAM_API_VERSION,
            ..GetParam::default()
        };
        // Only the first 8 bytes came in (`param` and `pad`); the rest is zeros.
        let (tx, rx) = mpsc::channel();
        let io = KernelIoctl {
            file,
            tid: this_thread(),
            cmd: NNACCEL_IOCTL_GET_PARAM,
            in_data: &arg.as_bytes()[..8],
            out_size: size_of::<GetParam>(),
        };
        dev.kernel_ioctl(&io, Chan(tx.clone()));
        let got = GetParam::read_from_bytes(&rx.recv().unwrap().unwrap()).unwrap();
        assert_eq!(got.value, NNACCEL_API_VERSION);
        dev.kernel_ioctl(&KernelIoctl { out_size: 4, ..io }, Chan(tx));
        assert_eq!(rx.recv().unwrap().unwrap(), PARAM_API_VERSION.to_ne_bytes());
    }
}
