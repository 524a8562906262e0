//! A client process for the lifetime tests: opens the device named on the command line,
//! creates buffer objects, a program and a ring queue (and, with `--inflight`, leaves jobs in
//! flight), prints `ready`, and sleeps until it is killed.
//!
//! Usage: `nnaccel-test-client DEVICE_PATH [--inflight]`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nnaccel_tests::uapi::abi::BO_ACCESS_READ;
use nnaccel_tests::uapi::device::{Device, DeviceExt, FdDevice, RingQueue};
use nnaccel_tests::{AddSetup, SharedBuf};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let path = PathBuf::from(
        args.next()
            .expect("usage: nnaccel-test-client DEVICE_PATH [--inflight]"),
    );
    let inflight = args.any(|a| a == "--inflight");

    let dev = Arc::new(FdDevice::open(&path).expect("open device"));
    // Two device-memory BOs, three imported (in AddSetup), one more imported memfd.
    let _d1 = dev.bo_create(64 * 1024).expect("BO_CREATE");
    let _d2 = dev.bo_create(4096).expect("BO_CREATE");
    let extra = SharedBuf::new(8192);
    let _imported = dev
        .bo_import(extra.fd.as_fd(), 0, extra.size(), BO_ACCESS_READ)
        .expect("BO_IMPORT");
    // One program and three more BOs.
    let add = AddSetup::new(&*dev, 4);
    // One ring queue.
    let mut ring = RingQueue::create(dev.clone() as Arc<dyn Device>, 4, 0).expect("QUEUE_CREATE");
    if inflight {
        // With --fault-delay-job-ms on the device these stay in flight while we are killed.
        ring.submit(&add.job()).expect("ring submit");
        ring.submit(&add.job()).expect("ring submit");
        dev.submit(&add.job()).expect("SUBMIT");
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
