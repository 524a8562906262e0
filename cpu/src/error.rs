//! Graph validation errors.

/// Why a [`crate::Graph`] is not valid or cannot be prepared.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum GraphError {
    /// An operand's declaration breaks a rule (type, quantization, lifetime, location).
    #[error("operand {index}: {reason}")]
    InvalidOperand {
        /// Operand index.
        index: usize,
        /// The rule broken.
        reason: String,
    },
    /// An operation's argument list breaks a rule of its definition.
    #[error("operation {index} ({op}): {reason}")]
    InvalidOperation {
        /// Operation index.
        index: usize,
        /// HAL name of the operation type.
        op: &'static str,
        /// The rule broken.
        reason: String,
    },
    /// A whole-graph rule is broken (input/output lists, writers, cycles).
    #[error("graph: {0}")]
    InvalidGraph(String),
    /// The graph is valid but this executor cannot run operation `index`.
    #[error("operation {index} ({op}) is not supported by the CPU executor")]
    Unsupported {
        /// Operation index.
        index: usize,
        /// HAL name of the operation type.
        op: &'static str,
    },
}
