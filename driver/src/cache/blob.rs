//! The cached form of a prepared model: the model cache holds the compiled structure (operands,
//! operations, placement), the data cache holds every constant's bytes.
//!
//! Model cache: `NNCM` magic, format version (u32 LE), placement byte (1: the device runs the
//! whole model, 0: the CPU executor), then a postcard [`CachedProgram`] that must decode
//! completely. Data cache: the constants, concatenated (each at an 8-byte aligned
//! offset); CONSTANT_REFERENCE operands are rewritten to CONSTANT_COPY into these bytes, so a
//! cached model needs no client pool. Decoding trusts nothing: codes, lengths and indexes are
//! checked here and by the model validator before anything is compiled.

use serde::{Deserialize, Serialize};

use super::CacheError;
use crate::hal::memory::MappedPool;
use crate::hal::types::*;
use crate::protocol::{self, FdList, ReceivedFds, WireModel};

/// Model-cache magic.
const MAGIC: [u8; 4] = *b"NNCM";
/// Bumped whenever the encoding changes.
const FORMAT_VERSION: u32 = 1;

/// Bytes before the postcard body: magic, version, placement.
const HEADER: usize = 9;

/// What the model cache holds after the header.
#[derive(Debug, Serialize, Deserialize)]
struct CachedProgram {
    /// The model, without `operand_values` (they are the data cache) and without pools.
    model: WireModel,
    /// Length of the data cache.
    data_len: u64,
}

/// A model in cached form.
#[derive(Debug)]
pub struct Encoded {
    /// The model-cache bytes.
    pub model: Vec<u8>,
    /// The data-cache bytes.
    pub data: Vec<u8>,
}

/// Encodes `model` (its pool constants read now) with its placement.
pub fn encode(model: &Model, on_device: bool) -> Result<Encoded, CacheError> {
    let mut data = model.operand_values.clone();
    let mut operands = model.operands.clone();
    let mut mapped: Vec<Option<MappedPool>> = (0..model.pools.len()).map(|_| None).collect();
    for o in &mut operands {
        if o.lifetime != OperandLifetime::ConstantReference {
            continue;
        }
        let index = o.location.pool_index as usize;
        let slot = mapped
            .get_mut(index)
            .ok_or_else(|| CacheError::Encode(format!("pool {index} out of range")))?;
        if slot.is_none() {
            let mem = &model.pools[index];
            *slot = Some(MappedPool::map_constants(mem).map_err(|s| {
                CacheError::Encode(format!("cannot read constant pool {index}: {s:?}"))
            })?);
        }
        let Some(pool) = slot.as_ref() else {
            continue;
        };
        let bytes = pool
            .read(o.location.offset as usize, o.location.length as usize)
            .map_err(|s| CacheError::Encode(format!("constant outside its pool: {s:?}")))?;
        while data.len() % 8 != 0 {
            data.push(0);
        }
        let offset = u32::try_from(data.len())
            .map_err(|_| CacheError::Encode("constants exceed 4 GiB".into()))?;
        data.extend_from_slice(&bytes);
        o.lifetime = OperandLifetime::ConstantCopy;
        o.location = DataLocation {
            pool_index: 0,
            offset,
            length: o.location.length,
            padding: 0,
        };
    }
    u32::try_from(data.len()).map_err(|_| CacheError::Encode("constants exceed 4 GiB".into()))?;
    let skeleton = Model {
        operands,
        operations: model.operations.clone(),
        input_indexes: model.input_indexes.clone(),
        output_indexes: model.output_indexes.clone(),
        operand_values: Vec::new(),
        pools: Vec::new(),
        relax_computation_float32_to_float16: model.relax_computation_float32_to_float16,
    };
    let mut fds = FdList::default();
    let program = CachedProgram {
        model: protocol::model_to_wire(&skeleton, &mut fds),
        data_len: data.len() as u64,
    };
    let body = protocol::encode(&program).map_err(|e| CacheError::Encode(e.to_string()))?;
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.push(u8::from(on_device));
    bytes.extend_from_slice(&body);
    Ok(Encoded { model: bytes, data })
}

/// Decodes a model and its placement from cache bytes (untrusted: every field checked; the
/// caller still validates the model).
pub fn decode(model_bytes: &[u8], data: Vec<u8>) -> Result<(Model, bool), CacheError> {
    let corrupt = |m: String| CacheError::Corrupt(m);
    if model_bytes.len() < HEADER || model_bytes[..4] != MAGIC {
        return Err(corrupt("bad model-cache magic".into()));
    }
    let version = u32::from_le_bytes([
        model_bytes[4],
        model_bytes[5],
        model_bytes[6],
        model_bytes[7],
    ]);
    if version != FORMAT_VERSION {
        return Err(corrupt(format!("model-cache format {version}")));
    }
    let on_device = match model_bytes[8] {
        0 => false,
        1 => true,
        b => return Err(corrupt(format!("placement byte {b}"))),
    };
    let program: CachedProgram =
        protocol::decode(&model_bytes[HEADER..]).map_err(|e| corrupt(e.to_string()))?;
    if program.data_len != data.len() as u64 {
        return Err(corrupt(format!(
            "data cache holds {} bytes, {} expected",
            data.len(),
            program.data_len
        )));
    }
    if !program.model.pools.is_empty() || !program.model.operand_values.is_empty() {
        return Err(corrupt(
            "a cached model names pools or inline values".into(),
        ));
    }
    let mut wire = program.model;
    wire.operand_values = data;
    let model = protocol::model_from_wire(wire, &mut ReceivedFds::new(Vec::new()))
        .map_err(|e| corrupt(e.to_string()))?;
    Ok((model, on_device))
}

/// The model-cache bytes without the placement byte (what identifies the model's content).
pub fn without_placement(model_bytes: &[u8]) -> &[u8] {
    model_bytes.get(HEADER..).unwrap_or_default()
}

/// Sets the placement byte of encoded model-cache bytes.
pub fn set_placement(model_bytes: &mut [u8], on_device: bool) {
    if let Some(b) = model_bytes.get_mut(HEADER - 1) {
        *b = u8::from(on_device);
    }
}
