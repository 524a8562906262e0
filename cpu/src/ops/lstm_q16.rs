//! QUANTIZED_16BIT_LSTM: one LSTM step on 8-bit activations and weights with a 16-bit cell
//! state, in the 16-bit fixed-point arithmetic of NNAPI's reference (gemmlowp's `FixedPoint`
//! on int16: logistic and tanh by exp barrel shifting and Newton–Raphson division).
//!
//! Inputs: 0 input `[batches, input_size]` (QUANT8_ASYMM, scale 1/128, zero point 128);
//! 1–4 input-to-{input, forget, cell, output} weights `[output_size, input_size]`; 5–8
//! recurrent-to-{...} weights `[output_size, output_size]` (QUANT8_ASYMM, one scale and zero
//! point for all eight); 9–12 gate biases `[output_size]` (TENSOR_INT32, scale = weights
//! scale / 128, zero point 0); 13 previous cell state `[batches, output_size]`
//! (QUANT16_SYMM, scale 2^-11, zero point 0); 14 previous output `[batches, output_size]`
//! (QUANT8_ASYMM, 1/128, 128). Outputs: 0 cell state out (as input 13), 1 output (as 14).

use super::super::quant::{mbqm, quantize_multiplier};
use super::super::{KResult, OpCtx, count};
use crate::check::{Ck, Issue};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

use OperandType as T;

/// Fixed-point helpers on int16 raw values; `ib` arguments are integer bits (Qib.(15-ib)).
mod fx {
    pub(crate) fn srdhm(a: i16, b: i16) -> i16 {
        if a == i16::MIN && b == i16::MIN {
            return i16::MAX;
        }
        let ab = i32::from(a) * i32::from(b);
        let nudge: i32 = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
        ((ab + nudge) / (1 << 15)) as i16
    }

    /// Rounding (half away from zero) arithmetic right shift.
    pub(crate) fn rdbpot(x: i32, e: u32) -> i32 {
        super::super::super::quant::rdbpot(x, e as i32)
    }

    /// Multiplies by 2^e, saturating for e > 0 and rounding for e < 0.
    pub(crate) fn mul_pot(x: i16, e: i32) -> i16 {
        if e > 0 {
            let threshold = (1i32 << (15 - e)) - 1;
            let v = i32::from(x);
            if v > threshold {
                i16::MAX
            } else if v < -threshold {
                i16::MIN
            } else {
                (v << e) as i16
            }
        } else if e < 0 {
            rdbpot(i32::from(x), e.unsigned_abs()) as i16
        } else {
            x
        }
    }

    fn sat_add(a: i16, b: i16) -> i16 {
        a.saturating_add(b)
    }

    fn half_sum(a: i16, b: i16) -> i16 {
        let s = i32::from(a) + i32::from(b);
        let sign = if s >= 0 { 1 } else { -1 };
        ((s + sign) / 2) as i16
    }

    /// A constant given as a 32-bit raw value, in 16 bits.
    fn k(raw32: i32) -> i16 {
        rdbpot(raw32, 16) as i16
    }

    const ONE_F0: i16 = i16::MAX;
    const ONE_F2: i16 = 1 << 13;

    /// exp(a) for a in [-1/4, 0), Q0.15.
    fn exp_quarter(a: i16) -> i16 {
        let constant_term = k(1_895_147_668);
        let one_third = k(715_827_883);
        let x = a.wrapping_add(1 << 12);
        let x2 = srdhm(x, x);
        let x3 = srdhm(x2, x);
        let x4 = srdhm(x2, x2);
        let x4_over_4 = mul_pot(x4, -2);
        let t = mul_pot(
            srdhm(x4_over_4.wrapping_add(x3), one_third).wrapping_add(x2),
            -1,
        );
        sat_add(constant_term, srdhm(constant_term, x.wrapping_add(t)))
    }

    /// exp(a) for a <= 0 in Q`ib`, result Q0.15.
    pub(crate) fn exp_neg(a: i16, ib: i32) -> i16 {
        let frac = 15 - ib;
        let quarter: i16 = 1 << (frac - 2);
        let mask = quarter - 1;
        let a_mod = (a & mask).wrapping_sub(quarter);
        let mut result = exp_quarter(mul_pot(a_mod, ib));
        let remainder = a_mod.wrapping_sub(a);
        for (exponent, mult) in [
            (-2, 1_672_461_947),
            (-1, 1_302_514_674),
            (0, 790_015_084),
            (1, 290_630_308),
            (2, 39_332_535),
            (3, 720_401),
            (4, 242),
        ] {
            if ib > exponent {
                let shift = frac + exponent;
                if (i32::from(remainder) & (1 << shift)) != 0 {
                    result = srdhm(result, k(mult));
                }
            }
        }
        if ib > 5 {
            // Below -32 the result is 0.
            let clamp = k(-(1 << (36 - ib)));
            if a < clamp {
                result = 0;
            }
        }
        if a == 0 { ONE_F0 } else { result }
    }

    /// Newton–Raphson reciprocal of (1 + a)/2 for a in Q0.15 (0, 1), result in Q2.13.
    fn nr_reciprocal(a: i16) -> i16 {
        let half_den = half_sum(a, ONE_F0);
        let c48_17 = k(1_515_870_810);
        let cneg32_17 = k(-1_010_580_540);
        let mut x = c48_17.wrapping_add(srdhm(half_den, cneg32_17));
        for _ in 0..3 {
            let hdx = srdhm(half_den, x);
            let one_minus = ONE_F2.wrapping_sub(hdx);
            x = x.wrapping_add(mul_pot(srdhm(x, one_minus), 2));
        }
        x
    }

    /// 1 / (1 + a) for a in (0, 1), Q0.15.
    fn one_over_one_plus(a: i16) -> i16 {
        mul_pot(nr_reciprocal(a), 1)
    }

    /// (1 - a) / (1 + a) for a in (0, 1), Q0.15.
    fn one_minus_over_one_plus(a: i16) -> i16 {
        mul_pot(nr_reciprocal(a).wrapping_sub(ONE_F2), 2)
    }

    /// tanh of a Q`ib` value, Q0.15.
    pub(crate) fn tanh(a: i16, ib: i32) -> i16 {
        if a == 0 {
            return 0;
        }
        let neg = a < 0;
        let n = if neg { a } else { a.wrapping_neg() };
        let t = one_minus_over_one_plus(exp_neg(n, ib + 1));
        if neg { t.wrapping_neg() } else { t }
    }

    /// logistic of a Q`ib` value, Q0.15.
    pub(crate) fn logistic(a: i16, ib: i32) -> i16 {
        if a == 0 {
            return k(1 << 30);
        }
        let pos = a > 0;
        let abs = if pos { a } else { a.wrapping_neg() };
        let rp = one_over_one_plus(exp_neg(abs.wrapping_neg(), ib));
        if pos { rp } else { ONE_F0.wrapping_sub(rp) }
    }

    pub(crate) fn sat_add_pub(a: i16, b: i16) -> i16 {
        sat_add(a, b)
    }
}

pub(super) use fx::{logistic as fx_logistic, rdbpot as fx_rdbpot, tanh as fx_tanh};

/// The fixed quantization of the activations (input, previous and new output).
const ACT_SCALE: f32 = 1.0 / 128.0;
const ACT_ZP: i32 = 128;
/// The fixed quantization of the cell state: 4 integer bits in 16.
const STATE_SCALE: f32 = 1.0 / 2048.0;

pub(crate) fn check(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[15], 2)?;
    let bad = |m: String| Err(Issue::Invalid(m));
    c.is(0, T::TensorQuant8Asymm, "input")?;
    for i in 1..=8 {
        c.is(i, T::TensorQuant8Asymm, "weights")?;
    }
    for i in 9..=12 {
        c.is(i, T::TensorInt32, "gate bias")?;
    }
    c.is(13, T::TensorQuant16Symm, "previous cell state")?;
    c.is(14, T::TensorQuant8Asymm, "previous output")?;
    for (i, what) in [(0, "input"), (14, "previous output")] {
        let o = c.inp(i)?;
        if o.scale != ACT_SCALE || o.zero_point != ACT_ZP {
            return bad(format!(
                "input {i} ({what}) must have scale 1/128 and zero point 128"
            ));
        }
    }
    let w = c.inp(1)?;
    for i in 2..=8 {
        let o = c.inp(i)?;
        if o.scale != w.scale || o.zero_point != w.zero_point {
            return bad(format!(
                "input {i} (weights) must have the scale and zero point of input 1"
            ));
        }
    }
    let bias_scale = w.scale / 128.0;
    for i in 9..=12 {
        let o = c.inp(i)?;
        if o.scale != bias_scale || o.zero_point != 0 {
            return bad(format!(
                "input {i} (gate bias) must have scale weights scale / 128 ({bias_scale}) and \
                 zero point 0"
            ));
        }
    }
    let s = c.inp(13)?;
    if s.scale != STATE_SCALE || s.zero_point != 0 {
        return bad("input 13 (previous cell state) must have scale 2^-11 and zero point 0".into());
    }
    let (o0, o1) = (c.out(0)?, c.out(1)?);
    if o0.ty != T::TensorQuant16Symm || o0.scale != STATE_SCALE || o0.zero_point != 0 {
        return bad(
            "output 0 (cell state out) must be TENSOR_QUANT16_SYMM with scale 2^-11 and zero \
             point 0"
                .into(),
        );
    }
    if o1.ty != T::TensorQuant8Asymm || o1.scale != ACT_SCALE || o1.zero_point != ACT_ZP {
        return bad(
            "output 1 (output) must be TENSOR_QUANT8_ASYMM with scale 1/128 and zero point 128"
                .into(),
        );
    }
    Ok(())
}

fn u8s<'a>(ctx: &OpCtx<'a>, i: usize, want: [usize; 2], what: &str) -> KResult<&'a [u8]> {
    let t = ctx.t(i)?;
    shape_is(ctx, i, &t.dims, &want, what)?;
    match &t.data {
        Data::U8(v) if v.len() == want[0] * want[1] => Ok(v),
        _ => Err(ctx.err(format!("input {i} ({what}) is not 8-bit data of {want:?}"))),
    }
}

/// Input `i`'s dimensions `d` must be `want`.
pub(super) fn shape_is(
    ctx: &OpCtx<'_>,
    i: usize,
    d: &[u32],
    want: &[usize],
    what: &str,
) -> KResult<()> {
    if d.len() != want.len() || d.iter().zip(want).any(|(&a, &b)| a as usize != b) {
        return Err(ctx.err(format!(
            "input {i} ({what}) must have shape {want:?}, has {d:?}"
        )));
    }
    Ok(())
}

pub(crate) fn run(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let x = ctx.t(0)?;
    if x.dims.len() != 2 {
        return Err(ctx.err(format!("input 0 (input) must be 2-D, has {:?}", x.dims)));
    }
    let (batches, n_in) = (x.dims[0] as usize, x.dims[1] as usize);
    let prev = ctx.t(14)?;
    if prev.dims.len() != 2 || prev.dims[0] as usize != batches {
        return Err(ctx.err(format!(
            "input 14 (previous output) must be [{batches}, output_size], has {:?}",
            prev.dims
        )));
    }
    let n_out = prev.dims[1] as usize;
    let x = u8s(ctx, 0, [batches, n_in], "input")?;
    let h = u8s(ctx, 14, [batches, n_out], "previous output")?;
    let names = ["input", "forget", "cell", "output"];
    let mut wx = Vec::with_capacity(4);
    let mut wh = Vec::with_capacity(4);
    let mut bias = Vec::with_capacity(4);
    for (g, name) in names.iter().enumerate() {
        wx.push(u8s(
            ctx,
            1 + g,
            [n_out, n_in],
            &format!("input-to-{} weights", name),
        )?);
        wh.push(u8s(
            ctx,
            5 + g,
            [n_out, n_out],
            &format!("recurrent-to-{} weights", name),
        )?);
        let (d, b) = ctx.i32s(9 + g)?;
        shape_is(ctx, 9 + g, d, &[n_out], &format!("{} gate bias", name))?;
        if b.len() != n_out {
            return Err(ctx.err(format!("input {} data does not match {d:?}", 9 + g)));
        }
        bias.push(b);
    }
    let st = ctx.t(13)?;
    shape_is(ctx, 13, &st.dims, &[batches, n_out], "previous cell state")?;
    let Data::I16(c_prev) = &st.data else {
        return Err(ctx.err("input 13 (previous cell state) is not 16-bit data"));
    };
    let n = count(ctx, &st.dims)?;
    if c_prev.len() != n {
        return Err(ctx.err("input 13 (previous cell state) data does not match its shape"));
    }
    let w_op = ctx.operand(1)?;
    let zp = w_op.zero_point;
    let bias_scale = ctx.operand(9)?.scale;
    let (mult, shift) = quantize_multiplier(4096.0 * f64::from(bias_scale));

    let mut c_out = vec![0i16; n];
    let mut out = vec![0u8; n];
    let mut acc = [0i16; 4];
    for b in 0..batches {
        let xb = &x[b * n_in..(b + 1) * n_in];
        let hb = &h[b * n_out..(b + 1) * n_out];
        for c in 0..n_out {
            for g in 0..4 {
                let mut a = bias[g][c];
                let rx = &wx[g][c * n_in..(c + 1) * n_in];
                for (&xv, &wv) in xb.iter().zip(rx) {
                    a = a.wrapping_add((i32::from(xv) - 128) * (i32::from(wv) - zp));
                }
                let rh = &wh[g][c * n_out..(c + 1) * n_out];
                for (&hv, &wv) in hb.iter().zip(rh) {
                    a = a.wrapping_add((i32::from(hv) - 128) * (i32::from(wv) - zp));
                }
                acc[g] = mbqm(a, mult, shift).clamp(-32768, 32767) as i16;
            }
            // Gate pre-activations are Q3.12; gate outputs Q0.15; the state is Q4.11.
            let ig = fx::logistic(acc[0], 3);
            let fg = fx::logistic(acc[1], 3);
            let mg = fx::tanh(acc[2], 3);
            let og = fx::logistic(acc[3], 3);
            let i_times_m = fx::srdhm(ig, mg);
            let prev_times_f = fx::srdhm(fg, c_prev[b * n_out + c]);
            let new_state = fx::sat_add_pub(fx::mul_pot(i_times_m, -4), prev_times_f);
            let state_q3 = fx::mul_pot(new_state, 1);
            let activ = fx::srdhm(og, fx::tanh(state_q3, 3));
            let o = fx::rdbpot(i32::from(activ), 8).clamp(-128, 127);
            c_out[b * n_out + c] = new_state;
            out[b * n_out + c] = (128 + o) as u8;
        }
    }
    let dims = st.dims.clone();
    Ok(vec![
        Tensor::new(dims.clone(), Data::I16(c_out.into())),
        Tensor::new(dims, Data::U8(out.into())),
    ])
}

#[cfg(test)]
pub(super) fn logistic_q3(a: i16) -> i16 {
    fx::logistic(a, 3)
}

#[cfg(test)]
pub(super) fn tanh_q3(a: i16) -> i16 {
    fx::tanh(a, 3)
}
