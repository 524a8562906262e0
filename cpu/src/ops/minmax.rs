//! MAXIMUM, MINIMUM and PRELU with broadcasting: float32, float16, 8-bit asymmetric (unsigned
//! and signed) and, for MAXIMUM and MINIMUM, TENSOR_INT32.
//!
//! 8-bit MAXIMUM / MINIMUM requantize both operands to the output's scale and zero point
//! (round half away from zero, saturating) and compare; 8-bit PRELU follows the reference
//! kernel: the non-negative side is rescaled by input_scale / output_scale, the negative side
//! is the integer product (x - zp_x)·(alpha - zp_alpha) rescaled by
//! input_scale·alpha_scale / output_scale, both with gemmlowp fixed-point multipliers.

use super::broadcast::broadcast;
use super::opdef::OpDef;
use super::quant::{mbqm, q8_values, quantize_multiplier};
use super::{KResult, OpCtx, q8_range, q8_tensor};
use crate::check::{ARITH, Ck, F32_Q8, Issue};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: OperationType::Maximum,
        types: ARITH,
        check: check_min_max,
        run: min_max,
    },
    OpDef {
        op: OperationType::Minimum,
        types: ARITH,
        check: check_min_max,
        run: min_max,
    },
    OpDef {
        op: OperationType::Prelu,
        types: F32_Q8,
        check: check_prelu,
        run: prelu,
    },
];

fn check_two(c: &Ck<'_>, allowed: &[OperandType], what: &str) -> Result<OperandType, Issue> {
    c.counts(&[2], 1)?;
    let t0 = c.ty(0)?;
    if !allowed.contains(&t0) {
        return Err(Issue::Invalid(format!(
            "input type {} is not one the operation is defined for",
            t0.name()
        )));
    }
    c.is(1, t0, what)?;
    c.same_out(t0)?;
    Ok(t0)
}

/// MAXIMUM / MINIMUM(input0, input1): same types; the quantized output may have its own scale
/// and zero point.
fn check_min_max(c: &Ck<'_>) -> Result<(), Issue> {
    check_two(c, ARITH, "second input").map(|_| ())
}

/// PRELU(input, alpha).
fn check_prelu(c: &Ck<'_>) -> Result<(), Issue> {
    check_two(c, F32_Q8, "alpha").map(|_| ())
}

fn min_max(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let is_max = ctx.op.op == OperationType::Maximum;
    let ty = ctx.ty(0)?;
    let t = match ty {
        T::TensorFloat32 | T::TensorFloat16 => {
            let f: fn(f32, f32) -> f32 = if is_max { f32::max } else { f32::min };
            let (od, v) = broadcast(ctx, ctx.f32s(0)?, ctx.f32s(1)?, f)?;
            Tensor::new(od, Data::F32(v.into()))
        }
        T::TensorInt32 => {
            let f: fn(i32, i32) -> i32 = if is_max { i32::max } else { i32::min };
            let (od, v) = broadcast(ctx, ctx.i32s(0)?, ctx.i32s(1)?, f)?;
            Tensor::new(od, Data::I32(v.into()))
        }
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => {
            let (ad, a) = q8_values(ctx, 0)?;
            let (bd, b) = q8_values(ctx, 1)?;
            let (ia, ib, o) = (ctx.operand(0)?, ctx.operand(1)?, ctx.out(0)?);
            let (lo, hi) = q8_range(o.ty);
            // As the reference: the real value as a float product, the rescale in double.
            let requant = |v: i32, scale: f32, zp: i32| -> i32 {
                let real = f64::from((v - zp) as f32 * scale);
                let q = real / f64::from(o.scale) + f64::from(o.zero_point);
                q.clamp(f64::from(lo), f64::from(hi)).round() as i32
            };
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let x = requant(x, ia.scale, ia.zero_point);
                let y = requant(y, ib.scale, ib.zero_point);
                if is_max { x.max(y) } else { x.min(y) }
            })?;
            q8_tensor(o.ty, od, v)
        }
        t => return Err(ctx.err(format!("unsupported type {}", t.name()))),
    };
    Ok(vec![t])
}

fn prelu(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let ty = ctx.ty(0)?;
    let t = match ty {
        T::TensorFloat32 | T::TensorFloat16 => {
            let (od, v) = broadcast(ctx, ctx.f32s(0)?, ctx.f32s(1)?, |x: f32, a: f32| {
                if x < 0.0 { a * x } else { x }
            })?;
            Tensor::new(od, Data::F32(v.into()))
        }
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => {
            let (ad, a) = q8_values(ctx, 0)?;
            let (bd, b) = q8_values(ctx, 1)?;
            let (ix, ia, o) = (ctx.operand(0)?, ctx.operand(1)?, ctx.out(0)?);
            let (lo, hi) = q8_range(o.ty);
            let (mp, sp) = quantize_multiplier(f64::from(ix.scale) / f64::from(o.scale));
            let (mn, sn) =
                quantize_multiplier(f64::from(ix.scale) * f64::from(ia.scale) / f64::from(o.scale));
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, al| {
                let x = x - ix.zero_point;
                let r = if x >= 0 {
                    mbqm(x, mp, sp)
                } else {
                    mbqm(x * (al - ia.zero_point), mn, sn)
                };
                r.saturating_add(o.zero_point).clamp(lo, hi)
            })?;
            q8_tensor(o.ty, od, v)
        }
        t => return Err(ctx.err(format!("unsupported type {}", t.name()))),
    };
    Ok(vec![t])
}

#[cfg(test)]
#[path = "minmax_tests.rs"]
mod tests;
