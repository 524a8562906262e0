//! Quantization math with the NN HAL (TFLite gemmlowp) rounding behaviour: fixed-point
//! multipliers, requantization and 8-bit operand reading.

use super::{KResult, OpCtx, q8_range};
use crate::model::OperandType;
use crate::tensor::Data;

/// gemmlowp SaturatingRoundingDoublingHighMul.
pub(crate) fn srdhm(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge: i64 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp RoundingDivideByPOT (round half away from zero).
pub(crate) fn rdbpot(x: i32, exponent: i32) -> i32 {
    let e = exponent.clamp(0, 31);
    let mask = ((1i64 << e) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> e) + i32::from(remainder > threshold)
}

/// TFLite MultiplyByQuantizedMultiplier: x * m * 2^shift with the HAL's rounding.
pub(crate) fn mbqm(x: i32, m: i32, shift: i32) -> i32 {
    let left = shift.clamp(0, 31);
    let right = (-shift).max(0);
    let xs = i64::from(x) << left;
    let xs = xs.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    rdbpot(srdhm(xs, m), right)
}

/// TFLite QuantizeMultiplier: `m ≈ q * 2^(shift-31)` with q in [2^30, 2^31).
pub(crate) fn quantize_multiplier(m: f64) -> (i32, i32) {
    if !m.is_finite() || m <= 0.0 {
        return (0, 0);
    }
    let (q, e) = frexp(m);
    fixed_multiplier(q, e)
}

/// `q · 2^e` (q in [0.5, 1)) as TFLite's fixed-point multiplier and shift.
fn fixed_multiplier(q: f64, mut e: i32) -> (i32, i32) {
    let mut q_fixed = (q * (1i64 << 31) as f64).round() as i64;
    if q_fixed == 1i64 << 31 {
        q_fixed /= 2;
        e += 1;
    }
    if e < -31 {
        return (0, 0);
    }
    if e > 30 {
        return (i32::MAX, 30);
    }
    (q_fixed as i32, e)
}

/// `x = q · 2^e` with q in [0.5, 1), for a finite `x > 0`, read from the bits (the 8-bit kernels
/// compute one multiplier per output channel on every execution).
fn frexp(x: f64) -> (f64, i32) {
    const EXP: u64 = 0x7ff << 52;
    let bits = x.to_bits();
    let biased = ((bits & EXP) >> 52) as i32;
    if biased == 0 {
        // Subnormal: scale into the normal range first.
        let (q, e) = frexp(x * 2f64.powi(64));
        return (q, e - 64);
    }
    (f64::from_bits((bits & !EXP) | (1022 << 52)), biased - 1022)
}

/// Quantized activation range for fused activation `act` on an output with `scale`/`zp`.
pub(crate) fn act_range_q(
    act: i32,
    scale: f32,
    zp: i32,
    qmin: i32,
    qmax: i32,
) -> Result<(i32, i32), String> {
    let q = |f: f32| zp.saturating_add((f / scale).round() as i32);
    Ok(match act {
        0 => (qmin, qmax),
        1 => (qmin.max(q(0.0)), qmax),
        2 => (qmin.max(q(-1.0)), qmax.min(q(1.0))),
        3 => (qmin.max(q(0.0)), qmax.min(q(6.0))),
        _ => return Err(format!("invalid fused activation {act}")),
    })
}

/// Float activation range for fused activation `act`.
pub(crate) fn act_range_f32(act: i32) -> Result<(f32, f32), String> {
    Ok(match act {
        0 => (f32::NEG_INFINITY, f32::INFINITY),
        1 => (0.0, f32::INFINITY),
        2 => (-1.0, 1.0),
        3 => (0.0, 6.0),
        _ => return Err(format!("invalid fused activation {act}")),
    })
}

/// Rounds half away from zero and saturates to `[lo, hi]`.
pub(crate) fn quantize_val(x: f32, scale: f32, zp: i32, lo: i32, hi: i32) -> i32 {
    let v = (x / scale).round();
    let v = if v.is_nan() { 0 } else { v as i32 };
    v.saturating_add(zp).clamp(lo, hi)
}

/// 8-bit values of input `i` minus their zero point, widened to `V` (i32 or i64) before the
/// subtraction.
pub(crate) fn centered<V>(ctx: &OpCtx<'_>, i: usize, zp: i32) -> KResult<(Vec<u32>, Vec<V>)>
where
    V: From<u8> + From<i8> + From<i32> + std::ops::Sub<Output = V>,
{
    let t = ctx.t(i)?;
    let v = match &t.data {
        Data::U8(v) => v.iter().map(|&x| V::from(x) - V::from(zp)).collect(),
        Data::I8(v) => v.iter().map(|&x| V::from(x) - V::from(zp)).collect(),
        _ => return Err(ctx.err(format!("input {i} is not 8-bit"))),
    };
    Ok((t.dims.clone(), v))
}

/// Requantization of an integer accumulator per output channel.
pub(crate) struct Requant {
    mult: Vec<(i32, i32)>,
    out_zp: i32,
    lo: i32,
    hi: i32,
    /// The output type (8-bit, signed or not).
    pub(crate) ty: OperandType,
}

impl Requant {
    /// For output 0, an input of scale `in_scale`, filter scales `f_scales` (one per output
    /// channel) and the fused activation at input `act`.
    pub(crate) fn new(
        ctx: &OpCtx<'_>,
        in_scale: f32,
        f_scales: &[f32],
        act: usize,
    ) -> KResult<Requant> {
        let out = ctx.out(0)?;
        let (qmin, qmax) = q8_range(out.ty);
        let (lo, hi) = ctx.act_q(act, qmin, qmax)?;
        let mult = f_scales
            .iter()
            .map(|&fs| {
                quantize_multiplier(f64::from(in_scale) * f64::from(fs) / f64::from(out.scale))
            })
            .collect();
        Ok(Requant {
            mult,
            out_zp: out.zero_point,
            lo,
            hi,
            ty: out.ty,
        })
    }

    /// A requantization from its parts: one real multiplier per channel (input scale × filter
    /// scale / output scale), the output zero point, the activation bounds and the type.
    #[cfg(test)]
    pub(crate) fn from_parts(
        multipliers: &[f64],
        out_zp: i32,
        (lo, hi): (i32, i32),
        ty: OperandType,
    ) -> Requant {
        Requant {
            mult: multipliers
                .iter()
                .map(|&m| quantize_multiplier(m))
                .collect(),
            out_zp,
            lo,
            hi,
            ty,
        }
    }

    /// Output channel `oc`'s fixed-point multiplier and shift ([`quantize_multiplier`]).
    pub(crate) fn multiplier(&self, oc: usize) -> Option<(i32, i32)> {
        self.mult.get(oc).copied()
    }

    /// The output zero point and the activation's bounds.
    pub(crate) fn output_range(&self) -> (i32, i32, i32) {
        (self.out_zp, self.lo, self.hi)
    }

    /// `acc` (clamped to i32) requantized for output channel `oc`.
    #[inline]
    pub(crate) fn apply(&self, acc: i64, oc: usize) -> i32 {
        let acc = acc.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let (m, s) = self.mult[oc];
        mbqm(acc, m, s)
            .saturating_add(self.out_zp)
            .clamp(self.lo, self.hi)
    }
}

/// 8-bit input `i` widened to i32 (its stored values, zero point not removed).
pub(crate) fn q8_values(ctx: &OpCtx<'_>, i: usize) -> KResult<(Vec<u32>, Vec<i32>)> {
    centered(ctx, i, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_multiplier_matches_tflite_for_half() {
        assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
        assert_eq!(quantize_multiplier(0.25), (1 << 30, -1));
        assert_eq!(quantize_multiplier(2.0), (1 << 30, 2));
    }

    #[test]
    fn multiply_by_quantized_multiplier_matches_gemmlowp_rounding() {
        let (m, s) = quantize_multiplier(0.5);
        assert_eq!(mbqm(3, m, s), 2);
        // gemmlowp's doubling high multiply rounds a negative tie towards zero
        assert_eq!(mbqm(-3, m, s), -1);
        assert_eq!(mbqm(-5, m, s), -2);
        assert_eq!(mbqm(4, m, s), 2);
        let (m, s) = quantize_multiplier(3.0);
        assert_eq!(mbqm(5, m, s), 15);
    }

    /// The former search for the exponent (log2, then halving or doubling into [0.5, 1)).
    fn quantize_multiplier_by_search(m: f64) -> (i32, i32) {
        if !m.is_finite() || m <= 0.0 {
            return (0, 0);
        }
        let mut e = m.log2().floor() as i32 + 1;
        let mut q = m / 2f64.powi(e);
        while q >= 1.0 {
            q /= 2.0;
            e += 1;
        }
        while q < 0.5 {
            q *= 2.0;
            e -= 1;
        }
        fixed_multiplier(q, e)
    }

    #[test]
    fn quantize_multiplier_reads_the_exponent_as_the_search_found_it() {
        let mut s = 0x1234_5678u64;
        let mut cases = vec![
            0.5,
            1.0,
            2.0,
            0.75,
            1.0 - 1e-12,
            2f64.powi(-31),
            2f64.powi(31),
        ];
        cases.extend([
            f64::MIN_POSITIVE,
            1e-300,
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
        ]);
        for _ in 0..20000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Mantissa bits at random, exponents from 2^-40 to 2^40.
            let e = (s % 81) as i32 - 40;
            let q = 1.0 + (s >> 12) as f64 / (1u64 << 52) as f64;
            cases.push(q * 2f64.powi(e));
        }
        for m in cases {
            assert_eq!(
                quantize_multiplier(m),
                quantize_multiplier_by_search(m),
                "{m:e}"
            );
        }
        // Subnormal (where the search would not end): far below 2^-31, so no multiplier.
        assert_eq!(quantize_multiplier(f64::MIN_POSITIVE / 8.0), (0, 0));
        // Worked by hand: 0.3 = 0.6 · 2^-1, 0.6 · 2^31 = 1288490188.8.
        assert_eq!(quantize_multiplier(0.3), (1_288_490_189, -1));
    }

    #[test]
    fn rounding_divide_by_pot_behaves_like_gemmlowp() {
        assert_eq!(rdbpot(5, 1), 3);
        assert_eq!(rdbpot(-5, 1), -3);
        assert_eq!(rdbpot(4, 2), 1);
        assert_eq!(rdbpot(-6, 2), -2);
    }
}
