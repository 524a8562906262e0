//! Fuzz targets 3 and 4: service protocol messages, burst packets and FMQs.
//!
//! - Random and mutated frame bodies through `protocol::decode::<ClientMessage>` (and the
//!   client's `decode::<ServiceMessage>`), then the conversions the service applies to what
//!   decodes (`model_from_wire`, `request_from_wire`, `memory_from_wire`, `Fmq::from_fd`) with
//!   as many fds as the frame happens to carry; wire models with random codes and fd indexes.
//! - Mutated valid burst request and result packets through `burst::packet`: a packet that
//!   decodes re-encodes to one that decodes to the same value.
//! - FMQ descriptors and memfds mutated against `Fmq::from_fd`, and counters written by a
//!   "peer" straight into the memfd: a corrupt counter is `FmqError::Corrupt`, never an access
//!   outside the ring, and sane counters move by exactly what was read or written.

use std::os::fd::{AsFd, OwnedFd};

use nnaccel_uapi::fuzz::{self, Rng};

use super::hal::{mutate_model, mutate_request};
use super::*;
use nnaccel_hal::burst::packet::{self, BurstRequest, DATUM_SIZE, Datum};
use nnaccel_hal::driver::{Backend, Driver};
use nnaccel_hal::fmq::{Fmq, FmqDescriptor, FmqError, region_size};
use nnaccel_hal::validate::{validate_model, validate_request};
use nnaccel_protocol::*;

/// Valid client messages built from the seeds, with the fds each frame would carry.
fn seed_messages(seeds: &[Seed], queue: &Fmq) -> Vec<(ClientMessage, usize)> {
    let mut out = vec![
        (
            ClientMessage::Hello {
                version: PROTOCOL_VERSION,
                client: "fuzz".into(),
            },
            0,
        ),
        (ClientMessage::GetCapabilities, 0),
        (ClientMessage::Info, 0),
        (ClientMessage::ReleaseModel { model_id: 1 }, 0),
        (ClientMessage::FreeBuffer { token: 1 }, 0),
        (ClientMessage::CacheList, 0),
        (
            ClientMessage::ConfigureBurst {
                model_id: 1,
                request_fmq: queue.descriptor(),
                result_fmq: queue.descriptor(),
                polling_window_us: Some(50),
            },
            2,
        ),
    ];
    for s in seeds {
        let mut fds = FdList::default();
        let model = model_to_wire(&s.model, &mut fds);
        let n = fds.fds().len();
        out.push((
            ClientMessage::PrepareModel {
                model: model.clone(),
                preference: 1,
                priority: 90,
                timeout_ns: Some(1_000_000_000),
            },
            n,
        ));
        out.push((
            ClientMessage::PrepareModelWithCache {
                model: model.clone(),
                preference: 1,
                priority: 90,
                timeout_ns: None,
                cache: WireCacheFiles {
                    model: vec![vec![n as u32]],
                    data: vec![vec![n as u32 + 1]],
                    token: [7; 32],
                },
            },
            n + 2,
        ));
        out.push((ClientMessage::GetSupportedOperations { model }, n));
        let mut fds = FdList::default();
        let request = request_to_wire(&s.request, &mut fds);
        let memory = match request.pools.first() {
            Some(WirePool::Memory(m)) => m.clone(),
            _ => unreachable!("the seed requests use one memfd pool"),
        };
        out.push((
            ClientMessage::Execute {
                model_id: 1,
                request,
                measure: true,
                timeout_ns: None,
            },
            fds.fds().len(),
        ));
        out.push((ClientMessage::CopyTo { token: 1, memory }, 1));
    }
    out
}

/// `n` fresh memfds, as a received frame would carry them.
fn received(n: usize) -> ReceivedFds {
    ReceivedFds::new(
        (0..n)
            .map(|_| sys::memfd_create(c"fuzz-frame", 4096).unwrap())
            .collect(),
    )
}

/// Applies what the service does to a decoded message; nothing may panic, and what converts
/// claims only fds the frame had.
fn convert(rng: &mut Rng, msg: ClientMessage, n_fds: usize, seeds: &[Seed], driver: &Driver) {
    let n = if rng.chance(3, 4) {
        n_fds
    } else {
        rng.below(4)
    };
    let mut fds = received(n);
    match msg {
        ClientMessage::PrepareModel { model, .. }
        | ClientMessage::GetSupportedOperations { model }
        | ClientMessage::PrepareModelWithCache { model, .. } => {
            let pools = model.pools.len();
            if let Ok(m) = model_from_wire(model, &mut fds) {
                assert_eq!(m.pools.len(), pools);
                assert!(pools <= n, "{pools} pools from {n} fds");
                if validate_model(&m).is_ok() && m.pools.len() <= 1 {
                    let _ = driver.get_supported_operations(&m);
                }
            }
        }
        ClientMessage::Execute { request, .. } => {
            if let Ok(r) = request_from_wire(request, &mut fds) {
                for s in seeds {
                    let _ = validate_request(&r, &s.model);
                }
            }
        }
        ClientMessage::CopyTo { memory, .. } | ClientMessage::CopyFrom { memory, .. } => {
            if let Ok(m) = memory_from_wire(
                &memory,
                &mut fds,
                "the pool",
                nnaccel_hal::pool_fd::PoolRole::Read,
            ) {
                assert!((memory.fd_index as usize) < n);
                assert_eq!(m.size, memory.size);
            }
        }
        ClientMessage::ConfigureBurst { request_fmq, .. } => {
            if let Ok(fd) = fds.take_fd(0) {
                check_received_queue(fd, request_fmq);
            }
        }
        _ => {}
    }
}

#[test]
fn random_and_mutated_frame_bodies_decode_or_fail_and_convert_without_panic() {
    let seeds = seeds();
    let queue = Fmq::create(DATUM_SIZE as u32, 16).unwrap();
    let messages = seed_messages(&seeds, &queue);
    let encoded: Vec<Vec<u8>> = messages.iter().map(|(m, _)| encode(m).unwrap()).collect();
    for ((m, _), bytes) in messages.iter().zip(&encoded) {
        // The seeds themselves decode (else the mutations start from nothing).
        assert!(decode::<ClientMessage>(bytes).is_ok_and(|d| d == *m) || has_nan(m));
    }
    let driver = Driver::new(Backend::CpuOnly);
    let (mut decoded, mut refused) = (0usize, 0usize);
    fuzz::run("protocol", 6000, |rng| {
        let i = rng.below(messages.len());
        let body = if rng.chance(1, 8) {
            let n = rng.below(64);
            rng.bytes(n)
        } else {
            let mut b = encoded[i].clone();
            fuzz::mutate(rng, &mut b);
            b
        };
        let _ = decode::<ServiceMessage>(&body);
        match decode::<ClientMessage>(&body) {
            Ok(msg) => {
                decoded += 1;
                convert(rng, msg, messages[i].1, &seeds, &driver);
            }
            Err(e) => {
                refused += 1;
                assert!(matches!(e, ProtocolError::BadMessage(_)), "{e}");
            }
        }
    });
    println!("frames: {decoded} decoded, {refused} refused");
    assert!(decoded > 0 && refused > 0 || fuzz::cases(6000) < 100);
}

fn has_nan(m: &ClientMessage) -> bool {
    format!("{m:?}").contains("NaN")
}

#[test]
fn wire_models_with_random_codes_and_fd_indexes_convert_or_fail() {
    let seeds = seeds();
    fuzz::run("wire-model", 3000, |rng| {
        let s = rng.pick(&seeds);
        let mut model = s.model.clone();
        if rng.chance(1, 2) {
            mutate_model(rng, &mut model);
        }
        let mut request = s.request.clone();
        if rng.chance(1, 2) {
            mutate_request(rng, &mut request);
        }
        let mut list = FdList::default();
        let mut w = model_to_wire(&model, &mut list);
        let mut wr = request_to_wire(&request, &mut list);
        let n = list.fds().len();
        // One integer field of the wire form replaced: codes, kinds, fd indexes.
        match rng.below(6) {
            0 if !w.operands.is_empty() => {
                let i = rng.below(w.operands.len());
                w.operands[i].operand_type = rng.edgy_u32() as i32;
            }
            1 if !w.operands.is_empty() => {
                let i = rng.below(w.operands.len());
                w.operands[i].lifetime = rng.edgy_u32() as i32;
            }
            2 if !w.operations.is_empty() => {
                let i = rng.below(w.operations.len());
                w.operations[i].operation_type = rng.edgy_u32() as i32;
            }
            3 => w.pools.push(WireMemory {
                kind: rng.below(6) as u8,
                prot: rng.edgy_u32() as i32,
                offset: rng.edgy_u64(),
                size: rng.edgy_u64(),
                fd_index: small_or_edgy(rng),
            }),
            4 => {
                for p in wr.pools.iter_mut() {
                    if let WirePool::Memory(m) = p {
                        m.fd_index = small_or_edgy(rng);
                        m.kind = rng.below(5) as u8;
                    }
                }
            }
            _ => {}
        }
        let mut fds = received(if rng.chance(3, 4) {
            n
        } else {
            rng.below(n + 2)
        });
        let model_pools = w.pools.len();
        if let Ok(m) = model_from_wire(w, &mut fds) {
            assert_eq!(m.pools.len(), model_pools);
            let _ = validate_model(&m);
            if let Ok(r) = request_from_wire(wr, &mut fds) {
                let _ = validate_request(&r, &m);
            }
        }
    });
}

/// Maps a received queue (a real memfd `fd`) under `desc`, as the burst server does.
fn check_received_queue(fd: OwnedFd, desc: FmqDescriptor) {
    let size = sys::file_size(fd.as_fd()).unwrap();
    match Fmq::from_fd(fd, desc, DATUM_SIZE as u32) {
        Ok(q) => {
            assert_eq!(q.datum_size(), DATUM_SIZE);
            assert_eq!(
                region_size(desc.datum_size, desc.capacity),
                Some(desc.region_size)
            );
            assert!(desc.region_size <= size, "mapped past the memfd's end");
            assert_eq!(q.available_to_read(), 0);
        }
        Err(e) => assert!(matches!(e, FmqError::BadDescriptor(_)), "{e}"),
    }
}

fn mutate_descriptor(rng: &mut Rng, d: &mut FmqDescriptor) {
    match rng.below(4) {
        0 => d.datum_size = small_or_edgy(rng),
        1 => d.capacity = small_or_edgy(rng),
        2 => d.region_size = rng.edgy_u64(),
        _ => {
            // Consistent arithmetic for another capacity: only the memfd's size can refuse it.
            d.capacity = 1 + rng.below(1 << 12) as u32;
            d.region_size = region_size(d.datum_size, d.capacity).unwrap_or(0);
        }
    }
}

#[test]
fn mutated_fmq_descriptors_and_memfds_are_refused_or_mapped_within_bounds() {
    fuzz::run("fmq-descriptor", 2000, |rng| {
        let q = Fmq::create(DATUM_SIZE as u32, 1 + rng.below(64) as u32).unwrap();
        let mut desc = q.descriptor();
        mutate_descriptor(rng, &mut desc);
        let fd = if rng.chance(1, 4) {
            // A memfd of its own size, unsealed: it may be too small for what desc says.
            let size = *rng.pick(&[0u64, 16, 4096, 8192, 1 << 20]);
            sys::memfd_create(c"fuzz-fmq", size).unwrap()
        } else {
            q.fd().try_clone_to_owned().unwrap()
        };
        check_received_queue(fd, desc);
    });
}

fn counter(q: &Fmq, at: u64) -> u64 {
    let mut b = [0u8; 8];
    rustix::io::pread(q.fd(), &mut b, at).unwrap();
    u64::from_le_bytes(b)
}

#[test]
fn corrupt_fmq_counters_are_errors_and_sane_ones_move_exactly() {
    let (mut corrupt, mut moved) = (0usize, 0usize);
    fuzz::run("fmq-counters", 4000, |rng| {
        let capacity = 1 + rng.below(16) as u32;
        let datum = *rng.pick(&[1u32, 4, DATUM_SIZE as u32]);
        let ours = Fmq::create(datum, capacity).unwrap();
        let theirs = Fmq::from_fd(
            ours.fd().try_clone_to_owned().unwrap(),
            ours.descriptor(),
            datum,
        )
        .unwrap();
        let ring = u64::from(datum) * u64::from(capacity);
        // The peer writes the counters: near-valid, wrapped around, or anything.
        let read = match rng.below(3) {
            0 => rng.edgy_u64(),
            1 => u64::MAX - rng.below(64) as u64,
            _ => rng.below(1000) as u64,
        };
        let write = match rng.below(3) {
            0 => rng.edgy_u64(),
            1 => read.wrapping_add(rng.below(ring as usize + 1) as u64),
            _ => read.wrapping_add(rng.below(2 * ring as usize + 2) as u64),
        };
        rustix::io::pwrite(ours.fd(), &read.to_le_bytes(), 0).unwrap();
        rustix::io::pwrite(ours.fd(), &write.to_le_bytes(), 8).unwrap();
        let filled = write.wrapping_sub(read);
        let n = 1 + rng.below(capacity as usize);
        let mut buf = vec![0u8; n * datum as usize];
        let sane = filled <= ring;
        let (r, w) = (theirs.read(&mut buf), theirs.write(&buf));
        if !sane {
            corrupt += 1;
            assert!(matches!(r, Err(FmqError::Corrupt { .. })), "{r:?}");
            assert!(matches!(w, Err(FmqError::Corrupt { .. })), "{w:?}");
            assert!(matches!(
                theirs.discard_all(),
                Err(FmqError::Corrupt { .. })
            ));
            assert_eq!(theirs.available_to_read(), 0);
            assert_eq!(theirs.available_to_write(), 0);
            assert_eq!((counter(&ours, 0), counter(&ours, 8)), (read, write));
            return;
        }
        moved += 1;
        let len = buf.len() as u64;
        let read_ok = r.unwrap();
        assert_eq!(read_ok, filled >= len, "filled {filled}, read {len}");
        let after_read = filled - if read_ok { len } else { 0 };
        let write_ok = w.unwrap();
        assert_eq!(write_ok, ring - after_read >= len);
        let expect_read = read.wrapping_add(if read_ok { len } else { 0 });
        let expect_write = write.wrapping_add(if write_ok { len } else { 0 });
        assert_eq!(
            (counter(&ours, 0), counter(&ours, 8)),
            (expect_read, expect_write)
        );
        theirs.discard_all().unwrap();
        assert_eq!(theirs.available_to_read(), 0);
    });
    println!("fmq counters: {corrupt} corrupt, {moved} sane");
    assert!(corrupt > 0 && moved > 0 || fuzz::cases(4000) < 100);
}

/// Whether `datums` decode; if they do, their re-encoding has as many datums and decodes to
/// the same value.
fn reencodes<T: PartialEq + std::fmt::Debug>(
    datums: &[Datum],
    decode: fn(&[Datum]) -> Result<T, packet::PacketError>,
    encode: fn(&T) -> Vec<Datum>,
) -> bool {
    let Ok(value) = decode(datums) else {
        return false;
    };
    let again = encode(&value);
    assert_eq!(again.len(), datums.len());
    assert_eq!(decode(&again), Ok(value));
    true
}

fn request_packet(rng: &mut Rng, seeds: &[Seed]) -> Vec<u8> {
    let s = rng.pick(seeds);
    let mut request = s.request.clone();
    if rng.chance(1, 2) {
        mutate_request(rng, &mut request);
    }
    let r = BurstRequest {
        inputs: request.inputs,
        outputs: request.outputs,
        slots: (0..request.pools.len()).map(|i| i as i32).collect(),
        measure: *rng.pick(&[MeasureTiming::No, MeasureTiming::Yes]),
    };
    packet::to_bytes(&packet::serialize_request(&r))
}

#[test]
fn mutated_burst_packets_decode_to_what_they_reencode_or_are_refused() {
    let seeds = seeds();
    let (mut ok, mut refused) = (0usize, 0usize);
    fuzz::run("burst-packet", 6000, |rng| {
        let result_packet = rng.chance(1, 3);
        let mut bytes = if result_packet {
            let shapes = (0..rng.below(4))
                .map(|_| OutputShape {
                    dimensions: (0..rng.below(5)).map(|_| small_or_edgy(rng)).collect(),
                    is_sufficient: rng.chance(1, 2),
                })
                .collect();
            packet::to_bytes(&packet::serialize_result(&ExecutionResult {
                status: *rng.pick(ErrorStatus::ALL),
                output_shapes: shapes,
                timing: Timing {
                    time_on_device_us: rng.edgy_u64(),
                    time_in_driver_us: rng.edgy_u64(),
                },
            }))
        } else {
            request_packet(rng, &seeds)
        };
        // Whole datums are what the queue carries: mutate, then drop a partial tail.
        fuzz::mutate(rng, &mut bytes);
        let datums = packet::from_bytes(&bytes);
        if let Some(first) = datums.first() {
            if let Ok(size) = packet::request_packet_size(first) {
                assert!(size >= 2);
            }
        }
        let decoded = if result_packet {
            reencodes(
                &datums,
                packet::deserialize_result,
                packet::serialize_result,
            )
        } else {
            reencodes(
                &datums,
                packet::deserialize_request,
                packet::serialize_request,
            )
        };
        if decoded {
            ok += 1;
        } else {
            refused += 1;
        }
    });
    println!("burst packets: {ok} decoded, {refused} refused");
    assert!(ok > 0 && refused > 0 || fuzz::cases(6000) < 100);
}
