//! Burst executions over fast message queues end to end (`docs/burst.md`): `nnaccel-hald` on a
//! temp socket (over `nnaccel-sim` on FUSE, or `--cpu`), this test as the client with an
//! `ExecutionBurstController`, and a child client process where a client must die.
//!
//! Covered, after REFERENCE.md §5 and the VTS burst checks: results equal to regular
//! executions over thousands of executions with changing inputs; every invalid request →
//! INVALID_ARGUMENT with no shapes and no timing; a result queue of 8 datums → GENERAL_FAILURE;
//! freeMemory of a valid, an unknown and a freed slot; random and truncated packets →
//! GENERAL_FAILURE with the service alive; kill -9 of the client (the service frees the burst)
//! and of the service (the waiting client returns) mid-burst; the polling window from the
//! preference; the plain-futex fallback; bursts on a model prepared in-process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nnaccel_hal::burst::packet::{self, BurstRequest, DATUM_SIZE};
use nnaccel_hal::burst::{BurstConfig, ExecutionBurstController};
use nnaccel_hal::{
    Backend, Driver, ErrorStatus, ExecutionPreference, ExecutionResult, HalDevice,
    HalPreparedModel, MeasureTiming, MemoryPool, Model, OperationType, Priority, Request, Timing,
};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tests::service::*;
use nnaccel_tests::{Sim, poll_until, require_privileges, scaled, with_timeout};

fn limit() -> Duration {
    scaled(Duration::from_secs(90))
}

/// Runs `body` against a service: over the simulated device (root and FUSE needed; under
/// CI=true a missing privilege fails) or on the CPU executor only.
fn with_service(device: bool, hald_args: &[&str], body: impl FnOnce(&Hald) + Send + 'static) {
    if device && !require_privileges() {
        return;
    }
    let args: Vec<String> = hald_args.iter().map(|s| s.to_string()).collect();
    with_timeout(limit(), "burst test", move || {
        let sim = device.then(|| Sim::start(&[]));
        let mut extra: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        match &sim {
            Some(s) => extra.extend(["--device".into(), s.path().as_os_str().to_owned()]),
            None => extra.push("--cpu".into()),
        }
        let extra: Vec<&std::ffi::OsStr> = extra.iter().map(|s| s.as_os_str()).collect();
        let hald = Hald::start(&extra);
        body(&hald);
        drop(hald);
        drop(sim);
    });
}

/// `a + b` over n elements in one new ashmem pool ([`Io3`]).
fn add_io(n: u32) -> Io3 {
    Io3::new(pools::ashmem(Io3::bytes_needed(n)).unwrap(), n)
}

/// Writes inputs derived from `seed` (and NaN outputs); returns the expected sum.
fn fill(io: &Io3, seed: u32) -> Vec<f32> {
    let (a, b) = inputs(io.n, seed as f32);
    io.set(&a, &b);
    sum(&a, &b)
}

#[track_caller]
fn assert_ok(r: &ExecutionResult, what: &str) {
    assert_eq!(r.status, ErrorStatus::None, "{what}: {r:?}");
}

#[track_caller]
fn assert_failure(r: &ExecutionResult, status: ErrorStatus, what: &str) {
    assert_eq!(r.status, status, "{what}: {r:?}");
    assert!(r.output_shapes.is_empty(), "{what}: shapes {r:?}");
    assert_eq!(r.timing, Timing::NOT_MEASURED, "{what}: timing");
}

fn burst(pm: &dyn HalPreparedModel) -> ExecutionBurstController {
    pm.configure_execution_burst(BurstConfig::default())
        .unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Results

/// Thousands of burst executions alternating two pools with changing inputs, each compared
/// with a regular execution of the same request and with the expected sum; the slot cache
/// fetches each pool once.
fn check_results_equal_regular(pm: &dyn HalPreparedModel, what: &str) {
    check_burst_equals_regular(pm, &burst(pm), what);
}

fn check_burst_equals_regular(pm: &dyn HalPreparedModel, b: &ExecutionBurstController, what: &str) {
    let ios = [add_io(256), add_io(256)];
    let requests = [ios[0].request(), ios[1].request()];
    for i in 0..2000u32 {
        let io = &ios[(i % 2) as usize];
        let expected = fill(io, i);
        let r = b.execute(&requests[(i % 2) as usize], MeasureTiming::Yes);
        assert_ok(&r, what);
        assert_eq!(r.output_shapes.len(), 1);
        assert_eq!(r.output_shapes[0].dimensions, vec![256]);
        assert!(
            r.timing.time_in_driver_us < u64::MAX,
            "{what}: timing measured"
        );
        let burst_out = io.out();
        assert_eq!(burst_out, expected, "{what}: burst execution {i}");
        // The same request as a regular execution, output reset to NaN first.
        fill(io, i);
        let regular =
            pm.execute_synchronously(&requests[(i % 2) as usize], MeasureTiming::Yes, None);
        assert_ok(&regular, what);
        assert_eq!(regular.output_shapes, r.output_shapes);
        assert_eq!(io.out(), burst_out, "{what}: regular execution {i}");
    }
    assert_eq!(b.fallbacks(), 0, "{what}: no execution fell back");
    assert_eq!(b.memories_sent(), 2, "{what}: each pool fetched once");
    assert_eq!(b.cached_slots(), 2);
}

#[test]
fn burst_results_equal_regular_results_over_thousands_of_executions_on_the_device() {
    with_service(true, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 256)).unwrap();
        assert!(pm.runs_on_device());
        let before = c.info().unwrap().device_jobs_completed.unwrap();
        check_results_equal_regular(&*pm, "device");
        let after = c.info().unwrap().device_jobs_completed.unwrap();
        assert!(after - before >= 2000, "the bursts ran on the device");
    });
}

/// The burst's device resources: one BO per slot, imported once (the regular path imports and
/// closes per execution), and a device queue of its own (created QUEUE_FLAG_HIGH_PERFORMANCE),
/// all gone when the burst is dropped.
#[test]
fn a_device_burst_imports_each_pool_once_and_has_its_own_queue() {
    with_service(true, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 64)).unwrap();
        let live = |c: &ServiceClient| c.info().unwrap().device_live.unwrap();
        let base = live(&c);
        let jobs = c.info().unwrap().device_jobs_completed.unwrap();
        let b = burst(&*pm);
        let ios = [add_io(64), add_io(64)];
        for i in 0..100 {
            let io = &ios[i % 2];
            let expected = fill(io, i as u32);
            assert_ok(&b.execute(&io.request(), MeasureTiming::No), "device burst");
            assert_eq!(io.out(), expected);
        }
        let during = live(&c);
        assert_eq!(
            during[1],
            base[1] + 2,
            "one BO per slot: {base:?} -> {during:?}"
        );
        assert_eq!(
            during[3],
            base[3] + 1,
            "the burst's queue: {base:?} -> {during:?}"
        );
        let ran = c.info().unwrap().device_jobs_completed.unwrap() - jobs;
        assert!(ran >= 100, "the executions ran on the device ({ran} jobs)");
        b.free_memory(b.slot_of(&MemoryPool::Memory(ios[0].pool.clone())).unwrap());
        poll_until(
            scaled(Duration::from_secs(1)),
            "freeMemory closing its BO",
            || live(&c)[1] == base[1] + 1,
        );
        drop(b);
        poll_until(
            scaled(Duration::from_secs(1)),
            "the burst's BOs and queue",
            || live(&c) == base,
        );
    });
}

#[test]
fn burst_results_equal_regular_results_over_thousands_of_executions_on_the_cpu() {
    with_service(false, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 256)).unwrap();
        check_results_equal_regular(&*pm, "cpu");
    });
}

#[test]
fn bursts_work_on_a_model_prepared_in_process() {
    with_timeout(limit(), "in-process burst", || {
        let driver = Driver::new(Backend::CpuOnly);
        let pm = prepare(&driver, &binary_model(OperationType::Add, 256)).unwrap();
        let b = burst(&*pm);
        assert!(b.runs_on_caller_thread(), "no worker thread in process");
        assert_eq!(b.info().wait, nnaccel_hal::burst::IN_CALLER_THREAD);
        assert!(b.worker_stats().is_none());
        check_results_equal_regular(&*pm, "in-process");
    });
}

/// The prepared model behind an in-process `HalPreparedModel`.
fn local_model(pm: &dyn HalPreparedModel) -> &nnaccel_hal::PreparedModel {
    pm.as_any()
        .downcast_ref::<nnaccel_hal::PreparedModel>()
        .expect("a model prepared in process")
}

/// An ADD of `n` floats prepared in process, and a burst on it over queues and a worker thread
/// with the polling window `window_us` (None: the default).
fn over_queues(
    n: u32,
    window_us: Option<u32>,
) -> (Arc<dyn HalPreparedModel>, ExecutionBurstController) {
    let driver = Driver::new(Backend::CpuOnly);
    let pm = prepare(&driver, &binary_model(OperationType::Add, n)).unwrap();
    let b = nnaccel_hal::burst::configure_in_process_over_queues(
        local_model(&*pm),
        BurstConfig {
            polling_window_us: window_us,
            ..BurstConfig::default()
        },
    )
    .unwrap();
    (pm, b)
}

#[test]
fn an_in_process_burst_over_queues_gives_the_same_results_as_on_the_caller_thread() {
    with_timeout(limit(), "in-process burst over queues", || {
        let (pm, b) = over_queues(256, None);
        assert!(!b.runs_on_caller_thread());
        check_burst_equals_regular(&*pm, &b, "in-process over queues");
        let stats = b.worker_stats().expect("a worker of this process");
        assert_eq!(stats.packets.load(Ordering::Relaxed), 2000);
    });
}

// ---------------------------------------------------------------------------------------------
// The polling rule: poll only while the other side says it is busy, then sleep on the futex

/// Waits (a bounded while, not a timing assertion) until `cond` holds.
#[track_caller]
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + scaled(Duration::from_secs(10));
    while !cond() {
        assert!(Instant::now() < until, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_worker_sleeps_while_the_client_is_idle_and_wakes_on_a_request() {
    with_timeout(limit(), "worker sleeps when idle", || {
        // A long window: a worker that polled regardless of the client would be seen awake.
        let (_pm, b) = over_queues(16, Some(10_000));
        let stats = b.worker_stats().unwrap();
        let io = add_io(16);
        let req = io.request();
        for round in 0..5u32 {
            // Idle client: the worker goes to sleep on the futex and stays there. Its first
            // futex wait may return at once when the client's busy bit cleared between the
            // worker reading the flag word and waiting on it (the word changed): it then
            // sleeps again. So the baseline is taken once the sleep count holds still.
            let mut settled = stats.sleeps.load(Ordering::SeqCst);
            eventually("the worker asleep and settled", || {
                std::thread::sleep(Duration::from_millis(5));
                let now = stats.sleeps.load(Ordering::SeqCst);
                let still = now == settled && !b.worker_awake();
                settled = now;
                still
            });
            let sleeps = stats.sleeps.load(Ordering::SeqCst);
            assert!(sleeps >= 1);
            let polls = stats.polls.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            assert!(!b.worker_awake(), "round {round}: still asleep");
            assert_eq!(
                stats.polls.load(Ordering::SeqCst),
                polls,
                "no poll while idle"
            );
            if b.info().wait.contains("io_uring") {
                // (The plain-futex fallback wakes every 100 ms to look at the socket.)
                assert_eq!(
                    stats.sleeps.load(Ordering::SeqCst),
                    sleeps,
                    "no wake-up while idle"
                );
            }
            // A request wakes it.
            let expected = fill(&io, round);
            assert_ok(&b.execute(&req, MeasureTiming::No), "after sleeping");
            assert_eq!(io.out(), expected);
            assert_eq!(stats.packets.load(Ordering::SeqCst), u64::from(round) + 1);
        }
        assert_eq!(b.fallbacks(), 0);
    });
}

#[test]
fn a_client_that_stays_busy_without_writing_does_not_keep_the_worker_polling() {
    use nnaccel_hal::burst::controller::{self, BurstInfo};
    use nnaccel_hal::fmq::{Fmq, WRITER_BUSY};
    with_timeout(limit(), "busy client that never writes", || {
        let driver = Driver::new(Backend::CpuOnly);
        let pm = prepare(&driver, &binary_model(OperationType::Add, 16)).unwrap();
        let model = local_model(&*pm).clone();
        let fallback_model = model.clone();
        // The client's view of its request queue, to set its busy bit as a client that died
        // between announcing and writing would leave it.
        let mut client_view = None;
        let b = controller::configure(
            Box::new(move |r, m| fallback_model.execute_synchronously(r, m, None)),
            nnaccel_hal::burst::CHANNEL_LENGTH,
            |ends| {
                let map = |q: &Fmq| {
                    Fmq::from_fd(
                        q.fd().try_clone_to_owned().unwrap(),
                        q.descriptor(),
                        DATUM_SIZE as u32,
                    )
                    .unwrap()
                };
                client_view = Some(map(ends.request));
                ends.request.announce(WRITER_BUSY);
                let wait = nnaccel_hal::burst::server::start(
                    model,
                    nnaccel_hal::LOCAL_OWNER,
                    map(ends.request),
                    map(ends.result),
                    ends.channel,
                    nnaccel_hal::burst::MAX_POLLING_WINDOW,
                    None,
                    None,
                )
                .unwrap();
                Ok(BurstInfo {
                    polling_window: nnaccel_hal::burst::MAX_POLLING_WINDOW,
                    wait: wait.describe().into(),
                })
            },
        )
        .unwrap();
        let request_queue = client_view.unwrap();
        assert!(request_queue.is_set(WRITER_BUSY));
        // Busy for ever and nothing written: the worker polls at most once, then sleeps.
        eventually("the worker asleep though the client is busy", || {
            !b.worker_awake()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!b.worker_awake(), "the worker stays asleep");
        assert!(request_queue.is_set(WRITER_BUSY));
        // It still serves.
        let io = add_io(16);
        let expected = fill(&io, 3);
        assert_ok(&b.execute(&io.request(), MeasureTiming::No), "after");
        assert_eq!(io.out(), expected);
        assert!(
            !request_queue.is_set(WRITER_BUSY),
            "the exchange withdrew it"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Conformance (VTS ValidateBurst / ValidateRequest on the burst path)

/// A change that makes a valid request invalid.
type Mutation = Box<dyn Fn(&mut Request)>;

/// Every invalid request: INVALID_ARGUMENT, no shapes, no timing, and no fallback (the burst
/// path itself answered).
fn check_invalid_requests(pm: &dyn HalPreparedModel) {
    let b = burst(pm);
    let io = add_io(16);
    fill(&io, 1);
    let good = io.request();
    let mutations: Vec<(&str, Mutation)> = vec![
        ("an input removed", Box::new(|r| drop(r.inputs.pop()))),
        ("an output removed", Box::new(|r| drop(r.outputs.pop()))),
        (
            "an extra input",
            Box::new(|r| r.inputs.push(r.inputs[0].clone())),
        ),
        (
            "an extra output",
            Box::new(|r| r.outputs.push(r.outputs[0].clone())),
        ),
        (
            "a pool index out of range",
            Box::new(|r| r.inputs[0].location.pool_index = 3),
        ),
        (
            "an input past the end of its pool",
            Box::new(|r| r.inputs[1].location.offset = 1 << 20),
        ),
        (
            "an offset + length that overflows",
            Box::new(|r| r.outputs[0].location.offset = u32::MAX - 8),
        ),
        (
            "dimensions of the wrong rank",
            Box::new(|r| r.inputs[0].dimensions = vec![16, 1]),
        ),
        (
            "dimensions that disagree with the model",
            Box::new(|r| r.inputs[0].dimensions = vec![15]),
        ),
        (
            "an omitted input with a location",
            Box::new(|r| r.inputs[0].has_no_value = true),
        ),
        (
            "a length that is not the operand's size",
            Box::new(|r| r.inputs[0].location.length = 12),
        ),
        (
            "a memory-domain token the service never gave",
            Box::new(|r| r.pools[0] = MemoryPool::Token(7)),
        ),
    ];
    for (what, mutate) in &mutations {
        let mut r = good.clone();
        mutate(&mut r);
        let result = b.execute(&r, MeasureTiming::Yes);
        assert_failure(&result, ErrorStatus::InvalidArgument, what);
    }
    assert_eq!(b.fallbacks(), 0, "the burst path answered every one");
    assert_ok(
        &b.execute(&good, MeasureTiming::No),
        "the valid request after them",
    );
}

#[test]
fn invalid_requests_on_the_burst_path_are_invalid_argument_without_shapes_or_timing() {
    with_service(false, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 16)).unwrap();
        check_invalid_requests(&*pm);
    });
}

#[test]
fn invalid_requests_on_an_in_process_burst_are_invalid_argument_too() {
    let driver = Driver::new(Backend::CpuOnly);
    let pm = prepare(&driver, &binary_model(OperationType::Add, 16)).unwrap();
    assert!(burst(&*pm).runs_on_caller_thread());
    check_invalid_requests(&*pm);
}

#[test]
fn invalid_requests_on_the_burst_path_to_the_device_are_invalid_argument() {
    with_service(true, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 16)).unwrap();
        assert!(pm.runs_on_device());
        check_invalid_requests(&*pm);
    });
}

/// Three outputs of rank 2: a result of 2 + 3 + 6 = 11 datums.
fn three_output_model() -> Model {
    let mut b = ModelBuilder::new();
    let x = b.input(&[2, 2]);
    let y = b.input(&[2, 2]);
    let act = b.int32(0);
    let outs = [b.output(&[2, 2]), b.output(&[2, 2]), b.output(&[2, 2])];
    b.operation(OperationType::Add, &[x, y, act], &[outs[0]]);
    b.operation(OperationType::Mul, &[x, y, act], &[outs[1]]);
    b.operation(OperationType::Sub, &[x, y, act], &[outs[2]]);
    b.build()
}

#[test]
fn a_result_queue_of_8_datums_gives_general_failure() {
    with_service(false, &[], |hald| {
        let c = hald.client();
        check_small_result_queue(&*prepare(&c, &three_output_model()).unwrap());
    });
}

#[test]
fn a_result_queue_of_8_datums_gives_general_failure_in_process_too() {
    let driver = Driver::new(Backend::CpuOnly);
    check_small_result_queue(&*prepare(&driver, &three_output_model()).unwrap());
}

/// An 11-datum result with a result queue of 8 → GENERAL_FAILURE, not a fallback.
fn check_small_result_queue(pm: &dyn HalPreparedModel) {
    {
        let pool = pools::ashmem(4096).unwrap();
        let map = MappedClientPool::new(&pool).unwrap();
        map.write_f32(0, &[1.0, 2.0, 3.0, 4.0]).unwrap();
        map.write_f32(64, &[5.0, 6.0, 7.0, 8.0]).unwrap();
        let req = request(
            vec![arg(0, 0, 16), arg(0, 64, 16)],
            vec![arg(0, 128, 16), arg(0, 192, 16), arg(0, 256, 16)],
            &[&pool],
        );
        let small = pm
            .configure_execution_burst(BurstConfig {
                result_length: 8,
                ..BurstConfig::default()
            })
            .unwrap();
        let r = small.execute(&req, MeasureTiming::Yes);
        assert_failure(&r, ErrorStatus::GeneralFailure, "an 11-datum result in 8");
        assert_eq!(small.fallbacks(), 0);
        // The burst still answers, and a normal-sized one runs the same request.
        let again = small.execute(&req, MeasureTiming::No);
        assert_failure(&again, ErrorStatus::GeneralFailure, "again");
        let normal = burst(pm);
        let r = normal.execute(&req, MeasureTiming::No);
        assert_ok(&r, "with a 1024-datum result queue");
        assert_eq!(r.output_shapes.len(), 3);
        assert_eq!(map.read_f32(192, 4).unwrap(), vec![5.0, 12.0, 21.0, 32.0]);
    }
}

#[test]
fn free_memory_of_a_valid_an_unknown_and_a_freed_slot_does_not_crash() {
    with_service(false, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 32)).unwrap();
        let b = burst(&*pm);
        let io = add_io(32);
        let expected = fill(&io, 3);
        assert_ok(&b.execute(&io.request(), MeasureTiming::No), "first");
        assert_eq!(io.out(), expected);
        let slot = b.slot_of(&MemoryPool::Memory(io.pool.clone())).unwrap();
        b.free_memory(slot);
        b.free_memory(slot + 1000);
        b.free_memory(slot);
        b.free_memory(-1);
        assert_eq!(b.cached_slots(), 0);
        // The memory comes back under a (re-used) slot and is fetched again.
        let expected = fill(&io, 4);
        assert_ok(
            &b.execute(&io.request(), MeasureTiming::No),
            "after the frees",
        );
        assert_eq!(io.out(), expected);
        assert_eq!(b.memories_sent(), 2);
        assert_eq!(b.slot_of(&MemoryPool::Memory(io.pool.clone())), Some(slot));
        // A memory the client dropped gives its slot to the next new one.
        drop(io);
        let other = add_io(32);
        let expected = fill(&other, 5);
        assert_ok(
            &b.execute(&other.request(), MeasureTiming::No),
            "a new pool",
        );
        assert_eq!(other.out(), expected);
        assert_eq!(
            b.slot_of(&MemoryPool::Memory(other.pool.clone())),
            Some(slot)
        );
        assert_eq!(b.cached_slots(), 1);
        assert_eq!(b.fallbacks(), 0);
        assert!(c.info().is_ok(), "the service is alive");
    });
}

#[test]
fn random_and_truncated_packets_get_general_failure_and_the_service_lives() {
    with_service(false, &[], |hald| {
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 8)).unwrap();
        let b = burst(&*pm);
        let io = add_io(8);
        fill(&io, 1);
        // Slot 0 is the pool once a valid execution has run.
        assert_ok(&b.execute(&io.request(), MeasureTiming::No), "first");
        let r = io.request();
        let valid = packet::serialize_request(&BurstRequest {
            inputs: r.inputs.clone(),
            outputs: r.outputs.clone(),
            slots: vec![0],
            measure: MeasureTiming::No,
        });
        let expect_failure = |bytes: &[u8], what: &str| {
            let datums = b.execute_raw(bytes).unwrap();
            let result = packet::deserialize_result(&datums).unwrap();
            assert_failure(&result, ErrorStatus::GeneralFailure, what);
        };
        for keep in 1..valid.len() {
            expect_failure(&packet::to_bytes(&valid[..keep]), &format!("{keep} datums"));
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..300 {
            let n = 1 + (i % 24);
            let bytes: Vec<u8> = (0..n * DATUM_SIZE)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            expect_failure(&bytes, &format!("random packet {i}"));
        }
        let mut huge = valid[0];
        huge[4..8].copy_from_slice(&5000u32.to_le_bytes());
        expect_failure(&huge, "a size beyond the queue");
        let mut unknown_slot = valid.clone();
        unknown_slot[valid.len() - 2][4..8].copy_from_slice(&77i32.to_le_bytes());
        expect_failure(
            &packet::to_bytes(&unknown_slot),
            "a slot the client never named",
        );
        let mut longer = valid.clone();
        longer.push(valid[1]);
        expect_failure(&packet::to_bytes(&longer), "a datum after the packet");
        let mut bad_tag = valid.clone();
        bad_tag[1][0] = 9;
        expect_failure(&packet::to_bytes(&bad_tag), "an unknown tag");
        // The same burst and the service still work.
        let ok = packet::deserialize_result(&b.execute_raw(&packet::to_bytes(&valid)).unwrap());
        assert_ok(&ok.unwrap(), "the valid packet by hand");
        let expected = fill(&io, 9);
        assert_ok(
            &b.execute(&io.request(), MeasureTiming::No),
            "after the garbage",
        );
        assert_eq!(io.out(), expected);
        assert!(!hald.has_exited());
        assert_ok(&execute(&*pm, &io.request()), "a regular execution");
    });
}

// ---------------------------------------------------------------------------------------------
// Liveness

const CHILD_SOCKET_ENV: &str = "NNACCEL_TEST_BURST_CHILD_SOCKET";

/// Not a test: the body of the child client of `a_client_killed_mid_burst_...` (it re-executes
/// this binary with `CHILD_SOCKET_ENV` set). Without that variable it does nothing.
#[test]
fn burst_child_client_process() {
    let Some(c) = child_client(CHILD_SOCKET_ENV) else {
        return;
    };
    let pm = prepare(&c, &binary_model(OperationType::Add, 1024)).unwrap();
    let b = burst(&*pm);
    let io = add_io(1024);
    let req = io.request();
    let mut seed = 0;
    loop {
        let expected = fill(&io, seed);
        assert_ok(&b.execute(&req, MeasureTiming::No), "child");
        assert_eq!(io.out(), expected);
        if seed == 10 {
            say_ready();
        }
        seed += 1;
    }
}

#[test]
fn a_client_killed_mid_burst_has_its_burst_torn_down_within_a_second() {
    with_service(true, &[], |hald| {
        // The baseline counts `c` alone, not the start-up probe as well.
        let c = hald.only_client();
        let baseline_info = c.info().unwrap();
        let baseline_fds = open_fds(hald.pid());
        let (mut child, ready) = spawn_child_test(
            "burst_child_client_process",
            CHILD_SOCKET_ENV,
            hald.socket().as_os_str(),
        );
        assert!(ready.join().unwrap(), "the child never said ready");
        let during = open_fds(hald.pid());
        assert!(
            during >= baseline_fds + 5,
            "the burst's queues, channel, ring and pool are open in the service: {baseline_fds} -> {during}"
        );
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        poll_until(
            scaled(Duration::from_secs(1)),
            "the service freeing the killed client's burst",
            || open_fds(hald.pid()) <= baseline_fds,
        );
        let took = killed.elapsed();
        poll_until(
            scaled(Duration::from_secs(5)),
            "the connection gone",
            || {
                let now = c.info().unwrap();
                now.connections == baseline_info.connections
                    && now.prepared_models == baseline_info.prepared_models
                    && now.device_live == baseline_info.device_live
            },
        );
        assert!(
            hald.log().contains("burst worker ends"),
            "the worker said it ended"
        );
        eprintln!("burst torn down {took:?} after the kill");
        let pm = prepare(&c, &binary_model(OperationType::Add, 8)).unwrap();
        let io = add_io(8);
        let expected = fill(&io, 2);
        assert_ok(
            &burst(&*pm).execute(&io.request(), MeasureTiming::No),
            "a new burst",
        );
        assert_eq!(io.out(), expected);
    });
}

#[test]
fn a_service_killed_mid_burst_fails_the_waiting_execution_within_a_second() {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "killed service", || {
        let sim = Sim::start(&["--fault-delay-job-ms", "3000"]);
        let hald = Hald::with_device(&sim);
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 64)).unwrap();
        let b = Arc::new(burst(&*pm));
        let io = Arc::new(add_io(64));
        fill(&io, 1);
        let (b2, io2) = (b.clone(), io.clone());
        let (r, took) =
            result_after_killing(&hald, move || b2.execute(&io2.request(), MeasureTiming::No));
        assert_failure(&r, ErrorStatus::GeneralFailure, "the execution in flight");
        assert!(
            took < scaled(Duration::from_secs(1)),
            "answered {took:?} after the kill"
        );
        assert!(!b.is_valid(), "the burst knows its service is gone");
        // Later executions fall back to a regular call, which reports the service gone.
        let later = b.execute(&io.request(), MeasureTiming::No);
        assert_failure(&later, ErrorStatus::DeviceUnavailable, "after the kill");
        assert_eq!(b.fallbacks(), 1);
        drop(sim);
    });
}

// ---------------------------------------------------------------------------------------------
// Polling and waiting

#[test]
fn the_polling_window_follows_the_preference_the_burst_and_the_configuration() {
    with_service(false, &["--burst-polling-us", "7"], |hald| {
        let c = hald.client();
        let model = binary_model(OperationType::Add, 8);
        let with = |pref: ExecutionPreference, asked: Option<u32>| {
            let pm = c
                .prepare_model(&model, pref, Priority::Medium, None)
                .unwrap();
            let b = pm
                .configure_execution_burst(BurstConfig {
                    polling_window_us: asked,
                    ..BurstConfig::default()
                })
                .unwrap();
            let io = add_io(8);
            let expected = fill(&io, 6);
            assert_ok(&b.execute(&io.request(), MeasureTiming::No), "execution");
            assert_eq!(io.out(), expected);
            b.info().polling_window
        };
        assert_eq!(with(ExecutionPreference::LowPower, None), Duration::ZERO);
        assert_eq!(
            with(ExecutionPreference::SustainedSpeed, None),
            Duration::from_micros(7)
        );
        assert_eq!(
            with(ExecutionPreference::LowPower, Some(200)),
            Duration::from_micros(200)
        );
        assert_eq!(
            with(ExecutionPreference::FastSingleAnswer, Some(u32::MAX)),
            nnaccel_hal::burst::MAX_POLLING_WINDOW
        );
    });
    // Without configuration the default is 50 µs.
    let driver = Driver::new(Backend::CpuOnly);
    let pm = prepare(&driver, &binary_model(OperationType::Add, 8)).unwrap();
    assert_eq!(
        burst(&*pm).info().polling_window,
        nnaccel_hal::burst::DEFAULT_POLLING_WINDOW
    );
}

/// ADD over `[n]` prepared for LOW_POWER: its bursts do not poll.
fn prepare_low_power(c: &ServiceClient, n: u32) -> Arc<dyn HalPreparedModel> {
    c.prepare_model(
        &binary_model(OperationType::Add, n),
        ExecutionPreference::LowPower,
        Priority::Medium,
        None,
    )
    .unwrap()
}

fn require_kernel_features() -> bool {
    std::env::var("NNACCEL_REQUIRE_KERNEL_FEATURES").as_deref() == Ok("1")
}

#[test]
fn the_worker_says_how_it_waits_and_uses_io_uring_where_the_kernel_has_it() {
    with_service(false, &[], |hald| {
        let c = hald.client();
        let pm = prepare_low_power(&c, 8);
        let b = burst(&*pm);
        let wait = b.info().wait.clone();
        assert!(
            wait.contains("io_uring") || wait.contains("futex syscall"),
            "{wait}"
        );
        assert!(
            hald.log().contains("burst workers wait with"),
            "{}",
            hald.log()
        );
        if require_kernel_features() {
            assert!(
                wait.contains("io_uring"),
                "the guest kernel has FutexWait: {wait}"
            );
        }
        eprintln!("burst workers here wait with: {wait}");
        // Window 0: every execution sleeps and is woken through the chosen mechanism.
        let io = add_io(8);
        for i in 0..200 {
            let expected = fill(&io, i);
            assert_ok(&b.execute(&io.request(), MeasureTiming::No), "woken");
            assert_eq!(io.out(), expected);
        }
    });
}

#[test]
fn the_plain_futex_fallback_serves_bursts_and_notices_a_released_burst() {
    with_service(false, &["--burst-wait", "futex"], |hald| {
        let c = hald.client();
        let pm = prepare_low_power(&c, 8);
        let baseline = open_fds(hald.pid());
        let b = burst(&*pm);
        assert!(b.info().wait.contains("futex syscall"), "{}", b.info().wait);
        let io = add_io(8);
        for i in 0..200 {
            let expected = fill(&io, i);
            assert_ok(&b.execute(&io.request(), MeasureTiming::No), "futex wait");
            assert_eq!(io.out(), expected);
        }
        assert!(open_fds(hald.pid()) > baseline);
        drop(b);
        poll_until(
            scaled(Duration::from_secs(1)),
            "the released burst's resources",
            || open_fds(hald.pid()) <= baseline,
        );
    });
}

#[test]
fn configure_burst_refuses_bad_queues_and_unknown_models() {
    use nnaccel_hal::fmq::Fmq;
    use nnaccel_protocol::{ClientMessage, FdList};
    with_service(false, &[], |hald| {
        let c = hald.client();
        let _pm = prepare(&c, &binary_model(OperationType::Add, 8)).unwrap();
        let sock = std::os::unix::net::UnixStream::connect(hald.socket()).unwrap();
        let call = |msg: &ClientMessage, fds: &FdList<'_>| {
            let body = nnaccel_protocol::encode(msg).unwrap();
            nnaccel_protocol::send_frame(&sock, &body, fds.fds()).unwrap();
            let (body, _) = nnaccel_protocol::recv_frame(&sock, 1 << 20).unwrap();
            nnaccel_protocol::decode::<nnaccel_protocol::ServiceMessage>(&body).unwrap()
        };
        let hello = ClientMessage::Hello {
            version: nnaccel_protocol::PROTOCOL_VERSION,
            client: "burst test".into(),
        };
        call(&hello, &FdList::default());
        // This connection has no models: model 1 is unknown here.
        let prepared = call(
            &ClientMessage::PrepareModel {
                model: nnaccel_protocol::model_to_wire(
                    &binary_model(OperationType::Add, 8),
                    &mut FdList::default(),
                ),
                preference: 1,
                priority: 100,
                timeout_ns: None,
            },
            &FdList::default(),
        );
        assert!(matches!(
            prepared,
            nnaccel_protocol::ServiceMessage::Prepared { model_id: 1, .. }
        ));
        let rq = Fmq::create(24, 1024).unwrap();
        let rs = Fmq::create(24, 1024).unwrap();
        let wrong_datum = Fmq::create(16, 1024).unwrap();
        let (_mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let pipe = rustix::pipe::pipe().unwrap().0;
        let configure = |model_id, rq: &Fmq, rs: &Fmq, third: std::os::fd::BorrowedFd<'_>| {
            let mut fds = FdList::default();
            fds.push(rq.fd());
            fds.push(rs.fd());
            fds.push(third);
            call(
                &ClientMessage::ConfigureBurst {
                    model_id,
                    request_fmq: rq.descriptor(),
                    result_fmq: rs.descriptor(),
                    polling_window_us: None,
                },
                &fds,
            )
        };
        let invalid = |m: nnaccel_protocol::ServiceMessage, what: &str| match m {
            nnaccel_protocol::ServiceMessage::Error { status, .. } => {
                assert_eq!(status, ErrorStatus::InvalidArgument.code(), "{what}")
            }
            other => panic!("{what}: {other:?}"),
        };
        use std::os::fd::AsFd;
        invalid(configure(9, &rq, &rs, theirs.as_fd()), "an unknown model");
        invalid(
            configure(1, &wrong_datum, &rs, theirs.as_fd()),
            "16-byte datums",
        );
        invalid(configure(1, &rq, &rs, pipe.as_fd()), "a pipe as channel");
        let ok = configure(1, &rq, &rs, theirs.as_fd());
        assert!(
            matches!(ok, nnaccel_protocol::ServiceMessage::BurstConfigured { .. }),
            "{ok:?}"
        );
        assert!(c.info().is_ok());
    });
}

#[test]
fn a_client_uid_runs_at_most_64_bursts_at_once_over_all_its_connections() {
    // One uid's bursts are counted over all its connections (the `bursts` budget, 64 per uid;
    // docs/service.md, "Budgets per client"), so that it cannot take every one of the
    // service's 256 places; tests/hostile_limits.rs shows another uid still gets one.
    nnaccel_service::raise_fd_limit().unwrap();
    with_service(false, &[], |hald| {
        let per_uid = nnaccel_service::budget::Budgets::default().bursts.per_uid as usize;
        let per_client = nnaccel_service::DEFAULT_MAX_BURSTS_PER_CONNECTION;
        assert!(per_uid <= per_client);
        let c = hald.client();
        let pm = prepare_low_power(&c, 8);
        let mut bursts: Vec<ExecutionBurstController> = (0..per_uid).map(|_| burst(&*pm)).collect();
        assert_eq!(
            pm.configure_execution_burst(BurstConfig::default()).err(),
            Some(ErrorStatus::ResourceExhaustedTransient),
            "burst {} of one uid",
            per_uid + 1
        );
        // Another connection of the same uid gets none either.
        let late = hald.client();
        let late_pm = prepare_low_power(&late, 8);
        assert_eq!(
            late_pm
                .configure_execution_burst(BurstConfig::default())
                .err(),
            Some(ErrorStatus::ResourceExhaustedTransient),
            "burst {} of one uid on a second connection",
            per_uid + 1
        );
        // A released burst's place is free again once its worker has gone, for the new client.
        drop(bursts.pop());
        poll_until(
            scaled(Duration::from_secs(5)),
            "a place for a new burst",
            || match late_pm.configure_execution_burst(BurstConfig::default()) {
                Ok(b) => {
                    bursts.push(b);
                    true
                }
                Err(s) => {
                    assert_eq!(s, ErrorStatus::ResourceExhaustedTransient);
                    false
                }
            },
        );
        let io = add_io(8);
        let expected = fill(&io, 3);
        let last = bursts.last().unwrap();
        assert_ok(
            &last.execute(&io.request(), MeasureTiming::No),
            "the newest burst",
        );
        assert_eq!(io.out(), expected);
    });
}
