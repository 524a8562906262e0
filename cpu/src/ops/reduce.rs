//! Reductions and index searches: REDUCE_SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD, REDUCE_ANY,
//! REDUCE_ALL, ARGMAX, ARGMIN, TOPK_V2 and LOG_SOFTMAX.
//!
//! The reductions keep the element type of their input: float16 values are widened to f32 on
//! decode, and quantized REDUCE_MAX / REDUCE_MIN work on the stored values (the output carries
//! the input's scale and zero point, so the order of stored values is the order of real ones).

use super::opdef::OpDef;
use super::{KResult, OpCtx, advance, count, resolve_axis, to_u32};
use crate::check::{Ck, Issue, const_bool, float_scalar};
use crate::model::{Lifetime, OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;
use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: O::ReduceSum,
        types: &[T::TensorFloat32, T::TensorFloat16],
        check: check_sum_prod,
        run: reduce_sum,
    },
    OpDef {
        op: O::ReduceMax,
        types: MAX_MIN_TYPES,
        check: check_max_min,
        run: reduce_max,
    },
    OpDef {
        op: O::ReduceMin,
        types: MAX_MIN_TYPES,
        check: check_max_min,
        run: reduce_min,
    },
    OpDef {
        op: O::ReduceProd,
        types: &[T::TensorFloat32, T::TensorFloat16],
        check: check_sum_prod,
        run: reduce_prod,
    },
    OpDef {
        op: O::ReduceAny,
        types: &[T::TensorBool8],
        check: check_any_all,
        run: reduce_any,
    },
    OpDef {
        op: O::ReduceAll,
        types: &[T::TensorBool8],
        check: check_any_all,
        run: reduce_all,
    },
    OpDef {
        op: O::Argmax,
        types: SEARCH_TYPES,
        check: check_arg,
        run: argmax,
    },
    OpDef {
        op: O::Argmin,
        types: SEARCH_TYPES,
        check: check_arg,
        run: argmin,
    },
    OpDef {
        op: O::TopkV2,
        types: SEARCH_TYPES,
        check: check_topk,
        run: topk_v2,
    },
    OpDef {
        op: O::LogSoftmax,
        types: &[T::TensorFloat32, T::TensorFloat16],
        check: check_log_softmax,
        run: log_softmax,
    },
];

const MAX_MIN_TYPES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

const SEARCH_TYPES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

// ---------------------------------------------------------------- shared helpers

pub(super) fn invalid(msg: impl Into<String>) -> Issue {
    Issue::Invalid(msg.into())
}

/// The type of input `i`, which must be one of `allowed`.
pub(super) fn type_in(c: &Ck<'_>, i: usize, allowed: &[OperandType]) -> Result<OperandType, Issue> {
    let t = c.ty(i)?;
    if !allowed.contains(&t) {
        return Err(invalid(format!(
            "input {i} type {} is not one of {}",
            t.name(),
            allowed
                .iter()
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(t)
}

/// The value of input `i` when it is a CONSTANT_COPY INT32 / TENSOR_INT32 operand.
pub(super) fn const_i32s(c: &Ck<'_>, i: usize) -> Option<Vec<i32>> {
    let o = c.inp(i).ok()?;
    if !matches!(o.ty, T::Int32 | T::TensorInt32) {
        return None;
    }
    let Lifetime::ConstantCopy { offset, length } = o.lifetime else {
        return None;
    };
    let bytes =
        c.g.operand_values
            .get(offset..offset.checked_add(length)?)?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// The declared rank of input `i`, when known (0 = unknown).
pub(super) fn known_rank(c: &Ck<'_>, i: usize) -> Result<Option<usize>, Issue> {
    let d = &c.inp(i)?.dimensions;
    Ok(if d.is_empty() { None } else { Some(d.len()) })
}

/// Checks that `axis` lies in `[-rank, rank)`.
fn axis_in_range(axis: i32, rank: usize, what: &str) -> Result<(), Issue> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let a = i64::from(axis);
    if a < -r || a >= r {
        return Err(invalid(format!(
            "{what} {axis} is outside [-{rank}, {rank}) for an input of rank {rank}"
        )));
    }
    Ok(())
}

/// Output `k`'s declared shape (when it declares one) must fit `want`, the shape the
/// operation produces as far as the model tells it (0: extent not known before execution).
pub(super) fn out_fits(c: &Ck<'_>, k: usize, want: &[u32]) -> Result<(), Issue> {
    let d = &c.out(k)?.dimensions;
    let fits = d.len() == want.len()
        && d.iter()
            .zip(want)
            .all(|(&x, &y)| x == 0 || y == 0 || x == y);
    if !d.is_empty() && !fits {
        return Err(invalid(format!(
            "output {k} is declared {d:?}, the operation produces {want:?}"
        )));
    }
    Ok(())
}

/// The value of input `i`, checked against its dimensions.
pub(super) fn value<'a>(ctx: &OpCtx<'a>, i: usize) -> KResult<&'a Tensor> {
    let t = ctx.t(i)?;
    if count(ctx, &t.dims)? != t.data.len() {
        return Err(ctx.err(format!("input {i}: data does not match its dimensions")));
    }
    Ok(t)
}

// ---------------------------------------------------------------- REDUCE_*

fn check_sum_prod(c: &Ck<'_>) -> Result<(), Issue> {
    check_reduce(c, &[T::TensorFloat32, T::TensorFloat16])
}

fn check_max_min(c: &Ck<'_>) -> Result<(), Issue> {
    check_reduce(c, MAX_MIN_TYPES)
}

fn check_any_all(c: &Ck<'_>) -> Result<(), Issue> {
    check_reduce(c, &[T::TensorBool8])
}

/// REDUCE_*(input, axes, keep_dims): one output of the input's type and quantization.
fn check_reduce(c: &Ck<'_>, allowed: &[OperandType]) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    let t0 = type_in(c, 0, allowed)?;
    c.is(1, T::TensorInt32, "axes")?;
    c.is(2, T::Bool, "keep_dims")?;
    c.same_out(t0)?;
    c.same_quant()?;
    let axes_dims = &c.inp(1)?.dimensions;
    if !axes_dims.is_empty() && axes_dims.len() != 1 {
        return Err(invalid(format!(
            "axes must be a 1-D tensor, has rank {}",
            axes_dims.len()
        )));
    }
    if let Some(r) = known_rank(c, 0)? {
        if r > 4 {
            return Err(invalid(format!("input rank {r} is above 4")));
        }
        if let (Some(axes), Some(keep)) = (const_i32s(c, 1), const_bool(c, 2)) {
            let mut reduce = vec![false; r];
            for a in axes {
                axis_in_range(a, r, "axis")?;
                reduce[if a < 0 {
                    (a + r as i32) as usize
                } else {
                    a as usize
                }] = true;
            }
            let dims = &c.inp(0)?.dimensions;
            let mut want: Vec<u32> = dims
                .iter()
                .zip(&reduce)
                .filter_map(|(&d, &red)| match (red, keep) {
                    (false, _) => Some(d),
                    (true, true) => Some(1),
                    (true, false) => None,
                })
                .collect();
            if want.is_empty() {
                want.push(1);
            }
            out_fits(c, 0, &want)?;
        }
    }
    Ok(())
}

/// The reduction plan of REDUCE_*: which dimensions are reduced and the output shape.
struct Plan {
    reduce: Vec<bool>,
    out_dims: Vec<u32>,
    out_len: usize,
}

fn plan(ctx: &OpCtx<'_>, dims: &[u32]) -> KResult<Plan> {
    let r = dims.len();
    if r > 4 {
        return Err(ctx.err(format!("input rank {r} is above 4")));
    }
    let axes = value(ctx, 1)?;
    if axes.dims.len() != 1 {
        return Err(ctx.err(format!(
            "axes must be a 1-D tensor, has shape {:?}",
            axes.dims
        )));
    }
    let Data::I32(axes) = &axes.data else {
        return Err(ctx.err("axes is not TENSOR_INT32"));
    };
    let keep = ctx.scalar_bool(2)?;
    let mut reduce = vec![false; r];
    for &a in axes {
        reduce[resolve_axis(ctx, a, r)?] = true;
    }
    let mut out_dims = Vec::with_capacity(r);
    for (&d, &red) in dims.iter().zip(&reduce) {
        if !red {
            out_dims.push(d);
        } else if keep {
            out_dims.push(1);
        }
    }
    if out_dims.is_empty() {
        out_dims.push(1);
    }
    // Bounded like every output (a zero extent reduced away must not leave a huge product).
    let out_len = count(ctx, &out_dims)?;
    Ok(Plan {
        reduce,
        out_dims,
        out_len,
    })
}

/// Folds `x` (shaped `dims`) over the reduced dimensions of `p`, starting every output at
/// `init`.
fn fold<A: Copy>(dims: &[u32], x: &[A], p: &Plan, init: A, f: impl Fn(A, A) -> A) -> Vec<A> {
    let r = dims.len();
    // Output stride of each input dimension (0 for reduced ones).
    let mut ost = vec![0usize; r];
    let mut acc = 1usize;
    for k in (0..r).rev() {
        if !p.reduce[k] {
            ost[k] = acc;
            acc = acc.saturating_mul(dims[k] as usize);
        }
    }
    let mut out = vec![init; p.out_len];
    let mut pos = vec![0u32; r];
    let mut o = [0usize];
    for &v in x {
        if let Some(slot) = out.get_mut(o[0]) {
            *slot = f(*slot, v);
        }
        advance(&mut pos, dims, [&ost], &mut o);
    }
    out
}

/// A fold's initial value and step, for one storage kind (None: kind not accepted).
type Fold<A> = Option<(A, fn(A, A) -> A)>;

/// Runs a reduction with one fold per storage kind.
fn reduce_with(
    ctx: &OpCtx<'_>,
    f32_op: Fold<f32>,
    u8_op: Fold<u8>,
    i8_op: Fold<i8>,
) -> KResult<Vec<Tensor>> {
    let t = value(ctx, 0)?;
    let p = plan(ctx, &t.dims)?;
    let data = match (&t.data, f32_op, u8_op, i8_op) {
        (Data::F32(x), Some((init, f)), _, _) => Data::F32(fold(&t.dims, x, &p, init, f).into()),
        (Data::U8(x), _, Some((init, f)), _) => Data::U8(fold(&t.dims, x, &p, init, f).into()),
        (Data::I8(x), _, _, Some((init, f))) => Data::I8(fold(&t.dims, x, &p, init, f).into()),
        _ => return Err(ctx.err("input type not supported by this reduction")),
    };
    Ok(vec![Tensor::new(p.out_dims, data)])
}

fn reduce_sum(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    reduce_with(ctx, Some((0.0, |a, b| a + b)), None, None)
}

fn reduce_prod(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    // A zero factor gives zero even against an infinity (NNAPI's rule: 0 * inf is 0 here).
    reduce_with(
        ctx,
        Some((1.0, |a, b| if a == 0.0 || b == 0.0 { 0.0 } else { a * b })),
        None,
        None,
    )
}

fn reduce_max(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let float_init = if ctx.ty(0)? == T::TensorFloat16 {
        -65504.0
    } else {
        f32::MIN
    };
    reduce_with(
        ctx,
        Some((float_init, |a: f32, b: f32| if b > a { b } else { a })),
        Some((u8::MIN, |a: u8, b: u8| a.max(b))),
        Some((i8::MIN, |a: i8, b: i8| a.max(b))),
    )
}

fn reduce_min(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let float_init = if ctx.ty(0)? == T::TensorFloat16 {
        65504.0
    } else {
        f32::MAX
    };
    reduce_with(
        ctx,
        Some((float_init, |a: f32, b: f32| if b < a { b } else { a })),
        Some((u8::MAX, |a: u8, b: u8| a.min(b))),
        Some((i8::MAX, |a: i8, b: i8| a.min(b))),
    )
}

fn reduce_any(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    reduce_with(
        ctx,
        None,
        Some((0, |a, b| u8::from(a != 0 || b != 0))),
        None,
    )
}

fn reduce_all(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    reduce_with(
        ctx,
        None,
        Some((1, |a, b| u8::from(a != 0 && b != 0))),
        None,
    )
}

// ---------------------------------------------------------------- ARGMAX, ARGMIN

/// ARGMAX / ARGMIN(input, axis) -> TENSOR_INT32.
fn check_arg(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    let t0 = c.ty(0)?;
    if !SEARCH_TYPES.contains(&t0) {
        return Err(invalid(format!(
            "input 0 type {} is not a float, int32 or 8-bit asymmetric tensor",
            t0.name()
        )));
    }
    c.is(1, T::Int32, "axis")?;
    c.same_out(T::TensorInt32)?;
    if let (Some(r), Some(a)) = (known_rank(c, 0)?, const_i32s(c, 1)) {
        if let Some(&a) = a.first() {
            axis_in_range(a, r, "axis")?;
            let mut want = c.inp(0)?.dimensions.clone();
            want.remove(if a < 0 {
                (a + r as i32) as usize
            } else {
                a as usize
            });
            if want.is_empty() {
                want.push(1);
            }
            out_fits(c, 0, &want)?;
        }
    }
    Ok(())
}

/// Every element of input 0 as an f64 sort key (stored values for quantized types: their
/// order is the order of the real values, the scale being positive).
fn keys(ctx: &OpCtx<'_>, t: &Tensor) -> KResult<Vec<f64>> {
    Ok(match &t.data {
        Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        _ => return Err(ctx.err("input type not supported")),
    })
}

fn arg_search(ctx: &OpCtx<'_>, is_min: bool) -> KResult<Vec<Tensor>> {
    let t = value(ctx, 0)?;
    let r = t.dims.len();
    if r == 0 {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let axis = resolve_axis(ctx, ctx.scalar_i32(1)?, r)?;
    if t.dims[axis] == 0 {
        return Err(ctx.err("the searched dimension is empty"));
    }
    let mut od: Vec<u32> = t.dims.clone();
    od.remove(axis);
    if od.is_empty() {
        od.push(1);
    }
    count(ctx, &od)?;
    let x = keys(ctx, t)?;
    let outer: usize = t.dims[..axis].iter().map(|&d| d as usize).product();
    let n = t.dims[axis] as usize;
    let inner: usize = t.dims[axis + 1..].iter().map(|&d| d as usize).product();
    let mut out = Vec::with_capacity(outer.saturating_mul(inner));
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| x.get((o * n + k) * inner + i).copied().unwrap_or(0.0);
            let mut best = at(0);
            let mut best_k = 0usize;
            for k in 1..n {
                let v = at(k);
                // Strict comparison: the first of equal extremes wins.
                if (is_min && v < best) || (!is_min && v > best) {
                    best = v;
                    best_k = k;
                }
            }
            out.push(i32::try_from(best_k).map_err(|_| ctx.err("index too large"))?);
        }
    }
    Ok(vec![Tensor::new(od, Data::I32(out.into()))])
}

fn argmax(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    arg_search(ctx, false)
}

fn argmin(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    arg_search(ctx, true)
}

// ---------------------------------------------------------------- TOPK_V2

/// TOPK_V2(input, k) -> (values of the input's type and quantization, TENSOR_INT32 indices).
fn check_topk(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 2)?;
    let t0 = c.ty(0)?;
    if !SEARCH_TYPES.contains(&t0) {
        return Err(invalid(format!(
            "input 0 type {} is not a float, int32 or 8-bit asymmetric tensor",
            t0.name()
        )));
    }
    c.is(1, T::Int32, "k")?;
    c.same_out(t0)?;
    c.same_quant()?;
    let idx = c.out(1)?;
    if idx.ty != T::TensorInt32 {
        return Err(invalid(format!(
            "output 1 (indices) must be TENSOR_INT32, is {}",
            idx.ty.name()
        )));
    }
    if let Some(&k) = const_i32s(c, 1).as_ref().and_then(|v| v.first()) {
        if k <= 0 {
            return Err(invalid(format!("k must be > 0, is {k}")));
        }
        if let Some(&last) = c.inp(0)?.dimensions.last() {
            if last != 0 && i64::from(k) > i64::from(last) {
                return Err(invalid(format!(
                    "k {k} is larger than the last dimension {last}"
                )));
            }
            let mut want = c.inp(0)?.dimensions.clone();
            if let Some(l) = want.last_mut() {
                *l = k as u32;
            }
            out_fits(c, 0, &want)?;
            out_fits(c, 1, &want)?;
        }
    }
    Ok(())
}

fn topk_v2(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = value(ctx, 0)?;
    let Some(&last) = t.dims.last() else {
        return Err(ctx.err("input must have rank >= 1"));
    };
    let k = ctx.scalar_i32(1)?;
    if k <= 0 {
        return Err(ctx.err(format!("k must be > 0, is {k}")));
    }
    let k = k as usize;
    let n = last as usize;
    if k > n {
        return Err(ctx.err(format!("k {k} is larger than the last dimension {n}")));
    }
    let x = keys(ctx, t)?;
    let rows = x.len().checked_div(n).unwrap_or(0);
    let mut picked: Vec<usize> = Vec::with_capacity(rows.saturating_mul(k));
    let mut order: Vec<usize> = Vec::with_capacity(n);
    // -0.0 and 0.0 are equal values; total_cmp would order them.
    let key = |v: f64| if v == 0.0 { 0.0 } else { v };
    for row in 0..rows {
        let base = row * n;
        order.clear();
        order.extend(0..n);
        // Descending values; of equal values the one with the larger index first.
        order.sort_by(|&a, &b| {
            let (va, vb) = (key(x[base + a]), key(x[base + b]));
            vb.total_cmp(&va).then(b.cmp(&a))
        });
        picked.extend(order.iter().take(k).map(|&i| base + i));
    }
    let indices: Vec<i32> = picked.iter().map(|&p| (p % n.max(1)) as i32).collect();
    let mut od = t.dims.clone();
    if let Some(l) = od.last_mut() {
        *l = to_u32(ctx, k)?;
    }
    Ok(vec![
        Tensor::new(od.clone(), t.data.gather(&picked)),
        Tensor::new(od, Data::I32(indices.into())),
    ])
}

// ---------------------------------------------------------------- LOG_SOFTMAX

/// LOG_SOFTMAX(input, beta, axis).
fn check_log_softmax(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    let t0 = c.ty(0)?;
    if !matches!(t0, T::TensorFloat32 | T::TensorFloat16) {
        return Err(invalid(format!(
            "input 0 type {} is not TENSOR_FLOAT32 or TENSOR_FLOAT16",
            t0.name()
        )));
    }
    c.is(1, float_scalar(t0), "beta")?;
    c.is(2, T::Int32, "axis")?;
    c.same_out(t0)?;
    let dims = &c.inp(0)?.dimensions;
    if !dims.is_empty() {
        out_fits(c, 0, dims)?;
    }
    if let (Some(r), Some(a)) = (known_rank(c, 0)?, const_i32s(c, 2)) {
        if let Some(&a) = a.first() {
            axis_in_range(a, r, "axis")?;
        }
    }
    Ok(())
}

fn log_softmax(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = value(ctx, 0)?;
    let Data::F32(x) = &t.data else {
        return Err(ctx.err("input is not a float tensor"));
    };
    let beta = ctx.scalar_f32(1)?;
    let r = t.dims.len();
    if r == 0 {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let axis = resolve_axis(ctx, ctx.scalar_i32(2)?, r)?;
    if x.is_empty() {
        return Ok(vec![Tensor::new(
            t.dims.clone(),
            Data::F32(Vec::new().into()),
        )]);
    }
    let outer: usize = t.dims[..axis].iter().map(|&d| d as usize).product();
    let n = t.dims[axis] as usize;
    let inner: usize = t.dims[axis + 1..].iter().map(|&d| d as usize).product();
    let mut out = vec![0f32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let mut mx = f32::NEG_INFINITY;
            for k in 0..n {
                mx = mx.max(x[at(k)] * beta);
            }
            let mut sum = 0f64;
            for k in 0..n {
                sum += f64::from(x[at(k)] * beta - mx).exp();
            }
            let log_sum = sum.ln() as f32;
            for k in 0..n {
                out[at(k)] = x[at(k)] * beta - mx - log_sum;
            }
        }
    }
    Ok(vec![Tensor::new(t.dims.clone(), Data::F32(out.into()))])
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
