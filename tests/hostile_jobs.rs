//! Hostile jobs (issue 16, item 3 and the long-job half of item 2): a client whose execution
//! overruns its deadline on a slowed device, and one whose job outlasts the HAL's device
//! timeout. After the final reply nothing writes that client's pool, and the device stays in
//! service for the next client. The slowness is the simulator's fault injection
//! (`--fault-delay-job-ms`), limited to large outputs (`--fault-delay-job-min-output-bytes`)
//! so that the well-behaved client afterwards runs at full speed on the same device.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use nnaccel_hal::{ErrorStatus, HalPreparedModel, MeasureTiming, OperationType};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools;
use nnaccel_tests::service::*;
use nnaccel_tests::{Sim, require_privileges, scaled, with_timeout};

/// Elements of the hostile client's vectors: 16 KiB of output, past the delay threshold.
const SLOW_N: u32 = 4096;
/// Bytes of output from which the simulator delays a job.
const SLOW_BYTES: &str = "16384";
/// Elements of the well-behaved client's vectors: below the threshold, so not delayed.
const FAST_N: u32 = 32;

fn with_slow_device(
    delay_ms: u64,
    hald_env: &[(&str, &str)],
    body: impl FnOnce(&Sim, &Hald) + Send + 'static,
) {
    if !require_privileges() {
        return;
    }
    let delay = delay_ms.to_string();
    let env: Vec<(String, String)> = hald_env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    with_timeout(
        scaled(Duration::from_secs(90)),
        "hostile job test",
        move || {
            let sim = Sim::start(&[
                "--fault-delay-job-ms",
                &delay,
                "--fault-delay-job-min-output-bytes",
                SLOW_BYTES,
            ]);
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let hald = Hald::start_with_env(
                &[std::ffi::OsStr::new("--device"), sim.path().as_os_str()],
                &env,
            );
            body(&sim, &hald);
            drop(hald);
            drop(sim);
        },
    );
}

fn jobs_completed(c: &ServiceClient) -> u64 {
    c.info()
        .unwrap()
        .device_jobs_completed
        .expect("a device service reports its device's jobs")
}

/// The output argument's bytes (NaN-safe: compared bit for bit).
fn out_bits(io: &Io3) -> Vec<u32> {
    io.out().iter().map(|f| f.to_bits()).collect()
}

/// Watches `io`'s output for `d` after the reply: no bit may change.
fn assert_pool_untouched(io: &Io3, at_reply: &[u32], d: Duration, what: &str) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        let now = out_bits(io);
        assert!(
            now == at_reply,
            "{what}: the client's output pool changed after the final reply"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A well-behaved client executes on the device and gets the right answer, promptly.
fn assert_device_serves(hald: &Hald, what: &str) {
    assert!(!hald.has_exited(), "{what}: the service died");
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, FAST_N)).unwrap();
    assert!(pm.runs_on_device(), "{what}: placed on the device");
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(FAST_N)).unwrap(), FAST_N);
    let (a, b) = inputs(FAST_N, 3.0);
    io.set(&a, &b);
    let before = jobs_completed(&c);
    let start = Instant::now();
    let r = execute(&*pm, &io.request());
    assert_eq!(r.status, ErrorStatus::None, "{what}: {r:?}");
    assert_eq!(io.out(), sum(&a, &b), "{what}: the output");
    assert!(
        jobs_completed(&c) > before,
        "{what}: the execution ran on the device, not on the CPU fallback"
    );
    assert!(
        start.elapsed() < scaled(Duration::from_secs(5)),
        "{what}: answered in {:?}",
        start.elapsed()
    );
}

/// The hostile client: a model prepared on the device whose jobs the simulator delays, and its
/// pool with the inputs set and NaN in the output.
fn slow_client(hald: &Hald) -> (std::sync::Arc<dyn HalPreparedModel>, Io3) {
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, SLOW_N)).unwrap();
    assert!(pm.runs_on_device());
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(SLOW_N)).unwrap(), SLOW_N);
    let (a, b) = inputs(SLOW_N, 1.0);
    io.set(&a, &b);
    (pm, io)
}

/// Fails while the HAL answers MISSED_DEADLINE_* and leaves the device job running: the job
/// writes the pool about 2 s later.
#[test]
fn a_missed_deadline_reply_comes_after_the_job_is_fenced_and_the_pool_never_changes_after_it() {
    with_slow_device(2_000, &[], |_sim, hald| {
        let (pm, io) = slow_client(hald);
        let deadline = Instant::now() + Duration::from_millis(300);
        let r = pm.execute_synchronously(&io.request(), MeasureTiming::No, Some(deadline));
        let at_reply = out_bits(&io);
        assert!(
            matches!(
                r.status,
                ErrorStatus::MissedDeadlineTransient | ErrorStatus::MissedDeadlinePersistent
            ),
            "{r:?}"
        );
        assert_pool_untouched(&io, &at_reply, Duration::from_secs(3), "missed deadline");
        assert_device_serves(hald, "after a missed deadline");
    });
}

/// Fails while a job that outlasts DEVICE_TIMEOUT marks the device dead: the next client is
/// then placed on the CPU (and the overrunning job was re-run on the CPU inside the service).
#[test]
fn a_job_past_the_device_timeout_fails_alone_and_the_next_client_still_gets_the_device() {
    with_slow_device(
        3_000,
        &[("NNACCEL_DEVICE_TIMEOUT_MS", "500")],
        |_sim, hald| {
            let (pm, io) = slow_client(hald);
            let start = Instant::now();
            let r = execute(&*pm, &io.request());
            let at_reply = out_bits(&io);
            assert_eq!(r.status, ErrorStatus::GeneralFailure, "{r:?}");
            assert!(
                start.elapsed() < scaled(Duration::from_millis(2_500)),
                "answered at the device timeout, not when the job ended: {:?}",
                start.elapsed()
            );
            assert_pool_untouched(&io, &at_reply, Duration::from_secs(3), "device timeout");
            assert_device_serves(hald, "after a job past the device timeout");
            assert!(
                ServiceClient::connect(hald.socket())
                    .unwrap()
                    .info()
                    .unwrap()
                    .device_jobs_completed
                    .is_some(),
                "the device is still in service"
            );
        },
    );
}
