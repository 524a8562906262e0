//! AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D.

use super::conv::{Geometry, Padding};
use super::opdef::OpDef;
use super::{
    KResult, OpCtx, count, is_quant8, nchw_to_nhwc, nhwc_input, q8_range, q8_tensor, to_layout,
    to_u32,
};
use crate::check::{Ck, F32_Q8, FLOAT, Issue};
use crate::model::{OperandType, OperationType};
use crate::par;
use crate::tensor::{Data, Reusable, Tensor};

use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef::new(O::AveragePool2d, F32_Q8, check_pool, pool2d),
    OpDef::new(O::MaxPool2d, F32_Q8, check_pool, pool2d),
    OpDef::new(O::L2Pool2d, FLOAT, check_pool, pool2d),
];

/// The pooling operations in their implicit (7 or 8 inputs) and explicit (10 or 11) padding
/// forms: INT32 padding, strides, filter and activation, an optional BOOL layout; a quantized
/// output keeps the input's scale and zero point.
fn check_pool(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[7, 8, 10, 11], 1)?;
    let implicit = c.ins.len() <= 8;
    let last = if implicit { 6 } else { 9 };
    for i in 1..=last {
        c.is(i, OperandType::Int32, "padding/stride/filter/activation")?;
    }
    c.opt(last + 1, OperandType::Bool, "layout")?;
    c.same_out(t0)?;
    c.same_quant()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PoolKind {
    Avg,
    Max,
    L2,
}

/// The three 2-D pooling operations in their implicit and explicit padding forms.
fn pool2d(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let kind = match ctx.op.op {
        OperationType::AveragePool2d => PoolKind::Avg,
        OperationType::MaxPool2d => PoolKind::Max,
        _ => PoolKind::L2,
    };
    let n_in = ctx.n_inputs();
    let implicit = n_in == 7 || n_in == 8;
    let (padding, first) = Padding::parse(ctx, 1, implicit)?;
    let sw = ctx.scalar_pos(first, "stride_w")?;
    let sh = ctx.scalar_pos(first + 1, "stride_h")?;
    let fw = ctx.scalar_pos(first + 2, "filter_width")?;
    let fh = ctx.scalar_pos(first + 3, "filter_height")?;
    let act = first + 4;
    let nchw = ctx.opt_bool(act + 1, false)?;
    let it = ctx.t(0)?;
    let (in_dims, [n, h, w, c]) = nhwc_input(ctx, it, nchw)?;
    let (g, oh, ow) = Geometry::resolve(ctx, padding, (sw, sh), (1, 1), (h, w), (fh, fw))?;
    let od = vec![in_dims[0], to_u32(ctx, oh)?, to_u32(ctx, ow)?, in_dims[3]];
    count(ctx, &od)?;
    // Window bounds per output coordinate.
    let bounds = |o: usize, stride: usize, pad: usize, f: usize, size: usize| {
        let start = (o * stride) as isize - pad as isize;
        let lo = start.max(0) as usize;
        let hi = ((start + f as isize).min(size as isize)).max(0) as usize;
        (lo, hi.max(lo))
    };
    let win = |oy: usize, ox: usize| {
        (
            bounds(oy, g.stride_h, g.pad_t, fh, h),
            bounds(ox, g.stride_w, g.pad_l, fw, w),
        )
    };
    let shape = Shape {
        nhwc: [n, h, w, c],
        out_hw: (oh, ow),
        window: fh * fw,
    };
    let in_ty = ctx.ty(0)?;
    if crate::tensor::is_float(in_ty) {
        let x = match &it.data {
            Data::F32(v) if nchw => nchw_to_nhwc(v, &it.dims).1,
            Data::F32(v) => v.to_vec(),
            _ => return Err(ctx.err("input is not float32")),
        };
        let (lo, hi) = ctx.act_f32(act)?;
        // The sums start where `Iterator::sum` starts (-0.0 in current Rust) and add the
        // window in the same order, so the results are those of summing the window's values.
        let zero: f32 = std::iter::empty::<f32>().sum();
        let out = match kind {
            PoolKind::Avg => shape.run(
                ctx,
                &x,
                win,
                zero,
                |s, v| s + v,
                |s, cnt| {
                    let v = if cnt == 0 { 0.0 } else { s / cnt as f32 };
                    v.max(lo).min(hi)
                },
            ),
            PoolKind::Max => shape.run(ctx, &x, win, f32::NEG_INFINITY, f32::max, |m, _| {
                m.max(lo).min(hi)
            }),
            PoolKind::L2 => shape.run(
                ctx,
                &x,
                win,
                zero,
                |s, v| s + v * v,
                |s, cnt| {
                    let v = if cnt == 0 {
                        0.0
                    } else {
                        (s / cnt as f32).sqrt()
                    };
                    v.max(lo).min(hi)
                },
            ),
        }?;
        let (d, v) = to_layout(od, out, nchw);
        return Ok(vec![Tensor::new(d, Data::F32(v))]);
    }
    if !is_quant8(in_ty) {
        return Err(ctx.err(format!("unsupported type {}", in_ty.name())));
    }
    if kind == PoolKind::L2 {
        return Err(ctx.err("L2_POOL_2D is not implemented for quantized tensors"));
    }
    let mut x: Vec<i32> = match &it.data {
        Data::U8(v) => v.iter().map(|&q| i32::from(q)).collect(),
        Data::I8(v) => v.iter().map(|&q| i32::from(q)).collect(),
        _ => return Err(ctx.err("input is not 8-bit")),
    };
    if nchw {
        x = nchw_to_nhwc(&x, &it.dims).1;
    }
    let (qmin, qmax) = q8_range(in_ty);
    let (lo, hi) = ctx.act_q(act, qmin, qmax)?;
    let out = match kind {
        PoolKind::Max => shape.run(ctx, &x, win, qmin, i32::max, |m, _| m.clamp(lo, hi)),
        _ => shape.run(
            ctx,
            &x,
            win,
            0i64,
            |s, v| s + i64::from(v),
            |s, cnt| {
                let cnt = cnt as i64;
                let v = if cnt == 0 {
                    0
                } else if s >= 0 {
                    (s + cnt / 2) / cnt
                } else {
                    (s - cnt / 2) / cnt
                };
                (v as i32).clamp(lo, hi)
            },
        ),
    }?;
    let (d, out) = to_layout(od, out, nchw);
    Ok(vec![q8_tensor(in_ty, d, out.into_vec())])
}

/// The extents of one pooling: input NHWC, output height and width, window size.
struct Shape {
    nhwc: [usize; 4],
    out_hw: (usize, usize),
    /// Filter height × width (for the threading estimate).
    window: usize,
}

impl Shape {
    /// For every output element, folds the input values of its window (rows `y0..y1`, columns
    /// `x0..x1` from `win(oy, ox)`, in row-major order) into an accumulator that starts at
    /// `init`, then maps it with `fin(accumulator, window size)`; whole channel vectors at a
    /// time, output rows split across threads.
    fn run<T, A, R>(
        &self,
        ctx: &OpCtx<'_>,
        x: &[T],
        win: impl Fn(usize, usize) -> ((usize, usize), (usize, usize)) + Sync,
        init: A,
        acc: impl Fn(A, T) -> A + Sync,
        fin: impl Fn(A, usize) -> R + Sync,
    ) -> KResult<Vec<R>>
    where
        T: Copy + Sync,
        A: Copy + Send + Sync,
        R: Reusable + Send,
    {
        let [n, h, w, c] = self.nhwc;
        let (oh, ow) = self.out_hw;
        if n.checked_mul(h)
            .and_then(|v| v.checked_mul(w))
            .and_then(|v| v.checked_mul(c))
            != Some(x.len())
        {
            return Err(ctx.err("input data does not match its dimensions"));
        }
        let len = n
            .checked_mul(oh)
            .and_then(|v| v.checked_mul(ow))
            .and_then(|v| v.checked_mul(c))
            .ok_or_else(|| ctx.err("output too large"))?;
        // Every element is written below.
        let mut out = crate::tensor::output_buffer::<R>(len);
        let row_len = ow * c;
        // About 4 flop-equivalents per window value (a load and an add, or a compare).
        let work = len.saturating_mul(self.window).saturating_mul(4);
        let threads = par::threads_for(work, n * oh);
        let _ = par::for_row_ranges(&mut out, row_len, threads, |r0, part| {
            let mut sums = vec![init; c];
            for (i, px) in part.chunks_exact_mut(c.max(1)).enumerate() {
                let (row, ox) = ((r0 + i / ow.max(1)), i % ow.max(1));
                let (b, oy) = (row / oh.max(1), row % oh.max(1));
                let ((y0, y1), (x0, x1)) = win(oy, ox);
                sums.fill(init);
                for y in y0..y1 {
                    let start = ((b * h + y) * w + x0) * c;
                    let Some(run) = x.get(start..start + (x1 - x0) * c) else {
                        continue;
                    };
                    for v in run.chunks_exact(c.max(1)) {
                        for (s, &v) in sums.iter_mut().zip(v) {
                            *s = acc(*s, v);
                        }
                    }
                }
                let cnt = (y1 - y0) * (x1 - x0);
                for (o, &s) in px.iter_mut().zip(&sums) {
                    *o = fin(s, cnt);
                }
            }
            Ok::<(), ()>(())
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{OperandType as T, OperationType as O};
    use crate::par::same_at_thread_counts;

    /// Output 0's bytes of `g` on byte inputs of the model's dimensions (up to 1 MiB out).
    fn run(g: crate::model::Graph, inputs: &[Vec<u8>]) -> (Vec<u8>, Vec<u32>) {
        let ins: Vec<(Vec<u8>, Vec<u32>)> = inputs.iter().map(|v| (v.clone(), vec![])).collect();
        run_bytes(g, &ins)
    }
    use crate::test_support::{B, bf, fb, run_bytes};

    /// A 3×3 stride-1 SAME pooling `op` of an NHWC input of `dims`.
    fn pool(op: O, ty: T, dims: [u32; 4]) -> B {
        let mut b = B::new();
        let x = b.input(ty, &dims);
        let ins: Vec<u32> = [1, 1, 1, 3, 3, 0].iter().map(|&v| b.int(v)).collect();
        let o = b.output(ty, &dims);
        if ty == T::TensorQuant8Asymm {
            b.q(x, 0.5, 10);
            b.q(o, 0.5, 10);
        }
        b.op(op, &[&[x][..], &ins].concat(), &[o]);
        b
    }

    /// The window sums, maxima and counts of a 3×3 SAME pooling, worked out directly in f64.
    fn naive(x: &[f32], [n, h, w, c]: [usize; 4]) -> Vec<(f64, f64, usize)> {
        let mut out = Vec::new();
        for b in 0..n {
            for y in 0..h {
                for xx in 0..w {
                    for ch in 0..c {
                        let (mut s, mut m, mut cnt) = (0.0, f64::NEG_INFINITY, 0);
                        for yy in y.saturating_sub(1)..(y + 2).min(h) {
                            for xq in xx.saturating_sub(1)..(xx + 2).min(w) {
                                let v = f64::from(x[((b * h + yy) * w + xq) * c + ch]);
                                s += v;
                                m = m.max(v);
                                cnt += 1;
                            }
                        }
                        out.push((s, m, cnt));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn float_pools_split_across_threads_match_the_window_sums() {
        // 2 × 48 × 40 × 24: enough work to split by output rows.
        let dims = [2, 48, 40, 24];
        let len = dims.iter().product::<u32>() as usize;
        let x: Vec<f32> = (0..len as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 12) % 1000) as f32 / 64.0 - 7.0)
            .collect();
        let want = naive(&x, dims.map(|d| d as usize));
        let avg = same_at_thread_counts(|| {
            run(pool(O::AveragePool2d, T::TensorFloat32, dims).g, &[fb(&x)]).0
        });
        let max = same_at_thread_counts(|| {
            run(pool(O::MaxPool2d, T::TensorFloat32, dims).g, &[fb(&x)]).0
        });
        for ((a, m), (s, mx, cnt)) in bf(&avg).into_iter().zip(bf(&max)).zip(want) {
            assert!(
                (f64::from(a) - s / cnt as f64).abs() < 1e-4,
                "{a} vs {}",
                s / cnt as f64
            );
            assert_eq!(f64::from(m), mx);
        }
    }

    #[test]
    fn quant8_average_pool_split_across_threads_rounds_each_window_mean() {
        let dims = [1, 64, 64, 16];
        let len = dims.iter().product::<u32>() as usize;
        let x: Vec<u8> = (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let out = same_at_thread_counts(|| {
            run(
                pool(O::AveragePool2d, T::TensorQuant8Asymm, dims).g,
                std::slice::from_ref(&x),
            )
            .0
        });
        let xf: Vec<f32> = x.iter().map(|&v| f32::from(v)).collect();
        for (o, (s, _, cnt)) in out.into_iter().zip(naive(&xf, dims.map(|d| d as usize))) {
            // Sums of non-negative values: the mean rounded half up.
            let want = ((s + cnt as f64 / 2.0) / cnt as f64).floor();
            assert_eq!(f64::from(o), want.min(255.0));
        }
    }
}
