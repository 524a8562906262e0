//! Hostile burst clients against `nnaccel-hald --cpu` (docs/burst.md, "Hostile clients"): a
//! client that floods the request queue's NOT_EMPTY without data, one that trickles its
//! getMemories answer byte by byte, and a service stopped (SIGTERM) with bursts running. Each
//! must end in bounded time with the service serving everyone else.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nnaccel_hal::burst::packet::{self, BurstRequest};
use nnaccel_hal::burst::{BurstConfig, CALLBACK_TIMEOUT};
use nnaccel_hal::fmq::{Fmq, NOT_EMPTY};
use nnaccel_hal::{ErrorStatus, MeasureTiming, OperationType};
use nnaccel_protocol::pools;
use nnaccel_protocol::{self as protocol, ClientMessage, FdList, ServiceMessage};
use nnaccel_tests::service::*;
use nnaccel_tests::{poll_until, scaled, with_timeout};

fn limit() -> Duration {
    scaled(Duration::from_secs(60))
}

/// A burst configured by hand on its own connection: the test holds the queues and the
/// client's end of the burst channel, and answers (or not) as it likes.
struct RawBurst {
    _conn: UnixStream,
    request: Fmq,
    result: Fmq,
    channel: UnixStream,
}

fn call(sock: &UnixStream, msg: &ClientMessage, fds: &FdList<'_>) -> ServiceMessage {
    protocol::send_frame(sock, &protocol::encode(msg).unwrap(), fds.fds()).unwrap();
    let (body, _) = protocol::recv_frame(sock, 1 << 20).unwrap();
    protocol::decode(&body).unwrap()
}

fn raw_burst(hald: &Hald) -> RawBurst {
    raw_burst_with(hald, 1024).unwrap_or_else(|m| panic!("{m:?}"))
}

/// [`raw_burst`] with queues of `capacity` datums; the service's answer if it refuses.
fn raw_burst_with(hald: &Hald, capacity: u32) -> Result<RawBurst, Box<ServiceMessage>> {
    let conn = UnixStream::connect(hald.socket()).unwrap();
    let hello = ClientMessage::Hello {
        version: protocol::PROTOCOL_VERSION,
        client: "hardening test".into(),
    };
    call(&conn, &hello, &FdList::default());
    let prepare = ClientMessage::PrepareModel {
        model: protocol::model_to_wire(
            &binary_model(OperationType::Add, 8),
            &mut FdList::default(),
        ),
        preference: 1,
        priority: 100,
        timeout_ns: None,
    };
    let ServiceMessage::Prepared { model_id, .. } = call(&conn, &prepare, &FdList::default())
    else {
        panic!("prepare failed");
    };
    let request = Fmq::create(packet::DATUM_SIZE as u32, capacity).unwrap();
    let result = Fmq::create(packet::DATUM_SIZE as u32, capacity).unwrap();
    let (channel, theirs) = UnixStream::pair().unwrap();
    let mut fds = FdList::default();
    fds.push(request.fd());
    fds.push(result.fd());
    fds.push(theirs.as_fd());
    let configure = ClientMessage::ConfigureBurst {
        model_id,
        request_fmq: request.descriptor(),
        result_fmq: result.descriptor(),
        polling_window_us: Some(0),
    };
    match call(&conn, &configure, &fds) {
        ServiceMessage::BurstConfigured { .. } => Ok(RawBurst {
            _conn: conn,
            request,
            result,
            channel,
        }),
        other => Err(Box::new(other)),
    }
}

/// Whether the service closed (or shut down) its end of the burst channel.
fn closed_by_service(channel: &UnixStream) -> bool {
    channel.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let closed = matches!((&*channel).read(&mut byte), Ok(0));
    channel.set_nonblocking(false).unwrap();
    closed
}

/// A regular burst of another client still runs `a + b` right.
fn another_client_is_served(hald: &Hald) {
    let c = hald.client();
    let pm = prepare(&c, &binary_model(OperationType::Add, 8)).unwrap();
    let b = pm
        .configure_execution_burst(BurstConfig::default())
        .unwrap();
    let io = Io3::new(pools::ashmem(Io3::bytes_needed(8)).unwrap(), 8);
    let (a, x) = inputs(8, 3.0);
    io.set(&a, &x);
    let r = b.execute(&io.request(), MeasureTiming::No);
    assert_eq!(r.status, ErrorStatus::None, "{r:?}");
    assert_eq!(io.out(), sum(&a, &x));
}

#[test]
fn a_client_flooding_not_empty_without_data_loses_its_burst_and_others_are_served() {
    with_timeout(limit(), "NOT_EMPTY flood", || {
        let hald = Hald::cpu_only();
        let b = raw_burst(&hald);
        let mut wakes = 0u64;
        poll_until(
            scaled(Duration::from_secs(20)),
            "the service ending the flooding burst",
            || {
                for _ in 0..10_000 {
                    b.request.wake(NOT_EMPTY);
                    wakes += 1;
                }
                closed_by_service(&b.channel)
            },
        );
        assert_eq!(
            b.request.available_to_read(),
            0,
            "no datum was ever written"
        );
        assert!(
            hald.log().contains("NOT_EMPTY"),
            "the service says why it ended the burst"
        );
        eprintln!("burst ended after {wakes} wakes without data");
        another_client_is_served(&hald);
        assert!(!hald.has_exited());
    });
}

#[test]
fn a_client_trickling_its_getmemories_answer_gets_general_failure_in_bounded_time() {
    with_timeout(limit(), "trickled answer", || {
        let hald = Hald::cpu_only();
        let b = raw_burst(&hald);
        let io = Io3::new(pools::ashmem(Io3::bytes_needed(8)).unwrap(), 8);
        let r = io.request();
        let datums = packet::serialize_request(&BurstRequest {
            inputs: r.inputs,
            outputs: r.outputs,
            slots: vec![0],
            measure: MeasureTiming::No,
        });
        b.request
            .write_blocking(&packet::to_bytes(&datums), Duration::ZERO)
            .unwrap();
        let (body, _) = protocol::recv_frame(&b.channel, 1 << 20).unwrap();
        assert!(matches!(
            protocol::decode::<nnaccel_hal::burst::BurstMessage>(&body).unwrap(),
            nnaccel_hal::burst::BurstMessage::GetMemories { .. }
        ));
        // A frame header announcing 4096 body bytes, then one byte every 100 ms: every read
        // gets something long before a per-read timeout, so only a bound on the whole answer
        // ends it.
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(&protocol::FRAME_MAGIC);
        header[4..8].copy_from_slice(&4096u32.to_le_bytes());
        let mut w = &b.channel;
        w.write_all(&header).unwrap();
        let trickle_for = CALLBACK_TIMEOUT * 4;
        let started = Instant::now();
        let mut answered = None;
        while started.elapsed() < trickle_for && answered.is_none() {
            if w.write_all(&[0]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            answered = read_result(&b);
        }
        let result = answered
            .or_else(|| {
                let mut bytes = vec![0u8; 2 * packet::DATUM_SIZE];
                b.result
                    .read_blocking(&mut bytes, scaled(Duration::from_secs(5)))
                    .ok()
                    .map(|()| packet::deserialize_result(&packet::from_bytes(&bytes)).unwrap())
            })
            .expect("a result while the client still trickled");
        assert_eq!(result.status, ErrorStatus::GeneralFailure);
        assert!(
            started.elapsed() < trickle_for,
            "the worker waited for the whole trickle"
        );
        another_client_is_served(&hald);
    });
}

/// A result packet, if one is in the result queue.
fn read_result(b: &RawBurst) -> Option<nnaccel_hal::ExecutionResult> {
    let n = b.result.available_to_read();
    if n == 0 {
        return None;
    }
    let mut bytes = vec![0u8; n * packet::DATUM_SIZE];
    assert!(b.result.read(&mut bytes).unwrap());
    Some(packet::deserialize_result(&packet::from_bytes(&bytes)).unwrap())
}

#[test]
fn sigterm_ends_running_burst_workers_before_the_service_exits() {
    with_timeout(limit(), "SIGTERM with bursts", || {
        let hald = Hald::cpu_only();
        let c = hald.client();
        let pm = prepare(&c, &binary_model(OperationType::Add, 8)).unwrap();
        let bursts: Vec<_> = (0..3)
            .map(|_| {
                pm.configure_execution_burst(BurstConfig::default())
                    .unwrap()
            })
            .collect();
        let raw = raw_burst(&hald);
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(hald.pid() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        poll_until(
            scaled(Duration::from_secs(10)),
            "the service exiting",
            || hald.has_exited(),
        );
        let status = hald.exit_status().unwrap();
        assert!(status.success(), "{status}");
        let log = hald.log();
        assert_eq!(
            log.matches("burst worker ends").count(),
            4,
            "every worker ended before the exit:\n{log}"
        );
        assert!(log.contains("stopped 4 burst workers"), "{log}");
        assert!(closed_by_service(&raw.channel));
        drop(bursts);
    });
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Sends `packet` and answers the worker's getMemories for `slots` with one fd of `pool` each;
/// returns the result.
fn execute_answering(
    b: &RawBurst,
    packet: &[packet::Datum],
    pool: &std::os::fd::OwnedFd,
    size: u64,
) -> nnaccel_hal::ExecutionResult {
    use nnaccel_hal::burst::{BurstMessage, SlotMemory};
    b.request
        .write_blocking(&packet::to_bytes(packet), Duration::ZERO)
        .unwrap();
    b.channel
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    if let Ok((body, _)) = protocol::recv_frame(&b.channel, 1 << 20) {
        let BurstMessage::GetMemories { slots } = protocol::decode(&body).unwrap() else {
            panic!("the worker sent something else than getMemories");
        };
        let mut fds = FdList::default();
        let entries = slots
            .iter()
            .enumerate()
            .map(|(i, _)| {
                fds.push(pool.as_fd());
                SlotMemory::Memory(protocol::WireMemory {
                    kind: 0,
                    prot: 0,
                    offset: 0,
                    size,
                    fd_index: i as u32,
                })
            })
            .collect();
        let answer = protocol::encode(&BurstMessage::Memories { entries }).unwrap();
        protocol::send_frame(&b.channel, &answer, fds.fds()).unwrap();
    }
    b.channel.set_read_timeout(None).unwrap();
    let mut bytes = vec![0u8; 2 * packet::DATUM_SIZE];
    b.result
        .read_blocking(&mut bytes, scaled(Duration::from_secs(10)))
        .unwrap();
    let mut datums = packet::from_bytes(&bytes);
    let size = packet::result_packet_size(&datums[0]).unwrap();
    if size > 2 {
        let mut rest = vec![0u8; (size - 2) * packet::DATUM_SIZE];
        b.result
            .read_blocking(&mut rest, scaled(Duration::from_secs(10)))
            .unwrap();
        datums.extend(packet::from_bytes(&rest));
    }
    packet::deserialize_result(&datums).unwrap()
}

#[test]
fn a_burst_caches_at_most_the_slot_limit_so_a_client_cannot_exhaust_the_service_fds() {
    with_timeout(limit(), "slot flood", || {
        let hald = Hald::cpu_only();
        let b = raw_burst(&hald);
        let size = 4096u64;
        let pool = nnaccel_uapi::sys::memfd_create(c"slots", size).unwrap();
        let before = open_fds(hald.pid());
        let max = nnaccel_hal::burst::server::MAX_SLOTS_PER_BURST;
        let per_packet = protocol::MAX_FDS_PER_FRAME;
        let mut next_slot = 0i32;
        let mut refused = 0;
        while (next_slot as usize) < max + 2 * per_packet {
            let slots: Vec<i32> = (next_slot..next_slot + per_packet as i32).collect();
            next_slot += per_packet as i32;
            // No arguments: the model refuses the request, but only after the slots resolved.
            let p = packet::serialize_request(&BurstRequest {
                inputs: vec![],
                outputs: vec![],
                slots,
                measure: MeasureTiming::No,
            });
            let r = execute_answering(&b, &p, &pool, size);
            if r.status == ErrorStatus::GeneralFailure {
                refused += 1;
            } else {
                assert_eq!(r.status, ErrorStatus::InvalidArgument, "{r:?}");
            }
        }
        let added = open_fds(hald.pid()) - before;
        assert!(
            added <= max + 8,
            "{added} fds held for {next_slot} slots named (limit {max})"
        );
        assert_eq!(refused, 2, "the packets beyond the limit");
        another_client_is_served(&hald);
    });
}

#[test]
fn queues_beyond_the_limit_are_refused_so_one_packet_cannot_take_much_memory() {
    with_timeout(limit(), "huge queues", || {
        let hald = Hald::cpu_only();
        let max = nnaccel_hal::burst::server::MAX_QUEUE_DATUMS;
        match raw_burst_with(&hald, max + 1).map_err(|e| *e) {
            Err(ServiceMessage::Error { status, message }) => {
                assert_eq!(status, ErrorStatus::InvalidArgument.code(), "{message}")
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a burst with queues of {} datums was configured", max + 1),
        }
        assert!(raw_burst_with(&hald, max).is_ok(), "the limit itself");
        another_client_is_served(&hald);
    });
}
