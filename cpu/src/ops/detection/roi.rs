//! ROI_ALIGN and ROI_POOLING: fixed-size feature maps cut out of a 4-D input, one per region
//! of interest, in NHWC or NCHW layout.

use super::super::quant::{mbqm, q8_values, quantize_multiplier};
use super::super::{
    KResult, OpCtx, count, nchw_to_nhwc, nhwc_input, q8_range, q8_tensor, to_layout, to_u32,
};
use super::{
    check_box_quant, check_const_fpos, check_const_pos, check_rank, float_or_q8, is_q8, real_values,
};
use crate::check::{Ck, Issue, float_scalar};
use crate::model::OperandType;
use crate::tensor::{Buf, Data, Tensor};

use OperandType as T;

/// Input types of both operations.
pub(super) const TYPES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

/// Most multiply-adds one operation may cost (bounds the work hostile arguments can ask for).
const MAX_WORK: u64 = 1 << 31;

/// The checks both operations share: inputs 0..=6 and the output type.
fn check_common(c: &Ck<'_>, n_inputs: usize) -> Result<OperandType, Issue> {
    c.counts(&[n_inputs], 1)?;
    let t = float_or_q8(c, "input 0")?;
    let roi_t = if is_q8(t) { T::TensorQuant16Asymm } else { t };
    let ft = float_scalar(t);
    c.is(1, roi_t, "rois")?;
    check_box_quant(c, 1, "rois")?;
    c.is(2, T::TensorInt32, "batch indices")?;
    c.is(3, T::Int32, "output height")?;
    c.is(4, T::Int32, "output width")?;
    c.is(5, ft, "height ratio")?;
    c.is(6, ft, "width ratio")?;
    check_rank(c, 0, 4, "input")?;
    check_rank(c, 1, 2, "rois")?;
    check_rank(c, 2, 1, "batch indices")?;
    if let Some(&d) = c.inp(1)?.dimensions.get(1)
        && d != 0
        && d != 4
    {
        return Err(Issue::Invalid(format!(
            "rois must have 4 values per region, has {d}"
        )));
    }
    c.same_out(t)?;
    check_const_pos(c, 3, "output height", false)?;
    check_const_pos(c, 4, "output width", false)?;
    check_const_fpos(c, 5, "height ratio")?;
    check_const_fpos(c, 6, "width ratio")?;
    Ok(t)
}

pub(super) fn check_align(c: &Ck<'_>) -> Result<(), Issue> {
    check_common(c, 10)?;
    c.is(7, T::Int32, "height sampling ratio")?;
    c.is(8, T::Int32, "width sampling ratio")?;
    c.is(9, T::Bool, "layout")?;
    check_const_pos(c, 7, "height sampling ratio", true)?;
    check_const_pos(c, 8, "width sampling ratio", true)?;
    Ok(())
}

pub(super) fn check_pooling(c: &Ck<'_>) -> Result<(), Issue> {
    check_common(c, 8)?;
    c.is(7, T::Bool, "layout")?;
    // ROI_POOLING takes maxima: its output keeps the input's quantization.
    c.same_quant()
}

/// The arguments both operations share, read and checked at execution.
struct Common<'a> {
    nchw: bool,
    /// Input extents in NHWC order: `[batches, height, width, depth]`.
    nhwc: [usize; 4],
    /// The same extents as u32 (the output's depth comes from here).
    in_dims: Vec<u32>,
    /// Boxes as real values, four per region.
    rois: Vec<f32>,
    batch: &'a [i32],
    out_h: usize,
    out_w: usize,
    /// 1 / height ratio and 1 / width ratio: image coordinates to feature-map coordinates.
    h_scale: f32,
    w_scale: f32,
}

impl<'a> Common<'a> {
    fn read(ctx: &OpCtx<'a>, layout: usize) -> KResult<Self> {
        let nchw = ctx.scalar_bool(layout)?;
        let it = ctx.t(0)?;
        let (in_dims, nhwc) = nhwc_input(ctx, it, nchw)?;
        if nhwc.contains(&0) {
            return Err(ctx.err(format!(
                "input extents must all be > 0, input is {:?}",
                it.dims
            )));
        }
        let rd = &ctx.t(1)?.dims;
        if rd.len() != 2 || rd[1] != 4 {
            return Err(ctx.err(format!("rois must have shape [num_rois, 4], is {rd:?}")));
        }
        let rois = real_values(ctx, 1)?;
        let (bd, batch) = ctx.i32s(2)?;
        if bd != [rd[0]] {
            return Err(ctx.err(format!(
                "batch indices must have shape [{}] (one per region), is {bd:?}",
                rd[0]
            )));
        }
        let out_h = ctx.scalar_pos(3, "output height")?;
        let out_w = ctx.scalar_pos(4, "output width")?;
        let hr = ctx.scalar_f32(5)?;
        let wr = ctx.scalar_f32(6)?;
        // NaN fails too.
        if hr.is_nan() || wr.is_nan() || hr <= 0.0 || wr <= 0.0 {
            return Err(ctx.err(format!(
                "height and width ratios must be > 0, are {hr} and {wr}"
            )));
        }
        Ok(Common {
            nchw,
            nhwc,
            in_dims,
            rois,
            batch,
            out_h,
            out_w,
            h_scale: 1.0 / hr,
            w_scale: 1.0 / wr,
        })
    }

    fn num_rois(&self) -> usize {
        self.batch.len()
    }

    /// NHWC output dims `[num_rois, out_h, out_w, depth]`, checked.
    fn out_dims(&self, ctx: &OpCtx<'_>) -> KResult<Vec<u32>> {
        let od = vec![
            to_u32(ctx, self.num_rois())?,
            to_u32(ctx, self.out_h)?,
            to_u32(ctx, self.out_w)?,
            self.in_dims[3],
        ];
        count(ctx, &od)?;
        // One region's cells, allocated even when there are no regions.
        count(ctx, &od[1..])?;
        Ok(od)
    }

    /// Region `r`'s batch and box, checked: batch in range, coordinates >= 0, inside the
    /// feature map once scaled, and x1 <= x2, y1 <= y2.
    fn region(&self, ctx: &OpCtx<'_>, r: usize) -> KResult<(usize, [f32; 4])> {
        let [n, h, w, _] = self.nhwc;
        let b = self.batch[r];
        let bi = usize::try_from(b).ok().filter(|&b| b < n).ok_or_else(|| {
            ctx.err(format!(
                "region {r}: batch index {b} outside [0, {n}) (the input's batches)"
            ))
        })?;
        let bx = [
            self.rois[4 * r],
            self.rois[4 * r + 1],
            self.rois[4 * r + 2],
            self.rois[4 * r + 3],
        ];
        if !bx.iter().all(|&v| v >= 0.0) {
            return Err(ctx.err(format!("region {r}: box {bx:?} has a negative coordinate")));
        }
        let inside = bx[0] * self.w_scale <= w as f32
            && bx[2] * self.w_scale <= w as f32
            && bx[1] * self.h_scale <= h as f32
            && bx[3] * self.h_scale <= h as f32;
        if !inside {
            return Err(ctx.err(format!(
                "region {r}: box {bx:?} lies outside the {h}x{w} feature map once scaled"
            )));
        }
        if bx[0] > bx[2] || bx[1] > bx[3] {
            return Err(ctx.err(format!("region {r}: box {bx:?} has x2 < x1 or y2 < y1")));
        }
        Ok((bi, bx))
    }

    /// Writes the NHWC result in the operation's layout.
    fn finish<V: Copy>(&self, od: Vec<u32>, out: Vec<V>) -> (Vec<u32>, Buf<V>) {
        to_layout(od, out, self.nchw)
    }
}

/// Input 0 in NHWC order.
fn nhwc_data<V: Copy>(v: &[V], dims: &[u32], nchw: bool) -> Vec<V> {
    if nchw {
        nchw_to_nhwc(v, dims).1
    } else {
        v.to_vec()
    }
}

/// One bilinear sample: four pixel offsets (y * width + x) and their weights.
type Sample = ([usize; 4], [f32; 4]);

/// ROI_ALIGN's sampling grid for one region (already scaled to the feature map): calls
/// `f(cell, sample)` for each sample of each output cell, returns the samples per cell.
fn align_grid(
    c: &Common<'_>,
    bx: [f32; 4],
    ratio: (usize, usize),
    mut f: impl FnMut(usize, &Sample),
) -> usize {
    let [_, h, w, _] = c.nhwc;
    let (x0, y0) = (bx[0] * c.w_scale, bx[1] * c.h_scale);
    let (x1, y1) = (bx[2] * c.w_scale, bx[3] * c.h_scale);
    let rw = (x1 - x0).max(1.0);
    let rh = (y1 - y0).max(1.0);
    let w_step = rw / c.out_w as f32;
    let h_step = rh / c.out_h as f32;
    let (hs, ws) = sampling(ratio, h_step, w_step);
    let w_bin = w_step / ws as f32;
    let h_bin = h_step / hs as f32;
    // Bilinear corners along one axis: (low, high, fraction towards high).
    let axis = |v: f32, size: usize| -> (usize, usize, f32) {
        let lo = v.floor().max(0.0) as usize;
        if lo >= size - 1 {
            (size - 1, size - 1, 0.0)
        } else {
            (lo, lo + 1, v - lo as f32)
        }
    };
    for i in 0..c.out_h {
        let h_start = h_step * i as f32 + y0;
        for j in 0..c.out_w {
            let w_start = w_step * j as f32 + x0;
            for yi in 0..hs {
                let y = h_start + h_bin / 2.0 + h_bin * yi as f32;
                let (ya, yb, dy) = axis(y, h);
                for xi in 0..ws {
                    let x = w_start + w_bin / 2.0 + w_bin * xi as f32;
                    let (xa, xb, dx) = axis(x, w);
                    let (ex, ey) = (1.0 - dx, 1.0 - dy);
                    let s = (
                        [ya * w + xa, ya * w + xb, yb * w + xa, yb * w + xb],
                        [ex * ey, dx * ey, ex * dy, dx * dy],
                    );
                    f(i * c.out_w + j, &s);
                }
            }
        }
    }
    hs * ws
}

/// Samples per cell along height and width: the given ratios, or ceil(bin size) where 0.
fn sampling(ratio: (usize, usize), h_step: f32, w_step: f32) -> (usize, usize) {
    let adapt = |r: usize, step: f32| {
        if r > 0 {
            r
        } else {
            (step.ceil() as usize).max(1)
        }
    };
    (adapt(ratio.0, h_step), adapt(ratio.1, w_step))
}

/// Checks that the whole operation's work (cells x samples x depth over every region) stays
/// under [`MAX_WORK`].
fn check_work(ctx: &OpCtx<'_>, c: &Common<'_>, per_cell: impl Fn(usize) -> u64) -> KResult<()> {
    let cells = (c.out_h as u64).saturating_mul(c.out_w as u64);
    let depth = c.nhwc[3] as u64;
    let mut total: u64 = 0;
    for r in 0..c.num_rois() {
        total = total.saturating_add(cells.saturating_mul(per_cell(r)).saturating_mul(depth));
    }
    if total > MAX_WORK {
        return Err(ctx.err(format!(
            "the regions ask for {total} samples, more than the {MAX_WORK} allowed"
        )));
    }
    Ok(())
}

pub(super) fn roi_align(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let c = Common::read(ctx, 9)?;
    let hr = ctx.scalar_usize(7, "height sampling ratio")?;
    let wr = ctx.scalar_usize(8, "width sampling ratio")?;
    let od = c.out_dims(ctx)?;
    let mut regions = Vec::with_capacity(c.num_rois());
    for r in 0..c.num_rois() {
        regions.push(c.region(ctx, r)?);
    }
    check_work(ctx, &c, |r| {
        let bx = regions[r].1;
        let rw = ((bx[2] - bx[0]) * c.w_scale).max(1.0);
        let rh = ((bx[3] - bx[1]) * c.h_scale).max(1.0);
        let (hs, ws) = sampling((hr, wr), rh / c.out_h as f32, rw / c.out_w as f32);
        (hs as u64).saturating_mul(ws as u64)
    })?;
    let [_, h, w, depth] = c.nhwc;
    let cells = c.out_h * c.out_w;
    let it = ctx.t(0)?;
    let ty = ctx.ty(0)?;
    let plane = h * w * depth;
    let result = match &it.data {
        Data::F32(x) => {
            let x = nhwc_data(x, &it.dims, c.nchw);
            let mut out = vec![0f32; count(ctx, &od)?];
            for (r, &(b, bx)) in regions.iter().enumerate() {
                let base = &x[b * plane..(b + 1) * plane];
                let o = &mut out[r * cells * depth..(r + 1) * cells * depth];
                let n = align_grid(&c, bx, (hr, wr), |cell, (offs, wts)| {
                    for k in 0..depth {
                        let mut v = 0f32;
                        for q in 0..4 {
                            v += wts[q] * base[offs[q] * depth + k];
                        }
                        o[cell * depth + k] += v;
                    }
                });
                for v in o.iter_mut() {
                    *v /= n as f32;
                }
            }
            let (d, v) = c.finish(od, out);
            Tensor::new(d, Data::F32(v))
        }
        Data::U8(_) | Data::I8(_) => {
            let x = nhwc_data(&q8_values(ctx, 0)?.1, &it.dims, c.nchw);
            let (izp, iscale) = (ctx.operand(0)?.zero_point, ctx.operand(0)?.scale);
            let o_op = ctx.out(0)?;
            let (lo, hi) = q8_range(ty);
            let mut out = vec![0i32; count(ctx, &od)?];
            let mut acc = vec![0i64; cells * depth];
            // Weights are quantized to 1/255 steps, the sum rescaled once per cell.
            let w_scale = 1.0f32 / 255.0;
            for (r, &(b, bx)) in regions.iter().enumerate() {
                let base = &x[b * plane..(b + 1) * plane];
                acc.iter_mut().for_each(|a| *a = 0);
                let n = align_grid(&c, bx, (hr, wr), |cell, (offs, wts)| {
                    let wq = wts.map(|wt| (wt / w_scale).round() as i64);
                    for k in 0..depth {
                        let mut v = 0i64;
                        for q in 0..4 {
                            v += wq[q] * i64::from(base[offs[q] * depth + k] - izp);
                        }
                        acc[cell * depth + k] += v;
                    }
                });
                let real =
                    f64::from(iscale) * f64::from(w_scale) / f64::from(o_op.scale) / n as f64;
                let (m, shift) = quantize_multiplier(real);
                let o = &mut out[r * cells * depth..(r + 1) * cells * depth];
                for (ov, &a) in o.iter_mut().zip(&acc) {
                    let a = a.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
                    *ov = mbqm(a, m, shift)
                        .saturating_add(o_op.zero_point)
                        .clamp(lo, hi);
                }
            }
            let (d, v) = c.finish(od, out);
            q8_tensor(ty, d, v.into_vec())
        }
        _ => return Err(ctx.err("input 0 must be float or 8-bit quantized")),
    };
    Ok(vec![result])
}

pub(super) fn roi_pooling(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let c = Common::read(ctx, 7)?;
    let od = c.out_dims(ctx)?;
    let [_, h, w, depth] = c.nhwc;
    let mut regions = Vec::with_capacity(c.num_rois());
    for r in 0..c.num_rois() {
        let (b, bx) = c.region(ctx, r)?;
        // Corners rounded to feature-map pixels (half away from zero); every region is at
        // least one pixel wide and high.
        let px = |v: f32, s: f32| (v * s).round() as i64;
        let (x0, y0) = (px(bx[0], c.w_scale), px(bx[1], c.h_scale));
        let (x1, y1) = (px(bx[2], c.w_scale), px(bx[3], c.h_scale));
        let rw = (x1 - x0 + 1).max(1) as f32;
        let rh = (y1 - y0 + 1).max(1) as f32;
        regions.push((
            b,
            x0 as f32,
            y0 as f32,
            rw / c.out_w as f32,
            rh / c.out_h as f32,
        ));
    }
    check_work(ctx, &c, |r| {
        let (_, _, _, ws, hs) = regions[r];
        let side = |s: f32| (s.ceil() as u64).saturating_add(1);
        side(hs).saturating_mul(side(ws))
    })?;
    let cells = c.out_h * c.out_w;
    let plane = h * w * depth;
    // Max over each bin [floor(start), ceil(end)) clipped to the map; an empty bin gives
    // `empty` (the real value 0).
    fn pool<V: Copy + PartialOrd>(
        c: &Common<'_>,
        x: &[V],
        regions: &[(usize, f32, f32, f32, f32)],
        (plane, cells, depth): (usize, usize, usize),
        empty: V,
        out: &mut [V],
    ) {
        let [_, h, w, _] = c.nhwc;
        let edge = |v: f32, size: usize| (v.max(0.0) as usize).min(size);
        for (r, &(b, x0, y0, ws, hs)) in regions.iter().enumerate() {
            let base = &x[b * plane..(b + 1) * plane];
            for i in 0..c.out_h {
                let ya = edge((hs * i as f32 + y0).floor(), h);
                let yb = edge((hs * (i + 1) as f32 + y0).ceil(), h);
                for j in 0..c.out_w {
                    let xa = edge((ws * j as f32 + x0).floor(), w);
                    let xb = edge((ws * (j + 1) as f32 + x0).ceil(), w);
                    let o = (r * cells + i * c.out_w + j) * depth;
                    for k in 0..depth {
                        let mut best: Option<V> = None;
                        for y in ya..yb {
                            for xx in xa..xb {
                                let v = base[(y * w + xx) * depth + k];
                                if best.is_none_or(|m| v > m) {
                                    best = Some(v);
                                }
                            }
                        }
                        out[o + k] = best.unwrap_or(empty);
                    }
                }
            }
        }
    }
    let it = ctx.t(0)?;
    let ty = ctx.ty(0)?;
    let n_out = count(ctx, &od)?;
    let dims = (plane, cells, depth);
    let result = match &it.data {
        Data::F32(x) => {
            let x = nhwc_data(x, &it.dims, c.nchw);
            let mut out = vec![0f32; n_out];
            pool(&c, &x, &regions, dims, 0.0, &mut out);
            let (d, v) = c.finish(od, out);
            Tensor::new(d, Data::F32(v))
        }
        Data::U8(_) | Data::I8(_) => {
            let x = nhwc_data(&q8_values(ctx, 0)?.1, &it.dims, c.nchw);
            let zp = ctx.operand(0)?.zero_point;
            let mut out = vec![0i32; n_out];
            pool(&c, &x, &regions, dims, zp, &mut out);
            let (d, v) = c.finish(od, out);
            q8_tensor(ty, d, v.into_vec())
        }
        _ => return Err(ctx.err("input 0 must be float or 8-bit quantized")),
    };
    Ok(vec![result])
}
