//! Graph validation and per-operation support checks.

pub(crate) use crate::check::Issue;
use crate::control_flow;
use crate::error::GraphError;
use crate::model::{Graph, Lifetime, Operand, OperandType, OperationType};
use crate::ops::registry;
use crate::order::execution_order;

use OperandType as T;

// The public entry points of validation are defined here rather than in model.rs, so that
// validation depends on the model and not the other way round.
impl Graph {
    /// Structural and per-operation validation: operand types and quantization parameters,
    /// constant locations and lengths, graph input/output lists against lifetimes, operand
    /// indexes in range, every temporary/output written exactly once, no cycles, and the
    /// argument count, types and fixed quantization of every operation this executor knows.
    /// Operations without a kernel are only checked structurally.
    ///
    /// The graphs of `referenced` (IF and WHILE subgraphs) are validated by the same rules,
    /// with the control-flow rules (no recursion, nesting at most [`crate::MAX_NESTING_DEPTH`]).
    pub fn validate(&self) -> Result<(), GraphError> {
        validate_model(self).map(|_| ())
    }

    /// Whether this executor implements operation `index` as written (op type + operand types).
    pub fn is_operation_supported(&self, index: usize) -> bool {
        match self.operations.get(index) {
            Some(_) => check_operation(self, index).is_ok(),
            None => false,
        }
    }

    /// Why operation `index` cannot run on this executor, or None when it can.
    pub fn unsupported_reason(&self, index: usize) -> Option<String> {
        if index >= self.operations.len() {
            return Some(format!("operation {index} does not exist"));
        }
        match check_operation(self, index) {
            Ok(()) => None,
            Err(Issue::Invalid(r) | Issue::Unsupported(r)) => Some(format!(
                "operation {index} ({}): {r}",
                operation_label(self, index)
            )),
        }
    }
}

/// Operation types with kernels, and for each the primary tensor types implemented, in code
/// order.
pub fn supported_operation_types() -> &'static [(OperationType, &'static [OperandType])] {
    static ALL: std::sync::OnceLock<Vec<(OperationType, &'static [OperandType])>> =
        std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut all: Vec<_> = registry::all()
            .map(|d| (d.op, d.types))
            .chain(control_flow::SUPPORTED.iter().copied())
            .collect();
        all.sort_by_key(|(op, _)| op.code());
        all
    })
}

fn operand_err(index: usize, reason: impl Into<String>) -> GraphError {
    GraphError::InvalidOperand {
        index,
        reason: reason.into(),
    }
}

fn check_operand(g: &Graph, i: usize, o: &Operand) -> Result<(), GraphError> {
    let ty = o.ty;
    if ty.is_scalar() && !o.dimensions.is_empty() {
        return Err(operand_err(
            i,
            format!("scalar {} with dimensions", ty.name()),
        ));
    }
    let (zp_lo, zp_hi) = match ty {
        T::TensorQuant8Asymm => (0, 255),
        T::TensorQuant8AsymmSigned => (-128, 127),
        T::TensorQuant16Asymm => (0, 65535),
        _ => (0, 0),
    };
    match ty {
        T::TensorQuant8Asymm
        | T::TensorQuant8AsymmSigned
        | T::TensorQuant16Asymm
        | T::TensorQuant8Symm
        | T::TensorQuant16Symm => {
            if !(o.scale > 0.0 && o.scale.is_finite()) {
                return Err(operand_err(i, format!("{} needs a scale > 0", ty.name())));
            }
            if o.zero_point < zp_lo || o.zero_point > zp_hi {
                return Err(operand_err(
                    i,
                    format!(
                        "{} zero point {} outside [{zp_lo}, {zp_hi}]",
                        ty.name(),
                        o.zero_point
                    ),
                ));
            }
        }
        T::TensorInt32 => {
            if !(o.scale >= 0.0 && o.scale.is_finite()) {
                return Err(operand_err(i, "TENSOR_INT32 scale must be >= 0"));
            }
        }
        T::TensorQuant8SymmPerChannel => {
            if o.zero_point != 0 || o.scale != 0.0 {
                return Err(operand_err(
                    i,
                    "TENSOR_QUANT8_SYMM_PER_CHANNEL must have scale 0 and zero point 0",
                ));
            }
            let Some(cq) = &o.channel_quant else {
                return Err(operand_err(
                    i,
                    "per-channel operand without channel quantization",
                ));
            };
            let Some(&extent) = o.dimensions.get(cq.channel_dim as usize) else {
                return Err(operand_err(i, "channel_dim outside the operand's rank"));
            };
            if extent != 0 && cq.scales.len() != extent as usize {
                return Err(operand_err(
                    i,
                    format!(
                        "{} scales for a channel extent of {extent}",
                        cq.scales.len()
                    ),
                ));
            }
            if cq.scales.iter().any(|s| !(*s > 0.0 && s.is_finite())) {
                return Err(operand_err(i, "per-channel scales must be > 0"));
            }
        }
        _ => {
            if o.zero_point != 0 || o.scale != 0.0 {
                return Err(operand_err(
                    i,
                    format!("{} must have scale 0 and zero point 0", ty.name()),
                ));
            }
        }
    }
    if ty != T::TensorQuant8SymmPerChannel && o.channel_quant.is_some() {
        return Err(operand_err(
            i,
            "channel quantization on a non-per-channel type",
        ));
    }
    match &o.lifetime {
        Lifetime::ConstantCopy { offset, length } => {
            let size = o
                .byte_size()
                .ok_or_else(|| operand_err(i, "constant with unknown or too large dimensions"))?;
            if *length != size {
                return Err(operand_err(
                    i,
                    format!("CONSTANT_COPY length {length} but the value needs {size} bytes"),
                ));
            }
            let end = offset
                .checked_add(*length)
                .ok_or_else(|| operand_err(i, "CONSTANT_COPY location overflows"))?;
            if end > g.operand_values.len() {
                return Err(operand_err(
                    i,
                    format!(
                        "CONSTANT_COPY [{offset}, {end}) outside operand_values ({} bytes)",
                        g.operand_values.len()
                    ),
                ));
            }
        }
        Lifetime::ConstantReference { offset, length, .. } => {
            let size = o
                .byte_size()
                .ok_or_else(|| operand_err(i, "constant with unknown or too large dimensions"))?;
            if *length != size {
                return Err(operand_err(
                    i,
                    format!("CONSTANT_REFERENCE length {length} but the value needs {size} bytes"),
                ));
            }
            if offset.checked_add(*length).is_none() {
                return Err(operand_err(i, "CONSTANT_REFERENCE location overflows"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Execution orders of a valid model: the root graph's, and each referenced graph's.
pub(crate) struct ModelOrder {
    pub(crate) root: Vec<usize>,
    pub(crate) referenced: Vec<Vec<usize>>,
}

/// Validates the model: the root graph `g`, each of its referenced graphs, and the references
/// between them; returns every graph's execution order.
pub(crate) fn validate_model(g: &Graph) -> Result<ModelOrder, GraphError> {
    let root = validate_graph(g, g)?;
    let referenced = g
        .referenced
        .iter()
        .enumerate()
        .map(|(k, sub)| {
            validate_graph(sub, g).map_err(|e| GraphError::InReferenced {
                graph: k,
                error: Box::new(e),
            })
        })
        .collect::<Result<_, _>>()?;
    control_flow::check_references(g)?;
    Ok(ModelOrder { root, referenced })
}

/// Validates graph `g` of the model whose root is `root`; returns the operations in a valid
/// execution order.
fn validate_graph(g: &Graph, root: &Graph) -> Result<Vec<usize>, GraphError> {
    let n = g.operands.len();
    for (i, o) in g.operands.iter().enumerate() {
        check_operand(g, i, o)?;
        control_flow::check_operand(root, o).map_err(|r| operand_err(i, r))?;
    }
    for (list, want, what) in [
        (&g.input_indexes, Lifetime::SubgraphInput, "input"),
        (&g.output_indexes, Lifetime::SubgraphOutput, "output"),
    ] {
        let mut seen = vec![false; n];
        for (k, &idx) in list.iter().enumerate() {
            let idx = idx as usize;
            let o = g.operands.get(idx).ok_or_else(|| {
                GraphError::InvalidGraph(format!("{what} {k} names operand {idx}, out of range"))
            })?;
            if o.lifetime != want {
                return Err(GraphError::InvalidGraph(format!(
                    "{what} {k} (operand {idx}) has lifetime {:?}",
                    o.lifetime
                )));
            }
            if std::mem::replace(&mut seen[idx], true) {
                return Err(GraphError::InvalidGraph(format!(
                    "operand {idx} listed twice as a graph {what}"
                )));
            }
        }
        for (idx, o) in g.operands.iter().enumerate() {
            if o.lifetime == want && !seen[idx] {
                return Err(GraphError::InvalidGraph(format!(
                    "operand {idx} has lifetime {want:?} but is not a graph {what}"
                )));
            }
        }
    }
    let mut writer: Vec<Option<usize>> = vec![None; n];
    for (oi, op) in g.operations.iter().enumerate() {
        let err = |reason: String| GraphError::InvalidOperation {
            index: oi,
            op: op.op.name().to_string(),
            reason,
        };
        for &x in &op.inputs {
            if x as usize >= n {
                return Err(err(format!("input operand {x} out of range")));
            }
        }
        if op.outputs.is_empty() {
            return Err(err("no outputs".into()));
        }
        for &x in &op.outputs {
            let x = x as usize;
            let o = g
                .operands
                .get(x)
                .ok_or_else(|| err(format!("output operand {x} out of range")))?;
            if !matches!(
                o.lifetime,
                Lifetime::TemporaryVariable | Lifetime::SubgraphOutput
            ) {
                return Err(err(format!(
                    "output operand {x} has lifetime {:?}, must be TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT",
                    o.lifetime
                )));
            }
            if let Some(prev) = writer[x] {
                return Err(err(format!(
                    "operand {x} is written more than once (also by operation {prev})"
                )));
            }
            writer[x] = Some(oi);
        }
    }
    for (idx, o) in g.operands.iter().enumerate() {
        if matches!(
            o.lifetime,
            Lifetime::TemporaryVariable | Lifetime::SubgraphOutput
        ) && writer[idx].is_none()
        {
            return Err(GraphError::InvalidGraph(format!(
                "operand {idx} ({:?}) is never written by an operation",
                o.lifetime
            )));
        }
    }
    let order = execution_order(
        n,
        g.operations
            .iter()
            .map(|op| (op.inputs.as_slice(), op.outputs.as_slice())),
    )
    .map_err(|_| {
        GraphError::InvalidGraph(
            "the operations contain a cycle (no topological order exists)".into(),
        )
    })?;
    for oi in 0..g.operations.len() {
        if let Err(Issue::Invalid(reason)) = check_operation_in(root, g, oi) {
            return Err(GraphError::InvalidOperation {
                index: oi,
                op: operation_label(g, oi),
                reason,
            });
        }
    }
    Ok(order)
}

/// How errors name operation `oi`: its type, and its first input's operand type when that
/// operand exists (`STRIDED_SLICE, TENSOR_QUANT8_ASYMM`).
pub(crate) fn operation_label(g: &Graph, oi: usize) -> String {
    let Some(op) = g.operations.get(oi) else {
        return format!("operation {oi}");
    };
    match op.inputs.first().and_then(|&i| g.operands.get(i as usize)) {
        Some(o) => format!("{}, {}", op.op.name(), o.ty.name()),
        None => op.op.name().to_string(),
    }
}

/// Ok when the CPU executor can run operation `oi` of the root graph `g` as written (IF and
/// WHILE: with every operation of the graphs they reach).
pub(crate) fn check_operation(g: &Graph, oi: usize) -> Result<(), Issue> {
    check_operation_in(g, g, oi)?;
    control_flow::check_nested(g, oi, &|sub, j| check_operation_in(g, sub, j))
}

/// Ok when the CPU executor can run operation `oi` of `g`, a graph of the model `root`, as
/// written (IF and WHILE: their own arguments only).
pub(crate) fn check_operation_in(root: &Graph, g: &Graph, oi: usize) -> Result<(), Issue> {
    match control_flow::check(root, g, oi) {
        Some(verdict) => verdict,
        None => check_op(g, oi),
    }
}

/// The operation's table row runs its static check; an operation without a row has no
/// kernel here.
fn check_op(g: &Graph, oi: usize) -> Result<(), Issue> {
    let op = &g.operations[oi];
    match registry::find(op.op) {
        Some(def) => registry::check(def, g, op),
        None => Err(Issue::Unsupported(format!(
            "{} has no CPU kernel",
            op.op.name()
        ))),
    }
}
