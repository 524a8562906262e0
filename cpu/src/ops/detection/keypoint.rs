//! HEATMAP_MAX_KEYPOINT: for each box and keypoint, the heatmap maximum refined to sub-pixel
//! precision by a second-order Taylor expansion around it, mapped into the box.

use super::super::{KResult, OpCtx, count, nchw_to_nhwc, q8_range, q8_tensor};
use super::{
    check_box_quant, check_out, check_rank, float_or_q8, is_q8, quant16_boxes, real_values,
};
use crate::check::{Ck, Issue};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

use OperandType as T;

/// Heatmap types implemented (input 0).
pub(super) const TYPES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

pub(super) fn check(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 2)?;
    let t = float_or_q8(c, "input 0 (heatmaps)")?;
    let box_t = if is_q8(t) { T::TensorQuant16Asymm } else { t };
    c.is(1, box_t, "boxes")?;
    check_box_quant(c, 1, "boxes")?;
    c.is(2, T::Bool, "layout")?;
    check_rank(c, 0, 4, "heatmaps")?;
    check_rank(c, 1, 2, "boxes")?;
    check_out(c, 0, t, "scores")?;
    check_out(c, 1, box_t, "keypoints")
}

/// The refinement of a maximum from its 3x3 neighbourhood `g[row][col]`: the offset (x, y)
/// that maximises the quadratic fit (scaled back to at most 1.5 pixels) and the fitted
/// score, or `None` when the Hessian is (nearly) singular.
fn refine(g: &[[f32; 3]; 3], atol: f32, rtol: f32) -> Option<([f32; 2], f32)> {
    let b = [-(g[1][2] - g[1][0]) / 2.0, -(g[2][1] - g[0][1]) / 2.0];
    let a00 = g[1][0] - 2.0 * g[1][1] + g[1][2];
    let a01 = (g[2][2] - g[2][0] - g[0][2] + g[0][0]) / 4.0;
    let a11 = g[0][1] - 2.0 * g[1][1] + g[2][1];
    let cross = a00 * a11;
    let det = cross - a01 * a01;
    if det.abs() < atol + rtol * cross {
        return None;
    }
    let mut d = [
        (a11 * b[0] - a01 * b[1]) / det,
        (a00 * b[1] - a01 * b[0]) / det,
    ];
    let m = d[0].abs().max(d[1].abs());
    if m > 1.5 {
        let s = 1.5 / m;
        d = [d[0] * s, d[1] * s];
    }
    let quad = ((a00 * d[0] + a01 * d[1]) * d[0] + (a01 * d[0] + a11 * d[1]) * d[1]) / 2.0;
    Some((d, g[1][1] - b[0] * d[0] - b[1] * d[1] + quad))
}

pub(super) fn heatmap_max_keypoint(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let nchw = ctx.scalar_bool(2)?;
    let hd = ctx.t(0)?.dims.clone();
    let bd = &ctx.t(1)?.dims;
    if hd.len() != 4 || bd.len() != 2 {
        return Err(ctx.err(format!(
            "heatmaps must be 4-D and boxes 2-D, are {hd:?} and {bd:?}"
        )));
    }
    let (n, k, side, other) = if nchw {
        (hd[0], hd[1], hd[2], hd[3])
    } else {
        (hd[0], hd[3], hd[1], hd[2])
    };
    if side != other || side < 2 {
        return Err(ctx.err(format!(
            "heatmaps must be square and at least 2x2, shape is {hd:?}"
        )));
    }
    if bd[0] != n || bd[1] != 4 {
        return Err(ctx.err(format!(
            "boxes must have shape [{n}, 4] (one per heatmap), is {bd:?}"
        )));
    }
    let (score_dims, kp_dims) = (vec![n, k], vec![n, k, 2]);
    count(ctx, &kp_dims)?;
    let mut hm = real_values(ctx, 0)?;
    if nchw {
        hm = nchw_to_nhwc(&hm, &hd).1;
    }
    let boxes = real_values(ctx, 1)?;
    let ty = ctx.ty(0)?;
    let (atol, rtol) = if ty == T::TensorFloat16 {
        (1e-3, 1e-3)
    } else {
        (1e-5, 1e-5)
    };
    let (n, k, s) = (n as usize, k as usize, side as usize);
    let mut scores = Vec::with_capacity(n * k);
    let mut kps = Vec::with_capacity(n * k * 2);
    for i in 0..n {
        let bx = &boxes[4 * i..4 * i + 4];
        if !(bx[0] <= bx[2] && bx[1] <= bx[3]) {
            return Err(ctx.err(format!("box {i}: {bx:?} has x2 < x1 or y2 < y1")));
        }
        let map = &hm[i * s * s * k..(i + 1) * s * s * k];
        for j in 0..k {
            // First maximum in row-major order.
            let (mut best, mut at) = (f32::MIN, 0);
            for p in 0..s * s {
                if best < map[p * k + j] {
                    best = map[p * k + j];
                    at = p;
                }
            }
            let (my, mx) = (at / s, at % s);
            // Neighbours outside the map are mirrored across its edge.
            let mirror = |v: usize, d: isize| match v as isize + d {
                -1 => 1,
                x if x as usize >= s => s - 2,
                x => x as usize,
            };
            let mut g = [[0f32; 3]; 3];
            for (r, row) in g.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    let y = mirror(my, r as isize - 1);
                    let x = mirror(mx, c as isize - 1);
                    *v = map[(y * s + x) * k + j];
                }
            }
            let (d, score) = refine(&g, atol, rtol).unwrap_or(([0.0, 0.0], best));
            let rx = (mx as f32 + d[0] + 0.5) / s as f32;
            let ry = (my as f32 + d[1] + 0.5) / s as f32;
            scores.push(score);
            kps.push(rx * (bx[2] - bx[0]) + bx[0]);
            kps.push(ry * (bx[3] - bx[1]) + bx[1]);
        }
    }
    Ok(match ty {
        T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned => {
            let o = ctx.out(0)?;
            let (lo, hi) = q8_range(ty);
            let q = scores
                .iter()
                .map(|&v| super::super::quant::quantize_val(v, o.scale, o.zero_point, lo, hi))
                .collect();
            vec![q8_tensor(ty, score_dims, q), quant16_boxes(kp_dims, &kps)]
        }
        _ => vec![
            Tensor::new(score_dims, Data::F32(scores.into())),
            Tensor::new(kp_dims, Data::F32(kps.into())),
        ],
    })
}
