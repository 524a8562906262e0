//! GENERATE_PROPOSALS: region proposals from per-anchor scores and box deltas (the RPN of
//! Faster R-CNN): anchors placed on every feature-map cell, moved by the deltas, clipped to
//! the image, the best `pre_nms` kept, small or off-image boxes dropped, hard NMS.

use super::super::{KResult, OpCtx, count, nchw_to_nhwc, q8_range, q8_tensor, to_u32};
use super::bbox::{Kernel, MAX_PAIRS, nms_class};
use super::{BOX_SCALE, check_out, check_rank, float_or_q8, is_q8, quant16_boxes, real_values};
use crate::check::{Ck, Issue, float_scalar};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

use OperandType as T;

/// Score types implemented (input 0).
pub(super) const TYPES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

pub(super) fn check(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[11], 3)?;
    let t = float_or_q8(c, "input 0 (scores)")?;
    let (anchor_t, info_t, roi_t) = if is_q8(t) {
        (
            T::TensorQuant16Symm,
            T::TensorQuant16Asymm,
            T::TensorQuant16Asymm,
        )
    } else {
        (t, t, t)
    };
    let ft = float_scalar(t);
    c.is(1, t, "bounding box deltas")?;
    c.is(2, anchor_t, "anchors")?;
    c.is(3, info_t, "image info")?;
    c.is(4, ft, "height stride")?;
    c.is(5, ft, "width stride")?;
    c.is(6, T::Int32, "pre-NMS maximum")?;
    c.is(7, T::Int32, "post-NMS maximum")?;
    c.is(8, ft, "IoU threshold")?;
    c.is(9, ft, "minimum size")?;
    c.is(10, T::Bool, "layout")?;
    for (i, what) in [(2, "anchors"), (3, "image info")] {
        let o = c.inp(i)?;
        if o.ty.is_quantized() && (o.scale != BOX_SCALE || o.zero_point != 0) {
            return Err(Issue::Invalid(format!(
                "input {i} ({what}) of type {} must have scale 0.125 and zero point 0",
                o.ty.name()
            )));
        }
    }
    check_rank(c, 0, 4, "scores")?;
    check_rank(c, 1, 4, "bounding box deltas")?;
    check_rank(c, 2, 2, "anchors")?;
    check_rank(c, 3, 2, "image info")?;
    check_out(c, 0, t, "scores")?;
    c.same_quant()?;
    check_out(c, 1, roi_t, "boxes")?;
    check_out(c, 2, T::TensorInt32, "batch indices")
}

pub(super) fn generate_proposals(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let nchw = ctx.scalar_bool(10)?;
    let sd = ctx.t(0)?.dims.clone();
    let dd = ctx.t(1)?.dims.clone();
    let ad = &ctx.t(2)?.dims;
    let id = &ctx.t(3)?.dims;
    if sd.len() != 4 || dd.len() != 4 || ad.len() != 2 || id.len() != 2 {
        return Err(ctx.err(format!(
            "scores and deltas must be 4-D, anchors and image info 2-D; shapes are {sd:?}, \
             {dd:?}, {ad:?}, {id:?}"
        )));
    }
    // [batches, height, width, anchors] whatever the layout.
    let nhwc = |d: &[u32]| {
        if nchw {
            [d[0], d[2], d[3], d[1]]
        } else {
            [d[0], d[1], d[2], d[3]]
        }
    };
    let [nb, h, w, na] = nhwc(&sd).map(|v| v as usize);
    let dn = nhwc(&dd);
    if dn[..3] != nhwc(&sd)[..3] || u64::from(dn[3]) != 4 * na as u64 {
        return Err(ctx.err(format!(
            "deltas must have the scores' batches, height and width and 4 values per anchor; \
             scores {sd:?}, deltas {dd:?}"
        )));
    }
    if ad[0] as usize != na || ad[1] != 4 {
        return Err(ctx.err(format!(
            "anchors must have shape [{na}, 4] (one box per anchor), is {ad:?}"
        )));
    }
    if id[0] as usize != nb || id[1] != 2 {
        return Err(ctx.err(format!(
            "image info must have shape [{nb}, 2] (height and width per image), is {id:?}"
        )));
    }
    let hs = ctx.scalar_f32(4)?;
    let ws = ctx.scalar_f32(5)?;
    let pre = usize::try_from(ctx.scalar_i32(6)?).ok().filter(|&v| v > 0);
    let post = usize::try_from(ctx.scalar_i32(7)?).ok().filter(|&v| v > 0);
    let iou_thr = ctx.scalar_f32(8)?;
    let min_size = ctx.scalar_f32(9)?;
    let per_batch = h * w * na;
    let kept_max = pre.map_or(per_batch, |p| p.min(per_batch)) as u64;
    if kept_max.saturating_mul(kept_max).saturating_mul(nb as u64) > MAX_PAIRS {
        return Err(ctx.err(format!(
            "{nb} images of {kept_max} proposals need more than {MAX_PAIRS} box comparisons"
        )));
    }
    let mut scores = real_values(ctx, 0)?;
    let mut deltas = real_values(ctx, 1)?;
    if nchw {
        scores = nchw_to_nhwc(&scores, &sd).1;
        deltas = nchw_to_nhwc(&deltas, &dd).1;
    }
    let anchors = real_values(ctx, 2)?;
    let info = real_values(ctx, 3)?;
    // Every anchor on every cell, in (y, x, anchor) order.
    let mut base = Vec::with_capacity(per_batch * 4);
    for y in 0..h {
        let dy = y as f32 * hs;
        for x in 0..w {
            let dx = x as f32 * ws;
            for a in anchors.chunks_exact(4) {
                base.extend([a[0] + dx, a[1] + dy, a[2] + dx, a[3] + dy]);
            }
        }
    }
    for (i, a) in anchors.chunks_exact(4).enumerate() {
        if !(a[0] <= a[2] && a[1] <= a[3]) {
            return Err(ctx.err(format!("anchor {i}: {a:?} has x2 < x1 or y2 < y1")));
        }
    }
    let (mut out_s, mut out_b, mut out_i) = (Vec::new(), Vec::new(), Vec::new());
    let mut boxes = vec![0f32; per_batch * 4];
    for b in 0..nb {
        let (img_h, img_w) = (info[2 * b], info[2 * b + 1]);
        let sc = &mut scores[b * per_batch..(b + 1) * per_batch];
        let dl = &deltas[b * per_batch * 4..(b + 1) * per_batch * 4];
        for ((o, a), d) in boxes
            .chunks_exact_mut(4)
            .zip(base.chunks_exact(4))
            .zip(dl.chunks_exact(4))
        {
            let (bw, bh) = (a[2] - a[0], a[3] - a[1]);
            let (cx, cy) = ((a[0] + a[2]) / 2.0, (a[1] + a[3]) / 2.0);
            let (nw, nh) = (d[2].exp() * bw, d[3].exp() * bh);
            let (ncx, ncy) = (cx + d[0] * bw, cy + d[1] * bh);
            let clip = |v: f32, hi: f32| v.max(0.0).min(hi);
            o[0] = clip(ncx - nw / 2.0, img_w);
            o[1] = clip(ncy - nh / 2.0, img_h);
            o[2] = clip(ncx + nw / 2.0, img_w);
            o[3] = clip(ncy + nh / 2.0, img_h);
        }
        let mut sel: Vec<usize> = (0..per_batch).collect();
        if let Some(p) = pre
            && p < per_batch
        {
            sel.sort_by(|&i, &j| {
                sc[j]
                    .partial_cmp(&sc[i])
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            sel.truncate(p);
        }
        // Boxes wider and higher than min_size with their centre inside the image.
        sel.retain(|&i| {
            let o = &boxes[4 * i..4 * i + 4];
            let (bw, bh) = (o[2] - o[0], o[3] - o[1]);
            bw > min_size && bh > min_size && o[0] + bw / 2.0 < img_w && o[1] + bh / 2.0 < img_h
        });
        nms_class(sc, &boxes, &mut sel, 0.0, post, Kernel::Drop(iou_thr));
        for &i in &sel {
            out_s.push(sc[i]);
            out_b.extend_from_slice(&boxes[4 * i..4 * i + 4]);
            out_i.push(b as i32);
        }
    }
    let m = to_u32(ctx, out_s.len())?;
    count(ctx, &[m, 4])?;
    let ty = ctx.ty(0)?;
    let (score_t, box_t) = match ty {
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => {
            let o = ctx.out(0)?;
            let (lo, hi) = q8_range(ty);
            let q = out_s
                .iter()
                .map(|&v| super::super::quant::quantize_val(v, o.scale, o.zero_point, lo, hi))
                .collect();
            (q8_tensor(ty, vec![m], q), quant16_boxes(vec![m, 4], &out_b))
        }
        _ => (
            Tensor::new(vec![m], Data::F32(out_s.into())),
            Tensor::new(vec![m, 4], Data::F32(out_b.into())),
        ),
    };
    Ok(vec![
        score_t,
        box_t,
        Tensor::new(vec![m], Data::I32(out_i.into())),
    ])
}
