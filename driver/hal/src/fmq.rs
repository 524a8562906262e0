//! Fast message queues (libfmq's synchronized flavour, REFERENCE.md §4): a single-producer,
//! single-consumer ring of fixed-size datums in a memfd that two processes map.
//!
//! Region layout (`region_size` rounds it up to the page size):
//!
//! | offset | field |
//! |---|---|
//! | 0 | read counter, u64: bytes ever read |
//! | 8 | write counter, u64: bytes ever written |
//! | 16 | the ring: `capacity × datum_size` bytes |
//! | 16 + ring, rounded up to 8 | the event-flag word, u32 (`NOT_FULL` 0x1, `NOT_EMPTY` 0x2) |
//!
//! The counters only grow; `counter % ring` is the offset. The reader owns the read counter and
//! the writer the write counter; each publishes with a release store and reads the other's with
//! an acquire load. A write that does not fit fails (the synchronized flavour never overwrites
//! unread data). The peer is untrusted: counters that claim more than a ring of data are an
//! error, never an out-of-bounds access.
//!
//! The peer can write the whole region at any time, so this side holds no reference to it but
//! the atomics (the counters and the event flag, which both sides only access atomically): the
//! ring's bytes are copied in and out through the mapping's volatile view, into and out of the
//! caller's own buffers, which are what gets decoded and checked.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use nnaccel_uapi::sys::{self, FutexWait, Mapping, VolatileSlice};
use serde::{Deserialize, Serialize};

/// Event-flag bit: the queue has room (set by the reader after a read).
pub const NOT_FULL: u32 = 0x1;
/// Event-flag bit: the queue has data (set by the writer after a write).
pub const NOT_EMPTY: u32 = 0x2;
/// Event-flag bit outside libfmq's two: the queue's writer is running and will write soon, so
/// its reader may poll (spin) for a bounded time instead of sleeping. Set and cleared with
/// [`Fmq::announce`] and [`Fmq::withdraw`], which never wake anyone (futex waits and wakes
/// carry the event bits as their bitset, so this bit is in no waiter's mask); changing it only
/// makes a wait that was about to start see a changed word and look again.
pub const WRITER_BUSY: u32 = 0x4;

const READ_COUNTER: usize = 0;
const WRITE_COUNTER: usize = 8;
const RING: usize = 16;
/// Largest ring accepted from a peer (64 MiB).
pub(crate) const MAX_RING_BYTES: u64 = 64 << 20;

/// What travels with the memfd: enough for the receiver to check what it maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FmqDescriptor {
    /// Bytes per datum.
    pub datum_size: u32,
    /// Datums the ring holds.
    pub capacity: u32,
    /// Bytes of the whole region (page multiple).
    pub region_size: u64,
}

/// Queue errors.
#[derive(Debug, thiserror::Error)]
pub enum FmqError {
    /// The descriptor or the memfd behind it does not describe a valid queue.
    #[error("bad queue descriptor: {0}")]
    BadDescriptor(String),
    /// The peer wrote counters that cannot be right.
    #[error("queue counters are corrupt (read {read}, write {write})")]
    Corrupt {
        /// Read counter.
        read: u64,
        /// Write counter.
        write: u64,
    },
    /// More datums than the queue can ever hold, or a length not a multiple of the datum.
    #[error("{0} bytes can never pass through this queue")]
    TooLarge(usize),
    /// The blocking call's timeout passed.
    #[error("timed out")]
    TimedOut,
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Offset of the event-flag word for a ring of `ring_bytes`.
fn event_flag_offset(ring_bytes: u64) -> u64 {
    (RING as u64 + ring_bytes).div_ceil(8) * 8
}

/// The region size for `capacity` datums of `datum_size` bytes; None when out of range.
pub fn region_size(datum_size: u32, capacity: u32) -> Option<u64> {
    if datum_size == 0 || capacity == 0 {
        return None;
    }
    let ring = u64::from(datum_size) * u64::from(capacity);
    if ring > MAX_RING_BYTES {
        return None;
    }
    let end = event_flag_offset(ring) + 4;
    Some(end.div_ceil(page_size()) * page_size())
}

/// One end of a queue: the mapping of its region (and the memfd, to send to the peer).
#[derive(Debug)]
pub struct Fmq {
    map: Mapping,
    fd: OwnedFd,
    desc: FmqDescriptor,
    ring_bytes: u64,
    flag_offset: usize,
}

impl Fmq {
    /// Creates a queue of `capacity` datums of `datum_size` bytes in a new memfd, sealed
    /// against resizing so neither side's mapping can fault.
    pub fn create(datum_size: u32, capacity: u32) -> Result<Self, FmqError> {
        let size = region_size(datum_size, capacity).ok_or_else(|| {
            FmqError::BadDescriptor(format!("{capacity} datums of {datum_size} bytes"))
        })?;
        let fd = sys::memfd_create(c"nnaccel-fmq", size)?;
        sys::seal_size(fd.as_fd())?;
        let desc = FmqDescriptor {
            datum_size,
            capacity,
            region_size: size,
        };
        let q = Self::map(fd, desc)?;
        q.flag().store(0, Ordering::SeqCst);
        Ok(q)
    }

    /// Maps a queue received from a peer, after checking `desc` against the datum size this
    /// side expects, the descriptor's own arithmetic, and the memfd (shmem, large enough, and
    /// sealed against shrinking — sealed here if the peer did not).
    pub fn from_fd(fd: OwnedFd, desc: FmqDescriptor, datum_size: u32) -> Result<Self, FmqError> {
        let bad = |m: String| Err(FmqError::BadDescriptor(m));
        if desc.datum_size != datum_size {
            return bad(format!(
                "datum size {} where {datum_size} was expected",
                desc.datum_size
            ));
        }
        match region_size(desc.datum_size, desc.capacity) {
            Some(s) if s == desc.region_size => {}
            _ => {
                return bad(format!(
                    "region of {} bytes for {} datums of {} bytes",
                    desc.region_size, desc.capacity, desc.datum_size
                ));
            }
        }
        if !sys::is_shmem(fd.as_fd()) {
            return bad("the queue is not in a memfd".into());
        }
        let seals = sys::seals(fd.as_fd());
        if !seals.contains(rustix::fs::SealFlags::SHRINK) && sys::seal_size(fd.as_fd()).is_err() {
            return bad("the queue's memfd cannot be sealed against shrinking".into());
        }
        let size = sys::file_size(fd.as_fd())?;
        if size < desc.region_size {
            return bad(format!(
                "the memfd has {size} bytes, the queue needs {}",
                desc.region_size
            ));
        }
        Self::map(fd, desc)
    }

    fn map(fd: OwnedFd, desc: FmqDescriptor) -> Result<Self, FmqError> {
        let len = usize::try_from(desc.region_size)
            .map_err(|_| FmqError::BadDescriptor("region too large".into()))?;
        let map = Mapping::map_shared(fd.as_fd(), 0, len, true)?;
        let ring_bytes = u64::from(desc.datum_size) * u64::from(desc.capacity);
        Ok(Self {
            map,
            fd,
            desc,
            ring_bytes,
            flag_offset: event_flag_offset(ring_bytes) as usize,
        })
    }

    /// The descriptor to send with [`Fmq::fd`].
    pub fn descriptor(&self) -> FmqDescriptor {
        self.desc
    }

    /// The memfd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Datums the ring holds.
    pub fn capacity(&self) -> usize {
        self.desc.capacity as usize
    }

    /// Bytes per datum.
    pub fn datum_size(&self) -> usize {
        self.desc.datum_size as usize
    }

    fn counter(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: offsets 0 and 8 are 8-aligned (the mapping is page aligned) and inside the
        // region (at least one page); the mapping lives as long as `self`. Both processes only
        // access the word atomically.
        unsafe { &*self.map.as_ptr().wrapping_add(offset).cast::<AtomicU64>() }
    }

    /// The event-flag word (also the futex word io_uring waits on).
    pub fn flag(&self) -> &AtomicU32 {
        // SAFETY: `flag_offset` is 8-aligned and `flag_offset + 4 <= region_size` by
        // construction (`region_size`); the mapping lives as long as `self`; the word is only
        // accessed atomically.
        unsafe {
            &*self
                .map
                .as_ptr()
                .wrapping_add(self.flag_offset)
                .cast::<AtomicU32>()
        }
    }

    /// The ring, as a volatile view.
    fn ring(&self) -> Result<VolatileSlice<'_>, FmqError> {
        // `map` keeps `RING + ring_bytes <= region_size` (`region_size`), so this never fails.
        self.map
            .volatile()
            .subslice(RING, self.ring_bytes as usize)
            .map_err(|e| FmqError::BadDescriptor(format!("the ring is outside its region: {e}")))
    }

    /// Bytes written and not yet read, checked against the ring size.
    fn filled(&self) -> Result<(u64, u64, u64), FmqError> {
        let read = self.counter(READ_COUNTER).load(Ordering::Acquire);
        let write = self.counter(WRITE_COUNTER).load(Ordering::Acquire);
        let filled = write.wrapping_sub(read);
        if filled > self.ring_bytes {
            return Err(FmqError::Corrupt { read, write });
        }
        Ok((read, write, filled))
    }

    /// Datums ready to read (0 when the counters are corrupt).
    pub fn available_to_read(&self) -> usize {
        self.filled().map_or(0, |(_, _, f)| {
            (f / u64::from(self.desc.datum_size)) as usize
        })
    }

    /// Datums that can be written now (0 when the counters are corrupt).
    pub fn available_to_write(&self) -> usize {
        self.filled().map_or(0, |(_, _, f)| {
            ((self.ring_bytes - f) / u64::from(self.desc.datum_size)) as usize
        })
    }

    fn check_len(&self, len: usize) -> Result<(), FmqError> {
        if len % self.datum_size() != 0 || len as u64 > self.ring_bytes {
            return Err(FmqError::TooLarge(len));
        }
        Ok(())
    }

    /// Writes whole datums (`data.len()` a multiple of the datum size), in one commit.
    /// Ok(false) when there is not enough room.
    pub fn write(&self, data: &[u8]) -> Result<bool, FmqError> {
        self.check_len(data.len())?;
        let (_, write, filled) = self.filled()?;
        if self.ring_bytes - filled < data.len() as u64 {
            return Ok(false);
        }
        let offset = (write % self.ring_bytes) as usize;
        let first = data.len().min(self.ring_bytes as usize - offset);
        let (head, tail) = data.split_at(first);
        // `offset + first <= ring_bytes`, and the wrapped part has `tail.len() <= offset`: both
        // copies stay inside the ring. The peer may read these bytes only after the release
        // store below publishes them.
        let ring = self.ring()?;
        let range = |at, len| {
            ring.subslice(at, len)
                .map_err(|_| FmqError::TooLarge(data.len()))
        };
        range(offset, first)?.copy_from(head);
        range(0, tail.len())?.copy_from(tail);
        self.counter(WRITE_COUNTER)
            .store(write.wrapping_add(data.len() as u64), Ordering::Release);
        Ok(true)
    }

    /// Reads whole datums into `out` (a multiple of the datum size), in one commit.
    /// Ok(false) when fewer are ready.
    pub fn read(&self, out: &mut [u8]) -> Result<bool, FmqError> {
        self.check_len(out.len())?;
        let (read, _, filled) = self.filled()?;
        if filled < out.len() as u64 {
            return Ok(false);
        }
        let offset = (read % self.ring_bytes) as usize;
        let first = out.len().min(self.ring_bytes as usize - offset);
        let len = out.len();
        let (head, tail) = out.split_at_mut(first);
        // As in `write`, both ranges lie inside the ring. The writer published these bytes
        // (acquire load in `filled`) and should not touch them until the release store below
        // hands the space back; one that does anyway changes the ring, never `out` after the
        // copy, which is what the caller decodes.
        let ring = self.ring()?;
        let range = |at, n| ring.subslice(at, n).map_err(|_| FmqError::TooLarge(len));
        range(offset, first)?.copy_to(head);
        range(0, tail.len())?.copy_to(tail);
        self.counter(READ_COUNTER)
            .store(read.wrapping_add(out.len() as u64), Ordering::Release);
        Ok(true)
    }

    /// Drops every datum ready to read (resynchronises after a bad packet).
    pub fn discard_all(&self) -> Result<(), FmqError> {
        let (read, _, filled) = self.filled()?;
        let whole = filled - filled % u64::from(self.desc.datum_size);
        self.counter(READ_COUNTER)
            .store(read.wrapping_add(whole), Ordering::Release);
        Ok(())
    }

    /// Sets `bits` in the event flag; wakes the waiters for the newly set bits only (a waiter
    /// that finds its bit set returns without sleeping: deferred wake), with
    /// `FUTEX_WAKE_BITSET` as libfmq does, so a waiter for another bit sleeps on.
    pub fn wake(&self, bits: u32) {
        let old = self.flag().fetch_or(bits, Ordering::SeqCst);
        let new = bits & !old;
        if new != 0 {
            let _ = sys::futex_wake_bitset(self.flag(), i32::MAX, new);
        }
    }

    /// Sets `bits` in the event flag without waking anyone (see [`WRITER_BUSY`]).
    pub fn announce(&self, bits: u32) {
        self.flag().fetch_or(bits, Ordering::SeqCst);
    }

    /// Clears `bits` in the event flag without waking anyone.
    pub fn withdraw(&self, bits: u32) {
        self.flag().fetch_and(!bits, Ordering::SeqCst);
    }

    /// Whether any of `bits` is set in the event flag.
    pub fn is_set(&self, bits: u32) -> bool {
        self.flag().load(Ordering::SeqCst) & bits != 0
    }

    /// Takes `bits` out of the event flag: Some(the bits that were set), None if none was
    /// (then `Some(word)` is what to sleep on: see [`Fmq::wait`]).
    pub fn take_bits(&self, bits: u32) -> Result<u32, u32> {
        let old = self.flag().fetch_and(!bits, Ordering::SeqCst);
        if old & bits != 0 {
            Ok(old & bits)
        } else {
            Err(old & !bits)
        }
    }

    /// Waits until one of `bits` is set, then clears and returns them. `deadline_ns` is an
    /// absolute CLOCK_MONOTONIC time; None waits forever.
    pub fn wait(&self, bits: u32, deadline_ns: Option<u64>) -> Result<u32, FmqError> {
        loop {
            let expected = match self.take_bits(bits) {
                Ok(set) => return Ok(set),
                Err(word) => word,
            };
            match sys::futex_wait_bitset(self.flag(), expected, deadline_ns, bits)? {
                FutexWait::TimedOut => return Err(FmqError::TimedOut),
                FutexWait::Woken | FutexWait::ValueChanged => {}
            }
        }
    }

    /// libfmq's writeBlocking: write, then wake `NOT_EMPTY`; without room, wait for
    /// `NOT_FULL` and retry. `timeout` zero waits forever.
    pub fn write_blocking(&self, data: &[u8], timeout: Duration) -> Result<(), FmqError> {
        let deadline = deadline_of(timeout);
        loop {
            if self.write(data)? {
                self.wake(NOT_EMPTY);
                return Ok(());
            }
            self.wait(NOT_FULL, deadline)?;
        }
    }

    /// libfmq's readBlocking: the mirror image of [`Fmq::write_blocking`].
    pub fn read_blocking(&self, out: &mut [u8], timeout: Duration) -> Result<(), FmqError> {
        let deadline = deadline_of(timeout);
        loop {
            if self.read(out)? {
                self.wake(NOT_FULL);
                return Ok(());
            }
            self.wait(NOT_EMPTY, deadline)?;
        }
    }
}

fn deadline_of(timeout: Duration) -> Option<u64> {
    (!timeout.is_zero()).then(|| sys::deadline_after(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(q: &Fmq) -> Fmq {
        let fd = q.fd().try_clone_to_owned().unwrap();
        Fmq::from_fd(fd, q.descriptor(), q.desc.datum_size).unwrap()
    }

    #[test]
    fn layout_puts_the_flag_after_the_ring_and_rounds_to_pages() {
        let page = page_size();
        assert_eq!(
            region_size(24, 1024),
            Some((16 + 24 * 1024 + 4u64).div_ceil(page) * page)
        );
        assert_eq!(event_flag_offset(24 * 3), 88);
        assert_eq!(event_flag_offset(5), 24);
        assert_eq!(region_size(0, 4), None);
        assert_eq!(region_size(4, 0), None);
        assert_eq!(region_size(u32::MAX, u32::MAX), None);
    }

    #[test]
    fn writes_and_reads_wrap_around_in_two_parts() {
        let q = Fmq::create(4, 5).unwrap();
        let r = peer(&q);
        let mut next = 0u32;
        let mut expect = 0u32;
        for round in 0..50 {
            let n = 1 + round % 5;
            let data: Vec<u8> = (0..n)
                .flat_map(|_| {
                    next += 1;
                    next.to_le_bytes()
                })
                .collect();
            assert!(q.write(&data).unwrap());
            assert_eq!(r.available_to_read(), n as usize);
            let mut out = vec![0u8; data.len()];
            assert!(r.read(&mut out).unwrap());
            for c in out.chunks(4) {
                expect += 1;
                assert_eq!(u32::from_le_bytes(c.try_into().unwrap()), expect);
            }
        }
    }

    #[test]
    fn a_full_queue_refuses_writes_and_an_empty_one_reads() {
        let q = Fmq::create(8, 3).unwrap();
        assert!(q.write(&[1; 24]).unwrap());
        assert!(!q.write(&[2; 8]).unwrap());
        assert_eq!(q.available_to_write(), 0);
        let mut out = [0u8; 32];
        assert!(matches!(q.read(&mut out), Err(FmqError::TooLarge(32))));
        assert!(q.read(&mut out[..24]).unwrap());
        assert!(!q.read(&mut out[..8]).unwrap());
        assert!(matches!(q.write(&[0; 7]), Err(FmqError::TooLarge(7))));
    }

    #[test]
    fn corrupt_counters_are_an_error_not_an_access() {
        let q = Fmq::create(8, 4).unwrap();
        q.counter(WRITE_COUNTER).store(1 << 40, Ordering::SeqCst);
        let mut out = [0u8; 8];
        assert!(matches!(q.read(&mut out), Err(FmqError::Corrupt { .. })));
        assert_eq!(q.available_to_read(), 0);
        assert!(matches!(q.write(&[0; 8]), Err(FmqError::Corrupt { .. })));
    }

    #[test]
    fn descriptors_are_checked_on_arrival() {
        let q = Fmq::create(24, 16).unwrap();
        let fd = || q.fd().try_clone_to_owned().unwrap();
        assert!(Fmq::from_fd(fd(), q.descriptor(), 16).is_err());
        let mut d = q.descriptor();
        d.region_size += page_size();
        assert!(Fmq::from_fd(fd(), d, 24).is_err());
        let mut d = q.descriptor();
        d.capacity = 1 << 30;
        assert!(Fmq::from_fd(fd(), d, 24).is_err());
        let pipe = rustix::pipe::pipe().unwrap().0;
        assert!(Fmq::from_fd(pipe, q.descriptor(), 24).is_err());
        // A memfd smaller than the descriptor claims.
        let small = sys::memfd_create(c"small", 4096).unwrap();
        let big = Fmq::create(24, 1024).unwrap().descriptor();
        assert!(Fmq::from_fd(small, big, 24).is_err());
        assert!(Fmq::from_fd(fd(), q.descriptor(), 24).is_ok());
    }

    #[test]
    fn a_wake_before_the_wait_is_not_lost() {
        let q = Fmq::create(4, 4).unwrap();
        q.wake(NOT_EMPTY);
        assert_eq!(q.wait(NOT_EMPTY, None).unwrap(), NOT_EMPTY);
        // Consumed: a second wait times out.
        let soon = sys::deadline_after(Duration::from_millis(10));
        assert!(matches!(
            q.wait(NOT_EMPTY, Some(soon)),
            Err(FmqError::TimedOut)
        ));
    }

    #[test]
    fn the_busy_bit_wakes_no_one_and_survives_waits_for_the_event_bits() {
        let q = Fmq::create(4, 4).unwrap();
        let r = peer(&q);
        r.announce(WRITER_BUSY);
        assert!(q.is_set(WRITER_BUSY), "the peer sees it");
        // A wait for NOT_EMPTY is not satisfied by the busy bit and does not clear it.
        let soon = sys::deadline_after(Duration::from_millis(10));
        assert!(matches!(
            q.wait(NOT_EMPTY, Some(soon)),
            Err(FmqError::TimedOut)
        ));
        assert!(q.is_set(WRITER_BUSY));
        q.wake(NOT_EMPTY);
        assert_eq!(q.wait(NOT_EMPTY, None).unwrap(), NOT_EMPTY);
        assert!(
            q.is_set(WRITER_BUSY),
            "taking NOT_EMPTY leaves the busy bit"
        );
        r.withdraw(WRITER_BUSY);
        assert!(!q.is_set(WRITER_BUSY));
        assert_eq!(q.flag().load(Ordering::SeqCst), 0);
    }

    #[test]
    fn blocking_calls_meet_across_threads_and_time_out_alone() {
        let q = Fmq::create(8, 2).unwrap();
        let r = peer(&q);
        let reader = std::thread::spawn(move || {
            let mut sum = 0u64;
            for _ in 0..1000 {
                let mut b = [0u8; 8];
                r.read_blocking(&mut b, Duration::ZERO).unwrap();
                sum += u64::from_le_bytes(b);
            }
            sum
        });
        for i in 0..1000u64 {
            q.write_blocking(&i.to_le_bytes(), Duration::ZERO).unwrap();
        }
        assert_eq!(reader.join().unwrap(), (0..1000).sum::<u64>());
        assert!(matches!(
            q.write_blocking(&[0; 24], Duration::ZERO),
            Err(FmqError::TooLarge(24))
        ));
        let mut b = [0u8; 8];
        assert!(matches!(
            q.read_blocking(&mut b, Duration::from_millis(5)),
            Err(FmqError::TimedOut)
        ));
    }
}
