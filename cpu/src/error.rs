//! The crate's errors: graph validation ([`GraphError`]) and execution ([`ExecError`]).
//!
//! Both the interpreter and the kernels return [`ExecError`], so it lives here, below both.

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
        /// HAL name of the operation type, and of its first input's operand type when it has
        /// one: `STRIDED_SLICE, TENSOR_QUANT8_ASYMM`.
        op: String,
        /// The rule broken.
        reason: String,
    },
    /// A whole-graph rule is broken (input/output lists, writers, cycles).
    #[error("graph: {0}")]
    InvalidGraph(String),
    /// One of the root graph's referenced graphs (IF and WHILE subgraphs) breaks a rule or
    /// cannot run; `error` says which, with places inside that graph.
    #[error("referenced graph {graph}: {error}")]
    InReferenced {
        /// Index into the root graph's `referenced`.
        graph: usize,
        /// What is wrong inside it.
        error: Box<GraphError>,
    },
    /// The graph is valid but this executor cannot run operation `index`.
    #[error("operation {index} ({op}) is not supported by the CPU executor: {reason}")]
    Unsupported {
        /// Operation index.
        index: usize,
        /// HAL name of the operation type and of its first input's operand type, as for
        /// `InvalidOperation`.
        op: String,
        /// What is missing.
        reason: String,
    },
}

/// The shape of one output after (or instead of) an execution.
///
/// Defined beside [`ExecError`], whose `OutputInsufficientSize` carries it, so that the error
/// module needs nothing from the interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputShape {
    /// Actual extents.
    pub dimensions: Vec<u32>,
    /// Whether the caller's buffer was large enough.
    pub is_sufficient: bool,
}

/// Why an execution failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum ExecError {
    /// At least one output buffer is too small; every output's needed shape is reported.
    #[error("output buffer too small")]
    OutputInsufficientSize(Vec<OutputShape>),
    /// The request (inputs, outputs, pools) is invalid for this graph.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A WHILE loop ran longer than the execution's loop timeout (NNAPI's
    /// MISSED_DEADLINE_TRANSIENT; see `PreparedGraph::execute_with_loop_timeout`).
    #[error("loop timeout: {0}")]
    LoopTimeout(String),
    /// The execution failed for another reason.
    #[error("execution failed: {0}")]
    Failed(String),
}
