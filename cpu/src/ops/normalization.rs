//! LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION (float32 and float16), and the
//! rank rule the static checks of several families share.

use super::opdef::OpDef;
use super::{KResult, OpCtx, count, nchw_to_nhwc, nhwc_input, resolve_axis, to_layout};
use crate::check::{Ck, FLOAT, Issue, const_i32, float_scalar};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: OperationType::LocalResponseNormalization,
        types: FLOAT,
        check: check_lrn,
        run: lrn,
    },
    OpDef {
        op: OperationType::InstanceNormalization,
        types: FLOAT,
        check: check_instance_norm,
        run: instance_norm,
    },
];

/// Fails when input `i`'s declared rank is known and outside `lo..=hi`.
pub(crate) fn rank_in(c: &Ck<'_>, i: usize, lo: usize, hi: usize, what: &str) -> Result<(), Issue> {
    let r = c.inp(i)?.dimensions.len();
    if r != 0 && !(lo..=hi).contains(&r) {
        let want = if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo} to {hi}")
        };
        return Err(Issue::Invalid(format!(
            "{what} must have rank {want}, has rank {r}"
        )));
    }
    Ok(())
}

/// LOCAL_RESPONSE_NORMALIZATION(input, radius, bias, alpha, beta, [axis]).
fn check_lrn(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[5, 6], 1)?;
    let t0 = c.ty(0)?;
    let s = float_scalar(t0);
    c.is(1, T::Int32, "radius")?;
    c.is(2, s, "bias")?;
    c.is(3, s, "alpha")?;
    c.is(4, s, "beta")?;
    c.opt(5, T::Int32, "axis")?;
    c.same_out(t0)?;
    rank_in(c, 0, 1, 4, "input")?;
    if let Some(r) = const_i32(c, 1)
        && r < 0
    {
        return Err(Issue::Invalid(format!("radius must be >= 0, is {r}")));
    }
    let rank = c.inp(0)?.dimensions.len() as i64;
    if let Some(a) = const_i32(c, 5)
        && rank > 0
        && !(-rank..rank).contains(&i64::from(a))
    {
        return Err(Issue::Invalid(format!(
            "axis {a} out of range for rank {rank}"
        )));
    }
    Ok(())
}

fn lrn(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, x) = ctx.f32s(0)?;
    if d.is_empty() || d.len() > 4 {
        return Err(ctx.err(format!("input must have rank 1 to 4, has {}", d.len())));
    }
    if count(ctx, d)? != x.len() {
        return Err(ctx.err("input data does not match its dimensions"));
    }
    let radius = ctx.scalar_i32(1)?;
    if radius < 0 {
        return Err(ctx.err(format!("radius must be >= 0, is {radius}")));
    }
    let radius = radius as usize;
    let bias = ctx.scalar_f32(2)?;
    let alpha = ctx.scalar_f32(3)?;
    let beta = ctx.scalar_f32(4)?;
    let axis = if ctx.has(5) { ctx.scalar_i32(5)? } else { -1 };
    let axis = resolve_axis(ctx, axis, d.len())?;
    let (outer, n, inner) = super::split_axis(d, axis);
    let mut out = vec![0f32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            for k in 0..n {
                let lo = k.saturating_sub(radius);
                let hi = k.saturating_add(radius).min(n.saturating_sub(1));
                let sum: f32 = (lo..=hi)
                    .map(|j| {
                        let v = x[base + j * inner];
                        v * v
                    })
                    .sum();
                let at = base + k * inner;
                out[at] = x[at] / (bias + alpha * sum).powf(beta);
            }
        }
    }
    Ok(vec![Tensor::new(d.to_vec(), Data::F32(out.into()))])
}

/// INSTANCE_NORMALIZATION(input, gamma, beta, epsilon, layout).
fn check_instance_norm(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[5], 1)?;
    let t0 = c.ty(0)?;
    let s = float_scalar(t0);
    c.is(1, s, "gamma")?;
    c.is(2, s, "beta")?;
    c.is(3, s, "epsilon")?;
    c.is(4, T::Bool, "layout")?;
    c.same_out(t0)?;
    rank_in(c, 0, 4, 4, "input")?;
    Ok(())
}

fn instance_norm(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let gamma = ctx.scalar_f32(1)?;
    let beta = ctx.scalar_f32(2)?;
    let eps = ctx.scalar_f32(3)?;
    let nchw = ctx.scalar_bool(4)?;
    let it = ctx.t(0)?;
    let (d, [n, h, w, c]) = nhwc_input(ctx, it, nchw)?;
    let x = match &it.data {
        Data::F32(v) if nchw => nchw_to_nhwc(v, &it.dims).1,
        Data::F32(v) => v.to_vec(),
        _ => return Err(ctx.err("input is not float")),
    };
    let mut out = vec![0f32; x.len()];
    let hw = h * w;
    for b in 0..n {
        for ch in 0..c {
            let at = |p: usize| (b * hw + p) * c + ch;
            let mean = (0..hw).map(|p| x[at(p)]).sum::<f32>() / hw.max(1) as f32;
            let var = (0..hw)
                .map(|p| {
                    let e = x[at(p)] - mean;
                    e * e
                })
                .sum::<f32>()
                / hw.max(1) as f32;
            let k = gamma / (var + eps).sqrt();
            for p in 0..hw {
                out[at(p)] = (x[at(p)] - mean) * k + beta;
            }
        }
    }
    let (d, v) = to_layout(d, out, nchw);
    Ok(vec![Tensor::new(d, Data::F32(v))])
}

#[cfg(test)]
#[path = "normalization_tests.rs"]
mod tests;
