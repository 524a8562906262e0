//! Simple recurrent layers: RNN, SVDF, UNIDIRECTIONAL_SEQUENCE_RNN and
//! BIDIRECTIONAL_SEQUENCE_RNN (float32 and float16, computed in f32).

use super::lookup::{agree, ext, invalid, known_rank};
use super::opdef::OpDef;
use super::{KResult, OpCtx, count, to_u32};
use crate::check::{Ck, FLOAT, Issue, const_bool, const_i32};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;
use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: O::Rnn,
        types: FLOAT,
        check: check_rnn,
        run: rnn,
    },
    OpDef {
        op: O::Svdf,
        types: FLOAT,
        check: check_svdf,
        run: svdf,
    },
    OpDef {
        op: O::UnidirectionalSequenceRnn,
        types: FLOAT,
        check: check_unidirectional,
        run: unidirectional,
    },
    OpDef {
        op: O::BidirectionalSequenceRnn,
        types: FLOAT,
        check: check_bidirectional,
        run: bidirectional,
    },
];

/// Input 0 is a float tensor type; inputs `same` (and optional inputs `opt`) and every output
/// have that type; `acts` are INT32 fused activations, valid ([`valid_activation`]) when constant.
fn float_family(c: &Ck<'_>, same: &[usize], opt: &[usize], acts: &[usize]) -> Result<(), Issue> {
    let t = c.ty(0)?;
    if !FLOAT.contains(&t) {
        return Err(invalid(format!(
            "input 0 must be TENSOR_FLOAT32 or TENSOR_FLOAT16, is {}",
            t.name()
        )));
    }
    for &i in same {
        c.is(i, t, "a tensor of input 0's type")?;
    }
    for &i in opt {
        c.opt(i, t, "a tensor of input 0's type")?;
    }
    for &i in acts {
        c.is(i, T::Int32, "fused activation")?;
        if let Some(a) = const_i32(c, i) {
            if !valid_activation(a) {
                return Err(invalid(format!(
                    "fused activation {a} is not NONE, RELU, RELU1, RELU6, TANH or SIGMOID"
                )));
            }
        }
    }
    for k in 0..c.outs.len() {
        let o = c.out(k)?;
        if o.ty != t {
            return Err(invalid(format!(
                "output {k} type {} differs from input type {}",
                o.ty.name(),
                t.name()
            )));
        }
    }
    Ok(())
}

/// Declared ranks that are known must equal `want` (input, rank, name).
fn ranks(c: &Ck<'_>, want: &[(usize, usize, &str)]) -> Result<(), Issue> {
    for &(i, r, what) in want {
        if known_rank(c, i).is_some_and(|k| k != r) {
            return Err(invalid(format!("{what} (input {i}) must be {r}-D")));
        }
    }
    Ok(())
}

/// A float input of rank `rank`: its extents and values.
fn mat<'a>(ctx: &OpCtx<'a>, i: usize, rank: usize, what: &str) -> KResult<(Vec<usize>, &'a [f32])> {
    let (d, v) = ctx.f32s(i)?;
    if d.len() != rank || count(ctx, d)? != v.len() {
        return Err(ctx.err(format!("{what} must be {rank}-D, got {d:?}")));
    }
    Ok((d.iter().map(|&x| x as usize).collect(), v))
}

/// The activation of a recurrent cell. NNAPI documents a fuse code; the reference executor's
/// RNN family applies its `ActivationFn`, which also takes TANH (4) and SIGMOID (6), the codes
/// TFLite's RNN carries (a Keras SimpleRNN's default is tanh), as the LSTM cell does here.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// NONE, RELU, RELU1, RELU6: a clamp to this range.
    Clamp(f32, f32),
    Tanh,
    Sigmoid,
}

impl Act {
    fn apply(self, x: f32) -> f32 {
        match self {
            Act::Clamp(lo, hi) => x.clamp(lo, hi),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }
}

/// Whether `a` is an activation code the RNN family takes: NONE, RELU, RELU1, RELU6, TANH,
/// SIGMOID.
fn valid_activation(a: i32) -> bool {
    matches!(a, 0..=4 | 6)
}

/// The activation of input `i`; an omitted activation is NONE.
fn act(ctx: &OpCtx<'_>, i: usize) -> KResult<Act> {
    if !ctx.has(i) {
        return Ok(Act::Clamp(f32::NEG_INFINITY, f32::INFINITY));
    }
    match ctx.scalar_i32(i)? {
        4 => Ok(Act::Tanh),
        6 => Ok(Act::Sigmoid),
        _ => ctx.act_f32(i).map(|(lo, hi)| Act::Clamp(lo, hi)),
    }
}

/// Known extents of one cell's weights agree: input `x` extent `xk` is the input size,
/// `w`, `r`, `b`, `h` the weights, recurrent weights, bias and hidden state.
fn cell_agrees(
    c: &Ck<'_>,
    (x, xk): (usize, usize),
    (w, r, b, h): (usize, usize, usize, usize),
) -> Result<(), Issue> {
    agree(
        c,
        &[
            (
                (x, xk),
                (w, 1),
                "input size must equal the weights' second extent",
            ),
            (
                (w, 0),
                (r, 0),
                "recurrent weights' first extent must equal num_units",
            ),
            (
                (r, 0),
                (r, 1),
                "recurrent weights must be [num_units, num_units]",
            ),
            ((w, 0), (b, 0), "bias extent must equal num_units"),
            ((w, 0), (h, 1), "hidden state width must equal num_units"),
        ],
    )
}

fn expect(ctx: &OpCtx<'_>, what: &str, got: usize, want: usize) -> KResult<()> {
    if got != want {
        return Err(ctx.err(format!("{what} is {got}, must be {want}")));
    }
    Ok(())
}

/// One RNN cell's weights: `w` `[units, in]`, optional auxiliary weights `[units, aux_in]`,
/// recurrent `r` `[units, units]`, `bias` `[units]`.
struct Cell<'a> {
    w: &'a [f32],
    aux_w: Option<&'a [f32]>,
    r: &'a [f32],
    bias: &'a [f32],
    units: usize,
}

impl Cell<'_> {
    /// One step for `batch` rows: `act(x·wᵀ + aux·aux_wᵀ + h·rᵀ + bias)`, written to
    /// `out` (`[batch, units]`).
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        x: &[f32],
        in_size: usize,
        aux: Option<(&[f32], usize)>,
        h: &[f32],
        batch: usize,
        act: Act,
        out: &mut [f32],
    ) {
        let u = self.units;
        for b in 0..batch {
            let xb = &x[b * in_size..(b + 1) * in_size];
            let hb = &h[b * u..(b + 1) * u];
            for o in 0..u {
                let mut acc = self.bias[o];
                acc += dot(xb, &self.w[o * in_size..(o + 1) * in_size]);
                if let (Some((a, n)), Some(aw)) = (aux, self.aux_w) {
                    acc += dot(&a[b * n..(b + 1) * n], &aw[o * n..(o + 1) * n]);
                }
                acc += dot(hb, &self.r[o * u..(o + 1) * u]);
                out[b * u + o] = act.apply(acc);
            }
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Reads cell weights at inputs `w`, `r`, `bias` and checks them against `in_size`.
fn cell<'a>(
    ctx: &OpCtx<'a>,
    (wi, ri, bi): (usize, usize, usize),
    in_size: Option<usize>,
) -> KResult<(Cell<'a>, usize)> {
    let (wd, w) = mat(ctx, wi, 2, "weights")?;
    let units = wd[0];
    if let Some(n) = in_size {
        expect(ctx, "weights' second extent", wd[1], n)?;
    }
    let (rd, r) = mat(ctx, ri, 2, "recurrent weights")?;
    expect(ctx, "recurrent weights' first extent", rd[0], units)?;
    expect(ctx, "recurrent weights' second extent", rd[1], units)?;
    let (bd, bias) = mat(ctx, bi, 1, "bias")?;
    expect(ctx, "bias extent", bd[0], units)?;
    Ok((
        Cell {
            w,
            aux_w: None,
            r,
            bias,
            units,
        },
        wd[1],
    ))
}

fn f32_tensor(ctx: &OpCtx<'_>, dims: &[usize], v: Vec<f32>) -> KResult<Tensor> {
    let d = dims
        .iter()
        .map(|&x| to_u32(ctx, x))
        .collect::<KResult<Vec<u32>>>()?;
    Ok(Tensor::new(d, Data::F32(v.into())))
}

fn check_rnn(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[6], 2)?;
    float_family(c, &[1, 2, 3, 4], &[], &[5])?;
    ranks(
        c,
        &[
            (0, 2, "input"),
            (1, 2, "weights"),
            (2, 2, "recurrent weights"),
            (3, 1, "bias"),
            (4, 2, "hidden state"),
        ],
    )?;
    cell_agrees(c, (0, 1), (1, 2, 3, 4))?;
    agree(
        c,
        &[((0, 0), (4, 0), "hidden state batch must equal the input's")],
    )
}

fn rnn(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (xd, x) = mat(ctx, 0, 2, "input")?;
    let (batch, in_size) = (xd[0], xd[1]);
    let (cell, _) = cell(ctx, (1, 2, 3), Some(in_size))?;
    let (hd, h) = mat(ctx, 4, 2, "hidden state")?;
    expect(ctx, "hidden state batch", hd[0], batch)?;
    expect(ctx, "hidden state units", hd[1], cell.units)?;
    let act = act(ctx, 5)?;
    let n = count(ctx, &[to_u32(ctx, batch)?, to_u32(ctx, cell.units)?])?;
    let mut out = vec![0f32; n];
    cell.step(x, in_size, None, h, batch, act, &mut out);
    let dims = [batch, cell.units];
    Ok(vec![
        f32_tensor(ctx, &dims, out.clone())?,
        f32_tensor(ctx, &dims, out)?,
    ])
}

fn check_svdf(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[7], 2)?;
    float_family(c, &[1, 2, 4], &[3], &[6])?;
    c.is(5, T::Int32, "rank")?;
    if let Some(r) = const_i32(c, 5) {
        if r <= 0 {
            return Err(invalid(format!("rank must be > 0, got {r}")));
        }
    }
    ranks(
        c,
        &[
            (0, 2, "input"),
            (1, 2, "weights_feature"),
            (2, 2, "weights_time"),
            (3, 1, "bias"),
            (4, 2, "state"),
        ],
    )?;
    agree(
        c,
        &[
            (
                (0, 1),
                (1, 1),
                "input size must equal weights_feature's second extent",
            ),
            (
                (1, 0),
                (2, 0),
                "weights_time's first extent must equal weights_feature's",
            ),
            ((0, 0), (4, 0), "state batch must equal the input's"),
        ],
    )?;
    let filters = ext(c, 1, 0);
    if let (Some(f), Some(r)) = (filters, const_i32(c, 5)) {
        let r = r.unsigned_abs();
        if f % r != 0 {
            return Err(invalid(format!(
                "weights_feature has {f} filters, not a multiple of rank {r}"
            )));
        }
        if let Some(b) = ext(c, 3, 0) {
            if b != f / r {
                return Err(invalid(format!(
                    "bias extent {b} must equal num_units {}",
                    f / r
                )));
            }
        }
    }
    if let (Some(f), Some(m), Some(w)) = (filters, ext(c, 2, 1), ext(c, 4, 1)) {
        if u64::from(w) != u64::from(f) * u64::from(m) {
            return Err(invalid(format!(
                "state width {w} must be memory_size * num_units * rank = {}",
                u64::from(f) * u64::from(m)
            )));
        }
    }
    Ok(())
}

/// SVDF as NNAPI's reference implements it: the state holds, per batch and filter
/// (`num_filters = num_units * rank`), `memory_size` entries (the HAL text says
/// `memory_size - 1`, but the reference and its tests size it `memory_size * num_filters`).
/// Each step writes the newest feature activation into the last slot, filters the memory with
/// `weights_time`, sums each unit's `rank` filters, adds the bias, applies the activation, and
/// shifts the memory left by one (the last slot becomes 0).
fn svdf(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (xd, x) = mat(ctx, 0, 2, "input")?;
    let (batch, in_size) = (xd[0], xd[1]);
    let (fd, wf) = mat(ctx, 1, 2, "weights_feature")?;
    let filters = fd[0];
    expect(ctx, "weights_feature's second extent", fd[1], in_size)?;
    let rank = ctx.scalar_pos(5, "rank")?;
    if filters % rank != 0 {
        return Err(ctx.err(format!(
            "weights_feature has {filters} filters, not a multiple of rank {rank}"
        )));
    }
    let units = filters / rank;
    let (td, wt) = mat(ctx, 2, 2, "weights_time")?;
    expect(ctx, "weights_time's first extent", td[0], filters)?;
    let mem = td[1];
    if mem == 0 {
        return Err(ctx.err("memory_size (weights_time's second extent) must be > 0"));
    }
    let bias = if ctx.has(3) {
        let (bd, b) = mat(ctx, 3, 1, "bias")?;
        expect(ctx, "bias extent", bd[0], units)?;
        Some(b)
    } else {
        None
    };
    let (sd, state_in) = mat(ctx, 4, 2, "state")?;
    expect(ctx, "state batch", sd[0], batch)?;
    let width = mem
        .checked_mul(filters)
        .ok_or_else(|| ctx.err("state too large"))?;
    expect(
        ctx,
        "state width (memory_size * num_units * rank)",
        sd[1],
        width,
    )?;
    let act = act(ctx, 6)?;
    let mut state = state_in.to_vec();
    let n_out = count(ctx, &[to_u32(ctx, batch)?, to_u32(ctx, units)?])?;
    let mut out = vec![0f32; n_out];
    let mut scratch = vec![0f32; filters];
    for b in 0..batch {
        let xb = &x[b * in_size..(b + 1) * in_size];
        let sb = &mut state[b * width..(b + 1) * width];
        for (f, s) in scratch.iter_mut().enumerate() {
            let mem_f = &mut sb[f * mem..(f + 1) * mem];
            mem_f[mem - 1] = dot(&wf[f * in_size..(f + 1) * in_size], xb);
            *s = dot(&wt[f * mem..(f + 1) * mem], mem_f);
        }
        for u in 0..units {
            let sum: f32 = scratch[u * rank..(u + 1) * rank].iter().sum();
            let v = bias.map_or(0.0, |bb| bb[u]) + sum;
            out[b * units + u] = act.apply(v);
        }
        for f in 0..filters {
            let mem_f = &mut sb[f * mem..(f + 1) * mem];
            mem_f.copy_within(1.., 0);
            mem_f[mem - 1] = 0.0;
        }
    }
    Ok(vec![
        f32_tensor(ctx, &[batch, width], state)?,
        f32_tensor(ctx, &[batch, units], out)?,
    ])
}

/// `[a, b, n]` → `[b, a, n]`.
fn swap01(v: &[f32], a: usize, b: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for i in 0..a {
        for j in 0..b {
            out[(j * a + i) * n..(j * a + i + 1) * n]
                .copy_from_slice(&v[(i * b + j) * n..(i * b + j + 1) * n]);
        }
    }
    out
}

/// A sequence input `[time, batch, n]` (or `[batch, time, n]` when not time-major) in
/// time-major order, with (time, batch, n).
fn sequence(
    ctx: &OpCtx<'_>,
    i: usize,
    time_major: bool,
    what: &str,
) -> KResult<(Vec<f32>, usize, usize, usize)> {
    let (d, v) = mat(ctx, i, 3, what)?;
    Ok(if time_major {
        (v.to_vec(), d[0], d[1], d[2])
    } else {
        (swap01(v, d[0], d[1], d[2]), d[1], d[0], d[2])
    })
}

/// A time-major `[time, batch, n]` result as a tensor in the operation's layout.
fn sequence_out(
    ctx: &OpCtx<'_>,
    v: Vec<f32>,
    (time, batch, n): (usize, usize, usize),
    time_major: bool,
) -> KResult<Tensor> {
    if time_major {
        f32_tensor(ctx, &[time, batch, n], v)
    } else {
        f32_tensor(ctx, &[batch, time, n], swap01(&v, time, batch, n))
    }
}

/// Runs `cell` over time steps `steps` of the time-major `x` (`[time, batch, in_size]`)
/// from hidden state `h0`, writing step t's `[batch, units]` result at column `offset` of
/// rows of `stride` in `out` (`[time, batch, stride]`). Returns the final hidden state.
#[allow(clippy::too_many_arguments)]
fn run_sequence(
    cell: &Cell<'_>,
    x: &[f32],
    in_size: usize,
    aux: Option<(&[f32], usize)>,
    h0: &[f32],
    (batch, act): (usize, Act),
    steps: impl Iterator<Item = usize>,
    (out, stride, offset): (&mut [f32], usize, usize),
) -> Vec<f32> {
    let u = cell.units;
    let mut h = h0.to_vec();
    let mut next = vec![0f32; batch * u];
    for t in steps {
        let xt = &x[t * batch * in_size..(t + 1) * batch * in_size];
        let at = aux.map(|(a, n)| (&a[t * batch * n..(t + 1) * batch * n], n));
        cell.step(xt, in_size, at, &h, batch, act, &mut next);
        for b in 0..batch {
            let row = (t * batch + b) * stride + offset;
            out[row..row + u].copy_from_slice(&next[b * u..(b + 1) * u]);
        }
        std::mem::swap(&mut h, &mut next);
    }
    h
}

fn check_unidirectional(c: &Ck<'_>) -> Result<(), Issue> {
    if c.ins.len() != 7 {
        return Err(invalid(format!("{} inputs given, expected 7", c.ins.len())));
    }
    if !matches!(c.outs.len(), 1 | 2) {
        return Err(invalid(format!(
            "{} outputs given, expected 1 (output) or 2 (output, hidden state)",
            c.outs.len()
        )));
    }
    float_family(c, &[1, 2, 3, 4], &[], &[5])?;
    c.is(6, T::Int32, "time_major")?;
    if let Some(tm) = const_i32(c, 6) {
        if !matches!(tm, 0 | 1) {
            return Err(invalid(format!("time_major must be 0 or 1, got {tm}")));
        }
    }
    ranks(
        c,
        &[
            (0, 3, "input"),
            (1, 2, "weights"),
            (2, 2, "recurrent weights"),
            (3, 1, "bias"),
            (4, 2, "hidden state"),
        ],
    )?;
    cell_agrees(c, (0, 2), (1, 2, 3, 4))
}

fn unidirectional(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let time_major = match ctx.scalar_i32(6)? {
        0 => false,
        1 => true,
        v => return Err(ctx.err(format!("time_major must be 0 or 1, got {v}"))),
    };
    let (x, time, batch, in_size) = sequence(ctx, 0, time_major, "input")?;
    let (cell, _) = cell(ctx, (1, 2, 3), Some(in_size))?;
    let (hd, h0) = mat(ctx, 4, 2, "hidden state")?;
    expect(ctx, "hidden state batch", hd[0], batch)?;
    expect(ctx, "hidden state units", hd[1], cell.units)?;
    let act = act(ctx, 5)?;
    let u = cell.units;
    let n = count(
        ctx,
        &[to_u32(ctx, time)?, to_u32(ctx, batch)?, to_u32(ctx, u)?],
    )?;
    let mut out = vec![0f32; n];
    let h = run_sequence(
        &cell,
        &x,
        in_size,
        None,
        h0,
        (batch, act),
        0..time,
        (&mut out, u, 0),
    );
    let mut res = vec![sequence_out(ctx, out, (time, batch, u), time_major)?];
    if ctx.op.outputs.len() == 2 {
        res.push(f32_tensor(ctx, &[batch, u], h)?);
    }
    Ok(res)
}

fn check_bidirectional(c: &Ck<'_>) -> Result<(), Issue> {
    if c.ins.len() != 15 {
        return Err(invalid(format!(
            "{} inputs given, expected 15",
            c.ins.len()
        )));
    }
    if !(1..=4).contains(&c.outs.len()) {
        return Err(invalid(format!(
            "{} outputs given, expected 1 to 4",
            c.outs.len()
        )));
    }
    float_family(c, &[1, 2, 3, 4, 5, 6, 7, 8], &[9, 10, 11], &[12])?;
    c.is(13, T::Bool, "time_major")?;
    c.is(14, T::Bool, "merge_outputs")?;
    if let Some(merge) = const_bool(c, 14) {
        let ok = if merge {
            matches!(c.outs.len(), 1 | 3)
        } else {
            matches!(c.outs.len(), 2 | 4)
        };
        if !ok {
            return Err(invalid(format!(
                "{} outputs with merge_outputs {merge}: expected {}",
                c.outs.len(),
                if merge { "1 or 3" } else { "2 or 4" }
            )));
        }
    }
    ranks(
        c,
        &[
            (0, 3, "input"),
            (1, 2, "forward weights"),
            (2, 2, "forward recurrent weights"),
            (3, 1, "forward bias"),
            (4, 2, "forward hidden state"),
            (5, 2, "backward weights"),
            (6, 2, "backward recurrent weights"),
            (7, 1, "backward bias"),
            (8, 2, "backward hidden state"),
        ],
    )?;
    cell_agrees(c, (0, 2), (1, 2, 3, 4))?;
    agree(
        c,
        &[
            (
                (5, 0),
                (6, 0),
                "backward recurrent weights' first extent must equal its num_units",
            ),
            ((6, 0), (6, 1), "backward recurrent weights must be square"),
            (
                (5, 0),
                (7, 0),
                "backward bias extent must equal its num_units",
            ),
            (
                (5, 0),
                (8, 1),
                "backward hidden state width must equal its num_units",
            ),
            (
                (4, 0),
                (8, 0),
                "forward and backward hidden states must have the same batch",
            ),
        ],
    )?;
    let present = |i: usize| -> Result<bool, Issue> {
        Ok(c.inp(i)?.lifetime != crate::model::Lifetime::NoValue)
    };
    match (present(9)?, present(10)?, present(11)?) {
        (false, false, false) | (true, false, false) | (true, true, true) => Ok(()),
        _ => Err(invalid(
            "auxiliary input and weights: give none, the auxiliary input alone, or all three",
        )),
    }
}

/// BIDIRECTIONAL_SEQUENCE_RNN. Linking modes by the optional inputs 9-11: none; the auxiliary
/// input alone ("parallel linking": it is the backward cell's input); or the auxiliary input
/// with both auxiliary weights ("cross linking": each cell adds aux·aux_wᵀ).
fn bidirectional(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let time_major = ctx.scalar_bool(13)?;
    let merge = ctx.scalar_bool(14)?;
    let n_out = ctx.op.outputs.len();
    let with_state = if merge {
        match n_out {
            1 => false,
            3 => true,
            _ => {
                return Err(ctx.err(format!(
                    "{n_out} outputs with merged outputs: expected 1 or 3"
                )));
            }
        }
    } else {
        match n_out {
            2 => false,
            4 => true,
            _ => {
                return Err(ctx.err(format!(
                    "{n_out} outputs with separate outputs: expected 2 or 4"
                )));
            }
        }
    };
    let (x, time, batch, in_size) = sequence(ctx, 0, time_major, "input")?;
    let (has_aux, has_fw_aw, has_bw_aw) = (ctx.has(9), ctx.has(10), ctx.has(11));
    let aux = if has_aux {
        let (a, at, ab, an) = sequence(ctx, 9, time_major, "auxiliary input")?;
        if at != time || ab != batch {
            return Err(ctx.err(format!(
                "auxiliary input has {at} steps of {ab} batches, the input {time} of {batch}"
            )));
        }
        Some((a, an))
    } else {
        None
    };
    let cross = match (has_aux, has_fw_aw, has_bw_aw) {
        (false, false, false) | (true, false, false) => false,
        (true, true, true) => true,
        _ => {
            return Err(ctx.err(
                "auxiliary input and weights: give none, the auxiliary input alone, or all three",
            ));
        }
    };
    let parallel = has_aux && !cross;
    let (mut fw, _) = cell(ctx, (1, 2, 3), Some(in_size))?;
    let bw_in = if parallel {
        aux.as_ref().map_or(in_size, |a| a.1)
    } else {
        in_size
    };
    let (mut bw, _) = cell(ctx, (5, 6, 7), Some(bw_in))?;
    if cross {
        let an = aux.as_ref().map_or(0, |a| a.1);
        for (i, c) in [(10, &mut fw), (11, &mut bw)] {
            let (d, w) = mat(ctx, i, 2, "auxiliary weights")?;
            expect(ctx, "auxiliary weights' first extent", d[0], c.units)?;
            expect(ctx, "auxiliary weights' second extent", d[1], an)?;
            c.aux_w = Some(w);
        }
    }
    let (fhd, fh0) = mat(ctx, 4, 2, "forward hidden state")?;
    expect(ctx, "forward hidden state batch", fhd[0], batch)?;
    expect(ctx, "forward hidden state units", fhd[1], fw.units)?;
    let (bhd, bh0) = mat(ctx, 8, 2, "backward hidden state")?;
    expect(ctx, "backward hidden state batch", bhd[0], batch)?;
    expect(ctx, "backward hidden state units", bhd[1], bw.units)?;
    let act = act(ctx, 12)?;
    let (fu, bu) = (fw.units, bw.units);
    let t32 = to_u32(ctx, time)?;
    let b32 = to_u32(ctx, batch)?;
    let fw_w = if merge {
        fu.checked_add(bu)
            .ok_or_else(|| ctx.err("too many units"))?
    } else {
        fu
    };
    let mut fw_out = vec![0f32; count(ctx, &[t32, b32, to_u32(ctx, fw_w)?])?];
    let mut bw_out = if merge {
        Vec::new()
    } else {
        vec![0f32; count(ctx, &[t32, b32, to_u32(ctx, bu)?])?]
    };
    let cross_aux = if cross {
        aux.as_ref().map(|(a, n)| (a.as_slice(), *n))
    } else {
        None
    };
    let fh = run_sequence(
        &fw,
        &x,
        in_size,
        cross_aux,
        fh0,
        (batch, act),
        0..time,
        (&mut fw_out, fw_w, 0),
    );
    let (bx, bn): (&[f32], usize) = match (&aux, parallel) {
        (Some((a, n)), true) => (a, *n),
        _ => (&x, in_size),
    };
    let bh = if merge {
        run_sequence(
            &bw,
            bx,
            bn,
            cross_aux,
            bh0,
            (batch, act),
            (0..time).rev(),
            (&mut fw_out, fw_w, fu),
        )
    } else {
        run_sequence(
            &bw,
            bx,
            bn,
            cross_aux,
            bh0,
            (batch, act),
            (0..time).rev(),
            (&mut bw_out, bu, 0),
        )
    };
    let mut res = vec![sequence_out(ctx, fw_out, (time, batch, fw_w), time_major)?];
    if !merge {
        res.push(sequence_out(ctx, bw_out, (time, batch, bu), time_major)?);
    }
    if with_state {
        res.push(f32_tensor(ctx, &[batch, fu], fh)?);
        res.push(f32_tensor(ctx, &[batch, bu], bh)?);
    }
    Ok(res)
}

#[cfg(test)]
#[path = "rnn_tests.rs"]
mod tests;
