//! TRANSPOSE_CONV_2D and GROUPED_CONV_2D: float32, float16, 8-bit asymmetric (unsigned and
//! signed) with per-tensor or per-channel (TENSOR_QUANT8_SYMM_PER_CHANNEL) filters, NHWC and
//! NCHW. Quantized results use the integer accumulation and gemmlowp requantization of the
//! reference kernels.

use super::conv::{Geometry, Padding, filter_quant};
use super::opdef::OpDef;
use super::quant::{Requant, centered};
use super::{
    KResult, OpCtx, check4, count, is_quant8, nchw_to_nhwc, nhwc_input, q8_tensor, to_layout,
    to_u32,
};
use crate::check::{Ck, F32_Q8, FLOAT, Issue, const_i32};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor, is_float};

use OperandType as T;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: OperationType::TransposeConv2d,
        types: F32_Q8,
        check: check_transpose_conv,
        run: transpose_conv,
    },
    OpDef {
        op: OperationType::GroupedConv2d,
        types: F32_Q8,
        check: check_grouped_conv,
        run: grouped_conv,
    },
];

// ---------------------------------------------------------------- shared checks

/// Filter (input 1) and bias (input 2) types for input type `t0`: the input's own type for
/// floats; for 8-bit inputs the input's type or per-channel symmetric along dimension 0, and
/// a TENSOR_INT32 bias.
fn check_filter_bias(c: &Ck<'_>, t0: OperandType) -> Result<(), Issue> {
    let ft = c.ty(1)?;
    if FLOAT.contains(&t0) {
        c.is(1, t0, "filter")?;
        c.is(2, t0, "bias")?;
        return Ok(());
    }
    if ft == T::TensorQuant8SymmPerChannel {
        let dim = c.inp(1)?.channel_quant.as_ref().map(|q| q.channel_dim);
        if dim != Some(0) {
            return Err(Issue::Invalid(
                "per-channel filter must have channel_dim 0".into(),
            ));
        }
    } else if ft != t0 {
        return Err(Issue::Invalid(format!(
            "filter type {} does not match input type {}",
            ft.name(),
            t0.name()
        )));
    }
    c.is(2, T::TensorInt32, "bias")?;
    if c.inp(2)?.zero_point != 0 {
        return Err(Issue::Invalid("bias zero point must be 0".into()));
    }
    Ok(())
}

/// Checks the INT32 scalars listed with their roles, and the constant values that are known:
/// strides and group counts > 0, paddings >= 0, a padding scheme of 1 (SAME) or 2 (VALID), a
/// fused activation of 0..=3.
fn check_ints(c: &Ck<'_>, args: &[(usize, &str)]) -> Result<(), Issue> {
    for &(i, what) in args {
        c.is(i, T::Int32, what)?;
        let Some(v) = const_i32(c, i) else {
            continue;
        };
        let ok = match what {
            "stride width" | "stride height" | "number of groups" => v > 0,
            "padding left" | "padding top" | "padding right" | "padding bottom" => v >= 0,
            "padding scheme" => v == 1 || v == 2,
            "fused activation" => (0..=3).contains(&v),
            _ => true,
        };
        if !ok {
            return Err(Issue::Invalid(format!("{what} {v} out of range")));
        }
    }
    Ok(())
}

fn check_4d(c: &Ck<'_>, i: usize, what: &str) -> Result<(), Issue> {
    super::normalization::rank_in(c, i, 4, 4, what)
}

// ---------------------------------------------------------------- shared operands

/// The operands of one convolution in NHWC order: input, filter `[oc][fh][fw][cf]`, bias.
enum Operands {
    Float {
        x: Vec<f32>,
        f: Vec<f32>,
        bias: Vec<f32>,
        lo: f32,
        hi: f32,
    },
    Quant {
        /// Input minus its zero point.
        x: Vec<i64>,
        /// Filter minus its zero point.
        f: Vec<i64>,
        bias: Vec<i64>,
        rq: Requant,
    },
}

impl Operands {
    /// Reads input, filter and bias for `oc` output channels with the fused activation at
    /// input `act`; an NCHW input is reordered to NHWC.
    fn read(ctx: &OpCtx<'_>, nchw: bool, oc: usize, act: usize) -> KResult<Operands> {
        let it = ctx.t(0)?;
        let in_ty = ctx.ty(0)?;
        if ctx.t(2)?.data.len() != oc {
            return Err(ctx.err(format!(
                "bias has {} elements, the output depth is {oc}",
                ctx.t(2)?.data.len()
            )));
        }
        if is_float(in_ty) {
            let x = match &it.data {
                Data::F32(v) if nchw => nchw_to_nhwc(v, &it.dims).1,
                Data::F32(v) => v.to_vec(),
                _ => return Err(ctx.err("input is not float")),
            };
            let (_, f) = ctx.f32s(1)?;
            let (_, bias) = ctx.f32s(2)?;
            let (lo, hi) = ctx.act_f32(act)?;
            return Ok(Operands::Float {
                x,
                f: f.to_vec(),
                bias: bias.to_vec(),
                lo,
                hi,
            });
        }
        if !is_quant8(in_ty) {
            return Err(ctx.err(format!("unsupported type {}", in_ty.name())));
        }
        let inp = ctx.operand(0)?;
        let (_, mut x) = centered(ctx, 0, inp.zero_point)?;
        if nchw {
            x = nchw_to_nhwc(&x, &it.dims).1;
        }
        let (fzp, scales) = filter_quant(ctx, oc)?;
        let (_, f) = centered(ctx, 1, fzp)?;
        let (_, bias) = ctx.i32s(2)?;
        let rq = Requant::new(ctx, inp.scale, &scales, act)?;
        Ok(Operands::Quant {
            x,
            f,
            bias: bias.iter().map(|&b| i64::from(b)).collect(),
            rq,
        })
    }

    /// Runs `acc(x, f)` (accumulations without bias, NHWC, `oc` channels innermost) in the
    /// operands' arithmetic, then adds the bias, applies the activation and returns output 0
    /// of NHWC dimensions `od` in the requested layout.
    fn finish(
        self,
        od: Vec<u32>,
        nchw: bool,
        oc: usize,
        accf: impl FnOnce(&[f32], &[f32]) -> Vec<f32>,
        acci: impl FnOnce(&[i64], &[i64]) -> Vec<i64>,
    ) -> Tensor {
        match self {
            Operands::Float { x, f, bias, lo, hi } => {
                let mut out = accf(&x, &f);
                for px in out.chunks_exact_mut(oc.max(1)) {
                    for (v, &b) in px.iter_mut().zip(&bias) {
                        *v = (*v + b).max(lo).min(hi);
                    }
                }
                let (d, v) = to_layout(od, out, nchw);
                Tensor::new(d, Data::F32(v))
            }
            Operands::Quant { x, f, bias, rq } => {
                let acc = acci(&x, &f);
                let mut out = Vec::with_capacity(acc.len());
                for px in acc.chunks_exact(oc.max(1)) {
                    for (k, (&a, &b)) in px.iter().zip(&bias).enumerate() {
                        out.push(rq.apply(a.saturating_add(b), k));
                    }
                }
                let (d, v) = to_layout(od, out, nchw);
                q8_tensor(rq.ty, d, v.into_vec())
            }
        }
    }
}

/// Filter (input 1) extents `[oc, fh, fw, cf]`, checked 4-D.
fn filter_dims(ctx: &OpCtx<'_>) -> KResult<[usize; 4]> {
    let ft = ctx.t(1)?;
    check4(ctx, &ft.dims, ft.data.len(), "filter")?;
    Ok([0, 1, 2, 3].map(|i| ft.dims[i] as usize))
}

// ---------------------------------------------------------------- TRANSPOSE_CONV_2D

/// TRANSPOSE_CONV_2D: explicit (input, filter, bias, pad l, r, t, b, stride w, h, act, layout)
/// or implicit (input, filter, bias, output shape, scheme, stride w, h, act, layout).
fn check_transpose_conv(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[9, 11], 1)?;
    let t0 = c.ty(0)?;
    check_filter_bias(c, t0)?;
    if c.ins.len() == 11 {
        check_ints(
            c,
            &[
                (3, "padding left"),
                (4, "padding right (may be negative)"),
                (5, "padding top"),
                (6, "padding bottom (may be negative)"),
                (7, "stride width"),
                (8, "stride height"),
                (9, "fused activation"),
            ],
        )?;
        c.is(10, T::Bool, "layout")?;
    } else {
        c.is(3, T::TensorInt32, "output shape")?;
        let d = &c.inp(3)?.dimensions;
        if !d.is_empty() && (d.len() != 1 || (d[0] != 0 && d[0] != 4)) {
            return Err(Issue::Invalid(format!(
                "output shape must be a 1-D tensor of 4 values, is {d:?}"
            )));
        }
        check_ints(
            c,
            &[
                (4, "padding scheme"),
                (5, "stride width"),
                (6, "stride height"),
                (7, "fused activation"),
            ],
        )?;
        c.is(8, T::Bool, "layout")?;
    }
    check_4d(c, 0, "input")?;
    check_4d(c, 1, "filter")?;
    c.same_out(t0)?;
    Ok(())
}

/// Transpose-convolution padding of one dimension for an implicit scheme, from the requested
/// output extent: head and tail (the tail may be negative so that the output fits the last
/// stride exactly).
fn tconv_implicit_padding(out: i64, stride: i64, filter: i64, scheme: i32) -> (i64, i64) {
    if scheme != 1 {
        return (0, 0);
    }
    let n = (out + stride - 1) / stride;
    let tmp = (n - 1) * stride + filter;
    let head = if tmp > out { (tmp - out) / 2 } else { 0 };
    (head, tmp - out - head)
}

fn transpose_conv(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let explicit = ctx.n_inputs() == 11;
    let nchw = ctx.scalar_bool(if explicit { 10 } else { 8 })?;
    let it = ctx.t(0)?;
    let (in_dims, [n, h, w, c]) = nhwc_input(ctx, it, nchw)?;
    let [oc, fh, fw, fc] = filter_dims(ctx)?;
    if fc != c {
        return Err(ctx.err(format!("filter depth {fc} does not match input depth {c}")));
    }
    if h == 0 || w == 0 || c == 0 || oc == 0 || fh == 0 || fw == 0 {
        return Err(ctx.err("input, filter and output extents other than batches must be > 0"));
    }
    let (sw, sh, act, (pl, pr, pt, pb));
    if explicit {
        let pads = [3, 4, 5, 6].map(|i| ctx.scalar_i32(i).map(i64::from));
        let [l, r, t, b] = pads;
        let (l, r, t, b) = (l?, r?, t?, b?);
        if l < 0 || t < 0 {
            return Err(ctx.err("padding left and top must be >= 0"));
        }
        sw = ctx.scalar_pos(7, "stride_w")?;
        sh = ctx.scalar_pos(8, "stride_h")?;
        act = 9;
        (pl, pr, pt, pb) = (l, r, t, b);
    } else {
        let (sd, shape) = ctx.i32s(3)?;
        if sd.len() != 1 || shape.len() != 4 {
            return Err(ctx.err(format!(
                "output shape must be a 1-D tensor of 4 values, is {sd:?}"
            )));
        }
        let (oh_req, ow_req) = if nchw {
            (shape[2], shape[3])
        } else {
            (shape[1], shape[2])
        };
        let scheme = ctx.scalar_i32(4)?;
        if scheme != 1 && scheme != 2 {
            return Err(ctx.err(format!("padding scheme {scheme} is neither SAME nor VALID")));
        }
        sw = ctx.scalar_pos(5, "stride_w")?;
        sh = ctx.scalar_pos(6, "stride_h")?;
        act = 7;
        let (l, r) = tconv_implicit_padding(i64::from(ow_req), sw as i64, fw as i64, scheme);
        let (t, b) = tconv_implicit_padding(i64::from(oh_req), sh as i64, fh as i64, scheme);
        (pl, pr, pt, pb) = (l, r, t, b);
    }
    // out = (in - 1) * stride + filter - head - tail, in i64 (inputs are < 2^32).
    let extent = |i: usize, s: usize, f: usize, a: i64, b: i64| {
        (i as i64 - 1)
            .checked_mul(s as i64)
            .and_then(|v| v.checked_add(f as i64))
            .and_then(|v| v.checked_sub(a))
            .and_then(|v| v.checked_sub(b))
            .unwrap_or(-1)
    };
    let oh = extent(h, sh, fh, pt, pb);
    let ow = extent(w, sw, fw, pl, pr);
    if oh <= 0 || ow <= 0 {
        return Err(ctx.err(format!(
            "output extent {oh}×{ow} must be > 0 (paddings too large)"
        )));
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let od = vec![
        in_dims[0],
        to_u32(ctx, oh)?,
        to_u32(ctx, ow)?,
        to_u32(ctx, oc)?,
    ];
    let total = count(ctx, &od)?;
    let ops = Operands::read(ctx, nchw, oc, act)?;
    // Every input pixel scatters its filter-weighted values into the output window whose
    // origin is (iy·sh - pt, ix·sw - pl).
    #[allow(clippy::too_many_arguments)]
    fn scatter<V: Copy + Default + std::ops::AddAssign + std::ops::Mul<Output = V>>(
        x: &[V],
        f: &[V],
        total: usize,
        g: (usize, usize, usize, usize),
        k: (usize, usize, usize),
        o: (usize, usize),
        s: (usize, usize),
        p: (i64, i64),
    ) -> Vec<V> {
        let (n, h, w, c) = g;
        let (oc, fh, fw) = k;
        let (oh, ow) = o;
        let (sh, sw) = s;
        let (pt, pl) = p;
        let mut out = vec![V::default(); total];
        for b in 0..n {
            for iy in 0..h {
                for ix in 0..w {
                    let xp = &x[((b * h + iy) * w + ix) * c..][..c];
                    let y0 = (iy * sh) as i64 - pt;
                    let x0 = (ix * sw) as i64 - pl;
                    for ky in 0..fh {
                        let oy = y0 + ky as i64;
                        if oy < 0 || oy >= oh as i64 {
                            continue;
                        }
                        for kx in 0..fw {
                            let ox = x0 + kx as i64;
                            if ox < 0 || ox >= ow as i64 {
                                continue;
                            }
                            let ob = ((b * oh + oy as usize) * ow + ox as usize) * oc;
                            for k in 0..oc {
                                let fp = &f[((k * fh + ky) * fw + kx) * c..][..c];
                                let mut acc = V::default();
                                for d in 0..c {
                                    acc += xp[d] * fp[d];
                                }
                                out[ob + k] += acc;
                            }
                        }
                    }
                }
            }
        }
        out
    }
    let g = (n, h, w, c);
    let k = (oc, fh, fw);
    let t = ops.finish(
        od,
        nchw,
        oc,
        |x, f| scatter(x, f, total, g, k, (oh, ow), (sh, sw), (pt, pl)),
        |x, f| scatter(x, f, total, g, k, (oh, ow), (sh, sw), (pt, pl)),
    );
    Ok(vec![t])
}

// ---------------------------------------------------------------- GROUPED_CONV_2D

/// GROUPED_CONV_2D: explicit (input, filter, bias, pad l, r, t, b, stride w, h, groups, act,
/// layout) or implicit (input, filter, bias, scheme, stride w, h, groups, act, layout).
fn check_grouped_conv(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[9, 12], 1)?;
    let t0 = c.ty(0)?;
    check_filter_bias(c, t0)?;
    let groups_at = if c.ins.len() == 12 {
        check_ints(
            c,
            &[
                (3, "padding left"),
                (4, "padding right"),
                (5, "padding top"),
                (6, "padding bottom"),
                (7, "stride width"),
                (8, "stride height"),
                (9, "number of groups"),
                (10, "fused activation"),
            ],
        )?;
        c.is(11, T::Bool, "layout")?;
        9
    } else {
        check_ints(
            c,
            &[
                (3, "padding scheme"),
                (4, "stride width"),
                (5, "stride height"),
                (6, "number of groups"),
                (7, "fused activation"),
            ],
        )?;
        c.is(8, T::Bool, "layout")?;
        6
    };
    check_4d(c, 0, "input")?;
    check_4d(c, 1, "filter")?;
    c.same_out(t0)?;
    if let Some(g) = const_i32(c, groups_at) {
        let oc = c.inp(1)?.dimensions.first().copied().unwrap_or(0);
        if oc != 0 && oc % g as u32 != 0 {
            return Err(Issue::Invalid(format!(
                "output depth {oc} is not a multiple of the number of groups {g}"
            )));
        }
    }
    Ok(())
}

fn grouped_conv(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let explicit = ctx.n_inputs() == 12;
    let (padding, first) = Padding::parse(ctx, 3, !explicit)?;
    let sw = ctx.scalar_pos(first, "stride_w")?;
    let sh = ctx.scalar_pos(first + 1, "stride_h")?;
    let groups = ctx.scalar_pos(first + 2, "number of groups")?;
    let act = first + 3;
    let nchw = ctx.scalar_bool(act + 1)?;
    if let Padding::Implicit(s) = padding
        && s != 1
        && s != 2
    {
        return Err(ctx.err(format!("padding scheme {s} is neither SAME nor VALID")));
    }
    let it = ctx.t(0)?;
    let (in_dims, [n, h, w, c]) = nhwc_input(ctx, it, nchw)?;
    let [oc, fh, fw, cg] = filter_dims(ctx)?;
    if cg.checked_mul(groups) != Some(c) {
        return Err(ctx.err(format!(
            "input depth {c} is not filter depth {cg} × {groups} groups"
        )));
    }
    if oc % groups != 0 {
        return Err(ctx.err(format!(
            "output depth {oc} is not a multiple of {groups} groups"
        )));
    }
    if fh == 0 || fw == 0 || oc == 0 {
        return Err(ctx.err("filter extents must be > 0"));
    }
    let (g, oh, ow) = Geometry::resolve(ctx, padding, (sw, sh), (1, 1), (h, w), (fh, fw))?;
    let od = vec![
        in_dims[0],
        to_u32(ctx, oh)?,
        to_u32(ctx, ow)?,
        to_u32(ctx, oc)?,
    ];
    let total = count(ctx, &od)?;
    let ops = Operands::read(ctx, nchw, oc, act)?;
    let og = oc / groups;
    fn gather<V: Copy + Default + std::ops::AddAssign + std::ops::Mul<Output = V>>(
        x: &[V],
        f: &[V],
        total: usize,
        dims: (usize, usize, usize, usize),
        k: (usize, usize, usize, usize, usize),
        o: (usize, usize),
        geo: &Geometry,
    ) -> Vec<V> {
        let (n, h, w, c) = dims;
        let (oc, fh, fw, cg, og) = k;
        let (oh, ow) = o;
        let mut out = Vec::with_capacity(total);
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ko in 0..oc {
                        let c0 = (ko / og) * cg;
                        let mut acc = V::default();
                        for ky in 0..fh {
                            let Some(iy) = geo.in_y(oy, ky, h) else {
                                continue;
                            };
                            for kx in 0..fw {
                                let Some(ix) = geo.in_x(ox, kx, w) else {
                                    continue;
                                };
                                let xp = &x[((b * h + iy) * w + ix) * c + c0..][..cg];
                                let fp = &f[((ko * fh + ky) * fw + kx) * cg..][..cg];
                                for d in 0..cg {
                                    acc += xp[d] * fp[d];
                                }
                            }
                        }
                        out.push(acc);
                    }
                }
            }
        }
        out
    }
    let dims = (n, h, w, c);
    let k = (oc, fh, fw, cg, og);
    let t = ops.finish(
        od,
        nchw,
        oc,
        |x, f| gather(x, f, total, dims, k, (oh, ow), &g),
        |x, f| gather(x, f, total, dims, k, (oh, ow), &g),
    );
    Ok(vec![t])
}

#[cfg(test)]
#[path = "conv_variants_tests.rs"]
mod tests;
