//! FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D (float via GEMM, 8-bit via integer kernels).

use super::quant::{mbqm, quantize_multiplier};
use super::{KResult, OpCtx, check4, count, nchw_to_nhwc, nhwc_to_nchw, to_u32};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

/// `c[m×n] = a[m×k] · B` where `B[kk][j] = b[kk*rsb + j*csb]`; `a` and `c` are row-major.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    rsb: usize,
    csb: usize,
    c: &mut [f32],
) -> Result<(), String> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let c_need = m.checked_mul(n).ok_or("gemm size overflow")?;
    if c.len() < c_need {
        return Err("gemm output too small".into());
    }
    if k == 0 {
        c[..c_need].fill(0.0);
        return Ok(());
    }
    let a_need = m.checked_mul(k).ok_or("gemm size overflow")?;
    let b_last = (k - 1)
        .checked_mul(rsb)
        .and_then(|x| (n - 1).checked_mul(csb).and_then(|y| x.checked_add(y)))
        .ok_or("gemm size overflow")?;
    if a.len() < a_need || b.len() <= b_last {
        return Err("gemm operand too small".into());
    }
    let to_isize = |v: usize| isize::try_from(v).map_err(|_| "gemm stride overflow".to_string());
    let (ks, ns, rsb, csb) = (to_isize(k)?, to_isize(n)?, to_isize(rsb)?, to_isize(csb)?);
    // SAFETY: `a` holds at least m*k elements addressed as a[i*k + kk] (i < m, kk < k);
    // `b` holds more than (k-1)*rsb + (n-1)*csb elements, the largest offset sgemm reads;
    // `c` holds at least m*n elements addressed as c[i*n + j] and is exclusively borrowed, so it
    // does not alias `a` or `b`. All strides fit in isize (checked above).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            ks,
            1,
            b.as_ptr(),
            rsb,
            csb,
            0.0,
            c.as_mut_ptr(),
            ns,
            1,
        );
    }
    Ok(())
}

/// Convolution window geometry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Geometry {
    pub pad_l: usize,
    pub pad_r: usize,
    pub pad_t: usize,
    pub pad_b: usize,
    pub stride_w: usize,
    pub stride_h: usize,
    pub dil_w: usize,
    pub dil_h: usize,
}

/// How padding was given.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Padding {
    Implicit(i32),
    Explicit {
        l: usize,
        r: usize,
        t: usize,
        b: usize,
    },
}

/// Head/tail padding for an implicit scheme (SAME=1, VALID=2).
pub(crate) fn implicit_padding(
    in_size: usize,
    stride: usize,
    dil: usize,
    filter: usize,
    scheme: i32,
) -> (usize, usize) {
    if scheme != 1 {
        return (0, 0);
    }
    let eff = (filter.saturating_sub(1))
        .saturating_mul(dil)
        .saturating_add(1);
    let out = in_size.div_ceil(stride);
    let tmp = out
        .saturating_sub(1)
        .saturating_mul(stride)
        .saturating_add(eff);
    if tmp > in_size {
        let total = tmp - in_size;
        (total / 2, total - total / 2)
    } else {
        (0, 0)
    }
}

/// Output extent: (in + head + tail - effective_filter + stride) / stride.
pub(crate) fn out_size(
    in_size: usize,
    filter: usize,
    stride: usize,
    dil: usize,
    head: usize,
    tail: usize,
) -> Option<usize> {
    let eff = filter.checked_sub(1)?.checked_mul(dil)?.checked_add(1)?;
    let padded = in_size.checked_add(head)?.checked_add(tail)?;
    if padded < eff {
        return None;
    }
    Some((padded - eff) / stride + 1)
}

impl Geometry {
    pub(crate) fn resolve(
        ctx: &OpCtx<'_>,
        padding: Padding,
        strides: (usize, usize),
        dil: (usize, usize),
        in_hw: (usize, usize),
        filter_hw: (usize, usize),
    ) -> KResult<(Geometry, usize, usize)> {
        let (stride_w, stride_h) = strides;
        let (dil_w, dil_h) = dil;
        let (h, w) = in_hw;
        let (fh, fw) = filter_hw;
        if stride_w == 0 || stride_h == 0 || dil_w == 0 || dil_h == 0 {
            return Err(ctx.err("strides and dilation must be > 0"));
        }
        let (pad_l, pad_r, pad_t, pad_b) = match padding {
            Padding::Implicit(s) => {
                let (l, r) = implicit_padding(w, stride_w, dil_w, fw, s);
                let (t, b) = implicit_padding(h, stride_h, dil_h, fh, s);
                (l, r, t, b)
            }
            Padding::Explicit { l, r, t, b } => (l, r, t, b),
        };
        let g = Geometry {
            pad_l,
            pad_r,
            pad_t,
            pad_b,
            stride_w,
            stride_h,
            dil_w,
            dil_h,
        };
        let oh = out_size(h, fh, stride_h, dil_h, pad_t, pad_b)
            .ok_or_else(|| ctx.err("filter larger than the padded input height"))?;
        let ow = out_size(w, fw, stride_w, dil_w, pad_l, pad_r)
            .ok_or_else(|| ctx.err("filter larger than the padded input width"))?;
        Ok((g, oh, ow))
    }

    /// Input row for output row `oy` and filter row `ky`, if inside the input.
    #[inline]
    fn in_y(&self, oy: usize, ky: usize, h: usize) -> Option<usize> {
        (oy * self.stride_h + ky * self.dil_h)
            .checked_sub(self.pad_t)
            .filter(|&y| y < h)
    }

    #[inline]
    fn in_x(&self, ox: usize, kx: usize, w: usize) -> Option<usize> {
        (ox * self.stride_w + kx * self.dil_w)
            .checked_sub(self.pad_l)
            .filter(|&x| x < w)
    }
}

/// Parsed CONV_2D / DEPTHWISE_CONV_2D arguments.
struct ConvArgs {
    padding: Padding,
    strides: (usize, usize),
    multiplier: usize,
    act: usize,
    nchw: bool,
    dil: (usize, usize),
}

fn parse_conv_args(ctx: &OpCtx<'_>, depthwise: bool) -> KResult<ConvArgs> {
    let n = ctx.n_inputs();
    let extra = usize::from(depthwise);
    let implicit = n == 7 + extra
        || n == 8 + extra
        || (n == 10 + extra && ctx.ty(7 + extra)? == OperandType::Bool);
    let (padding, first) = if implicit {
        (Padding::Implicit(ctx.scalar_i32(3)?), 4)
    } else {
        (
            Padding::Explicit {
                l: ctx.scalar_usize(3, "padding")?,
                r: ctx.scalar_usize(4, "padding")?,
                t: ctx.scalar_usize(5, "padding")?,
                b: ctx.scalar_usize(6, "padding")?,
            },
            7,
        )
    };
    let strides = (
        ctx.scalar_pos(first, "stride_w")?,
        ctx.scalar_pos(first + 1, "stride_h")?,
    );
    let multiplier = if depthwise {
        ctx.scalar_pos(first + 2, "depth_multiplier")?
    } else {
        1
    };
    let act = first + 2 + extra;
    let nchw = ctx.opt_bool(act + 1, false)?;
    let dil = if ctx.has(act + 2) {
        (
            ctx.scalar_pos(act + 2, "dilation_w")?,
            ctx.scalar_pos(act + 3, "dilation_h")?,
        )
    } else {
        (1, 1)
    };
    Ok(ConvArgs {
        padding,
        strides,
        multiplier,
        act,
        nchw,
        dil,
    })
}

/// Quantization of the filter: zero point and per-output-channel scales.
fn filter_quant(ctx: &OpCtx<'_>, out_c: usize) -> KResult<(i32, Vec<f32>)> {
    let f = ctx.operand(1)?;
    match &f.channel_quant {
        Some(cq) => {
            if cq.scales.len() != out_c {
                return Err(ctx.err("per-channel filter scales do not match the output depth"));
            }
            Ok((0, cq.scales.clone()))
        }
        None => Ok((f.zero_point, vec![f.scale; out_c])),
    }
}

/// 8-bit values minus their zero point.
fn centered(ctx: &OpCtx<'_>, i: usize, zp: i32) -> KResult<(Vec<u32>, Vec<i32>)> {
    let t = ctx.t(i)?;
    let v = match &t.data {
        Data::U8(v) => v.iter().map(|&x| i32::from(x) - zp).collect(),
        Data::I8(v) => v.iter().map(|&x| i32::from(x) - zp).collect(),
        _ => return Err(ctx.err(format!("input {i} is not 8-bit"))),
    };
    Ok((t.dims.clone(), v))
}

/// Requantization of an integer accumulator per output channel.
struct Requant {
    mult: Vec<(i32, i32)>,
    out_zp: i32,
    lo: i32,
    hi: i32,
    signed: bool,
}

impl Requant {
    fn new(ctx: &OpCtx<'_>, in_scale: f32, f_scales: &[f32], act: usize) -> KResult<Requant> {
        let out = ctx.out(0)?;
        let signed = out.ty == OperandType::TensorQuant8AsymmSigned;
        let (qmin, qmax) = if signed { (-128, 127) } else { (0, 255) };
        let (lo, hi) = ctx.act_q(act, qmin, qmax)?;
        let mult = f_scales
            .iter()
            .map(|&fs| {
                quantize_multiplier(f64::from(in_scale) * f64::from(fs) / f64::from(out.scale))
            })
            .collect();
        Ok(Requant {
            mult,
            out_zp: out.zero_point,
            lo,
            hi,
            signed,
        })
    }

    #[inline]
    fn apply(&self, acc: i64, oc: usize) -> i32 {
        let acc = acc.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let (m, s) = self.mult[oc];
        mbqm(acc, m, s)
            .saturating_add(self.out_zp)
            .clamp(self.lo, self.hi)
    }

    fn tensor(&self, dims: Vec<u32>, v: Vec<i32>) -> Tensor {
        if self.signed {
            Tensor::new(dims, Data::I8(v.into_iter().map(|x| x as i8).collect()))
        } else {
            Tensor::new(dims, Data::U8(v.into_iter().map(|x| x as u8).collect()))
        }
    }
}

fn is_quant8(ty: OperandType) -> bool {
    matches!(
        ty,
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned
    )
}

/// FULLY_CONNECTED(input, weights, bias, act).
pub(crate) fn fully_connected(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let in_ty = ctx.ty(0)?;
    let wt = ctx.t(1)?;
    if wt.dims.len() != 2 {
        return Err(ctx.err(format!("weights must be 2-D, got {:?}", wt.dims)));
    }
    let units = wt.dims[0] as usize;
    let isz = wt.dims[1] as usize;
    let it = ctx.t(0)?;
    let total = count(ctx, &it.dims)?;
    if total != it.data.len() || count(ctx, &wt.dims)? != wt.data.len() {
        return Err(ctx.err("operand data does not match its dimensions"));
    }
    if isz == 0 || total % isz != 0 {
        return Err(ctx.err(format!(
            "input of {total} elements is not a multiple of input size {isz}"
        )));
    }
    let batch = total / isz;
    let od = vec![to_u32(ctx, batch)?, wt.dims[0]];
    count(ctx, &od)?;
    let bias_len = ctx.t(2)?.data.len();
    if bias_len != units {
        return Err(ctx.err(format!("bias has {bias_len} elements, expected {units}")));
    }
    if crate::tensor::is_float(in_ty) {
        let (_, x) = ctx.f32s(0)?;
        let (_, w) = ctx.f32s(1)?;
        let (_, bias) = ctx.f32s(2)?;
        let (lo, hi) = ctx.act_f32(3)?;
        let mut out = vec![0f32; batch * units];
        sgemm(batch, isz, units, x, w, 1, isz, &mut out).map_err(|e| ctx.err(e))?;
        for row in out.chunks_exact_mut(units.max(1)) {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v = (*v + b).max(lo).min(hi);
            }
        }
        return Ok(Tensor::new(od, Data::F32(out)));
    }
    if !is_quant8(in_ty) {
        return Err(ctx.err(format!("unsupported type {}", in_ty.name())));
    }
    let inp = ctx.operand(0)?;
    let (_, x) = centered(ctx, 0, inp.zero_point)?;
    let (fzp, fscales) = filter_quant(ctx, units)?;
    let (_, w) = centered(ctx, 1, fzp)?;
    let (_, bias) = ctx.i32s(2)?;
    let rq = Requant::new(ctx, inp.scale, &fscales, 3)?;
    let mut out = Vec::with_capacity(batch * units);
    for b in 0..batch {
        let xr = &x[b * isz..(b + 1) * isz];
        for u in 0..units {
            let wr = &w[u * isz..(u + 1) * isz];
            let acc: i64 = xr
                .iter()
                .zip(wr)
                .map(|(&a, &c)| i64::from(a * c))
                .sum::<i64>()
                + i64::from(bias[u]);
            out.push(rq.apply(acc, u));
        }
    }
    Ok(rq.tensor(od, out))
}

/// CONV_2D in all its argument forms.
pub(crate) fn conv2d(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let a = parse_conv_args(ctx, false)?;
    let it = ctx.t(0)?;
    let ft = ctx.t(1)?;
    check4(ctx, &it.dims, it.data.len(), "input")?;
    check4(ctx, &ft.dims, ft.data.len(), "filter")?;
    let in_dims = if a.nchw {
        vec![it.dims[0], it.dims[2], it.dims[3], it.dims[1]]
    } else {
        it.dims.clone()
    };
    let [n, h, w, c] = [0, 1, 2, 3].map(|i| in_dims[i] as usize);
    let [oc, fh, fw, fc] = [0, 1, 2, 3].map(|i| ft.dims[i] as usize);
    if fc != c {
        return Err(ctx.err(format!("filter depth {fc} does not match input depth {c}")));
    }
    if ctx.t(2)?.data.len() != oc {
        return Err(ctx.err("bias length does not match the output depth"));
    }
    let (g, oh, ow) = Geometry::resolve(ctx, a.padding, a.strides, a.dil, (h, w), (fh, fw))?;
    let od = vec![in_dims[0], to_u32(ctx, oh)?, to_u32(ctx, ow)?, ft.dims[0]];
    count(ctx, &od)?;
    let k = fh * fw * c;
    let in_ty = ctx.ty(0)?;
    if crate::tensor::is_float(in_ty) {
        let x = match &it.data {
            Data::F32(v) if a.nchw => nchw_to_nhwc(v, &it.dims).1,
            Data::F32(v) => v.clone(),
            _ => return Err(ctx.err("input is not float32")),
        };
        let (_, f) = ctx.f32s(1)?;
        let (_, bias) = ctx.f32s(2)?;
        let (lo, hi) = ctx.act_f32(a.act)?;
        let mut out = vec![0f32; n * oh * ow * oc];
        let pointwise = fh == 1
            && fw == 1
            && g.stride_h == 1
            && g.stride_w == 1
            && g.pad_l + g.pad_r + g.pad_t + g.pad_b == 0;
        if pointwise {
            sgemm(n * h * w, c, oc, &x, f, 1, c, &mut out).map_err(|e| ctx.err(e))?;
        } else {
            let pixels = oh * ow;
            let chunk = (1usize << 20)
                .checked_div(k.max(1))
                .unwrap_or(1)
                .clamp(1, pixels.max(1));
            let mut patch = vec![0f32; chunk * k];
            for b in 0..n {
                let mut p0 = 0;
                while p0 < pixels {
                    let rows = chunk.min(pixels - p0);
                    for r in 0..rows {
                        let p = p0 + r;
                        let (oy, ox) = (p / ow, p % ow);
                        let dst = &mut patch[r * k..(r + 1) * k];
                        for ky in 0..fh {
                            for kx in 0..fw {
                                let d = &mut dst[(ky * fw + kx) * c..(ky * fw + kx + 1) * c];
                                match (g.in_y(oy, ky, h), g.in_x(ox, kx, w)) {
                                    (Some(iy), Some(ix)) => {
                                        let s = ((b * h + iy) * w + ix) * c;
                                        d.copy_from_slice(&x[s..s + c]);
                                    }
                                    _ => d.fill(0.0),
                                }
                            }
                        }
                    }
                    let o0 = (b * pixels + p0) * oc;
                    sgemm(rows, k, oc, &patch, f, 1, k, &mut out[o0..o0 + rows * oc])
                        .map_err(|e| ctx.err(e))?;
                    p0 += rows;
                }
            }
        }
        for px in out.chunks_exact_mut(oc.max(1)) {
            for (v, &bv) in px.iter_mut().zip(bias) {
                *v = (*v + bv).max(lo).min(hi);
            }
        }
        return Ok(finish_f32(od, out, a.nchw));
    }
    if !is_quant8(in_ty) {
        return Err(ctx.err(format!("unsupported type {}", in_ty.name())));
    }
    let inp = ctx.operand(0)?;
    let (_, mut x) = centered(ctx, 0, inp.zero_point)?;
    if a.nchw {
        x = nchw_to_nhwc(&x, &it.dims).1;
    }
    let (fzp, fscales) = filter_quant(ctx, oc)?;
    let (_, f) = centered(ctx, 1, fzp)?;
    let (_, bias) = ctx.i32s(2)?;
    let rq = Requant::new(ctx, inp.scale, &fscales, a.act)?;
    let mut out = Vec::with_capacity(n * oh * ow * oc);
    let mut patch = vec![0i32; k];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for ky in 0..fh {
                    for kx in 0..fw {
                        let d = &mut patch[(ky * fw + kx) * c..(ky * fw + kx + 1) * c];
                        match (g.in_y(oy, ky, h), g.in_x(ox, kx, w)) {
                            (Some(iy), Some(ix)) => {
                                let s = ((b * h + iy) * w + ix) * c;
                                d.copy_from_slice(&x[s..s + c]);
                            }
                            _ => d.fill(0),
                        }
                    }
                }
                for o in 0..oc {
                    let fr = &f[o * k..(o + 1) * k];
                    let acc: i64 = patch
                        .iter()
                        .zip(fr)
                        .map(|(&p, &q)| i64::from(p * q))
                        .sum::<i64>()
                        + i64::from(bias[o]);
                    out.push(rq.apply(acc, o));
                }
            }
        }
    }
    Ok(finish_q(&rq, od, out, a.nchw))
}

fn finish_f32(od: Vec<u32>, out: Vec<f32>, nchw: bool) -> Tensor {
    if nchw {
        let (d, v) = nhwc_to_nchw(&out, &od);
        Tensor::new(d, Data::F32(v))
    } else {
        Tensor::new(od, Data::F32(out))
    }
}

fn finish_q(rq: &Requant, od: Vec<u32>, out: Vec<i32>, nchw: bool) -> Tensor {
    if nchw {
        let (d, v) = nhwc_to_nchw(&out, &od);
        rq.tensor(d, v)
    } else {
        rq.tensor(od, out)
    }
}

/// DEPTHWISE_CONV_2D in all its argument forms.
pub(crate) fn depthwise_conv2d(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let a = parse_conv_args(ctx, true)?;
    let it = ctx.t(0)?;
    let ft = ctx.t(1)?;
    check4(ctx, &it.dims, it.data.len(), "input")?;
    check4(ctx, &ft.dims, ft.data.len(), "filter")?;
    let in_dims = if a.nchw {
        vec![it.dims[0], it.dims[2], it.dims[3], it.dims[1]]
    } else {
        it.dims.clone()
    };
    let [n, h, w, c] = [0, 1, 2, 3].map(|i| in_dims[i] as usize);
    let [f0, fh, fw, oc] = [0, 1, 2, 3].map(|i| ft.dims[i] as usize);
    let mult = a.multiplier;
    if f0 != 1 || c.checked_mul(mult) != Some(oc) {
        return Err(ctx.err(format!(
            "filter {:?} does not match input depth {c} × multiplier {mult}",
            ft.dims
        )));
    }
    if ctx.t(2)?.data.len() != oc {
        return Err(ctx.err("bias length does not match the output depth"));
    }
    let (g, oh, ow) = Geometry::resolve(ctx, a.padding, a.strides, a.dil, (h, w), (fh, fw))?;
    let od = vec![in_dims[0], to_u32(ctx, oh)?, to_u32(ctx, ow)?, ft.dims[3]];
    count(ctx, &od)?;
    let in_ty = ctx.ty(0)?;
    if crate::tensor::is_float(in_ty) {
        let x = match &it.data {
            Data::F32(v) if a.nchw => nchw_to_nhwc(v, &it.dims).1,
            Data::F32(v) => v.clone(),
            _ => return Err(ctx.err("input is not float32")),
        };
        let (_, f) = ctx.f32s(1)?;
        let (_, bias) = ctx.f32s(2)?;
        let (lo, hi) = ctx.act_f32(a.act)?;
        let mut out = vec![0f32; n * oh * ow * oc];
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    let o0 = ((b * oh + oy) * ow + ox) * oc;
                    let acc = &mut out[o0..o0 + oc];
                    acc.copy_from_slice(bias);
                    for ky in 0..fh {
                        let Some(iy) = g.in_y(oy, ky, h) else {
                            continue;
                        };
                        for kx in 0..fw {
                            let Some(ix) = g.in_x(ox, kx, w) else {
                                continue;
                            };
                            let xs = &x[((b * h + iy) * w + ix) * c..][..c];
                            let fs = &f[(ky * fw + kx) * oc..][..oc];
                            for (ic, &xv) in xs.iter().enumerate() {
                                for m in 0..mult {
                                    let o = ic * mult + m;
                                    acc[o] += xv * fs[o];
                                }
                            }
                        }
                    }
                    for v in acc.iter_mut() {
                        *v = v.max(lo).min(hi);
                    }
                }
            }
        }
        return Ok(finish_f32(od, out, a.nchw));
    }
    if !is_quant8(in_ty) {
        return Err(ctx.err(format!("unsupported type {}", in_ty.name())));
    }
    let inp = ctx.operand(0)?;
    let (_, mut x) = centered(ctx, 0, inp.zero_point)?;
    if a.nchw {
        x = nchw_to_nhwc(&x, &it.dims).1;
    }
    let (fzp, fscales) = filter_quant(ctx, oc)?;
    let (_, f) = centered(ctx, 1, fzp)?;
    let (_, bias) = ctx.i32s(2)?;
    let rq = Requant::new(ctx, inp.scale, &fscales, a.act)?;
    let mut out = Vec::with_capacity(n * oh * ow * oc);
    let mut acc = vec![0i64; oc];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for (a, &bv) in acc.iter_mut().zip(bias) {
                    *a = i64::from(bv);
                }
                for ky in 0..fh {
                    let Some(iy) = g.in_y(oy, ky, h) else {
                        continue;
                    };
                    for kx in 0..fw {
                        let Some(ix) = g.in_x(ox, kx, w) else {
                            continue;
                        };
                        let xs = &x[((b * h + iy) * w + ix) * c..][..c];
                        let fs = &f[(ky * fw + kx) * oc..][..oc];
                        for (ic, &xv) in xs.iter().enumerate() {
                            for m in 0..mult {
                                let o = ic * mult + m;
                                acc[o] += i64::from(xv * fs[o]);
                            }
                        }
                    }
                }
                for (o, &v) in acc.iter().enumerate() {
                    out.push(rq.apply(v, o));
                }
            }
        }
    }
    Ok(finish_q(&rq, od, out, a.nchw))
}
