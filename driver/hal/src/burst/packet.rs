//! The burst's packets in the HAL's datum layouts (1.2 `FmqRequestDatum`, `FmqResultDatum`;
//! REFERENCE.md §5), 24 bytes each, and their strict, bounds-checked decoding. Decoding never
//! trusts a count: every index is checked against the datums actually received, every tag
//! against the position it appears in, and the packet must end exactly where its size says.

use super::BurstError;
use crate::types::*;

/// Bytes per datum, request and result alike.
pub const DATUM_SIZE: usize = 24;
/// One datum.
pub type Datum = [u8; DATUM_SIZE];

/// FmqRequestDatum tags.
mod req {
    pub const PACKET_INFORMATION: u8 = 0;
    pub const INPUT_OPERAND_INFORMATION: u8 = 1;
    pub const INPUT_OPERAND_DIMENSION_VALUE: u8 = 2;
    pub const OUTPUT_OPERAND_INFORMATION: u8 = 3;
    pub const OUTPUT_OPERAND_DIMENSION_VALUE: u8 = 4;
    pub const POOL_IDENTIFIER: u8 = 5;
    pub const MEASURE_TIMING: u8 = 6;
}

/// FmqResultDatum tags.
mod res {
    pub const PACKET_INFORMATION: u8 = 0;
    pub const OPERAND_INFORMATION: u8 = 1;
    pub const OPERAND_DIMENSION_VALUE: u8 = 2;
    pub const EXECUTION_TIMING: u8 = 3;
}

/// Why a packet was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Empty, or fewer datums than the packet's size.
    #[error("truncated packet: {0}")]
    Truncated(String),
    /// A tag, value or count that breaks the layout.
    #[error("malformed packet: {0}")]
    Malformed(String),
}

/// A burst request as it travels: arguments, pool slots and measureTiming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstRequest {
    /// Inputs.
    pub inputs: Vec<RequestArgument>,
    /// Outputs.
    pub outputs: Vec<RequestArgument>,
    /// One memory slot per pool.
    pub slots: Vec<i32>,
    /// measureTiming.
    pub measure: MeasureTiming,
}

fn u32_at(d: &Datum, at: usize) -> u32 {
    u32::from_le_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

fn put_u32(d: &mut Datum, at: usize, v: u32) {
    d[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn datum(tag: u8) -> Datum {
    let mut d = [0u8; DATUM_SIZE];
    d[0] = tag;
    d
}

/// Serialises a request: packet information; each input (information, dimensions); each
/// output likewise; one pool identifier per pool; measureTiming.
pub fn serialize_request(r: &BurstRequest) -> Vec<Datum> {
    let dims: usize = r
        .inputs
        .iter()
        .chain(&r.outputs)
        .map(|a| a.dimensions.len())
        .sum();
    let size = 2 + r.inputs.len() + r.outputs.len() + r.slots.len() + dims;
    let mut out = Vec::with_capacity(size);
    let mut info = datum(req::PACKET_INFORMATION);
    put_u32(&mut info, 4, size as u32);
    put_u32(&mut info, 8, r.inputs.len() as u32);
    put_u32(&mut info, 12, r.outputs.len() as u32);
    put_u32(&mut info, 16, r.slots.len() as u32);
    out.push(info);
    let mut args = |list: &[RequestArgument], info_tag: u8, dim_tag: u8| {
        for a in list {
            let mut d = datum(info_tag);
            d[4] = u8::from(a.has_no_value);
            put_u32(&mut d, 8, a.location.pool_index);
            put_u32(&mut d, 12, a.location.offset);
            put_u32(&mut d, 16, a.location.length);
            put_u32(&mut d, 20, a.dimensions.len() as u32);
            out.push(d);
            for &v in &a.dimensions {
                let mut d = datum(dim_tag);
                put_u32(&mut d, 4, v);
                out.push(d);
            }
        }
    };
    args(
        &r.inputs,
        req::INPUT_OPERAND_INFORMATION,
        req::INPUT_OPERAND_DIMENSION_VALUE,
    );
    args(
        &r.outputs,
        req::OUTPUT_OPERAND_INFORMATION,
        req::OUTPUT_OPERAND_DIMENSION_VALUE,
    );
    for &s in &r.slots {
        let mut d = datum(req::POOL_IDENTIFIER);
        d[4..8].copy_from_slice(&s.to_le_bytes());
        out.push(d);
    }
    let mut d = datum(req::MEASURE_TIMING);
    d[4..8].copy_from_slice(&r.measure.code().to_le_bytes());
    out.push(d);
    out
}

/// The packet size a request packet's first datum announces, if it is packet information.
pub fn request_packet_size(first: &Datum) -> Result<usize, PacketError> {
    if first[0] != req::PACKET_INFORMATION {
        return Err(PacketError::Malformed(format!(
            "packet starts with tag {} instead of packetInformation",
            first[0]
        )));
    }
    let size = u32_at(first, 4) as usize;
    if size < 2 {
        return Err(PacketError::Malformed(format!("packet size {size}")));
    }
    Ok(size)
}

/// A cursor over received datums; every step is bounds-checked.
struct Cursor<'a> {
    datums: &'a [Datum],
    next: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, tag: u8, what: &str) -> Result<&'a Datum, PacketError> {
        let d = self.datums.get(self.next).ok_or_else(|| {
            PacketError::Truncated(format!("{what} expected at datum {}", self.next))
        })?;
        if d[0] != tag {
            return Err(PacketError::Malformed(format!(
                "datum {} has tag {} where {what} (tag {tag}) belongs",
                self.next, d[0]
            )));
        }
        self.next += 1;
        Ok(d)
    }
}

fn bool_at(d: &Datum, at: usize) -> Result<bool, PacketError> {
    match d[at] {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(PacketError::Malformed(format!("bool byte {v}"))),
    }
}

/// Decodes a whole request packet: `datums` must be exactly the packet.
pub fn deserialize_request(datums: &[Datum]) -> Result<BurstRequest, PacketError> {
    let first = datums
        .first()
        .ok_or_else(|| PacketError::Truncated("no datum".into()))?;
    let size = request_packet_size(first)?;
    if size != datums.len() {
        return Err(PacketError::Truncated(format!(
            "packet size {size}, {} datums",
            datums.len()
        )));
    }
    let (n_in, n_out, n_pools) = (
        u32_at(first, 8) as usize,
        u32_at(first, 12) as usize,
        u32_at(first, 16) as usize,
    );
    // Each counted element needs at least one datum: refuse before allocating anything.
    let fixed = n_in
        .checked_add(n_out)
        .and_then(|n| n.checked_add(n_pools))
        .and_then(|n| n.checked_add(2));
    if fixed.is_none_or(|f| f > size) {
        return Err(PacketError::Malformed(format!(
            "{n_in} inputs, {n_out} outputs and {n_pools} pools do not fit {size} datums"
        )));
    }
    let mut c = Cursor { datums, next: 1 };
    let mut args = |n: usize, info_tag: u8, dim_tag: u8| {
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            let d = c.take(info_tag, "operand information")?;
            let has_no_value = bool_at(d, 4)?;
            let location = DataLocation {
                pool_index: u32_at(d, 8),
                offset: u32_at(d, 12),
                length: u32_at(d, 16),
                padding: 0,
            };
            let rank = u32_at(d, 20) as usize;
            if rank > datums.len() - c.next {
                return Err(PacketError::Malformed(format!(
                    "{rank} dimensions at datum {} overrun the packet",
                    c.next
                )));
            }
            let mut dimensions = Vec::with_capacity(rank);
            for _ in 0..rank {
                dimensions.push(u32_at(c.take(dim_tag, "dimension value")?, 4));
            }
            list.push(RequestArgument {
                has_no_value,
                location,
                dimensions,
            });
        }
        Ok(list)
    };
    let inputs = args(
        n_in,
        req::INPUT_OPERAND_INFORMATION,
        req::INPUT_OPERAND_DIMENSION_VALUE,
    )?;
    let outputs = args(
        n_out,
        req::OUTPUT_OPERAND_INFORMATION,
        req::OUTPUT_OPERAND_DIMENSION_VALUE,
    )?;
    let mut slots = Vec::with_capacity(n_pools);
    for _ in 0..n_pools {
        let d = c.take(req::POOL_IDENTIFIER, "pool identifier")?;
        slots.push(u32_at(d, 4) as i32);
    }
    let d = c.take(req::MEASURE_TIMING, "measureTiming")?;
    let measure = MeasureTiming::from_code(u32_at(d, 4) as i32)
        .ok_or_else(|| PacketError::Malformed(format!("measureTiming {}", u32_at(d, 4))))?;
    if c.next != datums.len() {
        return Err(PacketError::Malformed(format!(
            "{} datums left after measureTiming",
            datums.len() - c.next
        )));
    }
    Ok(BurstRequest {
        inputs,
        outputs,
        slots,
        measure,
    })
}

/// Serialises a result: packet information; each output shape (information, dimensions);
/// timing. A failure has no shapes: two datums.
pub fn serialize_result(r: &ExecutionResult) -> Vec<Datum> {
    let dims: usize = r.output_shapes.iter().map(|s| s.dimensions.len()).sum();
    let size = 2 + r.output_shapes.len() + dims;
    let mut out = Vec::with_capacity(size);
    let mut info = datum(res::PACKET_INFORMATION);
    put_u32(&mut info, 8, size as u32);
    info[12..16].copy_from_slice(&r.status.code().to_le_bytes());
    put_u32(&mut info, 16, r.output_shapes.len() as u32);
    out.push(info);
    for s in &r.output_shapes {
        let mut d = datum(res::OPERAND_INFORMATION);
        d[8] = u8::from(s.is_sufficient);
        put_u32(&mut d, 12, s.dimensions.len() as u32);
        out.push(d);
        for &v in &s.dimensions {
            let mut d = datum(res::OPERAND_DIMENSION_VALUE);
            put_u32(&mut d, 8, v);
            out.push(d);
        }
    }
    let mut d = datum(res::EXECUTION_TIMING);
    d[8..16].copy_from_slice(&r.timing.time_on_device_us.to_le_bytes());
    d[16..24].copy_from_slice(&r.timing.time_in_driver_us.to_le_bytes());
    out.push(d);
    out
}

/// The packet size a result packet's first datum announces.
pub fn result_packet_size(first: &Datum) -> Result<usize, PacketError> {
    if first[0] != res::PACKET_INFORMATION {
        return Err(PacketError::Malformed(format!(
            "result starts with tag {}",
            first[0]
        )));
    }
    let size = u32_at(first, 8) as usize;
    if size < 2 {
        return Err(PacketError::Malformed(format!("result size {size}")));
    }
    Ok(size)
}

/// Decodes a whole result packet.
pub fn deserialize_result(datums: &[Datum]) -> Result<ExecutionResult, PacketError> {
    let first = datums
        .first()
        .ok_or_else(|| PacketError::Truncated("no datum".into()))?;
    let size = result_packet_size(first)?;
    if size != datums.len() {
        return Err(PacketError::Truncated(format!(
            "result size {size}, {} datums",
            datums.len()
        )));
    }
    let status = ErrorStatus::from_code(u32_at(first, 12) as i32)
        .ok_or_else(|| PacketError::Malformed(format!("status {}", u32_at(first, 12))))?;
    let n = u32_at(first, 16) as usize;
    if n > size - 2 {
        return Err(PacketError::Malformed(format!(
            "{n} operands in {size} datums"
        )));
    }
    let mut c = Cursor { datums, next: 1 };
    let mut output_shapes = Vec::with_capacity(n);
    for _ in 0..n {
        let d = c.take(res::OPERAND_INFORMATION, "operand information")?;
        let is_sufficient = bool_at(d, 8)?;
        let rank = u32_at(d, 12) as usize;
        if rank > datums.len() - c.next {
            return Err(PacketError::Malformed(format!("{rank} dimensions overrun")));
        }
        let mut dimensions = Vec::with_capacity(rank);
        for _ in 0..rank {
            dimensions.push(u32_at(
                c.take(res::OPERAND_DIMENSION_VALUE, "dimension value")?,
                8,
            ));
        }
        output_shapes.push(OutputShape {
            dimensions,
            is_sufficient,
        });
    }
    let d = c.take(res::EXECUTION_TIMING, "executionTiming")?;
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let timing = Timing {
        time_on_device_us: u64_at(8),
        time_in_driver_us: u64_at(16),
    };
    if c.next != datums.len() {
        return Err(PacketError::Malformed(
            "datums after executionTiming".into(),
        ));
    }
    Ok(ExecutionResult {
        status,
        output_shapes,
        timing,
    })
}

/// Flattens datums into the bytes the queue carries.
pub fn to_bytes(datums: &[Datum]) -> Vec<u8> {
    datums.concat()
}

/// Reads one packet from `queue`: its first datum, the size `packet_size` reads from it (at most
/// the queue's capacity), then the rest, straight into the datums. The writer commits a whole
/// packet at once, so the rest is there or never will be. Errors say what was wrong.
pub(crate) fn read_packet(
    queue: &crate::fmq::Fmq,
    packet_size: fn(&Datum) -> Result<usize, PacketError>,
) -> Result<Vec<Datum>, BurstError> {
    let mut first = [0u8; DATUM_SIZE];
    if !queue.read(&mut first)? {
        return Err(BurstError::NoDatum);
    }
    let size = packet_size(&first)?;
    if size == 0 || size > queue.capacity() {
        return Err(BurstError::TooLarge {
            size,
            capacity: queue.capacity(),
        });
    }
    let mut datums = vec![[0u8; DATUM_SIZE]; size];
    datums[0] = first;
    if !queue.read(datums[1..].as_flattened_mut())? {
        return Err(BurstError::Truncated(size));
    }
    Ok(datums)
}

/// Splits queue bytes into datums (a trailing partial datum is dropped; queues carry whole
/// datums only).
pub fn from_bytes(bytes: &[u8]) -> Vec<Datum> {
    bytes
        .chunks_exact(DATUM_SIZE)
        .map(|c| {
            let mut d = [0u8; DATUM_SIZE];
            d.copy_from_slice(c);
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(pool: u32, offset: u32, length: u32, dims: &[u32]) -> RequestArgument {
        RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: pool,
                offset,
                length,
                padding: 0,
            },
            dimensions: dims.to_vec(),
        }
    }

    fn sample() -> BurstRequest {
        BurstRequest {
            inputs: vec![arg(0, 0, 16, &[4]), arg(1, 64, 16, &[2, 2])],
            outputs: vec![arg(2, 0, 16, &[])],
            slots: vec![3, 0, 7],
            measure: MeasureTiming::Yes,
        }
    }

    #[test]
    fn requests_use_the_hal_layout_and_round_trip() {
        let r = sample();
        let p = serialize_request(&r);
        // 2 + 3 arguments + 3 pools + 3 dimension values.
        assert_eq!(p.len(), 11);
        assert_eq!(
            &p[0][..20],
            &[0, 0, 0, 0, 11, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0]
        );
        // inputOperandInformation: hasNoValue @4, location @8, rank @20.
        assert_eq!(p[1][0], 1);
        assert_eq!(
            &p[1][8..24],
            &[0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!((p[2][0], p[2][4]), (2, 4));
        assert_eq!(p[6][0], 3);
        assert_eq!((p[7][0], p[7][4]), (5, 3));
        assert_eq!((p[10][0], p[10][4]), (6, 1));
        assert_eq!(deserialize_request(&p).unwrap(), r);
    }

    #[test]
    fn results_use_the_hal_layout_and_round_trip() {
        let r = ExecutionResult {
            status: ErrorStatus::OutputInsufficientSize,
            output_shapes: vec![OutputShape {
                dimensions: vec![2, 3],
                is_sufficient: false,
            }],
            timing: Timing {
                time_on_device_us: 5,
                time_in_driver_us: 9,
            },
        };
        let p = serialize_result(&r);
        assert_eq!(p.len(), 5);
        assert_eq!(&p[0][8..20], &[5, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&p[1][8..16], &[0, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!((p[4][0], p[4][8], p[4][16]), (3, 5, 9));
        let back = deserialize_result(&p).unwrap();
        assert_eq!(back.status, r.status);
        assert_eq!(back.output_shapes, r.output_shapes);
        assert_eq!(back.timing, r.timing);
        let f = serialize_result(&ExecutionResult::failure(ErrorStatus::GeneralFailure));
        assert_eq!(f.len(), 2);
    }

    /// AOSP ExecutionBurstServer.cpp: a result that does not fit becomes
    /// `serialize(GENERAL_FAILURE, {}, kNoTiming)`, whose count is 2 + shapes + dimensions.
    #[test]
    fn the_overflow_failure_is_two_datums_as_aosp_serialize_gives() {
        let f = serialize_result(&ExecutionResult::failure(ErrorStatus::GeneralFailure));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0][0], res::PACKET_INFORMATION);
        assert_eq!(u32_at(&f[0], 8), 2, "packetSize");
        assert_eq!(u32_at(&f[0], 12) as i32, ErrorStatus::GeneralFailure.code());
        assert_eq!(u32_at(&f[0], 16), 0, "numberOfOperands");
        assert_eq!(f[1][0], res::EXECUTION_TIMING);
        assert_eq!(&f[1][8..24], &[0xff; 16], "kNoTiming");
        let back = deserialize_result(&f).unwrap();
        assert_eq!(back.timing, Timing::NOT_MEASURED);
    }

    #[test]
    fn every_truncation_of_a_request_is_refused() {
        let p = serialize_request(&sample());
        for n in 0..p.len() {
            assert!(deserialize_request(&p[..n]).is_err(), "{n} datums");
        }
        let mut longer = p.clone();
        longer.push(datum(6));
        assert!(deserialize_request(&longer).is_err());
    }

    #[test]
    fn lying_counts_tags_and_values_are_refused() {
        let p = serialize_request(&sample());
        let with = |i: usize, at: usize, v: u32| {
            let mut q = p.clone();
            put_u32(&mut q[i], at, v);
            deserialize_request(&q)
        };
        assert!(with(0, 8, u32::MAX).is_err(), "inputs");
        assert!(with(0, 16, u32::MAX - 1).is_err(), "pools overflow");
        assert!(with(0, 4, 1).is_err(), "size");
        assert!(with(1, 20, u32::MAX).is_err(), "rank");
        assert!(with(1, 20, 0).is_err(), "rank too small");
        assert!(with(10, 4, 2).is_err(), "measureTiming");
        let mut q = p.clone();
        q[1][4] = 2;
        assert!(deserialize_request(&q).is_err(), "bool");
        for i in 0..p.len() {
            for tag in [0u8, 1, 2, 3, 4, 5, 6, 7, 200] {
                if tag == p[i][0] {
                    continue;
                }
                let mut q = p.clone();
                q[i][0] = tag;
                assert!(deserialize_request(&q).is_err(), "datum {i} tag {tag}");
            }
        }
    }

    #[test]
    fn random_bytes_never_panic_the_decoders() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let n = (next() % 12) as usize;
            let mut p: Vec<Datum> = (0..n)
                .map(|_| {
                    let mut d = [0u8; DATUM_SIZE];
                    for b in d.iter_mut() {
                        *b = next() as u8;
                    }
                    d[0] %= 8;
                    d
                })
                .collect();
            if let Some(f) = p.first_mut() {
                if next() % 2 == 0 {
                    put_u32(f, 4, n as u32);
                    put_u32(f, 8, (next() % 4) as u32);
                    put_u32(f, 12, (next() % 4) as u32);
                    put_u32(f, 16, (next() % 4) as u32);
                }
            }
            let _ = deserialize_request(&p);
            let _ = deserialize_result(&p);
        }
    }
}
