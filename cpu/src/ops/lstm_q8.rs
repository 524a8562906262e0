//! QUANTIZED_LSTM (NNAPI 1.3): one LSTM step on int8 activations and weights with int16
//! gates and cell state, optional CIFG, peephole, layer normalization and projection, in the
//! integer arithmetic of NNAPI's and TFLite's reference (gate matmuls rescaled to Q3.12 by
//! effective scales, integer layer norm with a Newton–Raphson inverse square root, 16-bit
//! fixed-point sigmoid and tanh).
//!
//! Inputs: 0 input `[batch, input]` (QUANT8_ASYMM_SIGNED); 1–4 input-to-{input, forget, cell,
//! output} weights `[units, input]` and 5–8 recurrent-to-{...} `[units, output]`
//! (QUANT8_SYMM); 9–11 cell-to-{input, forget, output} `[units]` (QUANT16_SYMM); 12–15 gate
//! biases `[units]` (INT32); 16 projection weights `[output, units]` (QUANT8_SYMM); 17
//! projection bias `[output]` (INT32); 18 output state in `[batch, output]`
//! (QUANT8_ASYMM_SIGNED); 19 cell state in `[batch, units]` (QUANT16_SYMM, scale 2^k, k <= -9);
//! 20–23 layer-norm weights `[units]` (QUANT16_SYMM); 24 cell clip, 25 projection clip, 26–29
//! the input/forget/cell/output intermediate scales (FLOAT32); 30 hidden-state zero point
//! (INT32); 31 hidden-state scale (FLOAT32). Outputs: output state out, cell state out, output.

use super::super::quant::{mbqm, quantize_multiplier, srdhm};
use super::super::{KResult, OpCtx};
use super::omitted;
use super::q16::{fx_logistic, fx_rdbpot, fx_tanh, shape_is};
use crate::check::{Ck, Issue};
use crate::model::OperandType;
use crate::tensor::{Data, Tensor};

use OperandType as T;

const IN: usize = 0;
const W_X: usize = 1;
const W_H: usize = 5;
const PEEP: usize = 9;
const BIAS: usize = 12;
const PROJ_W: usize = 16;
const PROJ_B: usize = 17;
const H_IN: usize = 18;
const C_IN: usize = 19;
const LN: usize = 20;
const CELL_CLIP: usize = 24;
const PROJ_CLIP: usize = 25;
const INTER: usize = 26;
const HIDDEN_ZP: usize = 30;
const HIDDEN_SCALE: usize = 31;

/// Log2 of a power-of-two scale, when it is one.
fn log2_exact(s: f32) -> Option<i32> {
    if !(s > 0.0 && s.is_finite()) {
        return None;
    }
    let l = f64::from(s).log2();
    let r = l.round();
    ((l - r).abs() < 1e-3).then_some(r as i32)
}

/// Presence rules on inputs, given which are present.
fn presence(p: &dyn Fn(usize) -> bool) -> Result<(), String> {
    for (i, what) in [
        (IN, "input"),
        (W_X + 1, "input-to-forget weights"),
        (W_X + 2, "input-to-cell weights"),
        (W_X + 3, "input-to-output weights"),
        (W_H + 1, "recurrent-to-forget weights"),
        (W_H + 2, "recurrent-to-cell weights"),
        (W_H + 3, "recurrent-to-output weights"),
        (BIAS + 1, "forget gate bias"),
        (BIAS + 2, "cell gate bias"),
        (BIAS + 3, "output gate bias"),
        (H_IN, "output state in"),
        (C_IN, "cell state in"),
    ] {
        if !p(i) {
            return Err(format!("input {i} ({what}) is required"));
        }
    }
    if p(W_X) != p(W_H) {
        return Err(
            "input-to-input and recurrent-to-input weights must both be given or both omitted \
             (CIFG)"
                .into(),
        );
    }
    let cifg = !p(W_X);
    if cifg && (p(BIAS) || p(PEEP) || p(LN)) {
        return Err(
            "with CIFG the input gate bias, cell-to-input and input layer-norm weights must be \
             omitted"
                .into(),
        );
    }
    if !cifg && !p(BIAS) {
        return Err("the input gate bias is required without CIFG".into());
    }
    let peep_all = (cifg || p(PEEP)) && p(PEEP + 1) && p(PEEP + 2);
    let peep_none = !p(PEEP) && !p(PEEP + 1) && !p(PEEP + 2);
    if !peep_all && !peep_none {
        return Err("peephole weights must be all given or all omitted".into());
    }
    let ln_all = (cifg || p(LN)) && p(LN + 1) && p(LN + 2) && p(LN + 3);
    let ln_none = !p(LN) && !p(LN + 1) && !p(LN + 2) && !p(LN + 3);
    if !ln_all && !ln_none {
        return Err("layer-norm weights must be all given or all omitted".into());
    }
    if p(PROJ_B) && !p(PROJ_W) {
        return Err("a projection bias needs projection weights".into());
    }
    Ok(())
}

pub(crate) fn check(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[32], 3)?;
    c.is(IN, T::TensorQuant8AsymmSigned, "input")?;
    let types: [(usize, usize, OperandType, &str); 8] = [
        (W_X, 4, T::TensorQuant8Symm, "input weights"),
        (W_H, 4, T::TensorQuant8Symm, "recurrent weights"),
        (PEEP, 3, T::TensorQuant16Symm, "peephole weights"),
        (BIAS, 4, T::TensorInt32, "gate bias"),
        (PROJ_W, 1, T::TensorQuant8Symm, "projection weights"),
        (PROJ_B, 1, T::TensorInt32, "projection bias"),
        (LN, 4, T::TensorQuant16Symm, "layer-norm weights"),
        (H_IN, 1, T::TensorQuant8AsymmSigned, "output state in"),
    ];
    for (first, n, ty, what) in types {
        for i in first..first + n {
            if !omitted(c, i) {
                c.is(i, ty, what)?;
            }
        }
    }
    c.is(C_IN, T::TensorQuant16Symm, "cell state in")?;
    for i in [
        CELL_CLIP,
        PROJ_CLIP,
        INTER,
        INTER + 1,
        INTER + 2,
        INTER + 3,
        HIDDEN_SCALE,
    ] {
        c.is(i, T::Float32, "scale or clip")?;
    }
    c.is(HIDDEN_ZP, T::Int32, "hidden state zero point")?;
    presence(&|i| !omitted(c, i)).map_err(Issue::Invalid)?;
    for (i, what) in [(CELL_CLIP, "cell clip"), (PROJ_CLIP, "projection clip")] {
        if let Some(Data::F32(v)) = super::const_scalar(c, i)
            && (v[0].is_nan() || v[0] < 0.0)
        {
            return Err(Issue::Invalid(format!("{what} must be >= 0, is {}", v[0])));
        }
    }
    for i in [INTER, INTER + 1, INTER + 2, INTER + 3, HIDDEN_SCALE] {
        if let Some(Data::F32(v)) = super::const_scalar(c, i)
            && !(v[0] > 0.0 && v[0].is_finite())
        {
            return Err(Issue::Invalid(format!(
                "input {i} (intermediate or hidden state scale) must be > 0, is {}",
                v[0]
            )));
        }
    }
    if let Some(Data::I32(v)) = super::const_scalar(c, HIDDEN_ZP)
        && !(-128..=127).contains(&v[0])
    {
        return Err(Issue::Invalid(format!(
            "hidden state zero point {} outside [-128, 127]",
            v[0]
        )));
    }
    let cs = c.inp(C_IN)?.scale;
    match log2_exact(cs) {
        Some(k) if k <= -9 => {}
        _ => {
            return Err(Issue::Invalid(format!(
                "the cell state scale ({cs}) must be a power of two no larger than 2^-9"
            )));
        }
    }
    for (k, ty, what) in [
        (0, T::TensorQuant8AsymmSigned, "output state out"),
        (1, T::TensorQuant16Symm, "cell state out"),
        (2, T::TensorQuant8AsymmSigned, "output"),
    ] {
        if c.out(k)?.ty != ty {
            return Err(Issue::Invalid(format!(
                "output {k} ({what}) must be {}",
                ty.name()
            )));
        }
    }
    Ok(())
}

fn i8s<'a>(ctx: &OpCtx<'a>, i: usize, want: &[usize], what: &str) -> KResult<&'a [i8]> {
    let t = ctx.t(i)?;
    shape_is(ctx, i, &t.dims, want, what)?;
    match &t.data {
        Data::I8(v) if v.len() == want.iter().product::<usize>() => Ok(v),
        _ => Err(ctx.err(format!("input {i} ({what}) is not 8-bit data of {want:?}"))),
    }
}

fn i16s<'a>(ctx: &OpCtx<'a>, i: usize, want: &[usize], what: &str) -> KResult<&'a [i16]> {
    let t = ctx.t(i)?;
    shape_is(ctx, i, &t.dims, want, what)?;
    match &t.data {
        Data::I16(v) if v.len() == want.iter().product::<usize>() => Ok(v),
        _ => Err(ctx.err(format!("input {i} ({what}) is not 16-bit data of {want:?}"))),
    }
}

fn i32s<'a>(ctx: &OpCtx<'a>, i: usize, want: &[usize], what: &str) -> KResult<&'a [i32]> {
    let (d, v) = ctx.i32s(i)?;
    shape_is(ctx, i, d, want, what)?;
    if v.len() != want.iter().product::<usize>() {
        return Err(ctx.err(format!("input {i} ({what}) data does not match {d:?}")));
    }
    Ok(v)
}

/// `(multiplier, shift)` of a real scale.
fn qm(s: f32) -> (i32, i32) {
    quantize_multiplier(f64::from(s))
}

/// int32 saturating multiplication by 2^e (e > 0).
fn shl_sat32(x: i32, e: u32) -> i32 {
    let threshold = (1i32 << (31 - e)) - 1;
    if x > threshold {
        i32::MAX
    } else if x < -threshold {
        i32::MIN
    } else {
        x << e
    }
}

/// 1/sqrt(input) as a multiplier and (left) shift, by Newton–Raphson in Q3.28.
fn inv_sqrt(mut input: i32) -> (i32, i32) {
    if input <= 1 {
        return (i32::MAX, 0);
    }
    let mut shift: i32 = 11;
    while input >= (1 << 29) {
        input /= 4;
        shift += 1;
    }
    let max_left_shift_bits = (input as u32).leading_zeros() - 1;
    let pairs = max_left_shift_bits / 2 - 1;
    shift -= pairs as i32;
    input <<= 2 * pairs;
    let x_in = input >> 1;
    let half_input = fx_rdbpot(x_in, 1);
    let half_three = (1 << 28) + (1 << 27);
    let mut x: i32 = 1 << 28;
    for _ in 0..5 {
        let x3 = shl_sat32(srdhm(srdhm(x, x), x), 6);
        x = shl_sat32(srdhm(half_three, x).wrapping_sub(srdhm(half_input, x3)), 3);
    }
    let mut r = srdhm(x, 1_518_500_250);
    if shift < 0 {
        r <<= -shift;
        shift = 0;
    }
    (r, -shift)
}

/// Integer layer normalization of each batch row of `v` (`n` values), in place.
fn layer_norm(v: &mut [i16], n: usize, w: &[i16], bias: &[i32], scale: (i32, i32), limit: i32) {
    if n == 0 {
        return;
    }
    for row in v.chunks_exact_mut(n) {
        let mut sum: i64 = 0;
        let mut sum_sq: i64 = 0;
        for &x in row.iter() {
            sum += i64::from(x);
            sum_sq += i64::from(x) * i64::from(x);
        }
        let mean = (sum * 1024 / n as i64) as i32;
        let temp = i64::from((1i32 << 20) / n as i32);
        let variance = sum_sq * temp - i64::from(mean) * i64::from(mean);
        let mut v2 = (variance / (1 << 20)) as i32;
        if v2 < 1 {
            v2 = limit;
        }
        let (ia, ib) = inv_sqrt(v2);
        for (j, x) in row.iter_mut().enumerate() {
            let shifted = (1024 * i32::from(*x)).wrapping_sub(mean);
            let rescaled = mbqm(shifted, ia, ib);
            let v3 = i64::from(rescaled) * i64::from(w[j]) + i64::from(bias[j]);
            let v4 = (if v3 > 0 { v3 + 512 } else { v3 - 512 }) / 1024;
            let v4 = v4.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
            let v5 = mbqm(v4, scale.0, scale.1 + 12);
            *x = v5.clamp(-32768, 32767) as i16;
        }
    }
}

/// `out[b][r] = sat16(out[b][r] + mbqm(bias[r] + Σ x[b][c]·w[r][c], m))` over a batch.
fn matmul_acc(
    x: &[i8],
    n_in: usize,
    w: &[i8],
    bias: &[i32],
    m: (i32, i32),
    out: &mut [i16],
    n_out: usize,
) {
    if n_out == 0 {
        return;
    }
    for (b, ob) in out.chunks_exact_mut(n_out).enumerate() {
        let xb = &x[b * n_in..(b + 1) * n_in];
        for (r, o) in ob.iter_mut().enumerate() {
            let mut acc = bias[r];
            for (&a, &wv) in xb.iter().zip(&w[r * n_in..(r + 1) * n_in]) {
                acc = acc.wrapping_add(i32::from(a) * i32::from(wv));
            }
            let v = mbqm(acc, m.0, m.1) + i32::from(*o);
            *o = v.clamp(-32768, 32767) as i16;
        }
    }
}

/// `-zp · Σ_c w[r][c]` (+ `bias[r]`): the zero-point term of a weight row.
fn zp_bias(w: &[i8], rows: usize, cols: usize, zp: i32, bias: Option<&[i32]>) -> Vec<i32> {
    (0..rows)
        .map(|r| {
            let s: i32 = if cols == 0 {
                0
            } else {
                w[r * cols..(r + 1) * cols]
                    .iter()
                    .map(|&x| i32::from(x))
                    .sum()
            };
            bias.map_or(0, |b| b[r])
                .wrapping_add(s.wrapping_mul(zp.wrapping_neg()))
        })
        .collect()
}

pub(crate) fn run(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    presence(&|i| ctx.has(i)).map_err(|e| ctx.err(e))?;
    let x_t = ctx.t(IN)?;
    if x_t.dims.len() != 2 {
        return Err(ctx.err(format!("input 0 (input) must be 2-D, has {:?}", x_t.dims)));
    }
    let (batch, n_in) = (x_t.dims[0] as usize, x_t.dims[1] as usize);
    let wo = ctx.t(W_X + 3)?;
    if wo.dims.len() != 2 {
        return Err(ctx.err("input 4 (input-to-output weights) must be 2-D"));
    }
    let units = wo.dims[0] as usize;
    let ro = ctx.t(W_H + 3)?;
    if ro.dims.len() != 2 {
        return Err(ctx.err("input 8 (recurrent-to-output weights) must be 2-D"));
    }
    let n_out = ro.dims[1] as usize;
    let bu = batch
        .checked_mul(units)
        .filter(|&n| n <= 1 << 28)
        .ok_or_else(|| ctx.err("batch x units too large"))?;
    let bo = batch
        .checked_mul(n_out)
        .filter(|&n| n <= 1 << 28)
        .ok_or_else(|| ctx.err("batch x output size too large"))?;

    let x = i8s(ctx, IN, &[batch, n_in], "input")?;
    let h = i8s(ctx, H_IN, &[batch, n_out], "output state in")?;
    let c_prev = i16s(ctx, C_IN, &[batch, units], "cell state in")?;
    let gates = ["input", "forget", "cell", "output"];
    let mut wx = [None; 4];
    let mut wh = [None; 4];
    let mut bias = [None; 4];
    let mut ln = [None; 4];
    for (g, name) in gates.iter().enumerate() {
        if ctx.has(W_X + g) {
            wx[g] = Some(i8s(
                ctx,
                W_X + g,
                &[units, n_in],
                &format!("input-to-{name} weights"),
            )?);
            wh[g] = Some(i8s(
                ctx,
                W_H + g,
                &[units, n_out],
                &format!("recurrent-to-{name} weights"),
            )?);
        }
        if ctx.has(BIAS + g) {
            bias[g] = Some(i32s(ctx, BIAS + g, &[units], &format!("{name} gate bias"))?);
        }
        if ctx.has(LN + g) {
            ln[g] = Some(i16s(
                ctx,
                LN + g,
                &[units],
                &format!("{name} layer-norm weights"),
            )?);
        }
    }
    let mut peep = [None; 3];
    for (k, name) in ["input", "forget", "output"].iter().enumerate() {
        if ctx.has(PEEP + k) {
            peep[k] = Some(i16s(
                ctx,
                PEEP + k,
                &[units],
                &format!("cell-to-{name} weights"),
            )?);
        }
    }
    let proj_w = if ctx.has(PROJ_W) {
        Some(i8s(ctx, PROJ_W, &[n_out, units], "projection weights")?)
    } else {
        if n_out != units {
            return Err(ctx.err(format!(
                "without projection the output size ({n_out}) must equal num_units ({units})"
            )));
        }
        None
    };
    let proj_b = if ctx.has(PROJ_B) {
        Some(i32s(ctx, PROJ_B, &[n_out], "projection bias")?)
    } else {
        None
    };
    let cifg = wx[0].is_none();
    let use_ln = ln[1].is_some();

    let sc = |i: usize| -> KResult<f32> { Ok(ctx.operand(i)?.scale) };
    let x_scale = sc(IN)?;
    let x_zp = ctx.operand(IN)?.zero_point;
    let h_scale = sc(H_IN)?;
    let h_zp = ctx.operand(H_IN)?.zero_point;
    let cell_scale = sc(C_IN)?;
    let cell_shift = log2_exact(cell_scale)
        .filter(|&k| k <= -9)
        .ok_or_else(|| ctx.err("the cell state scale must be a power of two <= 2^-9"))?;
    let cell_clip = ctx.scalar_f32(CELL_CLIP)?;
    let proj_clip = ctx.scalar_f32(PROJ_CLIP)?;
    let inter = [
        ctx.scalar_f32(INTER)?,
        ctx.scalar_f32(INTER + 1)?,
        ctx.scalar_f32(INTER + 2)?,
        ctx.scalar_f32(INTER + 3)?,
    ];
    let hidden_zp = ctx.scalar_i32(HIDDEN_ZP)?;
    let hidden_scale = ctx.scalar_f32(HIDDEN_SCALE)?;
    for (v, what) in [(cell_clip, "cell clip"), (proj_clip, "projection clip")] {
        if v.is_nan() || v < 0.0 {
            return Err(ctx.err(format!("{what} must be >= 0, is {v}")));
        }
    }
    if inter
        .iter()
        .chain([&hidden_scale])
        .any(|s| !(*s > 0.0 && s.is_finite()))
    {
        return Err(ctx.err("intermediate and hidden state scales must be > 0"));
    }
    if !(-128..=127).contains(&hidden_zp) {
        return Err(ctx.err(format!(
            "hidden state zero point {hidden_zp} outside [-128, 127]"
        )));
    }

    // One gate's pre-activation (Q3.12): input and recurrent matmuls, peephole, layer norm.
    let gate = |g: usize, peep_w: Option<&[i16]>, cell: &[i16]| -> KResult<Vec<i16>> {
        let (Some(wxg), Some(whg)) = (wx[g], wh[g]) else {
            return Err(ctx.err("internal: gate weights missing"));
        };
        let mut out = vec![0i16; bu];
        let wsx = sc(W_X + g)?;
        let wsh = sc(W_H + g)?;
        // Without layer normalization the gate bias joins the input matmul.
        let b = if use_ln { None } else { bias[g] };
        let bx = zp_bias(wxg, units, n_in, x_zp, b);
        let bh = zp_bias(whg, units, n_out, h_zp, None);
        matmul_acc(
            x,
            n_in,
            wxg,
            &bx,
            qm(wsx * x_scale / inter[g]),
            &mut out,
            units,
        );
        matmul_acc(
            h,
            n_out,
            whg,
            &bh,
            qm(wsh * h_scale / inter[g]),
            &mut out,
            units,
        );
        if let Some(pw) = peep_w {
            let k = if g == 0 {
                PEEP
            } else if g == 1 {
                PEEP + 1
            } else {
                PEEP + 2
            };
            let s = (2f64.powi(cell_shift) * f64::from(sc(k)?) / f64::from(inter[g])) as f32;
            let m = qm(s);
            if units > 0 {
                for (ob, cb) in out.chunks_exact_mut(units).zip(cell.chunks_exact(units)) {
                    for ((o, &c), &p) in ob.iter_mut().zip(cb).zip(pw) {
                        let v = mbqm(i32::from(p) * i32::from(c), m.0, m.1) + i32::from(*o);
                        *o = v.clamp(-32768, 32767) as i16;
                    }
                }
            }
        }
        if use_ln {
            let (Some(lw), Some(lb)) = (ln[g], bias[g]) else {
                return Err(ctx.err("internal: layer-norm weights missing"));
            };
            let ls = sc(LN + g)?;
            let limit = ((10000.0 * ls) as i32).max(1);
            layer_norm(&mut out, units, lw, lb, qm(ls), limit);
        }
        Ok(out)
    };

    let fg: Vec<i16> = gate(1, peep[1], c_prev)?
        .into_iter()
        .map(|v| fx_logistic(v, 3))
        .collect();
    let cg: Vec<i16> = gate(2, None, c_prev)?
        .into_iter()
        .map(|v| fx_tanh(v, 3))
        .collect();
    let ig: Vec<i16> = if cifg {
        fg.iter().map(|&f| 32767 - f).collect()
    } else {
        gate(0, peep[0], c_prev)?
            .into_iter()
            .map(|v| fx_logistic(v, 3))
            .collect()
    };
    let cell_clip_q: i16 = if cell_clip > 0.0 {
        (cell_clip / cell_scale).clamp(-32768.0, 32767.0) as i16
    } else {
        0
    };
    let cshift = (30 + cell_shift) as u32;
    let mut c_new = vec![0i16; bu];
    for k in 0..bu {
        let a = fx_rdbpot(i32::from(fg[k]) * i32::from(c_prev[k]), 15);
        let b = fx_rdbpot(i32::from(ig[k]) * i32::from(cg[k]), cshift);
        let mut v = (a + b).clamp(-32768, 32767) as i16;
        if cell_clip_q > 0 {
            v = v.clamp(-cell_clip_q, cell_clip_q);
        }
        c_new[k] = v;
    }
    let og: Vec<i16> = gate(3, peep[2], &c_new)?
        .into_iter()
        .map(|v| fx_logistic(v, 3))
        .collect();
    let hm = qm((2f64.powi(-15) / f64::from(hidden_scale) * 2f64.powi(-15)) as f32);
    let ib = cell_shift + 15;
    let hidden: Vec<i8> = (0..bu)
        .map(|k| {
            let t = fx_tanh(c_new[k], ib);
            let v = mbqm(i32::from(og[k]) * i32::from(t), hm.0, hm.1) + hidden_zp;
            v.clamp(-128, 127) as i8
        })
        .collect();
    let out: Vec<i8> = match proj_w {
        Some(pw) => {
            let pws = sc(PROJ_W)?;
            let m = qm(pws * hidden_scale / h_scale);
            let pb = zp_bias(pw, n_out, units, hidden_zp, proj_b);
            let clip: i8 = if proj_clip > 0.0 {
                (proj_clip / pws).clamp(-128.0, 127.0) as i8
            } else {
                0
            };
            let mut o = vec![0i8; bo];
            if n_out > 0 {
                for (bi, ob) in o.chunks_exact_mut(n_out).enumerate() {
                    let hb = &hidden[bi * units..(bi + 1) * units];
                    for (r, oo) in ob.iter_mut().enumerate() {
                        let mut acc = pb[r];
                        for (&a, &b) in hb.iter().zip(&pw[r * units..(r + 1) * units]) {
                            acc = acc.wrapping_add(i32::from(a) * i32::from(b));
                        }
                        let mut v = (mbqm(acc, m.0, m.1) + h_zp).clamp(-128, 127) as i8;
                        if clip > 0 {
                            v = v.clamp(-clip, clip);
                        }
                        *oo = v;
                    }
                }
            }
            o
        }
        None => hidden,
    };
    let od = vec![batch as u32, n_out as u32];
    Ok(vec![
        Tensor::new(od.clone(), Data::I8(out.clone().into())),
        Tensor::new(vec![batch as u32, units as u32], Data::I16(c_new.into())),
        Tensor::new(od, Data::I8(out.into())),
    ])
}
