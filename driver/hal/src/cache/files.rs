//! Reading and writing client cache files through their fds: whole files from offset 0
//! whatever the fd's offset (`pread`/`pwrite`), truncated after writing, each access under a
//! `flock` on the file (shared to read, exclusive to write) so clients that keep the files and
//! lock them around their own updates never see, or cause, a half-written cache.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;

/// Largest cache file read (a bigger one is refused, never allocated): bounds the memory a
/// client's data cache can make the service take.
pub(crate) const MAX_CACHE_FILE_BYTES: u64 = 1 << 30;
/// Largest model-cache file read: its encoded structure is tens of bytes per operand.
pub(crate) const MAX_MODEL_CACHE_BYTES: u64 = 64 << 20;
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

/// Chunk size of streamed reads: small enough to stay in cache between the copy and the hash.
const CHUNK: usize = 1 << 20;

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "cache file too large")
}

/// Reads `fd` from `offset` to end of file (at most `max` bytes, else an error) in chunks,
/// handing each to `sink`; returns the bytes read. No lock: see [`read_file_with`].
pub(crate) fn read_chunks(
    fd: BorrowedFd<'_>,
    offset: u64,
    max: u64,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0u64;
    loop {
        match rustix::io::pread(fd, &mut buf, offset + done) {
            Ok(0) => return Ok(done),
            Ok(n) => {
                done += n as u64;
                if done > max {
                    return Err(too_large());
                }
                sink(&buf[..n])?;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Refuses a client's cache fd that is not a regular file (a character device such as
/// `/dev/zero` reads without end, whatever its size says) or that is already larger than
/// `max` bytes, before anything is read or allocated.
fn check_client_file(fd: BorrowedFd<'_>, max: u64) -> io::Result<()> {
    let st = rustix::fs::fstat(fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a cache file must be a regular file",
        ));
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > max {
        return Err(too_large());
    }
    Ok(())
}

/// Reads the whole file behind `fd` (at most `max` bytes) from offset 0 under a shared lock,
/// whatever the fd's offset, handing the bytes to `sink` in chunks; returns the length.
pub(crate) fn read_file_with(
    fd: BorrowedFd<'_>,
    max: u64,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<u64> {
    check_client_file(fd, max)?;
    let _lock = lock(fd, false)?;
    read_chunks(fd, 0, max, sink)
}

/// Bytes copied into a private memfd (sealed against shrinking and growing once complete):
/// the data cache as the prepared model's constant pool, shared with the device without a
/// further copy.
#[derive(Debug)]
pub struct MemfdBuffer {
    fd: Option<std::os::fd::OwnedFd>,
    len: u64,
}

impl MemfdBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self { fd: None, len: 0 }
    }

    /// Appends `bytes`.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let fd = match &self.fd {
            Some(fd) => fd,
            None => self.fd.insert(rustix::fs::memfd_create(
                c"nnaccel-cache-data",
                rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
            )?),
        };
        let mut done = 0usize;
        while done < bytes.len() {
            match rustix::io::pwrite(fd, &bytes[done..], self.len + done as u64) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let Some(fd) = &self.fd else {
            return if buf.is_empty() {
                Ok(())
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        };
        nnaccel_uapi::sys::pread_exact(fd.as_fd(), offset, buf)
    }

    /// Seals the size and hands the memfd over (None when empty).
    pub fn into_fd(self) -> io::Result<Option<std::os::fd::OwnedFd>> {
        if let Some(fd) = &self.fd {
            rustix::fs::fcntl_add_seals(
                fd,
                rustix::fs::SealFlags::SHRINK
                    | rustix::fs::SealFlags::GROW
                    | rustix::fs::SealFlags::SEAL,
            )?;
        }
        Ok(self.fd)
    }
}

impl Default for MemfdBuffer {
    fn default() -> Self {
        Self::new()
    }
}

/// Replaces the content of the file behind `fd` with `bytes` (from offset 0, then truncated,
/// then `fdatasync`ed) under an exclusive lock. A client's fd cannot be written through a
/// temporary name and renamed (the driver has no name for it), so a write that fails part way
/// (ENOSPC, EDQUOT, EIO) truncates the file to empty before returning the error: no partial
/// cache is ever left behind, and the caller drops the token's record, so the file never loads.
pub(crate) fn write_file(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    // pwrite on an O_APPEND file appends whatever the offset: the cache would never load.
    if rustix::fs::fcntl_getfl(fd)?.contains(rustix::fs::OFlags::APPEND) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cache file opened with O_APPEND",
        ));
    }
    check_client_file(fd, u64::MAX)?;
    let _lock = lock(fd, true)?;
    let written = (|| {
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
        rustix::fs::fdatasync(fd)?;
        Ok(())
    })();
    if written.is_err() {
        discard_locked(fd);
    }
    written
}

/// Empties a client cache file (best effort: truncating frees space, so it works on a full
/// file system too). Used when a save fails part way, so no partial cache is left.
pub(crate) fn discard(fd: BorrowedFd<'_>) {
    if let Ok(_lock) = lock(fd, true) {
        discard_locked(fd);
    }
}

fn discard_locked(fd: BorrowedFd<'_>) {
    if let Err(e) = rustix::fs::ftruncate(fd, 0) {
        tracing::warn!("cannot empty a cache file after a failed write: {e}");
    }
}

/// Runs `read`, which hands the bytes it reads to its argument in chunks: each chunk goes to
/// `sink` on this thread and to `hash` on a second thread, so hashing overlaps reading and
/// copying (both cost about the same per byte). Returns what `read` returns.
pub(crate) fn read_hashing_aside(
    hash: &mut (dyn FnMut(&[u8]) + Send),
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    read: impl FnOnce(&mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<u64>,
) -> io::Result<u64> {
    use std::sync::mpsc;
    std::thread::scope(|s| {
        let (to_hasher, chunks) = mpsc::sync_channel::<Vec<u8>>(4);
        let (recycle, spare) = mpsc::channel::<Vec<u8>>();
        let hasher = s.spawn(move || {
            for chunk in chunks {
                hash(&chunk);
                let _ = recycle.send(chunk);
            }
        });
        let result = read(&mut |c: &[u8]| {
            sink(c)?;
            let mut buf = spare.try_recv().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(c);
            to_hasher
                .send(buf)
                .map_err(|_| io::Error::other("the hashing thread ended"))
        });
        drop(to_hasher);
        hasher
            .join()
            .map_err(|_| io::Error::other("the hashing thread panicked"))?;
        result
    })
}

#[cfg(test)]
mod hardening_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_character_device_as_cache_file_is_refused_before_any_byte_is_read() {
        let zero = std::fs::File::open("/dev/zero").unwrap();
        let mut got = 0u64;
        let r = read_file_with(zero.as_fd(), MAX_CACHE_FILE_BYTES, &mut |c| {
            got += c.len() as u64;
            Ok(())
        });
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(got, 0, "bytes read from /dev/zero");
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        assert_eq!(
            write_file(null.as_fd(), b"cache").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn a_cache_file_larger_than_the_limit_is_refused_before_any_byte_is_read() {
        let f = std::fs::File::from(
            rustix::fs::memfd_create(c"cache-file", rustix::fs::MemfdFlags::CLOEXEC).unwrap(),
        );
        f.set_len(4096).unwrap();
        let mut got = 0u64;
        let r = read_file_with(f.as_fd(), 1024, &mut |c| {
            got += c.len() as u64;
            Ok(())
        });
        assert!(r.is_err());
        assert_eq!(got, 0);
        assert_eq!(
            read_file_with(f.as_fd(), 4096, &mut |_| Ok(())).unwrap(),
            4096
        );
    }

    #[test]
    fn a_write_that_fails_part_way_leaves_the_file_empty_not_partial() {
        // A memfd sealed against growing stands in for a full file system: the first 8 KiB
        // go in, then the write fails (EPERM), part way through.
        let fd = rustix::fs::memfd_create(
            c"cache-file",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .unwrap();
        let f = std::fs::File::from(fd);
        f.set_len(8192).unwrap();
        rustix::fs::fcntl_add_seals(&f, rustix::fs::SealFlags::GROW).unwrap();
        let r = write_file(f.as_fd(), &vec![7u8; 64 << 10]);
        assert!(r.is_err(), "the write cannot fit");
        assert_eq!(
            f.metadata().unwrap().len(),
            0,
            "a partial cache file is left"
        );
    }
}
