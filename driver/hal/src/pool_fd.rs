//! Received fds at the door: every fd a client gives as a memory pool is classified and
//! checked here, once, before any handler sees it (`frame::ReceivedFds::pool`), and becomes a
//! [`Memory`] the rest of the HAL can map or hand to the device without further doubt.
//!
//! | check | refused |
//! |---|---|
//! | kind | anything but a memfd, a regular file or a dma-buf (udmabuf included): pipes, sockets, directories, character and block devices |
//! | seals | a memfd sealed with `F_SEAL_WRITE` or `F_SEAL_FUTURE_WRITE` as a pool the daemon writes (outputs, copyTo targets) |
//! | access | an fd opened read-only, or an `mmap_fd` without `PROT_WRITE`, as a pool the daemon writes |
//! | size pinning | a memfd that cannot be sealed with `F_SEAL_SHRINK` (locked by `F_SEAL_SEAL` without it) |
//!
//! The size (`offset + size` within the fd's real size, [`check_size`]) is checked where the
//! pool is mapped or imported, after this door pinned it: a pool that does not fit its file is
//! one that cannot be mapped, GENERAL_FAILURE as NN HAL requires, not INVALID_ARGUMENT.
//!
//! SIGBUS policy (docs/service.md, "Item 1"): a memfd is sealed against shrinking here, before
//! anyone checks its size, so no mapping the daemon (or the device) makes of it can ever reach
//! past its end; a dma-buf never shrinks; a regular file cannot be sealed, so it is never
//! accessed through a mapping in the daemon (`memory::MappedPool` reads and writes it with
//! `pread`/`pwrite`), and a client truncating it fails its own execution.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nnaccel_uapi::sys;
use rustix::fs::{FileType, OFlags, SealFlags};

use crate::types::{Memory, MemoryKind};

/// What a received fd is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdKind {
    /// A memfd (shmem or hugetlbfs file that takes seals).
    Memfd,
    /// A regular file (a tmpfs file that is not a memfd included).
    RegularFile,
    /// A dma-buf from a heap or another exporter.
    DmaBuf,
    /// A dma-buf exported by udmabuf (over a memfd sealed against shrinking).
    Udmabuf,
}

/// What the daemon does with a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolRole {
    /// The daemon (or the device on its behalf) only reads it: model constants, request
    /// inputs, copyFrom sources.
    Read,
    /// The daemon writes it: request outputs, copyTo targets.
    Write,
}

impl PoolRole {
    fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "written",
        }
    }
}

/// Why a pool's fd is refused (INVALID_ARGUMENT; the text names the pool).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FdRefusal {
    /// Not a kind of memory.
    #[error("{0} is not memory (a memfd, regular file or dma-buf)")]
    NotMemory(&'static str),
    /// The fd cannot be examined.
    #[error("cannot examine the fd: {0}")]
    Unreadable(String),
    /// The declared range is past the end of the fd.
    #[error("{size} bytes at offset {offset} are past the end of its {real}-byte file")]
    PastEnd {
        /// Declared offset.
        offset: u64,
        /// Declared size.
        size: u64,
        /// The fd's real size.
        real: u64,
    },
    /// `offset + size` overflows.
    #[error("offset + size overflows")]
    Overflow,
    /// A memfd sealed against writing, given as a pool the daemon writes.
    #[error("a memfd sealed with {0} cannot be written")]
    SealedAgainstWriting(&'static str),
    /// An fd opened read-only, given as a pool the daemon writes.
    #[error("the fd is open read-only, and this pool is written")]
    ReadOnlyFd,
    /// An mmap_fd without PROT_WRITE, given as a pool the daemon writes.
    #[error("mmap_fd without PROT_WRITE, and this pool is written")]
    ReadOnlyProtection,
    /// A memfd whose size cannot be pinned.
    #[error(
        "a memfd sealed with F_SEAL_SEAL but not F_SEAL_SHRINK (its size could change under the service)"
    )]
    SizeNotPinnable,
}

/// Classifies `fd`.
pub fn classify(fd: BorrowedFd<'_>) -> Result<FdKind, FdRefusal> {
    let st = rustix::fs::fstat(fd).map_err(|e| FdRefusal::Unreadable(e.to_string()))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Fifo => return Err(FdRefusal::NotMemory("a pipe")),
        FileType::Socket => return Err(FdRefusal::NotMemory("a socket")),
        FileType::Directory => return Err(FdRefusal::NotMemory("a directory")),
        FileType::CharacterDevice => return Err(FdRefusal::NotMemory("a character device")),
        FileType::BlockDevice => return Err(FdRefusal::NotMemory("a block device")),
        FileType::Symlink => return Err(FdRefusal::NotMemory("a symlink")),
        FileType::Unknown => {
            // dma-bufs are anonymous inodes with no file type bits.
            if sys::is_dmabuf(fd) {
                return Ok(if dmabuf_exporter(fd).as_deref() == Some("udmabuf") {
                    FdKind::Udmabuf
                } else {
                    FdKind::DmaBuf
                });
            }
            return Err(FdRefusal::NotMemory(
                "an anonymous file that is not a dma-buf",
            ));
        }
    }
    // One fstatfs tells the filesystem; this runs for every pool of every request.
    let magic = sys::fs_magic(fd).map_err(|e| FdRefusal::Unreadable(e.to_string()))?;
    if magic == sys::DMA_BUF_MAGIC {
        return Ok(FdKind::DmaBuf);
    }
    if matches!(magic, sys::TMPFS_MAGIC | sys::HUGETLBFS_MAGIC)
        && let Ok(seals) = rustix::fs::fcntl_get_seals(fd)
    {
        // Every shmem file answers F_GET_SEALS (a plain tmpfs file, in /dev/shm or a tmpfs
        // /tmp, is born with F_SEAL_SEAL and can never take another seal), so a shrink seal
        // means a memfd: the door added it the first time the memfd came by. Only then is the
        // name asked for: a memfd's link reads "/memfd:NAME". A tmpfs file that is not a memfd
        // is a regular file here: never mapped without its size pinned, read and written with
        // pread/pwrite (memory.rs).
        if seals.contains(SealFlags::SHRINK) || is_memfd_name(fd) {
            return Ok(FdKind::Memfd);
        }
    }
    Ok(FdKind::RegularFile)
}

/// Whether the fd's link in /proc names a memfd.
fn is_memfd_name(fd: BorrowedFd<'_>) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|p| p.to_string_lossy().starts_with("/memfd:"))
}

/// The exporter's name of a dma-buf (`exp_name` in /proc/self/fdinfo).
fn dmabuf_exporter(fd: BorrowedFd<'_>) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("exp_name:"))
        .map(|n| n.trim().to_string())
}

/// Checks `memory` for `role` (see the module doc), sealing a memfd against shrinking; its
/// kind when it passes.
pub fn check_pool(memory: &Memory, role: PoolRole) -> Result<FdKind, FdRefusal> {
    let fd = memory.fd.as_fd();
    let kind = classify(fd)?;
    let seals = if kind == FdKind::Memfd {
        Some(pin_size(fd)?)
    } else {
        None
    };
    if role == PoolRole::Write {
        if let Some(seals) = seals {
            if seals.contains(SealFlags::WRITE) {
                return Err(FdRefusal::SealedAgainstWriting("F_SEAL_WRITE"));
            }
            if seals.contains(SealFlags::FUTURE_WRITE) {
                return Err(FdRefusal::SealedAgainstWriting("F_SEAL_FUTURE_WRITE"));
            }
        }
        let flags =
            rustix::fs::fcntl_getfl(fd).map_err(|e| FdRefusal::Unreadable(e.to_string()))?;
        if !flags.contains(OFlags::RDWR) {
            return Err(FdRefusal::ReadOnlyFd);
        }
        if let MemoryKind::MmapFd { prot, .. } = memory.kind
            && prot & libc::PROT_WRITE == 0
        {
            return Err(FdRefusal::ReadOnlyProtection);
        }
    }
    Ok(kind)
}

/// Whether `memory`'s declared range (`offset + size`) lies within its fd's real size now (a
/// hardware_buffer of size 0 is its whole fd). Meaningful for good only once the size is
/// pinned ([`check_pool`] seals memfds; dma-bufs never shrink).
pub fn check_size(memory: &Memory) -> Result<(), FdRefusal> {
    if memory.kind == MemoryKind::HardwareBuffer && memory.size == 0 {
        return Ok(());
    }
    let offset = match memory.kind {
        MemoryKind::MmapFd { offset, .. } => offset,
        _ => 0,
    };
    let end = offset.checked_add(memory.size).ok_or(FdRefusal::Overflow)?;
    let real = sys::fd_size(memory.fd.as_fd()).map_err(|e| FdRefusal::Unreadable(e.to_string()))?;
    if end > real {
        return Err(FdRefusal::PastEnd {
            offset,
            size: memory.size,
            real,
        });
    }
    Ok(())
}

/// Seals a memfd against shrinking (already sealed is fine); its seals, shrink included.
fn pin_size(fd: BorrowedFd<'_>) -> Result<SealFlags, FdRefusal> {
    let seals = sys::seals(fd);
    if !seals.contains(SealFlags::SHRINK) {
        rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK)
            .map_err(|_| FdRefusal::SizeNotPinnable)?;
    }
    Ok(seals | SealFlags::SHRINK)
}

/// The refusal's text for the client, naming the pool.
pub fn reason(pool: &str, role: PoolRole, refusal: &FdRefusal) -> String {
    format!("{pool} (a pool the service has {}): {refusal}", role.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::sync::Arc;

    fn memfd(size: u64) -> OwnedFd {
        sys::memfd_create(c"pool-fd-test", size).unwrap()
    }

    fn ashmem(fd: OwnedFd, size: u64) -> Memory {
        Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(fd),
            size,
        }
    }

    #[test]
    fn memfds_regular_files_and_non_memory_are_told_apart() {
        assert_eq!(classify(memfd(4096).as_fd()), Ok(FdKind::Memfd));
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        assert_eq!(classify(exe.as_fd()), Ok(FdKind::RegularFile));
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(classify(r.as_fd()), Err(FdRefusal::NotMemory("a pipe")));
        let (s, _t) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(classify(s.as_fd()), Err(FdRefusal::NotMemory("a socket")));
        let dir = std::fs::File::open("/").unwrap();
        assert_eq!(
            classify(dir.as_fd()),
            Err(FdRefusal::NotMemory("a directory"))
        );
        let null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            classify(null.as_fd()),
            Err(FdRefusal::NotMemory("a character device"))
        );
    }

    #[test]
    fn a_memfd_is_sealed_against_shrinking_at_the_door() {
        let m = ashmem(memfd(8192), 8192);
        assert_eq!(check_pool(&m, PoolRole::Read), Ok(FdKind::Memfd));
        assert!(sys::seals(m.fd.as_fd()).contains(SealFlags::SHRINK));
        assert!(rustix::fs::ftruncate(&*m.fd, 0).is_err());
    }

    #[test]
    fn a_memfd_whose_size_cannot_be_pinned_is_refused() {
        let fd = memfd(4096);
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SEAL).unwrap();
        assert_eq!(
            check_pool(&ashmem(fd, 4096), PoolRole::Read),
            Err(FdRefusal::SizeNotPinnable)
        );
    }

    #[test]
    fn write_sealed_memfds_are_inputs_only() {
        for (seal, name) in [
            (SealFlags::WRITE, "F_SEAL_WRITE"),
            (SealFlags::FUTURE_WRITE, "F_SEAL_FUTURE_WRITE"),
        ] {
            let fd = memfd(4096);
            rustix::fs::fcntl_add_seals(&fd, seal).unwrap();
            let m = ashmem(fd, 4096);
            assert_eq!(check_pool(&m, PoolRole::Read), Ok(FdKind::Memfd));
            assert_eq!(
                check_pool(&m, PoolRole::Write),
                Err(FdRefusal::SealedAgainstWriting(name))
            );
        }
    }

    #[test]
    fn sizes_past_the_end_do_not_fit() {
        let m = ashmem(memfd(4096), 8192);
        assert!(matches!(
            check_size(&m),
            Err(FdRefusal::PastEnd { real: 4096, .. })
        ));
        assert_eq!(check_size(&ashmem(memfd(4096), 4096)), Ok(()));
        let at = Memory {
            kind: MemoryKind::MmapFd {
                prot: libc::PROT_READ,
                offset: u64::MAX,
            },
            ..ashmem(memfd(4096), 1)
        };
        assert_eq!(check_size(&at), Err(FdRefusal::Overflow));
    }

    #[test]
    fn read_only_fds_and_protections_are_not_written() {
        let path = std::env::temp_dir().join(format!("nnaccel-pool-fd-{}", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(4096).unwrap();
        let ro = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let m = ashmem(OwnedFd::from(ro), 4096);
        assert_eq!(check_pool(&m, PoolRole::Read), Ok(FdKind::RegularFile));
        assert_eq!(check_pool(&m, PoolRole::Write), Err(FdRefusal::ReadOnlyFd));
        let m = Memory {
            kind: MemoryKind::MmapFd {
                prot: libc::PROT_READ,
                offset: 0,
            },
            ..ashmem(memfd(4096), 4096)
        };
        assert_eq!(
            check_pool(&m, PoolRole::Write),
            Err(FdRefusal::ReadOnlyProtection)
        );
    }
}
