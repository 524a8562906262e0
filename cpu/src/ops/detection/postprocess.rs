//! DETECTION_POSTPROCESSING: SSD-style decoding of anchor-relative box encodings followed by
//! regular (per-class) or fast (per-anchor best classes) hard NMS, outputs padded with zeros
//! to a fixed number of detections.

use super::super::{KResult, OpCtx, count, to_u32};
use super::bbox::{Kernel, MAX_PAIRS, nms_class};
use super::{check_out, check_rank, const_f32, const_i32, dims_of};
use crate::check::{Ck, Issue, float_scalar};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

use OperandType as T;

/// Score types implemented (input 0).
pub(super) const TYPES: &[OperandType] = &[T::TensorFloat32, T::TensorFloat16];

pub(super) fn check(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[14], 4)?;
    let t = c.ty(0)?;
    if !TYPES.contains(&t) {
        return Err(Issue::Invalid(format!(
            "input 0 (class scores) must be TENSOR_FLOAT32 or TENSOR_FLOAT16, is {}",
            t.name()
        )));
    }
    let ft = float_scalar(t);
    c.is(1, t, "box encodings")?;
    c.is(2, t, "anchors")?;
    for (i, what) in [
        (3, "y scale"),
        (4, "x scale"),
        (5, "h scale"),
        (6, "w scale"),
    ] {
        c.is(i, ft, what)?;
        if let Some(v) = const_f32(c, i)
            && (v.is_nan() || v <= 0.0)
        {
            return Err(Issue::Invalid(format!("{what} must be > 0, is {v}")));
        }
    }
    c.is(7, T::Bool, "use regular NMS")?;
    c.is(8, T::Int32, "maximum detections")?;
    c.is(9, T::Int32, "maximum classes per detection")?;
    c.is(10, T::Int32, "maximum detections per class")?;
    c.is(11, ft, "score threshold")?;
    c.is(12, ft, "IoU threshold")?;
    c.is(13, T::Bool, "background in label")?;
    for (i, what) in [(11, "score threshold"), (12, "IoU threshold")] {
        if let Some(v) = const_f32(c, i)
            && (v.is_nan() || v < 0.0)
        {
            return Err(Issue::Invalid(format!("{what} must be >= 0, is {v}")));
        }
    }
    if let Some(v) = const_i32(c, 8)
        && v <= 0
    {
        return Err(Issue::Invalid(format!(
            "maximum detections must be > 0, is {v}"
        )));
    }
    check_rank(c, 0, 3, "class scores")?;
    check_rank(c, 1, 3, "box encodings")?;
    check_rank(c, 2, 2, "anchors")?;
    check_out(c, 0, t, "scores")?;
    check_out(c, 1, t, "boxes")?;
    check_out(c, 2, T::TensorInt32, "classes")?;
    check_out(c, 3, T::TensorInt32, "detection counts")
}

pub(super) fn detection_postprocessing(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let sd = dims_of(ctx, 0, 3, "class scores")?;
    let dd = dims_of(ctx, 1, 3, "box encodings")?;
    let ad = dims_of(ctx, 2, 2, "anchors")?;
    let (nb, na, nc) = (sd[0] as usize, sd[1] as usize, sd[2] as usize);
    if nc < 2 {
        return Err(ctx.err(format!(
            "class scores must have at least 2 classes (class 0 is the background), shape \
             is {sd:?}"
        )));
    }
    if dd[0] != sd[0] || dd[1] != sd[1] || dd[2] < 4 {
        return Err(ctx.err(format!(
            "box encodings must have shape [{nb}, {na}, >= 4], is {dd:?}"
        )));
    }
    if ad[0] != sd[1] || ad[1] != 4 {
        return Err(ctx.err(format!(
            "anchors must have shape [{na}, 4] (one per anchor), is {ad:?}"
        )));
    }
    let len = dd[2] as usize;
    let mut scale = [0f32; 4];
    for (k, s) in scale.iter_mut().enumerate() {
        *s = ctx.scalar_f32(3 + k)?;
        if s.is_nan() || *s <= 0.0 {
            return Err(ctx.err(format!(
                "the y, x, h and w scales must be > 0, input {} is {s}",
                3 + k
            )));
        }
    }
    let regular = ctx.scalar_bool(7)?;
    let max_det = ctx.scalar_pos(8, "maximum detections")?;
    let score_thr = ctx.scalar_f32(11)?;
    let iou_thr = ctx.scalar_f32(12)?;
    if score_thr.is_nan() || iou_thr.is_nan() || score_thr < 0.0 || iou_thr < 0.0 {
        return Err(ctx.err(format!(
            "score and IoU thresholds must be >= 0, are {score_thr} and {iou_thr}"
        )));
    }
    let bg = i32::from(!ctx.scalar_bool(13)?);
    let (per_class, max_classes) = if regular {
        (ctx.scalar_pos(10, "maximum detections per class")?, 1)
    } else {
        (0, ctx.scalar_pos(9, "maximum classes per detection")?)
    };
    let n_out = max_det
        .checked_mul(max_classes)
        .ok_or_else(|| ctx.err("maximum detections × classes per detection overflows"))?;
    let n_out32 = to_u32(ctx, n_out)?;
    let nb32 = sd[0];
    count(ctx, &[nb32, n_out32, 4])?;
    let pairs = (na as u64)
        .saturating_mul(na as u64)
        .saturating_mul(nc as u64)
        .saturating_mul(nb as u64);
    if pairs > MAX_PAIRS {
        return Err(ctx.err(format!(
            "{pairs} box comparisons needed, more than the {MAX_PAIRS} allowed"
        )));
    }
    let (_, scores) = ctx.f32s(0)?;
    let (_, deltas) = ctx.f32s(1)?;
    let (_, anchors) = ctx.f32s(2)?;
    let mut out_s = vec![0f32; nb * n_out];
    let mut out_b = vec![0f32; nb * n_out * 4];
    let mut out_c = vec![0i32; nb * n_out];
    let mut out_n = vec![0i32; nb];
    let mut boxes = vec![0f32; na * 4];
    for b in 0..nb {
        // Anchors are (centre y, centre x, h, w); encodings (dy, dx, dh, dw) scaled down.
        for (a, o) in boxes.chunks_exact_mut(4).enumerate() {
            let an = &anchors[4 * a..4 * a + 4];
            let d = &deltas[(b * na + a) * len..(b * na + a) * len + 4];
            let yc = an[0] + an[2] * d[0] / scale[0];
            let xc = an[1] + an[3] * d[1] / scale[1];
            let hh = an[2] * (d[2] / scale[2]).exp() * 0.5;
            let wh = an[3] * (d[3] / scale[3]).exp() * 0.5;
            o.copy_from_slice(&[yc - hh, xc - wh, yc + hh, xc + wh]);
        }
        let sc = &scores[b * na * nc..(b + 1) * na * nc];
        // (score, anchor, class) of each detection, in output order.
        let mut det: Vec<(f32, usize, usize)> = Vec::new();
        if regular {
            for cls in 1..nc {
                let mut s: Vec<f32> = (0..na).map(|a| sc[a * nc + cls]).collect();
                let mut sel: Vec<usize> = (0..na).filter(|&a| s[a] > score_thr).collect();
                nms_class(
                    &mut s,
                    &boxes,
                    &mut sel,
                    0.0,
                    Some(per_class),
                    Kernel::Drop(iou_thr),
                );
                det.extend(sel.into_iter().map(|a| (s[a], a, cls)));
            }
            det.sort_by(|x, y| y.0.partial_cmp(&x.0).unwrap_or(std::cmp::Ordering::Equal));
            det.truncate(max_det);
        } else {
            let per = max_classes.min(nc - 1);
            let mut best: Vec<f32> = (0..na)
                .map(|a| {
                    sc[a * nc + 1..(a + 1) * nc]
                        .iter()
                        .copied()
                        .fold(f32::NEG_INFINITY, f32::max)
                })
                .collect();
            let mut sel: Vec<usize> = (0..na).filter(|&a| best[a] > score_thr).collect();
            nms_class(
                &mut best,
                &boxes,
                &mut sel,
                0.0,
                Some(max_det),
                Kernel::Drop(iou_thr),
            );
            for a in sel {
                let row = &sc[a * nc..(a + 1) * nc];
                let mut cls: Vec<usize> = (1..nc).collect();
                cls.sort_by(|&x, &y| {
                    row[y]
                        .partial_cmp(&row[x])
                        .unwrap_or(std::cmp::Ordering::Equal)
                });
                det.extend(cls.into_iter().take(per).map(|c| (row[c], a, c)));
            }
        }
        out_n[b] = det.len() as i32;
        for (i, &(s, a, c)) in det.iter().enumerate() {
            let o = b * n_out + i;
            out_s[o] = s;
            out_b[4 * o..4 * o + 4].copy_from_slice(&boxes[4 * a..4 * a + 4]);
            out_c[o] = c as i32 - bg;
        }
    }
    Ok(vec![
        Tensor::new(vec![nb32, n_out32], Data::F32(out_s.into())),
        Tensor::new(vec![nb32, n_out32, 4], Data::F32(out_b.into())),
        Tensor::new(vec![nb32, n_out32], Data::I32(out_c.into())),
        Tensor::new(vec![nb32], Data::I32(out_n.into())),
    ])
}
