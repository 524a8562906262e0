//! Fast message queues between two processes (`nnaccel_hal::fmq`, REFERENCE.md §4): this test and
//! a child (this binary re-executed) share two queues of 1000 eight-byte datums, one each way,
//! and move 10 million datums through each at once with blocking writes and reads of irregular
//! batch sizes, every datum checked against the sequence it belongs to and both sides' checksums
//! compared. The batches wrap around the ring (1000 is no multiple of them), the child starts
//! reading late so the parent's writer finds the queue full, and the parent's reader starts
//! before the child writes so it finds its queue empty.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nnaccel_hal::fmq::{Fmq, FmqDescriptor};
use nnaccel_tests::service::spawn_test_child;
use nnaccel_tests::{scaled, with_timeout};

const DATUMS: u64 = 10_000_000;
const CAPACITY: u32 = 1000;
/// Batches of at most half the queue: a reader and a writer can never both wait.
const MAX_BATCH: u64 = CAPACITY as u64 / 2;
const CHILD_ENV: &str = "NNACCEL_TEST_FMQ_CHILD";

/// The `i`-th datum of stream `seed`.
fn value(seed: u64, i: u64) -> u64 {
    (i ^ seed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(17)
        ^ i
}

/// Batch sizes in 1..=MAX_BATCH from a small LCG.
struct Batches(u64);

impl Batches {
    fn next(&mut self, left: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (1 + (self.0 >> 33) % MAX_BATCH).min(left)
    }
}

/// What a side saw while moving its stream.
#[derive(Debug, Default)]
struct Seen {
    checksum: u64,
    /// Blocking calls that found too little room (writer) or data (reader).
    waited: u64,
    /// Batches split in two at the end of the ring.
    split: u64,
}

fn write_stream(q: &Fmq, seed: u64) -> Seen {
    let mut seen = Seen::default();
    let mut b = Batches(seed);
    let mut i = 0u64;
    let mut buf = Vec::with_capacity(MAX_BATCH as usize * 8);
    while i < DATUMS {
        let n = b.next(DATUMS - i);
        buf.clear();
        for k in i..i + n {
            let v = value(seed, k);
            seen.checksum = seen.checksum.wrapping_add(v);
            buf.extend_from_slice(&v.to_le_bytes());
        }
        if (q.available_to_write() as u64) < n {
            seen.waited += 1;
        }
        if i % u64::from(CAPACITY) + n > u64::from(CAPACITY) {
            seen.split += 1;
        }
        q.write_blocking(&buf, scaled(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("write of datums {i}..{}: {e}", i + n));
        i += n;
    }
    seen
}

fn read_stream(q: &Fmq, seed: u64) -> Seen {
    let mut seen = Seen::default();
    let mut b = Batches(seed ^ 0x5555);
    let mut i = 0u64;
    let mut buf = vec![0u8; MAX_BATCH as usize * 8];
    while i < DATUMS {
        let n = b.next(DATUMS - i);
        let bytes = &mut buf[..n as usize * 8];
        if (q.available_to_read() as u64) < n {
            seen.waited += 1;
        }
        if i % u64::from(CAPACITY) + n > u64::from(CAPACITY) {
            seen.split += 1;
        }
        q.read_blocking(bytes, scaled(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("read of datums {i}..{}: {e}", i + n));
        for (k, c) in bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(c.try_into().unwrap());
            let want = value(seed, i + k as u64);
            assert_eq!(v, want, "datum {} of stream {seed:#x}", i + k as u64);
            seen.checksum = seen.checksum.wrapping_add(v);
        }
        i += n;
    }
    seen
}

const TO_CHILD: u64 = 0xa11ce;
const TO_PARENT: u64 = 0xb0b;

fn descriptor_arg(d: &FmqDescriptor) -> String {
    format!("{}:{}:{}", d.datum_size, d.capacity, d.region_size)
}

fn parse_descriptor(s: &str) -> FmqDescriptor {
    let v: Vec<u64> = s.split(':').map(|x| x.parse().unwrap()).collect();
    FmqDescriptor {
        datum_size: v[0] as u32,
        capacity: v[1] as u32,
        region_size: v[2],
    }
}

/// Not a test: the child side of `ten_million_datums_cross_two_processes_each_way_intact`
/// (it re-executes this binary with `CHILD_ENV` set). Without that variable it does nothing.
#[test]
fn fmq_child_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let open = |fd: &str, desc: &str| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/fd/{fd}", parts[0]))
            .unwrap();
        Fmq::from_fd(OwnedFd::from(f), parse_descriptor(desc), 8).unwrap()
    };
    let to_child = open(parts[1], parts[2]);
    let to_parent = open(parts[3], parts[4]);
    let writer = std::thread::spawn(move || write_stream(&to_parent, TO_PARENT));
    // Start reading late: the parent's writer fills the queue and waits.
    std::thread::sleep(Duration::from_millis(200));
    let read = read_stream(&to_child, TO_CHILD);
    let wrote = writer.join().unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nchecksums {} {}", read.checksum, wrote.checksum).unwrap();
    out.flush().unwrap();
}

#[test]
fn ten_million_datums_cross_two_processes_each_way_intact() {
    with_timeout(scaled(Duration::from_secs(120)), "fmq stress", || {
        let to_child = Fmq::create(8, CAPACITY).unwrap();
        let to_parent = Fmq::create(8, CAPACITY).unwrap();
        let spec = format!(
            "{} {} {} {} {}",
            std::process::id(),
            to_child.fd().as_raw_fd(),
            descriptor_arg(&to_child.descriptor()),
            to_parent.fd().as_raw_fd(),
            descriptor_arg(&to_parent.descriptor()),
        );
        let mut child = spawn_test_child("fmq_child_process", CHILD_ENV, spec);
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || read_stream(&to_parent, TO_PARENT));
        let wrote = write_stream(&to_child, TO_CHILD);
        let read = reader.join().unwrap();
        // Read to the end: the child's test harness still writes after the checksums.
        let lines: Vec<String> = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect();
        let line = lines
            .iter()
            .find(|l| l.starts_with("checksums "))
            .expect("the child's checksums");
        assert!(child.wait().unwrap().success(), "the child failed");
        let sums: Vec<u64> = line
            .split(' ')
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(sums[0], wrote.checksum, "what the child read");
        assert_eq!(sums[1], read.checksum, "what the child wrote");
        assert!(
            wrote.waited > 0,
            "the writer found the queue full: {wrote:?}"
        );
        assert!(
            read.waited > 0,
            "the reader found the queue empty: {read:?}"
        );
        assert!(wrote.split > 0 && read.split > 0, "batches wrapped around");
        eprintln!("parent writer {wrote:?}, parent reader {read:?}");
    });
}
