//! Shape and data-movement kernels: STRIDED_SLICE, SLICE, SPACE_TO_BATCH_ND,
//! BATCH_TO_SPACE_ND, GATHER, SPLIT, EXPAND_DIMS, PAD_V2, TILE, CHANNEL_SHUFFLE, FILL, RANK.
//!
//! Every kernel here only moves elements (or writes a constant), so quantized tensors keep
//! their input's scale and zero point and one index computation serves every operand type:
//! each kernel computes, for every output element, the index of its source element (or
//! [`PAD`] for a padding element) and [`pick`] copies them.

use super::opdef::OpDef;
use super::reduce::const_i32s;
use super::{KResult, OpCtx, count, resolve_axis, strides, to_u32};
use crate::check::{Ck, F32_Q8, Issue, MOVE_TENSOR, float_scalar};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;
use OperationType as O;

/// Every tensor type RANK accepts.
const RANK_IN: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
    T::TensorQuant8Symm,
    T::TensorQuant8SymmPerChannel,
    T::TensorQuant16Symm,
    T::TensorQuant16Asymm,
    T::TensorBool8,
];

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: O::StridedSlice,
        types: F32_Q8,
        check: check_strided_slice,
        run: strided_slice,
    },
    OpDef {
        op: O::Slice,
        types: MOVE_TENSOR,
        check: check_slice,
        run: slice,
    },
    OpDef {
        op: O::SpaceToBatchNd,
        types: F32_Q8,
        check: check_space_to_batch,
        run: space_to_batch,
    },
    OpDef {
        op: O::BatchToSpaceNd,
        types: F32_Q8,
        check: check_batch_to_space,
        run: batch_to_space,
    },
    OpDef {
        op: O::Gather,
        types: MOVE_TENSOR,
        check: check_gather,
        run: gather,
    },
    OpDef {
        op: O::Split,
        types: MOVE_TENSOR,
        check: check_split,
        run: split,
    },
    OpDef {
        op: O::ExpandDims,
        types: MOVE_TENSOR,
        check: check_expand_dims,
        run: expand_dims,
    },
    OpDef {
        op: O::PadV2,
        types: F32_Q8,
        check: check_pad_v2,
        run: pad_v2,
    },
    OpDef {
        op: O::Tile,
        types: MOVE_TENSOR,
        check: check_tile,
        run: tile,
    },
    OpDef {
        op: O::ChannelShuffle,
        types: F32_Q8,
        check: check_channel_shuffle,
        run: channel_shuffle,
    },
    OpDef {
        op: O::Fill,
        types: &[T::TensorInt32],
        check: check_fill,
        run: fill,
    },
    OpDef {
        op: O::Rank,
        types: RANK_IN,
        check: check_rank,
        run: rank,
    },
];

// ---------------------------------------------------------------------------------------------
// Static checks.

fn invalid<T>(msg: impl Into<String>) -> Result<T, Issue> {
    Err(Issue::Invalid(msg.into()))
}

/// The constant INT32 scalar at input `i`, if constant.
fn konst1(c: &Ck<'_>, i: usize) -> Option<i32> {
    const_i32s(c, i).and_then(|v| v.first().copied())
}

/// The declared rank of input `i`, when known (dimensions given).
fn rank_of(c: &Ck<'_>, i: usize) -> Option<usize> {
    let o = c.inp(i).ok()?;
    (!o.dimensions.is_empty()).then_some(o.dimensions.len())
}

/// Output `k` has input 0's type, scale and zero point.
fn same_as_input(c: &Ck<'_>, k: usize) -> Result<(), Issue> {
    let (i, o) = (c.inp(0)?, c.out(k)?);
    if o.ty != i.ty {
        return invalid(format!(
            "output {k} type {} differs from input type {}",
            o.ty.name(),
            i.ty.name()
        ));
    }
    if o.ty.is_quantized() && (o.scale != i.scale || o.zero_point != i.zero_point) {
        return invalid(format!(
            "output {k} scale and zero point must equal the input's"
        ));
    }
    Ok(())
}

/// Input 0's declared rank, when known, is within `lo..=hi`.
fn rank_within(c: &Ck<'_>, lo: usize, hi: usize) -> Result<(), Issue> {
    match rank_of(c, 0) {
        Some(r) if r < lo || r > hi => invalid(format!("input rank {r} outside {lo}..={hi}")),
        _ => Ok(()),
    }
}

/// A constant 1-D argument `i` (`what`), if its length is known, has `n` entries.
fn list_len(c: &Ck<'_>, i: usize, n: Option<usize>, what: &str) -> Result<(), Issue> {
    let o = c.inp(i)?;
    if o.dimensions.len() > 1 {
        return invalid(format!("{what} must be 1-D, has shape {:?}", o.dimensions));
    }
    if let (Some(n), Some(&len)) = (n, o.dimensions.first())
        && len != 0
        && len as usize != n
    {
        return invalid(format!("{what} has {len} entries for an input of rank {n}"));
    }
    Ok(())
}

/// A constant axis argument `i` lies in `[-r, r)`.
fn axis_in_range(c: &Ck<'_>, i: usize, r: Option<usize>) -> Result<(), Issue> {
    if let (Some(a), Some(r)) = (konst1(c, i), r) {
        let r = r as i64;
        if i64::from(a) < -r || i64::from(a) >= r {
            return invalid(format!("axis {a} out of range for rank {r}"));
        }
    }
    Ok(())
}

fn check_strided_slice(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[7], 1)?;
    c.is(1, T::TensorInt32, "begin")?;
    c.is(2, T::TensorInt32, "end")?;
    c.is(3, T::TensorInt32, "strides")?;
    c.is(4, T::Int32, "begin_mask")?;
    c.is(5, T::Int32, "end_mask")?;
    c.is(6, T::Int32, "shrink_axis_mask")?;
    same_as_input(c, 0)?;
    rank_within(c, 1, 4)?;
    let r = rank_of(c, 0);
    for (i, what) in [(1, "begin"), (2, "end"), (3, "strides")] {
        list_len(c, i, r, what)?;
    }
    if const_i32s(c, 3).is_some_and(|s| s.contains(&0)) {
        return invalid("strides must be non-zero");
    }
    for (i, what) in [(4, "begin_mask"), (5, "end_mask"), (6, "shrink_axis_mask")] {
        if let (Some(m), Some(r)) = (konst1(c, i), r) {
            mask_fits(m, r).map_err(|e| Issue::Invalid(format!("{what} {e}")))?;
        }
    }
    Ok(())
}

/// A mask has no bits at or beyond `rank`.
fn mask_fits(m: i32, rank: usize) -> Result<(), String> {
    if rank < 32 && (m as u32) >> rank != 0 {
        return Err(format!("has bits beyond rank {rank}"));
    }
    Ok(())
}

fn check_slice(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    c.is(1, T::TensorInt32, "begin")?;
    c.is(2, T::TensorInt32, "size")?;
    same_as_input(c, 0)?;
    let r = rank_of(c, 0);
    list_len(c, 1, r, "begin")?;
    list_len(c, 2, r, "size")?;
    if const_i32s(c, 1).is_some_and(|b| b.iter().any(|&x| x < 0)) {
        return invalid("begin must be >= 0");
    }
    if const_i32s(c, 2).is_some_and(|s| s.iter().any(|&x| x < -1)) {
        return invalid("size must be >= 0 or -1");
    }
    Ok(())
}

/// The 4-D input and the block shape `[2]` of SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND.
fn check_block(c: &Ck<'_>) -> Result<(), Issue> {
    c.is(1, T::TensorInt32, "block_shape")?;
    same_as_input(c, 0)?;
    rank_within(c, 4, 4)?;
    let b = c.inp(1)?;
    if !b.dimensions.is_empty() && b.dimensions != [2] {
        return invalid(format!(
            "block_shape must have shape [2], has {:?}",
            b.dimensions
        ));
    }
    if const_i32s(c, 1).is_some_and(|b| b.iter().any(|&x| x < 1)) {
        return invalid("block_shape entries must be >= 1");
    }
    Ok(())
}

fn check_space_to_batch(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3, 4], 1)?;
    check_block(c)?;
    c.is(2, T::TensorInt32, "paddings")?;
    c.opt(3, T::Bool, "layout")?;
    let p = c.inp(2)?;
    if !p.dimensions.is_empty() && p.dimensions != [2, 2] {
        return invalid(format!(
            "paddings must have shape [2, 2], has {:?}",
            p.dimensions
        ));
    }
    if const_i32s(c, 2).is_some_and(|p| p.iter().any(|&x| x < 0)) {
        return invalid("paddings must be >= 0");
    }
    Ok(())
}

fn check_batch_to_space(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2, 3], 1)?;
    check_block(c)?;
    c.opt(2, T::Bool, "layout")
}

fn check_gather(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    c.is(1, T::Int32, "axis")?;
    c.is(2, T::TensorInt32, "indices")?;
    same_as_input(c, 0)?;
    axis_in_range(c, 1, rank_of(c, 0))?;
    if const_i32s(c, 2).is_some_and(|v| v.iter().any(|&x| x < 0)) {
        return invalid("indices must be >= 0");
    }
    Ok(())
}

fn check_split(c: &Ck<'_>) -> Result<(), Issue> {
    if c.outs.is_empty() {
        return invalid("needs at least one output");
    }
    c.counts(&[3], c.outs.len())?;
    c.is(1, T::Int32, "axis")?;
    c.is(2, T::Int32, "num_splits")?;
    for k in 0..c.outs.len() {
        same_as_input(c, k)?;
    }
    axis_in_range(c, 1, rank_of(c, 0))?;
    if let Some(n) = konst1(c, 2) {
        if n < 1 {
            return invalid(format!("num_splits must be > 0, is {n}"));
        }
        if n as usize != c.outs.len() {
            return invalid(format!(
                "num_splits is {n} but {} outputs are given",
                c.outs.len()
            ));
        }
    }
    Ok(())
}

fn check_expand_dims(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    c.is(1, T::Int32, "axis")?;
    same_as_input(c, 0)?;
    axis_in_range(c, 1, rank_of(c, 0).map(|r| r + 1))
}

fn check_pad_v2(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    c.is(1, T::TensorInt32, "paddings")?;
    let t0 = c.ty(0)?;
    let pad_ty = match t0 {
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => T::Int32,
        T::TensorFloat32 | T::TensorFloat16 => float_scalar(t0),
        // Not an input type of PAD_V2: reported unsupported by the table's type list.
        _ => return Ok(()),
    };
    c.is(2, pad_ty, "pad_value")?;
    same_as_input(c, 0)?;
    rank_within(c, 1, 4)?;
    let p = c.inp(1)?;
    if let Some(r) = rank_of(c, 0)
        && !p.dimensions.is_empty()
        && p.dimensions != [r as u32, 2]
    {
        return invalid(format!(
            "paddings must have shape [{r}, 2], has {:?}",
            p.dimensions
        ));
    }
    if const_i32s(c, 1).is_some_and(|p| p.iter().any(|&x| x < 0)) {
        return invalid("paddings must be >= 0");
    }
    if let Some(v) = konst1(c, 2).filter(|_| pad_ty == T::Int32) {
        let (lo, hi) = super::q8_range(t0);
        if v < lo || v > hi {
            return invalid(format!(
                "pad_value {v} outside the {} range [{lo}, {hi}]",
                t0.name()
            ));
        }
    }
    Ok(())
}

fn check_tile(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    c.is(1, T::TensorInt32, "multiples")?;
    same_as_input(c, 0)?;
    list_len(c, 1, rank_of(c, 0), "multiples")?;
    if const_i32s(c, 1).is_some_and(|m| m.iter().any(|&x| x < 0)) {
        return invalid("multiples must be >= 0");
    }
    Ok(())
}

fn check_channel_shuffle(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    c.is(1, T::Int32, "num_groups")?;
    c.is(2, T::Int32, "axis")?;
    same_as_input(c, 0)?;
    rank_within(c, 1, 4)?;
    if let Some(g) = konst1(c, 1)
        && g < 1
    {
        return invalid(format!("num_groups must be > 0, is {g}"));
    }
    axis_in_range(c, 2, rank_of(c, 0))
}

fn check_fill(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    c.is(0, T::TensorInt32, "dims")?;
    list_len(c, 0, None, "dims")?;
    let ot = c.out(0)?.ty;
    let value_ty = match ot {
        T::TensorFloat32 => T::Float32,
        T::TensorFloat16 => T::Float16,
        T::TensorInt32 => T::Int32,
        t => {
            return invalid(format!(
                "output type {} invalid (TENSOR_FLOAT32, TENSOR_FLOAT16 or TENSOR_INT32)",
                t.name()
            ));
        }
    };
    c.is(1, value_ty, "value")?;
    if const_i32s(c, 0).is_some_and(|d| d.iter().any(|&x| x < 0)) {
        return invalid("dims must be >= 0");
    }
    Ok(())
}

fn check_rank(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[1], 1)?;
    let t0 = c.ty(0)?;
    if !RANK_IN.contains(&t0) {
        return invalid(format!("input type {} is not a tensor", t0.name()));
    }
    let o = c.out(0)?;
    if o.ty != T::Int32 {
        return invalid(format!("output type {} must be INT32", o.ty.name()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Shared kernel helpers.

/// The index that marks a padding element in an index list.
const PAD: usize = usize::MAX;

/// Input `i`, checked to hold as many elements as its dimensions say.
fn tensor<'a>(ctx: &OpCtx<'a>, i: usize) -> KResult<&'a Tensor> {
    let t = ctx.t(i)?;
    if count(ctx, &t.dims)? != t.data.len() {
        return Err(ctx.err(format!("input {i} data does not match {:?}", t.dims)));
    }
    Ok(t)
}

/// The elements of `data` at `idx` (`PAD` or out of range: `pad`, or `ipad` for integer
/// storage).
fn pick(data: &Data, idx: &[usize], fpad: f32, ipad: i32) -> Data {
    fn p<V: Copy>(v: &[V], idx: &[usize], z: V) -> Vec<V> {
        idx.iter()
            .map(|&i| v.get(i).copied().unwrap_or(z))
            .collect()
    }
    match data {
        Data::F32(v) => Data::F32(p(v, idx, fpad).into()),
        Data::I32(v) => Data::I32(p(v, idx, ipad).into()),
        Data::U8(v) => Data::U8(p(v, idx, ipad.clamp(0, 255) as u8).into()),
        Data::I8(v) => Data::I8(p(v, idx, ipad.clamp(-128, 127) as i8).into()),
        Data::I16(v) => Data::I16(p(v, idx, ipad.clamp(-32768, 32767) as i16).into()),
        Data::U16(v) => Data::U16(p(v, idx, ipad.clamp(0, 65535) as u16).into()),
    }
}

/// `f(position)` for every position of `dims` in row-major order: the source index of each
/// output element. The allocation is bounded by the checked element count.
fn indices(
    ctx: &OpCtx<'_>,
    dims: &[u32],
    mut f: impl FnMut(&[usize]) -> usize,
) -> KResult<Vec<usize>> {
    let n = count(ctx, dims)?;
    let mut out = Vec::with_capacity(n);
    let mut pos = vec![0usize; dims.len()];
    for _ in 0..n {
        out.push(f(&pos));
        for k in (0..dims.len()).rev() {
            pos[k] += 1;
            if pos[k] < dims[k] as usize {
                break;
            }
            pos[k] = 0;
        }
    }
    Ok(out)
}

/// The INT32 list at input `i`, which must have `n` entries (`what` names it).
fn list<'a>(ctx: &OpCtx<'a>, i: usize, n: usize, what: &str) -> KResult<&'a [i32]> {
    let (d, v) = ctx.i32s(i)?;
    if d.len() != 1 || v.len() != n {
        return Err(ctx.err(format!("{what} must have shape [{n}], has {d:?}")));
    }
    Ok(v)
}

/// The zero point of input 0 (0 for non-quantized types): the padding of quantized tensors.
fn zero_point(ctx: &OpCtx<'_>) -> KResult<i32> {
    let o = ctx.operand(0)?;
    Ok(if o.ty.is_quantized() { o.zero_point } else { 0 })
}

fn rank_range(ctx: &OpCtx<'_>, t: &Tensor, lo: usize, hi: usize) -> KResult<usize> {
    let r = t.dims.len();
    if r < lo || r > hi {
        return Err(ctx.err(format!("input rank {r} outside {lo}..={hi}")));
    }
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Kernels.

/// NNAPI's clamping of a begin/end index to `[0, dim]` (positive stride) or `[-1, dim - 1]`
/// (negative stride), negative indexes counting from the end.
fn clamped(index: i32, dim: i64, positive: bool) -> i64 {
    let i = i64::from(index);
    if dim == 0 {
        return 0;
    }
    if positive {
        if i >= dim {
            dim
        } else {
            i.clamp(-dim, dim).rem_euclid(dim)
        }
    } else if i < -dim {
        -1
    } else {
        i.min(dim - 1).rem_euclid(dim)
    }
}

/// STRIDED_SLICE(input, begin, end, strides, begin_mask, end_mask, shrink_axis_mask).
fn strided_slice(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = rank_range(ctx, t, 1, 4)?;
    let begin = list(ctx, 1, r, "begin")?;
    let end = list(ctx, 2, r, "end")?;
    let stride = list(ctx, 3, r, "strides")?;
    let mut masks = [0i32; 3];
    for (k, what) in ["begin_mask", "end_mask", "shrink_axis_mask"]
        .iter()
        .enumerate()
    {
        masks[k] = ctx.scalar_i32(4 + k)?;
        mask_fits(masks[k], r).map_err(|e| ctx.err(format!("{what} {e}")))?;
    }
    let [bm, em, sm] = masks;
    let mut full = Vec::with_capacity(r);
    let mut out_dims = Vec::with_capacity(r);
    let mut start = Vec::with_capacity(r);
    for i in 0..r {
        let dim = i64::from(t.dims[i]);
        let s = i64::from(stride[i]);
        if s == 0 {
            return Err(ctx.err(format!("stride {i} is zero")));
        }
        let pos = s > 0;
        let b = if bm & (1 << i) != 0 {
            if pos { 0 } else { dim - 1 }
        } else {
            clamped(begin[i], dim, pos)
        };
        let e = if em & (1 << i) != 0 {
            if pos { dim } else { -1 }
        } else {
            clamped(end[i], dim, pos)
        };
        let len = if pos {
            if e > b { (e - b + s - 1) / s } else { 0 }
        } else if b > e {
            (b - e + (-s) - 1) / (-s)
        } else {
            0
        };
        if sm & (1 << i) != 0 {
            if !pos {
                return Err(ctx.err(format!(
                    "shrink_axis_mask bit {i} needs a positive stride, got {s}"
                )));
            }
            if len != 1 {
                return Err(ctx.err(format!(
                    "shrink_axis_mask bit {i} needs a slice of one element, got {len}"
                )));
            }
        } else {
            out_dims.push(to_u32(ctx, len as usize)?);
        }
        full.push(to_u32(ctx, len as usize)?);
        start.push((b, s));
    }
    let st = strides(&t.dims);
    let idx = indices(ctx, &full, |p| {
        let mut src = 0i64;
        for k in 0..r {
            src += (start[k].0 + p[k] as i64 * start[k].1) * st[k] as i64;
        }
        usize::try_from(src).unwrap_or(PAD)
    })?;
    if out_dims.is_empty() {
        out_dims.push(1);
    }
    Ok(vec![Tensor::new(out_dims, pick(&t.data, &idx, 0.0, 0))])
}

/// SLICE(input, begin, size).
fn slice(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = t.dims.len();
    if r == 0 {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let begin = list(ctx, 1, r, "begin")?;
    let size = list(ctx, 2, r, "size")?;
    let mut od = Vec::with_capacity(r);
    for i in 0..r {
        let dim = i64::from(t.dims[i]);
        let b = i64::from(begin[i]);
        if b < 0 || b > dim {
            return Err(ctx.err(format!("begin[{i}] = {b} outside [0, {dim}]")));
        }
        let s = match size[i] {
            -1 => dim - b,
            s if s >= 0 => i64::from(s),
            s => return Err(ctx.err(format!("size[{i}] = {s} must be >= 0 or -1"))),
        };
        if b + s > dim {
            return Err(ctx.err(format!(
                "begin[{i}] + size[{i}] = {} exceeds extent {dim}",
                b + s
            )));
        }
        od.push(to_u32(ctx, s as usize)?);
    }
    let st = strides(&t.dims);
    let idx = indices(ctx, &od, |p| {
        (0..r)
            .map(|k| (begin[k] as usize + p[k]) * st[k])
            .sum::<usize>()
    })?;
    Ok(vec![Tensor::new(od, pick(&t.data, &idx, 0.0, 0))])
}

/// The layout flag at optional input `i`, and the input's NHWC view.
fn nhwc(ctx: &OpCtx<'_>, i: usize) -> KResult<(bool, [usize; 4], [usize; 4])> {
    let nchw = ctx.opt_bool(i, false)?;
    let t = tensor(ctx, 0)?;
    if t.dims.len() != 4 {
        return Err(ctx.err(format!("input must be 4-D, got {:?}", t.dims)));
    }
    let d = [0, 1, 2, 3].map(|k| t.dims[k] as usize);
    // Dimensions in NHWC order, and the strides of N, H, W, C in the stored tensor.
    let (dims, st) = if nchw {
        let s = strides(&t.dims);
        ([d[0], d[2], d[3], d[1]], [s[0], s[2], s[3], s[1]])
    } else {
        let s = strides(&t.dims);
        (d, [s[0], s[1], s[2], s[3]])
    };
    Ok((nchw, dims, st))
}

/// Output dimensions `[n, h, w, c]` stored in the operation's layout.
fn stored(ctx: &OpCtx<'_>, nhwc: [usize; 4], nchw: bool) -> KResult<Vec<u32>> {
    let [n, h, w, c] = nhwc;
    let order = if nchw { [n, c, h, w] } else { [n, h, w, c] };
    order.iter().map(|&v| to_u32(ctx, v)).collect()
}

/// Source indexes for an output `[n, h, w, c]` (NHWC) stored in `nchw` order, given the
/// source of each NHWC position.
fn layout_indices(
    ctx: &OpCtx<'_>,
    od: [usize; 4],
    nchw: bool,
    mut f: impl FnMut(usize, usize, usize, usize) -> usize,
) -> KResult<(Vec<u32>, Vec<usize>)> {
    let dims = stored(ctx, od, nchw)?;
    let idx = indices(ctx, &dims, |p| {
        if nchw {
            f(p[0], p[2], p[3], p[1])
        } else {
            f(p[0], p[1], p[2], p[3])
        }
    })?;
    Ok((dims, idx))
}

fn block_shape(ctx: &OpCtx<'_>) -> KResult<(usize, usize)> {
    let b = list(ctx, 1, 2, "block_shape")?;
    if b[0] < 1 || b[1] < 1 {
        return Err(ctx.err(format!("block_shape {b:?} entries must be >= 1")));
    }
    Ok((b[0] as usize, b[1] as usize))
}

/// SPACE_TO_BATCH_ND(input, block_shape, paddings, [layout]).
fn space_to_batch(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (nchw, [n, h, w, c], st) = nhwc(ctx, 3)?;
    let t = tensor(ctx, 0)?;
    let (bh, bw) = block_shape(ctx)?;
    let (pd, p) = ctx.i32s(2)?;
    if pd != [2, 2] || p.len() != 4 {
        return Err(ctx.err(format!("paddings must have shape [2, 2], has {pd:?}")));
    }
    if p.iter().any(|&x| x < 0) {
        return Err(ctx.err(format!("paddings {p:?} must be >= 0")));
    }
    let [pt, pb, pl, pr] = [0, 1, 2, 3].map(|k| p[k] as usize);
    let ph = h.saturating_add(pt).saturating_add(pb);
    let pw = w.saturating_add(pl).saturating_add(pr);
    if ph % bh != 0 || pw % bw != 0 {
        return Err(ctx.err(format!(
            "padded height {ph} and width {pw} must be multiples of the block {bh}x{bw}"
        )));
    }
    let on = n
        .checked_mul(bh)
        .and_then(|v| v.checked_mul(bw))
        .ok_or_else(|| ctx.err("output batch too large"))?;
    let (dims, idx) = layout_indices(ctx, [on, ph / bh, pw / bw, c], nchw, |ob, y, x, ch| {
        let b = ob % n;
        let shift = ob / n;
        let (sy, sx) = (shift / bw, shift % bw);
        let (py, px) = (y * bh + sy, x * bw + sx);
        if py < pt || py - pt >= h || px < pl || px - pl >= w {
            PAD
        } else {
            b * st[0] + (py - pt) * st[1] + (px - pl) * st[2] + ch * st[3]
        }
    })?;
    let zp = zero_point(ctx)?;
    Ok(vec![Tensor::new(dims, pick(&t.data, &idx, 0.0, zp))])
}

/// BATCH_TO_SPACE_ND(input, block_shape, [layout]).
fn batch_to_space(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (nchw, [n, h, w, c], st) = nhwc(ctx, 2)?;
    let t = tensor(ctx, 0)?;
    let (bh, bw) = block_shape(ctx)?;
    let bb = bh
        .checked_mul(bw)
        .ok_or_else(|| ctx.err("block_shape too large"))?;
    if n % bb != 0 {
        return Err(ctx.err(format!(
            "batch {n} must be a multiple of the block size {bh}x{bw}"
        )));
    }
    let on = n / bb;
    let oh = h
        .checked_mul(bh)
        .ok_or_else(|| ctx.err("output too large"))?;
    let ow = w
        .checked_mul(bw)
        .ok_or_else(|| ctx.err("output too large"))?;
    let (dims, idx) = layout_indices(ctx, [on, oh, ow, c], nchw, |b, y, x, ch| {
        let ib = ((y % bh) * bw + x % bw) * on + b;
        ib * st[0] + (y / bh) * st[1] + (x / bw) * st[2] + ch * st[3]
    })?;
    Ok(vec![Tensor::new(dims, pick(&t.data, &idx, 0.0, 0))])
}

/// GATHER(input, axis, indices).
fn gather(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = t.dims.len();
    if r == 0 {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let axis = resolve_axis(ctx, ctx.scalar_i32(1)?, r)?;
    let (id, iv) = ctx.i32s(2)?;
    if count(ctx, id)? != iv.len() {
        return Err(ctx.err("indices data does not match its dimensions"));
    }
    let dim = t.dims[axis];
    if let Some(&bad) = iv.iter().find(|&&x| x < 0 || x as u32 >= dim) {
        return Err(ctx.err(format!("index {bad} outside [0, {dim}) of axis {axis}")));
    }
    let mut od = t.dims[..axis].to_vec();
    od.extend_from_slice(id);
    od.extend_from_slice(&t.dims[axis + 1..]);
    let st = strides(&t.dims);
    let ist = strides(id);
    let k = id.len();
    let idx = indices(ctx, &od, |p| {
        let j: usize = (0..k).map(|q| p[axis + q] * ist[q]).sum();
        let sel = iv.get(j).map_or(0, |&x| x as usize);
        let mut src = sel * st[axis];
        for a in 0..axis {
            src += p[a] * st[a];
        }
        for a in axis + 1..r {
            src += p[a + k - 1] * st[a];
        }
        src
    })?;
    Ok(vec![Tensor::new(od, pick(&t.data, &idx, 0.0, 0))])
}

/// SPLIT(input, axis, num_splits): num_splits outputs.
fn split(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = t.dims.len();
    if r == 0 {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let axis = resolve_axis(ctx, ctx.scalar_i32(1)?, r)?;
    let ns = ctx.scalar_pos(2, "num_splits")?;
    if ns != ctx.op.outputs.len() {
        return Err(ctx.err(format!(
            "num_splits is {ns} but {} outputs are given",
            ctx.op.outputs.len()
        )));
    }
    let dim = t.dims[axis] as usize;
    if dim % ns != 0 {
        return Err(ctx.err(format!(
            "extent {dim} of axis {axis} is not a multiple of num_splits {ns}"
        )));
    }
    let part = dim / ns;
    let mut od = t.dims.clone();
    od[axis] = to_u32(ctx, part)?;
    let st = strides(&t.dims);
    let mut outs = Vec::with_capacity(ns);
    for s in 0..ns {
        let idx = indices(ctx, &od, |p| {
            (0..r)
                .map(|a| {
                    let x = if a == axis { p[a] + s * part } else { p[a] };
                    x * st[a]
                })
                .sum()
        })?;
        outs.push(Tensor::new(od.clone(), pick(&t.data, &idx, 0.0, 0)));
    }
    Ok(outs)
}

/// EXPAND_DIMS(input, axis).
fn expand_dims(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let axis = resolve_axis(ctx, ctx.scalar_i32(1)?, t.dims.len() + 1)?;
    let mut od = t.dims.clone();
    od.insert(axis, 1);
    Ok(vec![Tensor::new(od, t.data.clone())])
}

/// PAD_V2(input, paddings, pad_value).
fn pad_v2(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = rank_range(ctx, t, 1, 4)?;
    let (pd, p) = ctx.i32s(1)?;
    if pd != [r as u32, 2] || p.len() != 2 * r {
        return Err(ctx.err(format!("paddings must have shape [{r}, 2], has {pd:?}")));
    }
    if p.iter().any(|&x| x < 0) {
        return Err(ctx.err(format!("paddings {p:?} must be >= 0")));
    }
    let ty = ctx.ty(0)?;
    let (fpad, ipad) = if super::is_quant8(ty) {
        let v = ctx.scalar_i32(2)?;
        let (lo, hi) = super::q8_range(ty);
        if v < lo || v > hi {
            return Err(ctx.err(format!(
                "pad_value {v} outside the {} range [{lo}, {hi}]",
                ty.name()
            )));
        }
        (0.0, v)
    } else {
        (ctx.scalar_f32(2)?, 0)
    };
    let mut od = Vec::with_capacity(r);
    for i in 0..r {
        let e = u64::from(t.dims[i]) + p[2 * i] as u64 + p[2 * i + 1] as u64;
        od.push(u32::try_from(e).map_err(|_| ctx.err("padded extent too large"))?);
    }
    let st = strides(&t.dims);
    let idx = indices(ctx, &od, |pos| {
        let mut src = 0usize;
        for k in 0..r {
            let lo = p[2 * k] as usize;
            if pos[k] < lo || pos[k] - lo >= t.dims[k] as usize {
                return PAD;
            }
            src += (pos[k] - lo) * st[k];
        }
        src
    })?;
    Ok(vec![Tensor::new(od, pick(&t.data, &idx, fpad, ipad))])
}

/// TILE(input, multiples).
fn tile(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = t.dims.len();
    let m = list(ctx, 1, r, "multiples")?;
    let mut od = Vec::with_capacity(r);
    for (i, (&mi, &d)) in m.iter().zip(&t.dims).enumerate() {
        if mi < 0 {
            return Err(ctx.err(format!("multiples[{i}] = {mi} must be >= 0")));
        }
        let e = u64::from(d) * mi as u64;
        od.push(u32::try_from(e).map_err(|_| ctx.err("tiled extent too large"))?);
    }
    let st = strides(&t.dims);
    let idx = indices(ctx, &od, |p| {
        (0..r).map(|k| (p[k] % t.dims[k] as usize) * st[k]).sum()
    })?;
    Ok(vec![Tensor::new(od, pick(&t.data, &idx, 0.0, 0))])
}

/// CHANNEL_SHUFFLE(input, num_groups, axis).
fn channel_shuffle(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = tensor(ctx, 0)?;
    let r = rank_range(ctx, t, 1, 4)?;
    let g = ctx.scalar_pos(1, "num_groups")?;
    let axis = resolve_axis(ctx, ctx.scalar_i32(2)?, r)?;
    let ch = t.dims[axis] as usize;
    if ch % g != 0 {
        return Err(ctx.err(format!(
            "channel extent {ch} is not a multiple of num_groups {g}"
        )));
    }
    let per = ch / g;
    let st = strides(&t.dims);
    let idx = indices(ctx, &t.dims, |p| {
        (0..r)
            .map(|a| {
                let x = if a == axis {
                    // Output channel i * g + k reads input channel k * per + i.
                    (p[a] % g) * per + p[a] / g
                } else {
                    p[a]
                };
                x * st[a]
            })
            .sum()
    })?;
    Ok(vec![Tensor::new(
        t.dims.clone(),
        pick(&t.data, &idx, 0.0, 0),
    )])
}

/// FILL(dims, value).
fn fill(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (dd, d) = ctx.i32s(0)?;
    if dd.len() != 1 {
        return Err(ctx.err(format!("dims must be 1-D, has shape {dd:?}")));
    }
    let mut od = Vec::with_capacity(d.len());
    for (i, &x) in d.iter().enumerate() {
        od.push(u32::try_from(x).map_err(|_| ctx.err(format!("dims[{i}] = {x} must be >= 0")))?);
    }
    let n = count(ctx, &od)?;
    let data = match ctx.out(0)?.ty {
        T::TensorInt32 => Data::I32(vec![ctx.scalar_i32(1)?; n].into()),
        _ => Data::F32(vec![ctx.scalar_f32(1)?; n].into()),
    };
    Ok(vec![Tensor::new(od, data)])
}

/// RANK(input): an INT32 scalar.
fn rank(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = ctx.t(0)?;
    let r = i32::try_from(t.dims.len()).map_err(|_| ctx.err("rank too large"))?;
    Ok(vec![Tensor::new(Vec::new(), Data::I32(vec![r].into()))])
}

#[cfg(test)]
#[path = "movement_tests.rs"]
mod tests;
