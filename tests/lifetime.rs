//! Object lifetime and fault tests: clients that die with live objects, a device that dies
//! under its clients, closed files, and the simulator's fault injection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnaccel_tests::uapi::abi::*;
use nnaccel_tests::uapi::device::{Device, DeviceExt, FdDevice, RingQueue};
use nnaccel_tests::*;

const CLIENT: &str = env!("CARGO_BIN_EXE_nnaccel-test-client");

/// The test client process; SIGKILLed and reaped on drop.
struct Client(Child);

impl Client {
    /// Starts the client on `sim`'s device and waits (≤ 10 s) for its `ready`.
    fn start(sim: &Sim, extra: &[&str]) -> Self {
        let mut child = Command::new(CLIENT)
            .arg(sim.path())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {CLIENT}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let client = Client(child);
        let line = with_timeout(Duration::from_secs(10), "client ready", move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        assert_eq!(
            line.unwrap().trim(),
            "ready",
            "the client failed before it was ready"
        );
        client
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.kill();
    }
}

fn dyn_dev(dev: &Arc<FdDevice>) -> Arc<dyn Device> {
    dev.clone() as Arc<dyn Device>
}

/// Objects a test file owns: BOs, a program (in the [`AddSetup`]) and a queue on a ring in
/// `memfd` that is never destroyed explicitly.
struct Objects {
    _add: AddSetup,
    _memfd: OwnedFd,
    queue: u32,
}

/// Creates 4 BOs, a program and a queue on `dev`.
fn make_objects(dev: &FdDevice) -> Objects {
    dev.bo_create(4096).unwrap();
    let add = AddSetup::new(dev, 4);
    let size = ring_size(4).unwrap().next_multiple_of(4096) as u64;
    let memfd = nnaccel_tests::uapi::sys::memfd_create(c"ring", size).unwrap();
    let queue = dev.queue_create(memfd.as_fd(), 0, size, 4, 0).unwrap();
    Objects {
        _add: add,
        _memfd: memfd,
        queue,
    }
}

// ---------------------------------------------------------------------------------------------
// Clients going away

#[test]
fn killed_client_releases_its_objects() {
    run_with_sim(&[], |c| {
        let before = LiveCounts::read(&*c.dev).unwrap();
        let mut client = Client::start(&c.sim, &[]);
        let during = LiveCounts::read(&*c.dev).unwrap();
        assert_eq!(during.files, before.files + 1, "{during:?}");
        assert_eq!(during.bos, before.bos + 6, "{during:?}");
        assert_eq!(during.programs, before.programs + 1, "{during:?}");
        assert!(during.queues > before.queues, "{during:?}");
        client.kill();
        wait_for_counts(&*c.dev, before, Duration::from_secs(5));
    });
}

#[test]
fn killed_client_with_jobs_in_flight_releases_its_objects() {
    run_with_sim(&["--fault-delay-job-ms", "200"], |c| {
        let before = LiveCounts::read(&*c.dev).unwrap();
        let mut client = Client::start(&c.sim, &["--inflight"]);
        client.kill();
        // Three jobs of 200 ms may still run after the kill; then everything goes.
        wait_for_counts(&*c.dev, before, Duration::from_secs(5));
        // The device keeps serving.
        let add = AddSetup::new(&*c.dev, 4);
        let seq = c.dev.submit(&add.job()).unwrap();
        assert_eq!(c.dev.wait(0, seq, long_deadline()).unwrap().status, 0);
        assert_eq!(add.output(), add.expected());
    });
}

#[test]
fn closed_file_releases_its_objects() {
    run_with_sim(&[], |c| {
        let before = LiveCounts::read(&*c.dev).unwrap();
        let other = c.open();
        let objects = make_objects(&other);
        let during = LiveCounts::read(&*c.dev).unwrap();
        assert_eq!(during.files, before.files + 1);
        assert_eq!(during.bos, before.bos + 4);
        assert_eq!(during.programs, before.programs + 1);
        assert!(during.queues > before.queues);
        // Close the file while it still owns everything.
        drop(other);
        wait_for_counts(&*c.dev, before, Duration::from_secs(5));
        drop(objects);
    });
}

#[test]
fn closed_file_does_not_disturb_other_files() {
    run_with_sim(&[], |c| {
        let add = AddSetup::new(&*c.dev, 4);
        let other = c.open();
        let objects = make_objects(&other);
        assert_ne!(objects.queue, 0);
        drop(other);
        let seq = c.dev.submit(&add.job()).unwrap();
        assert_eq!(c.dev.wait(0, seq, long_deadline()).unwrap().status, 0);
        assert_eq!(add.output(), add.expected());
        c.dev
            .bo_info(add.bo_a)
            .expect("our BO survives another file's close");
    });
}

// ---------------------------------------------------------------------------------------------
// The device going away

fn assert_dead_device_error(e: &std::io::Error, what: &str) {
    let code = e.raw_os_error();
    assert!(
        code == Some(libc::ENOTCONN) || code == Some(libc::ECONNABORTED),
        "{what} on a dead device: expected ENOTCONN or ECONNABORTED, got {e}"
    );
}

#[test]
fn killed_device_fails_the_next_ioctl_fast() {
    run_with_sim(&[], |c| {
        let add = AddSetup::new(&*c.dev, 4);
        c.sim.kill_hard();
        let dev = c.dev.clone();
        let (r, elapsed) = with_timeout(
            Duration::from_secs(5),
            "ioctl on a dead device",
            move || {
                let t = Instant::now();
                let r = dev.get_param(PARAM_API_VERSION);
                (r, t.elapsed())
            },
        );
        let e = r.expect_err("GET_PARAM on a killed device succeeded");
        assert_dead_device_error(&e, "GET_PARAM");
        assert!(
            elapsed < Duration::from_secs(1),
            "the failing ioctl took {elapsed:?}"
        );
        // Every other call fails too.
        let e = c
            .dev
            .submit(&add.job())
            .expect_err("SUBMIT on a killed device succeeded");
        assert_dead_device_error(&e, "SUBMIT");
        let e = c
            .dev
            .bo_create(4096)
            .expect_err("BO_CREATE on a killed device succeeded");
        assert_dead_device_error(&e, "BO_CREATE");
    });
}

#[test]
fn killed_device_fails_a_wait_in_progress() {
    run_with_sim(&["--fault-delay-job-ms", "20000"], |c| {
        let add = AddSetup::new(&*c.dev, 4);
        let seq = c.dev.submit(&add.job()).unwrap();
        let dev = c.dev.clone();
        let waiter =
            std::thread::spawn(move || dev.wait(0, seq, deadline(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        c.sim.kill_hard();
        let r = with_timeout(
            Duration::from_secs(5),
            "WAIT on a dying device",
            move || waiter.join().unwrap(),
        );
        let e = r.expect_err("WAIT succeeded on a killed device");
        assert_dead_device_error(&e, "WAIT");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "WAIT took {:?} to fail",
            t.elapsed()
        );
    });
}

#[test]
fn killed_device_fails_open() {
    run_with_sim(&[], |c| {
        c.sim.kill_hard();
        // The stale mount is detached: opening the path no longer reaches a device.
        let path = c.sim.path().to_path_buf();
        let r = with_timeout(Duration::from_secs(5), "open after kill", move || {
            FdDevice::open(&path).and_then(|d| d.get_param(PARAM_API_VERSION))
        });
        assert!(r.is_err(), "a killed device still answered: {r:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// Fault injection

#[test]
fn fault_fail_ioctl_fails_exactly_the_nth_ioctl_with_eio() {
    run_with_sim(&["--fault-fail-ioctl", "3"], |c| {
        c.dev.get_param(PARAM_API_VERSION).expect("ioctl 1");
        c.dev.get_param(PARAM_CAPABILITIES).expect("ioctl 2");
        assert_errno!(c.dev.get_param(PARAM_API_VERSION), libc::EIO);
        c.dev
            .get_param(PARAM_API_VERSION)
            .expect("ioctl 4 works again");
        let add = AddSetup::new(&*c.dev, 4);
        let seq = c.dev.submit(&add.job()).unwrap();
        assert_eq!(c.dev.wait(0, seq, long_deadline()).unwrap().status, 0);
    });
}

#[test]
fn fault_fail_ioctl_counts_across_files() {
    run_with_sim(&["--fault-fail-ioctl", "2"], |c| {
        let other = c.open();
        c.dev.get_param(PARAM_API_VERSION).expect("ioctl 1");
        assert_errno!(other.get_param(PARAM_API_VERSION), libc::EIO);
        other.get_param(PARAM_API_VERSION).expect("ioctl 3");
    });
}

#[test]
fn fault_drop_completion_times_out_and_the_device_keeps_serving() {
    run_with_sim(&["--fault-drop-completion", "1"], |c| {
        let add = AddSetup::new(&*c.dev, 4);
        let seq = c.dev.submit(&add.job()).unwrap();
        assert_errno!(
            c.dev.wait(0, seq, deadline(Duration::from_millis(200))),
            libc::ETIMEDOUT
        );
        c.dev
            .get_param(PARAM_API_VERSION)
            .expect("the device still answers");
        add.out.write_f32(0, &[0.0; 4]);
        let seq2 = c.dev.submit(&add.job()).unwrap();
        let w = c.dev.wait(0, seq2, long_deadline()).unwrap();
        assert_eq!(w.status, 0);
        assert_eq!(add.output(), add.expected());
    });
}

#[test]
fn fault_drop_completion_on_a_ring_times_out_and_the_ring_keeps_working() {
    run_with_sim(&["--fault-drop-completion", "1"], |c| {
        let add = AddSetup::new(&*c.dev, 4);
        let mut ring = RingQueue::create(dyn_dev(&c.dev), 4, 0).unwrap();
        let s1 = ring.submit(&add.job()).unwrap();
        let r = ring.wait(
            s1,
            Duration::ZERO,
            Some(deadline(Duration::from_millis(200))),
        );
        assert!(r.is_err(), "a dropped completion arrived: {r:?}");
        assert_errno!(
            c.dev
                .wait(ring.id(), s1, deadline(Duration::from_millis(50))),
            libc::ETIMEDOUT
        );
        c.dev
            .get_param(PARAM_API_VERSION)
            .expect("the device still answers");
    });
}

#[test]
fn fault_exit_on_ioctl_fails_the_clients_calls_fast() {
    run_with_sim(&["--fault-exit-on-ioctl", "3"], |c| {
        c.dev.get_param(PARAM_API_VERSION).expect("ioctl 1");
        c.dev.get_param(PARAM_API_VERSION).expect("ioctl 2");
        let dev = c.dev.clone();
        let (r3, r4, elapsed) = with_timeout(
            Duration::from_secs(5),
            "ioctls on an exiting device",
            move || {
                let t = Instant::now();
                let r3 = dev.get_param(PARAM_API_VERSION);
                let r4 = dev.bo_create(4096);
                (r3, r4, t.elapsed())
            },
        );
        let e3 = r3.expect_err("the ioctl the device died in succeeded");
        assert_dead_device_error(&e3, "the ioctl the device exited in");
        let e4 = r4.expect_err("an ioctl after the device exited succeeded");
        assert_dead_device_error(&e4, "the next ioctl");
        assert!(elapsed < Duration::from_secs(1), "failing took {elapsed:?}");
        poll_until(Duration::from_secs(5), "the device process exits", || {
            c.sim.has_exited()
        });
    });
}
