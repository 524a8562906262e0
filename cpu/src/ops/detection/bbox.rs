//! AXIS_ALIGNED_BBOX_TRANSFORM (boxes moved by per-class deltas) and BOX_WITH_NMS_LIMIT
//! (per-class non-maximum suppression with hard, linear or gaussian kernels).

use super::super::{KResult, OpCtx, count, q8_range, q8_tensor, to_u32};
use super::{
    check_box_quant, check_out, check_rank, const_i32, dims_of, float_or_q8, is_q8, quant16_boxes,
    real_values,
};
use crate::check::{Ck, Issue, float_scalar};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

use OperandType as T;

/// Box types AXIS_ALIGNED_BBOX_TRANSFORM implements (input 0).
pub(super) const TRANSFORM_TYPES: &[OperandType] =
    &[T::TensorFloat32, T::TensorFloat16, T::TensorQuant16Asymm];

/// Score types BOX_WITH_NMS_LIMIT implements (input 0).
pub(super) const NMS_TYPES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

/// Most box pairs BOX_WITH_NMS_LIMIT may compare in one execution.
pub(super) const MAX_PAIRS: u64 = 1 << 32;

pub(super) fn check_transform(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[4], 1)?;
    let t = c.ty(0)?;
    match t {
        T::TensorFloat32 | T::TensorFloat16 => {
            c.is(1, t, "bounding box deltas")?;
            c.is(3, t, "image info")?;
        }
        T::TensorQuant16Asymm => {
            let d = c.ty(1)?;
            if !matches!(d, T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned) {
                return Err(Issue::Invalid(format!(
                    "input 1 (bounding box deltas) must be TENSOR_QUANT8_ASYMM or \
                     TENSOR_QUANT8_ASYMM_SIGNED with TENSOR_QUANT16_ASYMM boxes, is {}",
                    d.name()
                )));
            }
            c.is(3, t, "image info")?;
        }
        other => {
            return Err(Issue::Invalid(format!(
                "input 0 (boxes) must be TENSOR_FLOAT32, TENSOR_FLOAT16 or \
                 TENSOR_QUANT16_ASYMM, is {}",
                other.name()
            )));
        }
    }
    c.is(2, T::TensorInt32, "batch indices")?;
    check_box_quant(c, 0, "boxes")?;
    check_box_quant(c, 3, "image info")?;
    check_rank(c, 0, 2, "boxes")?;
    check_rank(c, 1, 2, "bounding box deltas")?;
    check_rank(c, 2, 1, "batch indices")?;
    check_rank(c, 3, 2, "image info")?;
    check_out(c, 0, t, "boxes")
}

pub(super) fn transform(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let rd = dims_of(ctx, 0, 2, "boxes")?;
    let dd = dims_of(ctx, 1, 2, "bounding box deltas")?;
    let bd = dims_of(ctx, 2, 1, "batch indices")?;
    let id = dims_of(ctx, 3, 2, "image info")?;
    let n = rd[0] as usize;
    if rd[1] != 4 {
        return Err(ctx.err(format!("boxes must have shape [num_rois, 4], is {rd:?}")));
    }
    if dd[0] != rd[0] || dd[1] == 0 || dd[1] % 4 != 0 {
        return Err(ctx.err(format!(
            "bounding box deltas must have shape [{}, 4 * num_classes] with num_classes > 0, \
             is {dd:?}",
            rd[0]
        )));
    }
    if bd[0] != rd[0] {
        return Err(ctx.err(format!(
            "batch indices must have shape [{}] (one per box), is {bd:?}",
            rd[0]
        )));
    }
    if id[1] != 2 || id[0] == 0 {
        return Err(ctx.err(format!(
            "image info must have shape [batches, 2] with batches > 0, is {id:?}"
        )));
    }
    let od = vec![rd[0], dd[1]];
    count(ctx, &od)?;
    let classes = dd[1] as usize / 4;
    let rois = real_values(ctx, 0)?;
    let deltas = real_values(ctx, 1)?;
    let info = real_values(ctx, 3)?;
    let (_, batch) = ctx.i32s(2)?;
    let mut out = Vec::with_capacity(n * classes * 4);
    for r in 0..n {
        let b = batch[r];
        let bi = usize::try_from(b)
            .ok()
            .filter(|&b| b < id[0] as usize)
            .ok_or_else(|| {
                ctx.err(format!(
                    "box {r}: batch index {b} outside [0, {}) (the image info's batches)",
                    id[0]
                ))
            })?;
        let bx = &rois[4 * r..4 * r + 4];
        if !(bx[0] <= bx[2] && bx[1] <= bx[3]) {
            return Err(ctx.err(format!("box {r}: {bx:?} has x2 < x1 or y2 < y1")));
        }
        let (img_h, img_w) = (info[2 * bi], info[2 * bi + 1]);
        let (w, h) = (bx[2] - bx[0], bx[3] - bx[1]);
        let (cx, cy) = ((bx[0] + bx[2]) / 2.0, (bx[1] + bx[3]) / 2.0);
        for d in deltas[4 * classes * r..4 * classes * (r + 1)].chunks_exact(4) {
            let (nw, nh) = (d[2].exp() * w, d[3].exp() * h);
            let (ncx, ncy) = (cx + d[0] * w, cy + d[1] * h);
            let clip = |v: f32, hi: f32| v.max(0.0).min(hi);
            out.push(clip(ncx - nw / 2.0, img_w));
            out.push(clip(ncy - nh / 2.0, img_h));
            out.push(clip(ncx + nw / 2.0, img_w));
            out.push(clip(ncy + nh / 2.0, img_h));
        }
    }
    Ok(vec![match ctx.ty(0)? {
        T::TensorQuant16Asymm => quant16_boxes(od, &out),
        _ => Tensor::new(od, Data::F32(out.into())),
    }])
}

pub(super) fn check_nms(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[9], 4)?;
    let t = float_or_q8(c, "input 0 (scores)")?;
    let roi_t = if is_q8(t) { T::TensorQuant16Asymm } else { t };
    let ft = float_scalar(t);
    c.is(1, roi_t, "boxes")?;
    check_box_quant(c, 1, "boxes")?;
    c.is(2, T::TensorInt32, "batch indices")?;
    c.is(3, ft, "score threshold")?;
    c.is(4, T::Int32, "maximum detections")?;
    c.is(5, T::Int32, "NMS kernel")?;
    c.is(6, ft, "IoU threshold")?;
    c.is(7, ft, "sigma")?;
    c.is(8, ft, "NMS score threshold")?;
    check_rank(c, 0, 2, "scores")?;
    check_rank(c, 1, 2, "boxes")?;
    check_rank(c, 2, 1, "batch indices")?;
    check_out(c, 0, t, "scores")?;
    c.same_quant()?;
    check_out(c, 1, roi_t, "boxes")?;
    check_out(c, 2, T::TensorInt32, "classes")?;
    check_out(c, 3, T::TensorInt32, "batch indices")?;
    if let Some(k) = const_i32(c, 5)
        && !(0..=2).contains(&k)
    {
        return Err(Issue::Invalid(format!(
            "NMS kernel must be 0 (hard), 1 (linear) or 2 (gaussian), is {k}"
        )));
    }
    Ok(())
}

/// The soft-NMS kernels: the factor a box's score is multiplied by, given its IoU with a
/// selected box.
#[derive(Clone, Copy)]
pub(super) enum Kernel {
    /// Plain hard NMS (GENERATE_PROPOSALS): boxes overlapping by at least the threshold are
    /// dropped, the others' scores are left alone.
    Drop(f32),
    Hard(f32),
    Linear(f32),
    Gaussian(f32),
}

impl Kernel {
    fn factor(self, iou: f32) -> f32 {
        match self {
            Kernel::Drop(_) => 1.0,
            Kernel::Hard(t) => {
                if iou < t {
                    1.0
                } else {
                    0.0
                }
            }
            Kernel::Linear(t) => {
                if iou < t {
                    1.0
                } else {
                    1.0 - iou
                }
            }
            Kernel::Gaussian(sigma) => (-iou * iou / sigma).exp(),
        }
    }
}

/// Intersection over union of two `[x1, y1, x2, y2]` boxes.
pub(super) fn iou(a: &[f32], b: &[f32]) -> f32 {
    let area_a = (a[2] - a[0]) * (a[3] - a[1]);
    let area_b = (b[2] - b[0]) * (b[3] - b[1]);
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    inter / (area_a + area_b - inter)
}

/// Soft NMS over the candidates `sel` (indexes into `scores`, box `i` at `boxes[4i..]`) of
/// one class: repeatedly takes the best remaining candidate (the first of equal scores),
/// rescales the others' scores by `kernel` and drops those under `keep` (with
/// [`Kernel::Drop`], those overlapping too much). At most `limit`
/// are taken; `sel` ends holding them in the order taken.
pub(super) fn nms_class(
    scores: &mut [f32],
    boxes: &[f32],
    sel: &mut Vec<usize>,
    keep: f32,
    limit: Option<usize>,
    kernel: Kernel,
) {
    let bx = |i: usize| &boxes[4 * i..4 * i + 4];
    let (mut start, mut end) = (0, sel.len());
    while start < end && limit.is_none_or(|m| start < m) {
        let mut best = start;
        for i in start + 1..end {
            if scores[sel[best]] < scores[sel[i]] {
                best = i;
            }
        }
        sel.swap(best, start);
        let chosen = sel[start];
        let mut i = start + 1;
        while i < end {
            let s = sel[i];
            let o = iou(bx(s), bx(chosen));
            scores[s] *= kernel.factor(o);
            let dropped = match kernel {
                Kernel::Drop(t) => o >= t,
                _ => scores[s] < keep,
            };
            if dropped {
                end -= 1;
                sel.swap(i, end);
            } else {
                i += 1;
            }
        }
        start += 1;
    }
    sel.truncate(start);
}

pub(super) fn box_with_nms_limit(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let sd = dims_of(ctx, 0, 2, "scores")?;
    let rd = dims_of(ctx, 1, 2, "boxes")?;
    let bd = dims_of(ctx, 2, 1, "batch indices")?;
    let (n, k) = (sd[0] as usize, sd[1] as usize);
    if k < 2 {
        return Err(ctx.err(format!(
            "scores must have at least 2 classes (class 0 is the background), shape is {sd:?}"
        )));
    }
    if rd[0] != sd[0] || u64::from(rd[1]) != 4 * u64::from(sd[1]) {
        return Err(ctx.err(format!(
            "boxes must have shape [{n}, {}] (one box per class), is {rd:?}",
            4 * k
        )));
    }
    if bd[0] != sd[0] {
        return Err(ctx.err(format!(
            "batch indices must have shape [{n}] (one per region), is {bd:?}"
        )));
    }
    let score_thr = ctx.scalar_f32(3)?;
    let max_det = usize::try_from(ctx.scalar_i32(4)?).ok();
    let iou_thr = ctx.scalar_f32(6)?;
    let kernel = match ctx.scalar_i32(5)? {
        0 => Kernel::Hard(iou_thr),
        1 => Kernel::Linear(iou_thr),
        2 => Kernel::Gaussian(ctx.scalar_f32(7)?),
        other => {
            return Err(ctx.err(format!(
                "NMS kernel must be 0 (hard), 1 (linear) or 2 (gaussian), is {other}"
            )));
        }
    };
    let keep = ctx.scalar_f32(8)?;
    let mut scores = real_values(ctx, 0)?;
    let boxes = real_values(ctx, 1)?;
    let (_, batch) = ctx.i32s(2)?;
    // Regions of one batch are consecutive: each run of equal batch indices is one image.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for r in 0..n {
        match runs.last_mut() {
            Some((s, len)) if batch[*s] == batch[r] => *len += 1,
            _ => runs.push((r, 1)),
        }
    }
    let pairs: u64 = runs
        .iter()
        .map(|&(_, len)| (len as u64).saturating_mul(len as u64))
        .fold(0u64, u64::saturating_add)
        .saturating_mul(k as u64 - 1);
    if pairs > MAX_PAIRS {
        return Err(ctx.err(format!(
            "{pairs} box comparisons needed, more than the {MAX_PAIRS} allowed"
        )));
    }
    let mut selected: Vec<(usize, i32)> = Vec::new();
    for &(s, len) in &runs {
        let mut kept: Vec<usize> = Vec::new();
        for cls in 1..k {
            let mut sel = Vec::new();
            for r in s..s + len {
                let i = r * k + cls;
                let bx = &boxes[4 * i..4 * i + 4];
                if !(bx[0] <= bx[2] && bx[1] <= bx[3]) {
                    return Err(ctx.err(format!(
                        "region {r}, class {cls}: box {bx:?} has x2 < x1 or y2 < y1"
                    )));
                }
                if scores[i] > score_thr {
                    sel.push(i);
                }
            }
            nms_class(&mut scores, &boxes, &mut sel, keep, max_det, kernel);
            kept.extend(sel);
        }
        let by_score = |a: &usize, b: &usize| {
            scores[*b]
                .partial_cmp(&scores[*a])
                .unwrap_or(std::cmp::Ordering::Equal)
        };
        kept.sort_by(by_score);
        if let Some(m) = max_det {
            kept.truncate(m);
        }
        // Grouped by class, best score first within a class.
        kept.sort_by(|a, b| (a % k).cmp(&(b % k)).then_with(|| by_score(a, b)));
        selected.extend(kept.into_iter().map(|i| (i, batch[s])));
    }
    let m = to_u32(ctx, selected.len())?;
    let out_scores: Vec<f32> = selected.iter().map(|&(i, _)| scores[i]).collect();
    let ty = ctx.ty(0)?;
    let score_t = match ty {
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => {
            let o = ctx.out(0)?;
            let (lo, hi) = q8_range(ty);
            let q = out_scores
                .iter()
                .map(|&v| {
                    let x = (v / o.scale + o.zero_point as f32).round();
                    if x.is_nan() {
                        0
                    } else {
                        (x as i32).clamp(lo, hi)
                    }
                })
                .collect();
            q8_tensor(ty, vec![m], q)
        }
        _ => Tensor::new(vec![m], Data::F32(out_scores.into())),
    };
    fn pick<V: Copy>(selected: &[(usize, i32)], v: &[V]) -> Vec<V> {
        selected
            .iter()
            .flat_map(|&(i, _)| v[4 * i..4 * i + 4].iter().copied())
            .collect()
    }
    let box_t = match &ctx.t(1)?.data {
        Data::F32(v) => Tensor::new(vec![m, 4], Data::F32(pick(&selected, v).into())),
        Data::U16(v) => Tensor::new(vec![m, 4], Data::U16(pick(&selected, v).into())),
        _ => return Err(ctx.err("boxes must be float or TENSOR_QUANT16_ASYMM")),
    };
    let classes = selected.iter().map(|&(i, _)| (i % k) as i32).collect();
    let batches = selected.iter().map(|&(_, b)| b).collect();
    Ok(vec![
        score_t,
        box_t,
        Tensor::new(vec![m], Data::I32(classes)),
        Tensor::new(vec![m], Data::I32(batches)),
    ])
}
