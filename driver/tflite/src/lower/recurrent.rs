//! The recurrent builtins whose state lives in TFLite variable tensors, and the hooks through
//! which the state pass (`state.rs`) lowers them: which builtins they are
//! ([`is_recurrent`]), which of a node's inputs hold its states ([`state_inputs`]), the
//! lowering of one node from its states' operands to the new states' ([`lower`]), and the
//! conversion of an initial state value ([`initial_state`]). The lowerings themselves: RNN
//! and SVDF in `rnn.rs`, the sequence RNNs in `seq_rnn.rs`, the LSTM family in `lstm.rs`.

use super::LowerError;
use super::build::Builder;
use super::code::{BIDIRECTIONAL_SEQUENCE_RNN, RNN, SVDF, UNIDIRECTIONAL_SEQUENCE_RNN};
use super::{lstm, rnn, seq_rnn};

type Result<T> = std::result::Result<T, LowerError>;

/// Whether builtin `code` is a recurrent operation with variable state, lowered here.
pub(super) fn is_recurrent(code: i32) -> bool {
    matches!(
        code,
        RNN | SVDF | UNIDIRECTIONAL_SEQUENCE_RNN | BIDIRECTIONAL_SEQUENCE_RNN
    ) || lstm::is_lstm(code)
}

/// The node's inputs that hold its state (variable tensors), in the order [`lower`] takes
/// and returns their operands.
pub(super) fn state_inputs(b: &Builder<'_>) -> Result<Vec<usize>> {
    match b.cur()?.builtin_code {
        RNN | SVDF | UNIDIRECTIONAL_SEQUENCE_RNN => Ok(vec![rnn::STATE_INPUT]),
        BIDIRECTIONAL_SEQUENCE_RNN => Ok(seq_rnn::BIDIRECTIONAL_STATES.to_vec()),
        code if lstm::is_lstm(code) => lstm::state_inputs(b),
        other => Err(b.err(format!("builtin {other} has no recurrent state"))),
    }
}

/// Lowers the recurrent node being lowered; `states_in` hold its states (in the order of
/// [`state_inputs`]) before the step. Returns the operands of the states after it.
pub(super) fn lower(b: &mut Builder<'_>, states_in: &[u32]) -> Result<Vec<u32>> {
    match (b.cur()?.builtin_code, states_in) {
        (RNN | SVDF, &[state_in]) => Ok(vec![rnn::rnn_or_svdf(b, state_in)?]),
        (UNIDIRECTIONAL_SEQUENCE_RNN, &[state_in]) => {
            Ok(vec![seq_rnn::unidirectional(b, state_in)?])
        }
        (BIDIRECTIONAL_SEQUENCE_RNN, &[fw, bw]) => {
            let (fw, bw) = seq_rnn::bidirectional(b, fw, bw)?;
            Ok(vec![fw, bw])
        }
        (code, _) if lstm::is_lstm(code) => lstm::lower(b, states_in),
        (other, _) => Err(b.err(format!(
            "builtin {other} with {} states is not a recurrent node",
            states_in.len()
        ))),
    }
}

/// The NNAPI state equal to TFLite state `bytes` of the node being lowered (only SVDF's
/// differs, see `rnn::initial_state`).
pub(super) fn initial_state(b: &Builder<'_>, bytes: Vec<u8>) -> Result<Vec<u8>> {
    rnn::initial_state(b, bytes)
}
