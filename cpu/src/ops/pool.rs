//! AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D.

use super::conv::{Geometry, Padding};
use super::opdef::OpDef;
use super::{
    KResult, OpCtx, count, is_quant8, nchw_to_nhwc, nhwc_input, q8_range, q8_tensor, to_layout,
    to_u32,
};
use crate::check::{Ck, F32_Q8, FLOAT, Issue};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

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
    // Runs `f(window values iterator) -> out` for every output element.
    fn run<T: Copy, R>(
        x: &[T],
        dims: (usize, usize, usize, usize),
        out_hw: (usize, usize),
        win: impl Fn(usize, usize) -> ((usize, usize), (usize, usize)),
        mut f: impl FnMut(&mut dyn Iterator<Item = T>, usize) -> R,
    ) -> Vec<R> {
        let (n, h, w, c) = dims;
        let (oh, ow) = out_hw;
        let _ = h;
        let mut out = Vec::with_capacity(n * oh * ow * c);
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    let ((y0, y1), (x0, x1)) = win(oy, ox);
                    let cnt = (y1 - y0) * (x1 - x0);
                    for ch in 0..c {
                        let mut it = (y0..y1)
                            .flat_map(|y| (x0..x1).map(move |xx| (y, xx)))
                            .map(|(y, xx)| x[((b * h + y) * w + xx) * c + ch]);
                        out.push(f(&mut it, cnt));
                    }
                }
            }
        }
        out
    }
    let win = |oy: usize, ox: usize| {
        (
            bounds(oy, g.stride_h, g.pad_t, fh, h),
            bounds(ox, g.stride_w, g.pad_l, fw, w),
        )
    };
    let in_ty = ctx.ty(0)?;
    if crate::tensor::is_float(in_ty) {
        let x = match &it.data {
            Data::F32(v) if nchw => nchw_to_nhwc(v, &it.dims).1,
            Data::F32(v) => v.clone(),
            _ => return Err(ctx.err("input is not float32")),
        };
        let (lo, hi) = ctx.act_f32(act)?;
        let out = run(&x, (n, h, w, c), (oh, ow), win, |it, cnt| {
            let v = match kind {
                PoolKind::Avg => {
                    let s: f32 = it.sum();
                    if cnt == 0 { 0.0 } else { s / cnt as f32 }
                }
                PoolKind::Max => it.fold(f32::NEG_INFINITY, f32::max),
                PoolKind::L2 => {
                    let s: f32 = it.map(|v| v * v).sum();
                    if cnt == 0 {
                        0.0
                    } else {
                        (s / cnt as f32).sqrt()
                    }
                }
            };
            v.max(lo).min(hi)
        });
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
    let out = run(&x, (n, h, w, c), (oh, ow), win, |it, cnt| {
        let v = match kind {
            PoolKind::Max => it.fold(qmin, i32::max),
            _ => {
                let s: i64 = it.map(i64::from).sum();
                let cnt = cnt as i64;
                let v = if cnt == 0 {
                    0
                } else if s >= 0 {
                    (s + cnt / 2) / cnt
                } else {
                    (s - cnt / 2) / cnt
                };
                v as i32
            }
        };
        v.clamp(lo, hi)
    });
    let (d, out) = to_layout(od, out, nchw);
    Ok(vec![q8_tensor(in_ty, d, out)])
}
