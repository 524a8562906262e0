//! The cached form of a prepared model: the model cache holds the compiled structure (operands,
//! operations, placement), the data cache holds every constant's bytes.
//!
//! Model cache: `NNCM` magic, format version (u32 LE), placement byte (1: the device runs the
//! whole model, 0: the CPU executor), then a postcard [`CachedModel`] that must decode
//! completely. The schema is the cache's own, versioned by [`FORMAT_VERSION`] and independent
//! of the service's wire protocol; a file of another version is refused with
//! [`CacheError::Format`] (the caller then compiles afresh). Version 1 (until the crate split)
//! was the wire protocol's model message; version 2 named only what a cached model holds;
//! version 3 adds the referenced subgraphs (IF and WHILE bodies). Data cache: the constants,
//! concatenated (each at an 8-byte aligned offset); CONSTANT_REFERENCE operands are rewritten to CONSTANT_COPY into these bytes, so a
//! cached model needs no client pool. Decoding trusts nothing: codes, lengths and indexes are
//! checked here and by the model validator before anything is compiled.

use serde::{Deserialize, Serialize};

use super::CacheError;
use super::files::MemfdBuffer;
use crate::memory::MappedPool;
use crate::types::*;

/// Model-cache magic.
const MAGIC: [u8; 4] = *b"NNCM";
/// Bumped whenever the encoding changes.
pub const FORMAT_VERSION: u32 = 3;

/// Bytes before the postcard body: magic, version, placement.
const HEADER: usize = 9;

/// What the model cache holds after the header (schema version 3). A model in the cache has
/// no pools and no inline values: every constant, in the main subgraph or a referenced one,
/// is CONSTANT_COPY at an offset of the data cache.
#[derive(Debug, Serialize, Deserialize)]
struct CachedModel {
    main: CachedSubgraph,
    /// The referenced subgraphs (IF and WHILE bodies), in `Model::referenced` order.
    referenced: Vec<CachedSubgraph>,
    relax_computation_float32_to_float16: bool,
    /// Length of the data cache.
    data_len: u64,
}

/// One subgraph: the main one or a referenced one.
#[derive(Debug, Serialize, Deserialize)]
struct CachedSubgraph {
    operands: Vec<CachedOperand>,
    operations: Vec<CachedOperation>,
    input_indexes: Vec<u32>,
    output_indexes: Vec<u32>,
}

/// An operand: HAL codes as integers, checked when read.
#[derive(Debug, Serialize, Deserialize)]
struct CachedOperand {
    operand_type: i32,
    dimensions: Vec<u32>,
    scale: f32,
    zero_point: i32,
    lifetime: i32,
    /// Where a constant's bytes are in the data cache: (offset, length); for a SUBGRAPH
    /// operand (subgraph index, 0); (0, 0) otherwise.
    data: (u32, u32),
    /// Per-channel quantization: (scales, channel dimension).
    channel_quant: Option<(Vec<f32>, u32)>,
}

/// An operation.
#[derive(Debug, Serialize, Deserialize)]
struct CachedOperation {
    operation_type: i32,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
}

impl CachedSubgraph {
    /// The schema form of one subgraph's lists.
    fn from_parts(
        operands: &[Operand],
        operations: &[Operation],
        input_indexes: &[u32],
        output_indexes: &[u32],
    ) -> Self {
        Self {
            operands: operands
                .iter()
                .map(|o| CachedOperand {
                    operand_type: o.operand_type.code(),
                    dimensions: o.dimensions.clone(),
                    scale: o.scale,
                    zero_point: o.zero_point,
                    lifetime: o.lifetime.code(),
                    data: (o.location.offset, o.location.length),
                    channel_quant: o
                        .extra_params
                        .as_ref()
                        .map(|p| (p.scales.clone(), p.channel_dim)),
                })
                .collect(),
            operations: operations
                .iter()
                .map(|o| CachedOperation {
                    operation_type: o.operation_type.code(),
                    inputs: o.inputs.clone(),
                    outputs: o.outputs.clone(),
                })
                .collect(),
            input_indexes: input_indexes.to_vec(),
            output_indexes: output_indexes.to_vec(),
        }
    }

    /// The subgraph this describes, every code checked; constants are CONSTANT_COPY
    /// locations into the data cache, not yet checked against it.
    fn into_subgraph(self) -> Result<Subgraph, CacheError> {
        let corrupt = |m: String| CacheError::Corrupt(m);
        let mut operands = Vec::with_capacity(self.operands.len());
        for (i, o) in self.operands.into_iter().enumerate() {
            let lifetime = OperandLifetime::from_code(o.lifetime)
                .ok_or_else(|| corrupt(format!("operand {i}: unknown lifetime {}", o.lifetime)))?;
            if lifetime == OperandLifetime::ConstantReference {
                return Err(corrupt(format!(
                    "operand {i}: lifetime {lifetime:?} in a cache"
                )));
            }
            let (offset, length) = o.data;
            let located = match lifetime {
                OperandLifetime::ConstantCopy => true,
                OperandLifetime::Subgraph => length == 0,
                _ => (offset, length) == (0, 0),
            };
            if !located {
                return Err(corrupt(format!(
                    "operand {i}: data ({offset}, {length}) on a {lifetime:?} operand"
                )));
            }
            operands.push(Operand {
                operand_type: OperandType::from_code(o.operand_type).ok_or_else(|| {
                    corrupt(format!("operand {i}: unknown type {}", o.operand_type))
                })?,
                dimensions: o.dimensions,
                scale: o.scale,
                zero_point: o.zero_point,
                lifetime,
                location: DataLocation {
                    pool_index: 0,
                    offset,
                    length,
                    padding: 0,
                },
                extra_params: o.channel_quant.map(|(scales, channel_dim)| {
                    SymmPerChannelQuantParams {
                        scales,
                        channel_dim,
                    }
                }),
            });
        }
        let mut operations = Vec::with_capacity(self.operations.len());
        for (i, o) in self.operations.into_iter().enumerate() {
            operations.push(Operation {
                operation_type: OperationType::from_code(o.operation_type).ok_or_else(|| {
                    corrupt(format!("operation {i}: unknown type {}", o.operation_type))
                })?,
                inputs: o.inputs,
                outputs: o.outputs,
            });
        }
        Ok(Subgraph {
            operands,
            operations,
            input_indexes: self.input_indexes,
            output_indexes: self.output_indexes,
        })
    }
}

impl CachedModel {
    /// The schema form of `model`, whose constants are all CONSTANT_COPY into the data cache.
    fn from_model(model: &Model, data_len: u64) -> Self {
        Self {
            main: CachedSubgraph::from_parts(
                &model.operands,
                &model.operations,
                &model.input_indexes,
                &model.output_indexes,
            ),
            referenced: model
                .referenced
                .iter()
                .map(|s| {
                    CachedSubgraph::from_parts(
                        &s.operands,
                        &s.operations,
                        &s.input_indexes,
                        &s.output_indexes,
                    )
                })
                .collect(),
            relax_computation_float32_to_float16: model.relax_computation_float32_to_float16,
            data_len,
        }
    }

    /// The model this describes, every code checked (see [`CachedSubgraph::into_subgraph`]).
    /// More than [`crate::validate::MAX_REFERENCED_SUBGRAPHS`] subgraphs is corrupt.
    fn into_model(self) -> Result<Model, CacheError> {
        let max = crate::validate::MAX_REFERENCED_SUBGRAPHS;
        if self.referenced.len() > max {
            return Err(CacheError::Corrupt(format!(
                "{} referenced subgraphs, more than {max}",
                self.referenced.len()
            )));
        }
        let main = self.main.into_subgraph()?;
        let referenced = self
            .referenced
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                s.into_subgraph().map_err(|e| match e {
                    CacheError::Corrupt(m) => {
                        CacheError::Corrupt(format!("referenced subgraph {k}: {m}"))
                    }
                    e => e,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Model {
            operands: main.operands,
            operations: main.operations,
            input_indexes: main.input_indexes,
            output_indexes: main.output_indexes,
            referenced,
            operand_values: Vec::new(),
            pools: Vec::new(),
            relax_computation_float32_to_float16: self.relax_computation_float32_to_float16,
        })
    }
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
    encode_with(model, on_device, true)
}

/// The model-cache bytes of `model` alone, without reading any constant (`data` stays
/// empty): what [`encode`] would give as `model`.
pub(crate) fn encode_structure(model: &Model) -> Result<Encoded, CacheError> {
    encode_with(model, false, false)
}

fn encode_with(model: &Model, on_device: bool, with_data: bool) -> Result<Encoded, CacheError> {
    let mut data = if with_data {
        model.operand_values.clone()
    } else {
        Vec::new()
    };
    let mut data_len = model.operand_values.len() as u64;
    let mut skeleton = model.without_values(Vec::new());
    let mut mapped: Vec<Option<MappedPool>> = (0..model.pools.len()).map(|_| None).collect();
    for o in skeleton.all_operands_mut() {
        if o.lifetime != OperandLifetime::ConstantReference {
            continue;
        }
        let index = o.location.pool_index as usize;
        if index >= model.pools.len() {
            return Err(CacheError::Encode(format!("pool {index} out of range")));
        }
        data_len = data_len.next_multiple_of(8);
        let offset = u32::try_from(data_len)
            .map_err(|_| CacheError::Encode("constants exceed 4 GiB".into()))?;
        data_len += u64::from(o.location.length);
        o.lifetime = OperandLifetime::ConstantCopy;
        let original = o.location;
        o.location = DataLocation {
            pool_index: 0,
            offset,
            length: original.length,
            padding: 0,
        };
        if !with_data {
            continue;
        }
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
            .read(original.offset as usize, original.length as usize)
            .map_err(|s| CacheError::Encode(format!("constant outside its pool: {s:?}")))?;
        data.resize(offset as usize, 0);
        data.extend_from_slice(&bytes);
    }
    u32::try_from(data_len).map_err(|_| CacheError::Encode("constants exceed 4 GiB".into()))?;
    let body = postcard::to_stdvec(&CachedModel::from_model(&skeleton, data_len))
        .map_err(|e| CacheError::Encode(e.to_string()))?;
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.push(u8::from(on_device));
    bytes.extend_from_slice(&body);
    Ok(Encoded { model: bytes, data })
}

/// Tensor constants of at least this many bytes stay in the data buffer, referenced as a pool
/// (no copy); smaller ones, and scalars, are copied into `operand_values`.
const REFERENCE_AT: u32 = 1024;

/// Decodes a model and its placement from cache bytes (untrusted: every field checked; the
/// caller still validates the model). `data` holds the data cache; large constants become
/// CONSTANT_REFERENCE into it (an ashmem pool), small ones CONSTANT_COPY.
pub fn decode(model_bytes: &[u8], data: MemfdBuffer) -> Result<(Model, bool), CacheError> {
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
        return Err(CacheError::Format {
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let on_device = match model_bytes[8] {
        0 => false,
        1 => true,
        b => return Err(corrupt(format!("placement byte {b}"))),
    };
    let (cached, rest) = postcard::take_from_bytes::<CachedModel>(&model_bytes[HEADER..])
        .map_err(|e| corrupt(e.to_string()))?;
    if !rest.is_empty() {
        return Err(corrupt(format!("{} trailing bytes", rest.len())));
    }
    if cached.data_len != data.len() {
        return Err(corrupt(format!(
            "data cache holds {} bytes, {} expected",
            data.len(),
            cached.data_len
        )));
    }
    let mut model = cached.into_model()?;
    split_constants(&mut model, data)?;
    Ok((model, on_device))
}

/// Lays out the CONSTANT_COPY constants of `model`, whose locations are offsets into `data`:
/// large tensors become CONSTANT_REFERENCE into `data` (an ashmem pool appended to the
/// model's pools, sealed against resizing), small ones and scalars are copied into a fresh
/// `operand_values`. Locations outside `data` are refused.
fn split_constants(model: &mut Model, data: MemfdBuffer) -> Result<(), CacheError> {
    let corrupt = |m: String| CacheError::Corrupt(m);
    let pool_index =
        u32::try_from(model.pools.len()).map_err(|_| corrupt("too many pools".into()))?;
    let mut values = Vec::new();
    let mut referenced = false;
    for o in model.all_operands_mut() {
        if o.lifetime != OperandLifetime::ConstantCopy {
            continue;
        }
        let DataLocation { offset, length, .. } = o.location;
        if u64::from(offset) + u64::from(length) > data.len() {
            return Err(corrupt("a constant outside the data cache".into()));
        }
        if length >= REFERENCE_AT && !o.operand_type.is_scalar() {
            o.lifetime = OperandLifetime::ConstantReference;
            o.location.pool_index = pool_index;
            referenced = true;
        } else {
            let mut bytes = vec![0u8; length as usize];
            data.read_at(u64::from(offset), &mut bytes)
                .map_err(|e| corrupt(e.to_string()))?;
            values.resize(values.len().next_multiple_of(8), 0);
            o.location.offset = u32::try_from(values.len())
                .map_err(|_| corrupt("constants exceed 4 GiB".into()))?;
            values.extend_from_slice(&bytes);
        }
    }
    model.operand_values = values;
    let size = data.len();
    if referenced && let Some(fd) = data.into_fd().map_err(|e| corrupt(e.to_string()))? {
        model.pools.push(Memory {
            kind: MemoryKind::Ashmem,
            fd: std::sync::Arc::new(fd),
            size,
        });
    }
    Ok(())
}

/// `model` with its large CONSTANT_COPY constants moved into a private memfd pool (one copy),
/// as a model loaded from a cache has them: the device imports the pool instead of taking
/// the constants inline in its program, and the CPU plan maps it. None when there are none.
pub(crate) fn with_large_copies_referenced(model: &Model) -> Result<Option<Model>, CacheError> {
    let large = model.all_operands().any(|o| {
        o.lifetime == OperandLifetime::ConstantCopy
            && o.location.length >= REFERENCE_AT
            && !o.operand_type.is_scalar()
    });
    if !large {
        return Ok(None);
    }
    let mut data = MemfdBuffer::new();
    data.append(&model.operand_values)
        .map_err(|e| CacheError::Encode(e.to_string()))?;
    let mut out = model.without_values(model.pools.clone());
    split_constants(&mut out, data)?;
    Ok(Some(out))
}

/// The model-cache bytes without the placement byte (what identifies the model's content).
pub fn without_placement(model_bytes: &[u8]) -> &[u8] {
    model_bytes.get(HEADER..).unwrap_or_default()
}

/// The placement byte of encoded model-cache bytes (true: the device).
pub fn placement(model_bytes: &[u8]) -> bool {
    model_bytes.get(HEADER - 1) == Some(&1)
}

/// Sets the placement byte of encoded model-cache bytes.
pub(crate) fn set_placement(model_bytes: &mut [u8], on_device: bool) {
    if let Some(b) = model_bytes.get_mut(HEADER - 1) {
        *b = u8::from(on_device);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn model() -> Model {
        let values: Vec<u8> = (0..2048u32)
            .flat_map(|v| (v as f32).to_le_bytes())
            .collect();
        let operand = |ty, dims: Vec<u32>, lifetime, location| Operand {
            operand_type: ty,
            dimensions: dims,
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location,
            extra_params: None,
        };
        let mut operand_values = values.clone();
        operand_values.extend_from_slice(&0i32.to_le_bytes());
        Model {
            operands: vec![
                operand(
                    OperandType::TensorFloat32,
                    vec![2048],
                    OperandLifetime::SubgraphInput,
                    DataLocation::default(),
                ),
                operand(
                    OperandType::TensorFloat32,
                    vec![2048],
                    OperandLifetime::ConstantCopy,
                    DataLocation {
                        pool_index: 0,
                        offset: 0,
                        length: 8192,
                        padding: 0,
                    },
                ),
                operand(
                    OperandType::Int32,
                    vec![],
                    OperandLifetime::ConstantCopy,
                    DataLocation {
                        pool_index: 0,
                        offset: 8192,
                        length: 4,
                        padding: 0,
                    },
                ),
                operand(
                    OperandType::TensorFloat32,
                    vec![2048],
                    OperandLifetime::SubgraphOutput,
                    DataLocation::default(),
                ),
            ],
            operations: vec![Operation {
                operation_type: OperationType::Add,
                inputs: vec![0, 1, 2],
                outputs: vec![3],
            }],
            input_indexes: vec![0],
            output_indexes: vec![3],
            operand_values,
            pools: vec![],
            relax_computation_float32_to_float16: false,
            referenced: vec![],
        }
    }

    fn buffer(bytes: &[u8]) -> MemfdBuffer {
        let mut b = MemfdBuffer::new();
        b.append(bytes).unwrap();
        b
    }

    #[test]
    fn a_model_round_trips_with_large_constants_referenced_and_small_ones_copied() {
        let m = model();
        let enc = encode(&m, true).unwrap();
        let (back, on_device) = decode(&enc.model, buffer(&enc.data)).unwrap();
        assert!(on_device);
        assert_eq!(
            back.operands[1].lifetime,
            OperandLifetime::ConstantReference
        );
        assert_eq!(back.operands[2].lifetime, OperandLifetime::ConstantCopy);
        assert_eq!(back.pools.len(), 1);
        assert_eq!(back.pools[0].size, enc.data.len() as u64);
        let loc = back.operands[2].location;
        assert_eq!(
            &back.operand_values[loc.offset as usize..][..4],
            &0i32.to_le_bytes()
        );
        crate::validate::validate_model(&back).unwrap();
    }

    #[test]
    fn truncated_extended_or_flipped_model_caches_never_panic() {
        let enc = encode(&model(), false).unwrap();
        for len in 0..enc.model.len() {
            assert!(
                decode(&enc.model[..len], buffer(&enc.data)).is_err(),
                "cut at {len}"
            );
        }
        let mut longer = enc.model.clone();
        longer.push(0);
        assert!(decode(&longer, buffer(&enc.data)).is_err());
        assert!(decode(&enc.model, buffer(&enc.data[1..])).is_err());
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bytes = enc.model.clone();
            let at = (x as usize) % bytes.len();
            bytes[at] ^= 1 << (x >> 60 & 7);
            // Decoding may succeed (the hash is what rejects damage); it must never panic,
            // and what it gives is validated before use.
            if let Ok((m, _)) = decode(&bytes, buffer(&enc.data)) {
                let _ = crate::validate::validate_model(&m);
            }
        }
    }

    /// Files written by the driver before the cache had its own schema (format 1: the wire
    /// protocol's model message), made by `encode(&model(), true)` of that driver.
    const V1_MODEL: &[u8] = include_bytes!("testdata/v1-model.cache");
    const V1_DATA: &[u8] = include_bytes!("testdata/v1-data.cache");
    /// The model cache of format 2 (no referenced subgraphs), made the same way by the driver
    /// of that format; its data cache was byte for byte `V1_DATA`.
    const V2_MODEL: &[u8] = include_bytes!("testdata/v2-model.cache");

    #[test]
    fn model_caches_of_previous_formats_are_refused_by_their_version() {
        for (found, bytes) in [(1, V1_MODEL), (2, V2_MODEL)] {
            assert_eq!(&bytes[..4], b"NNCM");
            let err = decode(bytes, buffer(V1_DATA)).unwrap_err();
            assert!(
                matches!(err, CacheError::Format { found: f, expected: FORMAT_VERSION } if f == found),
                "{err}"
            );
        }
    }

    /// [`model`] with a WHILE-shaped use of subgraphs: the main subgraph names subgraph 0,
    /// which names subgraph 1; subgraph 1 holds a large and a small constant, in the model's
    /// `operand_values` after the main subgraph's.
    fn model_with_subgraphs() -> Model {
        let mut m = model();
        let base = m.operand_values.len() as u32;
        m.operand_values
            .extend((0..1024u32).flat_map(|v| (v as f32 * 0.5).to_le_bytes()));
        m.operand_values.extend(7i32.to_le_bytes());
        let operand = |ty, dims: Vec<u32>, lifetime, offset, length| Operand {
            operand_type: ty,
            dimensions: dims,
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location: DataLocation {
                pool_index: 0,
                offset,
                length,
                padding: 0,
            },
            extra_params: None,
        };
        m.operands.push(Operand::subgraph(0));
        m.referenced = vec![
            Subgraph {
                operands: vec![
                    Operand::subgraph(1),
                    operand(
                        OperandType::TensorFloat32,
                        vec![4],
                        OperandLifetime::SubgraphInput,
                        0,
                        0,
                    ),
                ],
                operations: vec![],
                input_indexes: vec![1],
                output_indexes: vec![],
            },
            Subgraph {
                operands: vec![
                    operand(
                        OperandType::TensorFloat32,
                        vec![1024],
                        OperandLifetime::ConstantCopy,
                        base,
                        4096,
                    ),
                    operand(
                        OperandType::Int32,
                        vec![],
                        OperandLifetime::ConstantCopy,
                        base + 4096,
                        4,
                    ),
                ],
                operations: vec![],
                input_indexes: vec![],
                output_indexes: vec![],
            },
        ];
        m
    }

    #[test]
    fn referenced_subgraphs_round_trip_with_their_constants() {
        let m = model_with_subgraphs();
        let enc = encode(&m, false).unwrap();
        let (back, on_device) = decode(&enc.model, buffer(&enc.data)).unwrap();
        assert!(!on_device);
        assert_eq!(back.referenced.len(), 2);
        assert_eq!(back.operands[4].lifetime, OperandLifetime::Subgraph);
        assert_eq!(back.operands[4].location.offset, 0);
        let s0 = &back.referenced[0];
        assert_eq!(s0.operands[0].lifetime, OperandLifetime::Subgraph);
        assert_eq!(s0.operands[0].location.offset, 1);
        assert_eq!(s0.input_indexes, vec![1]);
        assert_eq!(s0.operands[1], m.referenced[0].operands[1]);
        // The large constant went to the data pool, the small one to operand_values, with
        // the bytes the model had.
        let s1 = &back.referenced[1];
        let large = s1.operands[0].location;
        assert_eq!(s1.operands[0].lifetime, OperandLifetime::ConstantReference);
        assert_eq!(large.length, 4096);
        let pool = MappedPool::map_constants(&back.pools[large.pool_index as usize]).unwrap();
        let bytes = pool.read(large.offset as usize, 8).unwrap();
        assert_eq!(bytes, [0.0f32.to_le_bytes(), 0.5f32.to_le_bytes()].concat());
        let small = s1.operands[1].location;
        assert_eq!(s1.operands[1].lifetime, OperandLifetime::ConstantCopy);
        assert_eq!(
            &back.operand_values[small.offset as usize..][..4],
            &7i32.to_le_bytes()
        );
    }

    #[test]
    fn a_cached_subgraph_operand_with_a_length_is_corrupt() {
        let mut m = model_with_subgraphs();
        m.operands[4].location.length = 1;
        let enc = encode(&m, false).unwrap();
        let err = decode(&enc.model, buffer(&enc.data)).unwrap_err();
        assert!(matches!(err, CacheError::Corrupt(_)), "{err}");
        let mut m = model_with_subgraphs();
        m.referenced[0].operands[1].location.offset = 3;
        let enc = encode(&m, false).unwrap();
        let err = decode(&enc.model, buffer(&enc.data)).unwrap_err();
        assert!(err.to_string().contains("referenced subgraph 0"), "{err}");
    }

    #[test]
    fn the_current_format_writes_its_version_and_keeps_the_placement_byte() {
        let enc = encode(&model(), false).unwrap();
        assert_eq!(&enc.model[..4], b"NNCM");
        assert_eq!(enc.model[4..8], FORMAT_VERSION.to_le_bytes());
        assert!(!placement(&enc.model));
        // The same data bytes as the previous format: only the model-cache schema changed.
        assert_eq!(encode(&model(), true).unwrap().data, V1_DATA);
    }
}
