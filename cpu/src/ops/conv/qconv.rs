//! The fast 8-bit FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D: FULLY_CONNECTED and CONV_2D
//! through the quantized GEMM ([`super::qgemm`]; a 1×1 stride-1 unpadded CONV_2D reads the
//! input pixels as GEMM rows, others go through an i16 im2col per block of rows), the depthwise
//! convolution vectorised over channels. The scalar kernels of [`super::qconv_reference`] take
//! the operations whose reductions could overflow the i32 accumulators, and are the tests'
//! oracle.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use super::qconv_reference::{self as reference, QuantOperands, Window};
use super::{ConvSetup, filter_quant};
use crate::model::{Operand, OperandType};
use crate::ops::qgemm::{self, Epilogue, Isa, MAX_K, NR, QWeights};
use crate::ops::quant::Requant;
use crate::ops::{KResult, OpCtx, nchw_to_nhwc, q8_tensor, to_layout};
use crate::par;
use crate::tensor::{Buf, Data, Tensor};

/// Which kernels run an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The scalar reference kernels.
    Reference,
    /// The fast kernels with this instruction set.
    Fast(Isa),
}

#[cfg(test)]
thread_local! {
    static FORCED: std::cell::Cell<Option<Route>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    static FAST_RUNS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many operations the fast kernels have run on this thread.
#[cfg(test)]
pub(crate) fn fast_runs() -> usize {
    FAST_RUNS.with(std::cell::Cell::get)
}

/// Counts one operation run by the fast kernels (tests check that they did run).
fn ran_fast() {
    #[cfg(test)]
    FAST_RUNS.with(|c| c.set(c.get() + 1));
}

/// Runs `f` with the 8-bit kernels of this thread forced onto `route` (where the fast kernels
/// apply at all).
#[cfg(test)]
pub(crate) fn with_route<R>(route: Route, f: impl FnOnce() -> R) -> R {
    let before = FORCED.with(|c| c.replace(Some(route)));
    let r = f();
    FORCED.with(|c| c.set(before));
    r
}

/// The route of an operation the fast kernels can run when `fast_ok`.
fn route(fast_ok: bool) -> Route {
    if !fast_ok {
        return Route::Reference;
    }
    #[cfg(test)]
    if let Some(r) = FORCED.with(std::cell::Cell::get) {
        return r;
    }
    Route::Fast(Isa::detect())
}

/// Constant 8-bit weights of a FULLY_CONNECTED or CONV_2D (`decl`, value `t`: `[n][k]` or
/// `[n][fh][fw][c]`) packed for the quantized GEMM, or None when they are not 8-bit. A
/// FULLY_CONNECTED's (2-D) are packed as i8 where they fit (its batch is often one row: see
/// [`QWeights`]).
pub(crate) fn pack_q8_weights(decl: &Operand, t: &Tensor) -> Option<QWeights> {
    let n = *t.dims.first()? as usize;
    let narrow = t.dims.len() == 2;
    let len = t.data.len();
    if n == 0 || len % n != 0 {
        return None;
    }
    let zp = if decl.ty == OperandType::TensorQuant8SymmPerChannel {
        0
    } else {
        decl.zero_point
    };
    match &t.data {
        Data::U8(v) => QWeights::pack(n, len / n, narrow, |i| i32::from(v[i]) - zp),
        Data::I8(v) => QWeights::pack(n, len / n, narrow, |i| i32::from(v[i]) - zp),
        _ => None,
    }
}

/// The prepared weights when they fit `n` × `k`, else input 1 packed now (None when its values
/// exceed the kernel's bound).
fn weights<'a>(
    ctx: &OpCtx<'a>,
    n: usize,
    k: usize,
    owned: &'a mut Option<QWeights>,
) -> KResult<Option<&'a QWeights>> {
    if let Some(w) = ctx.qweights.filter(|w| w.n == n && w.k == k) {
        return Ok(Some(w));
    }
    crate::ops::count_packing();
    *owned = pack_q8_weights(ctx.operand(1)?, ctx.t(1)?);
    Ok(owned.as_ref().filter(|w| w.n == n && w.k == k))
}

/// Input 0's 8-bit values in NHWC order (borrowed unless reordered from NCHW).
enum Raw<'a> {
    U8(Cow<'a, [u8]>),
    I8(Cow<'a, [i8]>),
}

/// Input 0 and its zero point, read as centered i16 on demand.
struct Input<'a> {
    raw: Raw<'a>,
    zp: i16,
}

impl<'a> Input<'a> {
    /// Input 0 (NCHW reordered to NHWC). None when its zero point is outside the 8-bit types'
    /// range (validation keeps it inside).
    fn new(ctx: &OpCtx<'a>, nchw: bool) -> KResult<Option<Input<'a>>> {
        let zp = ctx.operand(0)?.zero_point;
        let Some(zp) = i16::try_from(zp).ok().filter(|z| (-128..=255).contains(z)) else {
            return Ok(None);
        };
        let t = ctx.t(0)?;
        let raw = match &t.data {
            Data::U8(v) if nchw => Raw::U8(Cow::Owned(nchw_to_nhwc(v, &t.dims).1)),
            Data::U8(v) => Raw::U8(Cow::Borrowed(v)),
            Data::I8(v) if nchw => Raw::I8(Cow::Owned(nchw_to_nhwc(v, &t.dims).1)),
            Data::I8(v) => Raw::I8(Cow::Borrowed(v)),
            _ => return Err(ctx.err("input is not 8-bit")),
        };
        Ok(Some(Input { raw, zp }))
    }

    fn len(&self) -> usize {
        self.bytes().len()
    }

    /// The values' bytes as stored (an i8 as its two's complement byte).
    fn bytes(&self) -> &[u8] {
        match &self.raw {
            Raw::U8(v) => v,
            Raw::I8(v) => crate::tensor::i8_bytes(v),
        }
    }

    fn signed(&self) -> bool {
        matches!(self.raw, Raw::I8(_))
    }

    /// Writes values `from..from + dst.len()` minus the zero point into `dst`.
    #[inline]
    fn center(&self, from: usize, dst: &mut [i16]) {
        let (zp, n) = (self.zp, dst.len());
        match &self.raw {
            Raw::U8(v) => {
                for (d, &s) in dst.iter_mut().zip(&v[from..from + n]) {
                    *d = i16::from(s) - zp;
                }
            }
            Raw::I8(v) => {
                for (d, &s) in dst.iter_mut().zip(&v[from..from + n]) {
                    *d = i16::from(s) - zp;
                }
            }
        }
    }
}

/// The reduction length padded as the GEMM packs it.
fn padded(k: usize) -> usize {
    k + k % 2
}

/// The 8-bit output tensor of `bytes` (i8 values stored as their bytes when `signed`).
fn bytes_tensor(signed: bool, od: Vec<u32>, bytes: Buf<u8>, nchw: bool) -> Tensor {
    let (d, v) = to_layout(od, bytes, nchw);
    if signed {
        Tensor::new(d, Data::I8(crate::tensor::bytes_buf_as(v)))
    } else {
        Tensor::new(d, Data::U8(v))
    }
}

/// What `cell` keeps when it `fits` this execution, else one made now by `make`: kept in
/// `cell` when there is one and it keeps nothing yet (one another execution kept meanwhile is
/// made from the same constants), used once otherwise (a kept one that does not fit this
/// execution's shapes or kernels stays).
fn kept_or_made<'a, T: Clone>(
    cell: Option<&'a OnceLock<T>>,
    fits: impl Fn(&T) -> bool,
    make: impl FnOnce() -> KResult<T>,
) -> KResult<Cow<'a, T>> {
    if let Some(kept) = cell.and_then(OnceLock::get).filter(|t| fits(t)) {
        return Ok(Cow::Borrowed(kept));
    }
    let made = make()?;
    match cell.map(|c| c.get_or_init(|| made.clone())) {
        Some(kept) if fits(kept) => Ok(Cow::Borrowed(kept)),
        _ => Ok(Cow::Owned(made)),
    }
}

/// The requantization and the bias of `n` output channels after reductions of `k` products,
/// activation at input `act`: the one the operation keeps when it may
/// ([`crate::ops::QuantCache`]), else made now.
fn epilogue<'a>(ctx: &OpCtx<'a>, n: usize, k: usize, act: usize) -> KResult<Cow<'a, Epilogue>> {
    let cell = ctx.kept.map(|k| &k.epilogue);
    kept_or_made(
        cell,
        |e| e.n == n && e.k == k,
        || {
            crate::ops::count_made(crate::ops::Derived::Epilogue);
            let (_, fscales) = filter_quant(ctx, n)?;
            let rq = Requant::new(ctx, ctx.operand(0)?.scale, &fscales, act)?;
            let (_, bias) = ctx.i32s(2)?;
            Epilogue::new(&rq, bias, n, k)
                .ok_or_else(|| ctx.err("bias shorter than the output depth"))
        },
    )
}

/// Writes rows `r0..` of `x` (rows of `k`), centered, into `dst` (rows of `padded(k)`).
fn copy_rows(x: &Input<'_>, k: usize, r0: usize, dst: &mut [i16]) {
    let kp = padded(k);
    for (i, d) in dst.chunks_exact_mut(kp.max(1)).enumerate() {
        let (row, pad) = d.split_at_mut(k);
        x.center((r0 + i) * k, row);
        zero(pad);
    }
}

/// Zeroes `d` (short runs: no call to `memset` for the empty and one-element ones).
#[inline]
fn zero(d: &mut [i16]) {
    match d {
        [] => {}
        [v] => *v = 0,
        _ => d.fill(0),
    }
}

/// FULLY_CONNECTED on 8-bit operands: `batch` rows of `isz` by `units` weight rows.
pub(super) fn fully_connected(
    ctx: &OpCtx<'_>,
    batch: usize,
    isz: usize,
    units: usize,
    od: Vec<u32>,
) -> KResult<Tensor> {
    if let Route::Fast(isa) = route(isz <= MAX_K) {
        let mut owned = None;
        if let (Some(x), Some(w)) = (
            Input::new(ctx, false)?,
            weights(ctx, units, isz, &mut owned)?,
        ) {
            if x.len() != batch * isz {
                return Err(ctx.err("input does not match its dimensions"));
            }
            let ep = epilogue(ctx, units, isz, 3)?;
            let mut out = crate::tensor::output_buffer_uninit::<u8>(batch * units);
            let threads = qgemm::threads(batch, isz, units);
            // SAFETY: the GEMM writes only initialized bytes.
            let c = unsafe { out.uninit() };
            qgemm::gemm(isa, w, &ep, c, threads, |r0, dst| {
                copy_rows(&x, isz, r0, dst)
            })
            .map_err(|e| ctx.err(e))?;
            // SAFETY: `qgemm::gemm` succeeded, so it wrote every element of `out`.
            let out = unsafe { crate::tensor::assume_written(out) };
            ran_fast();
            return Ok(bytes_tensor(ep.signed, od, out, false));
        }
    }
    let q = QuantOperands::new(ctx, false, units, 3)?;
    let out = reference::fully_connected(&q, batch, isz, units);
    Ok(q8_tensor(q.rq.ty, od, out))
}

fn window(s: &ConvSetup<'_>) -> Window {
    Window {
        nhwc: s.nhwc,
        filter_hw: s.filter_hw,
        out_hw: s.out_hw,
        g: s.g,
    }
}

/// CONV_2D on 8-bit operands.
pub(super) fn conv2d(ctx: &OpCtx<'_>, s: &ConvSetup<'_>) -> KResult<Tensor> {
    let win = window(s);
    let ([n, _, _, c], (fh, fw), (oh, ow)) = (win.nhwc, win.filter_hw, win.out_hw);
    let (oc, nchw) = (s.oc, s.args.nchw);
    let k = fh * fw * c;
    if let Route::Fast(isa) = route(k <= MAX_K) {
        let mut owned = None;
        if let (Some(x), Some(w)) = (Input::new(ctx, nchw)?, weights(ctx, oc, k, &mut owned)?) {
            let ep = epilogue(ctx, oc, k, s.args.act)?;
            let m = n * oh * ow;
            let mut out = crate::tensor::output_buffer_uninit::<u8>(m * oc);
            let threads = qgemm::threads(m, k, oc);
            let g = &win.g;
            let pointwise = (fh, fw) == (1, 1)
                && (g.stride_h, g.stride_w) == (1, 1)
                && g.pad_l + g.pad_r + g.pad_t + g.pad_b == 0;
            // SAFETY: the GEMM writes only initialized bytes.
            let dst_all = unsafe { out.uninit() };
            qgemm::gemm(isa, w, &ep, dst_all, threads, |r0, dst| {
                if pointwise {
                    copy_rows(&x, c, r0, dst)
                } else {
                    im2col(&x, &win, r0, dst)
                }
            })
            .map_err(|e| ctx.err(e))?;
            // SAFETY: `qgemm::gemm` succeeded, so it wrote every element of `out`.
            let out = unsafe { crate::tensor::assume_written(out) };
            ran_fast();
            return Ok(bytes_tensor(ep.signed, s.od.clone(), out, nchw));
        }
    }
    let q = QuantOperands::new(ctx, nchw, oc, s.args.act)?;
    let out = reference::conv2d(&q, &win, oc);
    let (d, v) = to_layout(s.od.clone(), out, nchw);
    Ok(q8_tensor(q.rq.ty, d, v.into_vec()))
}

/// Fills `dst` (whole rows of `padded(fh·fw·c)`) with the centered windows of output pixels
/// `p0..`; taps outside the input are 0 (the input's zero point).
fn im2col(x: &Input<'_>, win: &Window, p0: usize, dst: &mut [i16]) {
    let ([_, h, w, c], (fh, fw), (oh, ow), g) = (win.nhwc, win.filter_hw, win.out_hw, &win.g);
    let k = fh * fw * c;
    let run = fw * c;
    let mut walk = super::WindowWalk::new(g, (h, w), (fh, fw), c, (oh, ow), p0);
    for drow in dst.chunks_exact_mut(padded(k).max(1)) {
        let (b, oy, ox) = (walk.b, walk.oy, walk.ox);
        let inside = walk.inside();
        walk.advance();
        zero(&mut drow[k..]);
        if let Some(starts) = inside {
            // Every filter row a whole run: no bounds to find, nothing to clear.
            for (d, &at) in drow.chunks_exact_mut(run.max(1)).zip(&starts[..fh]) {
                x.center(at, d);
            }
            continue;
        }
        for ky in 0..fh {
            let d = &mut drow[ky * fw * c..(ky + 1) * fw * c];
            let Some(iy) = g.in_y(oy, ky, h) else {
                zero(d);
                continue;
            };
            let src = (b * h + iy) * w * c;
            if g.dil_w == 1 {
                // Input column of tap kx is base + kx - pad_l: the valid taps are one run.
                let base = ox * g.stride_w;
                let lo = g.pad_l.saturating_sub(base).min(fw);
                let hi = (w + g.pad_l).saturating_sub(base).clamp(lo, fw);
                zero(&mut d[..lo * c]);
                if hi > lo {
                    let ix0 = base + lo - g.pad_l;
                    x.center(src + ix0 * c, &mut d[lo * c..hi * c]);
                }
                zero(&mut d[hi * c..]);
            } else {
                for (kx, dd) in d.chunks_exact_mut(c.max(1)).enumerate() {
                    match g.in_x(ox, kx, w) {
                        Some(ix) => x.center(src + ix * c, dd),
                        None => zero(dd),
                    }
                }
            }
        }
    }
}

/// Channels per depthwise step (one AVX2 register of i16, two of i32 accumulators).
const DW: usize = 16;

/// A depthwise convolution prepared for the channel-vectorised kernels: filter centered,
/// widened and padded to whole blocks of [`DW`] output channels; input read where it is or
/// (see [`Taps`]) widened first.
struct Depthwise<'a> {
    win: Window,
    /// Output channels and blocks of DW.
    oc: usize,
    blocks: usize,
    x: Taps<'a>,
    /// Taps (fh·fw) and taps rounded up to even (the last one of an odd count has zero weights).
    taps: usize,
    taps_even: usize,
    /// The filter, in the layout of the kernels of its `isa`.
    f: &'a DepthwiseFilter,
    ep: &'a Epilogue,
    isa: Isa,
}

/// Where a depthwise kernel reads its input: the offset of a pixel, in units of bytes or of
/// blocks, is its index times the units a pixel takes, and one offset stands for a tap outside
/// the input (it reads as centered zero); see [`Taps::unit_and_outside`].
enum Taps<'a> {
    /// The input's bytes in place (a depth multiplier of 1, the channels whole blocks: channel
    /// block b of a pixel is 16 bytes of it): each block is widened as it is read, and
    /// centered by the portable kernels (the AVX2 one multiplies it uncentered). `outside` is
    /// the input's length, where no block fits. Saves the widened copy: a pass over the input
    /// writing twice its bytes, and twice the bytes for the kernel to read.
    Bytes {
        bytes: &'a [u8],
        signed: bool,
        zp: i16,
        /// One pixel of the zero point's bytes (`oc` of them): what a tap outside reads for
        /// the AVX2 kernel, which multiplies the bytes uncentered.
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        zp_pixel: Vec<u8>,
    },
    /// The input centered and widened first, per pixel in output-channel order (channel o reads
    /// input channel o / mult), `blocks` blocks a pixel, then one zero pixel at `outside`.
    Widened(Vec<[i16; DW]>),
}

impl Taps<'_> {
    /// The offset units a pixel takes, and the offset of a tap outside the input, for `oc`
    /// output channels in `blocks` blocks.
    fn unit_and_outside(&self, oc: usize, blocks: usize) -> (usize, usize) {
        match self {
            Taps::Bytes { bytes, .. } => (oc, bytes.len()),
            Taps::Widened(x) => (blocks, x.len().saturating_sub(blocks)),
        }
    }

    /// Channel block `b` of the pixel at `off`, centered (zeros for the outside tap): the
    /// portable kernel's read (the vector kernels widen in registers).
    #[inline(always)]
    fn block(&self, off: usize, b: usize) -> [i16; DW] {
        match self {
            Taps::Bytes {
                bytes, signed, zp, ..
            } => {
                let at = off + b * DW;
                let Some(s) = bytes.get(at..at + DW) else {
                    return [0; DW];
                };
                std::array::from_fn(|l| {
                    let v = if *signed {
                        i16::from(s[l] as i8)
                    } else {
                        i16::from(s[l])
                    };
                    v - zp
                })
            }
            Taps::Widened(x) => x[off + b],
        }
    }
}

/// A DEPTHWISE_CONV_2D's filter in a kernel's layout (see [`depthwise_filter`]), kept with
/// the operation's other derived constants ([`crate::ops::QuantCache`]): None when a centered
/// value exceeds the kernels' bound (the reference kernel runs).
#[derive(Clone, Debug)]
pub(crate) struct DepthwiseFilter {
    isa: Isa,
    taps: usize,
    oc: usize,
    /// The input's zero point.
    xzp: i16,
    f: Option<Vec<[i16; 2 * DW]>>,
    /// Per block of DW channels, `−xzp · Σ_taps filter`: the AVX2 kernel starts its
    /// accumulators there and multiplies the input's bytes as they are, not centered (a tap
    /// outside the input then reads the zero point). Laid out as the kernel's two
    /// accumulators hold the block: channels 0-3 and 8-11, then 4-7 and 12-15.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    zp_terms: Vec<[i32; DW]>,
}

/// DEPTHWISE_CONV_2D on 8-bit operands.
pub(super) fn depthwise_conv2d(ctx: &OpCtx<'_>, s: &ConvSetup<'_>) -> KResult<Tensor> {
    let win = window(s);
    let ([n, h, w, c], (fh, fw), (oh, ow)) = (win.nhwc, win.filter_hw, win.out_hw);
    let (oc, nchw, mult) = (s.oc, s.args.nchw, s.args.multiplier);
    let taps = fh * fw;
    // An empty output (no channels: a zero-sized temporary) is the reference kernels' to make.
    let nonempty = oc > 0 && n * oh * ow > 0;
    if let Route::Fast(isa) = route(taps <= MAX_K && nonempty) {
        if let Some(x) = Input::new(ctx, nchw)? {
            let ep = epilogue(ctx, oc, taps, s.args.act)?;
            let blocks = oc.div_ceil(DW);
            let pixels = n * h * w;
            if x.len() != pixels * c || c * mult != oc {
                return Err(ctx.err("input does not match its dimensions"));
            }
            // The filter first: when it leaves the fast kernels, the input is not copied.
            let f = kept_or_made(
                ctx.kept.map(|k| &k.depthwise_filter),
                |f| f.isa == isa && f.taps == taps && f.oc == oc && f.xzp == x.zp,
                || depthwise_filter(ctx, taps, oc, isa),
            )?;
            if f.f.is_none() {
                return depthwise_reference(ctx, s);
            }
            let taps_in = if mult == 1 && c % DW == 0 {
                Taps::Bytes {
                    bytes: x.bytes(),
                    signed: x.signed(),
                    zp: x.zp,
                    zp_pixel: vec![x.zp as u8; oc],
                }
            } else {
                Taps::Widened(widened(&x, pixels, c, mult, blocks))
            };
            let d = Depthwise {
                win,
                oc,
                blocks,
                x: taps_in,
                taps,
                taps_even: padded(taps),
                f: &f,
                ep: &ep,
                isa,
            };
            // Every element written: each row's every pixel, every channel block.
            let mut out = crate::tensor::output_buffer_uninit::<u8>(n * oh * ow * oc);
            let row_len = ow * oc;
            // Flop-equivalents: about a third of the GEMM's rate, as the float kernel.
            let work = out.len().saturating_mul(6 * taps);
            let threads = par::threads_for(work, n * oh);
            // SAFETY: the row kernels write only initialized bytes.
            par::for_row_ranges(unsafe { out.uninit() }, row_len, threads, |r0, part| {
                d.rows(r0, part);
                Ok::<(), ()>(())
            })
            .map_err(|()| ctx.err("depthwise kernel failed"))?;
            // SAFETY: the row kernels write every element of every row they are given
            // (`Depthwise::rows`), and the rows cover `out`.
            let out = unsafe { crate::tensor::assume_written(out) };
            ran_fast();
            return Ok(bytes_tensor(ep.signed, s.od.clone(), out, nchw));
        }
    }
    depthwise_reference(ctx, s)
}

/// `pixels` pixels of `c` channels of `x` centered and widened into blocks of DW output
/// channels (each input channel repeated `mult` times), then one zero pixel ([`Taps::Widened`]).
fn widened(x: &Input<'_>, pixels: usize, c: usize, mult: usize, blocks: usize) -> Vec<[i16; DW]> {
    let oc = c * mult;
    // Grown a pixel at a time (zeroed while in cache, then written), not zeroed whole.
    let mut xb = Vec::with_capacity((pixels + 1) * blocks);
    let mut px = vec![0i16; c];
    for p in 0..pixels {
        let start = xb.len();
        xb.resize(start + blocks, [0i16; DW]);
        let dst = &mut xb[start..].as_flattened_mut()[..oc];
        if mult == 1 {
            x.center(p * c, dst);
        } else {
            x.center(p * c, &mut px);
            for (d, &v) in dst.chunks_exact_mut(mult).zip(&px) {
                d.fill(v);
            }
        }
    }
    // The zero pixel that taps outside the input read.
    xb.resize((pixels + 1) * blocks, [0i16; DW]);
    xb
}

fn depthwise_reference(ctx: &OpCtx<'_>, s: &ConvSetup<'_>) -> KResult<Tensor> {
    let q = QuantOperands::new(ctx, s.args.nchw, s.oc, s.args.act)?;
    let out = reference::depthwise_conv2d(&q, &window(s), s.args.multiplier);
    let (d, v) = to_layout(s.od.clone(), out, s.args.nchw);
    Ok(q8_tensor(q.rq.ty, d, v.into_vec()))
}

/// The depthwise filter (input 1, `[1][fh][fw][oc]`) centered on its zero point, in the layout
/// of `isa`'s kernel: `[block][tap]` (portable and NEON kernels, the first DW lanes used) or
/// `[block][tap pair]` interleaved as `_mm256_unpacklo/hi_epi16` interleave the input of the
/// pair's two taps (AVX2 kernel).
fn depthwise_filter(ctx: &OpCtx<'_>, taps: usize, oc: usize, isa: Isa) -> KResult<DepthwiseFilter> {
    crate::ops::count_made(crate::ops::Derived::DepthwiseFilter);
    let (fzp, _) = filter_quant(ctx, oc)?;
    let t = ctx.t(1)?;
    let raw: Vec<i32> = match &t.data {
        Data::U8(v) => v.iter().map(|&b| i32::from(b) - fzp).collect(),
        Data::I8(v) => v.iter().map(|&b| i32::from(b) - fzp).collect(),
        _ => return Err(ctx.err("filter is not 8-bit")),
    };
    if raw.len() != taps * oc {
        return Err(ctx.err("filter does not match its dimensions"));
    }
    let xzp = i16::try_from(ctx.operand(0)?.zero_point)
        .map_err(|_| ctx.err("input zero point outside the 8-bit types' range"))?;
    let blocks = oc.div_ceil(DW);
    let kept = |f, zp_terms| DepthwiseFilter {
        isa,
        taps,
        oc,
        xzp,
        f,
        zp_terms,
    };
    if raw.iter().any(|v| !(-255..=255).contains(v)) {
        return Ok(kept(None, Vec::new()));
    }
    // Tap t, output channel o (0 past the filter).
    let at = |t: usize, o: usize| -> i16 {
        if t < taps && o < oc {
            raw[t * oc + o] as i16
        } else {
            0
        }
    };
    let block_taps = || {
        let mut f = vec![[0i16; 2 * DW]; taps * blocks];
        for (i, e) in f.iter_mut().enumerate() {
            let (b, t) = (i / taps, i % taps);
            for (l, v) in e.iter_mut().take(DW).enumerate() {
                *v = at(t, b * DW + l);
            }
        }
        f
    };
    let f = match isa {
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => block_taps(),
        Isa::Portable => block_taps(),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            let pairs = padded(taps) / 2;
            let mut f = vec![[0i16; 2 * DW]; pairs * blocks];
            for b in 0..blocks {
                for q in 0..pairs {
                    let e = &mut f[b * pairs + q];
                    // unpacklo of 128-bit lane L: channels 8L..8L+4 of the two taps, alternated;
                    // unpackhi: channels 8L+4..8L+8.
                    for half in 0..2 {
                        for lane in 0..2 {
                            for i in 0..4 {
                                let o = b * DW + 8 * lane + 4 * half + i;
                                for tap in 0..2 {
                                    e[16 * half + 8 * lane + 2 * i + tap] = at(2 * q + tap, o);
                                }
                            }
                        }
                    }
                }
            }
            f
        }
    };
    let zp_terms = (0..blocks)
        .map(|b| {
            std::array::from_fn(|l| {
                // Lane l: accumulator l / 8, its 128-bit half (l / 4) % 2, element l % 4.
                let o = b * DW + 8 * ((l / 4) % 2) + 4 * (l / 8) + l % 4;
                let sum: i32 = (0..taps).map(|t| i32::from(at(t, o))).sum();
                -i32::from(xzp) * sum
            })
        })
        .collect();
    Ok(kept(Some(f), zp_terms))
}

impl Depthwise<'_> {
    /// The filter's values (present: a filter without them routes to the reference kernel).
    fn filter(&self) -> &[[i16; 2 * DW]] {
        self.f.f.as_deref().unwrap_or_default()
    }

    /// Output rows `r0..` (a row is one (batch, y) pair), all of `out`: every element of
    /// every whole row is written (`out` may come uninitialized).
    fn rows(&self, r0: usize, out: &mut [MaybeUninit<u8>]) {
        match self.isa {
            Isa::Portable => self.rows_with::<false>(r0, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Isa::Avx2 is only chosen when the CPU has AVX2.
            Isa::Avx2 => unsafe { self.rows_avx2(r0, out) },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => self.rows_with::<true>(r0, out),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn rows_avx2(&self, r0: usize, out: &mut [MaybeUninit<u8>]) {
        self.rows_with::<true>(r0, out);
    }

    /// [`Self::rows`] with the vector row kernel when `VECTOR` (on x86-64 the AVX2 one,
    /// instantiated with it only from [`Self::rows_avx2`]; on aarch64 the NEON one), else the
    /// portable one. Pixels whose window lies inside the input
    /// step their tap offsets by the stride; border pixels point their outside taps at the zero
    /// pixel.
    #[inline(always)]
    fn rows_with<const VECTOR: bool>(&self, r0: usize, out: &mut [MaybeUninit<u8>]) {
        let ([_, h, w, _], (fh, fw), (oh, ow), g) = (
            self.win.nhwc,
            self.win.filter_hw,
            self.win.out_hw,
            &self.win.g,
        );
        let oc = self.oc;
        let (unit, outside) = self.x.unit_and_outside(oc, self.blocks);
        let interior = g.interior_cols(w, fw, ow);
        let te = self.taps_even;
        // The row's tap offsets, `te` a pixel (the odd count's last tap reads outside).
        let mut row_offs = vec![outside; ow * te];
        // The AVX2 kernel's taps as pointers, made from `row_offs` for each row.
        #[cfg(target_arch = "x86_64")]
        let mut row_ptrs: Vec<*const u8> = Vec::new();
        // Interior pixels: tap offsets at input column 0.
        let mut rel = vec![0usize; fh * fw];
        let mut row_at: Vec<Option<usize>> = vec![None; fh];
        for (ri, orow) in out.chunks_exact_mut(ow * oc).enumerate() {
            let r = r0 + ri;
            let (b, oy) = (r / oh, r % oh);
            for (ky, at) in row_at.iter_mut().enumerate() {
                *at = g.in_y(oy, ky, h).map(|iy| (b * h + iy) * w);
            }
            let full_rows = row_at.iter().all(Option::is_some);
            if full_rows {
                for (t, rv) in rel.iter_mut().enumerate() {
                    let (ky, kx) = (t / fw, t % fw);
                    *rv = row_at[ky].map_or(0, |a| (a + kx * g.dil_w) * unit);
                }
            }
            for (ox, offs) in row_offs.chunks_exact_mut(te).enumerate() {
                if full_rows && interior.contains(&ox) {
                    let shift = (ox * g.stride_w - g.pad_l) * unit;
                    for (d, &rv) in offs.iter_mut().zip(&rel) {
                        *d = rv + shift;
                    }
                } else {
                    for kx in 0..fw {
                        let ix = g.in_x(ox, kx, w);
                        for (ky, at) in row_at.iter().enumerate() {
                            offs[ky * fw + kx] = match (at, ix) {
                                (Some(a), Some(ix)) => (a + ix) * unit,
                                _ => outside,
                            };
                        }
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            if VECTOR {
                // SAFETY: VECTOR is true only in the instance called from rows_avx2, whose
                // callers checked that the CPU has AVX2.
                unsafe { self.row_avx2(&row_offs, &mut row_ptrs, orow) };
                continue;
            }
            #[cfg(target_arch = "aarch64")]
            if VECTOR {
                // SAFETY: VECTOR is true only for Isa::Neon, chosen only when the CPU has NEON.
                unsafe { self.row_neon(&row_offs, orow) };
                continue;
            }
            for (offs, o) in row_offs.chunks_exact(te).zip(orow.chunks_exact_mut(oc)) {
                self.pixel_portable(offs, o);
            }
        }
    }

    /// One output pixel's `oc` channels from the inputs at `offs` (one per tap).
    fn pixel_portable(&self, offs: &[usize], out: &mut [MaybeUninit<u8>]) {
        let (taps, filter) = (self.taps, self.filter());
        for (b, o) in out.chunks_mut(DW).enumerate() {
            let mut acc = [0i32; DW];
            let fb = &filter[b * taps..(b + 1) * taps];
            for (&off, f) in offs.iter().zip(fb) {
                let x = self.x.block(off, b);
                for l in 0..DW {
                    acc[l] += i32::from(x[l]) * i32::from(f[l]);
                }
            }
            for (l, d) in o.iter_mut().enumerate() {
                d.write(self.ep.scalar(acc[l], b * DW + l));
            }
        }
    }

    /// The AVX2 form of [`Self::pixel_portable`] over a row of pixels (`offs`: each pixel's
    /// taps), one block of channels at a time so its filter and epilogue parameters stay in
    /// registers: two taps per `_mm256_madd_epi16`. A 3×3 filter (5 tap pairs) runs an
    /// unrolled instance that keeps the block's 10 filter registers loaded across the row.
    /// Input bytes read in place are multiplied uncentered, from accumulators that start at
    /// the zero point's terms ([`DepthwiseFilter::zp_terms`]), and the epilogue takes the
    /// channels in the order the multiply-adds leave them: measured on MobileNetV2 int8, the
    /// depthwise layers went from 2.75 ms (widened input, centered per tap, channels put back
    /// in order before the requantization) to 1.8 ms.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    fn row_avx2(&self, offs: &[usize], ptrs: &mut Vec<*const u8>, out: &mut [MaybeUninit<u8>]) {
        use crate::ops::qgemm::avx2::ld16;
        use std::arch::x86_64::*;
        match (&self.x, self.taps_even / 2) {
            (
                Taps::Bytes {
                    bytes,
                    signed,
                    zp_pixel,
                    ..
                },
                pairs,
            ) => {
                // Each tap's pixel: `oc` bytes of the input, or of the zero point outside it
                // (into the caller's buffer, reused from row to row).
                ptrs.clear();
                ptrs.extend(offs.iter().map(|&off| match bytes.get(off..off + self.oc) {
                    Some(px) => px.as_ptr(),
                    None => zp_pixel.as_ptr(),
                }));
                // Block b (< blocks) of a pixel: 16 bytes widened, not centered (the zero
                // point's terms start the accumulators).
                let load = |px: *const u8, b: usize| {
                    // SAFETY: `px` starts `oc` = 16·blocks bytes of `bytes` or `zp_pixel`,
                    // both borrowed for this call, and b < blocks: the 16 bytes at 16·b are
                    // inside them (read unaligned).
                    let v = unsafe { _mm_loadu_si128(px.wrapping_add(b * DW).cast()) };
                    if *signed {
                        _mm256_cvtepi8_epi16(v)
                    } else {
                        _mm256_cvtepu8_epi16(v)
                    }
                };
                let terms = &self.f.zp_terms;
                match pairs {
                    5 => self.row_avx2_pairs::<5, _>(ptrs, out, load, terms),
                    _ => self.row_avx2_pairs::<0, _>(ptrs, out, load, terms),
                }
            }
            (Taps::Widened(x), pairs) => {
                let load = |off: usize, b: usize| ld16(&x[off + b], 0);
                match pairs {
                    5 => self.row_avx2_pairs::<5, _>(offs, out, load, &[]),
                    _ => self.row_avx2_pairs::<0, _>(offs, out, load, &[]),
                }
            }
        }
    }

    /// [`Self::row_avx2`] for `P` tap pairs held in registers, or (P = 0) any count read from
    /// memory: `taps` names each pixel's taps' pixels, block b of the one named `t` is
    /// `load(t, b)` (b < blocks), and the accumulators of block b start at `starts[b]` (at
    /// zero past its end).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    fn row_avx2_pairs<const P: usize, T: Copy>(
        &self,
        taps: &[T],
        out: &mut [MaybeUninit<u8>],
        load: impl Fn(T, usize) -> std::arch::x86_64::__m256i,
        starts: &[[i32; DW]],
    ) {
        use crate::ops::qgemm::avx2::{Lanes, Narrow, ld8i, ld16, requant, store16_unpacked};
        use std::arch::x86_64::*;
        let (blocks, oc, te) = (self.blocks, self.oc, self.taps_even);
        let narrow = Narrow::load(self.ep);
        // A run of pixels at a time, in two passes: the multiply-adds into `sums`, then the
        // requantization and the store. In one pass the held filter (10 registers), the two
        // accumulators and the requantization's parameters did not fit AVX2's 16 registers,
        // and the loop reloaded spilled ones for every pixel; apart, each pass keeps what it
        // uses. MobileNetV2 int8 at one thread: 10.24 → 10.14 ms (`nnaccelctl bench` p50).
        const SUMS: usize = 64;
        let mut sums = [[_mm256_setzero_si256(); 2]; SUMS];
        // Two taps' inputs (block b of the pixels at `at`) interleaved, times their filter
        // pair, added to lo and hi.
        let mac = |lo: &mut __m256i, hi: &mut __m256i, at: [T; 2], b, f0, f1| {
            let x0 = load(at[0], b);
            let x1 = load(at[1], b);
            let plo = _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), f0);
            let phi = _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), f1);
            *lo = _mm256_add_epi32(*lo, plo);
            *hi = _mm256_add_epi32(*hi, phi);
        };
        for b in 0..blocks {
            // lo holds channels 0-3 and 8-11, hi 4-7 and 12-15.
            let p_lo = Lanes::load_unpacked(self.ep, b, 0);
            let p_hi = Lanes::load_unpacked(self.ep, b, 1);
            let (c0, c1) = (b * DW, oc.min((b + 1) * DW));
            let fb = &self.filter()[b * te / 2..(b + 1) * te / 2];
            let held: [[__m256i; 2]; P] =
                std::array::from_fn(|q| [ld16(&fb[q], 0), ld16(&fb[q], 16)]);
            let (lo0, hi0) = starts
                .get(b)
                .map_or((_mm256_setzero_si256(), _mm256_setzero_si256()), |s| {
                    (ld8i(s, 0), ld8i(s, 8))
                });
            let pixels = taps.chunks(te * SUMS).zip(out.chunks_mut(oc * SUMS));
            for (taps, out) in pixels {
                for (po, sum) in taps.chunks_exact(te).zip(sums.iter_mut()) {
                    let (mut lo, mut hi) = (lo0, hi0);
                    if P > 0 {
                        for (q, f) in held.iter().enumerate() {
                            let at = [po[2 * q], po[2 * q + 1]];
                            mac(&mut lo, &mut hi, at, b, f[0], f[1]);
                        }
                    } else {
                        for (pair, f) in po.chunks_exact(2).zip(fb) {
                            let at = [pair[0], pair[1]];
                            mac(&mut lo, &mut hi, at, b, ld16(f, 0), ld16(f, 16));
                        }
                    }
                    *sum = [lo, hi];
                }
                for (sum, o) in sums.iter().zip(out.chunks_exact_mut(oc)) {
                    let (lo, hi) = (requant(sum[0], &p_lo), requant(sum[1], &p_hi));
                    store16_unpacked(&mut o[c0..c1], lo, hi, &narrow);
                }
            }
        }
    }

    /// The NEON form of [`Self::pixel_portable`] over a row of pixels (`offs`: each pixel's
    /// taps), one block of channels at a time so its epilogue parameters stay in registers:
    /// per tap, 16 widening multiply-adds of input by filter (`vmlal_s16`, `vmlal_high_s16`)
    /// into 4 × 4 i32 accumulators. Input bytes read in place are widened and centered in
    /// registers (`vmovl`, `vsubq_s16`).
    #[cfg(target_arch = "aarch64")]
    #[target_feature(enable = "neon")]
    fn row_neon(&self, offs: &[usize], out: &mut [MaybeUninit<u8>]) {
        use crate::ops::qgemm::neon::ld8;
        use std::arch::aarch64::*;
        match &self.x {
            Taps::Bytes {
                bytes, signed, zp, ..
            } => {
                let zp = vdupq_n_s16(*zp);
                let zero = vdupq_n_s16(0);
                // Block b of the pixel at `off`: 16 bytes widened and centered (zeros outside).
                self.row_neon_with(offs, out, |off, b| {
                    let at = off + b * DW;
                    let Some(s) = bytes.get(at..at + DW) else {
                        return (zero, zero);
                    };
                    // SAFETY: `s` holds 16 bytes, as vld1q_u8 reads.
                    let v = unsafe { vld1q_u8(s.as_ptr()) };
                    let (lo, hi) = if *signed {
                        let v = vreinterpretq_s8_u8(v);
                        (vmovl_s8(vget_low_s8(v)), vmovl_high_s8(v))
                    } else {
                        (
                            vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v))),
                            vreinterpretq_s16_u16(vmovl_high_u8(v)),
                        )
                    };
                    (vsubq_s16(lo, zp), vsubq_s16(hi, zp))
                });
            }
            Taps::Widened(x) => self.row_neon_with(offs, out, |off, b| {
                let x = &x[off + b];
                (ld8(x, 0), ld8(x, 8))
            }),
        }
    }

    /// [`Self::row_neon`] with block b of the pixel at `off` read, centered, by `load(off, b)`.
    #[cfg(target_arch = "aarch64")]
    #[target_feature(enable = "neon")]
    fn row_neon_with(
        &self,
        offs: &[usize],
        out: &mut [MaybeUninit<u8>],
        load: impl Fn(usize, usize) -> (std::arch::aarch64::int16x8_t, std::arch::aarch64::int16x8_t),
    ) {
        use crate::ops::qgemm::neon::{Lanes, Narrow, ld8, ran, requant, store16};
        use std::arch::aarch64::*;
        ran();
        let (blocks, oc, te, taps) = (self.blocks, self.oc, self.taps_even, self.taps);
        let narrow = Narrow::load(self.ep);
        for b in 0..blocks {
            let p = [0, 1, 2, 3].map(|i| Lanes::load(self.ep, 4 * b + i));
            let (c0, c1) = (b * DW, oc.min((b + 1) * DW));
            let fb = &self.filter()[b * taps..(b + 1) * taps];
            for (po, o) in offs.chunks_exact(te).zip(out.chunks_exact_mut(oc)) {
                let mut acc = [vdupq_n_s32(0); 4];
                for (&off, f) in po.iter().zip(fb) {
                    let (x0, x1) = load(off, b);
                    let (f0, f1) = (ld8(f, 0), ld8(f, 8));
                    acc[0] = vmlal_s16(acc[0], vget_low_s16(x0), vget_low_s16(f0));
                    acc[1] = vmlal_high_s16(acc[1], x0, f0);
                    acc[2] = vmlal_s16(acc[2], vget_low_s16(x1), vget_low_s16(f1));
                    acc[3] = vmlal_high_s16(acc[3], x1, f1);
                }
                let v = [0, 1, 2, 3].map(|i| requant(acc[i], &p[i]));
                store16(&mut o[c0..c1], v, &narrow);
            }
        }
    }
}

// NR (the GEMM's channel padding) covers the depthwise blocks' epilogue groups.
const _: () = assert!(NR % DW == 0);
