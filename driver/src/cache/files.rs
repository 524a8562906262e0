//! Reading and writing client cache files through their fds: whole files from offset 0
//! whatever the fd's offset (`pread`/`pwrite`), truncated after writing, each access under a
//! `flock` on the file (shared to read, exclusive to write) so clients that keep the files and
//! lock them around their own updates never see, or cause, a half-written cache.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;

/// Largest cache file read (a bigger one is refused, never allocated).
pub const MAX_CACHE_FILE_BYTES: u64 = 1 << 30;
/// How long to wait for another holder of a file's lock.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// A held `flock`, released on drop.
#[derive(Debug)]
pub struct FileLock<'a>(BorrowedFd<'a>);

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, FlockOperation::Unlock);
    }
}

/// Locks `fd`'s file (shared or exclusive), waiting at most [`LOCK_WAIT`] for another holder:
/// a client that never lets go cannot stall the service.
pub fn lock(fd: BorrowedFd<'_>, exclusive: bool) -> io::Result<FileLock<'_>> {
    let op = if exclusive {
        FlockOperation::NonBlockingLockExclusive
    } else {
        FlockOperation::NonBlockingLockShared
    };
    let give_up = Instant::now() + LOCK_WAIT;
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(FileLock(fd)),
            Err(rustix::io::Errno::WOULDBLOCK) if Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reads the whole file behind `fd` from offset 0 under a shared lock (at most
/// [`MAX_CACHE_FILE_BYTES`]; reads until end of file, whatever its size was a moment ago).
pub fn read_file(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let _lock = lock(fd, false)?;
    let hint = rustix::fs::fstat(fd).map(|s| s.st_size.max(0) as u64)?;
    if hint > MAX_CACHE_FILE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "cache file too large",
        ));
    }
    let mut buf = vec![0u8; hint as usize + 1];
    let mut len = 0usize;
    loop {
        if len == buf.len() {
            if buf.len() as u64 > MAX_CACHE_FILE_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "cache file too large",
                ));
            }
            buf.resize(buf.len() * 2, 0);
        }
        match rustix::io::pread(fd, &mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// Replaces the content of the file behind `fd` with `bytes` (from offset 0, then truncated)
/// under an exclusive lock.
pub fn write_file(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    let _lock = lock(fd, true)?;
    let mut done = 0usize;
    while done < bytes.len() {
        match rustix::io::pwrite(fd, &bytes[done..], done as u64) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::fs::ftruncate(fd, bytes.len() as u64)?;
    Ok(())
}
