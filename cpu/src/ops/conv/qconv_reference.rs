//! The plain scalar 8-bit FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D kernels (i64
//! accumulators, one requantization per value): the oracle the fast kernels of
//! [`super::qconv`] are tested against, and the path for the operations whose reductions are
//! too long for the fast kernels' i32 accumulators ([`super::qgemm::MAX_K`]).

use super::{Geometry, filter_quant};
use crate::ops::quant::{Requant, centered};
use crate::ops::{KResult, OpCtx, is_quant8, nchw_to_nhwc};

/// The integer operands of an 8-bit FULLY_CONNECTED, CONV_2D or DEPTHWISE_CONV_2D.
pub(super) struct QuantOperands<'a> {
    /// The input minus its zero point, in NHWC order.
    pub(super) x: Vec<i32>,
    /// The filter (weights) minus its zero point.
    pub(super) f: Vec<i32>,
    pub(super) bias: &'a [i32],
    pub(super) rq: Requant,
}

impl<'a> QuantOperands<'a> {
    /// Reads inputs 0 (input), 1 (filter) and 2 (bias) for `out_c` output channels, with the
    /// fused activation at input `act`; an NCHW input is reordered to NHWC.
    pub(super) fn new(ctx: &OpCtx<'a>, nchw: bool, out_c: usize, act: usize) -> KResult<Self> {
        let in_ty = ctx.ty(0)?;
        if !is_quant8(in_ty) {
            return Err(ctx.err(format!("unsupported type {}", in_ty.name())));
        }
        let inp = ctx.operand(0)?;
        let (dims, mut x) = centered(ctx, 0, inp.zero_point)?;
        if nchw {
            x = nchw_to_nhwc(&x, &dims).1;
        }
        let (fzp, fscales) = filter_quant(ctx, out_c)?;
        let (_, f) = centered(ctx, 1, fzp)?;
        let (_, bias) = ctx.i32s(2)?;
        let rq = Requant::new(ctx, inp.scale, &fscales, act)?;
        Ok(QuantOperands { x, f, bias, rq })
    }

    /// Appends, for each output channel `o < n`, the requantized `bias[o] + row · f[o]`, the
    /// filter rows being `row.len()` long.
    fn push_dots(&self, row: &[i32], n: usize, out: &mut Vec<i32>) {
        let k = row.len();
        for o in 0..n {
            let fr = &self.f[o * k..(o + 1) * k];
            let acc: i64 = row
                .iter()
                .zip(fr)
                .map(|(&p, &q)| i64::from(p * q))
                .sum::<i64>()
                + i64::from(self.bias[o]);
            out.push(self.rq.apply(acc, o));
        }
    }
}

/// The extents of a convolution: input (batch, height, width, depth) NHWC, filter and output
/// height and width, and the window geometry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub(super) nhwc: [usize; 4],
    pub(super) filter_hw: (usize, usize),
    pub(super) out_hw: (usize, usize),
    pub(super) g: Geometry,
}

/// FULLY_CONNECTED: `batch` rows of `isz` inputs by `units` weight rows.
pub(super) fn fully_connected(
    q: &QuantOperands<'_>,
    batch: usize,
    isz: usize,
    units: usize,
) -> Vec<i32> {
    let mut out = Vec::with_capacity(batch * units);
    for b in 0..batch {
        q.push_dots(&q.x[b * isz..(b + 1) * isz], units, &mut out);
    }
    out
}

/// CONV_2D with `oc` output channels, NHWC output.
pub(super) fn conv2d(q: &QuantOperands<'_>, win: &Window, oc: usize) -> Vec<i32> {
    let ([n, h, w, c], (fh, fw), (oh, ow), g) = (win.nhwc, win.filter_hw, win.out_hw, win.g);
    let k = fh * fw * c;
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
                                let at = ((b * h + iy) * w + ix) * c;
                                d.copy_from_slice(&q.x[at..at + c]);
                            }
                            _ => d.fill(0),
                        }
                    }
                }
                q.push_dots(&patch, oc, &mut out);
            }
        }
    }
    out
}

/// DEPTHWISE_CONV_2D with depth multiplier `mult`, NHWC output.
pub(super) fn depthwise_conv2d(q: &QuantOperands<'_>, win: &Window, mult: usize) -> Vec<i32> {
    let ([n, h, w, c], (fh, fw), (oh, ow), g) = (win.nhwc, win.filter_hw, win.out_hw, win.g);
    let QuantOperands { x, f, bias, rq } = q;
    let oc = c * mult;
    let mut out = Vec::with_capacity(n * oh * ow * oc);
    let mut acc = vec![0i64; oc];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for (a, &bv) in acc.iter_mut().zip(bias.iter()) {
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
    out
}
