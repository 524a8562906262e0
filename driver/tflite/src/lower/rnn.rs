//! RNN → NNAPI RNN and SVDF → NNAPI SVDF, with the argument orders of NNAPI's TFLite
//! delegate, and what the other recurrent lowerings (`seq_rnn.rs`, `lstm.rs`) share with
//! them: the activation code and the float-only input checks. The state tensor's value
//! before the step arrives as `state_in` (a state input of the model, see `state.rs` and the
//! hooks in `recurrent.rs`); the operand of the state after the step is returned, so that it
//! becomes the state output.
//!
//! Only float32 and float16 map (the executor's RNN and SVDF); a hybrid node (float32 input,
//! constant int8/uint8 weights) computes in float with its weights dequantized at import
//! ([`Builder::weights`]), as NNAPI's delegate maps it; integer kernels are refused naming
//! the node. The activation inside the recurrence passes through as NNAPI's
//! delegate passes it (TANH included, see [`activation_code`]); SIGN_BIT is refused.

use nnaccel_hal::OperationType;

use super::LowerError;
use super::build::{Builder, byte_len, is_float, plain};
use crate::graph::{Activation, Options};

type Result<T> = std::result::Result<T, LowerError>;

/// The input of RNN and SVDF that holds the state (a variable tensor).
pub(super) const STATE_INPUT: usize = 4;

/// The activation code of a recurrent operation. NNAPI documents a fuse code, but its
/// reference executor (and this one) applies the RNN family's activation as an
/// `ActivationFn`, which also takes TANH (4): NNAPI's TFLite delegate passes TFLite's code
/// through, and so does this lowering. SIGN_BIT has no NNAPI form.
pub(super) fn activation_code(b: &Builder<'_>, act: Activation) -> Result<i32> {
    match act {
        Activation::None => Ok(0),
        Activation::Relu => Ok(1),
        Activation::ReluN1To1 => Ok(2),
        Activation::Relu6 => Ok(3),
        Activation::Tanh => Ok(4),
        other => Err(b.err(format!(
            "fused activation {other:?} inside the recurrence: NNAPI's recurrent operations \
             take NONE, RELU, RELU_N1_TO_1, RELU6 and TANH"
        ))),
    }
}

/// Operands of the node's inputs 0..4 (input 3, the bias, may be omitted only for SVDF: a
/// zero bias of `units` elements is made then); the weights (inputs 1 and 2) dequantized
/// when hybrid ([`Builder::weights`]). Refuses non-float inputs.
pub(super) fn float_inputs(b: &mut Builder<'_>, bias_units: Option<u32>) -> Result<Vec<u32>> {
    let Some(xt) = b.opt_input(0)? else {
        return Err(b.err("input 0 is omitted"));
    };
    let x = b.value(xt)?;
    require_float(b, 0, x)?;
    let mut ops = vec![x];
    for k in 1..STATE_INPUT {
        let o = match (b.opt_input(k)?, k, bias_units) {
            (Some(t), 1 | 2, _) => b.weights(x, t)?,
            (Some(t), _, _) => b.value(t)?,
            (None, 3, Some(units)) => {
                let operand = plain(b.ty(x), vec![units]);
                let len = byte_len(&operand).ok_or_else(|| b.err("the bias size overflows"))?;
                b.constant(operand, vec![0; len])
            }
            (None, _, _) => return Err(b.err(format!("input {k} is omitted"))),
        };
        require_float(b, k, o)?;
        ops.push(o);
    }
    Ok(ops)
}

/// Refuses operand `o` of the node's input `k` unless it is float32 or float16.
pub(super) fn require_float(b: &Builder<'_>, k: usize, o: u32) -> Result<()> {
    if is_float(b.ty(o)) {
        return Ok(());
    }
    Err(b.err(format!(
        "input {k} is {:?}: only float32 and float16 recurrent layers map, and hybrid ones \
         (float32 input, constant int8/uint8 weights); integer kernels have no NNAPI form \
         the executor runs",
        b.ty(o)
    )))
}

/// The NNAPI state equal to TFLite state `bytes` of the node being lowered. RNN: the same.
/// SVDF: TFLite shifts each filter's memory left before writing the newest activation into
/// its last slot; NNAPI writes the last slot first and shifts after, so its state is TFLite's
/// shifted left by one (the oldest entry, which TFLite drops next, gone; the last slot 0).
pub(super) fn initial_state(b: &Builder<'_>, bytes: Vec<u8>) -> Result<Vec<u8>> {
    if !matches!(b.cur()?.options, Options::Svdf { .. }) {
        return Ok(bytes);
    }
    let memory = b.shape(b.input(2)?)?.get(1).copied().unwrap_or(0);
    let element = match b.tensor(b.input(STATE_INPUT)?)?.element_type.size() {
        Some(e) if e > 0 => e,
        _ => return Err(b.err("the state's element type has no fixed size")),
    };
    let group = usize::try_from(memory)
        .ok()
        .and_then(|m| m.checked_mul(element))
        .filter(|&g| g > 0 && bytes.len() % g == 0)
        .ok_or_else(|| {
            b.err(format!(
                "the state ({} bytes) is not whole filters of memory size {memory}",
                bytes.len()
            ))
        })?;
    let mut out = vec![0; bytes.len()];
    for (dst, src) in out.chunks_mut(group).zip(bytes.chunks(group)) {
        let (keep, _) = dst.split_at_mut(group - element);
        keep.copy_from_slice(src.get(element..).unwrap_or_default());
    }
    Ok(out)
}

/// Lowers the RNN or SVDF node being lowered; `state_in` holds its state before the step.
/// Returns the operand of the state after it.
pub(super) fn rnn_or_svdf(b: &mut Builder<'_>, state_in: u32) -> Result<u32> {
    b.arity(5..=5, 1)?;
    let node = b.cur()?;
    // asymmetric_quantize_inputs only changes how a hybrid kernel quantizes its input at
    // run time; the lowering computes hybrid nodes in float, so it has no meaning here.
    let (ty, extra, act) = match node.options {
        Options::Rnn { activation, .. } => (OperationType::Rnn, None, activation),
        Options::Svdf {
            rank, activation, ..
        } => (OperationType::Svdf, Some(rank), activation),
        _ => return Err(b.err("the node's options are not RNNOptions or SVDFOptions")),
    };
    let code = activation_code(b, act)?;
    let bias_units = match extra {
        Some(rank) => {
            if rank <= 0 {
                return Err(b.err(format!("rank {rank} must be positive")));
            }
            let filters = b.shape(b.input(1)?)?.first().copied().unwrap_or(0);
            if filters <= 0 || filters % rank != 0 {
                return Err(b.err(format!(
                    "weights_feature has {filters} filters, not a positive multiple of rank {rank}"
                )));
            }
            Some((filters / rank) as u32)
        }
        None => None,
    };
    let mut inputs = float_inputs(b, bias_units)?;
    if inputs.first().map(|&i| b.ty(i)) != Some(b.ty(state_in)) {
        return Err(b.err("the state's type differs from the input's"));
    }
    inputs.push(state_in);
    if let Some(rank) = extra {
        inputs.push(b.int(rank));
    }
    inputs.push(b.int(code));
    let out_t = b.output(0)?;
    let output = b.define(out_t)?;
    let state_out = b.temp_same(state_in);
    b.op(ty, inputs, vec![state_out, output]);
    Ok(state_out)
}
