//! The LSTM family on float tensors (TENSOR_FLOAT32, and TENSOR_FLOAT16 widened to f32):
//! LSTM (one time step, the 23-input form of NNAPI 1.0/1.1 and the 27-input form with layer
//! normalization of 1.2), UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM;
//! QUANTIZED_16BIT_LSTM is in `lstm_q16.rs`, QUANTIZED_LSTM in `lstm_q8.rs`.
//!
//! One cell serves all three: optional CIFG (coupled input and forget gates, when the
//! input-to-input and recurrent-to-input weights are omitted), peephole connections,
//! projection with optional bias and clipping, cell clipping, layer normalization of the gate
//! pre-activations, and the auxiliary input of the bidirectional form.
//!
//! Gate order throughout: input (0), forget (1), cell (2), output (3).

use super::{KResult, OpCtx, const_data, count, to_u32};
use crate::check::{Ck, FLOAT, Issue, float_scalar};
use crate::model::{Lifetime, OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use super::opdef::OpDef;

use OperandType as T;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: OperationType::Lstm,
        types: FLOAT,
        check: check_lstm,
        run: run_lstm,
    },
    OpDef {
        op: OperationType::UnidirectionalSequenceLstm,
        types: FLOAT,
        check: check_unidirectional,
        run: run_unidirectional,
    },
    OpDef {
        op: OperationType::BidirectionalSequenceLstm,
        types: FLOAT,
        check: check_bidirectional,
        run: run_bidirectional,
    },
    OpDef {
        op: OperationType::Quantized16bitLstm,
        types: &[T::TensorQuant8Asymm],
        check: q16::check,
        run: q16::run,
    },
    OpDef {
        op: OperationType::QuantizedLstm,
        types: &[T::TensorQuant8AsymmSigned],
        check: q8::check,
        run: q8::run,
    },
];

#[path = "lstm_q16.rs"]
mod q16;
#[path = "lstm_q8.rs"]
mod q8;

// Offsets of the 17 weight and bias tensors of one cell from its first one.
const I2I: usize = 0;
const I2F: usize = 1;
const I2C: usize = 2;
const I2O: usize = 3;
const R2I: usize = 4;
const R2F: usize = 5;
const R2C: usize = 6;
const R2O: usize = 7;
const C2I: usize = 8;
const C2F: usize = 9;
const C2O: usize = 10;
const BI: usize = 11;
const BF: usize = 12;
const BC: usize = 13;
const BO: usize = 14;
const PW: usize = 15;
const PB: usize = 16;

/// Where one cell's operands sit in an operation's input list.
#[derive(Clone, Copy)]
struct Idx {
    /// The input-to-input weights; the other 16 weight and bias tensors follow.
    w: usize,
    /// Output (activation) state in.
    h: usize,
    /// Cell state in.
    c: usize,
    /// The input layer-norm weights, followed by forget, cell, output; None in the 23-input
    /// LSTM form.
    ln: Option<usize>,
    /// The auxiliary input-to-input weights, followed by forget, cell, output (bidirectional).
    aux: Option<usize>,
}

const LSTM_IDX: Idx = Idx {
    w: 1,
    h: 18,
    c: 19,
    ln: Some(23),
    aux: None,
};
const UNI_IDX: Idx = Idx {
    w: 1,
    h: 18,
    c: 19,
    ln: Some(24),
    aux: None,
};
const FW_IDX: Idx = Idx {
    w: 1,
    h: 35,
    c: 36,
    ln: Some(53),
    aux: Some(40),
};
const BW_IDX: Idx = Idx {
    w: 18,
    h: 37,
    c: 38,
    ln: Some(57),
    aux: Some(44),
};

// Bidirectional scalar and auxiliary-input positions (the cell and projection clips follow
// the activation, at 49 and 50).
const BI_AUX_INPUT: usize = 39;
const BI_ACT: usize = 48;
const BI_MERGE: usize = 51;
const BI_TIME_MAJOR: usize = 52;

/// Fused activation codes the LSTM cell accepts: NONE, RELU, RELU1, RELU6, TANH, SIGMOID.
fn valid_activation(a: i32) -> bool {
    matches!(a, 0..=4 | 6)
}

/// The presence rules of one cell's optional operands, given which inputs are present.
fn presence_rules(p: &dyn Fn(usize) -> bool, ix: Idx) -> Result<(), String> {
    let w = |k: usize| p(ix.w + k);
    let names = [
        (I2F, "input-to-forget weights"),
        (I2C, "input-to-cell weights"),
        (I2O, "input-to-output weights"),
        (R2F, "recurrent-to-forget weights"),
        (R2C, "recurrent-to-cell weights"),
        (R2O, "recurrent-to-output weights"),
        (BF, "forget gate bias"),
        (BC, "cell bias"),
        (BO, "output gate bias"),
    ];
    for (k, what) in names {
        if !w(k) {
            return Err(format!("input {} ({what}) is required", ix.w + k));
        }
    }
    if !p(ix.h) {
        return Err(format!("input {} (output state in) is required", ix.h));
    }
    if !p(ix.c) {
        return Err(format!("input {} (cell state in) is required", ix.c));
    }
    if w(I2I) != w(R2I) {
        return Err(
            "input-to-input and recurrent-to-input weights must both be given or both omitted \
             (CIFG)"
                .into(),
        );
    }
    let cifg = !w(I2I);
    if cifg && w(BI) {
        return Err(
            "the input gate bias must be omitted with CIFG (no input-to-input weights)".into(),
        );
    }
    if !cifg && !w(BI) {
        return Err("the input gate bias is required without CIFG".into());
    }
    let peep_all = (w(C2I) || cifg) && w(C2F) && w(C2O);
    let peep_none = !w(C2I) && !w(C2F) && !w(C2O);
    if !peep_all && !peep_none {
        return Err(
            "peephole weights must be all given (cell-to-input only without CIFG) or all omitted"
                .into(),
        );
    }
    if w(PB) && !w(PW) {
        return Err("a projection bias needs projection weights".into());
    }
    if let Some(ln) = ix.ln {
        let (i, f, c, o) = (p(ln), p(ln + 1), p(ln + 2), p(ln + 3));
        if !(f == c && c == o) {
            return Err(
                "forget, cell and output layer-norm weights must all be given or all omitted"
                    .into(),
            );
        }
        if f && !cifg && !i {
            return Err("layer normalization without CIFG needs input layer-norm weights".into());
        }
        if !f && i {
            return Err(
                "input layer-norm weights given without the other layer-norm weights".into(),
            );
        }
    }
    Ok(())
}

/// Whether input `i` is declared omitted (NO_VALUE) or not listed.
fn omitted(c: &Ck<'_>, i: usize) -> bool {
    match c.ins.get(i) {
        None => true,
        Some(&x) => {
            c.g.operands
                .get(x as usize)
                .is_none_or(|o| o.lifetime == Lifetime::NoValue)
        }
    }
}

/// The value of a CONSTANT_COPY scalar input, decoded.
fn const_scalar(c: &Ck<'_>, i: usize) -> Option<Data> {
    const_data(c, i).filter(|d| d.len() == 1)
}

/// Static check of one cell's operands: types, presence rules.
fn check_cell(c: &Ck<'_>, t: OperandType, ix: Idx) -> Result<(), Issue> {
    let mut tensors: Vec<usize> = (ix.w..ix.w + 17).collect();
    tensors.extend([ix.h, ix.c]);
    if let Some(ln) = ix.ln
        && c.ins.len() > ln
    {
        tensors.extend(ln..ln + 4);
    }
    if let Some(a) = ix.aux {
        tensors.extend(a..a + 4);
    }
    for i in tensors {
        if !omitted(c, i) {
            c.is(i, t, "LSTM weight, bias or state tensor")?;
        }
    }
    presence_rules(&|i| !omitted(c, i), ix).map_err(Issue::Invalid)
}

/// Static check of the activation and the two clipping scalars at `act`, `act+1`, `act+2`.
fn check_params(c: &Ck<'_>, t: OperandType, act: usize) -> Result<(), Issue> {
    c.is(act, T::Int32, "fused activation")?;
    c.is(act + 1, float_scalar(t), "cell clip")?;
    c.is(act + 2, float_scalar(t), "projection clip")?;
    if let Some(Data::I32(v)) = const_scalar(c, act)
        && !valid_activation(v[0])
    {
        return Err(Issue::Invalid(format!(
            "fused activation {} is not NONE, RELU, RELU1, RELU6, TANH or SIGMOID",
            v[0]
        )));
    }
    for (i, what) in [(act + 1, "cell clip"), (act + 2, "projection clip")] {
        if let Some(Data::F32(v)) = const_scalar(c, i)
            && (v[0].is_nan() || v[0] < 0.0)
        {
            return Err(Issue::Invalid(format!("{what} must be >= 0, is {}", v[0])));
        }
    }
    Ok(())
}

/// Input 0's type, which must be a float tensor type.
fn float_input(c: &Ck<'_>) -> Result<OperandType, Issue> {
    let t = c.ty(0)?;
    if !FLOAT.contains(&t) {
        return Err(Issue::Invalid(format!(
            "input 0 must be TENSOR_FLOAT32 or TENSOR_FLOAT16, is {}",
            t.name()
        )));
    }
    if omitted(c, 0) {
        return Err(Issue::Invalid("input 0 (input) is required".into()));
    }
    Ok(t)
}

/// Every output must have the input's type.
fn outputs_typed(c: &Ck<'_>, t: OperandType) -> Result<(), Issue> {
    for k in 0..c.outs.len() {
        let o = c.out(k)?;
        if o.ty != t {
            return Err(Issue::Invalid(format!(
                "output {k} type {} differs from input type {}",
                o.ty.name(),
                t.name()
            )));
        }
    }
    Ok(())
}

fn check_lstm(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[23, 27], 4)?;
    let t = float_input(c)?;
    check_cell(c, t, LSTM_IDX)?;
    check_params(c, t, 20)?;
    outputs_typed(c, t)
}

fn check_unidirectional(c: &Ck<'_>) -> Result<(), Issue> {
    if c.ins.len() != 28 {
        return Err(Issue::Invalid(format!(
            "{} inputs given, expected 28",
            c.ins.len()
        )));
    }
    if !matches!(c.outs.len(), 1 | 3) {
        return Err(Issue::Invalid(format!(
            "{} outputs given, expected 1 (output) or 3 (output, output state, cell state)",
            c.outs.len()
        )));
    }
    let t = float_input(c)?;
    check_cell(c, t, UNI_IDX)?;
    check_params(c, t, 20)?;
    c.is(23, T::Bool, "time_major")?;
    outputs_typed(c, t)
}

fn check_bidirectional(c: &Ck<'_>) -> Result<(), Issue> {
    if c.ins.len() != 61 {
        return Err(Issue::Invalid(format!(
            "{} inputs given, expected 61",
            c.ins.len()
        )));
    }
    if !matches!(c.outs.len(), 1 | 2 | 5 | 6) {
        return Err(Issue::Invalid(format!(
            "{} outputs given, expected 1 or 2 (merged or separate outputs), plus 4 state \
             outputs optionally",
            c.outs.len()
        )));
    }
    let t = float_input(c)?;
    check_cell(c, t, FW_IDX)?;
    check_cell(c, t, BW_IDX)?;
    if !omitted(c, BI_AUX_INPUT) {
        c.is(BI_AUX_INPUT, t, "auxiliary input")?;
    }
    aux_rules(&|i| !omitted(c, i)).map_err(Issue::Invalid)?;
    check_params(c, t, BI_ACT)?;
    c.is(BI_MERGE, T::Bool, "merge_outputs")?;
    c.is(BI_TIME_MAJOR, T::Bool, "time_major")?;
    if let Some(Data::U8(v)) = const_scalar(c, BI_MERGE) {
        let merge = v[0] != 0;
        let ok = if merge {
            matches!(c.outs.len(), 1 | 5)
        } else {
            matches!(c.outs.len(), 2 | 6)
        };
        if !ok {
            return Err(Issue::Invalid(format!(
                "{} outputs given with merge_outputs {merge}: expected {}",
                c.outs.len(),
                if merge { "1 or 5" } else { "2 or 6" }
            )));
        }
    }
    outputs_typed(c, t)
}

/// The bidirectional auxiliary-input rules: aux weights all given or all omitted per direction
/// (the input-gate ones only without CIFG), the same in both directions, and only with an
/// auxiliary input.
fn aux_rules(p: &dyn Fn(usize) -> bool) -> Result<(), String> {
    for (ix, dir) in [(FW_IDX, "forward"), (BW_IDX, "backward")] {
        let (Some(a), cifg) = (ix.aux, !p(ix.w + I2I)) else {
            continue;
        };
        let all = (cifg || p(a)) && p(a + 1) && p(a + 2) && p(a + 3);
        let none = !p(a) && !p(a + 1) && !p(a + 2) && !p(a + 3);
        if !all && !none {
            return Err(format!(
                "{dir} auxiliary weights must be all given or all omitted"
            ));
        }
        if cifg && p(a) {
            return Err(format!(
                "{dir} auxiliary input-to-input weights must be omitted with CIFG"
            ));
        }
    }
    let fw = p(FW_IDX.aux.unwrap_or(0) + 1);
    let bw = p(BW_IDX.aux.unwrap_or(0) + 1);
    if fw != bw {
        return Err("auxiliary weights must be given for both directions or neither".into());
    }
    if fw && !p(BI_AUX_INPUT) {
        return Err("auxiliary weights are given without an auxiliary input".into());
    }
    Ok(())
}

/// One cell's weights, read and shape-checked at execution.
struct Cell<'a> {
    n_input: usize,
    n_cell: usize,
    n_output: usize,
    n_aux: usize,
    /// Input-to-gate weights `[n_cell, n_input]` (None for the input gate with CIFG).
    wx: [Option<&'a [f32]>; 4],
    /// Recurrent-to-gate weights `[n_cell, n_output]`.
    wh: [Option<&'a [f32]>; 4],
    /// Auxiliary-input-to-gate weights `[n_cell, n_aux]`.
    wa: [Option<&'a [f32]>; 4],
    /// Peephole weights `[n_cell]` for the input, forget and output gates.
    peep: [Option<&'a [f32]>; 3],
    /// Gate biases `[n_cell]`.
    bias: [Option<&'a [f32]>; 4],
    /// Layer-norm weights `[n_cell]`.
    ln: [Option<&'a [f32]>; 4],
    proj_w: Option<&'a [f32]>,
    proj_b: Option<&'a [f32]>,
    cifg: bool,
    layer_norm: bool,
}

/// The float data of input `i`, which must have exactly the extents `want`.
fn shaped<'a>(ctx: &OpCtx<'a>, i: usize, want: &[usize], what: &str) -> KResult<&'a [f32]> {
    let (d, v) = ctx.f32s(i)?;
    if d.len() != want.len() || d.iter().zip(want).any(|(&a, &b)| a as usize != b) {
        return Err(ctx.err(format!(
            "input {i} ({what}) must have shape {want:?}, has {d:?}"
        )));
    }
    if count(ctx, d)? != v.len() {
        return Err(ctx.err(format!("input {i} ({what}) data does not match {d:?}")));
    }
    Ok(v)
}

/// Optional input `i` with extents `want`, None when omitted.
fn opt_shaped<'a>(
    ctx: &OpCtx<'a>,
    i: usize,
    want: &[usize],
    what: &str,
) -> KResult<Option<&'a [f32]>> {
    if ctx.has(i) {
        shaped(ctx, i, want, what).map(Some)
    } else {
        Ok(None)
    }
}

/// Extents of a 2-D input.
fn dims2(ctx: &OpCtx<'_>, i: usize, what: &str) -> KResult<(usize, usize)> {
    let (d, _) = ctx.f32s(i)?;
    if d.len() != 2 {
        return Err(ctx.err(format!("input {i} ({what}) must be 2-D, has {d:?}")));
    }
    Ok((d[0] as usize, d[1] as usize))
}

impl<'a> Cell<'a> {
    /// Reads one cell's weights for an input of `n_input` features (and `n_aux` auxiliary
    /// ones, when auxiliary weights are used).
    fn read(ctx: &OpCtx<'a>, ix: Idx, n_input: usize, n_aux: usize) -> KResult<Self> {
        presence_rules(&|i| ctx.has(i), ix).map_err(|e| ctx.err(e))?;
        let w = ix.w;
        let (n_cell, n_in_w) = dims2(ctx, w + I2O, "input-to-output weights")?;
        if n_in_w != n_input {
            return Err(ctx.err(format!(
                "input-to-output weights have {n_in_w} columns, the input has {n_input} features"
            )));
        }
        if n_cell == 0 {
            return Err(ctx.err("the number of cells (input-to-output weights' rows) is 0"));
        }
        let (rows, n_output) = dims2(ctx, w + R2O, "recurrent-to-output weights")?;
        if rows != n_cell {
            return Err(ctx.err(format!(
                "recurrent-to-output weights have {rows} rows, expected {n_cell} (num_units)"
            )));
        }
        let xs = [n_cell, n_input];
        let hs = [n_cell, n_output];
        let cs = [n_cell];
        let names = ["input", "forget", "cell", "output"];
        let mut wx = [None; 4];
        let mut wh = [None; 4];
        let mut bias = [None; 4];
        for g in 0..4 {
            wx[g] = opt_shaped(
                ctx,
                w + I2I + g,
                &xs,
                &format!("input-to-{} weights", names[g]),
            )?;
            wh[g] = opt_shaped(
                ctx,
                w + R2I + g,
                &hs,
                &format!("recurrent-to-{} weights", names[g]),
            )?;
            bias[g] = opt_shaped(ctx, w + BI + g, &cs, &format!("{} gate bias", names[g]))?;
        }
        let peep = [
            opt_shaped(ctx, w + C2I, &cs, "cell-to-input weights")?,
            opt_shaped(ctx, w + C2F, &cs, "cell-to-forget weights")?,
            opt_shaped(ctx, w + C2O, &cs, "cell-to-output weights")?,
        ];
        let proj_w = opt_shaped(ctx, w + PW, &[n_output, n_cell], "projection weights")?;
        let proj_b = opt_shaped(ctx, w + PB, &[n_output], "projection bias")?;
        if proj_w.is_none() && n_output != n_cell {
            return Err(ctx.err(format!(
                "without projection the output size ({n_output}) must equal num_units ({n_cell})"
            )));
        }
        let mut ln = [None; 4];
        if let Some(l) = ix.ln {
            for g in 0..4 {
                ln[g] = opt_shaped(ctx, l + g, &cs, &format!("{} layer-norm weights", names[g]))?;
            }
        }
        let mut wa = [None; 4];
        if let Some(a) = ix.aux {
            for g in 0..4 {
                wa[g] = opt_shaped(
                    ctx,
                    a + g,
                    &[n_cell, n_aux],
                    &format!("auxiliary input-to-{} weights", names[g]),
                )?;
            }
        }
        let cifg = wx[0].is_none();
        let layer_norm = ln[1].is_some();
        Ok(Cell {
            n_input,
            n_cell,
            n_output,
            n_aux,
            wx,
            wh,
            wa,
            peep,
            bias,
            ln,
            proj_w,
            proj_b,
            cifg,
            layer_norm,
        })
    }

    /// Scratch-buffer columns per batch: 3 gates with CIFG, 4 without.
    fn scratch_gates(&self) -> usize {
        if self.cifg { 3 } else { 4 }
    }
}

/// The cell's activation function and clipping.
#[derive(Clone, Copy)]
struct Params {
    act: i32,
    cell_clip: f32,
    proj_clip: f32,
}

fn read_params(ctx: &OpCtx<'_>, act: usize) -> KResult<Params> {
    let a = ctx.scalar_i32(act)?;
    if !valid_activation(a) {
        return Err(ctx.err(format!(
            "fused activation {a} is not NONE, RELU, RELU1, RELU6, TANH or SIGMOID"
        )));
    }
    let cell_clip = ctx.scalar_f32(act + 1)?;
    let proj_clip = ctx.scalar_f32(act + 2)?;
    for (v, what) in [(cell_clip, "cell clip"), (proj_clip, "projection clip")] {
        if v.is_nan() || v < 0.0 {
            return Err(ctx.err(format!("{what} must be >= 0, is {v}")));
        }
    }
    Ok(Params {
        act: a,
        cell_clip,
        proj_clip,
    })
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn activate(a: i32, x: f32) -> f32 {
    match a {
        1 => x.max(0.0),
        2 => x.clamp(-1.0, 1.0),
        3 => x.clamp(0.0, 6.0),
        4 => x.tanh(),
        6 => sigmoid(x),
        _ => x,
    }
}

/// Normalizes `v` to zero mean and unit variance (epsilon 1e-8, as NNAPI's layer norm).
fn mean_stddev_normalize(v: &mut [f32]) {
    let n = v.len() as f32;
    let mean = v.iter().sum::<f32>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + 1e-8).sqrt();
    for x in v {
        *x = (*x - mean) * inv;
    }
}

/// `acc[k] += Σ_j w[k][j] · x[j]` for a `[acc.len(), x.len()]` matrix `w`.
fn matvec_acc(acc: &mut [f32], w: &[f32], x: &[f32]) {
    let n = x.len();
    if n == 0 {
        return;
    }
    for (a, row) in acc.iter_mut().zip(w.chunks_exact(n)) {
        *a += row.iter().zip(x).map(|(p, q)| p * q).sum::<f32>();
    }
}

/// One time step for the whole batch. `x` is `[batch, n_input]`, `aux` `[batch, n_aux]`;
/// `h` (`[batch, n_output]`) and `c` (`[batch, n_cell]`) are updated in place; `scratch`
/// (`[batch · n_cell · gates]`) receives the gate values.
#[allow(clippy::too_many_arguments)]
fn step(
    cell: &Cell<'_>,
    p: Params,
    batch: usize,
    x: &[f32],
    aux: Option<&[f32]>,
    h: &mut [f32],
    c: &mut [f32],
    scratch: &mut [f32],
) {
    let (ni, nc, no) = (cell.n_input, cell.n_cell, cell.n_output);
    let mut pre = vec![vec![0f32; nc]; 4];
    let mut m = vec![0f32; nc];
    let mut new_h = vec![0f32; no];
    for b in 0..batch {
        let xb = &x[b * ni..(b + 1) * ni];
        let hb = &h[b * no..(b + 1) * no];
        let ab = aux.map(|a| &a[b * cell.n_aux..(b + 1) * cell.n_aux]);
        let cb = &mut c[b * nc..(b + 1) * nc];
        for (g, acc) in pre.iter_mut().enumerate() {
            if g == 0 && cell.cifg {
                continue;
            }
            match (cell.layer_norm, cell.bias[g]) {
                (false, Some(bias)) => acc.copy_from_slice(bias),
                _ => acc.fill(0.0),
            }
            if let Some(w) = cell.wx[g] {
                matvec_acc(acc, w, xb);
            }
            if let (Some(w), Some(a)) = (cell.wa[g], ab) {
                matvec_acc(acc, w, a);
            }
            if let Some(w) = cell.wh[g] {
                matvec_acc(acc, w, hb);
            }
        }
        // Peepholes on the input and forget gates look at the previous cell state.
        for (g, pw) in [(0, cell.peep[0]), (1, cell.peep[1])] {
            if let (Some(pw), false) = (pw, g == 0 && cell.cifg) {
                for k in 0..nc {
                    pre[g][k] += pw[k] * cb[k];
                }
            }
        }
        let norm = |v: &mut Vec<f32>, g: usize| {
            if cell.layer_norm {
                mean_stddev_normalize(v);
                if let Some(lw) = cell.ln[g] {
                    for (x, w) in v.iter_mut().zip(lw) {
                        *x *= w;
                    }
                }
                if let Some(bias) = cell.bias[g] {
                    for (x, bb) in v.iter_mut().zip(bias) {
                        *x += bb;
                    }
                }
            }
        };
        for (g, v) in pre.iter_mut().enumerate().take(3) {
            if g == 0 && cell.cifg {
                continue;
            }
            norm(v, g);
        }
        for k in 0..nc {
            let f = sigmoid(pre[1][k]);
            let i = if cell.cifg {
                1.0 - f
            } else {
                sigmoid(pre[0][k])
            };
            let g = activate(p.act, pre[2][k]);
            let mut cn = f * cb[k] + i * g;
            if p.cell_clip > 0.0 {
                cn = cn.clamp(-p.cell_clip, p.cell_clip);
            }
            cb[k] = cn;
            pre[0][k] = i;
            pre[1][k] = f;
            pre[2][k] = g;
        }
        if let Some(pw) = cell.peep[2] {
            for k in 0..nc {
                pre[3][k] += pw[k] * cb[k];
            }
        }
        norm(&mut pre[3], 3);
        for k in 0..nc {
            pre[3][k] = sigmoid(pre[3][k]);
            m[k] = pre[3][k] * activate(p.act, cb[k]);
        }
        if let Some(pw) = cell.proj_w {
            match cell.proj_b {
                Some(pb) => new_h.copy_from_slice(pb),
                None => new_h.fill(0.0),
            }
            matvec_acc(&mut new_h, pw, &m);
            if p.proj_clip > 0.0 {
                for v in new_h.iter_mut() {
                    *v = v.clamp(-p.proj_clip, p.proj_clip);
                }
            }
        } else {
            new_h.copy_from_slice(&m[..no]);
        }
        h[b * no..(b + 1) * no].copy_from_slice(&new_h);
        // Scratch layout: one block of [batch, n_cell] per gate, input gate first unless CIFG.
        let gates: &[usize] = if cell.cifg { &[2, 1, 3] } else { &[0, 2, 1, 3] };
        for (slot, &g) in gates.iter().enumerate() {
            let at = (slot * batch + b) * nc;
            scratch[at..at + nc].copy_from_slice(&pre[g]);
        }
    }
}

/// A float tensor of `dims`, checking its element count against the limits.
fn out_tensor(ctx: &OpCtx<'_>, dims: &[usize], v: Vec<f32>) -> KResult<Tensor> {
    let d = dims
        .iter()
        .map(|&x| to_u32(ctx, x))
        .collect::<KResult<Vec<u32>>>()?;
    if count(ctx, &d)? != v.len() {
        return Err(ctx.err("internal: output size mismatch"));
    }
    Ok(Tensor::new(d, Data::F32(v.into())))
}

/// Element count of `dims`, checked against the limits.
fn elems(ctx: &OpCtx<'_>, dims: &[usize]) -> KResult<usize> {
    let d = dims
        .iter()
        .map(|&x| to_u32(ctx, x))
        .collect::<KResult<Vec<u32>>>()?;
    count(ctx, &d)
}

/// The initial output and cell states of `cell` for `batch`.
fn states(
    ctx: &OpCtx<'_>,
    cell: &Cell<'_>,
    ix: Idx,
    batch: usize,
) -> KResult<(Vec<f32>, Vec<f32>)> {
    let h = shaped(ctx, ix.h, &[batch, cell.n_output], "output state in")?.to_vec();
    let c = shaped(ctx, ix.c, &[batch, cell.n_cell], "cell state in")?.to_vec();
    Ok((h, c))
}

fn run_lstm(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (batch, n_input) = dims2(ctx, 0, "input")?;
    shaped(ctx, 0, &[batch, n_input], "input")?;
    let x = ctx.f32s(0)?.1;
    let ix = if ctx.n_inputs() == 27 {
        LSTM_IDX
    } else {
        Idx {
            ln: None,
            ..LSTM_IDX
        }
    };
    let cell = Cell::read(ctx, ix, n_input, 0)?;
    let p = read_params(ctx, 20)?;
    let (mut h, mut c) = states(ctx, &cell, ix, batch)?;
    let sg = cell.scratch_gates();
    let mut scratch = vec![0f32; elems(ctx, &[batch, cell.n_cell, sg])?];
    step(&cell, p, batch, x, None, &mut h, &mut c, &mut scratch);
    let out = h.clone();
    Ok(vec![
        out_tensor(ctx, &[batch, cell.n_cell * sg], scratch)?,
        out_tensor(ctx, &[batch, cell.n_output], h)?,
        out_tensor(ctx, &[batch, cell.n_cell], c)?,
        out_tensor(ctx, &[batch, cell.n_output], out)?,
    ])
}

/// A 3-D sequence input: `(max_time, batch, features)` and its data.
fn sequence<'a>(
    ctx: &OpCtx<'a>,
    i: usize,
    time_major: bool,
    what: &str,
) -> KResult<(usize, usize, usize, &'a [f32])> {
    let (d, v) = ctx.f32s(i)?;
    if d.len() != 3 {
        return Err(ctx.err(format!("input {i} ({what}) must be 3-D, has {d:?}")));
    }
    if count(ctx, d)? != v.len() {
        return Err(ctx.err(format!("input {i} ({what}) data does not match {d:?}")));
    }
    let (t, b) = if time_major {
        (d[0] as usize, d[1] as usize)
    } else {
        (d[1] as usize, d[0] as usize)
    };
    Ok((t, b, d[2] as usize, v))
}

/// Gathers time step `t` of a `[T, B, n]` (time-major) or `[B, T, n]` sequence as `[B, n]`.
fn gather_step(
    v: &[f32],
    time_major: bool,
    steps: usize,
    batch: usize,
    n: usize,
    t: usize,
    out: &mut [f32],
) {
    for b in 0..batch {
        let src = if time_major {
            (t * batch + b) * n
        } else {
            (b * steps + t) * n
        };
        out[b * n..(b + 1) * n].copy_from_slice(&v[src..src + n]);
    }
}

/// Scatters `[B, n]` into time step `t` of a `[T, B, stride]` or `[B, T, stride]` sequence
/// at column `col`.
#[allow(clippy::too_many_arguments)]
fn scatter_step(
    out: &mut [f32],
    time_major: bool,
    steps: usize,
    batch: usize,
    stride: usize,
    col: usize,
    t: usize,
    h: &[f32],
    n: usize,
) {
    for b in 0..batch {
        let dst = if time_major {
            (t * batch + b) * stride
        } else {
            (b * steps + t) * stride
        } + col;
        out[dst..dst + n].copy_from_slice(&h[b * n..(b + 1) * n]);
    }
}

/// Runs `cell` over a sequence (backwards when `reverse`), writing each step's output into
/// `out` at column `col` of `stride`; returns the final output and cell states.
#[allow(clippy::too_many_arguments)]
fn run_sequence(
    ctx: &OpCtx<'_>,
    cell: &Cell<'_>,
    ix: Idx,
    p: Params,
    seq: (usize, usize, &[f32]),
    aux: Option<&[f32]>,
    time_major: bool,
    reverse: bool,
    out: &mut [f32],
    stride: usize,
    col: usize,
) -> KResult<(Vec<f32>, Vec<f32>)> {
    let (steps, batch, x) = seq;
    let (mut h, mut c) = states(ctx, cell, ix, batch)?;
    let mut xt = vec![0f32; elems(ctx, &[batch, cell.n_input])?];
    let mut at = vec![0f32; elems(ctx, &[batch, cell.n_aux])?];
    let mut scratch = vec![0f32; elems(ctx, &[batch, cell.n_cell, 4])?];
    for s in 0..steps {
        let t = if reverse { steps - 1 - s } else { s };
        gather_step(x, time_major, steps, batch, cell.n_input, t, &mut xt);
        let a = match aux {
            Some(a) => {
                gather_step(a, time_major, steps, batch, cell.n_aux, t, &mut at);
                Some(&at[..])
            }
            None => None,
        };
        step(cell, p, batch, &xt, a, &mut h, &mut c, &mut scratch);
        scatter_step(
            out,
            time_major,
            steps,
            batch,
            stride,
            col,
            t,
            &h,
            cell.n_output,
        );
    }
    Ok((h, c))
}

fn run_unidirectional(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let time_major = ctx.scalar_bool(23)?;
    let (steps, batch, n_input, x) = sequence(ctx, 0, time_major, "input")?;
    let cell = Cell::read(ctx, UNI_IDX, n_input, 0)?;
    let p = read_params(ctx, 20)?;
    let dims = if time_major {
        [steps, batch, cell.n_output]
    } else {
        [batch, steps, cell.n_output]
    };
    let mut out = vec![0f32; elems(ctx, &dims)?];
    let (h, c) = run_sequence(
        ctx,
        &cell,
        UNI_IDX,
        p,
        (steps, batch, x),
        None,
        time_major,
        false,
        &mut out,
        cell.n_output,
        0,
    )?;
    let mut res = vec![out_tensor(ctx, &dims, out)?];
    if ctx.op.outputs.len() == 3 {
        res.push(out_tensor(ctx, &[batch, cell.n_output], h)?);
        res.push(out_tensor(ctx, &[batch, cell.n_cell], c)?);
    }
    Ok(res)
}

fn run_bidirectional(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let time_major = ctx.scalar_bool(BI_TIME_MAJOR)?;
    let merge = ctx.scalar_bool(BI_MERGE)?;
    let n_outs = ctx.op.outputs.len();
    let ok = if merge {
        matches!(n_outs, 1 | 5)
    } else {
        matches!(n_outs, 2 | 6)
    };
    if !ok {
        return Err(ctx.err(format!(
            "{n_outs} outputs given with merge_outputs {merge}: expected {}",
            if merge { "1 or 5" } else { "2 or 6" }
        )));
    }
    aux_rules(&|i| ctx.has(i)).map_err(|e| ctx.err(e))?;
    let (steps, batch, n_input, x) = sequence(ctx, 0, time_major, "input")?;
    let has_aux = ctx.has(BI_AUX_INPUT);
    let aux_weights = ctx.has(FW_IDX.aux.unwrap_or(0) + 1);
    let aux = if has_aux {
        let (t, b, n, a) = sequence(ctx, BI_AUX_INPUT, time_major, "auxiliary input")?;
        if (t, b) != (steps, batch) {
            return Err(ctx.err(format!(
                "the auxiliary input has {t} steps of batch {b}, the input {steps} of batch {batch}"
            )));
        }
        Some((n, a))
    } else {
        None
    };
    // With an auxiliary input but no auxiliary weights (parallel linking), the backward cell
    // reads the auxiliary input instead of the input.
    let (fw_aux, bw_x, bw_aux) = match (aux, aux_weights) {
        (Some((n, a)), true) => (Some((n, a)), (n_input, x), Some((n, a))),
        (Some((n, a)), false) => (None, (n, a), None),
        (None, _) => (None, (n_input, x), None),
    };
    let fw = Cell::read(ctx, FW_IDX, n_input, fw_aux.map_or(0, |a| a.0))?;
    let bw = Cell::read(ctx, BW_IDX, bw_x.0, bw_aux.map_or(0, |a| a.0))?;
    let p = read_params(ctx, BI_ACT)?;
    let dims = |n: usize| {
        if time_major {
            [steps, batch, n]
        } else {
            [batch, steps, n]
        }
    };
    let (fw_n, bw_n) = (fw.n_output, bw.n_output);
    let merged = fw_n
        .checked_add(bw_n)
        .ok_or_else(|| ctx.err("output sizes too large"))?;
    let (fw_stride, bw_col) = if merge { (merged, fw_n) } else { (fw_n, 0) };
    let bw_stride = if merge { merged } else { bw_n };
    let mut fw_out = vec![0f32; elems(ctx, &dims(fw_stride))?];
    let mut bw_out = if merge {
        Vec::new()
    } else {
        vec![0f32; elems(ctx, &dims(bw_n))?]
    };
    let (fh, fc) = run_sequence(
        ctx,
        &fw,
        FW_IDX,
        p,
        (steps, batch, x),
        fw_aux.map(|a| a.1),
        time_major,
        false,
        &mut fw_out,
        fw_stride,
        0,
    )?;
    let bw_target = if merge { &mut fw_out } else { &mut bw_out };
    let (bh, bc) = run_sequence(
        ctx,
        &bw,
        BW_IDX,
        p,
        (steps, batch, bw_x.1),
        bw_aux.map(|a| a.1),
        time_major,
        true,
        bw_target,
        bw_stride,
        bw_col,
    )?;
    let mut res = vec![out_tensor(ctx, &dims(fw_stride), fw_out)?];
    if !merge {
        res.push(out_tensor(ctx, &dims(bw_n), bw_out)?);
    }
    if matches!(n_outs, 5 | 6) {
        res.push(out_tensor(ctx, &[batch, fw_n], fh)?);
        res.push(out_tensor(ctx, &[batch, fw.n_cell], fc)?);
        res.push(out_tensor(ctx, &[batch, bw_n], bh)?);
        res.push(out_tensor(ctx, &[batch, bw.n_cell], bc)?);
    }
    Ok(res)
}

#[cfg(test)]
#[path = "lstm_tests.rs"]
mod tests;
