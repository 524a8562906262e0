//! FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D (float via GEMM, 8-bit via integer kernels),
//! and the packed constant weights their float kernels prepare once per constant.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use super::fgemm::{self, Epilogue, Isa, Product};
use super::gemm::{GEMV_MAX_ROWS, gemv_rows};
use super::hgemm;
use super::opdef::OpDef;
use super::{
    KResult, OpCtx, check4, count, is_quant8, nchw_to_nhwc, nhwc_input, to_layout, to_u32,
};
use crate::check::{Ck, F32_Q8, FLOAT, Issue};
use crate::model::{Graph, OperandType, Operation, OperationType};
use crate::par;
use crate::tensor::{Buf, Data, Tensor};

use OperandType as T;
use OperationType as O;

// The 8-bit kernels: children of this module, so they share its setup (ConvSetup, Geometry)
// without the two modules importing each other.
#[cfg(target_arch = "x86_64")]
mod dw3x3;
#[cfg(test)]
mod fconv_reference;
#[cfg(test)]
mod fconv_tests;
mod qconv;
mod qconv_reference;
#[cfg(test)]
mod qconv_tests;
pub(crate) use qconv::{DepthwiseFilter, pack_q8_weights};

pub(crate) static DEFS: &[OpDef] = &[
    OpDef::new(
        O::FullyConnected,
        F32_Q8,
        check_fully_connected,
        fully_connected,
    ),
    OpDef::new(O::Conv2d, F32_Q8, check_conv2d, conv2d),
    OpDef::new(
        O::DepthwiseConv2d,
        F32_Q8,
        check_depthwise_conv2d,
        depthwise_conv2d,
    ),
];

/// Which float kernels run an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatRoute {
    /// The plain reference kernels (`fconv_reference`), the tests' oracle.
    #[cfg(test)]
    Reference,
    /// The fast kernels with this instruction set.
    Fast(Isa),
}

/// What the fast float kernels ran (counted per operation, on the calling thread, in tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FloatRuns {
    /// FULLY_CONNECTED / CONV_2D through the packed GEMM ([`fgemm`]).
    pub(crate) packed_gemm: usize,
    /// DEPTHWISE_CONV_2D through the 3×3 kernel.
    pub(crate) depthwise_3x3: usize,
    /// FULLY_CONNECTED / CONV_2D of a relaxed model through the float16 GEMM ([`hgemm`]).
    pub(crate) half_gemm: usize,
}

#[cfg(test)]
thread_local! {
    static FLOAT_FORCED: std::cell::Cell<Option<FloatRoute>> = const { std::cell::Cell::new(None) };
    static FLOAT_RUNS: std::cell::Cell<FloatRuns> = const {
        std::cell::Cell::new(FloatRuns { packed_gemm: 0, depthwise_3x3: 0, half_gemm: 0 })
    };
    static HALF_FORCED: std::cell::Cell<Option<hgemm::Kernel>> = const { std::cell::Cell::new(None) };
}

/// What the fast float kernels have run on this thread.
#[cfg(test)]
pub(crate) fn float_runs() -> FloatRuns {
    FLOAT_RUNS.with(std::cell::Cell::get)
}

/// Counts one operation run by a fast float kernel (tests check that it did run).
fn ran_float(#[cfg_attr(not(test), allow(unused_variables))] f: fn(&mut FloatRuns)) {
    #[cfg(test)]
    FLOAT_RUNS.with(|c| {
        let mut r = c.get();
        f(&mut r);
        c.set(r);
    });
}

/// Runs `f` with the float kernels of this thread forced onto `route`.
#[cfg(test)]
pub(crate) fn with_float_route<R>(route: FloatRoute, f: impl FnOnce() -> R) -> R {
    let before = FLOAT_FORCED.with(|c| c.replace(Some(route)));
    let r = f();
    FLOAT_FORCED.with(|c| c.set(before));
    r
}

/// Runs `f` with relaxed models' float GEMMs forced onto the float16 `kernel` (preparation
/// and execution both, on this thread): the portable one checks the float16 route on CPUs
/// without float16 arithmetic.
#[cfg(test)]
pub(crate) fn with_half_kernel<R>(kernel: hgemm::Kernel, f: impl FnOnce() -> R) -> R {
    let before = HALF_FORCED.with(|c| c.replace(Some(kernel)));
    let r = f();
    HALF_FORCED.with(|c| c.set(before));
    r
}

/// The float16 kernel the float GEMMs of a model run on: one only for a `relaxed` model
/// (`relaxComputationFloat32toFloat16`) on a CPU with float16 arithmetic; else None, and
/// they run in float32 (which NNAPI allows a relaxed model too).
pub(crate) fn half_kernel(relaxed: bool) -> Option<hgemm::Kernel> {
    if !relaxed {
        return None;
    }
    #[cfg(test)]
    if let Some(k) = HALF_FORCED.with(std::cell::Cell::get) {
        return Some(k);
    }
    hgemm::Kernel::detect()
}

/// The route of a float operation: the fast kernels of this CPU unless a test forced another.
fn float_route() -> FloatRoute {
    #[cfg(test)]
    if let Some(r) = FLOAT_FORCED.with(std::cell::Cell::get) {
        return r;
    }
    FloatRoute::Fast(Isa::detect())
}

/// The bias type for input type `t0`: the same float type, else TENSOR_INT32.
fn bias_type(t0: OperandType) -> OperandType {
    if FLOAT.contains(&t0) {
        t0
    } else {
        T::TensorInt32
    }
}

/// FULLY_CONNECTED(input, weights, bias, activation).
fn check_fully_connected(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[4], 1)?;
    c.is(1, t0, "weights")?;
    c.is(2, bias_type(t0), "bias")?;
    c.is(3, T::Int32, "fused activation")?;
    c.same_out(t0)
}

fn check_conv2d(c: &Ck<'_>) -> Result<(), Issue> {
    check_conv(c, false)
}

fn check_depthwise_conv2d(c: &Ck<'_>) -> Result<(), Issue> {
    check_conv(c, true)
}

/// CONV_2D / DEPTHWISE_CONV_2D in their implicit and explicit padding forms, with the
/// optional layout and dilation arguments: the filter of the input's type or, for 8-bit
/// inputs, per-channel (channel 0, or 3 for depthwise); the bias as [`bias_type`].
fn check_conv(c: &Ck<'_>, depthwise: bool) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    let dw = usize::from(depthwise);
    c.counts(&[7 + dw, 8 + dw, 10 + dw, 11 + dw, 13 + dw], 1)?;
    let n = c.ins.len();
    let implicit = n == 7 + dw || n == 8 + dw || (n == 10 + dw && c.ty(7 + dw)? == T::Bool);
    let ft = c.ty(1)?;
    let per_channel_ok = ft == T::TensorQuant8SymmPerChannel && !FLOAT.contains(&t0);
    if ft != t0 && !per_channel_ok {
        return Err(Issue::Invalid(format!(
            "filter type {} does not match input type {}",
            ft.name(),
            t0.name()
        )));
    }
    if ft == T::TensorQuant8SymmPerChannel {
        let want_dim = if depthwise { 3 } else { 0 };
        if c.inp(1)?.channel_quant.as_ref().map(|q| q.channel_dim) != Some(want_dim) {
            return Err(Issue::Invalid(format!(
                "per-channel filter must have channel_dim {want_dim}"
            )));
        }
    }
    c.is(2, bias_type(t0), "bias")?;
    let first = if implicit { 4 } else { 7 };
    for i in 3..first + 3 + dw {
        c.is(i, T::Int32, "padding/stride/multiplier/activation")?;
    }
    let act = first + 2 + dw;
    c.opt(act + 1, T::Bool, "layout")?;
    c.opt(act + 2, T::Int32, "dilation width")?;
    c.opt(act + 3, T::Int32, "dilation height")?;
    c.same_out(t0)
}

/// The operand a FULLY_CONNECTED or CONV_2D with float or 8-bit input reads as its GEMM weights
/// (input 1), whose constant value [`pack_weights`] (float) or [`qconv::pack_q8_weights`]
/// (8-bit) prepares once for every operation reading it.
pub(crate) fn gemm_weights_operand(graph: &Graph, op: &Operation) -> Option<usize> {
    if !matches!(op.op, O::FullyConnected | O::Conv2d) {
        return None;
    }
    let input = graph.operands.get(*op.inputs.first()? as usize)?;
    if !crate::tensor::is_float(input.ty) && !is_quant8(input.ty) {
        return None;
    }
    Some(*op.inputs.get(1)? as usize)
}

/// Float weights `[n][k]` (filters `[n, fh, fw, c]` with k = fh·fw·c) in the packed GEMM's
/// layout: panels of [`fgemm::NR`] output channels, each `[k][NR]` ([`fgemm::pack`]).
pub(crate) fn pack_weights(w: &Tensor) -> Option<Vec<f32>> {
    let (n, k, v) = float_weight_rows(w)?;
    fgemm::pack(n, k, v)
}

/// Float weights as [`pack_weights`] but as halves, for the float16 GEMM ([`hgemm::pack`]).
pub(crate) fn pack_weights_f16(w: &Tensor) -> Option<Vec<u16>> {
    let (n, k, v) = float_weight_rows(w)?;
    hgemm::pack(n, k, v)
}

/// Float weights as (n, k, their n·k values); None for other data or an empty or ragged shape.
fn float_weight_rows(w: &Tensor) -> Option<(usize, usize, &[f32])> {
    let Data::F32(v) = &w.data else {
        return None;
    };
    let n = *w.dims.first()? as usize;
    if n == 0 || v.is_empty() || v.len() % n != 0 {
        return None;
    }
    Some((n, v.len() / n, v))
}

/// Convolution window geometry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Geometry {
    pub(crate) pad_l: usize,
    pub(crate) pad_r: usize,
    pub(crate) pad_t: usize,
    pub(crate) pad_b: usize,
    pub(crate) stride_w: usize,
    pub(crate) stride_h: usize,
    pub(crate) dil_w: usize,
    pub(crate) dil_h: usize,
}

/// How padding was given.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Padding {
    Implicit(i32),
    Explicit {
        l: usize,
        r: usize,
        t: usize,
        b: usize,
    },
}

impl Padding {
    /// Reads the padding arguments from input `at` on: the scheme when `implicit`, else the
    /// explicit left, right, top and bottom extents. Also returns the next argument's index.
    pub(crate) fn parse(ctx: &OpCtx<'_>, at: usize, implicit: bool) -> KResult<(Padding, usize)> {
        if implicit {
            // The HAL lists 0 (NONE), 1 (SAME) and 2 (VALID); NONE pads as VALID does.
            let scheme = ctx.scalar_i32(at)?;
            if !(0..=2).contains(&scheme) {
                return Err(ctx.err(format!(
                    "padding scheme {scheme} is not 0 (NONE), 1 (SAME) or 2 (VALID)"
                )));
            }
            return Ok((Padding::Implicit(scheme), at + 1));
        }
        let explicit = Padding::Explicit {
            l: ctx.scalar_usize(at, "padding")?,
            r: ctx.scalar_usize(at + 1, "padding")?,
            t: ctx.scalar_usize(at + 2, "padding")?,
            b: ctx.scalar_usize(at + 3, "padding")?,
        };
        Ok((explicit, at + 4))
    }
}

/// Head/tail padding for an implicit scheme (SAME=1, VALID=2).
fn implicit_padding(
    in_size: usize,
    stride: usize,
    dil: usize,
    filter: usize,
    scheme: i32,
) -> (usize, usize) {
    if scheme != 1 {
        return (0, 0);
    }
    let eff = (filter.saturating_sub(1))
        .saturating_mul(dil)
        .saturating_add(1);
    let out = in_size.div_ceil(stride);
    let tmp = out
        .saturating_sub(1)
        .saturating_mul(stride)
        .saturating_add(eff);
    if tmp > in_size {
        let total = tmp - in_size;
        (total / 2, total - total / 2)
    } else {
        (0, 0)
    }
}

/// Output extent: (in + head + tail - effective_filter + stride) / stride.
fn out_size(
    in_size: usize,
    filter: usize,
    stride: usize,
    dil: usize,
    head: usize,
    tail: usize,
) -> Option<usize> {
    let eff = filter.checked_sub(1)?.checked_mul(dil)?.checked_add(1)?;
    let padded = in_size.checked_add(head)?.checked_add(tail)?;
    if padded < eff {
        return None;
    }
    Some((padded - eff) / stride + 1)
}

impl Geometry {
    pub(crate) fn resolve(
        ctx: &OpCtx<'_>,
        padding: Padding,
        strides: (usize, usize),
        dil: (usize, usize),
        in_hw: (usize, usize),
        filter_hw: (usize, usize),
    ) -> KResult<(Geometry, usize, usize)> {
        let (stride_w, stride_h) = strides;
        let (dil_w, dil_h) = dil;
        let (h, w) = in_hw;
        let (fh, fw) = filter_hw;
        if stride_w == 0 || stride_h == 0 || dil_w == 0 || dil_h == 0 {
            return Err(ctx.err("strides and dilation must be > 0"));
        }
        let (pad_l, pad_r, pad_t, pad_b) = match padding {
            Padding::Implicit(s) => {
                let (l, r) = implicit_padding(w, stride_w, dil_w, fw, s);
                let (t, b) = implicit_padding(h, stride_h, dil_h, fh, s);
                (l, r, t, b)
            }
            Padding::Explicit { l, r, t, b } => (l, r, t, b),
        };
        let g = Geometry {
            pad_l,
            pad_r,
            pad_t,
            pad_b,
            stride_w,
            stride_h,
            dil_w,
            dil_h,
        };
        let oh = out_size(h, fh, stride_h, dil_h, pad_t, pad_b)
            .ok_or_else(|| ctx.err("filter larger than the padded input height"))?;
        let ow = out_size(w, fw, stride_w, dil_w, pad_l, pad_r)
            .ok_or_else(|| ctx.err("filter larger than the padded input width"))?;
        Ok((g, oh, ow))
    }

    /// The output columns (of `ow`) whose whole window of `fw` taps lies inside an input of
    /// width `w`.
    pub(crate) fn interior_cols(&self, w: usize, fw: usize, ow: usize) -> std::ops::Range<usize> {
        let lo = self.pad_l.div_ceil(self.stride_w).min(ow);
        let span = fw.saturating_sub(1) * self.dil_w;
        let hi = if w + self.pad_l > span {
            ((w + self.pad_l - span - 1) / self.stride_w + 1).clamp(lo, ow)
        } else {
            lo
        };
        lo..hi
    }

    /// Input row for output row `oy` and filter row `ky`, if inside the input.
    #[inline]
    pub(crate) fn in_y(&self, oy: usize, ky: usize, h: usize) -> Option<usize> {
        (oy * self.stride_h + ky * self.dil_h)
            .checked_sub(self.pad_t)
            .filter(|&y| y < h)
    }

    /// Input column for output column `ox` and filter column `kx`, if inside the input.
    #[inline]
    pub(crate) fn in_x(&self, ox: usize, kx: usize, w: usize) -> Option<usize> {
        (ox * self.stride_w + kx * self.dil_w)
            .checked_sub(self.pad_l)
            .filter(|&x| x < w)
    }
}

/// Parsed CONV_2D / DEPTHWISE_CONV_2D arguments.
pub(super) struct ConvArgs {
    padding: Padding,
    strides: (usize, usize),
    pub(super) multiplier: usize,
    pub(super) act: usize,
    pub(super) nchw: bool,
    dil: (usize, usize),
}

fn parse_conv_args(ctx: &OpCtx<'_>, depthwise: bool) -> KResult<ConvArgs> {
    let n = ctx.n_inputs();
    let extra = usize::from(depthwise);
    let implicit = n == 7 + extra
        || n == 8 + extra
        || (n == 10 + extra && ctx.ty(7 + extra)? == OperandType::Bool);
    let (padding, first) = Padding::parse(ctx, 3, implicit)?;
    let strides = (
        ctx.scalar_pos(first, "stride_w")?,
        ctx.scalar_pos(first + 1, "stride_h")?,
    );
    let multiplier = if depthwise {
        ctx.scalar_pos(first + 2, "depth_multiplier")?
    } else {
        1
    };
    let act = first + 2 + extra;
    let nchw = ctx.opt_bool(act + 1, false)?;
    let dil = if ctx.has(act + 2) {
        (
            ctx.scalar_pos(act + 2, "dilation_w")?,
            ctx.scalar_pos(act + 3, "dilation_h")?,
        )
    } else {
        (1, 1)
    };
    Ok(ConvArgs {
        padding,
        strides,
        multiplier,
        act,
        nchw,
        dil,
    })
}

/// Quantization of the filter: zero point and per-output-channel scales.
pub(crate) fn filter_quant(ctx: &OpCtx<'_>, out_c: usize) -> KResult<(i32, Vec<f32>)> {
    let f = ctx.operand(1)?;
    match &f.channel_quant {
        Some(cq) => {
            if cq.scales.len() != out_c {
                return Err(ctx.err(format!(
                    "{} per-channel filter scales for an output depth of {out_c}",
                    cq.scales.len()
                )));
            }
            Ok((0, cq.scales.clone()))
        }
        None => Ok((f.zero_point, vec![f.scale; out_c])),
    }
}

/// FULLY_CONNECTED(input, weights, bias, act).
fn fully_connected(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let in_ty = ctx.ty(0)?;
    let wt = ctx.t(1)?;
    if wt.dims.len() != 2 {
        return Err(ctx.err(format!("weights must be 2-D, got {:?}", wt.dims)));
    }
    let units = wt.dims[0] as usize;
    let isz = wt.dims[1] as usize;
    let it = ctx.t(0)?;
    let total = count(ctx, &it.dims)?;
    if total != it.data.len() || count(ctx, &wt.dims)? != wt.data.len() {
        return Err(ctx.err("operand data does not match its dimensions"));
    }
    if isz == 0 || total % isz != 0 {
        return Err(ctx.err(format!(
            "input of {total} elements is not a multiple of input size {isz}"
        )));
    }
    let batch = total / isz;
    let od = vec![to_u32(ctx, batch)?, wt.dims[0]];
    count(ctx, &od)?;
    let bias_len = ctx.t(2)?.data.len();
    if bias_len != units {
        return Err(ctx.err(format!("bias has {bias_len} elements, expected {units}")));
    }
    if crate::tensor::is_float(in_ty) {
        let (_, x) = ctx.f32s(0)?;
        let (_, w) = ctx.f32s(1)?;
        let (_, bias) = ctx.f32s(2)?;
        let (lo, hi) = ctx.act_f32(3)?;
        let out = match float_route() {
            #[cfg(test)]
            FloatRoute::Reference => {
                let mut out = vec![0f32; batch * units];
                fconv_reference::fully_connected(x, w, bias, (lo, hi), &mut out);
                out.into()
            }
            FloatRoute::Fast(_) if batch <= GEMV_MAX_ROWS => {
                let mut out = crate::tensor::output_buffer::<f32>(batch * units);
                gemv_rows(batch, isz, units, x, w, &mut out).map_err(|e| ctx.err(e))?;
                bias_act(&mut out, bias, lo, hi);
                out.into()
            }
            FloatRoute::Fast(isa) => {
                let packed = packed_weights(ctx, w, units, isz)?;
                let shape = (batch, isz, units);
                let threads = fgemm::threads(batch, isz, units);
                let mut out = crate::tensor::output_buffer_uninit::<f32>(batch * units);
                let ep = Epilogue { bias, lo, hi };
                // SAFETY: the GEMM writes only initialized floats.
                let c = unsafe { out.uninit() };
                packed
                    .run(shape, x, ep, c, threads, isa)
                    .map_err(|e| ctx.err(e))?;
                packed.count_run();
                // SAFETY: the GEMM's run succeeded, so it wrote every element of `out`.
                unsafe { crate::tensor::assume_written(out) }
            }
        };
        return Ok(vec![Tensor::new(od, Data::F32(out))]);
    }
    Ok(vec![qconv::fully_connected(ctx, batch, isz, units, od)?])
}

/// What CONV_2D and DEPTHWISE_CONV_2D check and derive before their kernels.
pub(super) struct ConvSetup<'a> {
    pub(super) args: ConvArgs,
    input: &'a Tensor,
    /// Input extents (batch, height, width, depth), in NHWC order whatever the layout.
    pub(super) nhwc: [usize; 4],
    pub(super) filter_hw: (usize, usize),
    /// Output depth.
    pub(super) oc: usize,
    pub(super) g: Geometry,
    pub(super) out_hw: (usize, usize),
    /// Output dimensions, NHWC.
    pub(super) od: Vec<u32>,
}

impl<'a> ConvSetup<'a> {
    fn new(ctx: &OpCtx<'a>, depthwise: bool) -> KResult<Self> {
        let a = parse_conv_args(ctx, depthwise)?;
        let it = ctx.t(0)?;
        let ft = ctx.t(1)?;
        let (in_dims, nhwc) = nhwc_input(ctx, it, a.nchw)?;
        let [_, h, w, c] = nhwc;
        check4(ctx, &ft.dims, ft.data.len(), "filter")?;
        let [f0, fh, fw, f3] = [0, 1, 2, 3].map(|i| ft.dims[i] as usize);
        // CONV_2D filters are [oc, fh, fw, c]; DEPTHWISE_CONV_2D ones [1, fh, fw, c·multiplier].
        let oc_dim = if depthwise {
            let mult = a.multiplier;
            if f0 != 1 || c.checked_mul(mult) != Some(f3) {
                return Err(ctx.err(format!(
                    "filter {:?} does not match input depth {c} × multiplier {mult}",
                    ft.dims
                )));
            }
            ft.dims[3]
        } else {
            if f3 != c {
                return Err(ctx.err(format!("filter depth {f3} does not match input depth {c}")));
            }
            ft.dims[0]
        };
        let oc = oc_dim as usize;
        if ctx.t(2)?.data.len() != oc {
            return Err(ctx.err("bias length does not match the output depth"));
        }
        let (g, oh, ow) = Geometry::resolve(ctx, a.padding, a.strides, a.dil, (h, w), (fh, fw))?;
        let od = vec![in_dims[0], to_u32(ctx, oh)?, to_u32(ctx, ow)?, oc_dim];
        count(ctx, &od)?;
        Ok(ConvSetup {
            args: a,
            input: it,
            nhwc,
            filter_hw: (fh, fw),
            oc,
            g,
            out_hw: (oh, ow),
            od,
        })
    }
}

/// CONV_2D in all its argument forms.
fn conv2d(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let s = ConvSetup::new(ctx, false)?;
    let (a, oc) = (&s.args, s.oc);
    let ([n, _, _, c], (fh, fw), (oh, ow)) = (s.nhwc, s.filter_hw, s.out_hw);
    let k = fh * fw * c;
    let in_ty = ctx.ty(0)?;
    if crate::tensor::is_float(in_ty) {
        let x = nhwc_f32(ctx, s.input, a.nchw)?;
        let (win, w_rows) = FloatWindow::new(ctx, &s, &x)?;
        let len = n * oh * ow * oc;
        let out = match float_route() {
            #[cfg(test)]
            FloatRoute::Reference => {
                let mut out = vec![0f32; len];
                fconv_reference::conv2d(&win, w_rows, &mut out);
                out.into()
            }
            FloatRoute::Fast(isa) => {
                let packed = packed_weights(ctx, w_rows, oc, k)?;
                let conv = ConvF32 {
                    win,
                    w_rows,
                    packed: &packed,
                    oc,
                    isa,
                };
                let mut out = crate::tensor::output_buffer_uninit::<f32>(len);
                // SAFETY: the convolution writes only initialized floats.
                let gemm_ran = conv
                    .run(n, unsafe { out.uninit() })
                    .map_err(|e| ctx.err(e))?;
                if gemm_ran {
                    packed.count_run();
                }
                // SAFETY: `ConvF32::run` succeeded, so it wrote every element of `out`.
                unsafe { crate::tensor::assume_written(out) }
            }
        };
        return Ok(vec![finish_f32(s.od, out, a.nchw)]);
    }
    Ok(vec![qconv::conv2d(ctx, &s)?])
}

fn finish_f32(od: Vec<u32>, out: Buf<f32>, nchw: bool) -> Tensor {
    let (d, v) = to_layout(od, out, nchw);
    Tensor::new(d, Data::F32(v))
}

/// DEPTHWISE_CONV_2D in all its argument forms.
fn depthwise_conv2d(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let s = ConvSetup::new(ctx, true)?;
    let (a, oc) = (&s.args, s.oc);
    let (n, (oh, ow)) = (s.nhwc[0], s.out_hw);
    let mult = a.multiplier;
    let in_ty = ctx.ty(0)?;
    if crate::tensor::is_float(in_ty) {
        let x = nhwc_f32(ctx, s.input, a.nchw)?;
        let (win, f) = FloatWindow::new(ctx, &s, &x)?;
        let len = n * oh * ow * oc;
        let out = match float_route() {
            #[cfg(test)]
            FloatRoute::Reference => {
                let mut out = crate::tensor::output_buffer::<f32>(len);
                fconv_reference::depthwise(&win, f, mult, &mut out);
                out.into()
            }
            FloatRoute::Fast(isa) => {
                let (out, three) = DepthwiseF32 { win, f, mult, isa }.output(len);
                if three {
                    ran_float(|r| r.depthwise_3x3 += 1);
                }
                out
            }
        };
        return Ok(vec![finish_f32(s.od, out, a.nchw)]);
    }
    Ok(vec![qconv::depthwise_conv2d(ctx, &s)?])
}

/// Float weights packed for a GEMM.
enum PackedWeights<'a> {
    /// For [`fgemm`].
    F32(Cow<'a, [f32]>),
    /// As halves, for [`hgemm`] on its kernel (a relaxed model, see [`half_kernel`]).
    F16(Cow<'a, [u16]>, hgemm::Kernel),
}

impl PackedWeights<'_> {
    /// Counts one operation run on these weights (tests check which GEMM ran).
    fn count_run(&self) {
        ran_float(|r| r.packed_gemm += 1);
        if matches!(self, PackedWeights::F16(..)) {
            ran_float(|r| r.half_gemm += 1);
        }
    }

    /// The product of `a` ((m, k, n) = `shape`) by these weights into `c`, with `ep`, on up to
    /// `threads` threads; `isa` for float32 weights.
    fn run(
        &self,
        (m, k, n): (usize, usize, usize),
        a: &[f32],
        ep: Epilogue<'_>,
        c: &mut [MaybeUninit<f32>],
        threads: usize,
        isa: Isa,
    ) -> Result<(), String> {
        match self {
            PackedWeights::F32(packed) => Product {
                m,
                k,
                n,
                a,
                packed,
                ep,
            }
            .run(c, threads, isa),
            PackedWeights::F16(packed, kernel) => {
                let p = hgemm::Product {
                    m,
                    k,
                    n,
                    a,
                    packed,
                    ep,
                };
                p.run(c, threads, *kernel)
            }
        }
    }
}

/// The weights `w[n][k]` packed for the GEMM: for [`hgemm`] when the model is relaxed and the
/// CPU has float16 arithmetic ([`half_kernel`]), else for [`fgemm`]. The copy prepared once
/// per constant ([`pack_weights`], [`pack_weights_f16`]) when there is one, else packed now
/// (weights that are not constant).
fn packed_weights<'a>(
    ctx: &OpCtx<'a>,
    w: &[f32],
    n: usize,
    k: usize,
) -> KResult<PackedWeights<'a>> {
    if k == 0 || n == 0 {
        return Ok(PackedWeights::F32(Cow::Borrowed(&[])));
    }
    let mismatch = || ctx.err("weights do not match their dimensions");
    if let Some(kernel) = half_kernel(ctx.graph.relax_float32_to_float16) {
        return match ctx.weights_h {
            Some(p) if Some(p.len()) == hgemm::packed_len(n, k) => {
                Ok(PackedWeights::F16(Cow::Borrowed(p), kernel))
            }
            _ => {
                crate::ops::count_packing();
                hgemm::pack(n, k, w)
                    .map(|p| PackedWeights::F16(Cow::Owned(p), kernel))
                    .ok_or_else(mismatch)
            }
        };
    }
    match ctx.weights_t {
        Some(p) if Some(p.len()) == fgemm::packed_len(n, k) => {
            Ok(PackedWeights::F32(Cow::Borrowed(p)))
        }
        _ => {
            crate::ops::count_packing();
            fgemm::pack(n, k, w)
                .map(|p| PackedWeights::F32(Cow::Owned(p)))
                .ok_or_else(mismatch)
        }
    }
}

/// `v = clamp(v + bias[j], lo, hi)` for every row of `bias.len()` elements of `out`.
fn bias_act(out: &mut [f32], bias: &[f32], lo: f32, hi: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { bias_act_avx2(out, bias, lo, hi) };
            return;
        }
    }
    bias_act_generic(out, bias, lo, hi);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bias_act_avx2(out: &mut [f32], bias: &[f32], lo: f32, hi: f32) {
    bias_act_generic(out, bias, lo, hi);
}

#[inline(always)]
fn bias_act_generic(out: &mut [f32], bias: &[f32], lo: f32, hi: f32) {
    if bias.is_empty() {
        return;
    }
    if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
        for px in out.chunks_exact_mut(bias.len()) {
            for (v, &b) in px.iter_mut().zip(bias) {
                *v += b;
            }
        }
    } else {
        for px in out.chunks_exact_mut(bias.len()) {
            for (v, &b) in px.iter_mut().zip(bias) {
                *v = (*v + b).max(lo).min(hi);
            }
        }
    }
}

/// The float input in NHWC order, borrowed when it already is.
fn nhwc_f32<'a>(ctx: &OpCtx<'_>, t: &'a Tensor, nchw: bool) -> KResult<Cow<'a, [f32]>> {
    match &t.data {
        Data::F32(v) if nchw => Ok(Cow::Owned(nchw_to_nhwc(v, &t.dims).1)),
        Data::F32(v) => Ok(Cow::Borrowed(v)),
        _ => Err(ctx.err("input is not float32")),
    }
}

/// The float operands of a CONV_2D or DEPTHWISE_CONV_2D with its window geometry, NHWC.
struct FloatWindow<'a> {
    x: &'a [f32],
    bias: &'a [f32],
    lo: f32,
    hi: f32,
    g: Geometry,
    in_hw: (usize, usize),
    c: usize,
    out_hw: (usize, usize),
    filter_hw: (usize, usize),
}

impl<'a> FloatWindow<'a> {
    /// The window over `x` (the input in NHWC order) with the bias and the fused activation;
    /// returned with the filter (input 1), read in argument order before them.
    fn new<'c: 'a>(ctx: &OpCtx<'c>, s: &ConvSetup<'c>, x: &'a [f32]) -> KResult<(Self, &'c [f32])> {
        let (_, f) = ctx.f32s(1)?;
        let (_, bias) = ctx.f32s(2)?;
        let (lo, hi) = ctx.act_f32(s.args.act)?;
        let [_, h, w, c] = s.nhwc;
        let win = FloatWindow {
            x,
            bias,
            lo,
            hi,
            g: s.g,
            in_hw: (h, w),
            c,
            out_hw: s.out_hw,
            filter_hw: s.filter_hw,
        };
        Ok((win, f))
    }
}

/// Fewest output pixels per thread for which a float CONV_2D with a large filter is split by
/// pixels (each run packs the whole filter) rather than inside the GEMM.
const PIXEL_RUN: usize = 256;

/// Floats per im2col block (512 KiB: the block and its output stay in L2 while the GEMM runs).
const PATCH_FLOATS: usize = 128 * 1024;

#[cfg(test)]
thread_local! {
    /// Float CONV_2Ds run on this thread through [`Taps`].
    static GATHERED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Float CONV_2Ds run on this thread so far with their windows gathered ([`Taps`]).
#[cfg(test)]
pub(crate) fn gathered_convs() -> usize {
    GATHERED.get()
}

/// The rows of a CONV_2D's GEMM read where they lie ([`fgemm::Gather`]): output pixel `p0 + r`'s
/// row is its window's input pixels, tap by tap (the filter's `[fh][fw][c]` order), and a tap
/// in the padding is `zeros`.
struct Taps<'a> {
    win: &'a FloatWindow<'a>,
    p0: usize,
    zeros: &'a [f32],
}

impl fgemm::Gather for Taps<'_> {
    fn run_len(&self) -> usize {
        self.win.c
    }

    fn run(&self, r: usize, kk: usize) -> Option<&[f32]> {
        let win = self.win;
        let (g, c) = (&win.g, win.c);
        let (h, w) = win.in_hw;
        let (oh, ow) = win.out_hw;
        let fw = win.filter_hw.1;
        let tap = kk / c.max(1);
        let (ky, kx) = (tap / fw.max(1), tap % fw.max(1));
        let p = self.p0 + r;
        let per_image = (oh * ow).max(1);
        let (b, oy, ox) = (p / per_image, p % per_image / ow.max(1), p % ow.max(1));
        match (g.in_y(oy, ky, h), g.in_x(ox, kx, w)) {
            (Some(iy), Some(ix)) => {
                let at = ((b * h + iy) * w + ix) * c;
                win.x.get(at..at + c)
            }
            _ => Some(self.zeros),
        }
    }
}

/// A float CONV_2D on NHWC data: GEMM of (pixels × fh·fw·c) patches by the (oc × fh·fw·c)
/// filter, with bias and activation applied to each block while it is in cache.
struct ConvF32<'a> {
    win: FloatWindow<'a>,
    /// The filter as declared, `[oc][fh·fw·c]`.
    w_rows: &'a [f32],
    /// The filter packed for the GEMM.
    packed: &'a PackedWeights<'a>,
    oc: usize,
    isa: Isa,
}

impl ConvF32<'_> {
    /// Whether the input itself is the patch matrix (1×1 filter, stride 1, no padding).
    fn pointwise(&self) -> bool {
        let g = &self.win.g;
        self.win.filter_hw == (1, 1)
            && g.stride_h == 1
            && g.stride_w == 1
            && g.pad_l + g.pad_r + g.pad_t + g.pad_b == 0
    }

    /// Whether the GEMM gathers its rows from the input ([`Taps`]) rather than from im2col
    /// blocks: float32 weights, a window that is not the input itself, and taps (runs of c
    /// input channels) that the GEMM's reduction blocks tile exactly. A tap is a block of its
    /// own or more; shorter blocks would cost the tile a store and a load of its accumulators
    /// each: 3×3 convolutions over 128 and 256 channels ran 15% and 4% slower gathered than
    /// through im2col, over 512 3% faster.
    fn gathers(&self) -> bool {
        !self.pointwise()
            && fgemm::blocks_tile_runs_of(self.win.c)
            && matches!(self.packed, PackedWeights::F32(_))
    }

    /// Computes `out`; returns whether the packed GEMM did (not the dot products of a few
    /// pixels of a 1×1 convolution).
    /// On success every element of `out` has been written.
    fn run(&self, n: usize, out: &mut [MaybeUninit<f32>]) -> Result<bool, String> {
        let oc = self.oc;
        if oc == 0 || out.is_empty() {
            return Ok(false);
        }
        let (oh, ow) = self.win.out_hw;
        let (fh, fw) = self.win.filter_hw;
        let k = fh * fw * self.win.c;
        let m = n * oh * ow;
        if self.pointwise() && m <= GEMV_MAX_ROWS {
            let mut rows = vec![0f32; out.len()];
            gemv_rows(m, k, oc, self.win.x, self.w_rows, &mut rows)?;
            bias_act(&mut rows, self.win.bias, self.win.lo, self.win.hi);
            for (o, v) in out.iter_mut().zip(rows) {
                o.write(v);
            }
            return Ok(false);
        }
        #[cfg(test)]
        if self.gathers() {
            GATHERED.set(GATHERED.get() + 1);
        }
        let block = (PATCH_FLOATS / k.max(1)).max(256).min(m.max(1));
        let blocks = m.div_ceil(block);
        let flops = 2usize
            .saturating_mul(m)
            .saturating_mul(k)
            .saturating_mul(oc);
        // Runs of pixels split well when each thread gets enough pixels that packing the
        // filter again per run costs little (a small filter: few input channels, as in an
        // image's first layer; or many pixels): then im2col runs in parallel too.
        let small_filter = k.saturating_mul(oc) <= PATCH_FLOATS / 4;
        let min_rows = if small_filter { 64 } else { PIXEL_RUN };
        let threads = par::threads_for(flops, blocks.max(m / min_rows));
        if threads > 1 && (small_filter || m >= threads * PIXEL_RUN) {
            // Each thread takes runs of output pixels, one GEMM per block.
            let runs = par::RowRuns { align: 8, min_rows };
            par::for_row_runs(out, oc, threads, runs, |p0, part| {
                self.blocks(p0, part, block, false)
            })?;
        } else {
            // Few blocks (small spatial extent, deep channels): the GEMM itself is split.
            self.blocks(0, out, block, true)?;
        }
        Ok(true)
    }

    /// Computes output pixels `p0..` (all of `out`) in blocks of `block` pixels.
    fn blocks(
        &self,
        p0: usize,
        out: &mut [MaybeUninit<f32>],
        block: usize,
        split: bool,
    ) -> Result<(), String> {
        let (fh, fw) = self.win.filter_hw;
        let (c, oc) = (self.win.c, self.oc);
        let k = fh * fw * c;
        let pointwise = self.pointwise();
        let rows_total = out.len() / oc;
        // Deep inputs are gathered where they lie, not copied into im2col blocks.
        let gathered = match self.packed {
            PackedWeights::F32(packed) if self.gathers() => Some(packed),
            _ => None,
        };
        // From the arena when there is one: a new zeroed block every execution was a memset
        // of up to 512 KiB (im2col writes every element).
        let mut patch = if pointwise || gathered.is_some() {
            Vec::new()
        } else {
            crate::tensor::output_buffer::<f32>(block.min(rows_total) * k)
        };
        let zeros = if gathered.is_some() {
            vec![0f32; c]
        } else {
            Vec::new()
        };
        let ep = Epilogue {
            bias: self.win.bias,
            lo: self.win.lo,
            hi: self.win.hi,
        };
        for (bi, chunk) in out.chunks_mut(block * oc).enumerate() {
            let rows = chunk.len() / oc;
            let start = p0 + bi * block;
            let threads = if split {
                fgemm::threads(rows, k, oc)
            } else {
                1
            };
            if let Some(packed) = gathered {
                let taps = Taps {
                    win: &self.win,
                    p0: start,
                    zeros: &zeros,
                };
                let p = Product {
                    m: rows,
                    k,
                    n: oc,
                    a: &[],
                    packed,
                    ep,
                };
                p.run_gathered(&taps, chunk, threads, self.isa)?;
                continue;
            }
            let a: &[f32] = if pointwise {
                self.win
                    .x
                    .get(start * c..(start + rows) * c)
                    .ok_or("input smaller than its dimensions")?
            } else {
                let p = &mut patch[..rows * k];
                self.im2col(start, p);
                p
            };
            self.packed
                .run((rows, k, oc), a, ep, chunk, threads, self.isa)?;
        }
        crate::tensor::recycle(Data::F32(patch.into()));
        Ok(())
    }

    /// Fills `patch` (whole rows of fh·fw·c) with the windows of output pixels `p0..`.
    fn im2col(&self, p0: usize, patch: &mut [f32]) {
        let g = &self.win.g;
        let (h, w) = self.win.in_hw;
        let (oh, ow) = self.win.out_hw;
        let (fh, fw) = self.win.filter_hw;
        let c = self.win.c;
        let k = fh * fw * c;
        let run = fw * c;
        let mut walk = WindowWalk::new(g, (h, w), (fh, fw), c, (oh, ow), p0);
        let mut rows = patch.chunks_exact_mut(k.max(1));
        while rows.len() > 0 {
            if let Some((starts, n)) = walk.inside_run() {
                // Pixels whose every filter row is a whole run: no bounds to find, nothing to
                // clear; along the output row each window is stride_w·c values on.
                let n = n.min(rows.len());
                let step = g.stride_w * c;
                let x = self.win.x;
                let runs = rows.by_ref().take(n).enumerate();
                if (fh, run) == (3, 9) {
                    // A first layer's 3×3 window over 3 channels: fixed-size copies inline (a
                    // call per run was most of the copying, MobileNets' first layer).
                    for (j, dst) in runs {
                        for (d, &at) in dst.chunks_exact_mut(9).zip(&starts[..3]) {
                            d.copy_from_slice(&x[at + j * step..][..9]);
                        }
                    }
                } else {
                    for (j, dst) in runs {
                        for (d, &at) in dst.chunks_exact_mut(run.max(1)).zip(&starts[..fh]) {
                            copy_run(d, &x[at + j * step..][..run]);
                        }
                    }
                }
                walk.skip(n);
                continue;
            }
            let Some(dst) = rows.next() else { break };
            let (b, oy, ox) = (walk.b, walk.oy, walk.ox);
            walk.advance();
            for ky in 0..fh {
                let drow = &mut dst[ky * fw * c..(ky + 1) * fw * c];
                let Some(iy) = g.in_y(oy, ky, h) else {
                    drow.fill(0.0);
                    continue;
                };
                let src = &self.win.x[(b * h + iy) * w * c..][..w * c];
                if g.dil_w == 1 {
                    // Input column of tap kx is base + kx - pad_l: the valid taps are one run.
                    let base = ox * g.stride_w;
                    let lo = g.pad_l.saturating_sub(base).min(fw);
                    let hi = (w + g.pad_l).saturating_sub(base).clamp(lo, fw);
                    // Zeros only where the window leaves the input: `fill` on an empty run
                    // still called `memset` (1.4% of MobileNetV2 float32, two calls a row).
                    if lo > 0 {
                        drow[..lo * c].fill(0.0);
                    }
                    if hi > lo {
                        let ix0 = base + lo - g.pad_l;
                        copy_run(
                            &mut drow[lo * c..hi * c],
                            &src[ix0 * c..(ix0 + hi - lo) * c],
                        );
                    }
                    if hi < fw {
                        drow[hi * c..].fill(0.0);
                    }
                } else {
                    for (kx, d) in drow.chunks_exact_mut(c.max(1)).enumerate() {
                        match g.in_x(ox, kx, w) {
                            Some(ix) => copy_run(d, &src[ix * c..(ix + 1) * c]),
                            None => d.fill(0.0),
                        }
                    }
                }
            }
        }
    }
}

/// The most filter rows [`WindowWalk::inside`] covers.
const WALK_FH: usize = 7;

/// The output pixels of an im2col in order from one on: each one's image, row and column
/// (stepped, without the divisions that finding them per pixel took) and, where its window
/// lies inside the input, where each of its filter rows starts in the NHWC input.
pub(super) struct WindowWalk<'g> {
    g: &'g Geometry,
    /// Input height and width, channels, filter rows, output height and width.
    h: usize,
    w: usize,
    c: usize,
    fh: usize,
    oh: usize,
    ow: usize,
    /// Output columns whose window lies inside the input's columns (undilated), so that each
    /// filter row is one run of fw·c values.
    inside_x: std::ops::Range<usize>,
    /// Where each filter row's input row starts, for the current output row; None when one of
    /// them is outside the input (or the filter has more than [`WALK_FH`] rows).
    rows: Option<[usize; WALK_FH]>,
    pub(super) b: usize,
    pub(super) oy: usize,
    pub(super) ox: usize,
}

impl<'g> WindowWalk<'g> {
    /// From output pixel `p0` (counted over images, rows and columns) on.
    pub(super) fn new(
        g: &'g Geometry,
        (h, w): (usize, usize),
        (fh, fw): (usize, usize),
        c: usize,
        (oh, ow): (usize, usize),
        p0: usize,
    ) -> Self {
        let per_img = (oh * ow).max(1);
        let (b, q) = (p0 / per_img, p0 % per_img);
        let stride = g.stride_w.max(1);
        let inside_x = if g.dil_w == 1 && w + g.pad_l >= fw {
            g.pad_l.div_ceil(stride)..(w + g.pad_l - fw) / stride + 1
        } else {
            0..0
        };
        let mut walk = WindowWalk {
            g,
            h,
            w,
            c,
            fh,
            oh,
            ow,
            inside_x,
            rows: None,
            b,
            oy: q / ow.max(1),
            ox: q % ow.max(1),
        };
        walk.rows = walk.rows_of_output_row();
        walk
    }

    fn rows_of_output_row(&self) -> Option<[usize; WALK_FH]> {
        if self.fh > WALK_FH {
            return None;
        }
        let mut at = [0; WALK_FH];
        for (ky, a) in at.iter_mut().enumerate().take(self.fh) {
            *a = (self.b * self.h + self.g.in_y(self.oy, ky, self.h)?) * self.w * self.c;
        }
        Some(at)
    }

    /// Where the current pixel's filter rows start (the first fh entries), each a run of
    /// fw·c values inside the input; None when its window leaves the input.
    #[inline]
    pub(super) fn inside(&self) -> Option<[usize; WALK_FH]> {
        let rows = self.rows.filter(|_| self.inside_x.contains(&self.ox))?;
        let x0 = (self.ox * self.g.stride_w - self.g.pad_l) * self.c;
        Some(rows.map(|a| a + x0))
    }

    /// As [`WindowWalk::inside`], with how many pixels from the current one on, along its
    /// output row, are inside too (each one `stride_w·c` values on from the one before).
    #[inline]
    pub(super) fn inside_run(&self) -> Option<([usize; WALK_FH], usize)> {
        let starts = self.inside()?;
        Some((starts, self.inside_x.end.min(self.ow) - self.ox))
    }

    /// On by `n` (≥ 1) output pixels of the current output row (at most to its end).
    #[inline]
    pub(super) fn skip(&mut self, n: usize) {
        self.ox += n.max(1) - 1;
        self.advance();
    }

    /// On to the next output pixel.
    #[inline]
    pub(super) fn advance(&mut self) {
        self.ox += 1;
        if self.ox == self.ow {
            (self.ox, self.oy) = (0, self.oy + 1);
            if self.oy == self.oh {
                (self.oy, self.b) = (0, self.b + 1);
            }
            self.rows = self.rows_of_output_row();
        }
    }
}

/// `dst.copy_from_slice(src)` (same lengths), with runs of up to 16 floats copied in place
/// rather than by a call to `memcpy`: a first layer over 3 channels copies 9 floats per filter
/// row, and those calls were 2.4% of MobileNetV1 float32. The short runs are two overlapping
/// copies of a fixed length (a plain loop is turned back into a `memcpy` call by the
/// compiler: still 2.6% of MobileNetV2 float32 in `perf`; inlined into the im2col's loop it
/// became one again).
#[inline(never)]
fn copy_run(dst: &mut [f32], src: &[f32]) {
    /// `dst[..L]` and `dst[n - L..]` from the same places of `src` (n = dst.len() ≥ L).
    #[inline(always)]
    fn ends<const L: usize>(dst: &mut [f32], src: &[f32]) {
        let n = dst.len();
        dst[..L].copy_from_slice(&src[..L]);
        dst[n - L..].copy_from_slice(&src[n - L..n]);
    }
    match dst.len() {
        0 => {}
        n @ 1..=3 => {
            // Elements 0, n/2 and n-1 cover every element of a run of up to three.
            for i in [0, n / 2, n - 1] {
                dst[i] = src[i];
            }
        }
        4..=7 => ends::<4>(dst, src),
        8..=16 => ends::<8>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// A float DEPTHWISE_CONV_2D on NHWC data, vectorized over channels.
struct DepthwiseF32<'a> {
    win: FloatWindow<'a>,
    /// The filter, `[fh][fw][c·mult]`.
    f: &'a [f32],
    mult: usize,
    /// The kernel set (only x86-64 has more than the portable one).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    isa: Isa,
}

/// Channels accumulated in registers at once (two AVX-512 / four AVX registers).
const DW_BLOCK: usize = 32;
/// Channels per vector of the 3×3 kernel (one AVX register).
const DW3_LANES: usize = 8;
/// Fewest output rows per run of the 3×3 kernel when it is split over threads.
const DW3_MIN_ROWS: usize = 4;
/// Output pixels per tile of the 3×3 kernel.
const DW3_TILE: usize = 8;

/// The [`DW3_LANES`] floats of `v` from `at` on (zeros past its end, which callers never reach).
#[inline(always)]
fn lanes(v: &[f32], at: usize) -> [f32; DW3_LANES] {
    v.get(at..)
        .and_then(|t| t.first_chunk::<DW3_LANES>())
        .copied()
        .unwrap_or([0.0; DW3_LANES])
}

#[inline(always)]
fn madd<const FMA: bool>(x: f32, y: f32, acc: f32) -> f32 {
    if FMA { x.mul_add(y, acc) } else { acc + x * y }
}

impl DepthwiseF32<'_> {
    /// The output (`len` floats, every one written), and whether a 3×3 kernel computed it.
    /// The blocked kernel's output is not cleared first ([`crate::tensor::output_buffer_uninit`]):
    /// it writes every element. The others write through `&mut [f32]` into a cleared buffer.
    fn output(&self, len: usize) -> (Buf<f32>, bool) {
        #[cfg(target_arch = "x86_64")]
        if self.blocked() {
            let mut out = crate::tensor::output_buffer_uninit::<f32>(len);
            // The filter packed once for every run of rows (None: an empty output).
            if let Some(shape) = self.shape_3x3() {
                // SAFETY: the 3×3 kernels write only initialized floats.
                let out = unsafe { out.uninit() };
                let row_len = self.win.out_hw.1 * self.win.c;
                let rows = out.len().checked_div(row_len).unwrap_or(0);
                let parts = self.channel_parts(rows, shape.blocks);
                if parts > 1 {
                    let o = par::SendPtr(out.as_mut_ptr().cast());
                    par::for_each_part(parts, |p| {
                        let blocks = p * shape.blocks / parts..(p + 1) * shape.blocks / parts;
                        // SAFETY: as below, at stride 1 (`channel_parts`); `out` holds `rows`
                        // rows (of ow·c floats, `rows` computed from its length) and outlives
                        // every part, each writing only its own blocks of channels.
                        unsafe { self.rows_blocked(&shape, 0..rows, o.ptr(), blocks) }
                    });
                } else {
                    self.split(out, |r0, part| {
                        // SAFETY: `blocked` checked AVX2 and FMA (Isa::detect), the 3×3 shape
                        // and the operands' lengths; `shape` is this operation's.
                        unsafe { self.rows_3x3_avx2_fma(&shape, r0, part) }
                    });
                }
            }
            // SAFETY: the runs cover `out` (empty when there is no shape) and the 3×3 kernels
            // write every element of their run (a panic never gets here).
            return (unsafe { crate::tensor::assume_written(out) }, true);
        }
        let mut out = crate::tensor::output_buffer::<f32>(len);
        let three = self.is_3x3();
        self.split(&mut out, |r0, part| {
            if three {
                self.rows_3x3(r0, part);
            } else {
                self.rows(r0, part);
            }
        });
        (out.into(), three)
    }

    /// Whether the x86-64 blocked kernel (`dw3x3`) computes this operation: AVX2 and FMA, a
    /// 3×3 operation, and operands as long as their shapes say.
    #[cfg(target_arch = "x86_64")]
    fn blocked(&self) -> bool {
        let c = self.win.c;
        self.isa == Isa::Avx2Fma
            && self.is_3x3()
            && self.f.len() >= 9 * c
            && self.win.bias.len() >= c
    }

    /// Parts by channels to split the stride-1 3×3 kernel's `rows` output rows of `blocks`
    /// blocks of channels into, where a split by rows ([`Self::split`], runs of at least
    /// [`DW3_MIN_ROWS`]) would leave the whole layer to one thread (the 7×7 layers); 1 where it
    /// would not. By rows, that thread read half its input from the other core: the 1×1
    /// convolution before such a layer has more channels than rows, and splits by columns.
    /// By channels, each part reads and writes only the channels the same thread wrote
    /// (`par`'s shares match the convolution's parts), and no input row is copied twice.
    /// Several parts per thread, as `par::for_row_runs` cuts rows, so that a thread left
    /// waiting for a descheduled one takes some of its parts; of 2 blocks at least.
    #[cfg(target_arch = "x86_64")]
    fn channel_parts(&self, rows: usize, blocks: usize) -> usize {
        if self.win.g.stride_w != 1 {
            return 1;
        }
        let threads =
            par::threads_for(self.work(rows * self.win.out_hw.1 * self.win.c), blocks / 2);
        if threads > 1 && rows < threads * DW3_MIN_ROWS {
            (threads * par::TILES_PER_THREAD).min(blocks / 2)
        } else {
            1
        }
    }

    /// The flop-equivalents of computing `len` outputs ([`par::threads_for`]'s unit): the
    /// depthwise kernels run at about a third of the GEMM's rate.
    fn work(&self, len: usize) -> usize {
        let (fh, fw) = self.win.filter_hw;
        len.saturating_mul(6 * fh * fw)
    }

    /// Runs `kernel(first_row, rows)` over the output rows of `out`, split over threads.
    fn split<T: Send>(&self, out: &mut [T], kernel: impl Fn(usize, &mut [T]) + Sync) {
        let oc = self.win.c * self.mult;
        let (_, ow) = self.win.out_hw;
        let row_len = ow * oc;
        if row_len == 0 || out.is_empty() {
            return;
        }
        let rows = out.len() / row_len;
        let flops = self.work(out.len());
        // A run of the 3×3 kernel copies the input rows it reads (two more than its output
        // rows at stride 1): runs of at least DW3_MIN_ROWS rows, and a second thread only when
        // each gets that many (7×7×1024 split in runs of one row took longer on two threads
        // than on one).
        let (units, runs) = if self.is_3x3() {
            let runs = par::RowRuns {
                align: 1,
                min_rows: DW3_MIN_ROWS,
            };
            (rows / DW3_MIN_ROWS, runs)
        } else {
            (rows, par::RowRuns::default())
        };
        let threads = par::threads_for(flops, units);
        let _ = par::for_row_runs(out, row_len, threads, runs, |r0, part| {
            kernel(r0, part);
            Ok::<(), ()>(())
        });
    }

    /// Whether the 3×3 kernel runs this operation: a 3×3 filter, multiplier 1, stride 1 or 2
    /// both ways, no dilation.
    fn is_3x3(&self) -> bool {
        let g = &self.win.g;
        self.mult == 1
            && self.win.filter_hw == (3, 3)
            && (g.dil_w, g.dil_h) == (1, 1)
            && g.stride_w == g.stride_h
            && g.stride_w <= 2
    }

    /// Output rows `r0..` of a 3×3 depthwise convolution ([`Self::is_3x3`]) with the portable
    /// kernel (x86-64 with AVX2 and FMA runs `dw3x3`'s instead, see [`Self::output`]).
    fn rows_3x3(&self, r0: usize, out: &mut [f32]) {
        let c = self.win.c;
        if self.f.len() < 9 * c || self.win.bias.len() < c {
            // Operands shorter than their shapes say: the generic kernel reports nothing either.
            return self.rows(r0, out);
        }
        #[cfg(target_arch = "aarch64")]
        self.rows_3x3_generic::<true>(r0, out);
        #[cfg(not(target_arch = "aarch64"))]
        self.rows_3x3_generic::<false>(r0, out);
    }

    /// The 3×3 kernel: the three input rows of an output row (a row of zeros above and below the
    /// input), border pixels through [`Self::pixel`], interior pixels in tiles of [`DW3_TILE`]:
    /// per tile and vector of [`DW3_LANES`] channels, the nine filter vectors and the bias are
    /// loaded once, then each pixel is nine multiply-adds and one clamped store.
    #[inline(always)]
    fn rows_3x3_generic<const FMA: bool>(&self, r0: usize, out: &mut [f32]) {
        let (g, x, f, bias) = (&self.win.g, self.win.x, self.f, self.win.bias);
        let (h, w) = self.win.in_hw;
        let (oh, ow) = self.win.out_hw;
        let (c, s) = (self.win.c, g.stride_w);
        let (lo, hi) = (self.win.lo, self.win.hi);
        let row_len = w * c;
        let zeros = vec![0f32; row_len];
        let interior = g.interior_cols(w, 3, ow);
        let mut taps: Vec<(usize, usize)> = Vec::with_capacity(9);
        for (ri, orow) in out.chunks_exact_mut(ow * c).enumerate() {
            let (b, oy) = ((r0 + ri) / oh, (r0 + ri) % oh);
            let rows: [&[f32]; 3] = std::array::from_fn(|ky| {
                g.in_y(oy, ky, h)
                    .and_then(|iy| x.get((b * h + iy) * row_len..(b * h + iy + 1) * row_len))
                    .unwrap_or(&zeros)
            });
            for ox in (0..interior.start).chain(interior.end..ow) {
                taps.clear();
                for ky in 0..3 {
                    for kx in 0..3 {
                        if let (Some(iy), Some(ix)) = (g.in_y(oy, ky, h), g.in_x(ox, kx, w)) {
                            taps.push((((b * h + iy) * w + ix) * c, (ky * 3 + kx) * c));
                        }
                    }
                }
                self.pixel::<FMA>(&mut orow[ox * c..(ox + 1) * c], &taps, 0);
            }
            for t0 in interior.clone().step_by(DW3_TILE) {
                let tile = t0..(t0 + DW3_TILE).min(interior.end);
                let mut c0 = 0;
                while c0 + DW3_LANES <= c {
                    let fk: [[f32; DW3_LANES]; 9] = std::array::from_fn(|t| lanes(f, t * c + c0));
                    let bv = lanes(bias, c0);
                    for ox in tile.clone() {
                        // Interior: the window's first column ox·s − pad_l is inside the input.
                        let base = (ox * s - g.pad_l) * c + c0;
                        let mut acc = bv;
                        for (ky, row) in rows.iter().enumerate() {
                            for kx in 0..3 {
                                let xv = lanes(row, base + kx * c);
                                let fv = &fk[ky * 3 + kx];
                                for i in 0..DW3_LANES {
                                    acc[i] = madd::<FMA>(xv[i], fv[i], acc[i]);
                                }
                            }
                        }
                        if let Some(o) = orow.get_mut(ox * c + c0..ox * c + c0 + DW3_LANES) {
                            for (o, v) in o.iter_mut().zip(acc) {
                                *o = v.max(lo).min(hi);
                            }
                        }
                    }
                    c0 += DW3_LANES;
                }
                for ox in tile.clone() {
                    let base = (ox * s - g.pad_l) * c;
                    for ch in c0..c {
                        let mut acc = bias[ch];
                        for (ky, row) in rows.iter().enumerate() {
                            for kx in 0..3 {
                                let xv = row.get(base + kx * c + ch).copied().unwrap_or(0.0);
                                acc = madd::<FMA>(xv, f[(ky * 3 + kx) * c + ch], acc);
                            }
                        }
                        orow[ox * c + ch] = acc.max(lo).min(hi);
                    }
                }
            }
        }
    }

    /// Output rows `r0..` (row = one (batch, y) pair), picking the widest SIMD available.
    fn rows(&self, r0: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.isa == Isa::Avx2Fma {
                // SAFETY: the CPU supports AVX2 and FMA (Isa::detect checked it).
                unsafe { self.rows_avx2_fma(r0, out) };
                return;
            }
        }
        // aarch64 always has NEON with fused multiply-add: the generic code with `mul_add`
        // compiles to vector `fmla` there.
        #[cfg(target_arch = "aarch64")]
        self.rows_generic::<true>(r0, out);
        #[cfg(not(target_arch = "aarch64"))]
        self.rows_generic::<false>(r0, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_avx2_fma(&self, r0: usize, out: &mut [f32]) {
        self.rows_generic::<true>(r0, out);
    }

    #[inline(always)]
    fn rows_generic<const FMA: bool>(&self, r0: usize, out: &mut [f32]) {
        let g = &self.win.g;
        let (h, w) = self.win.in_hw;
        let (oh, ow) = self.win.out_hw;
        let (fh, fw) = self.win.filter_hw;
        let (c, oc) = (self.win.c, self.win.c * self.mult);
        // Output columns whose whole window lies inside the input horizontally.
        let interior = g.interior_cols(w, fw, ow);
        // Interior taps of the current row: (input offset at input column 0, filter offset).
        let mut row_taps: Vec<(usize, usize)> = Vec::with_capacity(fh * fw);
        // Taps of one border pixel: (input offset, filter offset).
        let mut taps: Vec<(usize, usize)> = Vec::with_capacity(fh * fw);
        for (ri, orow) in out.chunks_exact_mut(ow * oc).enumerate() {
            let r = r0 + ri;
            let (b, oy) = (r / oh, r % oh);
            row_taps.clear();
            for ky in 0..fh {
                if let Some(iy) = g.in_y(oy, ky, h) {
                    for kx in 0..fw {
                        row_taps.push((((b * h + iy) * w + kx * g.dil_w) * c, (ky * fw + kx) * oc));
                    }
                }
            }
            for (ox, acc) in orow.chunks_exact_mut(oc).enumerate() {
                if interior.contains(&ox) {
                    let shift = (ox * g.stride_w - g.pad_l) * c;
                    self.pixel::<FMA>(acc, &row_taps, shift);
                } else {
                    taps.clear();
                    for ky in 0..fh {
                        let Some(iy) = g.in_y(oy, ky, h) else {
                            continue;
                        };
                        for kx in 0..fw {
                            if let Some(ix) = g.in_x(ox, kx, w) {
                                taps.push((((b * h + iy) * w + ix) * c, (ky * fw + kx) * oc));
                            }
                        }
                    }
                    self.pixel::<FMA>(acc, &taps, 0);
                }
            }
        }
    }

    /// One output pixel: `acc = clamp(bias + Σ taps x[xo + shift ..] * f[fo ..])`.
    #[inline(always)]
    fn pixel<const FMA: bool>(&self, acc: &mut [f32], taps: &[(usize, usize)], shift: usize) {
        let (x, f, bias) = (self.win.x, self.f, self.win.bias);
        let (lo, hi) = (self.win.lo, self.win.hi);
        let (c, mult) = (self.win.c, self.mult);
        let oc = c * mult;
        if mult == 1 {
            let mut c0 = 0;
            while c0 + DW_BLOCK <= c {
                let mut a = [0f32; DW_BLOCK];
                if let Some(bv) = bias[c0..].first_chunk::<DW_BLOCK>() {
                    a = *bv;
                }
                for &(xo, fo) in taps {
                    if let (Some(xs), Some(fs)) = (
                        x[xo + shift + c0..].first_chunk::<DW_BLOCK>(),
                        f[fo + c0..].first_chunk::<DW_BLOCK>(),
                    ) {
                        for i in 0..DW_BLOCK {
                            a[i] = madd::<FMA>(xs[i], fs[i], a[i]);
                        }
                    }
                }
                for (o, v) in acc[c0..c0 + DW_BLOCK].iter_mut().zip(a) {
                    *o = v.max(lo).min(hi);
                }
                c0 += DW_BLOCK;
            }
            if c0 < c {
                let acc = &mut acc[c0..];
                acc.copy_from_slice(&bias[c0..oc]);
                for &(xo, fo) in taps {
                    let xo = xo + shift;
                    for ((a, &xv), &fv) in acc
                        .iter_mut()
                        .zip(&x[xo + c0..xo + c])
                        .zip(&f[fo + c0..fo + c])
                    {
                        *a = madd::<FMA>(xv, fv, *a);
                    }
                }
                for v in acc.iter_mut() {
                    *v = v.max(lo).min(hi);
                }
            }
        } else {
            acc.copy_from_slice(&bias[..oc]);
            for &(xo, fo) in taps {
                let xo = xo + shift;
                let fs = &f[fo..fo + oc];
                for ((ar, fr), &xv) in acc
                    .chunks_exact_mut(mult)
                    .zip(fs.chunks_exact(mult))
                    .zip(&x[xo..xo + c])
                {
                    for (a, &fv) in ar.iter_mut().zip(fr) {
                        *a = madd::<FMA>(xv, fv, *a);
                    }
                }
            }
            for v in acc.iter_mut() {
                *v = v.max(lo).min(hi);
            }
        }
    }
}

#[cfg(test)]
mod float_kernel_tests {
    use super::*;
    use crate::test_support::assert_close;

    /// Xorshift state step.
    fn next(seed: &mut u32) -> u32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 17;
        *seed ^= *seed << 5;
        *seed
    }

    /// Floats in [-1, 1).
    fn floats(seed: &mut u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (next(seed) >> 8) as f32 / (1u32 << 23) as f32 - 1.0)
            .collect()
    }

    /// The depthwise convolution written out as its definition: for every output element
    /// (pixel, input channel, multiplier), the bias plus the sum over in-bounds taps (in
    /// f64), clamped.
    fn direct(w: &FloatWindow<'_>, f: &[f32], n: usize, mult: usize) -> Vec<f32> {
        let (h, wd) = w.in_hw;
        let (oh, ow) = w.out_hw;
        let (fh, fw) = w.filter_hw;
        let (c, g) = (w.c, &w.g);
        let oc = c * mult;
        let mut out = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for o in 0..oc {
                        let mut acc = f64::from(w.bias[o]);
                        for ky in 0..fh {
                            for kx in 0..fw {
                                let iy = (oy * g.stride_h + ky * g.dil_h).checked_sub(g.pad_t);
                                let ix = (ox * g.stride_w + kx * g.dil_w).checked_sub(g.pad_l);
                                let (Some(iy), Some(ix)) = (iy, ix) else {
                                    continue;
                                };
                                if iy >= h || ix >= wd {
                                    continue;
                                }
                                let xv = w.x[((b * h + iy) * wd + ix) * c + o / mult];
                                let fv = f[(ky * fw + kx) * oc + o];
                                acc += f64::from(xv) * f64::from(fv);
                            }
                        }
                        out.push((acc as f32).max(w.lo).min(w.hi));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn depthwise_f32_portable_and_fused_paths_match_the_definition_on_random_shapes() {
        let mut seed = 0x1234_5678u32;
        let mut data_seed = 99u32;
        let mut ran = 0;
        for case in 0..80 {
            let mut pick = |n: usize| next(&mut seed) as usize % n;
            let (fh, fw) = (1 + pick(5), 1 + pick(5));
            let mult = [1, 1, 1, 2, 3][pick(5)];
            // Channel counts below, at and past the 32-channel register block, with remainders.
            let c = [1, 3, 8, 32, 40, 64, 72][pick(7)];
            let n = 1 + pick(2);
            let (h, w) = (1 + pick(16), 1 + pick(16));
            let g = Geometry {
                pad_l: pick(fw),
                pad_r: pick(fw),
                pad_t: pick(fh),
                pad_b: pick(fh),
                stride_w: 1 + pick(3),
                stride_h: 1 + pick(3),
                dil_w: 1 + pick(4) / 3,
                dil_h: 1 + pick(4) / 3,
            };
            let (eh, ew) = ((fh - 1) * g.dil_h + 1, (fw - 1) * g.dil_w + 1);
            let (ph, pw) = (h + g.pad_t + g.pad_b, w + g.pad_l + g.pad_r);
            if ph < eh || pw < ew {
                continue;
            }
            let (oh, ow) = ((ph - eh) / g.stride_h + 1, (pw - ew) / g.stride_w + 1);
            let oc = c * mult;
            let x = floats(&mut data_seed, n * h * w * c);
            let f = floats(&mut data_seed, fh * fw * oc);
            let bias = floats(&mut data_seed, oc);
            // No activation, or a clamp like RELU6's (scaled to these values).
            let (lo, hi) = if case % 3 == 0 {
                (f32::NEG_INFINITY, f32::INFINITY)
            } else {
                (0.0, 0.75)
            };
            let win = FloatWindow {
                x: &x,
                bias: &bias,
                lo,
                hi,
                g,
                in_hw: (h, w),
                c,
                out_hw: (oh, ow),
                filter_hw: (fh, fw),
            };
            let want = direct(&win, &f, n, mult);
            let dw = DepthwiseF32 {
                win,
                f: &f,
                mult,
                isa: Isa::detect(),
            };
            let mut portable = vec![f32::NAN; want.len()];
            dw.rows_generic::<false>(0, &mut portable);
            let mut fused = vec![f32::NAN; want.len()];
            dw.rows_generic::<true>(0, &mut fused);
            let picked = dw.output(want.len()).0.into_vec();
            let what = format!("{fh}×{fw} ×{mult} c {c} n {n} {h}×{w} {g:?}");
            for (name, got) in [("portable", &portable), ("fused", &fused), ("run", &picked)] {
                assert_close(got, &want, &format!("{what} {name}"));
            }
            ran += 1;
        }
        assert!(ran > 50, "{ran} cases ran");
    }

    /// A 3×3 stride-1 depthwise operation (this CPU's kernels) over one `h`×`w`×`c` image
    /// `x`, padded (left, right, top, bottom) as `pad` says, with no activation.
    fn dw_3x3<'a>(
        x: &'a [f32],
        bias: &'a [f32],
        f: &'a [f32],
        (h, w, c): (usize, usize, usize),
        pad: [usize; 4],
    ) -> DepthwiseF32<'a> {
        let [pad_l, pad_r, pad_t, pad_b] = pad;
        let g = Geometry {
            pad_l,
            pad_r,
            pad_t,
            pad_b,
            stride_w: 1,
            stride_h: 1,
            dil_w: 1,
            dil_h: 1,
        };
        let win = FloatWindow {
            x,
            bias,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            g,
            in_hw: (h, w),
            c,
            out_hw: (h + pad_t + pad_b - 2, w + pad_l + pad_r - 2),
            filter_hw: (3, 3),
        };
        DepthwiseF32 {
            win,
            f,
            mult: 1,
            isa: Isa::detect(),
        }
    }

    /// The 3×3 kernel's output for input `x` (see [`dw_3x3`]), checked against the
    /// definition.
    fn check_3x3_stride_1(x: &[f32], hwc: (usize, usize, usize), pad: [usize; 4]) {
        let mut seed = 7u32;
        let f = floats(&mut seed, 9 * hwc.2);
        let bias = floats(&mut seed, hwc.2);
        let dw = dw_3x3(x, &bias, &f, hwc, pad);
        let want = direct(&dw.win, &f, 1, 1);
        let (got, three) = dw.output(want.len());
        assert!(three, "the 3×3 kernel ran");
        assert_close(&got.into_vec(), &want, &format!("{pad:?}"));
    }

    /// The 3×3 kernel keeps each thread's copied input rows from one run of output rows to
    /// the next; an operation of the same shape must not read the rows of the last one, nor
    /// one whose input lies one column further right read the last one's data as padding.
    /// Big enough (28×28×64, 2.7 Mflop-equivalents) to be split across threads.
    #[test]
    fn the_3x3_kernel_reads_only_its_own_operations_rows() {
        let (h, w, c) = (28, 28, 64);
        let mut seed = 11u32;
        let first = floats(&mut seed, h * w * c);
        let second = floats(&mut seed, h * w * c);
        check_3x3_stride_1(&first, (h, w, c), [1, 1, 1, 1]);
        check_3x3_stride_1(&second, (h, w, c), [1, 1, 1, 1]);
        // Two operations of one shape in turn on this thread, the second's run starting
        // where the first's ended: the rows it reads first are the rows the first one held.
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() == Isa::Avx2Fma {
            let f = floats(&mut seed, 9 * c);
            let bias = floats(&mut seed, c);
            let row = w * c;
            let mut outs = [&first, &second].map(|x| {
                let dw = dw_3x3(x, &bias, &f, (h, w, c), [1, 1, 1, 1]);
                let shape = dw.shape_3x3().unwrap();
                let out = vec![MaybeUninit::new(f32::NAN); h * row];
                (dw, shape, out)
            });
            for (r0, r1, which) in [(0, h / 2, 0), (h / 2, h, 1), (0, h / 2, 1), (h / 2, h, 0)] {
                let (dw, shape, out) = &mut outs[which];
                // SAFETY: AVX2 and FMA detected; a 3×3 stride-1 operation with its filter and
                // bias as long as its shape says, and `shape` its own.
                unsafe { dw.rows_3x3_avx2_fma(shape, r0, &mut out[r0 * row..r1 * row]) };
            }
            for (which, (dw, _, out)) in outs.iter().enumerate() {
                // SAFETY: every element was initialized (NAN, then the kernel's output).
                let got: Vec<f32> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
                assert_close(
                    &got,
                    &direct(&dw.win, &f, 1, 1),
                    &format!("operation {which}"),
                );
            }
        }
        // The same slots and columns per block, the input one column to the left: the column
        // the last operation's input ended in is now right padding.
        check_3x3_stride_1(&first, (h, w, c), [0, 2, 1, 1]);
        check_3x3_stride_1(&second, (h, w, c), [1, 1, 1, 1]);
    }

    /// The 7×7 layers' split by channels: a layer split by the executor (7×7×1020, 2.7 Mflop
    /// equivalents: 128 blocks, the last one of 4 channels), and parts of ranges of blocks
    /// run in turn on one thread, each range after another of as many blocks whose rows and
    /// lanes it must not read, all against the definition.
    #[test]
    fn the_3x3_kernel_split_by_channels_matches_the_definition() {
        let (h, w) = (7, 7);
        let mut seed = 5u32;
        for c in [1020, 60] {
            let x = floats(&mut seed, h * w * c);
            let bias = floats(&mut seed, c);
            let f = floats(&mut seed, 9 * c);
            let dw = dw_3x3(&x, &bias, &f, (h, w, c), [1, 1, 1, 1]);
            let want = direct(&dw.win, &f, 1, 1);
            let split = dw.output(want.len()).0.into_vec();
            assert_close(&split, &want, &format!("c {c} split"));
            #[cfg(target_arch = "x86_64")]
            if Isa::detect() == Isa::Avx2Fma {
                if c == 1020 {
                    assert!(dw.channel_parts(h, c.div_ceil(8)) > 1, "split by channels");
                }
                let shape = dw.shape_3x3().unwrap();
                let blocks = shape.blocks;
                let mut out = vec![f32::NAN; want.len()];
                // Three blocks each (the last range holds the short block), then a whole
                // number of blocks past every other range's end.
                for range in [0..3, blocks - 3..blocks, 2..5, 0..blocks] {
                    // SAFETY: AVX2 and FMA detected; a stride-1 3×3 operation with its operands
                    // as long as its shape says, `shape` its own; `out` holds its 7 rows.
                    unsafe { dw.rows_blocked(&shape, 0..h, out.as_mut_ptr(), range) };
                }
                assert_close(&out, &want, &format!("c {c} ranges"));
            }
        }
    }

    /// A first layer's shape (3 input channels, 3×3, stride 2, padding right and bottom), big
    /// enough (7 Mflop) to split across 2 threads by runs of pixels, against the convolution
    /// written out in f64.
    #[test]
    fn a_small_filter_conv_split_across_threads_matches_the_definition() {
        use crate::model::{OperandType as T, OperationType as O};
        use crate::test_support::{B, close, run_f32};
        crate::set_max_threads(2);
        let (h, w, c, oc) = (128usize, 128usize, 3usize, 32usize);
        let (oh, ow) = (64usize, 64usize);
        let mut seed = 7u32;
        let x = floats(&mut seed, h * w * c);
        let f = floats(&mut seed, oc * 9 * c);
        let bias = floats(&mut seed, oc);
        let mut b = B::new();
        let xi = b.input(T::TensorFloat32, &[1, 128, 128, 3]);
        let fi = b.f32c(&[32, 3, 3, 3], &f);
        let bi = b.f32c(&[32], &bias);
        // Explicit padding: left 0, right 1, top 0, bottom 1; strides 2, 2; RELU6.
        let args: Vec<u32> = [0, 1, 0, 1, 2, 2, 3].iter().map(|&v| b.int(v)).collect();
        let o = b.output(T::TensorFloat32, &[1, 64, 64, 32]);
        let ins: Vec<u32> = [xi, fi, bi].into_iter().chain(args).collect();
        b.op(O::Conv2d, &ins, &[o]);
        let (out, dims) = run_f32(b.g, &[&x]);
        assert_eq!(dims, [1, 64, 64, 32]);
        let mut want = Vec::with_capacity(oh * ow * oc);
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let mut acc = f64::from(bias[o]);
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (iy, ix) = (oy * 2 + ky, ox * 2 + kx);
                            if iy >= h || ix >= w {
                                continue;
                            }
                            for ci in 0..c {
                                let xv = x[(iy * w + ix) * c + ci];
                                let fv = f[((o * 3 + ky) * 3 + kx) * c + ci];
                                acc += f64::from(xv) * f64::from(fv);
                            }
                        }
                    }
                    want.push((acc as f32).clamp(0.0, 6.0));
                }
            }
        }
        close(&out, &want);
    }
}
