//! The sequence forms of RNN: UNIDIRECTIONAL_SEQUENCE_RNN → NNAPI UNIDIRECTIONAL_SEQUENCE_RNN
//! and BIDIRECTIONAL_SEQUENCE_RNN → NNAPI BIDIRECTIONAL_SEQUENCE_RNN, their inputs in TFLite's
//! order (which is NNAPI's), then the activation, time_major (INT32 for the unidirectional
//! form, BOOL for the bidirectional one) and merge_outputs.
//!
//! The hidden states are TFLite variable tensors: the kernels start from them and leave the
//! last step's hidden state in them. They arrive as state inputs (`state.rs`) and leave
//! through NNAPI 1.3's optional hidden-state outputs, which become the state outputs.
//!
//! BIDIRECTIONAL_SEQUENCE_RNN's auxiliary input (inputs 9, 10, 11) maps where LiteRT and
//! NNAPI compute the same thing: none; the auxiliary input alone ("parallel linking": it is
//! the backward cell's input) when time-major; the auxiliary input with both auxiliary
//! weights ("cross linking", each cell adds aux·aux_wᵀ) unless time-major with an auxiliary
//! size other than the input's. The two refused cases are where LiteRT 2.3's kernel departs
//! from its own documented meaning (and from NNAPI): batch-major parallel linking runs the
//! backward cell on the input, ignoring the auxiliary input, and time-major cross linking
//! steps through the auxiliary input with the input's size. LiteRT's hybrid kernel departs
//! twice more, so a hybrid node is refused there too: time-major with more than one step (it
//! runs the whole sequence once per time step, the hidden states carried across the
//! repeats), and batch-major with an auxiliary input of a size other than the input's (it
//! steps through the auxiliary input by the input's size).
//!
//! Only float32 and float16 map (TFLite's kernels run float32, hybrid int8 weights and
//! nothing else): a hybrid node's weights (and auxiliary weights) are dequantized to float32
//! at import ([`Builder::weights`]), the float computation NNAPI's delegate makes of it. The
//! activation passes through as for RNN ([`activation_code`]). Called through the hooks of
//! `recurrent.rs`; shares RNN's helpers (`rnn.rs`).

use nnaccel_hal::OperationType;

use super::LowerError;
use super::build::Builder;
use super::rnn::{activation_code, float_inputs, require_float};
use crate::graph::{ElementType, Options};

type Result<T> = std::result::Result<T, LowerError>;

/// The inputs of BIDIRECTIONAL_SEQUENCE_RNN that hold its states (forward, backward hidden
/// state).
pub(super) const BIDIRECTIONAL_STATES: [usize; 2] = [4, 8];

/// BIDIRECTIONAL_SEQUENCE_RNN's inputs: 9 weights and states, 3 auxiliary.
const BIDIRECTIONAL_INPUTS: usize = 12;
/// The first of the optional auxiliary inputs (aux input, forward and backward aux weights).
const AUX_INPUT: usize = 9;
/// BIDIRECTIONAL_SEQUENCE_RNN's weight inputs (forward, backward; input and recurrent; the
/// auxiliary weights), which a hybrid node holds quantized.
const BIDIRECTIONAL_WEIGHTS: [usize; 6] = [1, 2, 5, 6, 10, 11];

/// Lowers the UNIDIRECTIONAL_SEQUENCE_RNN node being lowered from hidden state `state_in`;
/// returns the operand of the hidden state after the last step.
pub(super) fn unidirectional(b: &mut Builder<'_>, state_in: u32) -> Result<u32> {
    b.arity(5..=5, 1)?;
    let Options::SequenceRnn {
        time_major,
        activation,
        ..
    } = b.cur()?.options
    else {
        return Err(b.err("the node's options are not SequenceRNNOptions"));
    };
    let code = activation_code(b, activation)?;
    sequence_rank(b)?;
    let mut inputs = float_inputs(b, None)?;
    inputs.push(state_in);
    one_type(b, &inputs)?;
    inputs.push(b.int(code));
    inputs.push(b.int(i32::from(time_major)));
    let output = b.define(b.output(0)?)?;
    let state_out = b.temp_same(state_in);
    b.op(
        OperationType::UnidirectionalSequenceRnn,
        inputs,
        vec![output, state_out],
    );
    Ok(state_out)
}

/// Lowers the BIDIRECTIONAL_SEQUENCE_RNN node being lowered from hidden states `fw_state`
/// and `bw_state`; returns the operands of the two hidden states after the last step.
pub(super) fn bidirectional(
    b: &mut Builder<'_>,
    fw_state: u32,
    bw_state: u32,
) -> Result<(u32, u32)> {
    let Options::BidirectionalSequenceRnn {
        time_major,
        activation,
        merge_outputs,
        ..
    } = b.cur()?.options
    else {
        return Err(b.err("the node's options are not BidirectionalSequenceRNNOptions"));
    };
    let outputs = if merge_outputs { 1 } else { 2 };
    b.arity(BIDIRECTIONAL_INPUTS..=BIDIRECTIONAL_INPUTS, outputs)?;
    let code = activation_code(b, activation)?;
    sequence_rank(b)?;
    check_aux(b, time_major)?;
    check_hybrid(b, time_major)?;
    let x = b.value(b.input(0)?)?;
    require_float(b, 0, x)?;
    let mut inputs = Vec::with_capacity(BIDIRECTIONAL_INPUTS + 3);
    inputs.push(x);
    for k in 1..AUX_INPUT {
        let o = match k {
            4 => fw_state,
            8 => bw_state,
            _ => input_or_weights(b, x, k, b.input(k)?)?,
        };
        inputs.push(o);
    }
    for k in AUX_INPUT..BIDIRECTIONAL_INPUTS {
        let o = match b.opt_input(k)? {
            Some(t) => input_or_weights(b, x, k, t)?,
            None => b.no_value(x),
        };
        inputs.push(o);
    }
    // An omitted auxiliary input's NO_VALUE operand has the input's type, so it passes.
    one_type(b, &inputs)?;
    inputs.push(b.int(code));
    inputs.push(b.boolean(time_major));
    inputs.push(b.boolean(merge_outputs));
    let mut outs = b.define_outputs()?;
    let fw_out = b.temp_same(fw_state);
    let bw_out = b.temp_same(bw_state);
    outs.extend([fw_out, bw_out]);
    b.op(OperationType::BidirectionalSequenceRnn, inputs, outs);
    Ok((fw_out, bw_out))
}

/// The float operand of BIDIRECTIONAL_SEQUENCE_RNN's input `k` (tensor `t`), `x` its input:
/// a weight input dequantized when hybrid ([`Builder::weights`]).
fn input_or_weights(b: &mut Builder<'_>, x: u32, k: usize, t: usize) -> Result<u32> {
    let o = if BIDIRECTIONAL_WEIGHTS.contains(&k) {
        b.weights(x, t)?
    } else {
        b.value(t)?
    };
    require_float(b, k, o)?;
    Ok(o)
}

/// The input must be 3-D: `[time, batch, n]` or `[batch, time, n]`.
fn sequence_rank(b: &Builder<'_>) -> Result<()> {
    let shape = b.shape(b.input(0)?)?;
    if shape.len() != 3 {
        return Err(b.err(format!(
            "the input has shape {shape:?}: a sequence is 3-D ([time, batch, input] or \
             [batch, time, input])"
        )));
    }
    Ok(())
}

/// The auxiliary inputs take a form LiteRT and NNAPI agree on (see the module's text).
fn check_aux(b: &Builder<'_>, time_major: bool) -> Result<()> {
    let aux = (
        b.opt_input(AUX_INPUT)?,
        b.opt_input(AUX_INPUT + 1)?,
        b.opt_input(AUX_INPUT + 2)?,
    );
    match aux {
        (None, None, None) => Ok(()),
        (Some(_), None, None) if time_major => Ok(()),
        (Some(_), None, None) => Err(b.err(
            "an auxiliary input without auxiliary weights in batch-major form: LiteRT's \
             kernel runs the backward cell on the input there and ignores the auxiliary \
             input, NNAPI runs it on the auxiliary input; no mapping gives LiteRT's result",
        )),
        (Some(a), Some(_), Some(_)) => {
            let aux_size = b.shape(a)?.last().copied();
            let in_size = b.shape(b.input(0)?)?.last().copied();
            if time_major && aux_size != in_size {
                return Err(b.err(format!(
                    "time-major with an auxiliary input of size {aux_size:?} and an input of \
                     size {in_size:?}: LiteRT's kernel steps through the auxiliary input by \
                     the input's size, NNAPI by its own; they agree only when the sizes do"
                )));
            }
            Ok(())
        }
        _ => Err(b.err(
            "the auxiliary inputs 9-11 must be none, the auxiliary input alone, or the \
             auxiliary input with both auxiliary weights",
        )),
    }
}

/// A hybrid node (float input, a quantized weight) takes a form LiteRT's hybrid kernel
/// computes as documented (see the module's text).
fn check_hybrid(b: &Builder<'_>, time_major: bool) -> Result<()> {
    let x = b.input(0)?;
    if b.tensor(x)?.element_type != ElementType::Float32 {
        return Ok(());
    }
    let mut hybrid = false;
    for k in BIDIRECTIONAL_WEIGHTS {
        if let Some(t) = b.opt_input(k)? {
            let ty = b.tensor(t)?.element_type;
            hybrid |= !matches!(ty, ElementType::Float32 | ElementType::Float16);
        }
    }
    if !hybrid {
        return Ok(());
    }
    let shape = b.shape(x)?;
    let steps = shape.first().copied().unwrap_or(0);
    if time_major && steps > 1 {
        return Err(b.err(format!(
            "a hybrid (quantized weights) time-major sequence of {steps} steps: LiteRT's \
             hybrid kernel runs the whole sequence once per step, its hidden states carried \
             across the repeats; NNAPI runs it once"
        )));
    }
    if let (false, Some(a)) = (time_major, b.opt_input(AUX_INPUT)?) {
        let aux_size = b.shape(a)?.last().copied();
        let in_size = shape.last().copied();
        if aux_size != in_size {
            return Err(b.err(format!(
                "a hybrid (quantized weights) batch-major node with an auxiliary input of \
                 size {aux_size:?} and an input of size {in_size:?}: LiteRT's hybrid kernel \
                 steps through the auxiliary input by the input's size, NNAPI by its own"
            )));
        }
    }
    Ok(())
}

/// Every operand in `ops` (the input first) has the input's type: the layer computes in
/// one float type.
fn one_type(b: &Builder<'_>, ops: &[u32]) -> Result<()> {
    let Some((&first, rest)) = ops.split_first() else {
        return Ok(());
    };
    let ty = b.ty(first);
    match rest.iter().find(|&&o| b.ty(o) != ty) {
        Some(&o) => Err(b.err(format!(
            "the input is {ty:?} and another of its tensors {:?}: a recurrent layer \
             computes in one float type",
            b.ty(o)
        ))),
        None => Ok(()),
    }
}
