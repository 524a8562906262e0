//! Shape and data movement: RESHAPE, SQUEEZE, TRANSPOSE, PAD, CONCATENATION, SPACE_TO_DEPTH,
//! DEPTH_TO_SPACE; and MEAN, which shares their axis handling.

use super::elementwise::{float_result, float_view};
use super::opdef::OpDef;
use super::{KResult, OpCtx, advance, count, resolve_axis, split_axis, strides, to_u32};
use crate::check::{Ck, F32_Q8, Issue};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;
use OperationType as O;

/// Every operation here takes the types NNAPI (feature level 4) lists for all of them:
/// TENSOR_FLOAT16, TENSOR_FLOAT32, TENSOR_QUANT8_ASYMM and TENSOR_QUANT8_ASYMM_SIGNED
/// (none lists TENSOR_INT32, BOOL8 or the symmetric and 16-bit quantized types).
pub(crate) static DEFS: &[OpDef] = &[
    OpDef::new(O::Reshape, F32_Q8, check_reshape, reshape),
    OpDef::new(O::Squeeze, F32_Q8, check_squeeze_transpose, squeeze),
    OpDef::new(O::Transpose, F32_Q8, check_squeeze_transpose, transpose),
    OpDef::new(O::Pad, F32_Q8, check_pad, pad),
    OpDef::new(O::Concatenation, F32_Q8, check_concatenation, concatenation),
    OpDef::new(O::SpaceToDepth, F32_Q8, check_block, space_to_depth),
    OpDef::new(O::DepthToSpace, F32_Q8, check_block, depth_to_space),
    OpDef::new(O::Mean, F32_Q8, check_mean, mean),
];

/// The output has the input's type, and a quantized one its scale and zero point.
fn same_type_and_quant(c: &Ck<'_>, t0: OperandType) -> Result<(), Issue> {
    c.same_out(t0)?;
    c.same_quant()
}

/// RESHAPE(input, shape).
fn check_reshape(c: &Ck<'_>) -> Result<(), Issue> {
    check_int_tensor_arg(c, "shape")
}

/// PAD(input, paddings).
fn check_pad(c: &Ck<'_>) -> Result<(), Issue> {
    check_int_tensor_arg(c, "paddings")
}

/// (input, `what`): `what` a TENSOR_INT32.
fn check_int_tensor_arg(c: &Ck<'_>, what: &str) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[2], 1)?;
    c.is(1, T::TensorInt32, what)?;
    same_type_and_quant(c, t0)
}

/// SQUEEZE(input, [axes]) / TRANSPOSE(input, [perm]).
fn check_squeeze_transpose(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[1, 2], 1)?;
    c.opt(1, T::TensorInt32, "axes/permutation")?;
    same_type_and_quant(c, t0)
}

/// CONCATENATION(inputs..., axis): every tensor of input 0's type; quantized inputs may
/// have their own scales (they are requantized to the output's).
fn check_concatenation(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    let n = c.ins.len();
    if n < 2 {
        return Err(Issue::Invalid(
            "needs at least one tensor and the axis".into(),
        ));
    }
    c.counts(&[n], 1)?;
    let last = n - 1;
    c.is(last, T::Int32, "axis")?;
    for i in 1..last {
        c.is(i, t0, "tensor")?;
    }
    c.same_out(t0)
}

/// SPACE_TO_DEPTH / DEPTH_TO_SPACE(input, block_size, [layout]).
fn check_block(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[2, 3], 1)?;
    c.is(1, T::Int32, "block size")?;
    c.opt(2, T::Bool, "layout")?;
    same_type_and_quant(c, t0)
}

/// MEAN(input, axes, keep_dims).
fn check_mean(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[3], 1)?;
    c.is(1, T::TensorInt32, "axes")?;
    c.is(2, T::Int32, "keep_dims")?;
    c.same_out(t0)
}

fn checked(ctx: &OpCtx<'_>, t: &Tensor) -> KResult<usize> {
    let n = count(ctx, &t.dims)?;
    if n != t.data.len() {
        return Err(ctx.err("operand data does not match its dimensions"));
    }
    Ok(n)
}

/// Source indexes of `dims` permuted by `perm`: out[i] = in[idx[i]].
fn permute_indices(dims: &[u32], perm: &[usize]) -> (Vec<u32>, Vec<usize>) {
    let st = strides(dims);
    let od: Vec<u32> = perm.iter().map(|&p| dims[p]).collect();
    let ost: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let n: usize = od.iter().map(|&d| d as usize).product();
    let mut idx = Vec::with_capacity(n);
    let r = od.len();
    let mut pos = vec![0u32; r];
    let mut src = [0usize];
    for _ in 0..n {
        idx.push(src[0]);
        advance(&mut pos, &od, [&ost], &mut src);
    }
    (od, idx)
}

/// Permutes a tensor's axes.
fn permute(t: &Tensor, perm: &[usize]) -> Tensor {
    let (od, idx) = permute_indices(&t.dims, perm);
    Tensor::new(od, t.data.gather(&idx))
}

/// The extents of `dims` whose `drop` flag is false.
fn kept_dims(dims: &[u32], drop: &[bool]) -> Vec<u32> {
    dims.iter()
        .zip(drop)
        .filter(|(_, d)| !**d)
        .map(|(&x, _)| x)
        .collect()
}

fn int_list(ctx: &OpCtx<'_>, i: usize) -> KResult<Vec<i32>> {
    Ok(ctx.i32s(i)?.1.to_vec())
}

/// RESHAPE(input, shape).
fn reshape(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = ctx.t(0)?;
    let n = checked(ctx, t)?;
    let shape = int_list(ctx, 1)?;
    let mut dims = Vec::with_capacity(shape.len());
    let mut unknown = None;
    let mut known: usize = 1;
    for (i, &s) in shape.iter().enumerate() {
        if s == -1 {
            if unknown.is_some() {
                return Err(ctx.err("more than one -1 in the new shape"));
            }
            unknown = Some(i);
            dims.push(1);
        } else if s <= 0 {
            return Err(ctx.err(format!("invalid extent {s} in the new shape")));
        } else {
            known = known
                .checked_mul(s as usize)
                .ok_or_else(|| ctx.err("new shape too large"))?;
            dims.push(s as u32);
        }
    }
    if let Some(u) = unknown {
        if known == 0 || n % known != 0 {
            return Err(ctx.err("cannot infer the -1 extent"));
        }
        dims[u] = to_u32(ctx, n / known)?;
    } else if known != n {
        return Err(ctx.err(format!(
            "new shape {shape:?} has {known} elements, input has {n}"
        )));
    }
    Ok(vec![Tensor::new(dims, t.data.clone())])
}

/// SQUEEZE(input, [axes]).
fn squeeze(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = ctx.t(0)?;
    checked(ctx, t)?;
    let r = t.dims.len();
    let mut drop = vec![false; r];
    // Only an omitted axes operand squeezes every unit dimension; a present but empty list
    // squeezes none (NNAPI).
    if !ctx.has(1) {
        for (i, &d) in t.dims.iter().enumerate() {
            drop[i] = d == 1;
        }
    } else {
        for &a in &int_list(ctx, 1)? {
            let a = resolve_axis(ctx, a, r)?;
            if t.dims[a] != 1 {
                return Err(ctx.err(format!("cannot squeeze axis {a} of extent {}", t.dims[a])));
            }
            drop[a] = true;
        }
    }
    Ok(vec![Tensor::new(kept_dims(&t.dims, &drop), t.data.clone())])
}

/// TRANSPOSE(input, [perm]).
fn transpose(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = ctx.t(0)?;
    checked(ctx, t)?;
    let r = t.dims.len();
    // Omitted means reverse the dimensions; present (even empty) must list all of them.
    let perm: Vec<usize> = if ctx.has(1) {
        let p = int_list(ctx, 1)?;
        if p.len() != r {
            return Err(ctx.err(format!("permutation {p:?} does not match rank {r}")));
        }
        let mut seen = vec![false; r];
        let mut out = Vec::with_capacity(r);
        for &x in &p {
            let a = usize::try_from(x)
                .ok()
                .filter(|&a| a < r && !seen[a])
                .ok_or_else(|| ctx.err(format!("invalid permutation {p:?}")))?;
            seen[a] = true;
            out.push(a);
        }
        out
    } else {
        (0..r).rev().collect()
    };
    Ok(vec![permute(t, &perm)])
}

/// PAD(input, paddings).
fn pad(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = ctx.t(0)?;
    checked(ctx, t)?;
    let (pd, p) = ctx.i32s(1)?;
    let r = t.dims.len();
    if pd != [r as u32, 2] || p.len() != 2 * r {
        return Err(ctx.err(format!("paddings must have shape [{r}, 2], got {pd:?}")));
    }
    let mut od = Vec::with_capacity(r);
    for i in 0..r {
        let (a, b) = (p[2 * i], p[2 * i + 1]);
        if a < 0 || b < 0 {
            return Err(ctx.err("negative padding"));
        }
        let e = u64::from(t.dims[i]) + a as u64 + b as u64;
        od.push(u32::try_from(e).map_err(|_| ctx.err("padded extent too large"))?);
    }
    let n = count(ctx, &od)?;
    // Map each output element to a source index or None.
    let ist = strides(&t.dims);
    let mut src: Vec<Option<usize>> = Vec::with_capacity(n);
    let mut pos = vec![0u32; r];
    for _ in 0..n {
        let mut s = Some(0usize);
        for k in 0..r {
            let lo = p[2 * k] as u32;
            let x = pos[k];
            if x < lo || x - lo >= t.dims[k] {
                s = None;
                break;
            }
            s = s.map(|v| v + (x - lo) as usize * ist[k]);
        }
        src.push(s);
        advance(&mut pos, &od, [], &mut []);
    }
    let zp = ctx.out(0)?.zero_point;
    fn fill<T: Copy>(v: &[T], src: &[Option<usize>], z: T) -> Vec<T> {
        src.iter().map(|s| s.map_or(z, |i| v[i])).collect()
    }
    let data = match &t.data {
        Data::F32(v) => Data::F32(fill(v, &src, 0.0).into()),
        Data::I32(v) => Data::I32(fill(v, &src, 0).into()),
        Data::U8(v) => Data::U8(fill(v, &src, zp.clamp(0, 255) as u8).into()),
        Data::I8(v) => Data::I8(fill(v, &src, zp.clamp(-128, 127) as i8).into()),
        Data::I16(v) => Data::I16(fill(v, &src, 0).into()),
        Data::U16(v) => Data::U16(fill(v, &src, 0).into()),
    };
    Ok(vec![Tensor::new(od, data)])
}

/// CONCATENATION(inputs..., axis).
fn concatenation(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let n_in = ctx.n_inputs();
    if n_in < 2 {
        return Err(ctx.err("needs at least one input and the axis"));
    }
    let k = n_in - 1;
    let axis_raw = ctx.scalar_i32(k)?;
    let first = ctx.t(0)?;
    let r = first.dims.len();
    let axis = resolve_axis(ctx, axis_raw, r)?;
    let mut od = first.dims.clone();
    let mut total: u64 = 0;
    for i in 0..k {
        let t = ctx.t(i)?;
        checked(ctx, t)?;
        if t.dims.len() != r
            || t.dims
                .iter()
                .zip(&first.dims)
                .enumerate()
                .any(|(j, (a, b))| j != axis && a != b)
        {
            return Err(ctx.err(format!(
                "input {i} shape {:?} incompatible with {:?}",
                t.dims, first.dims
            )));
        }
        total += u64::from(t.dims[axis]);
    }
    od[axis] = u32::try_from(total).map_err(|_| ctx.err("output too large"))?;
    let n = count(ctx, &od)?;
    let out = ctx.out(0)?;
    let (outer, _, inner) = split_axis(&first.dims, axis);
    // Collect per-input contiguous chunk sizes, and requantize 8-bit inputs as needed.
    macro_rules! concat {
        ($variant:ident, $conv:expr) => {{
            let mut v = Vec::with_capacity(n);
            let mut parts = Vec::with_capacity(k);
            for i in 0..k {
                let t = ctx.t(i)?;
                let conv = $conv(i)?;
                match &t.data {
                    Data::$variant(x) => parts.push((x, t.dims[axis] as usize * inner, conv)),
                    _ => return Err(ctx.err("inputs of differing types")),
                }
            }
            for o in 0..outer {
                for (x, chunk, conv) in &parts {
                    for &e in &x[o * chunk..(o + 1) * chunk] {
                        v.push(conv(e));
                    }
                }
            }
            Data::$variant(v.into())
        }};
    }
    let requant = |i: usize, qmin: i32, qmax: i32| -> KResult<Box<dyn Fn(i32) -> i32>> {
        let inp = ctx.operand(i)?;
        if inp.scale == out.scale && inp.zero_point == out.zero_point {
            return Ok(Box::new(|x| x));
        }
        let scale = inp.scale / out.scale;
        let bias = -(inp.zero_point as f32) * scale;
        let ozp = out.zero_point;
        Ok(Box::new(move |x| {
            ((x as f32 * scale + bias).round() as i32)
                .saturating_add(ozp)
                .clamp(qmin, qmax)
        }))
    };
    let data = match &first.data {
        Data::F32(_) => concat!(F32, |_| KResult::Ok(|e: f32| e)),
        Data::I32(_) => concat!(I32, |_| KResult::Ok(|e: i32| e)),
        Data::U8(_) if out.ty == OperandType::TensorQuant8Asymm => {
            concat!(U8, |i| requant(i, 0, 255)
                .map(|f| move |e: u8| f(i32::from(e)) as u8))
        }
        Data::U8(_) => concat!(U8, |_| KResult::Ok(|e: u8| e)),
        Data::I8(_) if out.ty == OperandType::TensorQuant8AsymmSigned => {
            concat!(I8, |i| requant(i, -128, 127)
                .map(|f| move |e: i8| f(i32::from(e)) as i8))
        }
        Data::I8(_) => concat!(I8, |_| KResult::Ok(|e: i8| e)),
        Data::I16(_) => concat!(I16, |_| KResult::Ok(|e: i16| e)),
        Data::U16(_) => concat!(U16, |_| KResult::Ok(|e: u16| e)),
    };
    Ok(vec![Tensor::new(od, data)])
}

fn to_nhwc(ctx: &OpCtx<'_>, t: &Tensor, nchw: bool) -> KResult<Tensor> {
    if t.dims.len() != 4 {
        return Err(ctx.err(format!("input must be 4-D, got {:?}", t.dims)));
    }
    checked(ctx, t)?;
    Ok(if nchw {
        permute(t, &[0, 2, 3, 1])
    } else {
        t.clone()
    })
}

fn from_nhwc(t: Tensor, nchw: bool) -> Tensor {
    if nchw { permute(&t, &[0, 3, 1, 2]) } else { t }
}

/// SPACE_TO_DEPTH(input, block_size, [layout]).
fn space_to_depth(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let nchw = ctx.opt_bool(2, false)?;
    let t = to_nhwc(ctx, ctx.t(0)?, nchw)?;
    let bs = ctx.scalar_pos(1, "block_size")?;
    let [n, h, w, c] = [0, 1, 2, 3].map(|i| t.dims[i] as usize);
    if h % bs != 0 || w % bs != 0 {
        return Err(ctx.err(format!(
            "height {h} and width {w} must be multiples of {bs}"
        )));
    }
    let (oh, ow, oc) = (h / bs, w / bs, c * bs * bs);
    let od = vec![
        t.dims[0],
        to_u32(ctx, oh)?,
        to_u32(ctx, ow)?,
        to_u32(ctx, oc)?,
    ];
    let mut idx = Vec::with_capacity(t.data.len());
    for b in 0..n {
        for y in 0..oh {
            for x in 0..ow {
                for d in 0..oc {
                    let ch = d % c;
                    let off = d / c;
                    let (dy, dx) = (off / bs, off % bs);
                    idx.push(((b * h + y * bs + dy) * w + x * bs + dx) * c + ch);
                }
            }
        }
    }
    Ok(vec![from_nhwc(Tensor::new(od, t.data.gather(&idx)), nchw)])
}

/// DEPTH_TO_SPACE(input, block_size, [layout]).
fn depth_to_space(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let nchw = ctx.opt_bool(2, false)?;
    let t = to_nhwc(ctx, ctx.t(0)?, nchw)?;
    let bs = ctx.scalar_pos(1, "block_size")?;
    let [n, h, w, c] = [0, 1, 2, 3].map(|i| t.dims[i] as usize);
    let bb = bs
        .checked_mul(bs)
        .ok_or_else(|| ctx.err("block_size too large"))?;
    if c % bb != 0 {
        return Err(ctx.err(format!("depth {c} must be a multiple of {bb}")));
    }
    let (oh, ow, oc) = (h * bs, w * bs, c / bb);
    let od = vec![
        t.dims[0],
        to_u32(ctx, oh)?,
        to_u32(ctx, ow)?,
        to_u32(ctx, oc)?,
    ];
    count(ctx, &od)?;
    let mut idx = Vec::with_capacity(t.data.len());
    for b in 0..n {
        for y in 0..oh {
            for x in 0..ow {
                for d in 0..oc {
                    let (iy, dy) = (y / bs, y % bs);
                    let (ix, dx) = (x / bs, x % bs);
                    let ich = (dy * bs + dx) * oc + d;
                    idx.push(((b * h + iy) * w + ix) * c + ich);
                }
            }
        }
    }
    Ok(vec![from_nhwc(Tensor::new(od, t.data.gather(&idx)), nchw)])
}

/// MEAN(input, axes, keep_dims).
fn mean(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = ctx.t(0)?;
    checked(ctx, t)?;
    let r = t.dims.len();
    let axes = int_list(ctx, 1)?;
    let keep = ctx.scalar_i32(2)? > 0;
    let mut reduce = vec![false; r];
    for &a in &axes {
        reduce[resolve_axis(ctx, a, r)?] = true;
    }
    let (_, x) = float_view(ctx, 0)?;
    let mut od_keep = t.dims.clone();
    for (i, d) in od_keep.iter_mut().enumerate() {
        if reduce[i] {
            *d = 1;
        }
    }
    let on = count(ctx, &od_keep)?;
    let ost = strides(&od_keep);
    let mut sum = vec![0f32; on];
    let mut cnt = vec![0u32; on];
    let mut pos = vec![0u32; r];
    for &v in &x {
        let mut o = 0usize;
        for k in 0..r {
            if !reduce[k] {
                o += pos[k] as usize * ost[k];
            }
        }
        sum[o] += v;
        cnt[o] += 1;
        advance(&mut pos, &t.dims, [], &mut []);
    }
    let means: Vec<f32> = sum
        .iter()
        .zip(&cnt)
        .map(|(&s, &c)| if c == 0 { 0.0 } else { s / c as f32 })
        .collect();
    let od = if keep {
        od_keep
    } else {
        let v = kept_dims(&t.dims, &reduce);
        if v.is_empty() { vec![1] } else { v }
    };
    Ok(vec![float_result(ctx, od, means)?])
}
