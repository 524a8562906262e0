//! Validation of models and requests (the rules of AOSP `ValidateHal.cpp`, REFERENCE.md §2).
//!
//! Every broken rule is a [`ValidationError`], which the HAL answers with
//! [`crate::ErrorStatus::InvalidArgument`]. Messages name the operand, operation, pool or argument
//! index involved and the rule that was broken.
//!
//! Deliberate choices where the HAL leaves room:
//! - Operations need not be listed in execution order (the executor sorts them); cycles are
//!   rejected.
//! - TENSOR_INT32 may carry a scale >= 0 (the bias of a quantized convolution has
//!   `scale = input scale × filter scale`), as in AOSP; its zero point must be 0.
//! - A `hardware_buffer` pool (size 0: the HAL cannot know it) is structurally fine. A model
//!   constant referencing one is not bounds-checked here: the driver cannot decode it, so
//!   getSupportedOperations reports the operations using it as unsupported and preparation fails
//!   with GENERAL_FAILURE. A request argument in one must use the whole memory (offset = length
//!   = 0), as the NNAPI requires for non-BLOB buffers and as for token pools.
//! - Request dimensions on a scalar operand are rejected (a scalar's rank is known to be 0).
//! - Referenced subgraphs: besides AOSP's rules (SUBGRAPH location, every subgraph valid, no
//!   reference cycle), every referenced subgraph must be reachable from the main one (the NNAPI
//!   runtime never hands a driver an unused one), and a model may have at most
//!   [`MAX_REFERENCED_SUBGRAPHS`] nested at most [`MAX_SUBGRAPH_NESTING`] deep, to bound the
//!   work a hostile model causes.

use nnaccel_cpu::Graph;

use crate::convert::model_to_graph;
use crate::{
    DataLocation, Memory, MemoryKind, MemoryPool, Model, Operand, OperandLifetime, OperandType,
    Operation, Request, RequestArgument,
};

/// Most referenced subgraphs a model may have (bounds the work a hostile model causes; NNAPI
/// models use a handful).
pub const MAX_REFERENCED_SUBGRAPHS: usize = 256;

/// Deepest nesting of subgraph references: the main subgraph calls a subgraph at depth 1, which
/// may call one at depth 2, and so on.
pub const MAX_SUBGRAPH_NESTING: usize = 16;

/// A model or request breaks a HAL rule; always answered with INVALID_ARGUMENT.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

fn invalid<T>(msg: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError(msg.into()))
}

/// Byte size of a value of type `ty` with extents `dims`, if fully specified (a scalar is one
/// element; a tensor needs a known rank and no 0 extent). None when unknown or overflowing u64.
pub fn byte_size(ty: OperandType, dims: &[u32]) -> Option<u64> {
    let elem = ty.element_size() as u64;
    if ty.is_scalar() {
        return Some(elem);
    }
    if dims.is_empty() {
        return None;
    }
    let mut n = elem;
    for &d in dims {
        if d == 0 {
            return None;
        }
        n = n.checked_mul(u64::from(d))?;
    }
    Some(n)
}

/// Whether `dims` fully specify a value of type `ty` (scalars always do).
pub(crate) fn is_fully_specified(ty: OperandType, dims: &[u32]) -> bool {
    ty.is_scalar() || (!dims.is_empty() && !dims.contains(&0))
}

/// `offset + length + padding`, computed in u64 (cannot overflow from u32 terms).
fn location_end(loc: &DataLocation) -> u64 {
    u64::from(loc.offset) + u64::from(loc.length) + u64::from(loc.padding)
}

fn is_zero_location(loc: &DataLocation) -> bool {
    *loc == DataLocation::default()
}

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/// Every model rule, for the main subgraph and each referenced one: operand/operation index
/// ranges; lifetimes and their locations
/// (CONSTANT_COPY: poolIndex 0, offset+length inside operand_values, length == the operand's
/// byte size; CONSTANT_REFERENCE: pool_index < pools.len(), offset+length(+padding) <= pool
/// size computed without overflow, length == byte size; SUBGRAPH: type SUBGRAPH, pool index 0,
/// length 0, offset (the subgraph index) < referenced.len(); other lifetimes: location all
/// zero); a constant with unknown dimensions; input/output index lists matching SUBGRAPH_INPUT /
/// SUBGRAPH_OUTPUT lifetimes exactly once each; each operand written by at most one operation,
/// temporaries (and outputs) written exactly once, no cycles; quantization parameters per type
/// (scale > 0 for quant types, zero point ranges: [0,255] QUANT8_ASYMM, [-128,127] ..._SIGNED,
/// 0 for SYMM types, [0,65535] QUANT16_ASYMM; scale 0/zp 0 for non-quant types, TENSOR_INT32
/// scale >= 0); per-channel params only on TENSOR_QUANT8_SYMM_PER_CHANNEL with scales.len() ==
/// dims[channel_dim] and scales > 0; scalar types with empty dimensions; pools:
/// hardware_buffer is fine structurally, size must be > 0 for other kinds; at most
/// [`MAX_REFERENCED_SUBGRAPHS`], each reachable from the main subgraph, no subgraph referring
/// to itself (directly or not), nesting at most [`MAX_SUBGRAPH_NESTING`] deep; and finally
/// the per-operation signature checks of the CPU executor's `Graph::validate` (which also
/// check the operands of IF and WHILE against the subgraphs they call).
pub fn validate_model(model: &Model) -> Result<(), ValidationError> {
    validate_model_structure(model)?
        .validate()
        .map_err(|e| ValidationError(format!("{e}")))
}

/// Every rule of [`validate_model`] except the executor's per-operation checks, and the graph
/// the model converts to (not yet checked by the executor). Errors in a referenced subgraph
/// start with `referenced subgraph K: `.
pub fn validate_model_structure(model: &Model) -> Result<Graph, ValidationError> {
    validate_model_pools(&model.pools)?;
    if model.referenced.len() > MAX_REFERENCED_SUBGRAPHS {
        return invalid(format!(
            "the model has {} referenced subgraphs, more than the {MAX_REFERENCED_SUBGRAPHS} \
             this driver accepts",
            model.referenced.len()
        ));
    }
    validate_subgraph(model, &View::main(model))?;
    for (k, s) in model.referenced.iter().enumerate() {
        let view = View {
            operands: &s.operands,
            operations: &s.operations,
            input_indexes: &s.input_indexes,
            output_indexes: &s.output_indexes,
        };
        validate_subgraph(model, &view)
            .map_err(|e| ValidationError(format!("referenced subgraph {k}: {}", e.0)))?;
    }
    validate_references(model)?;
    Ok(model_to_graph(model))
}

/// The lists of one subgraph (the main one, or one of `Model::referenced`).
struct View<'a> {
    operands: &'a [Operand],
    operations: &'a [Operation],
    input_indexes: &'a [u32],
    output_indexes: &'a [u32],
}

impl<'a> View<'a> {
    fn main(model: &'a Model) -> Self {
        Self {
            operands: &model.operands,
            operations: &model.operations,
            input_indexes: &model.input_indexes,
            output_indexes: &model.output_indexes,
        }
    }
}

/// The rules of one subgraph; constants are checked against the model's values and pools.
fn validate_subgraph(model: &Model, g: &View<'_>) -> Result<(), ValidationError> {
    for (index, operand) in g.operands.iter().enumerate() {
        validate_operand(model, index, operand)?;
    }
    validate_io_list(
        g.operands,
        g.input_indexes,
        OperandLifetime::SubgraphInput,
        "input",
    )?;
    validate_io_list(
        g.operands,
        g.output_indexes,
        OperandLifetime::SubgraphOutput,
        "output",
    )?;
    validate_operations(g)
}

/// The referenced subgraphs a subgraph's SUBGRAPH operands name (indexes already checked).
fn references(operands: &[Operand]) -> impl Iterator<Item = usize> + '_ {
    operands
        .iter()
        .filter(|o| o.lifetime == OperandLifetime::Subgraph)
        .map(|o| o.location.offset as usize)
}

/// Where the walk over subgraph references has been.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    Unseen,
    OnPath,
    /// Done; the deepest nesting below and including this subgraph.
    Done(usize),
}

/// Every referenced subgraph reachable from the main one, no reference cycle, nesting within
/// [`MAX_SUBGRAPH_NESTING`]. Each subgraph is walked once (depths are remembered), and the
/// recursion is at most `referenced.len()` deep because a cycle stops it.
fn validate_references(model: &Model) -> Result<(), ValidationError> {
    fn walk(model: &Model, k: usize, seen: &mut [Visit]) -> Result<usize, ValidationError> {
        match seen.get(k).copied() {
            Some(Visit::Done(depth)) => return Ok(depth),
            Some(Visit::OnPath) => {
                return invalid(format!(
                    "referenced subgraph {k} refers to itself (through a cycle of SUBGRAPH \
                     operands); recursion is not allowed"
                ));
            }
            Some(Visit::Unseen) => {}
            None => return invalid(format!("referenced subgraph {k} does not exist")),
        }
        seen[k] = Visit::OnPath;
        let mut below = 0;
        if let Some(s) = model.referenced.get(k) {
            for r in references(&s.operands) {
                below = below.max(walk(model, r, seen)?);
            }
        }
        let depth = below + 1;
        seen[k] = Visit::Done(depth);
        Ok(depth)
    }
    let mut seen = vec![Visit::Unseen; model.referenced.len()];
    let mut depth = 0;
    for r in references(&model.operands) {
        depth = depth.max(walk(model, r, &mut seen)?);
    }
    if depth > MAX_SUBGRAPH_NESTING {
        return invalid(format!(
            "subgraph references nest {depth} deep, more than the {MAX_SUBGRAPH_NESTING} this \
             driver accepts"
        ));
    }
    if let Some(k) = seen.iter().position(|v| *v == Visit::Unseen) {
        return invalid(format!(
            "referenced subgraph {k} is not reachable from the main subgraph (every referenced \
             subgraph must be used)"
        ));
    }
    Ok(())
}

fn validate_model_pools(pools: &[Memory]) -> Result<(), ValidationError> {
    for (p, pool) in pools.iter().enumerate() {
        if pool.kind != MemoryKind::HardwareBuffer && pool.size == 0 {
            return invalid(format!(
                "model pool {p}: {} memory must have a size > 0",
                pool.kind.hal_name()
            ));
        }
    }
    Ok(())
}

fn validate_operand(model: &Model, i: usize, o: &Operand) -> Result<(), ValidationError> {
    let ty = o.operand_type;
    let tn = ty.name();

    // Type and dimensions.
    if ty.is_scalar() && !o.dimensions.is_empty() {
        return invalid(format!(
            "operand {i}: scalar type {tn} must have no dimensions, has rank {}",
            o.dimensions.len()
        ));
    }
    let mut size: u64 = ty.element_size() as u64;
    for &d in &o.dimensions {
        size = size.saturating_mul(u64::from(d));
    }
    if size > u64::from(u32::MAX) {
        return invalid(format!(
            "operand {i}: {tn} {:?} needs {size} bytes, more than a u32 can describe",
            o.dimensions
        ));
    }

    validate_quantization(i, o)?;

    // Lifetime and location.
    let loc = &o.location;
    if (ty == OperandType::Subgraph) != (o.lifetime == OperandLifetime::Subgraph) {
        return invalid(format!(
            "operand {i}: type SUBGRAPH goes with lifetime SUBGRAPH and only with it (has {tn}, {})",
            o.lifetime.name()
        ));
    }
    match o.lifetime {
        OperandLifetime::Subgraph => {
            if loc.pool_index != 0 || loc.length != 0 || loc.padding != 0 {
                return invalid(format!(
                    "operand {i}: a SUBGRAPH operand's location must have pool index 0, length \
                     0 and padding 0, has [pool {}, length {}, padding {}]",
                    loc.pool_index, loc.length, loc.padding
                ));
            }
            if loc.offset as usize >= model.referenced.len() {
                return invalid(format!(
                    "operand {i}: SUBGRAPH operand names subgraph {}, out of range (the model \
                     has {} referenced subgraphs)",
                    loc.offset,
                    model.referenced.len()
                ));
            }
        }
        OperandLifetime::ConstantCopy | OperandLifetime::ConstantReference => {
            let lt = o.lifetime.name();
            let Some(needed) = byte_size(ty, &o.dimensions) else {
                return invalid(format!(
                    "operand {i}: {lt} constant of type {tn} has unknown dimensions {:?} \
                     (constants need a known rank and no 0 extent)",
                    o.dimensions
                ));
            };
            if o.lifetime == OperandLifetime::ConstantCopy {
                if loc.pool_index != 0 {
                    return invalid(format!(
                        "operand {i}: CONSTANT_COPY location must have pool index 0, has {}",
                        loc.pool_index
                    ));
                }
                let end = location_end(loc);
                if end > model.operand_values.len() as u64 {
                    return invalid(format!(
                        "operand {i}: CONSTANT_COPY location [offset {}, length {}, padding {}] \
                         ends at {end}, outside operand_values ({} bytes)",
                        loc.offset,
                        loc.length,
                        loc.padding,
                        model.operand_values.len()
                    ));
                }
            } else {
                let p = loc.pool_index as usize;
                let Some(pool) = model.pools.get(p) else {
                    return invalid(format!(
                        "operand {i}: CONSTANT_REFERENCE pool index {p} out of range (the model \
                         has {} pools)",
                        model.pools.len()
                    ));
                };
                // A hardware_buffer pool of unknown size (0) cannot be bounds-checked; the
                // preparer rejects constants it cannot decode.
                let unknown_size = pool.kind == MemoryKind::HardwareBuffer && pool.size == 0;
                let end = location_end(loc);
                if !unknown_size && end > pool.size {
                    return invalid(format!(
                        "operand {i}: CONSTANT_REFERENCE location [offset {}, length {}, \
                         padding {}] ends at {end}, outside pool {p} ({} bytes)",
                        loc.offset, loc.length, loc.padding, pool.size
                    ));
                }
            }
            if u64::from(loc.length) != needed {
                return invalid(format!(
                    "operand {i}: {lt} length {} differs from the {needed} bytes of {tn} {:?}",
                    loc.length, o.dimensions
                ));
            }
        }
        OperandLifetime::TemporaryVariable
        | OperandLifetime::SubgraphInput
        | OperandLifetime::SubgraphOutput
        | OperandLifetime::NoValue => {
            if !is_zero_location(loc) {
                return invalid(format!(
                    "operand {i}: a {} operand must have an all-zero location, has [pool {}, \
                     offset {}, length {}, padding {}]",
                    o.lifetime.name(),
                    loc.pool_index,
                    loc.offset,
                    loc.length,
                    loc.padding
                ));
            }
        }
    }
    Ok(())
}

fn validate_quantization(i: usize, o: &Operand) -> Result<(), ValidationError> {
    use OperandType as T;
    let ty = o.operand_type;
    let tn = ty.name();
    let (scale, zp) = (o.scale, o.zero_point);

    // Scale.
    match ty {
        T::TensorQuant8Asymm
        | T::TensorQuant8AsymmSigned
        | T::TensorQuant8Symm
        | T::TensorQuant16Asymm
        | T::TensorQuant16Symm => {
            if !(scale > 0.0 && scale.is_finite()) {
                return invalid(format!(
                    "operand {i}: {tn} needs a finite scale > 0, has {scale}"
                ));
            }
        }
        T::TensorInt32 => {
            if !(scale >= 0.0 && scale.is_finite()) {
                return invalid(format!(
                    "operand {i}: TENSOR_INT32 scale must be finite and >= 0, has {scale}"
                ));
            }
        }
        T::Float32
        | T::Int32
        | T::Uint32
        | T::Bool
        | T::Float16
        | T::TensorFloat32
        | T::TensorFloat16
        | T::TensorBool8
        | T::TensorQuant8SymmPerChannel
        | T::Subgraph => {
            if scale != 0.0 {
                return invalid(format!("operand {i}: {tn} must have scale 0, has {scale}"));
            }
        }
    }

    // Zero point.
    let (lo, hi) = match ty {
        T::TensorQuant8Asymm => (0, 255),
        T::TensorQuant8AsymmSigned => (-128, 127),
        T::TensorQuant16Asymm => (0, 65535),
        _ => (0, 0),
    };
    if zp < lo || zp > hi {
        return if lo == hi {
            invalid(format!(
                "operand {i}: {tn} must have zero point 0, has {zp}"
            ))
        } else {
            invalid(format!(
                "operand {i}: {tn} zero point {zp} outside [{lo}, {hi}]"
            ))
        };
    }

    // Per-channel parameters.
    match (&o.extra_params, ty) {
        (None, T::TensorQuant8SymmPerChannel) => invalid(format!(
            "operand {i}: TENSOR_QUANT8_SYMM_PER_CHANNEL needs per-channel quantization \
             parameters"
        )),
        (Some(_), t) if t != T::TensorQuant8SymmPerChannel => invalid(format!(
            "operand {i}: per-channel quantization parameters are only allowed on \
             TENSOR_QUANT8_SYMM_PER_CHANNEL, not {tn}"
        )),
        (Some(p), _) => {
            let cd = p.channel_dim;
            let Some(&extent) = o.dimensions.get(cd as usize) else {
                return invalid(format!(
                    "operand {i}: per-channel channel_dim {cd} outside the operand's rank {}",
                    o.dimensions.len()
                ));
            };
            if extent == 0 {
                return invalid(format!(
                    "operand {i}: per-channel channel dimension {cd} has an unknown (0) extent"
                ));
            }
            if p.scales.len() != extent as usize {
                return invalid(format!(
                    "operand {i}: {} per-channel scales for channel dimension {cd} of extent \
                     {extent}",
                    p.scales.len()
                ));
            }
            if let Some((c, s)) = p
                .scales
                .iter()
                .enumerate()
                .find(|(_, s)| !(**s > 0.0 && s.is_finite()))
            {
                return invalid(format!(
                    "operand {i}: per-channel scale {c} is {s}, must be finite and > 0"
                ));
            }
            Ok(())
        }
        (None, _) => Ok(()),
    }
}

fn validate_io_list(
    operands: &[Operand],
    list: &[u32],
    want: OperandLifetime,
    what: &str,
) -> Result<(), ValidationError> {
    let n = operands.len();
    let mut listed = vec![false; n];
    for (k, &idx) in list.iter().enumerate() {
        let x = idx as usize;
        let Some(o) = operands.get(x) else {
            return invalid(format!(
                "model {what} {k} names operand {idx}, out of range (the model has {n} operands)"
            ));
        };
        if o.lifetime != want {
            return invalid(format!(
                "model {what} {k} (operand {idx}) has lifetime {}, must be {}",
                o.lifetime.name(),
                want.name()
            ));
        }
        if std::mem::replace(&mut listed[x], true) {
            return invalid(format!(
                "model {what} {k}: operand {idx} is listed more than once as a model {what}"
            ));
        }
    }
    if let Some(x) = (0..n).find(|&x| operands[x].lifetime == want && !listed[x]) {
        return invalid(format!(
            "operand {x} has lifetime {} but is not listed as a model {what}",
            want.name()
        ));
    }
    Ok(())
}

fn validate_operations(model: &View<'_>) -> Result<(), ValidationError> {
    let n = model.operands.len();
    let mut writer: Vec<Option<usize>> = vec![None; n];
    for (oi, op) in model.operations.iter().enumerate() {
        let name = op.operation_type.name();
        for (k, &x) in op.inputs.iter().enumerate() {
            if x as usize >= n {
                return invalid(format!(
                    "operation {oi} ({name}): input {k} names operand {x}, out of range (the \
                     model has {n} operands)"
                ));
            }
        }
        if op.outputs.is_empty() {
            return invalid(format!("operation {oi} ({name}): has no outputs"));
        }
        for (k, &x) in op.outputs.iter().enumerate() {
            let Some(o) = model.operands.get(x as usize) else {
                return invalid(format!(
                    "operation {oi} ({name}): output {k} names operand {x}, out of range (the \
                     model has {n} operands)"
                ));
            };
            if !matches!(
                o.lifetime,
                OperandLifetime::TemporaryVariable | OperandLifetime::SubgraphOutput
            ) {
                return invalid(format!(
                    "operation {oi} ({name}): output {k} (operand {x}) has lifetime {}; only \
                     TEMPORARY_VARIABLE and SUBGRAPH_OUTPUT operands can be written",
                    o.lifetime.name()
                ));
            }
            if let Some(prev) = writer[x as usize].replace(oi) {
                return invalid(format!(
                    "operand {x} is written by operation {prev} and again by operation {oi} \
                     ({name}); an operand has at most one writer"
                ));
            }
        }
    }
    for (x, o) in model.operands.iter().enumerate() {
        if matches!(
            o.lifetime,
            OperandLifetime::TemporaryVariable | OperandLifetime::SubgraphOutput
        ) && writer[x].is_none()
        {
            return invalid(format!(
                "operand {x} ({}) is never written by an operation; it must be written exactly \
                 once",
                o.lifetime.name()
            ));
        }
    }
    // Cycles: no execution order exists when operations read each other's outputs.
    let order = nnaccel_cpu::execution_order(
        n,
        model
            .operations
            .iter()
            .map(|op| (op.inputs.as_slice(), op.outputs.as_slice())),
    );
    if let Err(stuck) = order {
        return invalid(format!(
            "operations {stuck:?} depend on each other in a cycle; no execution order exists"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// Dimensions of a request argument combined with the model operand's: an empty side takes
/// the other; otherwise the ranks must match, and each extent is the request's where non-zero,
/// else the model's; two non-zero extents must be equal. Used by the executor.
pub(crate) fn combined_dimensions(
    model_dims: &[u32],
    request_dims: &[u32],
) -> Result<Vec<u32>, ValidationError> {
    if request_dims.is_empty() {
        return Ok(model_dims.to_vec());
    }
    if model_dims.is_empty() {
        return Ok(request_dims.to_vec());
    }
    if model_dims.len() != request_dims.len() {
        return invalid(format!(
            "rank {} of dimensions {request_dims:?} differs from the model's rank {} \
             ({model_dims:?})",
            request_dims.len(),
            model_dims.len()
        ));
    }
    model_dims
        .iter()
        .zip(request_dims)
        .enumerate()
        .map(|(j, (&m, &r))| match (m, r) {
            (m, 0) => Ok(m),
            (0, r) => Ok(r),
            (m, r) if m == r => Ok(r),
            (m, r) => invalid(format!(
                "dimension {j} is {r} but the model's is {m} ({request_dims:?} vs {model_dims:?})"
            )),
        })
        .collect()
}

/// Every request rule: inputs.len()/outputs.len() equal the model's; has_no_value -> location
/// all zero and no dimensions; given dimensions must have the model operand's rank (when the
/// model's rank is known; a scalar's rank is 0) and agree with every non-zero model extent; a
/// 0 extent in the request is allowed only for outputs; for inputs the combined dims must be
/// fully specified; location inside its pool (pool_index < pools.len(); for MemoryPool::Memory
/// offset+length(+padding) <= size, no overflow; for MemoryPool::Token: token must be > 0, and
/// the argument's offset == length == 0; likewise for a hardware_buffer of unknown size); pools
/// of other kinds must have a size > 0; for a fully-specified input, length must equal the byte
/// size (0 length allowed only with has_no_value); output length may be larger or smaller (too
/// small is OUTPUT_INSUFFICIENT_SIZE at execution) but must be non-zero unless the output's
/// shape is dynamic (not fully specified).
pub fn validate_request(request: &Request, model: &Model) -> Result<(), ValidationError> {
    for (p, pool) in request.pools.iter().enumerate() {
        match pool {
            MemoryPool::Token(0) => {
                return invalid(format!(
                    "request pool {p}: token 0 is invalid (tokens are > 0)"
                ));
            }
            MemoryPool::Memory(m) if m.kind != MemoryKind::HardwareBuffer && m.size == 0 => {
                return invalid(format!(
                    "request pool {p}: {} memory must have a size > 0",
                    m.kind.hal_name()
                ));
            }
            _ => {}
        }
    }
    validate_arguments(request, model, &request.inputs, &model.input_indexes, true)?;
    validate_arguments(
        request,
        model,
        &request.outputs,
        &model.output_indexes,
        false,
    )
}

fn validate_arguments(
    request: &Request,
    model: &Model,
    args: &[RequestArgument],
    indexes: &[u32],
    is_input: bool,
) -> Result<(), ValidationError> {
    let what = if is_input { "input" } else { "output" };
    if args.len() != indexes.len() {
        return invalid(format!(
            "request has {} {what}s but the model has {}",
            args.len(),
            indexes.len()
        ));
    }
    for (k, (arg, &idx)) in args.iter().zip(indexes).enumerate() {
        let Some(operand) = model.operands.get(idx as usize) else {
            return invalid(format!(
                "model {what} {k} names operand {idx}, which does not exist"
            ));
        };
        validate_argument(request, operand, arg, k, idx, is_input)?;
    }
    Ok(())
}

fn validate_argument(
    request: &Request,
    operand: &Operand,
    arg: &RequestArgument,
    k: usize,
    idx: u32,
    is_input: bool,
) -> Result<(), ValidationError> {
    let what = if is_input { "input" } else { "output" };
    let loc = &arg.location;
    if arg.has_no_value {
        if !is_zero_location(loc) || !arg.dimensions.is_empty() {
            return invalid(format!(
                "request {what} {k} (operand {idx}): has_no_value yet gives a location [pool {}, \
                 offset {}, length {}, padding {}] or dimensions {:?}; both must be empty",
                loc.pool_index, loc.offset, loc.length, loc.padding, arg.dimensions
            ));
        }
        return Ok(());
    }

    // Dimensions.
    let ty = operand.operand_type;
    let model_dims = &operand.dimensions;
    if !arg.dimensions.is_empty() {
        if ty.is_scalar() {
            return invalid(format!(
                "request {what} {k} (operand {idx}): dimensions {:?} given for scalar type {}",
                arg.dimensions,
                ty.name()
            ));
        }
        if !model_dims.is_empty() && arg.dimensions.len() != model_dims.len() {
            return invalid(format!(
                "request {what} {k} (operand {idx}): rank {} differs from the model's rank {}",
                arg.dimensions.len(),
                model_dims.len()
            ));
        }
        for (j, &r) in arg.dimensions.iter().enumerate() {
            let m = model_dims.get(j).copied().unwrap_or(0);
            if m != 0 && r != 0 && m != r {
                return invalid(format!(
                    "request {what} {k} (operand {idx}): dimension {j} is {r} but the model's \
                     is {m}"
                ));
            }
            if r == 0 && is_input {
                return invalid(format!(
                    "request input {k} (operand {idx}): dimension {j} is 0; a 0 extent is \
                     allowed only for outputs"
                ));
            }
        }
    }
    let dims = combined_dimensions(model_dims, &arg.dimensions)
        .map_err(|e| ValidationError(format!("request {what} {k} (operand {idx}): {}", e.0)))?;
    let fully_specified = is_fully_specified(ty, &dims);
    // A memory-domain buffer brings its own dimensions; hal/domain.rs checks them.
    let in_token = matches!(
        request.pools.get(loc.pool_index as usize),
        Some(MemoryPool::Token(_))
    );
    if is_input && !fully_specified && !in_token {
        return invalid(format!(
            "request input {k} (operand {idx}): dimensions {dims:?} are not fully specified \
             (unknown rank or a 0 extent) by the model and the request together"
        ));
    }

    // Location.
    let p = loc.pool_index as usize;
    let Some(pool) = request.pools.get(p) else {
        return invalid(format!(
            "request {what} {k} (operand {idx}): pool index {p} out of range (the request has \
             {} pools)",
            request.pools.len()
        ));
    };
    let size = match pool {
        MemoryPool::Memory(m) if m.kind == MemoryKind::HardwareBuffer && m.size == 0 => None,
        MemoryPool::Memory(m) => Some(m.size),
        MemoryPool::Token(_) => None,
    };
    let Some(size) = size else {
        // A token buffer or a hardware_buffer of unknown size is used whole.
        if loc.offset != 0 || loc.length != 0 || loc.padding != 0 {
            let kind = match pool {
                MemoryPool::Token(_) => "a memory-domain token",
                MemoryPool::Memory(_) => "a hardware_buffer of unknown size",
            };
            return invalid(format!(
                "request {what} {k} (operand {idx}): pool {p} is {kind}, used whole; offset, \
                 length and padding must be 0, are {}, {} and {}",
                loc.offset, loc.length, loc.padding
            ));
        }
        return Ok(());
    };
    let end = location_end(loc);
    if end > size {
        return invalid(format!(
            "request {what} {k} (operand {idx}): location [offset {}, length {}, padding {}] \
             ends at {end}, outside pool {p} ({size} bytes)",
            loc.offset, loc.length, loc.padding
        ));
    }

    // Length.
    if is_input {
        let Some(needed) = byte_size(ty, &dims) else {
            return invalid(format!(
                "request input {k} (operand {idx}): the size of {} {dims:?} overflows",
                ty.name()
            ));
        };
        if u64::from(loc.length) != needed {
            return invalid(format!(
                "request input {k} (operand {idx}): length {} differs from the {needed} bytes \
                 of {} {dims:?} (length 0 only with has_no_value)",
                loc.length,
                ty.name()
            ));
        }
    } else if loc.length == 0 && fully_specified {
        return invalid(format!(
            "request output {k} (operand {idx}): length 0 for an output of known shape {dims:?}; \
             only a dynamic output may have an empty buffer"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ErrorStatus;
    use crate::{Operation, OperationType, Subgraph, SymmPerChannelQuantParams};

    use OperandLifetime as L;
    use OperandType as T;

    const SHAPE: [u32; 4] = [1, 2, 2, 1];

    fn memory(kind: MemoryKind, size: u64) -> Memory {
        let fd = nnaccel_uapi::sys::memfd_create(c"t", size).unwrap();
        Memory {
            kind,
            fd: Arc::new(fd),
            size,
        }
    }

    fn ashmem(size: u64) -> Memory {
        memory(MemoryKind::Ashmem, size)
    }

    fn opnd(ty: OperandType, dims: &[u32], lifetime: OperandLifetime) -> Operand {
        Operand {
            operand_type: ty,
            dimensions: dims.to_vec(),
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location: DataLocation::default(),
            extra_params: None,
        }
    }

    fn loc(pool_index: u32, offset: u32, length: u32) -> DataLocation {
        DataLocation {
            pool_index,
            offset,
            length,
            padding: 0,
        }
    }

    /// ADD(in0, in1, act=0) -> out over [1,2,2,1] of `ty` with `scale`/`zp`.
    fn add_model(ty: OperandType, scale: f32, zp: i32) -> Model {
        let tensor = |lifetime| Operand {
            scale,
            zero_point: zp,
            ..opnd(ty, &SHAPE, lifetime)
        };
        let mut act = opnd(T::Int32, &[], L::ConstantCopy);
        act.location = loc(0, 0, 4);
        Model {
            operands: vec![
                tensor(L::SubgraphInput),
                tensor(L::SubgraphInput),
                act,
                tensor(L::SubgraphOutput),
            ],
            operations: vec![Operation {
                operation_type: OperationType::Add,
                inputs: vec![0, 1, 2],
                outputs: vec![3],
            }],
            input_indexes: vec![0, 1],
            output_indexes: vec![3],
            operand_values: vec![0; 4],
            pools: Vec::new(),
            relax_computation_float32_to_float16: false,
            referenced: Vec::new(),
        }
    }

    /// The basic valid model: ADD of two [1,2,2,1] TENSOR_FLOAT32, INT32 CONSTANT_COPY act.
    fn model() -> Model {
        add_model(T::TensorFloat32, 0.0, 0)
    }

    /// As [`model`], but the second addend is a CONSTANT_REFERENCE at offset 64 of pool 0.
    fn ref_model() -> Model {
        let mut m = model();
        m.operands[1].lifetime = L::ConstantReference;
        m.operands[1].location = loc(0, 64, 16);
        m.input_indexes = vec![0];
        m.pools = vec![ashmem(128)];
        m
    }

    /// DEQUANTIZE of a [2,3] TENSOR_QUANT8_SYMM_PER_CHANNEL input (channel_dim 1).
    fn per_channel_model() -> Model {
        let mut input = opnd(T::TensorQuant8SymmPerChannel, &[2, 3], L::SubgraphInput);
        input.extra_params = Some(SymmPerChannelQuantParams {
            scales: vec![0.5, 0.25, 1.0],
            channel_dim: 1,
        });
        Model {
            operands: vec![input, opnd(T::TensorFloat32, &[2, 3], L::SubgraphOutput)],
            operations: vec![Operation {
                operation_type: OperationType::Dequantize,
                inputs: vec![0],
                outputs: vec![1],
            }],
            input_indexes: vec![0],
            output_indexes: vec![1],
            ..Model::default()
        }
    }

    /// A valid request for [`model`]: one 192-byte pool, inputs at 0 and 64, output at 128.
    fn request() -> Request {
        let arg = |offset| RequestArgument {
            has_no_value: false,
            location: loc(0, offset, 16),
            dimensions: Vec::new(),
        };
        Request {
            inputs: vec![arg(0), arg(64)],
            outputs: vec![arg(128)],
            pools: vec![MemoryPool::Memory(ashmem(192))],
        }
    }

    fn model_err(m: &Model) -> String {
        let e = validate_model(m).expect_err("model should be invalid");
        assert_eq!(ErrorStatus::from(&e), ErrorStatus::InvalidArgument);
        e.0
    }

    fn request_err(r: &Request, m: &Model) -> String {
        validate_model(m).expect("the model itself should be valid");
        let e = validate_request(r, m).expect_err("request should be invalid");
        assert_eq!(ErrorStatus::from(&e), ErrorStatus::InvalidArgument);
        e.0
    }

    fn assert_mentions(msg: &str, parts: &[&str]) {
        for p in parts {
            assert!(msg.contains(p), "{msg:?} does not mention {p:?}");
        }
    }

    /// A referenced subgraph: RELU of a [4] TENSOR_FLOAT32 input, plus one SUBGRAPH operand
    /// per entry of `refers` naming that subgraph.
    fn relu_subgraph(refers: &[u32]) -> Subgraph {
        let mut operands = vec![
            opnd(T::TensorFloat32, &[4], L::SubgraphInput),
            opnd(T::TensorFloat32, &[4], L::SubgraphOutput),
        ];
        operands.extend(refers.iter().map(|&r| Operand::subgraph(r)));
        Subgraph {
            operands,
            operations: vec![Operation {
                operation_type: OperationType::Relu,
                inputs: vec![0],
                outputs: vec![1],
            }],
            input_indexes: vec![0],
            output_indexes: vec![1],
        }
    }

    /// [`model`] with SUBGRAPH operands naming `main_refers` (appended as operands 4, 5, ...)
    /// and one [`relu_subgraph`] per entry of `subgraphs`, naming the subgraphs listed there.
    fn model_with_subgraphs(main_refers: &[u32], subgraphs: &[&[u32]]) -> Model {
        let mut m = model();
        m.operands
            .extend(main_refers.iter().map(|&r| Operand::subgraph(r)));
        m.referenced = subgraphs.iter().map(|r| relu_subgraph(r)).collect();
        m
    }

    // --- valid baselines ----------------------------------------------------------------------

    #[test]
    fn valid_models_pass() {
        validate_model(&model()).unwrap();
        validate_model(&ref_model()).unwrap();
        validate_model(&per_channel_model()).unwrap();
        validate_model(&add_model(T::TensorQuant8Asymm, 0.5, 128)).unwrap();
        validate_model(&add_model(T::TensorQuant8AsymmSigned, 0.5, -128)).unwrap();
        validate_model(&add_model(T::TensorQuant16Asymm, 0.5, 65535)).unwrap();
        validate_model(&add_model(T::TensorQuant8Symm, 0.5, 0)).unwrap();
        validate_model(&add_model(T::TensorQuant16Symm, 0.5, 0)).unwrap();
        // Operations in any order, as long as there is no cycle.
        let mut m = model();
        m.operands[3].lifetime = L::TemporaryVariable;
        m.operands
            .push(opnd(T::TensorFloat32, &SHAPE, L::SubgraphOutput));
        m.output_indexes = vec![4];
        m.operations.insert(
            0,
            Operation {
                operation_type: OperationType::Relu,
                inputs: vec![3],
                outputs: vec![4],
            },
        );
        validate_model(&m).unwrap();
    }

    #[test]
    fn valid_request_passes() {
        let m = model();
        validate_request(&request(), &m).unwrap();
        // Dimensions repeated in the request are fine.
        let mut r = request();
        r.inputs[0].dimensions = SHAPE.to_vec();
        r.outputs[0].dimensions = vec![1, 2, 0, 1];
        validate_request(&r, &m).unwrap();
        // The same request against the CONSTANT_REFERENCE variant (one input).
        let mut r = request();
        r.inputs.pop();
        validate_request(&r, &ref_model()).unwrap();
    }

    #[test]
    fn validation_error_is_invalid_argument() {
        let e = ValidationError("x".into());
        assert_eq!(ErrorStatus::from(&e), ErrorStatus::InvalidArgument);
        assert_eq!(e.to_string(), "x");
    }

    // --- index ranges -------------------------------------------------------------------------

    #[test]
    fn operation_input_index_out_of_range_is_invalid() {
        let mut m = model();
        m.operations[0].inputs[1] = 4;
        assert_mentions(
            &model_err(&m),
            &["operation 0", "input 1", "operand 4", "out of range"],
        );
    }

    #[test]
    fn operation_output_index_out_of_range_is_invalid() {
        let mut m = model();
        m.operations[0].outputs[0] = 9;
        assert_mentions(
            &model_err(&m),
            &["operation 0", "output 0", "operand 9", "out of range"],
        );
    }

    #[test]
    fn model_input_index_out_of_range_is_invalid() {
        let mut m = model();
        m.input_indexes[1] = 4;
        assert_mentions(
            &model_err(&m),
            &["model input 1", "operand 4", "out of range"],
        );
    }

    #[test]
    fn model_output_index_out_of_range_is_invalid() {
        let mut m = model();
        m.output_indexes[0] = 100;
        assert_mentions(
            &model_err(&m),
            &["model output 0", "operand 100", "out of range"],
        );
    }

    // --- CONSTANT_COPY ------------------------------------------------------------------------

    #[test]
    fn constant_copy_with_nonzero_pool_index_is_invalid() {
        let mut m = model();
        m.operands[2].location.pool_index = 1;
        assert_mentions(
            &model_err(&m),
            &["operand 2", "CONSTANT_COPY", "pool index 0"],
        );
    }

    #[test]
    fn constant_copy_outside_operand_values_is_invalid() {
        let mut m = model();
        m.operands[2].location.offset = 1;
        assert_mentions(
            &model_err(&m),
            &["operand 2", "CONSTANT_COPY", "outside operand_values"],
        );
    }

    #[test]
    fn constant_copy_offset_overflow_is_invalid() {
        let mut m = model();
        m.operands[2].location.offset = u32::MAX - 1;
        assert_mentions(&model_err(&m), &["operand 2", "outside operand_values"]);
    }

    #[test]
    fn constant_copy_length_not_byte_size_is_invalid() {
        let mut m = model();
        m.operand_values = vec![0; 8];
        validate_model(&m).unwrap();
        m.operands[2].location.length = 8;
        assert_mentions(
            &model_err(&m),
            &["operand 2", "CONSTANT_COPY length 8", "4 bytes"],
        );
    }

    // --- CONSTANT_REFERENCE -------------------------------------------------------------------

    #[test]
    fn constant_reference_pool_index_out_of_range_is_invalid() {
        let mut m = ref_model();
        m.operands[1].location.pool_index = 1;
        assert_mentions(
            &model_err(&m),
            &["operand 1", "CONSTANT_REFERENCE", "pool index 1"],
        );
    }

    #[test]
    fn constant_reference_outside_pool_is_invalid() {
        let mut m = ref_model();
        m.operands[1].location.offset = 120;
        assert_mentions(
            &model_err(&m),
            &["operand 1", "outside pool 0", "128 bytes"],
        );
    }

    #[test]
    fn constant_reference_offset_overflow_is_invalid() {
        // offset + length wraps around in u32 arithmetic (to 14), which must not pass.
        let mut m = ref_model();
        m.operands[1].location.offset = u32::MAX - 1;
        assert_mentions(&model_err(&m), &["operand 1", "outside pool 0"]);
    }

    #[test]
    fn constant_reference_padding_outside_pool_is_invalid() {
        let mut m = ref_model();
        m.operands[1].location.padding = 48;
        validate_model(&m).unwrap();
        m.operands[1].location.padding = 49;
        assert_mentions(
            &model_err(&m),
            &["operand 1", "padding 49", "outside pool 0"],
        );
    }

    #[test]
    fn constant_reference_length_not_byte_size_is_invalid() {
        let mut m = ref_model();
        m.operands[1].location.length = 12;
        assert_mentions(
            &model_err(&m),
            &["operand 1", "CONSTANT_REFERENCE length 12", "16 bytes"],
        );
    }

    #[test]
    fn constant_with_unknown_dimensions_is_invalid() {
        let mut m = ref_model();
        m.operands[1].dimensions = vec![1, 0, 2, 1];
        assert_mentions(&model_err(&m), &["operand 1", "unknown dimensions"]);
        let mut m = ref_model();
        m.operands[1].dimensions = Vec::new();
        assert_mentions(&model_err(&m), &["operand 1", "unknown dimensions"]);
    }

    // --- other lifetimes ----------------------------------------------------------------------

    #[test]
    fn non_constant_with_nonzero_location_is_invalid() {
        for (operand, field) in [(0, 0), (1, 1), (3, 2)] {
            let mut m = model();
            match field {
                0 => m.operands[operand].location.pool_index = 1,
                1 => m.operands[operand].location.offset = 4,
                _ => m.operands[operand].location.length = 16,
            }
            assert_mentions(
                &model_err(&m),
                &[&format!("operand {operand}"), "all-zero location"],
            );
        }
        // NO_VALUE and TEMPORARY_VARIABLE too.
        let mut m = model();
        m.operands.push(opnd(T::TensorFloat32, &[], L::NoValue));
        validate_model(&m).unwrap();
        m.operands[4].location.padding = 1;
        assert_mentions(
            &model_err(&m),
            &["operand 4", "NO_VALUE", "all-zero location"],
        );
    }

    #[test]
    fn subgraph_type_and_lifetime_go_together() {
        let mut m = model();
        m.operands[4 - 1].lifetime = L::Subgraph;
        assert_mentions(&model_err(&m), &["operand 3", "SUBGRAPH", "only with it"]);
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.operands[4].lifetime = L::TemporaryVariable;
        assert_mentions(&model_err(&m), &["operand 4", "SUBGRAPH", "only with it"]);
    }

    // --- referenced subgraphs -----------------------------------------------------------------

    #[test]
    fn a_model_with_nested_subgraphs_is_structurally_valid() {
        // main -> 1 -> 0, main -> 2 -> 0: subgraph 0 is shared, nothing is recursive.
        let m = model_with_subgraphs(&[1, 2], &[&[], &[0], &[0]]);
        let g = validate_model_structure(&m).unwrap();
        assert_eq!(g.referenced.len(), 3);
        assert_eq!(
            g.operands[5].lifetime,
            nnaccel_cpu::Lifetime::Subgraph { index: 2 }
        );
        assert_eq!(g.referenced[1].operands.len(), 3);
        assert_eq!(g.referenced[1].input_indexes, vec![0]);
        assert_eq!(g.referenced[2].operations[0].op, OperationType::Relu);
    }

    #[test]
    fn subgraph_operand_with_a_pool_index_or_length_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.operands[4].location.pool_index = 1;
        assert_mentions(&model_err(&m), &["operand 4", "SUBGRAPH", "pool index 0"]);
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.operands[4].location.length = 4;
        assert_mentions(&model_err(&m), &["operand 4", "SUBGRAPH", "length 4"]);
    }

    #[test]
    fn subgraph_operand_naming_a_missing_subgraph_is_invalid() {
        let m = model_with_subgraphs(&[1], &[&[]]);
        assert_mentions(
            &model_err(&m),
            &["operand 4", "subgraph 1", "out of range", "1 referenced"],
        );
        let m = model_with_subgraphs(&[0], &[&[7]]);
        assert_mentions(
            &model_err(&m),
            &[
                "referenced subgraph 0: operand 2",
                "subgraph 7",
                "out of range",
            ],
        );
    }

    #[test]
    fn referenced_subgraph_operand_errors_name_the_subgraph() {
        let mut m = model_with_subgraphs(&[0, 1, 2], &[&[], &[], &[]]);
        m.referenced[2].operands.push(Operand {
            scale: 1.0,
            ..opnd(T::TensorFloat32, &[4], L::TemporaryVariable)
        });
        assert_mentions(
            &model_err(&m),
            &["referenced subgraph 2: operand 2", "scale 0"],
        );
    }

    #[test]
    fn referenced_subgraph_constant_outside_operand_values_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        let mut c = opnd(T::Int32, &[], L::ConstantCopy);
        c.location = loc(0, 2, 4); // operand_values has 4 bytes
        m.referenced[0].operands.push(c);
        assert_mentions(
            &model_err(&m),
            &[
                "referenced subgraph 0: operand 2",
                "CONSTANT_COPY",
                "outside operand_values",
            ],
        );
    }

    #[test]
    fn referenced_subgraph_constant_reference_outside_its_pool_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.pools = vec![ashmem(16)];
        let mut c = opnd(T::TensorFloat32, &[4], L::ConstantReference);
        c.location = loc(0, 8, 16);
        m.referenced[0].operands.push(c);
        assert_mentions(
            &model_err(&m),
            &["referenced subgraph 0: operand 2", "outside pool 0"],
        );
    }

    #[test]
    fn referenced_subgraph_input_must_be_subgraph_input() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.referenced[0].operands[0].lifetime = L::TemporaryVariable;
        assert_mentions(
            &model_err(&m),
            &["referenced subgraph 0: model input 0", "SUBGRAPH_INPUT"],
        );
    }

    #[test]
    fn referenced_subgraph_output_not_listed_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.referenced[0].output_indexes.clear();
        assert_mentions(
            &model_err(&m),
            &[
                "referenced subgraph 0: operand 1",
                "SUBGRAPH_OUTPUT",
                "not listed",
            ],
        );
    }

    #[test]
    fn referenced_subgraph_input_index_out_of_range_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.referenced[0].input_indexes.push(9);
        assert_mentions(
            &model_err(&m),
            &[
                "referenced subgraph 0: model input 1",
                "operand 9",
                "out of range",
            ],
        );
    }

    #[test]
    fn referenced_subgraph_operation_index_out_of_range_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.referenced[0].operations[0].inputs = vec![5];
        assert_mentions(
            &model_err(&m),
            &[
                "referenced subgraph 0: operation 0 (RELU)",
                "operand 5",
                "out of range",
            ],
        );
    }

    #[test]
    fn referenced_subgraph_output_never_written_is_invalid() {
        let mut m = model_with_subgraphs(&[0], &[&[]]);
        m.referenced[0].operations.clear();
        assert_mentions(
            &model_err(&m),
            &["referenced subgraph 0: operand 1", "never written"],
        );
    }

    #[test]
    fn an_unreachable_referenced_subgraph_is_invalid() {
        // Subgraph 1 names subgraph 2, but nothing names subgraph 1.
        let m = model_with_subgraphs(&[0], &[&[], &[2], &[]]);
        assert_mentions(&model_err(&m), &["referenced subgraph 1", "not reachable"]);
    }

    #[test]
    fn a_subgraph_referring_to_itself_is_invalid() {
        let m = model_with_subgraphs(&[0], &[&[0]]);
        assert_mentions(
            &model_err(&m),
            &["referenced subgraph 0", "refers to itself"],
        );
    }

    #[test]
    fn a_reference_cycle_through_several_subgraphs_is_invalid() {
        // main -> 0 -> 1 -> 2 -> 1.
        let m = model_with_subgraphs(&[0], &[&[1], &[2], &[1]]);
        assert_mentions(
            &model_err(&m),
            &["referenced subgraph 1", "refers to itself", "recursion"],
        );
    }

    #[test]
    fn more_referenced_subgraphs_than_the_cap_are_invalid() {
        let n = MAX_REFERENCED_SUBGRAPHS + 1;
        let main: Vec<u32> = (0..n as u32).collect();
        let subs = vec![&[][..]; n];
        let m = model_with_subgraphs(&main, &subs);
        assert_mentions(
            &model_err(&m),
            &[&format!("{n} referenced subgraphs"), "more than"],
        );
        // At the cap it is fine.
        let m = model_with_subgraphs(&main[..n - 1], &subs[..n - 1]);
        validate_model_structure(&m).unwrap();
    }

    #[test]
    fn nesting_deeper_than_the_cap_is_invalid() {
        // A chain main -> 0 -> 1 -> ... -> depth-1: `depth` levels.
        let chain = |depth: usize| {
            let next: Vec<Vec<u32>> = (0..depth)
                .map(|k| {
                    if k + 1 < depth {
                        vec![k as u32 + 1]
                    } else {
                        vec![]
                    }
                })
                .collect();
            let refs: Vec<&[u32]> = next.iter().map(Vec::as_slice).collect();
            model_with_subgraphs(&[0], &refs)
        };
        validate_model_structure(&chain(MAX_SUBGRAPH_NESTING)).unwrap();
        let deep = MAX_SUBGRAPH_NESTING + 1;
        assert_mentions(
            &model_err(&chain(deep)),
            &[&format!("nest {deep} deep"), "more than"],
        );
    }

    #[test]
    fn model_input_with_wrong_lifetime_is_invalid() {
        let mut m = model();
        m.input_indexes.push(2);
        assert_mentions(
            &model_err(&m),
            &[
                "model input 2",
                "operand 2",
                "CONSTANT_COPY",
                "SUBGRAPH_INPUT",
            ],
        );
    }

    #[test]
    fn model_input_listed_twice_is_invalid() {
        let mut m = model();
        m.input_indexes.push(0);
        assert_mentions(
            &model_err(&m),
            &["model input 2", "operand 0", "more than once"],
        );
    }

    #[test]
    fn subgraph_input_not_listed_is_invalid() {
        let mut m = model();
        m.input_indexes.pop();
        assert_mentions(
            &model_err(&m),
            &["operand 1", "SUBGRAPH_INPUT", "not listed"],
        );
    }

    #[test]
    fn model_output_with_wrong_lifetime_is_invalid() {
        let mut m = model();
        m.output_indexes.push(0);
        assert_mentions(
            &model_err(&m),
            &["model output 1", "operand 0", "SUBGRAPH_OUTPUT"],
        );
    }

    #[test]
    fn model_output_listed_twice_is_invalid() {
        let mut m = model();
        m.output_indexes.push(3);
        assert_mentions(
            &model_err(&m),
            &["model output 1", "operand 3", "more than once"],
        );
    }

    #[test]
    fn subgraph_output_not_listed_is_invalid() {
        let mut m = model();
        m.output_indexes.clear();
        assert_mentions(
            &model_err(&m),
            &["operand 3", "SUBGRAPH_OUTPUT", "not listed"],
        );
    }

    // --- writers and cycles -------------------------------------------------------------------

    #[test]
    fn operand_written_twice_is_invalid() {
        let mut m = model();
        m.operations.push(m.operations[0].clone());
        assert_mentions(&model_err(&m), &["operand 3", "operation 0", "operation 1"]);
    }

    #[test]
    fn writing_a_non_temporary_operand_is_invalid() {
        let mut m = model();
        m.operations.push(Operation {
            operation_type: OperationType::Relu,
            inputs: vec![0],
            outputs: vec![1],
        });
        assert_mentions(
            &model_err(&m),
            &["operation 1", "output 0", "operand 1", "SUBGRAPH_INPUT"],
        );
    }

    #[test]
    fn operation_without_outputs_is_invalid() {
        let mut m = model();
        m.operations[0].outputs.clear();
        assert_mentions(&model_err(&m), &["operation 0", "no outputs"]);
    }

    #[test]
    fn temporary_never_written_is_invalid() {
        let mut m = model();
        m.operands
            .push(opnd(T::TensorFloat32, &SHAPE, L::TemporaryVariable));
        assert_mentions(
            &model_err(&m),
            &["operand 4", "TEMPORARY_VARIABLE", "never written"],
        );
    }

    #[test]
    fn subgraph_output_never_written_is_invalid() {
        let mut m = model();
        m.operations.clear();
        assert_mentions(
            &model_err(&m),
            &["operand 3", "SUBGRAPH_OUTPUT", "never written"],
        );
    }

    #[test]
    fn operation_cycle_is_invalid() {
        let mut m = model();
        m.operations[0].inputs[1] = 3; // reads its own output
        assert_mentions(&model_err(&m), &["operations [0]", "cycle"]);
        // A two-operation cycle through temporaries.
        let mut m = model();
        m.operands
            .push(opnd(T::TensorFloat32, &SHAPE, L::TemporaryVariable));
        m.operations[0].inputs[1] = 4;
        m.operations.push(Operation {
            operation_type: OperationType::Relu,
            inputs: vec![3],
            outputs: vec![4],
        });
        assert_mentions(&model_err(&m), &["operations [0, 1]", "cycle"]);
    }

    // --- quantization parameters --------------------------------------------------------------

    #[test]
    fn quant_scale_not_positive_is_invalid() {
        for ty in [
            T::TensorQuant8Asymm,
            T::TensorQuant8AsymmSigned,
            T::TensorQuant8Symm,
            T::TensorQuant16Asymm,
            T::TensorQuant16Symm,
        ] {
            for bad in [0.0, -0.5, f32::NAN, f32::INFINITY] {
                let zp = if ty == T::TensorQuant8Asymm { 128 } else { 0 };
                let mut m = add_model(ty, 0.5, zp);
                validate_model(&m).unwrap();
                m.operands[1].scale = bad;
                assert_mentions(&model_err(&m), &["operand 1", ty.name(), "scale > 0"]);
            }
        }
    }

    #[test]
    fn quant8_asymm_zero_point_out_of_range_is_invalid() {
        for bad in [-1, 256] {
            let mut m = add_model(T::TensorQuant8Asymm, 0.5, 0);
            m.operands[0].zero_point = bad;
            assert_mentions(&model_err(&m), &["operand 0", "zero point", "[0, 255]"]);
        }
    }

    #[test]
    fn quant8_asymm_signed_zero_point_out_of_range_is_invalid() {
        for bad in [-129, 128] {
            let mut m = add_model(T::TensorQuant8AsymmSigned, 0.5, 0);
            m.operands[0].zero_point = bad;
            assert_mentions(&model_err(&m), &["operand 0", "zero point", "[-128, 127]"]);
        }
    }

    #[test]
    fn quant16_asymm_zero_point_out_of_range_is_invalid() {
        for bad in [-1, 65536] {
            let mut m = add_model(T::TensorQuant16Asymm, 0.5, 0);
            m.operands[0].zero_point = bad;
            assert_mentions(&model_err(&m), &["operand 0", "zero point", "[0, 65535]"]);
        }
    }

    #[test]
    fn symm_zero_point_nonzero_is_invalid() {
        for ty in [T::TensorQuant8Symm, T::TensorQuant16Symm] {
            let mut m = add_model(ty, 0.5, 0);
            m.operands[3].zero_point = 1;
            assert_mentions(&model_err(&m), &["operand 3", ty.name(), "zero point 0"]);
        }
    }

    #[test]
    fn non_quant_type_with_scale_is_invalid() {
        let mut m = model();
        m.operands[0].scale = 1.0;
        assert_mentions(&model_err(&m), &["operand 0", "TENSOR_FLOAT32", "scale 0"]);
        let mut m = model();
        m.operands[2].scale = 1.0;
        assert_mentions(&model_err(&m), &["operand 2", "INT32", "scale 0"]);
    }

    #[test]
    fn non_quant_type_with_zero_point_is_invalid() {
        let mut m = model();
        m.operands[3].zero_point = 3;
        assert_mentions(
            &model_err(&m),
            &["operand 3", "TENSOR_FLOAT32", "zero point 0"],
        );
    }

    #[test]
    fn tensor_int32_with_negative_scale_is_invalid() {
        let mut m = add_model(T::TensorInt32, 0.0, 0);
        validate_model(&m).unwrap();
        m.operands[0].scale = 0.25; // a bias scale is allowed
        m.operands[1].scale = 0.25;
        m.operands[3].scale = 0.25;
        validate_model(&m).unwrap();
        m.operands[1].scale = -0.25;
        assert_mentions(&model_err(&m), &["operand 1", "TENSOR_INT32", ">= 0"]);
    }

    // --- per-channel quantization -------------------------------------------------------------

    #[test]
    fn per_channel_params_on_other_type_are_invalid() {
        let mut m = model();
        m.operands[0].extra_params = Some(SymmPerChannelQuantParams {
            scales: vec![1.0],
            channel_dim: 0,
        });
        assert_mentions(
            &model_err(&m),
            &["operand 0", "per-channel", "TENSOR_FLOAT32"],
        );
    }

    #[test]
    fn per_channel_type_without_params_is_invalid() {
        let mut m = per_channel_model();
        m.operands[0].extra_params = None;
        assert_mentions(&model_err(&m), &["operand 0", "needs per-channel"]);
    }

    #[test]
    fn per_channel_scale_count_not_channel_extent_is_invalid() {
        let mut m = per_channel_model();
        if let Some(p) = m.operands[0].extra_params.as_mut() {
            p.scales.pop();
        }
        assert_mentions(
            &model_err(&m),
            &["operand 0", "2 per-channel scales", "extent 3"],
        );
    }

    #[test]
    fn per_channel_scale_not_positive_is_invalid() {
        for bad in [0.0, -1.0, f32::NAN] {
            let mut m = per_channel_model();
            if let Some(p) = m.operands[0].extra_params.as_mut() {
                p.scales[2] = bad;
            }
            assert_mentions(&model_err(&m), &["operand 0", "per-channel scale 2", "> 0"]);
        }
    }

    #[test]
    fn per_channel_channel_dim_outside_rank_is_invalid() {
        let mut m = per_channel_model();
        if let Some(p) = m.operands[0].extra_params.as_mut() {
            p.channel_dim = 2;
        }
        assert_mentions(&model_err(&m), &["operand 0", "channel_dim 2", "rank 2"]);
    }

    #[test]
    fn per_channel_unknown_channel_extent_is_invalid() {
        let mut m = per_channel_model();
        m.operands[0].dimensions = vec![2, 0];
        assert_mentions(&model_err(&m), &["operand 0", "unknown (0) extent"]);
    }

    #[test]
    fn per_channel_type_with_scale_or_zero_point_is_invalid() {
        let mut m = per_channel_model();
        m.operands[0].scale = 0.5;
        assert_mentions(&model_err(&m), &["operand 0", "scale 0"]);
        let mut m = per_channel_model();
        m.operands[0].zero_point = 1;
        assert_mentions(&model_err(&m), &["operand 0", "zero point 0"]);
    }

    // --- types and dimensions -----------------------------------------------------------------

    #[test]
    fn scalar_with_dimensions_is_invalid() {
        let mut m = model();
        m.operands[2].dimensions = vec![1];
        assert_mentions(
            &model_err(&m),
            &["operand 2", "scalar type INT32", "rank 1"],
        );
    }

    #[test]
    fn operand_size_overflowing_u32_is_invalid() {
        let mut m = model();
        m.operands[0].dimensions = vec![1, 65536, 16384, 1];
        assert_mentions(&model_err(&m), &["operand 0", "more than a u32"]);
    }

    // --- pools --------------------------------------------------------------------------------

    #[test]
    fn model_pool_of_size_zero_is_invalid() {
        let mut m = model();
        m.pools.push(ashmem(0));
        assert_mentions(&model_err(&m), &["model pool 0", "ashmem", "size > 0"]);
        let mut m = model();
        m.pools.push(memory(
            MemoryKind::MmapFd {
                prot: libc::PROT_READ,
                offset: 0,
            },
            0,
        ));
        assert_mentions(&model_err(&m), &["model pool 0", "mmap_fd", "size > 0"]);
    }

    #[test]
    fn hardware_buffer_model_pool_is_structurally_valid() {
        let mut m = ref_model();
        m.pools = vec![memory(MemoryKind::HardwareBuffer, 0)];
        validate_model(&m).unwrap();
        // The constant's length must still match its type.
        m.operands[1].location.length = 4;
        assert_mentions(&model_err(&m), &["operand 1", "length 4"]);
    }

    // --- per-operation signatures -------------------------------------------------------------

    #[test]
    fn operation_signature_mismatch_is_invalid() {
        let mut m = model();
        m.operands[2].operand_type = T::Float32; // ADD's activation must be INT32
        assert_mentions(&model_err(&m), &["operation 0", "ADD", "INT32"]);
    }

    #[test]
    fn operation_argument_count_mismatch_is_invalid() {
        let mut m = model();
        m.operations[0].inputs.pop();
        assert_mentions(&model_err(&m), &["operation 0", "ADD", "inputs"]);
    }

    // --- requests: argument lists -------------------------------------------------------------

    #[test]
    fn request_input_count_mismatch_is_invalid() {
        let mut r = request();
        r.inputs.pop();
        assert_mentions(&request_err(&r, &model()), &["1 inputs", "model has 2"]);
    }

    #[test]
    fn request_output_count_mismatch_is_invalid() {
        let mut r = request();
        r.outputs.push(r.outputs[0].clone());
        assert_mentions(&request_err(&r, &model()), &["2 outputs", "model has 1"]);
    }

    #[test]
    fn has_no_value_with_location_is_invalid() {
        let m = model();
        let mut r = request();
        r.inputs[1] = RequestArgument {
            has_no_value: true,
            ..RequestArgument::default()
        };
        validate_request(&r, &m).unwrap();
        r.inputs[1].location.length = 16;
        assert_mentions(&request_err(&r, &m), &["request input 1", "has_no_value"]);
        let mut r = request();
        r.outputs[0].has_no_value = true;
        assert_mentions(&request_err(&r, &m), &["request output 0", "has_no_value"]);
    }

    #[test]
    fn has_no_value_with_dimensions_is_invalid() {
        let mut r = request();
        r.inputs[0] = RequestArgument {
            has_no_value: true,
            location: DataLocation::default(),
            dimensions: SHAPE.to_vec(),
        };
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 0", "has_no_value"],
        );
    }

    // --- requests: dimensions -----------------------------------------------------------------

    #[test]
    fn request_dimensions_with_wrong_rank_is_invalid() {
        let mut r = request();
        r.inputs[1].dimensions = vec![1, 4, 1];
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 1", "rank 3", "rank 4"],
        );
        let mut r = request();
        r.outputs[0].dimensions = vec![4];
        assert_mentions(
            &request_err(&r, &model()),
            &["request output 0", "rank 1", "rank 4"],
        );
    }

    #[test]
    fn request_dimensions_disagreeing_with_model_are_invalid() {
        let mut r = request();
        r.inputs[0].dimensions = vec![1, 2, 1, 2];
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 0", "dimension 2 is 1", "model's is 2"],
        );
        let mut r = request();
        r.outputs[0].dimensions = vec![2, 0, 0, 0];
        assert_mentions(
            &request_err(&r, &model()),
            &["request output 0", "dimension 0 is 2"],
        );
    }

    #[test]
    fn request_input_zero_extent_is_invalid() {
        let mut r = request();
        r.inputs[0].dimensions = vec![1, 2, 0, 1];
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 0", "dimension 2 is 0", "only for outputs"],
        );
    }

    #[test]
    fn request_output_zero_extent_is_valid() {
        let mut r = request();
        r.outputs[0].dimensions = vec![0, 0, 0, 0];
        validate_request(&r, &model()).unwrap();
    }

    #[test]
    fn request_input_not_fully_specified_is_invalid() {
        let mut m = model();
        m.operands[0].dimensions = vec![0, 2, 2, 1];
        let mut r = request();
        assert_mentions(
            &request_err(&r, &m),
            &["request input 0", "not fully specified"],
        );
        r.inputs[0].dimensions = SHAPE.to_vec();
        validate_request(&r, &m).unwrap();
        // Unknown rank in the model and none in the request.
        m.operands[0].dimensions = Vec::new();
        r.inputs[0].dimensions = Vec::new();
        assert_mentions(
            &request_err(&r, &m),
            &["request input 0", "not fully specified"],
        );
        r.inputs[0].dimensions = vec![4];
        validate_request(&r, &m).unwrap();
    }

    #[test]
    fn request_dimensions_on_scalar_are_invalid() {
        // The activation becomes a third model input (an INT32 scalar).
        let mut m = model();
        m.operands[2].lifetime = L::SubgraphInput;
        m.operands[2].location = DataLocation::default();
        m.input_indexes.push(2);
        let mut r = request();
        r.inputs.push(RequestArgument {
            has_no_value: false,
            location: loc(0, 32, 4),
            dimensions: Vec::new(),
        });
        validate_request(&r, &m).unwrap();
        r.inputs[2].dimensions = vec![1];
        assert_mentions(
            &request_err(&r, &m),
            &["request input 2", "scalar type INT32"],
        );
    }

    // --- requests: locations and pools --------------------------------------------------------

    #[test]
    fn request_pool_index_out_of_range_is_invalid() {
        let mut r = request();
        r.outputs[0].location.pool_index = 1;
        assert_mentions(
            &request_err(&r, &model()),
            &["request output 0", "pool index 1", "1 pools"],
        );
    }

    #[test]
    fn request_location_outside_pool_is_invalid() {
        let mut r = request();
        r.inputs[1].location.offset = 180;
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 1", "outside pool 0", "192 bytes"],
        );
    }

    #[test]
    fn request_location_offset_overflow_is_invalid() {
        let mut r = request();
        r.inputs[0].location.offset = u32::MAX - 7; // offset + length wraps to 8 in u32
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 0", "outside pool 0"],
        );
    }

    #[test]
    fn request_padding_outside_pool_is_invalid() {
        let mut r = request();
        r.outputs[0].location.padding = 48;
        validate_request(&r, &model()).unwrap();
        r.outputs[0].location.padding = 49;
        assert_mentions(
            &request_err(&r, &model()),
            &["request output 0", "padding 49", "outside pool 0"],
        );
    }

    #[test]
    fn request_pool_of_size_zero_is_invalid() {
        let mut r = request();
        r.pools.push(MemoryPool::Memory(ashmem(0)));
        assert_mentions(&request_err(&r, &model()), &["request pool 1", "size > 0"]);
    }

    #[test]
    fn request_token_zero_is_invalid() {
        let mut r = request();
        r.pools.push(MemoryPool::Token(0));
        assert_mentions(&request_err(&r, &model()), &["request pool 1", "token 0"]);
    }

    #[test]
    fn request_token_argument_with_offset_or_length_is_invalid() {
        let m = model();
        let mut r = request();
        r.pools.push(MemoryPool::Token(7));
        r.outputs[0].location = loc(1, 0, 0);
        validate_request(&r, &m).unwrap();
        r.outputs[0].location = loc(1, 0, 16);
        assert_mentions(
            &request_err(&r, &m),
            &["request output 0", "pool 1", "token", "must be 0"],
        );
        r.outputs[0].location = loc(1, 64, 0);
        assert_mentions(
            &request_err(&r, &m),
            &["request output 0", "pool 1", "token", "must be 0"],
        );
    }

    #[test]
    fn request_hardware_buffer_argument_with_offset_or_length_is_invalid() {
        let m = model();
        let mut r = request();
        r.pools
            .push(MemoryPool::Memory(memory(MemoryKind::HardwareBuffer, 0)));
        r.inputs[0].location = loc(1, 0, 0);
        validate_request(&r, &m).unwrap();
        r.inputs[0].location = loc(1, 0, 16);
        assert_mentions(
            &request_err(&r, &m),
            &["request input 0", "hardware_buffer", "must be 0"],
        );
    }

    // --- requests: lengths --------------------------------------------------------------------

    #[test]
    fn request_input_length_not_byte_size_is_invalid() {
        for bad in [12, 20] {
            let mut r = request();
            r.inputs[1].location.length = bad;
            assert_mentions(
                &request_err(&r, &model()),
                &["request input 1", &format!("length {bad}"), "16 bytes"],
            );
        }
    }

    #[test]
    fn request_input_length_zero_without_has_no_value_is_invalid() {
        let mut r = request();
        r.inputs[0].location.length = 0;
        assert_mentions(
            &request_err(&r, &model()),
            &["request input 0", "length 0", "has_no_value"],
        );
    }

    #[test]
    fn request_output_length_may_differ_from_byte_size() {
        let m = model();
        for len in [1, 15, 17, 64] {
            let mut r = request();
            r.outputs[0].location.length = len;
            validate_request(&r, &m).unwrap();
        }
    }

    #[test]
    fn request_output_length_zero_is_invalid() {
        let mut r = request();
        r.outputs[0].location.length = 0;
        assert_mentions(
            &request_err(&r, &model()),
            &["request output 0", "length 0"],
        );
    }

    #[test]
    fn request_output_length_zero_for_dynamic_output_is_valid() {
        let mut m = model();
        m.operands[3].dimensions = Vec::new();
        let mut r = request();
        r.outputs[0].location.length = 0;
        validate_request(&r, &m).unwrap();
        m.operands[3].dimensions = vec![1, 0, 2, 1];
        validate_request(&r, &m).unwrap();
    }

    // --- combined dimensions ------------------------------------------------------------------

    #[test]
    fn combined_dimensions_rules() {
        assert_eq!(combined_dimensions(&[1, 2], &[]).unwrap(), vec![1, 2]);
        assert_eq!(combined_dimensions(&[], &[3, 4]).unwrap(), vec![3, 4]);
        assert_eq!(combined_dimensions(&[], &[]).unwrap(), Vec::<u32>::new());
        assert_eq!(
            combined_dimensions(&[0, 2, 0], &[5, 0, 0]).unwrap(),
            vec![5, 2, 0]
        );
        assert_eq!(combined_dimensions(&[1, 2], &[1, 2]).unwrap(), vec![1, 2]);
        let e = combined_dimensions(&[1, 2], &[1, 2, 3]).unwrap_err();
        assert_eq!(ErrorStatus::from(&e), ErrorStatus::InvalidArgument);
        assert_mentions(&e.0, &["rank 3", "rank 2"]);
        let e = combined_dimensions(&[1, 2], &[1, 3]).unwrap_err();
        assert_mentions(&e.0, &["dimension 1 is 3", "model's is 2"]);
    }
}
