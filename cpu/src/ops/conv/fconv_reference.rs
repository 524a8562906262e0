//! The plain float FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D: each output element written
//! out as its definition (bias plus the products of every in-bounds tap, then the activation's
//! clamp), no packing, no blocking, no SIMD. The tests' oracle for the fast kernels.

use super::FloatWindow;

/// `out[b][u] = clamp(bias[u] + Σ_i x[b][i] · w[u][i])`, with `out` batch × units.
pub(super) fn fully_connected(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    (lo, hi): (f32, f32),
    out: &mut [f32],
) {
    let units = bias.len();
    let isz = w.len() / units.max(1);
    for (b, row) in out.chunks_exact_mut(units.max(1)).enumerate() {
        for (u, o) in row.iter_mut().enumerate() {
            let mut acc = bias[u];
            for i in 0..isz {
                acc += x[b * isz + i] * w[u * isz + i];
            }
            *o = acc.max(lo).min(hi);
        }
    }
}

/// The input position of output `(oy, ox)`'s tap `(ky, kx)`, if inside the input.
fn tap(win: &FloatWindow<'_>, (oy, ox): (usize, usize), (ky, kx): (usize, usize)) -> Option<usize> {
    let (h, w) = win.in_hw;
    let iy = (oy * win.g.stride_h + ky * win.g.dil_h).checked_sub(win.g.pad_t)?;
    let ix = (ox * win.g.stride_w + kx * win.g.dil_w).checked_sub(win.g.pad_l)?;
    (iy < h && ix < w).then_some(iy * w + ix)
}

/// Every output element `out[p][o]` (p = (b, oy, ox), `oc` channels) as the clamped bias plus,
/// over the taps `t = ky·fw + kx` whose input position `at` (within image b) is inside the input,
/// `term(b·h·w + at, t, o)`.
fn convolve(
    win: &FloatWindow<'_>,
    oc: usize,
    out: &mut [f32],
    term: impl Fn(usize, usize, usize) -> f32,
) {
    let (h, w) = win.in_hw;
    let (oh, ow) = win.out_hw;
    let (fh, fw) = win.filter_hw;
    for (p, px) in out.chunks_exact_mut(oc.max(1)).enumerate() {
        let (b, oy, ox) = (p / (oh * ow), p / ow % oh, p % ow);
        for (o, v) in px.iter_mut().enumerate() {
            let mut acc = win.bias[o];
            for ky in 0..fh {
                for kx in 0..fw {
                    if let Some(at) = tap(win, (oy, ox), (ky, kx)) {
                        acc += term(b * h * w + at, ky * fw + kx, o);
                    }
                }
            }
            *v = acc.max(win.lo).min(win.hi);
        }
    }
}

/// CONV_2D on NHWC data with the filter `[oc][fh][fw][c]`; `out` is n × oh × ow × oc.
pub(super) fn conv2d(win: &FloatWindow<'_>, f: &[f32], out: &mut [f32]) {
    let (fh, fw) = win.filter_hw;
    let c = win.c;
    convolve(win, win.bias.len(), out, |pix, t, o| {
        (0..c)
            .map(|ci| win.x[pix * c + ci] * f[(o * fh * fw + t) * c + ci])
            .sum()
    });
}

/// DEPTHWISE_CONV_2D on NHWC data with the filter `[fh][fw][c·mult]`; `out` is
/// n × oh × ow × c·mult, output channel `o` reading input channel `o / mult`.
pub(super) fn depthwise(win: &FloatWindow<'_>, f: &[f32], mult: usize, out: &mut [f32]) {
    let (c, oc) = (win.c, win.c * mult);
    convolve(win, oc, out, |pix, t, o| {
        win.x[pix * c + o / mult] * f[t * oc + o]
    });
}
