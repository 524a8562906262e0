//! The program format: a versioned, little-endian binary encoding of a compiled graph that the
//! device executes. The device decodes it with [`Program::decode`], which checks every count,
//! offset and index without trusting any of them, and then validates the graph's semantics
//! (operation signatures, shapes) before it accepts the program.
//!
//! ```text
//! ProgramHeader                         48 bytes
//! OperandRecord   × num_operands        80 bytes each
//! OperationRecord × num_operations      16 bytes each
//! u32 operand indexes of all operations × index_words   (each operation's inputs, then outputs)
//! u32 program inputs  × num_inputs      (operand indexes; job bindings 0..num_inputs)
//! u32 program outputs × num_outputs     (operand indexes; the bindings after the inputs)
//! u32 BO handles      × num_bo_refs     (the file's BOs that constant operands live in)
//! zero padding to a multiple of 8
//! constant bytes  × const_bytes         (CONSTANT_COPY data, per-channel scales)
//! ```
//! A program's size is exactly the sum of these; trailing bytes are an error.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// "NNAP" little-endian.
pub const PROGRAM_MAGIC: u32 = u32::from_le_bytes(*b"NNAP");
/// Version of the format described here.
pub const PROGRAM_VERSION: u32 = 1;
/// Program flag: float32 arithmetic may run at float16 range and precision.
pub const PROGRAM_FLAG_RELAX_F32_TO_F16: u32 = 1 << 0;
/// All program flags.
pub const PROGRAM_FLAGS_MASK: u32 = PROGRAM_FLAG_RELAX_F32_TO_F16;
/// Highest tensor rank in a program.
pub const MAX_RANK: usize = 6;
/// Most operands in a program.
pub const MAX_OPERANDS: u32 = 1 << 16;
/// Most operations in a program.
pub const MAX_OPERATIONS: u32 = 1 << 16;
/// Most operand references per operation.
pub const MAX_OPERATION_ARGS: u32 = 64;

/// Operand lifetime codes.
pub const LIFETIME_TEMPORARY: u32 = 0;
/// A program input (bound by the job).
pub const LIFETIME_INPUT: u32 = 1;
/// A program output (bound by the job).
pub const LIFETIME_OUTPUT: u32 = 2;
/// Constant bytes in the program's constant section.
pub const LIFETIME_CONSTANT: u32 = 3;
/// Constant bytes in a BO named by the program's BO table.
pub const LIFETIME_BO_REF: u32 = 4;
/// An omitted optional argument.
pub const LIFETIME_NO_VALUE: u32 = 5;

/// Program header.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ProgramHeader {
    /// [`PROGRAM_MAGIC`].
    pub magic: u32,
    /// [`PROGRAM_VERSION`].
    pub version: u32,
    /// Operand records that follow.
    pub num_operands: u32,
    /// Operation records that follow.
    pub num_operations: u32,
    /// Program inputs.
    pub num_inputs: u32,
    /// Program outputs.
    pub num_outputs: u32,
    /// BO table entries.
    pub num_bo_refs: u32,
    /// `PROGRAM_FLAG_*`.
    pub flags: u32,
    /// Length of the operation index table, in u32 words.
    pub index_words: u32,
    /// Must be zero.
    pub pad: u32,
    /// Length of the constant section.
    pub const_bytes: u64,
}

/// One operand.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct OperandRecord {
    /// NN HAL OperandType code.
    pub operand_type: i32,
    /// Number of valid `dims` (0 for scalars).
    pub rank: u32,
    /// Extents; entries past `rank` must be zero.
    pub dims: [u32; MAX_RANK],
    /// Quantization scale.
    pub scale: f32,
    /// Quantization zero point.
    pub zero_point: i32,
    /// `LIFETIME_*`.
    pub lifetime: u32,
    /// BO table slot for `LIFETIME_BO_REF`, else zero.
    pub location: u32,
    /// Byte offset (constant section or BO) for constants, else zero.
    pub offset: u64,
    /// Byte length for constants, else zero.
    pub length: u64,
    /// Channel dimension for per-channel quantization.
    pub channel_dim: u32,
    /// Number of per-channel scales (0 = none).
    pub num_channel_scales: u32,
    /// Offset of the scales (f32 each) in the constant section.
    pub channel_scales_offset: u64,
}

/// One operation; its operand indexes are `index_words[first_index..][..num_inputs + num_outputs]`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OperationRecord {
    /// NN HAL OperationType code.
    pub operation_type: i32,
    /// Input operand count.
    pub num_inputs: u32,
    /// Output operand count.
    pub num_outputs: u32,
    /// Start of this operation's indexes in the index table.
    pub first_index: u32,
}

const _: () = assert!(size_of::<ProgramHeader>() == 48);
const _: () = assert!(size_of::<OperandRecord>() == 80);
const _: () = assert!(std::mem::offset_of!(OperandRecord, lifetime) == 40);
const _: () = assert!(std::mem::offset_of!(OperandRecord, channel_scales_offset) == 72);
const _: () = assert!(size_of::<OperationRecord>() == 16);

/// Where an operand's value lives.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// Computed inside the program.
    Temporary,
    /// Bound by the job (its position in [`Program::inputs`]).
    Input,
    /// Bound by the job (its position in [`Program::outputs`]).
    Output,
    /// `constants[offset..offset + length]`.
    Constant { offset: u64, length: u64 },
    /// `length` bytes at `offset` of the BO in `bo_refs[slot]`.
    BoRef { slot: u32, offset: u64, length: u64 },
    /// Omitted optional argument.
    NoValue,
}

/// A decoded operand.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// NN HAL OperandType code (the engine checks it).
    pub operand_type: i32,
    /// Extents (empty for scalars).
    pub dims: Vec<u32>,
    /// Quantization scale.
    pub scale: f32,
    /// Quantization zero point.
    pub zero_point: i32,
    /// Where the value lives.
    pub location: Location,
    /// Per-channel quantization: (channel dimension, scales).
    pub channel_quant: Option<(u32, Vec<f32>)>,
}

/// A decoded operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// NN HAL OperationType code (the engine checks it).
    pub operation_type: i32,
    /// Input operand indexes.
    pub inputs: Vec<u32>,
    /// Output operand indexes.
    pub outputs: Vec<u32>,
}

/// A program: what PROGRAM_CREATE carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// Operands.
    pub operands: Vec<Operand>,
    /// Operations, in execution order or not (the engine orders them).
    pub operations: Vec<Operation>,
    /// Operand indexes of the program inputs.
    pub inputs: Vec<u32>,
    /// Operand indexes of the program outputs.
    pub outputs: Vec<u32>,
    /// BO handles (of the creating file) that `Location::BoRef` operands name by slot.
    pub bo_refs: Vec<u32>,
    /// Constant section.
    pub constants: Vec<u8>,
    /// `PROGRAM_FLAG_RELAX_F32_TO_F16`.
    pub relax_f32_to_f16: bool,
}

/// Why a program was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// The buffer is shorter than its header says.
    #[error("program truncated: need {need} bytes, have {have}")]
    Truncated { need: u64, have: u64 },
    /// More bytes than the header accounts for.
    #[error("program has {0} trailing bytes")]
    TrailingBytes(u64),
    /// Not a program.
    #[error("bad program magic {0:#x}")]
    BadMagic(u32),
    /// A version this device does not know.
    #[error("unsupported program version {0}")]
    BadVersion(u32),
    /// A field breaks a rule.
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> ProgramError {
    ProgramError::Invalid(msg.into())
}

fn pad8(n: u64) -> u64 {
    (8 - n % 8) % 8
}

/// A bounds-checked reader over untrusted bytes.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProgramError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.data.len())
            .ok_or(ProgramError::Truncated {
                need: self.pos as u64 + n as u64,
                have: self.data.len() as u64,
            })?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn record<T: FromBytes>(&mut self) -> Result<T, ProgramError> {
        let bytes = self.take(size_of::<T>())?;
        T::read_from_bytes(bytes).map_err(|_| invalid("record misread"))
    }

    fn u32s(&mut self, n: u32) -> Result<Vec<u32>, ProgramError> {
        let bytes = self.take(
            (n as usize)
                .checked_mul(4)
                .ok_or_else(|| invalid("count overflow"))?,
        )?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

impl Program {
    /// Decodes and structurally validates an encoded program. Every count is bounded, every
    /// offset and index checked, every reserved field required to be zero.
    pub fn decode(data: &[u8]) -> Result<Self, ProgramError> {
        let mut r = Reader { data, pos: 0 };
        let h: ProgramHeader = r.record()?;
        if h.magic != PROGRAM_MAGIC {
            return Err(ProgramError::BadMagic(h.magic));
        }
        if h.version != PROGRAM_VERSION {
            return Err(ProgramError::BadVersion(h.version));
        }
        if h.flags & !PROGRAM_FLAGS_MASK != 0 {
            return Err(invalid(format!(
                "unknown program flags {:#x}",
                h.flags & !PROGRAM_FLAGS_MASK
            )));
        }
        if h.pad != 0 {
            return Err(invalid("header pad must be zero"));
        }
        if h.num_operands == 0 || h.num_operands > MAX_OPERANDS {
            return Err(invalid(format!(
                "operand count {} out of range",
                h.num_operands
            )));
        }
        if h.num_operations == 0 || h.num_operations > MAX_OPERATIONS {
            return Err(invalid(format!(
                "operation count {} out of range",
                h.num_operations
            )));
        }
        if h.num_inputs > h.num_operands || h.num_outputs == 0 || h.num_outputs > h.num_operands {
            return Err(invalid("input/output counts out of range"));
        }
        if (h.num_inputs + h.num_outputs) as usize > crate::abi::MAX_BINDINGS {
            return Err(invalid(format!(
                "{} arguments exceed the {} bindings a job can carry",
                h.num_inputs + h.num_outputs,
                crate::abi::MAX_BINDINGS
            )));
        }
        if h.num_bo_refs > h.num_operands {
            return Err(invalid("more BO references than operands"));
        }
        if u64::from(h.index_words) > u64::from(h.num_operations) * u64::from(MAX_OPERATION_ARGS) {
            return Err(invalid("operation index table too long"));
        }
        // Exact size check before touching the variable parts.
        let lists = u64::from(h.index_words)
            + u64::from(h.num_inputs)
            + u64::from(h.num_outputs)
            + u64::from(h.num_bo_refs);
        let fixed = size_of::<ProgramHeader>() as u64
            + u64::from(h.num_operands) * size_of::<OperandRecord>() as u64
            + u64::from(h.num_operations) * size_of::<OperationRecord>() as u64
            + lists * 4;
        let total = fixed
            .checked_add(pad8(fixed))
            .and_then(|v| v.checked_add(h.const_bytes))
            .ok_or_else(|| invalid("program size overflows"))?;
        let have = data.len() as u64;
        if have < total {
            return Err(ProgramError::Truncated { need: total, have });
        }
        if have > total {
            return Err(ProgramError::TrailingBytes(have - total));
        }

        let mut operand_recs = Vec::with_capacity(h.num_operands as usize);
        for _ in 0..h.num_operands {
            operand_recs.push(r.record::<OperandRecord>()?);
        }
        let mut operation_recs = Vec::with_capacity(h.num_operations as usize);
        for _ in 0..h.num_operations {
            operation_recs.push(r.record::<OperationRecord>()?);
        }
        let index_table = r.u32s(h.index_words)?;
        let inputs = r.u32s(h.num_inputs)?;
        let outputs = r.u32s(h.num_outputs)?;
        let bo_refs = r.u32s(h.num_bo_refs)?;
        let padding = r.take(pad8(fixed) as usize)?;
        if padding.iter().any(|b| *b != 0) {
            return Err(invalid("padding before the constant section must be zero"));
        }
        let constants = r.take(h.const_bytes as usize)?.to_vec();
        let const_len = h.const_bytes;

        let in_const =
            |off: u64, len: u64| off.checked_add(len).is_some_and(|end| end <= const_len);
        let mut operands = Vec::with_capacity(operand_recs.len());
        for (i, rec) in operand_recs.iter().enumerate() {
            let rank = rec.rank as usize;
            if rank > MAX_RANK {
                return Err(invalid(format!(
                    "operand {i}: rank {rank} exceeds {MAX_RANK}"
                )));
            }
            if rec.dims[rank..].iter().any(|d| *d != 0) {
                return Err(invalid(format!(
                    "operand {i}: extents past its rank must be zero"
                )));
            }
            let no_location = rec.location == 0 && rec.offset == 0 && rec.length == 0;
            let location = match rec.lifetime {
                LIFETIME_TEMPORARY | LIFETIME_INPUT | LIFETIME_OUTPUT | LIFETIME_NO_VALUE => {
                    if !no_location {
                        return Err(invalid(format!(
                            "operand {i}: location must be zero for its lifetime"
                        )));
                    }
                    match rec.lifetime {
                        LIFETIME_TEMPORARY => Location::Temporary,
                        LIFETIME_INPUT => Location::Input,
                        LIFETIME_OUTPUT => Location::Output,
                        _ => Location::NoValue,
                    }
                }
                LIFETIME_CONSTANT => {
                    if rec.location != 0 || !in_const(rec.offset, rec.length) {
                        return Err(invalid(format!(
                            "operand {i}: constant outside the constant section"
                        )));
                    }
                    Location::Constant {
                        offset: rec.offset,
                        length: rec.length,
                    }
                }
                LIFETIME_BO_REF => {
                    if rec.location >= h.num_bo_refs {
                        return Err(invalid(format!(
                            "operand {i}: BO slot {} out of range",
                            rec.location
                        )));
                    }
                    if rec.offset.checked_add(rec.length).is_none() {
                        return Err(invalid(format!("operand {i}: BO range overflows")));
                    }
                    Location::BoRef {
                        slot: rec.location,
                        offset: rec.offset,
                        length: rec.length,
                    }
                }
                other => return Err(invalid(format!("operand {i}: unknown lifetime {other}"))),
            };
            let channel_quant = if rec.num_channel_scales == 0 {
                if rec.channel_dim != 0 || rec.channel_scales_offset != 0 {
                    return Err(invalid(format!(
                        "operand {i}: channel fields set without scales"
                    )));
                }
                None
            } else {
                let bytes = u64::from(rec.num_channel_scales) * 4;
                if rec.channel_dim as usize >= rank.max(1)
                    || !in_const(rec.channel_scales_offset, bytes)
                {
                    return Err(invalid(format!(
                        "operand {i}: per-channel scales out of range"
                    )));
                }
                let start = rec.channel_scales_offset as usize;
                let scales = constants[start..start + bytes as usize]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Some((rec.channel_dim, scales))
            };
            operands.push(Operand {
                operand_type: rec.operand_type,
                dims: rec.dims[..rank].to_vec(),
                scale: rec.scale,
                zero_point: rec.zero_point,
                location,
                channel_quant,
            });
        }

        let n = h.num_operands;
        let check_index = |what: &str, idx: u32| {
            if idx < n {
                Ok(())
            } else {
                Err(invalid(format!("{what}: operand index {idx} out of range")))
            }
        };
        let mut operations = Vec::with_capacity(operation_recs.len());
        for (i, rec) in operation_recs.iter().enumerate() {
            let count = u64::from(rec.num_inputs) + u64::from(rec.num_outputs);
            if count > u64::from(MAX_OPERATION_ARGS) || rec.num_outputs == 0 {
                return Err(invalid(format!(
                    "operation {i}: argument counts out of range"
                )));
            }
            let end = u64::from(rec.first_index) + count;
            if end > u64::from(h.index_words) {
                return Err(invalid(format!(
                    "operation {i}: indexes outside the index table"
                )));
            }
            let idx = &index_table[rec.first_index as usize..end as usize];
            for &k in idx {
                check_index(&format!("operation {i}"), k)?;
            }
            let (ins, outs) = idx.split_at(rec.num_inputs as usize);
            operations.push(Operation {
                operation_type: rec.operation_type,
                inputs: ins.to_vec(),
                outputs: outs.to_vec(),
            });
        }

        // Program inputs and outputs: each names an operand of that lifetime, exactly once.
        let mut seen = vec![false; n as usize];
        for (list, lifetime, what) in [
            (&inputs, Location::Input, "input"),
            (&outputs, Location::Output, "output"),
        ] {
            for &k in list.iter() {
                check_index(&format!("program {what}"), k)?;
                if operands[k as usize].location != lifetime {
                    return Err(invalid(format!(
                        "program {what} {k} does not have the {what} lifetime"
                    )));
                }
                if std::mem::replace(&mut seen[k as usize], true) {
                    return Err(invalid(format!(
                        "operand {k} listed twice as a program argument"
                    )));
                }
            }
        }
        for (k, op) in operands.iter().enumerate() {
            if matches!(op.location, Location::Input | Location::Output) && !seen[k] {
                return Err(invalid(format!(
                    "operand {k} has an argument lifetime but is not listed"
                )));
            }
        }

        Ok(Program {
            operands,
            operations,
            inputs,
            outputs,
            bo_refs,
            constants,
            relax_f32_to_f16: h.flags & PROGRAM_FLAG_RELAX_F32_TO_F16 != 0,
        })
    }

    /// Encodes the program. Fails only if a count or rank exceeds the format's limits.
    pub fn encode(&self) -> Result<Vec<u8>, ProgramError> {
        let too_many = |what: &str| invalid(format!("too many {what}"));
        let index_words: usize = self
            .operations
            .iter()
            .map(|o| o.inputs.len() + o.outputs.len())
            .sum();
        let header = ProgramHeader {
            magic: PROGRAM_MAGIC,
            version: PROGRAM_VERSION,
            num_operands: u32::try_from(self.operands.len()).map_err(|_| too_many("operands"))?,
            num_operations: u32::try_from(self.operations.len())
                .map_err(|_| too_many("operations"))?,
            num_inputs: u32::try_from(self.inputs.len()).map_err(|_| too_many("inputs"))?,
            num_outputs: u32::try_from(self.outputs.len()).map_err(|_| too_many("outputs"))?,
            num_bo_refs: u32::try_from(self.bo_refs.len())
                .map_err(|_| too_many("BO references"))?,
            flags: if self.relax_f32_to_f16 {
                PROGRAM_FLAG_RELAX_F32_TO_F16
            } else {
                0
            },
            index_words: u32::try_from(index_words).map_err(|_| too_many("operation indexes"))?,
            pad: 0,
            const_bytes: 0,
        };
        // Per-channel scales are appended to a copy of the constant section.
        let mut constants = self.constants.clone();
        let mut out = Vec::new();
        let mut recs = Vec::with_capacity(self.operands.len());
        for (i, op) in self.operands.iter().enumerate() {
            if op.dims.len() > MAX_RANK {
                return Err(invalid(format!("operand {i}: rank exceeds {MAX_RANK}")));
            }
            let mut rec = OperandRecord {
                operand_type: op.operand_type,
                rank: op.dims.len() as u32,
                ..Default::default()
            };
            rec.dims[..op.dims.len()].copy_from_slice(&op.dims);
            rec.scale = op.scale;
            rec.zero_point = op.zero_point;
            (rec.lifetime, rec.location, rec.offset, rec.length) = match op.location {
                Location::Temporary => (LIFETIME_TEMPORARY, 0, 0, 0),
                Location::Input => (LIFETIME_INPUT, 0, 0, 0),
                Location::Output => (LIFETIME_OUTPUT, 0, 0, 0),
                Location::NoValue => (LIFETIME_NO_VALUE, 0, 0, 0),
                Location::Constant { offset, length } => (LIFETIME_CONSTANT, 0, offset, length),
                Location::BoRef {
                    slot,
                    offset,
                    length,
                } => (LIFETIME_BO_REF, slot, offset, length),
            };
            if let Some((dim, scales)) = &op.channel_quant {
                while constants.len() % 4 != 0 {
                    constants.push(0);
                }
                rec.channel_dim = *dim;
                rec.num_channel_scales =
                    u32::try_from(scales.len()).map_err(|_| too_many("scales"))?;
                rec.channel_scales_offset = constants.len() as u64;
                for s in scales {
                    constants.extend_from_slice(&s.to_le_bytes());
                }
            }
            recs.push(rec);
        }
        let header = ProgramHeader {
            const_bytes: constants.len() as u64,
            ..header
        };
        out.extend_from_slice(header.as_bytes());
        for rec in &recs {
            out.extend_from_slice(rec.as_bytes());
        }
        let mut first = 0u32;
        for op in &self.operations {
            let rec = OperationRecord {
                operation_type: op.operation_type,
                num_inputs: op.inputs.len() as u32,
                num_outputs: op.outputs.len() as u32,
                first_index: first,
            };
            first += (op.inputs.len() + op.outputs.len()) as u32;
            out.extend_from_slice(rec.as_bytes());
        }
        for op in &self.operations {
            for k in op.inputs.iter().chain(&op.outputs) {
                out.extend_from_slice(&k.to_le_bytes());
            }
        }
        for k in self.inputs.iter().chain(&self.outputs).chain(&self.bo_refs) {
            out.extend_from_slice(&k.to_le_bytes());
        }
        while out.len() % 8 != 0 {
            out.push(0);
        }
        out.extend_from_slice(&constants);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TENSOR_FLOAT32: i32 = 3;
    const INT32: i32 = 1;
    const ADD: i32 = 0;

    fn add_program() -> Program {
        let t = |location| Operand {
            operand_type: TENSOR_FLOAT32,
            dims: vec![1, 4],
            scale: 0.0,
            zero_point: 0,
            location,
            channel_quant: None,
        };
        Program {
            operands: vec![
                t(Location::Input),
                t(Location::Input),
                Operand {
                    operand_type: INT32,
                    dims: vec![],
                    scale: 0.0,
                    zero_point: 0,
                    location: Location::Constant {
                        offset: 0,
                        length: 4,
                    },
                    channel_quant: None,
                },
                t(Location::Output),
            ],
            operations: vec![Operation {
                operation_type: ADD,
                inputs: vec![0, 1, 2],
                outputs: vec![3],
            }],
            inputs: vec![0, 1],
            outputs: vec![3],
            bo_refs: vec![],
            constants: 0i32.to_le_bytes().to_vec(),
            relax_f32_to_f16: false,
        }
    }

    #[test]
    fn encode_decode_round_trips() {
        let p = add_program();
        let bytes = p.encode().unwrap();
        assert_eq!(Program::decode(&bytes).unwrap(), p);
    }

    #[test]
    fn per_channel_scales_round_trip() {
        let mut p = add_program();
        p.operands[0].channel_quant = Some((1, vec![0.5, 0.25, 1.0, 2.0]));
        let back = Program::decode(&p.encode().unwrap()).unwrap();
        assert_eq!(
            back.operands[0].channel_quant,
            Some((1, vec![0.5, 0.25, 1.0, 2.0]))
        );
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = add_program().encode().unwrap();
        for len in 0..bytes.len() {
            assert!(
                Program::decode(&bytes[..len]).is_err(),
                "accepted a {len}-byte prefix"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = add_program().encode().unwrap();
        bytes.push(0);
        assert_eq!(Program::decode(&bytes), Err(ProgramError::TrailingBytes(1)));
    }

    #[test]
    fn bad_magic_version_and_flags_are_refused() {
        let bytes = add_program().encode().unwrap();
        let mut b = bytes.clone();
        b[0] ^= 1;
        assert!(matches!(
            Program::decode(&b),
            Err(ProgramError::BadMagic(_))
        ));
        let mut b = bytes.clone();
        b[4] = 9;
        assert_eq!(Program::decode(&b), Err(ProgramError::BadVersion(9)));
        let mut b = bytes;
        b[28] = 0x80;
        assert!(matches!(Program::decode(&b), Err(ProgramError::Invalid(_))));
    }

    #[test]
    fn out_of_range_operand_index_is_refused() {
        let mut p = add_program();
        p.operations[0].inputs[1] = 99;
        assert!(matches!(
            Program::decode(&p.encode().unwrap()),
            Err(ProgramError::Invalid(_))
        ));
    }

    #[test]
    fn constant_outside_the_section_is_refused() {
        let mut p = add_program();
        p.operands[2].location = Location::Constant {
            offset: 2,
            length: 4,
        };
        assert!(Program::decode(&p.encode().unwrap()).is_err());
        p.operands[2].location = Location::Constant {
            offset: u64::MAX,
            length: 2,
        };
        assert!(Program::decode(&p.encode().unwrap()).is_err());
    }

    #[test]
    fn argument_lifetimes_must_match_the_lists() {
        let mut p = add_program();
        p.inputs = vec![0];
        assert!(
            Program::decode(&p.encode().unwrap()).is_err(),
            "an unlisted input"
        );
        let mut p = add_program();
        p.inputs = vec![0, 0];
        assert!(
            Program::decode(&p.encode().unwrap()).is_err(),
            "an input listed twice"
        );
        let mut p = add_program();
        p.outputs = vec![2];
        assert!(
            Program::decode(&p.encode().unwrap()).is_err(),
            "a constant as output"
        );
    }

    #[test]
    fn bo_slot_out_of_range_is_refused() {
        let mut p = add_program();
        p.operands[2].location = Location::BoRef {
            slot: 0,
            offset: 0,
            length: 4,
        };
        assert!(Program::decode(&p.encode().unwrap()).is_err());
        p.bo_refs = vec![5];
        assert!(Program::decode(&p.encode().unwrap()).is_ok());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let base = add_program().encode().unwrap();
        for _ in 0..20_000 {
            let mut b = base.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % b.len();
                b[i] = (x >> 32) as u8;
            }
            let _ = Program::decode(&b);
        }
    }
}
