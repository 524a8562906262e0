//! What a real kernel gives the device that the CI host lacks, checked where it exists (the
//! QEMU guest, `scripts/qemu/suite.sh`): the engine's io_uring FutexWait (no fallback),
//! dma-bufs from `/dev/dma_heap/system` and from udmabuf imported as BOs and used by a job
//! whose output the client reads back through its own mapping, and the refusal of a queue
//! ring (futex words) inside a dma-buf.
//!
//! On a machine without a feature its test prints `SKIPPED` and passes, unless
//! `NNACCEL_REQUIRE_KERNEL_FEATURES=1` (the guest payload sets it), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nnaccel_tests::uapi::abi::*;
use nnaccel_tests::uapi::device::{Device, DeviceExt, RingQueue};
use nnaccel_tests::uapi::linux::{DMA_HEAP_SYSTEM, UDMABUF};
use nnaccel_tests::uapi::sys::{self, Mapping};
use nnaccel_tests::*;

/// Whether the kernel features must be there (the QEMU guest).
fn required() -> bool {
    std::env::var("NNACCEL_REQUIRE_KERNEL_FEATURES").as_deref() == Ok("1")
}

/// `present`, or: a failure when required, else a visible skip.
fn have(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    if required() {
        panic!("{what} is missing, and NNACCEL_REQUIRE_KERNEL_FEATURES=1");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {what} is missing");
    false
}

/// A dma-buf with the client's own shared mapping of it; CPU access is bracketed with
/// `DMA_BUF_IOCTL_SYNC`.
struct DmaBuf {
    fd: OwnedFd,
    map: Mapping,
    /// The memfd under a udmabuf (kept open, and mapped by the test too).
    memfd: Option<(OwnedFd, Mapping)>,
}

impl DmaBuf {
    /// `size` bytes from the system dma-heap.
    fn from_heap(size: usize) -> Self {
        let fd = sys::dma_heap_alloc(Path::new(DMA_HEAP_SYSTEM), size as u64)
            .unwrap_or_else(|e| panic!("DMA_HEAP_IOCTL_ALLOC({size}) on {DMA_HEAP_SYSTEM}: {e}"));
        Self::mapped(fd, size, None)
    }

    /// `size` bytes of a new memfd, sealed against shrinking, as a udmabuf.
    fn from_udmabuf(size: usize) -> Self {
        let memfd = sys::memfd_create(c"nnaccel-udmabuf", size as u64).expect("memfd_create");
        rustix::fs::fcntl_add_seals(&memfd, rustix::fs::SealFlags::SHRINK).expect("F_SEAL_SHRINK");
        let memfd_map = Mapping::map_shared(memfd.as_fd(), 0, size, true).expect("mmap memfd");
        let fd = sys::udmabuf_create(memfd.as_fd(), 0, size as u64)
            .unwrap_or_else(|e| panic!("UDMABUF_CREATE({size}) on {UDMABUF}: {e}"));
        Self::mapped(fd, size, Some((memfd, memfd_map)))
    }

    fn mapped(fd: OwnedFd, size: usize, memfd: Option<(OwnedFd, Mapping)>) -> Self {
        assert!(sys::is_dmabuf(fd.as_fd()), "not a dma-buf");
        let map = Mapping::map_shared(fd.as_fd(), 0, size, true).expect("mmap the dma-buf");
        Self { fd, map, memfd }
    }

    fn size(&self) -> u64 {
        self.map.len() as u64
    }

    fn write_f32(&self, values: &[f32]) {
        sys::dma_buf_sync(
            self.fd.as_fd(),
            sys::DMA_BUF_SYNC_START | sys::DMA_BUF_SYNC_WRITE,
        )
        .expect("DMA_BUF_IOCTL_SYNC start write");
        self.map.write_at(0, &f32_bytes(values)).unwrap();
        sys::dma_buf_sync(
            self.fd.as_fd(),
            sys::DMA_BUF_SYNC_END | sys::DMA_BUF_SYNC_WRITE,
        )
        .expect("DMA_BUF_IOCTL_SYNC end write");
    }

    fn read_f32(&self, n: usize) -> Vec<f32> {
        sys::dma_buf_sync(
            self.fd.as_fd(),
            sys::DMA_BUF_SYNC_START | sys::DMA_BUF_SYNC_READ,
        )
        .expect("DMA_BUF_IOCTL_SYNC start read");
        let mut bytes = vec![0u8; n * 4];
        self.map.read_at(0, &mut bytes).unwrap();
        sys::dma_buf_sync(
            self.fd.as_fd(),
            sys::DMA_BUF_SYNC_END | sys::DMA_BUF_SYNC_READ,
        )
        .expect("DMA_BUF_IOCTL_SYNC end read");
        f32s(&bytes)
    }

    /// Imports the whole dma-buf with `access`; the device must see a dma-buf.
    fn import(&self, dev: &(impl Device + ?Sized), access: u32) -> u32 {
        let h = dev
            .bo_import(self.fd.as_fd(), 0, self.size(), access)
            .unwrap_or_else(|e| panic!("BO_IMPORT of a dma-buf: {e}"));
        let info = dev.bo_info(h).expect("BO_INFO");
        assert_eq!(
            info.kind, BO_KIND_DMABUF,
            "BO_INFO kind of an imported dma-buf"
        );
        assert_eq!(info.size, self.size());
        assert_eq!(info.access, access);
        h
    }
}

/// A way to make a dma-buf of a given size.
type MakeDmaBuf = fn(usize) -> DmaBuf;

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `out = a + b` over 1024 f32 (one page each), all three buffers dma-bufs made by `make`;
/// the output is read back through the client's mapping of the output dma-buf.
fn add_on_dma_bufs(c: &Ctx, make: MakeDmaBuf) -> DmaBuf {
    const N: u32 = 1024;
    let bytes = N as usize * 4;
    let av: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
    let bv: Vec<f32> = (0..N).map(|i| 1000.0 - i as f32).collect();
    let a = make(bytes);
    let b = make(bytes);
    let out = make(bytes);
    a.write_f32(&av);
    b.write_f32(&bv);
    out.write_f32(&vec![-1.0; N as usize]);
    let bo_a = a.import(&*c.dev, BO_ACCESS_READ);
    let bo_b = b.import(&*c.dev, BO_ACCESS_READ);
    let bo_out = out.import(&*c.dev, BO_ACCESS_WRITE);
    let program = c
        .dev
        .program_create(&encode(&add_program(N)))
        .expect("PROGRAM_CREATE(ADD)");
    let len = u64::from(N) * 4;
    let j = job(
        program,
        &[
            binding(bo_a, 0, len),
            binding(bo_b, 0, len),
            binding(bo_out, 0, len),
        ],
    );
    let seq = c.dev.submit(&j).expect("SUBMIT");
    let w = c.dev.wait(0, seq, long_deadline()).expect("WAIT");
    assert_eq!(w.status, 0, "job status");
    let want: Vec<f32> = av.iter().zip(&bv).map(|(x, y)| x + y).collect();
    assert_eq!(
        out.read_f32(N as usize),
        want,
        "the output dma-buf as the client maps it"
    );
    out
}

#[test]
fn engine_waits_with_io_uring_futex_when_asked() {
    if !require_privileges() {
        return;
    }
    // Whether this kernel has io_uring FUTEX_WAIT: the device's automatic choice says.
    let auto = {
        let sim = Sim::new();
        sim.open().get_param(PARAM_ENGINE_WAIT_MODE).unwrap()
    };
    if !have(
        auto == WAIT_MODE_IO_URING,
        "io_uring FUTEX_WAIT (the device picked the futex syscall)",
    ) {
        return;
    }
    run_with_sim(&["--wait-mode", "io-uring"], |c| {
        assert_eq!(
            c.param(PARAM_ENGINE_WAIT_MODE),
            WAIT_MODE_IO_URING,
            "--wait-mode io-uring must not fall back"
        );
        // A ring queue: the engine's worker sleeps on the doorbell with io_uring FutexWait.
        let add = AddSetup::new(&*c.dev, 64);
        let dev: Arc<dyn Device> = c.dev.clone();
        let mut ring = RingQueue::create(dev, 8, 0).expect("QUEUE_CREATE");
        for round in 0..4 {
            add.a.write_f32(0, &[round as f32; 64]);
            // Let the worker go to sleep on the doorbell before each job.
            std::thread::sleep(Duration::from_millis(20));
            let seq = ring.submit(&add.job()).expect("ring submit");
            let done = ring
                .wait(seq, Duration::ZERO, Some(long_deadline()))
                .unwrap_or_else(|e| panic!("ring wait: {e:?}"));
            assert_eq!(done.status, 0, "round {round}");
            assert_eq!(add.output(), add.expected(), "round {round}");
        }
    });
}

#[test]
fn dma_heap_buffers_run_a_job_read_back_through_the_client_mapping() {
    if !have(
        Path::new(DMA_HEAP_SYSTEM).exists(),
        &format!("{DMA_HEAP_SYSTEM} (dma-heap)"),
    ) {
        return;
    }
    run_with_sim(&[], |c| {
        add_on_dma_bufs(&c, DmaBuf::from_heap);
    });
}

#[test]
fn udmabuf_buffers_run_a_job_read_back_through_the_client_mapping() {
    if !have(Path::new(UDMABUF).exists(), &format!("{UDMABUF} (udmabuf)")) {
        return;
    }
    run_with_sim(&[], |c| {
        let out = add_on_dma_bufs(&c, DmaBuf::from_udmabuf);
        // The same pages through the memfd under the udmabuf.
        let (_, memfd_map) = out.memfd.as_ref().unwrap();
        let mut bytes = vec![0u8; 16];
        memfd_map.read_at(0, &mut bytes).unwrap();
        assert_eq!(f32s(&bytes), vec![1000.0, 999.5, 999.0, 998.5]);
    });
}

#[test]
fn queue_ring_in_a_dma_buf_is_refused_with_einval() {
    let heap = Path::new(DMA_HEAP_SYSTEM).exists();
    let udmabuf = Path::new(UDMABUF).exists();
    if !have(heap || udmabuf, "a dma-buf source (dma-heap or udmabuf)") {
        return;
    }
    run_with_sim(&[], move |c| {
        let size = ring_size(4).unwrap().next_multiple_of(4096);
        let mut sources: Vec<(&str, MakeDmaBuf)> = Vec::new();
        if heap {
            sources.push(("dma-heap", DmaBuf::from_heap));
        }
        if udmabuf {
            sources.push(("udmabuf", DmaBuf::from_udmabuf));
        }
        for (what, make) in sources {
            let buf = make(size);
            let before = c.param(PARAM_LIVE_QUEUES);
            let r = c.dev.queue_create(buf.fd.as_fd(), 0, size as u64, 4, 0);
            assert_eq!(
                errno(r),
                libc::EINVAL,
                "QUEUE_CREATE on a {what} dma-buf: futex words must not live in a dma-buf"
            );
            assert_eq!(c.param(PARAM_LIVE_QUEUES), before);
        }
    });
}
