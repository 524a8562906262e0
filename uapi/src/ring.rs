//! Access to a queue ring in shared memory (layout in [`crate::abi`]), and the client's
//! producer side of the protocol.
//!
//! The protocol, in short: the client writes a job into its submission slot, release-stores
//! `sq_tail`, increments `sq_doorbell` and, only if `sq_engine_sleeping` is set, wakes the
//! futex. The engine takes jobs in order, writes the completion slot, release-stores `cq_seq`,
//! increments `cq_doorbell` and wakes it if `cq_waiters` is non-zero. A futex wait always
//! names the value it last saw, so a wake-up that races with going to sleep is never lost.
//! No ioctl is made in steady state.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zerocopy::{FromZeros, IntoBytes};

use crate::abi::{
    Completion, Job, RING_MAGIC, RING_SQ_OFFSET, RING_VERSION, RingHeader, ring_cq_offset,
    ring_size,
};
use crate::sys::{self, FutexWait, Mapping};

/// Errors of ring access.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The region cannot hold a ring of that many entries, or is misplaced.
    #[error("ring region invalid: {0}")]
    BadRegion(&'static str),
    /// Every slot holds a job whose completion was not read yet.
    #[error("submission ring full")]
    Full,
    /// The device reported a fatal error on this ring (positive errno).
    #[error("device reported ring error {0}")]
    Device(i32),
    /// The deadline passed first.
    #[error("timed out waiting for sequence {0}")]
    TimedOut(u64),
    /// The sequence number was never submitted or its completion was already overwritten.
    #[error("sequence {0} is not waitable")]
    BadSeq(u64),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A view of a ring at `base` inside a shared mapping; keeps the mapping alive.
#[derive(Debug, Clone)]
pub struct RingView {
    map: Arc<Mapping>,
    base: usize,
    entries: u32,
}

impl RingView {
    /// Checks that a ring of `entries` entries fits at `base` in `map`.
    pub fn new(map: Arc<Mapping>, base: usize, entries: u32) -> Result<Self, RingError> {
        if entries == 0 || !entries.is_power_of_two() {
            return Err(RingError::BadRegion("entries must be a power of two"));
        }
        if base % align_of::<RingHeader>() != 0 {
            return Err(RingError::BadRegion("ring base must be 64-byte aligned"));
        }
        let size = ring_size(entries).ok_or(RingError::BadRegion("size overflows"))?;
        match base.checked_add(size) {
            Some(end) if end <= map.len() => {}
            _ => return Err(RingError::BadRegion("ring does not fit the region")),
        }
        // The mapping itself is page aligned, so base alignment makes every field aligned.
        if map.as_ptr() as usize % align_of::<RingHeader>() != 0 {
            return Err(RingError::BadRegion("mapping not aligned"));
        }
        Ok(Self { map, base, entries })
    }

    /// Number of entries.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    fn u32_at(&self, field_offset: usize) -> &AtomicU32 {
        let ptr = self
            .map
            .as_ptr()
            .wrapping_add(self.base + field_offset)
            .cast::<u32>();
        // SAFETY: `new` checked the header lies inside the live mapping at a 64-byte aligned
        // base, so the field is in bounds and 4-aligned; the mapping outlives `&self`. Shared
        // memory is only ever accessed atomically through these accessors.
        unsafe { AtomicU32::from_ptr(ptr) }
    }

    fn u64_at(&self, field_offset: usize) -> &AtomicU64 {
        let ptr = self
            .map
            .as_ptr()
            .wrapping_add(self.base + field_offset)
            .cast::<u64>();
        // SAFETY: as in `u32_at`; u64 fields sit at 8-aligned offsets (checked at compile time
        // in `abi`).
        unsafe { AtomicU64::from_ptr(ptr) }
    }

    /// `magic`.
    pub fn magic(&self) -> &AtomicU32 {
        self.u32_at(std::mem::offset_of!(RingHeader, magic))
    }
    /// `error`: positive errno once the device gave up on the ring.
    pub fn error(&self) -> &AtomicU32 {
        self.u32_at(std::mem::offset_of!(RingHeader, error))
    }
    /// `sq_tail`.
    pub fn sq_tail(&self) -> &AtomicU64 {
        self.u64_at(std::mem::offset_of!(RingHeader, sq_tail))
    }
    /// `sq_head`.
    pub fn sq_head(&self) -> &AtomicU64 {
        self.u64_at(std::mem::offset_of!(RingHeader, sq_head))
    }
    /// `sq_doorbell`.
    pub fn sq_doorbell(&self) -> &AtomicU32 {
        self.u32_at(std::mem::offset_of!(RingHeader, sq_doorbell))
    }
    /// `sq_engine_sleeping`.
    pub fn sq_engine_sleeping(&self) -> &AtomicU32 {
        self.u32_at(std::mem::offset_of!(RingHeader, sq_engine_sleeping))
    }
    /// `cq_seq`.
    pub fn cq_seq(&self) -> &AtomicU64 {
        self.u64_at(std::mem::offset_of!(RingHeader, cq_seq))
    }
    /// `cq_doorbell`.
    pub fn cq_doorbell(&self) -> &AtomicU32 {
        self.u32_at(std::mem::offset_of!(RingHeader, cq_doorbell))
    }
    /// `cq_waiters`.
    pub fn cq_waiters(&self) -> &AtomicU32 {
        self.u32_at(std::mem::offset_of!(RingHeader, cq_waiters))
    }

    /// Device side: resets the header for a new queue and writes magic and geometry.
    pub fn init(&self) -> io::Result<()> {
        let mut header = RingHeader::new_zeroed();
        header.magic = RING_MAGIC;
        header.version = RING_VERSION;
        header.entries = self.entries;
        header.job_size = size_of::<Job>() as u32;
        header.completion_size = size_of::<Completion>() as u32;
        self.map.write_at(self.base, header.as_bytes())
    }

    fn sq_slot_offset(&self, pos: u64) -> usize {
        self.base + RING_SQ_OFFSET + (pos % u64::from(self.entries)) as usize * size_of::<Job>()
    }

    fn cq_slot_offset(&self, pos: u64) -> usize {
        self.base
            + ring_cq_offset(self.entries)
            + (pos % u64::from(self.entries)) as usize * size_of::<Completion>()
    }

    /// Copies the job at ring position `pos` out of shared memory (the device validates the
    /// copy, never the shared bytes, so a client rewriting the slot cannot race the checks).
    pub fn read_job(&self, pos: u64) -> io::Result<Job> {
        let mut job = Job::new_zeroed();
        self.map
            .read_at(self.sq_slot_offset(pos), job.as_mut_bytes())?;
        Ok(job)
    }

    /// Writes the job for ring position `pos`.
    pub fn write_job(&self, pos: u64, job: &Job) -> io::Result<()> {
        self.map.write_at(self.sq_slot_offset(pos), job.as_bytes())
    }

    /// Copies the completion of ring position `pos`.
    pub fn read_completion(&self, pos: u64) -> io::Result<Completion> {
        let mut c = Completion::new_zeroed();
        self.map
            .read_at(self.cq_slot_offset(pos), c.as_mut_bytes())?;
        Ok(c)
    }

    /// Writes the completion of ring position `pos`.
    pub fn write_completion(&self, pos: u64, c: &Completion) -> io::Result<()> {
        self.map.write_at(self.cq_slot_offset(pos), c.as_bytes())
    }

    /// Device side: publishes completion of `seq` and wakes sleeping clients.
    pub fn publish_completion(&self, seq: u64) {
        self.cq_seq().store(seq, Ordering::Release);
        self.cq_doorbell().fetch_add(1, Ordering::SeqCst);
        if self.cq_waiters().load(Ordering::SeqCst) != 0 {
            let _ = sys::futex_wake(self.cq_doorbell(), i32::MAX);
        }
    }

    /// Device side: marks the ring dead with `errno` and wakes everyone.
    pub fn fail(&self, errno: i32) {
        self.error().store(errno.unsigned_abs(), Ordering::SeqCst);
        self.cq_doorbell().fetch_add(1, Ordering::SeqCst);
        let _ = sys::futex_wake(self.cq_doorbell(), i32::MAX);
    }
}

/// The client's side of a ring: one producer (this object, `&mut` to submit), completions read
/// in any order within the window of `entries` outstanding jobs.
#[derive(Debug)]
pub struct Producer {
    ring: RingView,
    tail: u64,
    /// Every job with seq <= this has had its completion read (or been abandoned).
    retired: u64,
}

impl Producer {
    /// Wraps a ring the device has initialised (QUEUE_CREATE succeeded).
    pub fn new(ring: RingView) -> Result<Self, RingError> {
        if ring.magic().load(Ordering::Acquire) != RING_MAGIC {
            return Err(RingError::BadRegion("ring not initialised by the device"));
        }
        let tail = ring.sq_tail().load(Ordering::Acquire);
        Ok(Self {
            ring,
            tail,
            retired: tail,
        })
    }

    /// The ring.
    pub fn ring(&self) -> &RingView {
        &self.ring
    }

    /// Publishes `job` and rings the doorbell. Returns its sequence number.
    pub fn submit(&mut self, job: &Job) -> Result<u64, RingError> {
        if let Some(e) = self.device_error() {
            return Err(e);
        }
        if self.tail - self.retired >= u64::from(self.ring.entries) {
            return Err(RingError::Full);
        }
        let pos = self.tail;
        self.ring.write_job(pos, job)?;
        self.tail = pos + 1;
        self.ring.sq_tail().store(self.tail, Ordering::Release);
        self.ring.sq_doorbell().fetch_add(1, Ordering::SeqCst);
        if self.ring.sq_engine_sleeping().load(Ordering::SeqCst) != 0 {
            sys::futex_wake(self.ring.sq_doorbell(), 1)?;
        }
        Ok(pos + 1)
    }

    fn device_error(&self) -> Option<RingError> {
        match self.ring.error().load(Ordering::Acquire) {
            0 => None,
            e => Some(RingError::Device(e as i32)),
        }
    }

    /// Waits for `seq` to complete: spins for up to `spin`, then sleeps on the completion futex
    /// until `deadline_ns` (absolute CLOCK_MONOTONIC; `None` = forever).
    pub fn wait(
        &mut self,
        seq: u64,
        spin: Duration,
        deadline_ns: Option<u64>,
    ) -> Result<Completion, RingError> {
        if seq == 0 || seq > self.tail || seq <= self.retired {
            return Err(RingError::BadSeq(seq));
        }
        let spin_until = Instant::now() + spin;
        loop {
            if self.ring.cq_seq().load(Ordering::Acquire) >= seq {
                let c = self.ring.read_completion(seq - 1)?;
                if c.seq != seq {
                    return Err(RingError::BadSeq(seq));
                }
                if seq == self.retired + 1 {
                    self.retired = seq;
                }
                return Ok(c);
            }
            if let Some(e) = self.device_error() {
                return Err(e);
            }
            if Instant::now() < spin_until {
                std::hint::spin_loop();
                continue;
            }
            if deadline_ns.is_some_and(|d| sys::monotonic_ns() >= d) {
                return Err(RingError::TimedOut(seq));
            }
            let seen = self.ring.cq_doorbell().load(Ordering::SeqCst);
            self.ring.cq_waiters().fetch_add(1, Ordering::SeqCst);
            let r = if self.ring.cq_seq().load(Ordering::SeqCst) >= seq {
                Ok(FutexWait::Woken)
            } else {
                sys::futex_wait(self.ring.cq_doorbell(), seen, deadline_ns)
            };
            self.ring.cq_waiters().fetch_sub(1, Ordering::SeqCst);
            r?;
        }
    }

    /// Marks every completion up to the last submitted job as read (after a device error).
    pub fn abandon_all(&mut self) {
        self.retired = self.tail;
    }

    /// Jobs submitted whose completion was not read yet.
    pub fn in_flight(&self) -> u64 {
        self.tail - self.retired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Binding;

    fn ring(entries: u32) -> RingView {
        let size = ring_size(entries).unwrap();
        let fd = sys::memfd_create(c"ring-test", size as u64).unwrap();
        let map =
            Arc::new(Mapping::map_shared(std::os::fd::AsFd::as_fd(&fd), 0, size, true).unwrap());
        let r = RingView::new(map, 0, entries).unwrap();
        r.init().unwrap();
        r
    }

    #[test]
    fn view_rejects_regions_too_small_or_misshapen() {
        let fd = sys::memfd_create(c"ring-test", 4096).unwrap();
        let map =
            Arc::new(Mapping::map_shared(std::os::fd::AsFd::as_fd(&fd), 0, 4096, true).unwrap());
        assert!(matches!(
            RingView::new(map.clone(), 0, 64),
            Err(RingError::BadRegion(_))
        ));
        assert!(matches!(
            RingView::new(map.clone(), 0, 3),
            Err(RingError::BadRegion(_))
        ));
        assert!(matches!(
            RingView::new(map.clone(), 8, 1),
            Err(RingError::BadRegion(_))
        ));
        assert!(RingView::new(map, 0, 1).is_ok());
    }

    #[test]
    fn producer_refuses_more_than_entries_outstanding_jobs() {
        let r = ring(2);
        let mut p = Producer::new(r).unwrap();
        let job = Job::default();
        assert_eq!(p.submit(&job).unwrap(), 1);
        assert_eq!(p.submit(&job).unwrap(), 2);
        assert!(matches!(p.submit(&job), Err(RingError::Full)));
    }

    #[test]
    fn completion_round_trips_through_the_ring_and_wraps() {
        let r = ring(2);
        let mut p = Producer::new(r.clone()).unwrap();
        for round in 0..5u64 {
            let mut job = Job {
                user_data: 100 + round,
                ..Job::default()
            };
            job.bindings[0] = Binding {
                bo: 7,
                flags: 0,
                offset: 64,
                length: 16,
            };
            let seq = p.submit(&job).unwrap();
            // Play the device.
            let pos = r.sq_head().load(Ordering::Acquire);
            let got = r.read_job(pos).unwrap();
            assert_eq!(got, job);
            r.sq_head().store(pos + 1, Ordering::Release);
            r.write_completion(
                pos,
                &Completion {
                    seq,
                    user_data: got.user_data,
                    status: 0,
                    pad: 0,
                    device_time_ns: 5,
                },
            )
            .unwrap();
            r.publish_completion(seq);
            let c = p
                .wait(
                    seq,
                    Duration::ZERO,
                    Some(sys::deadline_after(Duration::from_secs(1))),
                )
                .unwrap();
            assert_eq!((c.seq, c.user_data), (seq, 100 + round));
        }
    }

    #[test]
    fn wait_times_out_and_reports_device_errors() {
        let r = ring(4);
        let mut p = Producer::new(r.clone()).unwrap();
        let seq = p.submit(&Job::default()).unwrap();
        let e = p.wait(
            seq,
            Duration::ZERO,
            Some(sys::deadline_after(Duration::from_millis(20))),
        );
        assert!(matches!(e, Err(RingError::TimedOut(1))));
        r.fail(libc::EIO);
        assert!(matches!(
            p.wait(seq, Duration::ZERO, None),
            Err(RingError::Device(libc::EIO))
        ));
        assert!(matches!(
            p.wait(99, Duration::ZERO, None),
            Err(RingError::BadSeq(99))
        ));
    }
}
