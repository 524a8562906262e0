//! Frames on a Unix stream socket with file descriptors attached (`SCM_RIGHTS`), and the
//! memory descriptors that name those fds. The service's protocol (`nnaccel-protocol`) and the
//! burst's callback channel ([`crate::burst`]) both speak in these frames; `docs/protocol.md`
//! specifies them.
//!
//! A frame on the stream socket is a 16-byte header — magic `NNAH`, body length, fd count,
//! zero — sent in one `sendmsg` with the frame's fds attached, then the body. The receiver
//! bounds both the body length and the fd count before reading anything else.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

use crate::pool_fd::{self, PoolRole};
use crate::types::{Memory, MemoryKind};

/// Frame magic.
pub const FRAME_MAGIC: [u8; 4] = *b"NNAH";
/// Default largest body a peer accepts.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Most fds one frame may carry.
pub const MAX_FDS_PER_FRAME: usize = 64;
const HEADER_LEN: usize = 16;

/// Framing errors (the service protocol's errors too).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The peer closed the connection.
    #[error("connection closed")]
    Closed,
    /// The frame breaks the framing rules.
    #[error("malformed frame: {0}")]
    BadFrame(String),
    /// The body does not decode.
    #[error("malformed message: {0}")]
    BadMessage(String),
    /// A pool's fd failed the door checks ([`crate::pool_fd`]); the text names the pool.
    #[error("refused pool: {0}")]
    RefusedPool(String),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<rustix::io::Errno> for ProtocolError {
    fn from(e: rustix::io::Errno) -> Self {
        Self::Io(e.into())
    }
}

/// Sends one frame with `fds` attached.
pub fn send_frame(
    sock: &UnixStream,
    body: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), ProtocolError> {
    if fds.len() > MAX_FDS_PER_FRAME {
        return Err(ProtocolError::BadFrame(format!(
            "{} fds exceed {MAX_FDS_PER_FRAME}",
            fds.len()
        )));
    }
    let len =
        u32::try_from(body.len()).map_err(|_| ProtocolError::BadFrame("body too large".into()))?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&FRAME_MAGIC);
    header[4..8].copy_from_slice(&len.to_le_bytes());
    header[8..12].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_FRAME))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(ProtocolError::BadFrame("cannot attach fds".into()));
    }
    // The fds ride on the header's bytes; retry the rest of the header without them.
    let mut sent = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&header)],
        &mut cmsg,
        SendFlags::NOSIGNAL,
    )?;
    while sent < HEADER_LEN {
        sent += rustix::net::send(sock, &header[sent..], SendFlags::NOSIGNAL)?;
    }
    let mut w = sock;
    w.write_all(body)?;
    Ok(())
}

/// Receives one frame: its body (at most `max_body` bytes) and fds.
pub fn recv_frame(
    sock: &UnixStream,
    max_body: usize,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError> {
    recv_frame_inner(sock, max_body, None, || None, |_| Ok(())).map(|(b, f, ())| (b, f))
}

/// [`recv_frame`] for a server facing untrusted peers: the header's first byte must come by
/// `idle_by` (else a `WouldBlock`/`TimedOut` I/O error: the connection was idle), and once it
/// came the rest of the frame must arrive within `body_within`, however the peer trickles it
/// (a `TimedOut` I/O error). `admit` sees the announced body length before the body is
/// allocated; its guard (a share of a global byte budget, say) is returned with the frame, and
/// its error refuses the frame. The socket's read timeout is left changed.
pub fn recv_frame_guarded<G>(
    sock: &UnixStream,
    max_body: usize,
    idle_by: Option<std::time::Instant>,
    body_within: std::time::Duration,
    admit: impl FnOnce(usize) -> Result<G, ProtocolError>,
) -> Result<(Vec<u8>, Vec<OwnedFd>, G), ProtocolError> {
    // This function owns the socket's read timeout: the previous frame left its own, so with
    // no bound for the first byte the wait must have none either (else a connection that holds
    // objects and is quiet for a frame's deadline would be closed as "idle"). Plain
    // `recv_frame` keeps whatever timeout its caller set.
    if idle_by.is_none() {
        sock.set_read_timeout(None)?;
    }
    recv_frame_inner(
        sock,
        max_body,
        idle_by,
        || Some(std::time::Instant::now() + body_within),
        admit,
    )
}

/// [`recv_frame`] that gives up at `deadline` however the peer trickles its bytes: each read
/// waits at most until then (the socket's read timeout is set before each one, so it is left
/// changed), and the frame fails with a `TimedOut` I/O error when it passes.
pub(crate) fn recv_frame_by(
    sock: &UnixStream,
    max_body: usize,
    deadline: std::time::Instant,
) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError> {
    recv_frame_inner(
        sock,
        max_body,
        Some(deadline),
        || Some(deadline),
        |_| Ok(()),
    )
    .map(|(b, f, ())| (b, f))
}

/// Sets the read timeout to what is left until `deadline`; TimedOut when nothing is.
fn wait_at_most_until(
    sock: &UnixStream,
    deadline: Option<std::time::Instant>,
) -> Result<(), ProtocolError> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return Err(ProtocolError::Io(io::ErrorKind::TimedOut.into()));
    }
    sock.set_read_timeout(Some(left))?;
    Ok(())
}

/// `read_exact` in reads that each wait at most until `deadline`.
fn read_exact_by(
    sock: &UnixStream,
    buf: &mut [u8],
    deadline: Option<std::time::Instant>,
) -> Result<(), ProtocolError> {
    let mut r = sock;
    let mut done = 0;
    while done < buf.len() {
        wait_at_most_until(sock, deadline)?;
        match r.read(&mut buf[done..]) {
            Ok(0) => return Err(ProtocolError::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ProtocolError::Io(e)),
        }
    }
    Ok(())
}

fn recv_frame_inner<G>(
    sock: &UnixStream,
    max_body: usize,
    first_byte_by: Option<std::time::Instant>,
    rest_by: impl FnOnce() -> Option<std::time::Instant>,
    admit: impl FnOnce(usize) -> Result<G, ProtocolError>,
) -> Result<(Vec<u8>, Vec<OwnedFd>, G), ProtocolError> {
    wait_at_most_until(sock, first_byte_by)?;
    let mut header = [0u8; HEADER_LEN];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_FRAME))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut header)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if msg.bytes == 0 {
        return Err(ProtocolError::Closed);
    }
    let deadline = rest_by();
    // The control buffer has slack beyond MAX_FDS_PER_FRAME (cmsg alignment), so a
    // few extra fds may arrive untruncated; the limit is on the count, not the buffer.
    if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) || fds.len() > MAX_FDS_PER_FRAME {
        return Err(ProtocolError::BadFrame(format!(
            "more than {MAX_FDS_PER_FRAME} fds"
        )));
    }
    if msg.bytes < HEADER_LEN {
        read_exact_by(sock, &mut header[msg.bytes..], deadline)?;
    }
    if header[..4] != FRAME_MAGIC || header[12..16] != [0; 4] {
        return Err(ProtocolError::BadFrame(
            "bad magic or reserved bytes".into(),
        ));
    }
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    let nfds = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    if len > max_body {
        return Err(ProtocolError::BadFrame(format!(
            "{len}-byte body exceeds the {max_body}-byte limit"
        )));
    }
    if nfds != fds.len() {
        return Err(ProtocolError::BadFrame(format!(
            "header announces {nfds} fds, {} arrived",
            fds.len()
        )));
    }
    let guard = admit(len)?;
    let mut body = vec![0u8; len];
    read_exact_by(sock, &mut body, deadline)?;
    Ok((body, fds, guard))
}

/// Encodes a message.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    postcard::to_stdvec(msg).map_err(|e| ProtocolError::BadMessage(e.to_string()))
}

/// Decodes a message; trailing bytes are an error.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ProtocolError> {
    let (msg, rest) =
        postcard::take_from_bytes(body).map_err(|e| ProtocolError::BadMessage(e.to_string()))?;
    if !rest.is_empty() {
        return Err(ProtocolError::BadMessage(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(msg)
}

/// A memory pool on the wire: its fd travels in the frame, named by index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireMemory {
    /// 0 ashmem, 1 mmap_fd, 2 hardware_buffer_blob, 3 hardware_buffer.
    pub kind: u8,
    /// mmap_fd protection.
    pub prot: i32,
    /// mmap_fd offset.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Index of the fd in the frame.
    pub fd_index: u32,
}

/// Collects the fds of outgoing pools.
#[derive(Debug, Default)]
pub struct FdList<'a> {
    fds: Vec<BorrowedFd<'a>>,
}

impl<'a> FdList<'a> {
    /// The fds, in index order.
    pub fn fds(&self) -> &[BorrowedFd<'a>] {
        &self.fds
    }

    /// Adds an fd that is not a pool (a queue, a socket); returns its index.
    pub fn push(&mut self, fd: BorrowedFd<'a>) -> u32 {
        self.fds.push(fd);
        (self.fds.len() - 1) as u32
    }

    /// Adds `mem`'s fd to the list and describes it.
    pub fn add(&mut self, mem: &'a Memory) -> WireMemory {
        let fd_index = self.fds.len() as u32;
        self.fds.push(mem.fd.as_fd());
        let (kind, prot, offset) = match mem.kind {
            MemoryKind::Ashmem => (0, 0, 0),
            MemoryKind::MmapFd { prot, offset } => (1, prot, offset),
            MemoryKind::HardwareBufferBlob => (2, 0, 0),
            MemoryKind::HardwareBuffer => (3, 0, 0),
        };
        WireMemory {
            kind,
            prot,
            offset,
            size: mem.size,
            fd_index,
        }
    }
}

fn bad(msg: impl Into<String>) -> ProtocolError {
    ProtocolError::BadMessage(msg.into())
}

/// Received fds, each usable by at most one pool.
#[derive(Debug)]
pub struct ReceivedFds {
    fds: Vec<Option<Arc<OwnedFd>>>,
}

impl ReceivedFds {
    /// Wraps the fds of a frame.
    pub fn new(fds: Vec<OwnedFd>) -> Self {
        Self {
            fds: fds.into_iter().map(|f| Some(Arc::new(f))).collect(),
        }
    }

    /// The memory `w` describes, claiming its fd, checked as a pool the service only reads
    /// (a burst's slots: see [`ReceivedFds::pool`]).
    pub fn memory(&mut self, w: &WireMemory) -> Result<Memory, ProtocolError> {
        let name = format!("the pool at fd index {}", w.fd_index);
        self.pool(w, &name, PoolRole::Read)
    }

    /// The memory `w` describes, claiming its fd: the one door every received pool passes.
    /// The fd is checked for `role` ([`pool_fd::check_pool`]: kind, size, seals, protection;
    /// a memfd is sealed against shrinking) before any handler sees it; a refusal names the
    /// pool (`name`).
    pub fn pool(
        &mut self,
        w: &WireMemory,
        name: &str,
        role: PoolRole,
    ) -> Result<Memory, ProtocolError> {
        let memory = self.unchecked(w)?;
        pool_fd::check_pool(&memory, role)
            .map_err(|e| ProtocolError::RefusedPool(pool_fd::reason(name, role, &e)))?;
        Ok(memory)
    }

    fn unchecked(&mut self, w: &WireMemory) -> Result<Memory, ProtocolError> {
        let slot = self
            .fds
            .get_mut(w.fd_index as usize)
            .ok_or_else(|| bad(format!("fd index {} out of range", w.fd_index)))?;
        let fd = slot
            .take()
            .ok_or_else(|| bad(format!("fd index {} used twice", w.fd_index)))?;
        let kind = match w.kind {
            0 => MemoryKind::Ashmem,
            1 => MemoryKind::MmapFd {
                prot: w.prot,
                offset: w.offset,
            },
            2 => MemoryKind::HardwareBufferBlob,
            3 => MemoryKind::HardwareBuffer,
            k => return Err(bad(format!("unknown memory kind {k}"))),
        };
        Ok(Memory {
            kind,
            fd,
            size: w.size,
        })
    }

    /// Whether every fd was claimed by a pool.
    pub fn all_used(&self) -> bool {
        self.fds.iter().all(Option::is_none)
    }

    /// Claims the fd at `index` for something other than a pool (a queue, a socket, a cache
    /// file); each fd serves once.
    pub fn take_fd(&mut self, index: usize) -> Result<OwnedFd, ProtocolError> {
        let fd = self
            .fds
            .get_mut(index)
            .and_then(Option::take)
            .ok_or_else(|| bad(format!("no unclaimed fd at index {index}")))?;
        Arc::try_unwrap(fd).map_err(|_| bad(format!("fd {index} is shared")))
    }
}

/// A memory pool for the wire; its fd is added to `fds`.
pub fn memory_to_wire<'a>(memory: &'a Memory, fds: &mut FdList<'a>) -> WireMemory {
    fds.add(memory)
}

/// A memory pool from the wire, checked for `role` ([`ReceivedFds::pool`]); `name` names it
/// in a refusal.
pub fn memory_from_wire(
    w: &WireMemory,
    fds: &mut ReceivedFds,
    name: &str,
    role: PoolRole,
) -> Result<Memory, ProtocolError> {
    fds.pool(w, name, role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_connection_with_no_idle_bound_outlives_the_last_frames_deadline() {
        let (a, b) = UnixStream::pair().unwrap();
        let body_within = std::time::Duration::from_millis(50);
        send_frame(&a, b"one", &[]).unwrap();
        recv_frame_guarded(&b, 1024, None, body_within, |_| Ok(())).unwrap();
        // The receiver waits first; the peer stays quiet for longer than the first frame's
        // deadline, then sends the next frame.
        let sender = std::thread::spawn(move || {
            std::thread::sleep(body_within * 3);
            send_frame(&a, b"two", &[]).unwrap();
            a
        });
        let (body, _, ()) = recv_frame_guarded(&b, 1024, None, body_within, |_| Ok(())).unwrap();
        assert_eq!(body, b"two");
        drop(sender.join().unwrap());
    }

    fn pair() -> (UnixStream, UnixStream) {
        UnixStream::pair().unwrap()
    }

    #[test]
    fn frames_carry_bodies_and_fds() {
        let (a, b) = pair();
        let memfd = nnaccel_uapi::sys::memfd_create(c"frame", 4096).unwrap();
        send_frame(&a, b"hello", &[memfd.as_fd()]).unwrap();
        let (body, fds) = recv_frame(&b, 1024).unwrap();
        assert_eq!(body, b"hello");
        assert_eq!(fds.len(), 1);
        assert_eq!(nnaccel_uapi::sys::file_size(fds[0].as_fd()).unwrap(), 4096);
    }

    #[test]
    fn oversized_bodies_are_refused_before_reading_them() {
        let (a, b) = pair();
        send_frame(&a, &[0u8; 100], &[]).unwrap();
        assert!(matches!(
            recv_frame(&b, 99),
            Err(ProtocolError::BadFrame(_))
        ));
    }

    #[test]
    fn garbage_is_a_bad_frame_and_eof_is_closed() {
        let (a, b) = pair();
        (&a).write_all(b"GARBAGEGARBAGE!!").unwrap();
        assert!(matches!(
            recv_frame(&b, 1024),
            Err(ProtocolError::BadFrame(_))
        ));
        drop(a);
        assert!(matches!(recv_frame(&b, 1024), Err(ProtocolError::Closed)));
    }

    #[test]
    fn fd_indexes_are_checked_and_used_once() {
        let memfd = nnaccel_uapi::sys::memfd_create(c"f", 4096).unwrap();
        let mut fds = ReceivedFds::new(vec![memfd]);
        let w = WireMemory {
            kind: 0,
            prot: 0,
            offset: 0,
            size: 4096,
            fd_index: 0,
        };
        assert!(fds.memory(&w).is_ok());
        assert!(fds.memory(&w).is_err(), "the same fd twice");
        assert!(
            fds.memory(&WireMemory {
                fd_index: 5,
                ..w.clone()
            })
            .is_err()
        );
        assert!(fds.all_used());
    }
}
