//! Elementwise operations: broadcast arithmetic (ADD, SUB, MUL, DIV), activations and unary
//! math, ELU, QUANTIZE and DEQUANTIZE; and the float view of 8-bit operands other families
//! compute through.

use super::broadcast::broadcast;
use super::opdef::OpDef;
use super::quant::{act_range_q, mbqm, q8_values, quantize_multiplier, quantize_val};
use super::{KResult, OpCtx, count, q8_range, q8_tensor};
use crate::check::{ARITH, Ck, DEQUANT_IN, F32_Q8, FLOAT, FLOAT_INT32, Issue, float_scalar};
use crate::model::{OperandType, OperationType};
use crate::par;
use crate::tensor::{Data, Tensor, output_buffer};

use OperandType as T;
use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef::new(O::Add, ARITH, check_binary, binary),
    OpDef::new(O::Sub, ARITH, check_binary, binary),
    OpDef::new(O::Mul, ARITH, check_binary, binary),
    OpDef::new(O::Div, DIV_TYPES, check_binary, binary),
    OpDef::new(O::Relu, F32_Q8, check_relu, unary),
    OpDef::new(O::Relu1, F32_Q8, check_relu, unary),
    OpDef::new(O::Relu6, F32_Q8, check_relu, unary),
    OpDef::new(O::Logistic, F32_Q8, check_logistic, unary),
    OpDef::new(O::Tanh, F32_Q8, check_tanh, unary),
    OpDef::new(O::Floor, FLOAT, check_unary, unary),
    OpDef::new(O::Abs, FLOAT_INT32, check_unary, unary),
    OpDef::new(O::Exp, FLOAT, check_unary, unary),
    OpDef::new(O::Log, FLOAT, check_unary, unary),
    OpDef::new(O::Neg, FLOAT_INT32, check_unary, unary),
    OpDef::new(O::Rsqrt, FLOAT, check_unary, unary),
    OpDef::new(O::Sin, FLOAT, check_unary, unary),
    OpDef::new(O::Sqrt, FLOAT, check_unary, unary),
    OpDef::new(O::HardSwish, F32_Q8, check_unary, unary),
    OpDef::new(O::Elu, FLOAT, check_elu, elu),
    OpDef::new(O::Dequantize, DEQUANT_IN, check_dequantize, dequantize),
    OpDef::new(O::Quantize, FLOAT, check_quantize, quantize),
];

/// DIV: float tensors and TENSOR_INT32 (floor division), no quantized types.
const DIV_TYPES: &[OperandType] = &[T::TensorFloat32, T::TensorFloat16, T::TensorInt32];

/// ADD / SUB / MUL / DIV(input0, input1, activation): both tensors of one type.
fn check_binary(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[3], 1)?;
    c.is(1, t0, "second operand")?;
    c.is(2, T::Int32, "fused activation")?;
    c.same_out(t0)
}

/// One tensor in, one of the same type out.
fn check_unary(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[1], 1)?;
    c.same_out(t0)
}

/// RELU, RELU1, RELU6: a quantized output has the input's scale and zero point (NNAPI).
/// (Only for the types implemented: the table reports the others as not implemented.)
fn check_relu(c: &Ck<'_>) -> Result<(), Issue> {
    check_unary(c)?;
    if F32_Q8.contains(&c.ty(0)?) {
        c.same_quant()?;
    }
    Ok(())
}

/// LOGISTIC: a quantized output has scale 1/256 and zero point 0 (-128 signed).
fn check_logistic(c: &Ck<'_>) -> Result<(), Issue> {
    check_unary(c)?;
    c.implemented(O::Logistic, F32_Q8)?;
    c.out_quant(1.0 / 256.0, 0)
}

/// TANH: a quantized output has scale 1/128 and zero point 128 (0 signed).
fn check_tanh(c: &Ck<'_>) -> Result<(), Issue> {
    check_unary(c)?;
    c.implemented(O::Tanh, F32_Q8)?;
    c.out_quant(1.0 / 128.0, 128)
}

/// ELU(input, alpha): alpha a scalar of the input's float type.
fn check_elu(c: &Ck<'_>) -> Result<(), Issue> {
    let t0 = c.ty(0)?;
    c.counts(&[2], 1)?;
    c.is(1, float_scalar(t0), "alpha")?;
    c.same_out(t0)
}

/// DEQUANTIZE: a float output.
fn check_dequantize(c: &Ck<'_>) -> Result<(), Issue> {
    c.ty(0)?;
    c.counts(&[1], 1)?;
    c.implemented(O::Dequantize, DEQUANT_IN)?;
    match c.out(0)?.ty {
        T::TensorFloat32 | T::TensorFloat16 => Ok(()),
        t => Err(Issue::Invalid(format!("output type {} invalid", t.name()))),
    }
}

/// QUANTIZE: an 8-bit asymmetric output.
fn check_quantize(c: &Ck<'_>) -> Result<(), Issue> {
    c.ty(0)?;
    c.counts(&[1], 1)?;
    c.implemented(O::Quantize, FLOAT)?;
    let ot = c.out(0)?.ty;
    if !matches!(ot, T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned) {
        return Err(Issue::Invalid(format!("output type {} invalid", ot.name())));
    }
    Ok(())
}

fn floor_div(ctx: &OpCtx<'_>, a: i32, b: i32) -> KResult<i32> {
    if b == 0 {
        return Err(ctx.err("integer division by zero"));
    }
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        Ok(q.wrapping_sub(1))
    } else {
        Ok(q)
    }
}

/// ADD, SUB, MUL, DIV.
fn binary(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    binary_tensor(ctx).map(|t| vec![t])
}

fn binary_tensor(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    let op = ctx.op.op;
    let ty = ctx.ty(0)?;
    match ty {
        OperandType::TensorFloat32 | OperandType::TensorFloat16 => {
            let (ad, a) = ctx.f32s(0)?;
            let (bd, b) = ctx.f32s(1)?;
            let (lo, hi) = ctx.act_f32(2)?;
            let (a, b) = ((ad, a), (bd, b));
            let (od, v) = match op {
                OperationType::Add => float_binary(ctx, a, b, move |x, y| (x + y).max(lo).min(hi)),
                OperationType::Sub => float_binary(ctx, a, b, move |x, y| (x - y).max(lo).min(hi)),
                OperationType::Mul => float_binary(ctx, a, b, move |x, y| (x * y).max(lo).min(hi)),
                _ => float_binary(ctx, a, b, move |x, y| (x / y).max(lo).min(hi)),
            }?;
            Ok(Tensor::new(od, Data::F32(v.into())))
        }
        OperandType::TensorInt32 => {
            let (ad, a) = ctx.i32s(0)?;
            let (bd, b) = ctx.i32s(1)?;
            if ctx.scalar_i32(2)? != 0 {
                return Err(ctx.err("fused activation must be NONE for TENSOR_INT32"));
            }
            let mut div_err = None;
            let (od, v) = broadcast(ctx, (ad, a), (bd, b), |x: i32, y: i32| match op {
                OperationType::Add => x.wrapping_add(y),
                OperationType::Sub => x.wrapping_sub(y),
                OperationType::Mul => x.wrapping_mul(y),
                _ => match floor_div(ctx, x, y) {
                    Ok(q) => q,
                    Err(e) => {
                        div_err = Some(e);
                        0
                    }
                },
            })?;
            if let Some(e) = div_err {
                return Err(e);
            }
            Ok(Tensor::new(od, Data::I32(v.into())))
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            binary_quant8(ctx, ty)
        }
        _ => Err(ctx.err(format!("unsupported type {}", ty.name()))),
    }
}

/// Elements per thread's share below which an elementwise kernel stays on one thread, in
/// [`par::threads_for`]'s flop-equivalents per element: a float operation streams its
/// operands at about a sixteenth of the GEMM's flop rate, an 8-bit requantizing one computes
/// about 128 flops' worth per element.
const FLOAT_ELEMENT_COST: usize = 16;
const Q8_ELEMENT_COST: usize = 128;

/// `chunk(a_part, b_part, out_part)` over matching parts of equal-length slices, split across
/// threads when large (`cost`: flop-equivalents per element).
fn split_zip<A, B, R>(
    a: &[A],
    b: &[B],
    out: &mut [R],
    cost: usize,
    chunk: impl Fn(&[A], &[B], &mut [R]) + Sync,
) where
    A: Sync,
    B: Sync,
    R: Send,
{
    let n = out.len();
    let threads = par::threads_for(n.saturating_mul(cost), n / 4096);
    let _ = par::for_row_ranges(out, 1, threads, |i0, part| {
        let range = i0..i0 + part.len();
        // (Callers pass slices of one length: the ranges are always there.)
        if let (Some(a), Some(b)) = (a.get(range.clone()), b.get(range)) {
            chunk(a, b, part);
        }
        Ok::<(), ()>(())
    });
}

/// `out[i] = f(a[i], b[i])` over equal-length slices, split across threads when large.
fn zip_map<A, B, R>(a: &[A], b: &[B], out: &mut [R], cost: usize, f: impl Fn(A, B) -> R + Sync)
where
    A: Copy + Sync,
    B: Copy + Sync,
    R: Send,
{
    split_zip(a, b, out, cost, |a, b, part| {
        for ((o, &x), &y) in part.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    });
}

/// A float binary operation `f` (activation included) with broadcasting; operands of one
/// shape take a direct loop split across threads.
fn float_binary(
    ctx: &OpCtx<'_>,
    (ad, a): (&[u32], &[f32]),
    (bd, b): (&[u32], &[f32]),
    f: impl Fn(f32, f32) -> f32 + Sync + Copy,
) -> KResult<(Vec<u32>, Vec<f32>)> {
    if ad == bd && a.len() == b.len() && count(ctx, ad)? == a.len() {
        let mut out = output_buffer::<f32>(a.len());
        zip_map(a, b, &mut out, FLOAT_ELEMENT_COST, f);
        return Ok((ad.to_vec(), out));
    }
    broadcast(ctx, (ad, a), (bd, b), f)
}

/// `quant::mbqm(x, m, -r)` for `m >= 0` and `r <= 31`, without branches (so that the loops
/// of [`AddQ8`] vectorize): the same doubling high multiply with its nudge, truncating
/// division by 2^31 and rounding right shift, in i64 arithmetic.
#[inline(always)]
fn mbqm_right(x: i32, m: i32, r: u32) -> i32 {
    let ab = i64::from(x) * i64::from(m);
    // Nudge 2^30 for a non-negative product, 1 − 2^30 for a negative one.
    let v = ab + ((1i64 << 30) + ((ab >> 63) & (1 - (1i64 << 31))));
    // Division by 2^31 rounding towards zero.
    let q = ((v + ((v >> 63) & ((1i64 << 31) - 1))) >> 31) as i32;
    let r = r.min(31);
    let mask = ((1i64 << r) - 1) as i32;
    let threshold = (mask >> 1) + ((q >> 31) & 1);
    (q >> r) + i32::from((q & mask) > threshold)
}

/// The fixed-point parameters of 8-bit ADD / SUB (TFLite's), each a multiplier and a shift:
/// both inputs, centered and shifted left by [`ADD_LEFT_SHIFT`], rescaled onto twice the larger
/// input scale (`inputs`; the second multiplier negated for SUB), their sum onto the output
/// scale (`out`).
#[derive(Clone, Copy, Debug)]
struct AddScales {
    inputs: [(i32, i32); 2],
    out: (i32, i32),
}

/// The left shift of ADD / SUB's centered inputs before their rescaling.
const ADD_LEFT_SHIFT: i32 = 20;

impl AddScales {
    /// For inputs of scales `sa` and `sb` and an output of scale `so`; `sub` for SUB.
    fn new(sa: f32, sb: f32, so: f32, sub: bool) -> AddScales {
        let twice_max = 2.0 * f64::from(sa.max(sb));
        let (m1, s1) = quantize_multiplier(f64::from(sa) / twice_max);
        let (m2, s2) = quantize_multiplier(f64::from(sb) / twice_max);
        let (mo, so) =
            quantize_multiplier(twice_max / (f64::from(1 << ADD_LEFT_SHIFT) * f64::from(so)));
        let m2 = if sub { -m2 } else { m2 };
        AddScales {
            inputs: [(m1, s1), (m2, s2)],
            out: (mo, so),
        }
    }
}

/// One input's rescaled term for value `v` (zero point `-off`): `mbqm((v + off) << 20, m, s)`.
fn add_term(v: i32, off: i32, m: i32, s: i32) -> i32 {
    mbqm((v + off) * (1 << ADD_LEFT_SHIFT), m, s)
}

/// 8-bit ADD / SUB of two operands of one shape, straight on the stored bytes: each element's
/// output from the two inputs' rescaled terms (`t1`, `t2`: one per 8-bit value, indexed by
/// value − the type's lowest) and the output requantization.
#[derive(Debug)]
struct AddQ8 {
    t1: [i32; 256],
    t2: [i32; 256],
    /// The output multiplier (≥ 0) and right shift of [`mbqm_right`].
    mo: i32,
    right: u32,
    out_off: i32,
    lo: i32,
    hi: i32,
    /// The vector kernels' parameters, when they compute exactly what the tables do.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vector: Option<AddVector>,
}

/// What the vector kernel of [`AddQ8`] computes each input's term from (instead of the
/// tables): the offsets (minus the zero points), the multipliers and the right shifts (0..=31)
/// of `quant::mbqm((v + off) << 20, m, -right)`.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct AddVector {
    off: [i32; 2],
    m: [i32; 2],
    right: [u32; 2],
}

/// 16 bytes from `s` (at least 16), read unaligned.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn ld_bytes16(s: &[u8]) -> std::arch::x86_64::__m128i {
    let s = &s[..16];
    // SAFETY: `s` holds 16 bytes, read unaligned.
    unsafe { std::arch::x86_64::_mm_loadu_si128(s.as_ptr().cast()) }
}

/// An 8-bit storage type and its values' table index (value − the type's lowest).
trait Byte8: Copy + Send + Sync {
    /// Whether the type is signed (i8).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const SIGNED: bool;
    fn index(self) -> usize;
    fn from_i32(v: i32) -> Self;
    /// The bytes of `s`, as stored.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn bytes(s: &[Self]) -> &[u8];
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn bytes_mut(s: &mut [Self]) -> &mut [u8];
}

impl Byte8 for u8 {
    const SIGNED: bool = false;
    #[inline(always)]
    fn index(self) -> usize {
        usize::from(self)
    }
    #[inline(always)]
    fn from_i32(v: i32) -> Self {
        v as u8
    }
    #[inline(always)]
    fn bytes(s: &[u8]) -> &[u8] {
        s
    }
    #[inline(always)]
    fn bytes_mut(s: &mut [u8]) -> &mut [u8] {
        s
    }
}

impl Byte8 for i8 {
    const SIGNED: bool = true;
    #[inline(always)]
    fn index(self) -> usize {
        // -128 → 0, 127 → 255.
        usize::from(self as u8 ^ 0x80)
    }
    #[inline(always)]
    fn from_i32(v: i32) -> Self {
        v as i8
    }
    #[inline(always)]
    fn bytes(s: &[i8]) -> &[u8] {
        crate::tensor::i8_bytes(s)
    }
    #[inline(always)]
    fn bytes_mut(s: &mut [i8]) -> &mut [u8] {
        crate::tensor::i8_bytes_mut(s)
    }
}

impl AddQ8 {
    /// ADD / SUB with `p` of inputs of an 8-bit type whose lowest value is `qmin` (−128 or 0),
    /// input offsets (minus the zero points) `off`, output zero point `out_off` and activation
    /// bounds `lo..=hi`; None unless the output multiplier shifts right (`mbqm_right`).
    fn new(
        qmin: i32,
        off: [i32; 2],
        p: &AddScales,
        out_off: i32,
        lo: i32,
        hi: i32,
    ) -> Option<Self> {
        let ([(m1, s1), (m2, s2)], (mo, so)) = (p.inputs, p.out);
        if mo < 0 || so > 0 {
            return None;
        }
        let full = |off: i32, m: i32, s: i32| -> [i32; 256] {
            std::array::from_fn(|i| add_term(qmin + i as i32, off, m, s))
        };
        let qmax = qmin + 255;
        // The vector kernel's i32 steps are exact when: every centered input is within ±255
        // (so below 2^28 after the shift, its term too, and the plain sum of two terms is the
        // saturating one); the input multipliers only shift right and are not i32::MIN (the
        // vector `srdhm`); the output zero point and bounds are within [-255, 255] and ordered
        // (the narrowing of `qgemm::avx2::store16`).
        let within = |v: i32| (-255..=255).contains(&v);
        let exact = [off[0], off[1]]
            .iter()
            .all(|&o| within(qmin + o) && within(qmax + o))
            && [m1, m2].iter().all(|&m| m != i32::MIN)
            && s1 <= 0
            && s2 <= 0
            && within(out_off)
            && qmin <= lo
            && lo <= hi
            && hi <= qmax;
        Some(AddQ8 {
            t1: full(off[0], m1, s1),
            t2: full(off[1], m2, s2),
            mo,
            right: so.unsigned_abs(),
            out_off,
            lo,
            hi,
            vector: exact.then(|| AddVector {
                off,
                m: [m1, m2],
                right: [s1.unsigned_abs(), s2.unsigned_abs()],
            }),
        })
    }

    /// `out = a ⊕ b` elementwise, split across threads when large.
    fn run<T: Byte8>(&self, a: &[T], b: &[T], out: &mut [T]) {
        split_zip(a, b, out, Q8_ELEMENT_COST, |a, b, part| {
            self.rows(a, b, part)
        });
    }

    fn rows<T: Byte8>(&self, a: &[T], b: &[T], out: &mut [T]) {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                unsafe { self.rows_avx2(a, b, out) };
                return;
            }
        }
        self.rows_generic(a, b, out);
    }

    /// [`Self::rows_generic`] 16 elements at a time in AVX2 registers of 8 i32 lanes: each
    /// input's term computed as `quant::mbqm` does (the doubling high multiply and rounding
    /// shift of `qgemm::avx2`) instead of looked up, then the output's requantization and the
    /// narrowing of the quantized GEMM's epilogue. Elements past the last 16 (and parameters
    /// the kernel does not cover exactly) go through `rows_generic`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn rows_avx2<T: Byte8>(&self, a: &[T], b: &[T], out: &mut [T]) {
        use crate::ops::qgemm::avx2::{Narrow, RightShift, rdbpot, srdhm, store16};
        use std::arch::x86_64::*;
        let Some(v) = &self.vector else {
            return self.rows_generic(a, b, out);
        };
        let n = out.len().min(a.len()).min(b.len());
        let full = n - n % 16;
        let (ab, bb) = (T::bytes(&a[..full]), T::bytes(&b[..full]));
        let ob = T::bytes_mut(&mut out[..full]);
        let off = v.off.map(|o| _mm256_set1_epi32(o));
        let m = v.m.map(|m| _mm256_set1_epi32(m));
        let right = v.right.map(|r| RightShift::splat(r));
        let mo = _mm256_set1_epi32(self.mo);
        let right_o = RightShift::splat(self.right);
        let narrow = Narrow::new(self.out_off, self.lo, self.hi, T::SIGNED);
        // 8 bytes (the low half of `x`) widened to i32.
        let widen = |x: __m128i| {
            if T::SIGNED {
                _mm256_cvtepi8_epi32(x)
            } else {
                _mm256_cvtepu8_epi32(x)
            }
        };
        // Input i's terms of 8 values.
        let term = |x: __m256i, i: usize| {
            let c = _mm256_slli_epi32::<ADD_LEFT_SHIFT>(_mm256_add_epi32(x, off[i]));
            rdbpot(srdhm(c, m[i]), &right[i])
        };
        // The output before its zero point and bounds, from 8 values of each input.
        let sum8 = |x: __m128i, y: __m128i| {
            let s = _mm256_add_epi32(term(widen(x), 0), term(widen(y), 1));
            rdbpot(srdhm(s, mo), &right_o)
        };
        for ((o, x), y) in ob
            .chunks_exact_mut(16)
            .zip(ab.chunks_exact(16))
            .zip(bb.chunks_exact(16))
        {
            let (x, y) = (ld_bytes16(x), ld_bytes16(y));
            let lo = sum8(x, y);
            let hi = sum8(_mm_srli_si128::<8>(x), _mm_srli_si128::<8>(y));
            // SAFETY: store16 writes 16 initialized bytes (or o.len() of them).
            store16(unsafe { crate::tensor::as_uninit(o) }, lo, hi, &narrow);
        }
        self.rows_generic(&a[full..n], &b[full..n], &mut out[full..n]);
    }

    #[inline(always)]
    fn rows_generic<T: Byte8>(&self, a: &[T], b: &[T], out: &mut [T]) {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            // Indexes below 256 (Byte8::index): no bounds check can fail.
            let s = self.t1[x.index() & 255].saturating_add(self.t2[y.index() & 255]);
            let v = mbqm_right(s, self.mo, self.right).saturating_add(self.out_off);
            *o = T::from_i32(v.clamp(self.lo, self.hi));
        }
    }

    /// The sum of `a` and `b` (same length, both of the operation's type, whose lowest value
    /// is `qmin`), or None for storage this does not cover.
    fn apply(&self, a: &Data, b: &Data, qmin: i32) -> Option<Data> {
        match (a, b) {
            (Data::U8(a), Data::U8(b)) if a.len() == b.len() && qmin == 0 => {
                let mut out = output_buffer::<u8>(a.len());
                self.run(a, b, &mut out);
                Some(Data::U8(out.into()))
            }
            (Data::I8(a), Data::I8(b)) if a.len() == b.len() && qmin == -128 => {
                let mut out = output_buffer::<i8>(a.len());
                self.run(a, b, &mut out);
                Some(Data::I8(out.into()))
            }
            _ => None,
        }
    }
}

fn binary_quant8(ctx: &OpCtx<'_>, ty: OperandType) -> KResult<Tensor> {
    let (o1, o2, out) = (ctx.operand(0)?, ctx.operand(1)?, ctx.out(0)?);
    let (qmin, qmax) = q8_range(ty);
    let (lo, hi) = ctx.act_q(2, qmin, qmax)?;
    let off1 = -o1.zero_point;
    let off2 = -o2.zero_point;
    let out_off = out.zero_point;
    match ctx.op.op {
        OperationType::Add | OperationType::Sub => {
            let sub = ctx.op.op == OperationType::Sub;
            let p = AddScales::new(o1.scale, o2.scale, out.scale, sub);
            let ([(m1, s1), (m2, s2)], (mo, so)) = (p.inputs, p.out);
            // Each input's rescaled term depends on one 8-bit value: for an input of more
            // elements than there are values, computed once per possible value (the same
            // `mbqm`, so bit-identical), leaving one `mbqm` per element instead of three; a
            // smaller input (an empty table) computes its terms directly.
            let values = usize::try_from(qmax - qmin + 1).unwrap_or(0);
            let (ta, tb) = (ctx.t(0)?, ctx.t(1)?);
            let n = ta.data.len();
            // One shape, a right-shifting output multiplier (the output scale is not below
            // 2^-20 of the inputs'), 256 values: the branch-free loop on the stored bytes.
            if ta.dims == tb.dims && n > values && values == 256 && count(ctx, &ta.dims)? == n {
                let add = AddQ8::new(qmin, [off1, off2], &p, out_off, lo, hi);
                if let Some(d) = add.and_then(|add| add.apply(&ta.data, &tb.data, qmin)) {
                    return Ok(Tensor::new(ta.dims.clone(), d));
                }
            }
            let (ad, a) = q8_values(ctx, 0)?;
            let (bd, b) = q8_values(ctx, 1)?;
            let table = |len: usize, off: i32, m: i32, s: i32| -> Vec<i32> {
                if len <= values {
                    return Vec::new();
                }
                (qmin..=qmax).map(|v| add_term(v, off, m, s)).collect()
            };
            let (t1, t2) = (table(a.len(), off1, m1, s1), table(b.len(), off2, m2, s2));
            let look = |t: &[i32], v: i32, off: i32, m: i32, s: i32| {
                usize::try_from(v - qmin)
                    .ok()
                    .and_then(|i| t.get(i).copied())
                    .unwrap_or_else(|| add_term(v, off, m, s))
            };
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let sx = look(&t1, x, off1, m1, s1);
                let sy = look(&t2, y, off2, m2, s2);
                let raw = mbqm(sx.saturating_add(sy), mo, so).saturating_add(out_off);
                raw.clamp(lo, hi)
            })?;
            Ok(q8_tensor(ty, od, v))
        }
        OperationType::Mul => {
            let (ad, a) = q8_values(ctx, 0)?;
            let (bd, b) = q8_values(ctx, 1)?;
            let real = f64::from(o1.scale) * f64::from(o2.scale) / f64::from(out.scale);
            let (m, s) = quantize_multiplier(real);
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let p = (x + off1) * (y + off2);
                mbqm(p, m, s).saturating_add(out_off).clamp(lo, hi)
            })?;
            Ok(q8_tensor(ty, od, v))
        }
        _ => {
            // DIV on quantized tensors: through float.
            let (ad, a) = q8_values(ctx, 0)?;
            let (bd, b) = q8_values(ctx, 1)?;
            let (od, v) = broadcast(ctx, (&ad, &a), (&bd, &b), |x, y| {
                let fx = (x - o1.zero_point) as f32 * o1.scale;
                let fy = (y - o2.zero_point) as f32 * o2.scale;
                quantize_val(fx / fy, out.scale, out.zero_point, lo, hi)
            })?;
            Ok(q8_tensor(ty, od, v))
        }
    }
}

/// RELU, RELU1, RELU6, LOGISTIC, TANH, FLOOR and the unary math operations.
fn unary(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    unary_tensor(ctx).map(|t| vec![t])
}

fn unary_tensor(ctx: &OpCtx<'_>) -> KResult<Tensor> {
    use OperationType as O;
    let op = ctx.op.op;
    let ty = ctx.ty(0)?;
    match ty {
        OperandType::TensorFloat32 | OperandType::TensorFloat16 => {
            let (d, x) = ctx.f32s(0)?;
            let f: fn(f32) -> f32 = match op {
                O::Relu => |v| v.max(0.0),
                O::Relu1 => |v| v.clamp(-1.0, 1.0),
                O::Relu6 => |v| v.clamp(0.0, 6.0),
                O::Logistic => |v| 1.0 / (1.0 + (-v).exp()),
                O::Tanh => f32::tanh,
                O::Abs => f32::abs,
                O::Exp => f32::exp,
                O::Log => f32::ln,
                O::Neg => |v| -v,
                O::Rsqrt => |v| 1.0 / v.sqrt(),
                O::Sin => f32::sin,
                O::Sqrt => f32::sqrt,
                O::HardSwish => |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
                O::Floor => f32::floor,
                _ => return Err(ctx.err("no float kernel")),
            };
            Ok(Tensor::new(
                d.to_vec(),
                Data::F32(x.iter().map(|&v| f(v)).collect()),
            ))
        }
        // NNAPI lists TENSOR_INT32 for ABS (feature level 4) and NEG (level 3). The most
        // negative value has no positive counterpart: it wraps to itself, as two's
        // complement does (TFLite's std::abs leaves it undefined).
        OperandType::TensorInt32 => {
            let (d, x) = ctx.i32s(0)?;
            let f: fn(i32) -> i32 = match op {
                O::Abs => i32::wrapping_abs,
                O::Neg => i32::wrapping_neg,
                _ => return Err(ctx.err("no TENSOR_INT32 kernel")),
            };
            Ok(Tensor::new(
                d.to_vec(),
                Data::I32(x.iter().map(|&v| f(v)).collect()),
            ))
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            let (d, x) = q8_values(ctx, 0)?;
            let inp = ctx.operand(0)?;
            let out = ctx.out(0)?;
            let (qmin, qmax) = q8_range(ty);
            let deq = |v: i32| (v - inp.zero_point) as f32 * inp.scale;
            let v: Vec<i32> = match op {
                O::Relu | O::Relu1 | O::Relu6 => {
                    let act = match op {
                        O::Relu => 1,
                        O::Relu1 => 2,
                        _ => 3,
                    };
                    let (lo, hi) = act_range_q(act, inp.scale, inp.zero_point, qmin, qmax)
                        .map_err(|e| ctx.err(e))?;
                    // check_relu refuses an output whose scale or zero point differs from
                    // the input's, so clamping the quantized values is the whole kernel.
                    x.iter().map(|&v| v.clamp(lo, hi)).collect()
                }
                O::Logistic => x
                    .iter()
                    .map(|&v| {
                        let s = 1.0 / (1.0 + (-deq(v)).exp());
                        quantize_val(s, out.scale, out.zero_point, qmin, qmax)
                    })
                    .collect(),
                O::Tanh => x
                    .iter()
                    .map(|&v| quantize_val(deq(v).tanh(), out.scale, out.zero_point, qmin, qmax))
                    .collect(),
                // NNAPI (feature level 4) lists both 8-bit types; the output may have its
                // own scale and zero point. Computed through float, as LOGISTIC and TANH.
                O::HardSwish => x
                    .iter()
                    .map(|&v| {
                        let f = deq(v);
                        let h = f * (f + 3.0).clamp(0.0, 6.0) / 6.0;
                        quantize_val(h, out.scale, out.zero_point, qmin, qmax)
                    })
                    .collect(),
                _ => return Err(ctx.err("unsupported type for FLOOR")),
            };
            Ok(q8_tensor(ty, d, v))
        }
        _ => Err(ctx.err(format!("unsupported type {}", ty.name()))),
    }
}

/// DEQUANTIZE to TENSOR_FLOAT32.
fn dequantize(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let inp = ctx.operand(0)?;
    let t = ctx.t(0)?;
    let (scale, zp) = (inp.scale, inp.zero_point);
    let v: Vec<f32> = match (&t.data, &inp.channel_quant) {
        (Data::I8(x), Some(cq)) => {
            let st = super::strides(&t.dims);
            let dim = cq.channel_dim as usize;
            let (s, n) = match (st.get(dim), t.dims.get(dim)) {
                (Some(&s), Some(&n)) => (s, n as usize),
                _ => return Err(ctx.err("channel dimension out of range")),
            };
            if cq.scales.len() != n {
                return Err(ctx.err("per-channel scale count mismatch"));
            }
            x.iter()
                .enumerate()
                .map(|(i, &q)| f32::from(q) * cq.scales[(i / s) % n])
                .collect()
        }
        (Data::U8(x), _) => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        (Data::I8(x), None) => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        (Data::I16(x), _) => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        (Data::U16(x), _) if inp.ty == OperandType::TensorQuant16Asymm => x
            .iter()
            .map(|&q| (i32::from(q) - zp) as f32 * scale)
            .collect(),
        _ => return Err(ctx.err(format!("unsupported input type {}", inp.ty.name()))),
    };
    Ok(vec![Tensor::new(t.dims.clone(), Data::F32(v.into()))])
}

/// QUANTIZE from TENSOR_FLOAT32 to 8-bit asymmetric.
fn quantize(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, x) = ctx.f32s(0)?;
    let out = ctx.out(0)?;
    let (qmin, qmax) = q8_range(out.ty);
    let v = x
        .iter()
        .map(|&f| quantize_val(f, out.scale, out.zero_point, qmin, qmax))
        .collect();
    Ok(vec![q8_tensor(out.ty, d.to_vec(), v)])
}

/// Input `i` as floats (8-bit values dequantized), checked against its dimensions.
pub(crate) fn float_view(ctx: &OpCtx<'_>, i: usize) -> KResult<(Vec<u32>, Vec<f32>)> {
    let op = ctx.operand(i)?;
    let t = ctx.t(i)?;
    let v = match &t.data {
        Data::F32(v) => v.to_vec(),
        Data::U8(v) => v
            .iter()
            .map(|&q| (i32::from(q) - op.zero_point) as f32 * op.scale)
            .collect(),
        Data::I8(v) => v
            .iter()
            .map(|&q| (i32::from(q) - op.zero_point) as f32 * op.scale)
            .collect(),
        _ => return Err(ctx.err("unsupported input type")),
    };
    if count(ctx, &t.dims)? != v.len() {
        return Err(ctx.err("operand data does not match its dimensions"));
    }
    Ok((t.dims.clone(), v))
}

/// `v` as output 0: floats, or quantized to the output's 8-bit type.
pub(crate) fn float_result(ctx: &OpCtx<'_>, dims: Vec<u32>, v: Vec<f32>) -> KResult<Tensor> {
    let out = ctx.out(0)?;
    match out.ty {
        OperandType::TensorFloat32 | OperandType::TensorFloat16 => {
            Ok(Tensor::new(dims, Data::F32(v.into())))
        }
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            let (qmin, qmax) = q8_range(out.ty);
            let q = v
                .iter()
                .map(|&f| quantize_val(f, out.scale, out.zero_point, qmin, qmax))
                .collect();
            Ok(q8_tensor(out.ty, dims, q))
        }
        t => Err(ctx.err(format!("unsupported output type {}", t.name()))),
    }
}

/// ELU(input, alpha).
fn elu(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, x) = ctx.f32s(0)?;
    let alpha = ctx.scalar_f32(1)?;
    let v = x
        .iter()
        .map(|&v| if v < 0.0 { alpha * (v.exp() - 1.0) } else { v })
        .collect();
    Ok(vec![Tensor::new(d.to_vec(), Data::F32(v))])
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

    /// `op(a, b)` with activation `act` on inputs of dimensions `da` and `db`.
    fn binary(op: O, ty: T, (da, db): (&[u32], &[u32]), q: Option<[(f32, i32); 3]>) -> B {
        let mut b = B::new();
        let x = b.input(ty, da);
        let y = b.input(ty, db);
        let act = b.int(0);
        let dout = if da.len() >= db.len() { da } else { db };
        let o = b.output(ty, dout);
        if let Some([qa, qb, qo]) = q {
            b.q(x, qa.0, qa.1);
            b.q(y, qb.0, qb.1);
            b.q(o, qo.0, qo.1);
        }
        b.op(op, &[x, y, act], &[o]);
        b
    }

    /// A deterministic spread of values (a multiplicative hash per index).
    fn spread(n: usize, seed: u32) -> impl Iterator<Item = u32> {
        (0..n as u32).map(move |i| (i ^ seed).wrapping_mul(2_654_435_761) >> 8)
    }

    #[test]
    fn float_add_of_one_shape_is_the_elementwise_sum_at_any_thread_count() {
        // 140 000 elements: enough to split across threads.
        let n = 140_000;
        let a: Vec<f32> = spread(n, 1)
            .map(|v| (v % 2001) as f32 / 100.0 - 10.0)
            .collect();
        let c: Vec<f32> = spread(n, 2)
            .map(|v| (v % 1001) as f32 / 50.0 - 10.0)
            .collect();
        let dims = [1, 350, 400];
        let out = same_at_thread_counts(|| {
            let g = binary(O::Add, T::TensorFloat32, (&dims, &dims), None).g;
            run(g, &[fb(&a), fb(&c)]).0
        });
        let want: Vec<f32> = a.iter().zip(&c).map(|(x, y)| x + y).collect();
        assert_eq!(bf(&out), want);
    }

    #[test]
    fn quant8_add_of_one_shape_equals_the_broadcast_path_at_any_thread_count() {
        let n = 20_000;
        let q = Some([(0.05, 7), (0.11, -3), (0.09, 2)]);
        for (ty, op) in [
            (T::TensorQuant8Asymm, O::Add),
            (T::TensorQuant8AsymmSigned, O::Add),
            (T::TensorQuant8AsymmSigned, O::Sub),
        ] {
            let q = q.map(|q| {
                q.map(|(s, z)| {
                    (
                        s,
                        if ty == T::TensorQuant8Asymm {
                            z + 128
                        } else {
                            z
                        },
                    )
                })
            });
            let a: Vec<u8> = spread(n, 3).map(|v| v as u8).collect();
            let c: Vec<u8> = spread(n, 4).map(|v| (v >> 3) as u8).collect();
            let same = same_at_thread_counts(|| {
                let g = binary(op, ty, (&[100, 200], &[100, 200]), q).g;
                run(g, &[a.clone(), c.clone()]).0
            });
            // The same values with the second input one rank higher: the general broadcast
            // path (index stepping, values widened to i32 first).
            let g = binary(op, ty, (&[100, 200], &[1, 100, 200]), q).g;
            let broadcast = run(g, &[a.clone(), c.clone()]).0;
            assert_eq!(same, broadcast, "{ty:?} {op:?}");
        }
    }

    #[test]
    fn branch_free_requantization_equals_mbqm() {
        use crate::ops::quant::mbqm;
        let mut xs: Vec<i32> = vec![0, 1, -1, 2, -2, i32::MAX, i32::MIN, i32::MAX - 1];
        xs.extend((0..20_000u32).map(|i| i.wrapping_mul(2_654_435_761) as i32));
        xs.extend((0..20_000u32).map(|i| (i.wrapping_mul(40_503) as i32) >> (i % 31)));
        for m in [0, 1, 1 << 30, 1_300_000_007, i32::MAX] {
            for r in 0..=40u32 {
                for &x in &xs {
                    let shift = -(r as i32);
                    assert_eq!(super::mbqm_right(x, m, r), mbqm(x, m, shift), "{x} {m} {r}");
                }
            }
        }
    }

    /// The AVX2 kernel of 8-bit ADD / SUB of one shape against the scalar loop: every pair of
    /// input values for a few parameter sets, random data of lengths around the 16-element
    /// step for many more (scales and zero points of the inputs and the output, u8 and i8,
    /// ADD and SUB, activations NONE, RELU, RELU1, RELU6).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn quant8_add_avx2_kernel_writes_the_bytes_of_the_scalar_loop() {
        use super::{AddQ8, AddScales, Byte8};
        use crate::ops::qgemm::tests::Rng;
        use crate::ops::quant::act_range_q;
        if !is_x86_feature_detected!("avx2") {
            return;
        }

        /// `add` on `a` and `b` by both loops; the AVX2 one must cover the parameters.
        fn same<X: Byte8 + PartialEq + std::fmt::Debug>(add: &AddQ8, a: &[X], b: &[X]) {
            assert!(add.vector.is_some(), "not covered: {add:?}");
            let mut want = vec![X::from_i32(0x5a); a.len()];
            add.rows_generic(a, b, &mut want);
            let mut got = vec![X::from_i32(0x33); a.len()];
            // SAFETY: the CPU supports AVX2 (checked above).
            unsafe { add.rows_avx2(a, b, &mut got) };
            if got != want {
                let i = got.iter().zip(&want).position(|(g, w)| g != w).unwrap_or(0);
                panic!(
                    "element {i} of {}: {:?} ⊕ {:?} gave {:?}, not {:?} ({add:?})",
                    a.len(),
                    a[i],
                    b[i],
                    got[i],
                    want[i]
                );
            }
        }

        /// Bytes `a` and `b` as the type of `add` (`signed`: i8).
        fn check(add: &AddQ8, signed: bool, a: &[u8], b: &[u8]) {
            if signed {
                let w = |v: &[u8]| v.iter().map(|&x| x as i8).collect::<Vec<i8>>();
                same(add, &w(a), &w(b));
            } else {
                same(add, a, b);
            }
        }

        /// The kernel for scales `[sa, sb, so]`, zero points `zp` and activation `act`.
        fn make(signed: bool, sub: bool, sc: [f32; 3], zp: [i32; 3], act: i32) -> Option<AddQ8> {
            let (qmin, qmax) = if signed { (-128, 127) } else { (0, 255) };
            let p = AddScales::new(sc[0], sc[1], sc[2], sub);
            let (lo, hi) = act_range_q(act, sc[2], zp[2], qmin, qmax).ok()?;
            AddQ8::new(qmin, [-zp[0], -zp[1]], &p, zp[2], lo, hi)
        }

        let mut rng = Rng(0x2468_ace1);
        let random_params = |rng: &mut Rng, signed: bool| {
            let (qmin, qmax) = if signed { (-128, 127) } else { (0, 255) };
            // Scales 2^(e / 100), or for half of the sets powers of two (whose rescalings
            // often land exactly halfway: the rounding of ties).
            let step = if rng.range(0, 2) == 0 { 100.0 } else { 1.0 };
            let exp = |rng: &mut Rng, lo: i32, hi: i32| {
                let e = rng.range(lo, hi) as f32;
                2f32.powf(if step == 1.0 { e.round() } else { e / 100.0 })
            };
            let wide = |x: i32| if step == 1.0 { x } else { x * 100 };
            let (sa, sb) = (exp(rng, wide(-12), wide(4)), exp(rng, wide(-12), wide(4)));
            // Sometimes the same scales of the inputs, or one below 2^-18 of the other
            // (terms of a few units); an output scale near theirs, a tiny or a huge one
            // (outputs saturating or all zero).
            let sb = match rng.range(0, 5) {
                0 => sa,
                1 => sa * exp(rng, wide(-40), wide(-18)),
                _ => sb,
            };
            let so = sa.max(sb)
                * match rng.range(0, 5) {
                    0 => exp(rng, wide(-19), wide(-17)),
                    1 => 1e6,
                    _ => exp(rng, wide(-3), wide(3)),
                };
            let zp = [(); 3].map(|_| match rng.range(0, 4) {
                0 => qmin,
                1 => qmax,
                _ => rng.range(qmin, qmax),
            });
            ([sa, sb, so], zp, rng.range(0, 3))
        };
        let bytes = |rng: &mut Rng, n: usize| (0..n).map(|_| rng.next() as u8).collect::<Vec<u8>>();

        // Every pair of values (a = the high byte of the index, b the low one).
        let a: Vec<u8> = (0..=u16::MAX).map(|i| (i >> 8) as u8).collect();
        let b: Vec<u8> = (0..=u16::MAX).map(|i| i as u8).collect();
        let mut exhaustive = 0;
        for signed in [false, true] {
            for sub in [false, true] {
                let z = if signed { -128 } else { 0 };
                let fixed = [
                    ([0.5, 0.5, 0.5], [z + 128, z + 128, z + 128], 0),
                    ([0.02, 0.07, 0.05], [z + 3, z + 250, z + 100], 3),
                    ([1.0, 1.0 / 3.0, 1.5], [z + 200, z, z + 255], 1),
                    // Ties at the output's rounding shift (sums of odd values halved) and at
                    // the second input's (odd values halved).
                    ([1.0, 1.0, 2.0], [z + 128, z + 127, z + 128], 0),
                    (
                        [1.0, 2f32.powi(-20), 1.0 / 1024.0],
                        [z + 128, z + 100, z + 128],
                        0,
                    ),
                ];
                for (sc, zp, act) in fixed {
                    if let Some(add) = make(signed, sub, sc, zp, act) {
                        check(&add, signed, &a, &b);
                        exhaustive += 1;
                    }
                }
                for _ in 0..2 {
                    let (sc, zp, act) = random_params(&mut rng, signed);
                    if let Some(add) = make(signed, sub, sc, zp, act) {
                        check(&add, signed, &a, &b);
                        exhaustive += 1;
                    }
                }
            }
        }
        assert!(exhaustive >= 24, "{exhaustive} exhaustive sets");

        let mut random = 0;
        for i in 0..2000 {
            let (signed, sub) = (i % 2 == 1, i % 4 >= 2);
            let (sc, zp, act) = random_params(&mut rng, signed);
            let Some(add) = make(signed, sub, sc, zp, act) else {
                continue;
            };
            random += 1;
            for n in [0, 1, 15, 16, 17, 31, 33, 100] {
                let (a, b) = (bytes(&mut rng, n + 1), bytes(&mut rng, n + 1));
                // From an even and an odd start.
                check(&add, signed, &a[..n], &b[..n]);
                check(&add, signed, &a[1..], &b[1..]);
            }
        }
        assert!(random >= 1000, "{random} random sets");
    }

    #[test]
    fn quant8_add_with_one_scale_is_the_saturated_integer_sum() {
        // Scale 1 and zero point 0 everywhere: the rescaling is exact, the output x + y
        // clamped to 0..=255.
        let n = 1000;
        let a: Vec<u8> = spread(n, 5).map(|v| v as u8).collect();
        let c: Vec<u8> = spread(n, 6).map(|v| (v >> 4) as u8).collect();
        let q = Some([(1.0, 0); 3]);
        let g = binary(O::Add, T::TensorQuant8Asymm, (&[n as u32], &[n as u32]), q).g;
        let out = run(g, &[a.clone(), c.clone()]).0;
        let want: Vec<u8> = a
            .iter()
            .zip(&c)
            .map(|(&x, &y)| x.saturating_add(y))
            .collect();
        assert_eq!(out, want);
    }
}
