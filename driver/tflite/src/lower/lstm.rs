//! The LSTM family with its variable state tensors: LSTM → NNAPI LSTM (one step; the 23-input
//! form, or the 27-input form when TFLite gives layer-norm coefficients),
//! UNIDIRECTIONAL_SEQUENCE_LSTM → NNAPI UNIDIRECTIONAL_SEQUENCE_LSTM (28 inputs) and
//! BIDIRECTIONAL_SEQUENCE_LSTM → NNAPI BIDIRECTIONAL_SEQUENCE_LSTM (61 inputs), with the
//! argument orders of NNAPI's TFLite delegate.
//!
//! TFLite's inputs 0–17 (input, weights, peepholes, biases, projection) are NNAPI's inputs 0–17
//! in the same order, an omitted one (-1) a NO_VALUE operand; the output and cell states
//! (inputs 18 and 19, and 35–38 of the bidirectional form: forward output, forward cell,
//! backward output, backward cell) are TFLite *variable* tensors, carried as state inputs and
//! outputs of the lowered model (`state.rs`). NNAPI 1.3 gives the states after the step or
//! the sequence as outputs: those operands become the state outputs. The scalars follow as
//! NNAPI wants them (activation, cell clip, projection clip, then time_major, merge_outputs),
//! and the layer-norm coefficients (TFLite's inputs 20–23 of the 24-input forms) last.
//!
//! Only float32 and float16 map, the FULL kernel of LSTM, with the activations the executor's
//! LSTM applies (NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGMOID; not SIGN_BIT). A hybrid LSTM
//! (float32 input, constant int8/uint8 weights: input-to-gate, recurrent, peephole,
//! projection and auxiliary weights) computes in float with those weights dequantized at
//! import ([`Builder::weights`]), as NNAPI's delegate maps it; biases, states and layer-norm
//! coefficients stay float. Refused, naming why: the BASIC kernel, full-integer LSTMs
//! (TFLite's int8/int16 scheme with intermediate scales, which NNAPI's QUANTIZED_LSTM spells
//! differently), diagonal recurrent weights.

use nnaccel_hal::OperationType;

use super::LowerError;
use super::build::Builder;
use super::code::{BIDIRECTIONAL_SEQUENCE_LSTM, LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM};
use crate::graph::{Activation, ElementType, LstmCell, LstmKernel, Options};

type Result<T> = std::result::Result<T, LowerError>;

/// Whether builtin `code` is one of the LSTM family lowered here.
pub(super) fn is_lstm(code: i32) -> bool {
    matches!(
        code,
        LSTM | UNIDIRECTIONAL_SEQUENCE_LSTM | BIDIRECTIONAL_SEQUENCE_LSTM
    )
}

/// The cell's weights, biases and projection: TFLite's (and NNAPI's) inputs 1–17.
const CELL_TENSORS: usize = 17;
/// Output and cell state of the one-direction forms.
const STATES: [usize; 2] = [18, 19];
/// Forward output and cell state, backward output and cell state (bidirectional).
const BI_STATES: [usize; 4] = [35, 36, 37, 38];
/// The first of the four layer-norm coefficients of the 24-input TFLite forms.
const LAYER_NORM: usize = 20;
/// The bidirectional form's inputs before its states: input, forward and backward cells.
const BI_CELLS: usize = 1 + 2 * CELL_TENSORS;
/// The bidirectional form's inputs after its states: aux input and 8 aux weights.
const BI_AUX: std::ops::Range<usize> = 39..48;

/// Whether the node's input `k` is a weight matrix or vector (quantized in a hybrid LSTM):
/// in each cell's 17 tensors the 8 gate weights, the 3 peepholes and the projection weights
/// (not the 4 gate biases nor the projection bias); every auxiliary weight of the
/// bidirectional form.
fn is_weight(bidirectional: bool, k: usize) -> bool {
    let in_cell = |j: usize| (1..=11).contains(&j) || j == 16;
    match k {
        1..=17 => in_cell(k),
        18..=34 if bidirectional => in_cell(k - CELL_TENSORS),
        _ => bidirectional && k > BI_AUX.start && k < BI_AUX.end,
    }
}

/// The node's state inputs, in the order [`lower`] takes and returns their operands.
pub(super) fn state_inputs(b: &Builder<'_>) -> Result<Vec<usize>> {
    match b.cur()?.builtin_code {
        BIDIRECTIONAL_SEQUENCE_LSTM => Ok(BI_STATES.to_vec()),
        _ => Ok(STATES.to_vec()),
    }
}

/// Lowers the LSTM-family node being lowered; `states_in` hold its states (in the order of
/// [`state_inputs`]) before the step or sequence. Returns the operands of the states after.
pub(super) fn lower(b: &mut Builder<'_>, states_in: &[u32]) -> Result<Vec<u32>> {
    let node = b.cur()?;
    match (&node.options, states_in) {
        (Options::Lstm { cell, kernel }, &[h, c]) => {
            if *kernel == LstmKernel::Basic {
                return Err(b.err(
                    "the BASIC LSTM kernel (concatenated weights, quantized 16-bit cell) is not \
                     mapped; only the FULL kernel has a float NNAPI LSTM form",
                ));
            }
            one_direction_lstm(b, cell, None, h, c)
        }
        (
            Options::UnidirectionalSequenceLstm {
                cell,
                time_major,
                diagonal_recurrent_tensors,
            },
            &[h, c],
        ) => {
            if *diagonal_recurrent_tensors {
                return Err(b.err(
                    "diagonal recurrent weights (vectors instead of matrices) have no NNAPI form",
                ));
            }
            one_direction_lstm(b, cell, Some(*time_major), h, c)
        }
        (
            Options::BidirectionalSequenceLstm {
                cell,
                merge_outputs,
                time_major,
            },
            &[fh, fc, bh, bc],
        ) => bidirectional(b, cell, *merge_outputs, *time_major, [fh, fc, bh, bc]),
        (other, _) => Err(b.err(format!(
            "options {other:?} with {} states are not an LSTM node's",
            states_in.len()
        ))),
    }
}

/// NNAPI's code for the LSTM cell's activation: the RNN family's codes (NONE 0, RELU 1,
/// RELU_N1_TO_1 2, RELU6 3, TANH 4; NNAPI documents 2 for RNN only, but its reference
/// executor, this one and TFLite's kernel apply it to LSTM too) and SIGMOID 6.
fn activation_code(b: &Builder<'_>, act: Activation) -> Result<i32> {
    match act {
        Activation::Sigmoid => Ok(6),
        other => super::rnn::activation_code(b, other),
    }
}

/// The element type of the node's input 0, which every present input but the weights must
/// share (float32 or float16; the weights are checked as [`args`] makes them); integer LSTMs
/// are refused naming why.
fn float_type(b: &Builder<'_>) -> Result<ElementType> {
    let x = b.tensor(b.input(0)?)?.element_type;
    if !matches!(x, ElementType::Float32 | ElementType::Float16) {
        return Err(b.err(format!(
            "input 0 is {}: integer LSTMs (TFLite's int8/int16 scheme with intermediate \
             scales) are not mapped; only float32 and float16 LSTMs are",
            x.name()
        )));
    }
    let node = b.cur()?;
    let bidirectional = node.builtin_code == BIDIRECTIONAL_SEQUENCE_LSTM;
    for (k, _) in node.inputs.iter().enumerate() {
        let Some(t) = b.opt_input(k)? else { continue };
        let tensor = b.tensor(t)?;
        if tensor.element_type == x || is_weight(bidirectional, k) {
            continue;
        }
        return Err(b.err(format!(
            "input {k} ({}) is {}, input 0 {}: every tensor of a float LSTM but its weights \
             has the input's type",
            tensor.name,
            tensor.element_type.name(),
            x.name()
        )));
    }
    Ok(x)
}

/// The operands of the node's inputs `range`: each present tensor's value (a weight's
/// dequantized to float32 when hybrid, see [`Builder::weights`]; it must then have the
/// input's type), NO_VALUE for an omitted (or absent) one.
fn args(b: &mut Builder<'_>, x: u32, range: std::ops::Range<usize>) -> Result<Vec<u32>> {
    let bidirectional = b.cur()?.builtin_code == BIDIRECTIONAL_SEQUENCE_LSTM;
    let mut ops = Vec::with_capacity(range.len());
    for k in range {
        let o = match b.opt_input(k)? {
            Some(t) if is_weight(bidirectional, k) => {
                let w = b.weights(x, t)?;
                if b.ty(w) != b.ty(x) {
                    return Err(b.err(format!(
                        "input {k} is {:?}, input 0 {:?}: an LSTM's weights have the input's \
                         type, or are constant int8/uint8 (hybrid) for a float32 input",
                        b.ty(w),
                        b.ty(x)
                    )));
                }
                w
            }
            Some(t) => b.value(t)?,
            None => b.no_value(x),
        };
        ops.push(o);
    }
    Ok(ops)
}

/// The activation, cell clip and projection clip scalars (clips in the input's precision).
fn scalars(b: &mut Builder<'_>, cell: &LstmCell, x: u32) -> Result<Vec<u32>> {
    let code = activation_code(b, cell.activation)?;
    for (what, v) in [("cell_clip", cell.cell_clip), ("proj_clip", cell.proj_clip)] {
        if v.is_nan() || v < 0.0 {
            return Err(b.err(format!("{what} {v} must be >= 0 (0: no clipping)")));
        }
    }
    let ty = b.ty(x);
    Ok(vec![
        b.int(code),
        b.float_like(ty, cell.cell_clip),
        b.float_like(ty, cell.proj_clip),
    ])
}

/// The input operand and the operands of inputs 0–19 (the states from `h`, `c`) of a
/// one-direction form, which has 20 inputs (24 with layer-norm coefficients) and 1 output.
fn one_direction(b: &mut Builder<'_>, h: u32, c: u32) -> Result<(u32, Vec<u32>)> {
    let n = b.cur()?.inputs.len();
    if n != LAYER_NORM && n != LAYER_NORM + 4 {
        return Err(b.err(format!(
            "{n} inputs: a FULL-kernel LSTM has 20, or 24 with layer-norm coefficients"
        )));
    }
    if b.cur()?.outputs.len() != 1 {
        return Err(b.err(format!("{} outputs, expected 1", b.cur()?.outputs.len())));
    }
    float_type(b)?;
    let x = b.value(b.input(0)?)?;
    let mut ins = vec![x];
    ins.extend(args(b, x, 1..1 + CELL_TENSORS)?);
    ins.extend([h, c]);
    Ok((x, ins))
}

/// The layer-norm coefficients (TFLite inputs 20–23), NO_VALUE where omitted; None when the
/// node has none at all.
fn layer_norm(b: &mut Builder<'_>, x: u32) -> Result<Option<Vec<u32>>> {
    let any = (LAYER_NORM..LAYER_NORM + 4).try_fold(false, |any, k| {
        Ok::<_, LowerError>(any || b.opt_input(k)?.is_some())
    })?;
    if !any {
        return Ok(None);
    }
    args(b, x, LAYER_NORM..LAYER_NORM + 4).map(Some)
}

/// LSTM (`time_major` None) → NNAPI LSTM, outputs scratch, output state, cell state,
/// output; UNIDIRECTIONAL_SEQUENCE_LSTM (`time_major` given) → the same NNAPI operation,
/// outputs output, output state, cell state. Returns the new output and cell states.
fn one_direction_lstm(
    b: &mut Builder<'_>,
    cell: &LstmCell,
    time_major: Option<bool>,
    h: u32,
    c: u32,
) -> Result<Vec<u32>> {
    let (x, mut ins) = one_direction(b, h, c)?;
    ins.extend(scalars(b, cell, x)?);
    if let Some(time_major) = time_major {
        ins.push(b.boolean(time_major));
    }
    match (layer_norm(b, x)?, time_major) {
        (Some(ln), _) => ins.extend(ln),
        // The sequence form always has NNAPI's 28 inputs; LSTM's 23-input form has none.
        (None, Some(_)) => {
            for _ in 0..4 {
                ins.push(b.no_value(x));
            }
        }
        (None, None) => {}
    }
    let y = b.define(b.output(0)?)?;
    let h_out = b.temp_same(h);
    let c_out = b.temp_same(c);
    if time_major.is_some() {
        b.op(
            OperationType::UnidirectionalSequenceLstm,
            ins,
            vec![y, h_out, c_out],
        );
        return Ok(vec![h_out, c_out]);
    }
    // The scratch buffer: one [batch, n_cell] block per gate (3 with CIFG).
    let batch = b.dims(x).first().copied().unwrap_or(0);
    let n_cell = b.dims(c).get(1).copied().unwrap_or(0);
    let gates = if b.opt_input(1)?.is_some() { 4 } else { 3 };
    let width = n_cell
        .checked_mul(gates)
        .ok_or_else(|| b.err("the scratch buffer's size overflows"))?;
    let scratch = b.temp_like(x, vec![batch, width]);
    b.op(OperationType::Lstm, ins, vec![scratch, h_out, c_out, y]);
    Ok(vec![h_out, c_out])
}

/// BIDIRECTIONAL_SEQUENCE_LSTM → the same NNAPI operation with its four state outputs.
fn bidirectional(
    b: &mut Builder<'_>,
    cell: &LstmCell,
    merge_outputs: bool,
    time_major: bool,
    states: [u32; 4],
) -> Result<Vec<u32>> {
    let n = b.cur()?.inputs.len();
    if n != BI_AUX.end {
        return Err(b.err(format!("{n} inputs, expected {}", BI_AUX.end)));
    }
    let outs = if merge_outputs { 1 } else { 2 };
    let have = b.cur()?.outputs.len();
    if have != outs {
        return Err(b.err(format!(
            "{have} outputs with merge_outputs {merge_outputs}, expected {outs}"
        )));
    }
    float_type(b)?;
    let x = b.value(b.input(0)?)?;
    let mut ins = vec![x];
    ins.extend(args(b, x, 1..BI_CELLS)?);
    ins.extend(states);
    ins.extend(args(b, x, BI_AUX)?);
    ins.extend(scalars(b, cell, x)?);
    ins.push(b.boolean(merge_outputs));
    ins.push(b.boolean(time_major));
    // TFLite's bidirectional form has no layer normalization: NNAPI's 8 coefficients omitted.
    for _ in 0..8 {
        ins.push(b.no_value(x));
    }
    let mut outputs = b.define_outputs()?;
    let new_states: Vec<u32> = states.iter().map(|&s| b.temp_same(s)).collect();
    outputs.extend(&new_states);
    b.op(OperationType::BidirectionalSequenceLstm, ins, outputs);
    Ok(new_states)
}
