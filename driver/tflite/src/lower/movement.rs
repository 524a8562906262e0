//! Data movement and the rest: SPLIT/SPLIT_V, PACK/UNPACK, slices, GATHER, TRANSPOSE,
//! space/batch/depth rearrangements, normalizations, ARG_MAX/ARG_MIN, CAST, TILE, SELECT,
//! TOPK_V2, FILL, EMBEDDING_LOOKUP, and the element-wise ops built from two NNAPI operations.

use nnaccel_hal::{OperandType, OperationType};

use super::LowerError;
use super::basic::normalize_axis;
use super::build::{Builder, is_float, plain};
use super::conv::reshape_target;
use crate::graph::{Activation, ElementType, Options};

type Result<T> = std::result::Result<T, LowerError>;

/// SPLIT (inputs: axis tensor, input) and SPLIT_V (input, sizes, axis tensor): NNAPI's SPLIT
/// when the pieces are equal, else one SLICE per output.
pub(super) fn split(b: &mut Builder<'_>, v: bool) -> Result<()> {
    let (xt, axis_t) = if v {
        b.arity(3..=3, b.cur()?.outputs.len())?;
        (b.input(0)?, b.input(2)?)
    } else {
        b.arity(2..=2, b.cur()?.outputs.len())?;
        (b.input(1)?, b.input(0)?)
    };
    let shape = b.shape(xt)?.to_vec();
    let axis = match b.const_ints(axis_t)?[..] {
        [a] => normalize_axis(b, a, shape.len() as i32)?,
        ref other => return Err(b.err(format!("axis {other:?} is not one value"))),
    };
    let outs = b.cur()?.outputs.len();
    if outs == 0 {
        return Err(b.err("no outputs"));
    }
    let dim = shape[axis as usize];
    let sizes: Vec<i64> = if v {
        let mut sizes: Vec<i64> = b
            .const_ints(b.input(1)?)?
            .into_iter()
            .map(i64::from)
            .collect();
        if sizes.len() != outs {
            return Err(b.err(format!("{} sizes for {outs} outputs", sizes.len())));
        }
        let known: i64 = sizes.iter().filter(|&&s| s >= 0).sum();
        if let Some(k) = sizes.iter().position(|&s| s < 0) {
            sizes[k] = i64::from(dim) - known;
        }
        sizes
    } else {
        if dim < 0 || dim % outs as i32 != 0 {
            return Err(b.err(format!("dimension {dim} does not split in {outs}")));
        }
        vec![i64::from(dim / outs as i32); outs]
    };
    if sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != i64::from(dim) {
        return Err(b.err(format!("sizes {sizes:?} do not add up to {dim}")));
    }
    // Each size is now in 0..=dim, so the sums below stay in i32.
    let sizes: Vec<i32> = sizes.into_iter().map(|s| s as i32).collect();
    let x = b.value(xt)?;
    let ys = b.define_outputs()?;
    if sizes.iter().all(|&s| s == sizes[0]) {
        let a = b.int(axis);
        let n = b.int(outs as i32);
        b.op(OperationType::Split, vec![x, a, n], ys);
        return Ok(());
    }
    let mut start = 0;
    for (y, &size) in ys.into_iter().zip(&sizes) {
        let mut begin = vec![0; shape.len()];
        let mut len = vec![-1; shape.len()];
        begin[axis as usize] = start;
        len[axis as usize] = size;
        start += size;
        let begin = b.ints(&begin);
        let len = b.ints(&len);
        b.op(OperationType::Slice, vec![x, begin, len], vec![y]);
    }
    Ok(())
}

/// PACK: each input RESHAPEd with a 1 inserted at the axis, then a CONCATENATION.
pub(super) fn pack(b: &mut Builder<'_>) -> Result<()> {
    let Options::Pack { axis, .. } = b.cur()?.options else {
        return Err(b.err("no PACK options"));
    };
    let n = b.cur()?.inputs.len();
    if n == 0 {
        return Err(b.err("no inputs"));
    }
    b.arity(n..=n, 1)?;
    let yt = b.output(0)?;
    let out_rank = b.shape(yt)?.len() as i32;
    let axis = normalize_axis(b, axis, out_rank)?;
    let mut parts = Vec::with_capacity(n + 1);
    for k in 0..n {
        let t = b.input(k)?;
        let x = b.value(t)?;
        let mut dims = b.dims(x).to_vec();
        if b.shape(t)?.is_empty() {
            dims.clear();
        }
        if axis as usize > dims.len() {
            return Err(b.err(format!("axis {axis} beyond input {k}'s rank")));
        }
        dims.insert(axis as usize, 1);
        let shape: Vec<i32> = dims
            .iter()
            .map(|&d| if d == 0 { -1 } else { d as i32 })
            .collect();
        let p = b.temp_like(x, dims);
        let s = b.ints(&shape);
        b.op(OperationType::Reshape, vec![x, s], vec![p]);
        parts.push(p);
    }
    let y = b.define(yt)?;
    parts.push(b.int(axis));
    b.op(OperationType::Concatenation, parts, vec![y]);
    Ok(())
}

/// UNPACK: a SPLIT along the axis, then a RESHAPE of each piece dropping it.
pub(super) fn unpack(b: &mut Builder<'_>) -> Result<()> {
    let Options::Unpack { axis, .. } = b.cur()?.options else {
        return Err(b.err("no UNPACK options"));
    };
    let outs = b.cur()?.outputs.len();
    b.arity(1..=1, outs)?;
    let xt = b.input(0)?;
    let axis = normalize_axis(b, axis, b.shape(xt)?.len() as i32)?;
    let x = b.value(xt)?;
    let mut piece_dims = b.dims(x).to_vec();
    if piece_dims
        .get(axis as usize)
        .is_some_and(|&d| d != 0 && d as usize != outs)
    {
        return Err(b.err(format!(
            "{outs} outputs for dimension {piece_dims:?}[{axis}]"
        )));
    }
    piece_dims[axis as usize] = 1;
    let ys = b.define_outputs()?;
    let pieces: Vec<u32> = (0..outs)
        .map(|_| b.temp_like(x, piece_dims.clone()))
        .collect();
    let a = b.int(axis);
    let n = b.int(outs as i32);
    b.op(OperationType::Split, vec![x, a, n], pieces.clone());
    for (k, (p, y)) in pieces.into_iter().zip(ys).enumerate() {
        let shape = reshape_target(b, b.output(k)?)?;
        let s = b.ints(&shape);
        b.op(OperationType::Reshape, vec![p, s], vec![y]);
    }
    Ok(())
}

/// STRIDED_SLICE: input, begin, end, strides, begin mask, end mask, shrink mask (no
/// ellipsis, new axes or offset: NNAPI has none).
pub(super) fn strided_slice(b: &mut Builder<'_>) -> Result<()> {
    b.arity(4..=4, 1)?;
    let Options::StridedSlice {
        begin_mask,
        end_mask,
        ellipsis_mask,
        new_axis_mask,
        shrink_axis_mask,
        offset,
    } = b.cur()?.options
    else {
        return Err(b.err("no STRIDED_SLICE options"));
    };
    if ellipsis_mask != 0 || new_axis_mask != 0 || offset {
        return Err(b.err("an ellipsis mask, a new-axis mask or offset has no NNAPI equivalent"));
    }
    let mut args = vec![b.value(b.input(0)?)?];
    for k in 1..4 {
        let v = b.const_ints(b.input(k)?)?;
        args.push(b.ints(&v));
    }
    for m in [begin_mask, end_mask, shrink_axis_mask] {
        args.push(b.int(m));
    }
    let y = b.define(b.output(0)?)?;
    b.op(OperationType::StridedSlice, args, vec![y]);
    Ok(())
}

/// An operation of the input tensor and constant INT32 tensors (SLICE: begin, size;
/// TRANSPOSE: perm; TILE: multiples; SPACE_TO_BATCH_ND etc. add a layout after).
pub(super) fn with_int_tensors(
    b: &mut Builder<'_>,
    ty: OperationType,
    tensors: usize,
    layout: bool,
) -> Result<()> {
    b.arity(1 + tensors..=1 + tensors, 1)?;
    let mut args = vec![b.value(b.input(0)?)?];
    for k in 1..=tensors {
        let t = b.input(k)?;
        let v = b.const_ints(t)?;
        let mut o = plain(
            OperandType::TensorInt32,
            super::build::dims_of(b.tensor(t)?).map_err(|e| b.err(e))?,
        );
        o.scale = 0.0;
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        args.push(b.constant(o, bytes));
    }
    if layout {
        args.push(b.boolean(false));
    }
    let y = b.define(b.output(0)?)?;
    b.op(ty, args, vec![y]);
    Ok(())
}

/// BATCH_TO_SPACE_ND: TFLite's crops must be zero (NNAPI's operation has none).
pub(super) fn batch_to_space(b: &mut Builder<'_>) -> Result<()> {
    b.arity(3..=3, 1)?;
    let crops = b.const_ints(b.input(2)?)?;
    if crops.iter().any(|&c| c != 0) {
        return Err(b.err(format!(
            "crops {crops:?}: NNAPI's BATCH_TO_SPACE_ND has none"
        )));
    }
    let x = b.value(b.input(0)?)?;
    let block = b.const_ints(b.input(1)?)?;
    let block = b.ints(&block);
    let layout = b.boolean(false);
    let y = b.define(b.output(0)?)?;
    b.op(
        OperationType::BatchToSpaceNd,
        vec![x, block, layout],
        vec![y],
    );
    Ok(())
}

/// SPACE_TO_DEPTH, DEPTH_TO_SPACE: input, block size, layout.
pub(super) fn block(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(1..=1, 1)?;
    let Options::BlockSize(size) = b.cur()?.options else {
        return Err(b.err("no block size"));
    };
    let x = b.value(b.input(0)?)?;
    let s = b.int(size);
    let layout = b.boolean(false);
    let y = b.define(b.output(0)?)?;
    b.op(ty, vec![x, s, layout], vec![y]);
    Ok(())
}

/// L2_NORMALIZATION (along the last axis); a fused activation becomes its own operation.
pub(super) fn l2_normalization(b: &mut Builder<'_>) -> Result<()> {
    b.arity(1..=1, 1)?;
    let act = match b.cur()?.options {
        Options::Activation(a) => a,
        _ => Activation::None,
    };
    let x = b.value(b.input(0)?)?;
    let y = b.define(b.output(0)?)?;
    let fused = b.separate(y, act)?;
    b.op_fused(OperationType::L2Normalization, vec![x], &fused);
    Ok(())
}

/// LOCAL_RESPONSE_NORMALIZATION: input, radius, bias, alpha, beta.
pub(super) fn local_response_normalization(b: &mut Builder<'_>) -> Result<()> {
    b.arity(1..=1, 1)?;
    let Options::LocalResponseNormalization {
        radius,
        bias,
        alpha,
        beta,
    } = b.cur()?.options
    else {
        return Err(b.err("no LOCAL_RESPONSE_NORMALIZATION options"));
    };
    let x = b.value(b.input(0)?)?;
    let ty = b.ty(x);
    let mut args = vec![x, b.int(radius)];
    for v in [bias, alpha, beta] {
        args.push(b.float_like(ty, v));
    }
    let y = b.define(b.output(0)?)?;
    b.op(OperationType::LocalResponseNormalization, args, vec![y]);
    Ok(())
}

/// ARG_MAX, ARG_MIN: input, axis scalar; the output must be INT32.
pub(super) fn arg_min_max(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    b.arity(2..=2, 1)?;
    let yt = b.output(0)?;
    if b.tensor(yt)?.element_type != ElementType::Int32 {
        return Err(b.err("an INT64 index output (NNAPI gives INT32)"));
    }
    let axis = match b.const_ints(b.input(1)?)?[..] {
        [a] => a,
        ref other => return Err(b.err(format!("axis {other:?} is not one value"))),
    };
    let x = b.value(b.input(0)?)?;
    let a = b.int(axis);
    let y = b.define(yt)?;
    b.op(ty, vec![x, a], vec![y]);
    Ok(())
}

/// GATHER: input, axis, indices (INT32; batch_dims 0).
pub(super) fn gather(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 1)?;
    let Options::Gather { axis, batch_dims } = b.cur()?.options else {
        return Err(b.err("no GATHER options"));
    };
    if batch_dims != 0 {
        return Err(b.err(format!("batch_dims {batch_dims} (NNAPI gathers with none)")));
    }
    let it = b.input(1)?;
    let x = b.value(b.input(0)?)?;
    let i = if b.tensor(it)?.element_type == ElementType::Int64 && b.is_constant(it) {
        let v = b.const_ints(it)?;
        let dims = super::build::dims_of(b.tensor(it)?).map_err(|e| b.err(e))?;
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.constant(plain(OperandType::TensorInt32, dims), bytes)
    } else {
        b.value(it)?
    };
    if b.ty(i) != OperandType::TensorInt32 {
        return Err(b.err("indices must be INT32"));
    }
    let a = b.int(axis);
    let y = b.define(b.output(0)?)?;
    b.op(OperationType::Gather, vec![x, a, i], vec![y]);
    Ok(())
}

/// SELECT, SELECT_V2: NNAPI's SELECT (condition and both values of one shape).
pub(super) fn select(b: &mut Builder<'_>) -> Result<()> {
    b.arity(3..=3, 1)?;
    let ts = [b.input(0)?, b.input(1)?, b.input(2)?];
    let shapes: Vec<&[i32]> = ts.iter().map(|&t| b.shape(t)).collect::<Result<_>>()?;
    if shapes[0] != shapes[1] || shapes[1] != shapes[2] {
        return Err(b.err(format!(
            "shapes {shapes:?} differ (NNAPI's SELECT does not broadcast)"
        )));
    }
    let mut args = Vec::with_capacity(3);
    for t in ts {
        args.push(b.value(t)?);
    }
    let y = b.define(b.output(0)?)?;
    b.op(OperationType::Select, args, vec![y]);
    Ok(())
}

/// TOPK_V2: input, k scalar; outputs values and INT32 indices.
pub(super) fn top_k(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 2)?;
    let k = match b.const_ints(b.input(1)?)?[..] {
        [k] => k,
        ref other => return Err(b.err(format!("k {other:?} is not one value"))),
    };
    let x = b.value(b.input(0)?)?;
    let k = b.int(k);
    let ys = b.define_outputs()?;
    b.op(OperationType::TopkV2, vec![x, k], ys);
    Ok(())
}

/// FILL: dims tensor, value scalar (FLOAT32, FLOAT16 or INT32).
pub(super) fn fill(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 1)?;
    let dims = b.value(b.input(0)?)?;
    if b.ty(dims) != OperandType::TensorInt32 {
        return Err(b.err("the dims tensor must be INT32"));
    }
    let vt = b.input(1)?;
    let bytes = b.const_bytes(vt)?;
    let value = match (b.tensor(vt)?.element_type, bytes.len()) {
        (ElementType::Float32, 4) => b.float_like(
            OperandType::TensorFloat32,
            f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        ),
        (ElementType::Float16, 2) => b.float_like(
            OperandType::TensorFloat16,
            nnaccel_cpu::f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])),
        ),
        (ElementType::Int32, 4) => {
            b.int(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        }
        (ty, n) => return Err(b.err(format!("a fill value of {} ({n} bytes)", ty.name()))),
    };
    let y = b.define(b.output(0)?)?;
    b.op(OperationType::Fill, vec![dims, value], vec![y]);
    Ok(())
}

/// An operation whose NNAPI inputs and outputs are TFLite's, in the same order.
pub(super) fn direct(b: &mut Builder<'_>, ty: OperationType) -> Result<()> {
    let n = b.cur()?.inputs.len();
    let args = (0..n)
        .map(|k| b.value(b.input(k)?))
        .collect::<Result<Vec<_>>>()?;
    let ys = b.define_outputs()?;
    if ys.is_empty() {
        return Err(b.err("no outputs"));
    }
    b.op(ty, args, ys);
    Ok(())
}

/// EMBEDDING_LOOKUP: ids, values (the same order in both).
pub(super) fn embedding_lookup(b: &mut Builder<'_>) -> Result<()> {
    super::basic::binary(b, OperationType::EmbeddingLookup)
}

/// SQUARE: MUL of the input with itself.
pub(super) fn square(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    let none = b.int(0);
    b.op(OperationType::Mul, vec![x, x, none], vec![y]);
    Ok(())
}

/// ADD_N: a chain of ADDs (float: the partial sums have no quantization otherwise).
pub(super) fn add_n(b: &mut Builder<'_>) -> Result<()> {
    let n = b.cur()?.inputs.len();
    if n < 2 {
        return Err(b.err(format!("{n} inputs, expected at least 2")));
    }
    b.arity(n..=n, 1)?;
    let xs: Vec<u32> = (0..n)
        .map(|k| b.value(b.input(k)?))
        .collect::<Result<_>>()?;
    let y = b.define(b.output(0)?)?;
    if !is_float(b.ty(y)) && n > 2 {
        return Err(b.err("a quantized ADD_N of more than two inputs"));
    }
    let none = b.int(0);
    let mut acc = xs[0];
    for (k, &x) in xs.iter().enumerate().skip(1) {
        let dest = if k + 1 == n { y } else { b.temp_same(y) };
        b.op(OperationType::Add, vec![acc, x, none], vec![dest]);
        acc = dest;
    }
    Ok(())
}

/// CEIL: −floor(−x) (float).
pub(super) fn ceil(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    if !is_float(b.ty(x)) {
        return Err(b.err("CEIL of a quantized tensor"));
    }
    let n = b.temp_same(y);
    let f = b.temp_same(y);
    b.op(OperationType::Neg, vec![x], vec![n]);
    b.op(OperationType::Floor, vec![n], vec![f]);
    b.op(OperationType::Neg, vec![f], vec![y]);
    Ok(())
}

/// RELU_0_TO_1: RELU1 (clamp to [-1, 1]) then RELU.
pub(super) fn relu_0_to_1(b: &mut Builder<'_>) -> Result<()> {
    let (x, y) = b.unary_io()?;
    let t = b.temp_same(y);
    b.op(OperationType::Relu1, vec![x], vec![t]);
    b.op(OperationType::Relu, vec![t], vec![y]);
    Ok(())
}

/// The most elements a padded or reversed dimension may have: the index list of its GATHER
/// is made here.
const MAX_GATHER_INDEXES: i64 = 1 << 20;

/// GATHERs `x` along `axis` at `indexes` into a new temporary (or into `dest`).
fn gather_along(
    b: &mut Builder<'_>,
    x: u32,
    axis: usize,
    indexes: &[i32],
    dest: Option<u32>,
) -> u32 {
    let out = dest.unwrap_or_else(|| {
        let mut dims = b.dims(x).to_vec();
        if let Some(d) = dims.get_mut(axis) {
            *d = indexes.len() as u32;
        }
        b.temp_like(x, dims)
    });
    let a = b.int(axis as i32);
    let i = b.ints(indexes);
    b.op(OperationType::Gather, vec![x, a, i], vec![out]);
    out
}

/// One GATHER per axis to rewrite (the last into the output); a copy when there is none.
fn gathers(b: &mut Builder<'_>, x: u32, per_axis: Vec<(usize, Vec<i32>)>) -> Result<()> {
    let y = b.define(b.output(0)?)?;
    if per_axis.is_empty() {
        b.copy(x, y);
        return Ok(());
    }
    let last = per_axis.len() - 1;
    let mut cur = x;
    for (k, (axis, indexes)) in per_axis.into_iter().enumerate() {
        cur = gather_along(b, cur, axis, &indexes, (k == last).then_some(y));
    }
    Ok(())
}

/// The stored size of dimension `axis` of tensor `t`, bounded for index lists.
fn gather_dim(b: &Builder<'_>, t: usize, axis: usize) -> Result<i64> {
    let n = b.shape(t)?.get(axis).copied().map(i64::from).unwrap_or(-1);
    if !(1..=MAX_GATHER_INDEXES).contains(&n) {
        return Err(b.err(format!("dimension {axis} of size {n}")));
    }
    Ok(n)
}

/// MIRROR_PAD: per padded axis a GATHER of the mirrored indexes, the input's in between
/// (REFLECT leaves the edge out of the mirror, SYMMETRIC repeats it).
pub(super) fn mirror_pad(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 1)?;
    let Options::MirrorPad { symmetric } = b.cur()?.options else {
        return Err(b.err("no MIRROR_PAD options"));
    };
    let xt = b.input(0)?;
    let pads = b.const_ints(b.input(1)?)?;
    let rank = b.shape(xt)?.len();
    if pads.len() != rank * 2 {
        return Err(b.err(format!("{} padding values for rank {rank}", pads.len())));
    }
    let edge = i64::from(!symmetric);
    let mut per_axis = Vec::new();
    for axis in 0..rank {
        let (before, after) = (i64::from(pads[2 * axis]), i64::from(pads[2 * axis + 1]));
        if before == 0 && after == 0 {
            continue;
        }
        let n = gather_dim(b, xt, axis)?;
        if before < 0 || after < 0 || before > n - edge || after > n - edge {
            return Err(b.err(format!(
                "padding ({before}, {after}) of a dimension of {n} (at most {})",
                n - edge
            )));
        }
        // Before: edge+before-1 … edge (reversed); the input; after: n-1-edge … down.
        let idx: Vec<i32> = (0..before)
            .rev()
            .map(|k| k + edge)
            .chain(0..n)
            .chain((0..after).map(|k| n - 1 - edge - k))
            .map(|v| v as i32)
            .collect();
        per_axis.push((axis, idx));
    }
    let x = b.value(xt)?;
    gathers(b, x, per_axis)
}

/// REVERSE_V2: per axis a GATHER of the indexes n-1 … 0.
pub(super) fn reverse(b: &mut Builder<'_>) -> Result<()> {
    b.arity(2..=2, 1)?;
    let xt = b.input(0)?;
    let rank = b.shape(xt)?.len() as i32;
    let axes = b.const_ints(b.input(1)?)?;
    let mut per_axis = Vec::new();
    for a in axes {
        let axis = normalize_axis(b, a, rank)? as usize;
        let n = gather_dim(b, xt, axis)?;
        per_axis.push((axis, (0..n).rev().map(|v| v as i32).collect()));
    }
    let x = b.value(xt)?;
    gathers(b, x, per_axis)
}

/// FLOOR_DIV (`mod_too` false) and FLOOR_MOD: NNAPI's DIV floors for TENSOR_INT32; a float
/// quotient gets a FLOOR. FLOOR_MOD is a − floor(a / b) · b.
pub(super) fn floor_div_mod(b: &mut Builder<'_>, mod_too: bool) -> Result<()> {
    b.arity(2..=2, 1)?;
    let x = b.value(b.input(0)?)?;
    let d = b.value(b.input(1)?)?;
    let y = b.define(b.output(0)?)?;
    let float = is_float(b.ty(y));
    if !float && b.ty(y) != OperandType::TensorInt32 {
        return Err(b.err("a quantized FLOOR_DIV/FLOOR_MOD (NNAPI's DIV has no quantized form)"));
    }
    let none = b.int(0);
    let quotient = if float || mod_too { b.temp_same(y) } else { y };
    b.op(OperationType::Div, vec![x, d, none], vec![quotient]);
    let floored = if float {
        let f = if mod_too { b.temp_same(y) } else { y };
        b.op(OperationType::Floor, vec![quotient], vec![f]);
        f
    } else {
        quotient
    };
    if mod_too {
        let product = b.temp_same(y);
        b.op(OperationType::Mul, vec![floored, d, none], vec![product]);
        b.op(OperationType::Sub, vec![x, product, none], vec![y]);
    }
    Ok(())
}
