//! RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: float32, float16, 8-bit asymmetric (unsigned
//! and signed), NHWC and NCHW, output size given as INT32 extents or as scales (FLOAT32, or
//! FLOAT16 for a TENSOR_FLOAT16 input), with align_corners and half_pixel_centers.

use super::normalization::rank_in;
use super::opdef::OpDef;
use super::{KResult, OpCtx, count, nchw_to_nhwc, nhwc_input, to_layout, to_u32};
use crate::check::{Ck, F32_Q8, Issue, const_bool, const_f32, const_i32, float_scalar};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Buf, Data, Tensor};

use OperandType as T;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: OperationType::ResizeBilinear,
        types: F32_Q8,
        check: check_bilinear,
        run: resize_bilinear,
    },
    OpDef {
        op: OperationType::ResizeNearestNeighbor,
        types: F32_Q8,
        check: check_nearest,
        run: resize_nearest,
    },
];

fn check_bilinear(c: &Ck<'_>) -> Result<(), Issue> {
    check_resize(c, false)
}

fn check_nearest(c: &Ck<'_>) -> Result<(), Issue> {
    check_resize(c, true)
}

/// (input, width | width scale, height | height scale, layout, [align_corners],
/// [half_pixel_centers]); the layout is optional for RESIZE_BILINEAR only.
fn check_resize(c: &Ck<'_>, nearest: bool) -> Result<(), Issue> {
    if nearest {
        c.counts(&[4, 5, 6], 1)?;
    } else {
        c.counts(&[3, 4, 5, 6], 1)?;
    }
    let t0 = c.ty(0)?;
    if !F32_Q8.contains(&t0) {
        return Err(Issue::Invalid(format!(
            "input must be TENSOR_FLOAT32, TENSOR_FLOAT16 or 8-bit asymmetric, is {}",
            t0.name()
        )));
    }
    let st = c.ty(1)?;
    let fs = float_scalar(t0);
    if st != T::Int32 && st != fs {
        return Err(Issue::Invalid(format!(
            "output width must be INT32 or a {} scale for {} input, is {}",
            fs.name(),
            t0.name(),
            st.name()
        )));
    }
    c.is(2, st, "output height or height scale")?;
    if nearest {
        c.is(3, T::Bool, "layout")?;
    } else {
        c.opt(3, T::Bool, "layout")?;
    }
    c.opt(4, T::Bool, "align_corners")?;
    c.opt(5, T::Bool, "half_pixel_centers")?;
    c.same_out(t0)?;
    c.same_quant()?;
    rank_in(c, 0, 4, 4, "input")?;
    for (i, what) in [(1, "output width"), (2, "output height")] {
        if let Some(v) = const_i32(c, i)
            && v <= 0
        {
            return Err(Issue::Invalid(format!("{what} must be > 0, is {v}")));
        }
        if let Some(s) = const_f32(c, i)
            && !(s > 0.0 && s.is_finite())
        {
            return Err(Issue::Invalid(format!("{what} scale must be > 0, is {s}")));
        }
    }
    if const_bool(c, 4) == Some(true) && const_bool(c, 5) == Some(true) {
        return Err(Issue::Invalid(
            "align_corners and half_pixel_centers cannot both be true".into(),
        ));
    }
    Ok(())
}

/// The resize arguments as read at execution.
struct Resize<'a> {
    input: &'a Tensor,
    nchw: bool,
    align: bool,
    half: bool,
    /// Input extents, NHWC.
    nhwc: [usize; 4],
    out_hw: (usize, usize),
    /// Output dimensions, NHWC.
    od: Vec<u32>,
}

impl<'a> Resize<'a> {
    fn read(ctx: &OpCtx<'a>) -> KResult<Self> {
        let nchw = ctx.opt_bool(3, false)?;
        let align = ctx.opt_bool(4, false)?;
        let half = ctx.opt_bool(5, false)?;
        if align && half {
            return Err(ctx.err("align_corners and half_pixel_centers cannot both be true"));
        }
        let input = ctx.t(0)?;
        let (in_dims, nhwc) = nhwc_input(ctx, input, nchw)?;
        let [_, h, w, _] = nhwc;
        let (ow, oh) = if matches!(ctx.ty(1)?, T::Float32 | T::Float16) {
            let f = |i: usize, size: usize, what: &str| -> KResult<usize> {
                let s = ctx.scalar_f32(i)?;
                let v = (size as f32 * s).floor();
                if !(v >= 1.0 && v < u32::MAX as f32) {
                    return Err(ctx.err(format!(
                        "{what} scale {s} gives an output extent of {v}, must be >= 1"
                    )));
                }
                Ok(v as usize)
            };
            (f(1, w, "width")?, f(2, h, "height")?)
        } else {
            (
                ctx.scalar_pos(1, "output width")?,
                ctx.scalar_pos(2, "output height")?,
            )
        };
        let od = vec![in_dims[0], to_u32(ctx, oh)?, to_u32(ctx, ow)?, in_dims[3]];
        count(ctx, &od)?;
        Ok(Resize {
            input,
            nchw,
            align,
            half,
            nhwc,
            out_hw: (oh, ow),
            od,
        })
    }

    /// Input-to-output scale of one dimension.
    fn scale(&self, i: usize, o: usize) -> f32 {
        if self.align && o > 1 {
            (i as f32 - 1.0) / (o as f32 - 1.0)
        } else {
            i as f32 / o as f32
        }
    }
}

/// The input in NHWC order.
fn nhwc_data<T: Copy>(v: &[T], r: &Resize<'_>) -> Vec<T> {
    if r.nchw {
        nchw_to_nhwc(v, &r.input.dims).1
    } else {
        v.to_vec()
    }
}

/// RESIZE_NEAREST_NEIGHBOR: each output pixel copies one input pixel.
fn resize_nearest(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let r = Resize::read(ctx)?;
    let [n, h, w, c] = r.nhwc;
    let (oh, ow) = r.out_hw;
    let (hs, ws) = (r.scale(h, oh), r.scale(w, ow));
    let (align, half) = (r.align, r.half);
    let nearest = |o: usize, scale: f32, size: usize| -> usize {
        let offset = if half { 0.5 } else { 0.0 };
        let v = (o as f32 + offset) * scale;
        let i = if align { v.round() } else { v.floor() };
        (i.max(0.0) as usize).min(size.saturating_sub(1))
    };
    let ys: Vec<usize> = (0..oh).map(|o| nearest(o, hs, h)).collect();
    let xs: Vec<usize> = (0..ow).map(|o| nearest(o, ws, w)).collect();
    let mut idx = Vec::with_capacity(n * oh * ow * c);
    for b in 0..n {
        for &y in &ys {
            for &x in &xs {
                let at = ((b * h + y) * w + x) * c;
                idx.extend(at..at + c);
            }
        }
    }
    fn pick<T: Copy>(v: &[T], r: &Resize<'_>, idx: &[usize]) -> (Vec<u32>, Buf<T>) {
        let x = nhwc_data(v, r);
        let out: Vec<T> = idx.iter().map(|&i| x[i]).collect();
        to_layout(r.od.clone(), out, r.nchw)
    }
    let t = match &r.input.data {
        Data::F32(v) => {
            let (d, o) = pick(v, &r, &idx);
            Tensor::new(d, Data::F32(o))
        }
        Data::U8(v) => {
            let (d, o) = pick(v, &r, &idx);
            Tensor::new(d, Data::U8(o))
        }
        Data::I8(v) => {
            let (d, o) = pick(v, &r, &idx);
            Tensor::new(d, Data::I8(o))
        }
        _ => return Err(ctx.err("unsupported input type")),
    };
    Ok(vec![t])
}

/// Source coordinate, lower and upper neighbour for output coordinate `o`.
fn interp(o: usize, scale: f32, half_pixel: bool, in_size: usize) -> (f32, usize, usize) {
    let v = if half_pixel {
        (o as f32 + 0.5) * scale - 0.5
    } else {
        o as f32 * scale
    };
    let last = in_size.saturating_sub(1);
    let lo = (v.floor().max(0.0) as usize).min(last);
    let hi = if half_pixel {
        (v.ceil().max(0.0) as usize).min(last)
    } else {
        (lo + 1).min(last)
    };
    (v, lo, hi)
}

/// RESIZE_BILINEAR; 8-bit values are interpolated in float and rounded half away from zero.
fn resize_bilinear(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let r = Resize::read(ctx)?;
    let [n, h, w, c] = r.nhwc;
    let (oh, ow) = r.out_hw;
    let (hs, ws) = (r.scale(h, oh), r.scale(w, ow));
    let x: Vec<f32> = match &r.input.data {
        Data::F32(v) => nhwc_data(v, &r),
        Data::U8(v) => nhwc_data(v, &r).into_iter().map(f32::from).collect(),
        Data::I8(v) => nhwc_data(v, &r).into_iter().map(f32::from).collect(),
        _ => return Err(ctx.err("unsupported input type")),
    };
    let mut out = Vec::with_capacity(n * oh * ow * c);
    let xs: Vec<(f32, usize, usize)> = (0..ow).map(|o| interp(o, ws, r.half, w)).collect();
    for b in 0..n {
        for oy in 0..oh {
            let (iy, y0, y1) = interp(oy, hs, r.half, h);
            let dy = iy - y0 as f32;
            for &(ix, x0, x1) in &xs {
                let dx = ix - x0 as f32;
                let at = |y: usize, xx: usize, ch: usize| x[((b * h + y) * w + xx) * c + ch];
                for ch in 0..c {
                    let v = at(y0, x0, ch) * (1.0 - dy) * (1.0 - dx)
                        + at(y1, x0, ch) * dy * (1.0 - dx)
                        + at(y0, x1, ch) * (1.0 - dy) * dx
                        + at(y1, x1, ch) * dy * dx;
                    out.push(v);
                }
            }
        }
    }
    let (d, out) = to_layout(r.od.clone(), out, r.nchw);
    let t = match &r.input.data {
        Data::U8(_) => Tensor::new(
            d,
            Data::U8(
                out.iter()
                    .map(|v| v.round().clamp(0.0, 255.0) as u8)
                    .collect(),
            ),
        ),
        Data::I8(_) => Tensor::new(
            d,
            Data::I8(
                out.iter()
                    .map(|v| v.round().clamp(-128.0, 127.0) as i8)
                    .collect(),
            ),
        ),
        _ => Tensor::new(d, Data::F32(out)),
    };
    Ok(vec![t])
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
