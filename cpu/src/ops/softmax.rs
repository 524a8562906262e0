//! SOFTMAX and L2_NORMALIZATION: float tensors, and 8-bit ones computed through float with
//! the fixed output quantization NNAPI gives each.

use super::elementwise::{float_result, float_view};
use super::opdef::OpDef;
use super::{KResult, OpCtx, resolve_axis, split_axis};
use crate::check::{Ck, F32_Q8, Issue, float_scalar};
use crate::model::{OperandType, OperationType};
use crate::tensor::Tensor;

use OperandType as T;
use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef::new(O::Softmax, F32_Q8, check_softmax, softmax),
    OpDef::new(
        O::L2Normalization,
        F32_Q8,
        check_l2_normalization,
        l2_normalization,
    ),
];

/// SOFTMAX(input, beta, [axis]): beta of the input's float scalar type; a quantized output
/// has scale 1/256 and zero point 0 (-128 signed).
fn check_softmax(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[2, 3], 1)?;
    c.is(1, float_scalar(t0), "beta")?;
    c.opt(2, T::Int32, "axis")?;
    c.same_out(t0)?;
    c.implemented(O::Softmax, F32_Q8)?;
    c.out_quant(1.0 / 256.0, 0)
}

/// L2_NORMALIZATION(input, [axis]): a quantized output has scale 1/128 and zero point 128
/// (0 signed).
fn check_l2_normalization(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[1, 2], 1)?;
    c.opt(1, T::Int32, "axis")?;
    c.same_out(t0)?;
    c.implemented(O::L2Normalization, F32_Q8)?;
    c.out_quant(1.0 / 128.0, 128)
}

/// [`split_axis`](super::split_axis) at the axis given by optional INT32 input `i` (default: the last one).
fn split_at_axis_arg(ctx: &OpCtx<'_>, dims: &[u32], i: usize) -> KResult<(usize, usize, usize)> {
    let axis = if ctx.has(i) { ctx.scalar_i32(i)? } else { -1 };
    if dims.is_empty() {
        return Err(ctx.err("input must have rank >= 1"));
    }
    let axis = resolve_axis(ctx, axis, dims.len())?;
    Ok(split_axis(dims, axis))
}

/// SOFTMAX(input, beta, [axis]).
fn softmax(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, x) = float_view(ctx, 0)?;
    let beta = ctx.scalar_f32(1)?;
    let (outer, n, inner) = split_at_axis_arg(ctx, &d, 2)?;
    let mut out = vec![0f32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let mut mx = f32::NEG_INFINITY;
            for k in 0..n {
                mx = mx.max(x[base + k * inner]);
            }
            let mut sum = 0f32;
            for k in 0..n {
                let e = ((x[base + k * inner] - mx) * beta).exp();
                out[base + k * inner] = e;
                sum += e;
            }
            for k in 0..n {
                out[base + k * inner] /= sum;
            }
        }
    }
    Ok(vec![float_result(ctx, d, out)?])
}

/// L2_NORMALIZATION(input, [axis]).
fn l2_normalization(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, x) = float_view(ctx, 0)?;
    let (outer, n, inner) = split_at_axis_arg(ctx, &d, 1)?;
    let mut out = vec![0f32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let mut sum = 0f32;
            for k in 0..n {
                let v = x[base + k * inner];
                sum += v * v;
            }
            let norm = sum.sqrt().max(1e-6);
            for k in 0..n {
                out[base + k * inner] = x[base + k * inner] / norm;
            }
        }
    }
    Ok(vec![float_result(ctx, d, out)?])
}
