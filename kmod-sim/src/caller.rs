//! Reaching the caller's memory and fds the way a kernel driver reaches user memory and
//! `dma_buf_get()`s an fd: `process_vm_readv`/`process_vm_writev` for u64 user pointers, and
//! `pidfd_open` + `pidfd_getfd` for fds named in ioctl arguments.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;

use nnaccel_uapi::sys;
use rustix::io::Errno;

/// The process on whose behalf an ioctl runs.
#[derive(Debug)]
pub struct Caller {
    pid: i32,
    pidfd: OnceLock<Result<OwnedFd, Errno>>,
}

impl Caller {
    /// The process a FUSE request came from. FUSE reports the calling *thread*; pidfds and
    /// `process_vm_readv` want the process, so the thread id is resolved to its thread group.
    pub fn from_thread(tid: u32) -> Result<Self, Errno> {
        let tid = i32::try_from(tid).map_err(|_| Errno::SRCH)?;
        let pid = sys::tgid_of(tid).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::SRCH))?;
        Ok(Self::for_pid(pid))
    }

    /// A caller known by process id.
    pub fn for_pid(pid: i32) -> Self {
        Self {
            pid,
            pidfd: OnceLock::new(),
        }
    }

    /// This process (the in-process frontend).
    pub fn current() -> Self {
        Self::for_pid(std::process::id() as i32)
    }

    /// The caller's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Copies `len` bytes from the caller's address `addr` (`copy_from_user`). Any failure to
    /// reach the memory is `EFAULT`.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).map_err(|_| Errno::NOMEM)?;
        buf.resize(len, 0);
        sys::process_vm_read(self.pid, addr, &mut buf).map_err(|_| Errno::FAULT)?;
        Ok(buf)
    }

    /// Copies `data` to the caller's address `addr` (`copy_to_user`).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        sys::process_vm_write(self.pid, addr, data).map_err(|_| Errno::FAULT)
    }

    /// Takes a reference to the caller's fd `fd` (`fget`). A negative or closed fd is `EBADF`.
    pub fn take_fd(&self, fd: i32) -> Result<OwnedFd, Errno> {
        if fd < 0 {
            return Err(Errno::BADF);
        }
        let pidfd = self
            .pidfd
            .get_or_init(|| {
                sys::pidfd_open(self.pid)
                    .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::SRCH))
            })
            .as_ref()
            .map_err(|e| *e)?;
        sys::pidfd_getfd(pidfd.as_fd(), fd).map_err(|e| match Errno::from_io_error(&e) {
            Some(Errno::BADF) | None => Errno::BADF,
            Some(other) => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_own_memory_through_process_vm() {
        let caller = Caller::current();
        let src = [1u8, 2, 3, 4];
        assert_eq!(caller.read(src.as_ptr() as u64, 4).unwrap(), src);
        let mut dst = [0u8; 4];
        caller.write(dst.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(std::hint::black_box(dst), src);
    }

    #[test]
    fn bad_user_pointer_is_efault() {
        assert_eq!(Caller::current().read(8, 16), Err(Errno::FAULT));
    }

    #[test]
    fn bad_fd_is_ebadf() {
        let caller = Caller::current();
        assert_eq!(caller.take_fd(-1).err(), Some(Errno::BADF));
        assert_eq!(caller.take_fd(987_654).err(), Some(Errno::BADF));
    }

    #[test]
    fn thread_ids_resolve_to_their_process() {
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let c = std::thread::spawn(move || Caller::from_thread(tid).unwrap().pid())
            .join()
            .unwrap();
        assert_eq!(c, std::process::id() as i32);
    }
}
