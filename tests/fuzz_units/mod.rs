//! Seeded fuzz-style tests (docs/testing.md, tier 4) for every parser of untrusted bytes the
//! driver owns. Each target runs a bounded number of cases from `nnaccel_uapi::fuzz` (more with
//! `NNACCEL_FUZZ_CASES`), starting from valid inputs — the models of `examples/` and requests
//! for them — and mutating them structurally or byte by byte.
//!
//! - [`hal`]: models and requests through `validate_model`, `prepare_model` and executions on
//!   a CPU-only driver; the JSON model and inputs files (`modelfile`).
//! - [`wire`]: service protocol messages (`protocol::decode`, `model_from_wire`,
//!   `request_from_wire`), burst packets (`burst::packet`), FMQ descriptors and counters.
//! - [`cache`]: compilation-cache blobs (`cache::blob::decode`) and the token-record file.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cache;
mod hal;
mod wire;

use std::os::fd::AsFd;
use std::sync::Arc;

use nnaccel_uapi::fuzz::Rng;
use nnaccel_uapi::sys::{self, Mapping};

use nnaccel_hal::types::*;
use nnaccel_hal::validate::byte_size;
use nnaccel_protocol::modelfile::{parse_inputs, parse_model};

/// The example model files with their inputs files: (name, model JSON, inputs JSON).
pub(crate) const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "add",
        include_str!("../../examples/add.json"),
        include_str!("../../examples/add.inputs.json"),
    ),
    (
        "cnn",
        include_str!("../../examples/cnn.json"),
        include_str!("../../examples/cnn.inputs.json"),
    ),
    (
        "mlp",
        include_str!("../../examples/mlp.json"),
        include_str!("../../examples/mlp.inputs.json"),
    ),
    (
        "quant",
        include_str!("../../examples/quant.json"),
        include_str!("../../examples/quant.inputs.json"),
    ),
];

/// A valid model and a valid request for it (inputs and outputs in one memfd pool).
pub(crate) struct Seed {
    pub model: Model,
    pub request: Request,
}

/// One pool of `size` bytes in a new memfd, mapped.
pub(crate) fn pool(size: u64) -> (Memory, Mapping) {
    let fd = sys::memfd_create(c"fuzz-pool", size).unwrap();
    let map = Mapping::map_shared(fd.as_fd(), 0, size as usize, true).unwrap();
    (
        Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(fd),
            size,
        },
        map,
    )
}

fn argument(offset: u32, length: u32) -> RequestArgument {
    RequestArgument {
        has_no_value: false,
        location: DataLocation {
            pool_index: 0,
            offset,
            length,
            padding: 0,
        },
        dimensions: Vec::new(),
    }
}

/// The examples as seeds: each model with a request whose inputs (from its inputs file) and
/// outputs lie in one memfd pool, 64-byte aligned.
pub(crate) fn seeds() -> Vec<Seed> {
    EXAMPLES
        .iter()
        .map(|(name, model_json, inputs_json)| {
            let model = parse_model(model_json).unwrap().model;
            let inputs = parse_inputs(inputs_json, &model).unwrap();
            let mut at = 0u32;
            let mut place = |len: usize| {
                let a = argument(at, len as u32);
                at += (len as u32).div_ceil(64) * 64;
                a
            };
            let request_inputs: Vec<RequestArgument> =
                inputs.iter().map(|v| place(v.bytes.len())).collect();
            let outputs: Vec<RequestArgument> = model
                .output_indexes
                .iter()
                .map(|&i| {
                    let o = &model.operands[i as usize];
                    place(byte_size(o.operand_type, &o.dimensions).unwrap() as usize)
                })
                .collect();
            let (memory, map) = pool(u64::from(at.max(64)).div_ceil(4096) * 4096);
            for (v, a) in inputs.iter().zip(&request_inputs) {
                map.write_at(a.location.offset as usize, &v.bytes).unwrap();
            }
            let request = Request {
                inputs: request_inputs,
                outputs,
                pools: vec![MemoryPool::Memory(memory)],
            };
            nnaccel_hal::validate::validate_model(&model)
                .unwrap_or_else(|e| panic!("example {name}: {e}"));
            nnaccel_hal::validate::validate_request(&request, &model)
                .unwrap_or_else(|e| panic!("example {name}'s request: {e}"));
            Seed { model, request }
        })
        .collect()
}

/// A dimension list mutated: an extent changed, added or removed.
pub(crate) fn mutate_dims(rng: &mut Rng, dims: &mut Vec<u32>) {
    match rng.below(4) {
        0 if !dims.is_empty() => {
            let i = rng.below(dims.len());
            dims[i] = small_or_edgy(rng);
        }
        1 => dims.push(small_or_edgy(rng)),
        2 => {
            dims.pop();
        }
        _ => dims.clear(),
    }
}

/// Mostly a small number (indexes and extents near the valid ones), sometimes an edgy one.
pub(crate) fn small_or_edgy(rng: &mut Rng) -> u32 {
    if rng.chance(3, 4) {
        rng.below(9) as u32
    } else {
        rng.edgy_u32()
    }
}

/// A data location mutated in one field.
pub(crate) fn mutate_location(rng: &mut Rng, l: &mut DataLocation) {
    let v = small_or_edgy(rng);
    match rng.below(4) {
        0 => l.pool_index = v,
        1 => l.offset = if rng.chance(1, 2) { v } else { l.offset ^ v },
        2 => l.length = if rng.chance(1, 2) { v } else { l.length ^ v },
        _ => l.padding = v,
    }
}

/// A float that breaks arithmetic.
pub(crate) fn edgy_f32(rng: &mut Rng) -> f32 {
    let random = f32::from_bits(rng.u32());
    *rng.pick(&[
        0.0,
        -0.0,
        -1.0,
        1e-45,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.5,
        random,
    ])
}

/// An index list mutated: an entry changed, added, removed or duplicated.
pub(crate) fn mutate_indexes(rng: &mut Rng, list: &mut Vec<u32>, bound: usize) {
    match rng.below(4) {
        0 if !list.is_empty() => {
            let i = rng.below(list.len());
            list[i] = if rng.chance(3, 4) {
                rng.below(bound + 1) as u32
            } else {
                rng.edgy_u32()
            };
        }
        1 => list.push(rng.below(bound + 2) as u32),
        2 if !list.is_empty() => {
            let i = rng.below(list.len());
            list.remove(i);
        }
        _ if !list.is_empty() => {
            let v = *rng.pick(list);
            list.push(v);
        }
        _ => list.push(rng.edgy_u32()),
    }
}
