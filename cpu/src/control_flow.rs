//! IF and WHILE (NNAPI feature level 4, NN HAL 1.3 control flow): their static checks, the
//! checks of the model's subgraph references, and their execution.
//!
//! A model is its root graph and the graphs of `Graph::referenced`; a SUBGRAPH operand (type
//! SUBGRAPH, lifetime `Subgraph { index }`) names one of the root's referenced graphs, from
//! any graph of the model. SUBGRAPH operands may only be the branch inputs of IF (1 and 2)
//! and the condition and body inputs of WHILE (0 and 1).
//!
//! - **IF** `(cond, then, else, x...)`: `cond` is a TENSOR_BOOL8 `[1]`; the chosen branch runs
//!   on the values `x...` and its outputs become the operation's outputs. Both branches take
//!   and give operands matching the operation's in count, type, scale, zero point and (where
//!   both are known) dimensions.
//! - **WHILE** `(cond, body, m input-output, k state-only, n input-only)`, with m outputs:
//!   `cond` (m+k+n inputs, one TENSOR_BOOL8 `[1]` output) runs on the current state; while
//!   it says true, `body` (m+k+n inputs, m+k outputs) runs and its outputs become the next
//!   state of the first m+k operands. The outputs are the last m input-output values; with no
//!   iteration they are the initial ones.
//! - **Dynamic shapes**: operands of unknown dimensions take the shapes the subgraphs produce,
//!   which may change from one iteration to the next (a loop state that grows); a value whose
//!   shape contradicts a subgraph's declared dimensions fails the execution.
//! - **Loop timeout**: each WHILE fails with [`ExecError::LoopTimeout`] (the HAL's
//!   MISSED_DEADLINE_TRANSIENT) once it has run longer than the execution's loop timeout,
//!   checked after every body iteration; [`DEFAULT_LOOP_TIMEOUT`] (2 s) unless the execution
//!   asks for another, at most [`MAX_LOOP_TIMEOUT`] (15 s), as NNAPI's
//!   `ANeuralNetworksExecution_setLoopTimeout`. A single iteration is not interrupted.
//! - **No recursion, bounded nesting**: no graph may reach itself through SUBGRAPH operands,
//!   and chains of references are at most [`MAX_NESTING_DEPTH`] deep (checked when the model
//!   is validated and again while it runs), so hostile nesting cannot exhaust the stack.
//!
//! This module sits below the interpreter: it runs subgraphs through [`SubgraphRunner`], which
//! the interpreter implements.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use crate::check::Issue;
use crate::error::{ExecError, GraphError};
use crate::model::{Graph, Lifetime, Operand, OperandType, Operation, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;
use OperationType as O;

/// The loop timeout of an execution that sets none (NNAPI's default, 2 s).
pub const DEFAULT_LOOP_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest loop timeout an execution may ask for (NNAPI's maximum, 15 s); longer ones are
/// cut to it.
pub const MAX_LOOP_TIMEOUT: Duration = Duration::from_secs(15);

/// How deep IF and WHILE may nest: the longest chain of subgraph references from the root.
pub const MAX_NESTING_DEPTH: usize = 32;

/// The control-flow rows of the supported-operation table (input 0's operand type).
pub(crate) static SUPPORTED: &[(OperationType, &[OperandType])] =
    &[(O::If, &[T::TensorBool8]), (O::While, &[T::Subgraph])];

/// Whether `op` is IF or WHILE.
pub(crate) fn is_control_flow(op: OperationType) -> bool {
    matches!(op, O::If | O::While)
}

// ---------------------------------------------------------------- operand checks

/// The SUBGRAPH rules of one operand of any graph of the model `root`: type and lifetime
/// SUBGRAPH only together, and the index names one of the root's referenced graphs.
pub(crate) fn check_operand(root: &Graph, o: &Operand) -> Result<(), String> {
    match (&o.lifetime, o.ty) {
        (Lifetime::Subgraph { index }, T::Subgraph) => {
            if *index as usize >= root.referenced.len() {
                return Err(format!(
                    "SUBGRAPH operand names referenced graph {index}, the model has {}",
                    root.referenced.len()
                ));
            }
            Ok(())
        }
        (Lifetime::Subgraph { .. }, ty) => Err(format!(
            "lifetime SUBGRAPH on a {} operand (only with type SUBGRAPH)",
            ty.name()
        )),
        (lifetime, T::Subgraph) => Err(format!(
            "SUBGRAPH operand with lifetime {lifetime:?} (only with lifetime SUBGRAPH)"
        )),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------- operation checks

/// The check of operation `oi` of `g`, a graph of the model `root`, when it is this module's:
/// IF and WHILE, and any other operation that reads a SUBGRAPH operand (refused). None for
/// the rest.
pub(crate) fn check(root: &Graph, g: &Graph, oi: usize) -> Option<Result<(), Issue>> {
    let op = g.operations.get(oi)?;
    match op.op {
        O::If => Some(check_if(root, g, op).map_err(Issue::Invalid)),
        O::While => Some(check_while(root, g, op).map_err(Issue::Invalid)),
        _ => {
            let k = op.inputs.iter().position(|&x| {
                g.operands
                    .get(x as usize)
                    .is_some_and(|o| o.ty == T::Subgraph)
            })?;
            Some(Err(Issue::Invalid(format!(
                "input {k} is a SUBGRAPH operand, which only IF and WHILE take"
            ))))
        }
    }
}

/// Operand `x` of `g`.
fn operand(g: &Graph, x: u32) -> Result<&Operand, String> {
    g.operands
        .get(x as usize)
        .ok_or_else(|| format!("operand {x} out of range"))
}

/// The referenced graph that input `pos` (the `role` subgraph) of `op` names.
fn subgraph_input<'r>(
    root: &'r Graph,
    g: &Graph,
    op: &Operation,
    pos: usize,
    role: &str,
) -> Result<&'r Graph, String> {
    let x = *op
        .inputs
        .get(pos)
        .ok_or_else(|| format!("missing input {pos} ({role})"))?;
    let o = operand(g, x)?;
    match (o.ty, &o.lifetime) {
        (T::Subgraph, Lifetime::Subgraph { index }) => {
            root.referenced.get(*index as usize).ok_or_else(|| {
                format!(
                    "input {pos} ({role}) names referenced graph {index}, the model has {}",
                    root.referenced.len()
                )
            })
        }
        _ => Err(format!(
            "input {pos} ({role}) must be a SUBGRAPH operand, is {}",
            o.ty.name()
        )),
    }
}

/// Operands `xs` of `g` that carry data, the operation's `what` (input, output) from number
/// `first` on: none may be a SUBGRAPH operand.
fn data_operands<'g>(
    g: &'g Graph,
    xs: &[u32],
    what: &str,
    first: usize,
) -> Result<Vec<&'g Operand>, String> {
    xs.iter()
        .enumerate()
        .map(|(k, &x)| {
            let o = operand(g, x)?;
            if o.ty == T::Subgraph {
                return Err(format!(
                    "{what} {} is a SUBGRAPH operand where a value is expected",
                    first + k
                ));
            }
            Ok(o)
        })
        .collect()
}

/// The operands `idx` lists in `sub` (its inputs or outputs).
fn listed<'s>(sub: &'s Graph, idx: &[u32], what: &str) -> Result<Vec<&'s Operand>, String> {
    idx.iter()
        .map(|&x| {
            sub.operands
                .get(x as usize)
                .ok_or_else(|| format!("{what} names operand {x}, out of range"))
        })
        .collect()
}

/// Whether two operands may stand for each other across a subgraph boundary: same type,
/// scale, zero point and channel quantization, and dimensions that agree where both are known.
fn compatible(a: &Operand, b: &Operand) -> Result<(), String> {
    if a.ty != b.ty {
        return Err(format!("{} against {}", a.ty.name(), b.ty.name()));
    }
    if !a.dimensions.is_empty() && !b.dimensions.is_empty() {
        let agree = a.dimensions.len() == b.dimensions.len()
            && a.dimensions
                .iter()
                .zip(&b.dimensions)
                .all(|(&x, &y)| x == 0 || y == 0 || x == y);
        if !agree {
            return Err(format!(
                "dimensions {:?} against {:?}",
                a.dimensions, b.dimensions
            ));
        }
    }
    if a.scale != b.scale || a.zero_point != b.zero_point {
        return Err(format!(
            "scale {} zero point {} against scale {} zero point {}",
            a.scale, a.zero_point, b.scale, b.zero_point
        ));
    }
    if a.channel_quant != b.channel_quant {
        return Err("different channel quantization".into());
    }
    Ok(())
}

/// Checks `inner[i]` against `outer[i]` for every pair; errors name `what` and the index.
fn all_compatible(inner: &[&Operand], outer: &[&Operand], what: &str) -> Result<(), String> {
    for (i, (a, b)) in inner.iter().zip(outer).enumerate() {
        compatible(a, b).map_err(|e| format!("{what} {i} does not match: {e}"))?;
    }
    Ok(())
}

/// A TENSOR_BOOL8 of dimensions `[1]`: IF's condition, WHILE's condition output.
fn is_condition(o: &Operand) -> bool {
    o.ty == T::TensorBool8 && o.dimensions == [1]
}

fn check_if(root: &Graph, g: &Graph, op: &Operation) -> Result<(), String> {
    if op.inputs.len() < 3 {
        return Err(format!(
            "{} inputs given, IF needs the condition, two branches and their inputs (at least 3)",
            op.inputs.len()
        ));
    }
    let cond = operand(g, op.inputs[0])?;
    if !is_condition(cond) {
        return Err(format!(
            "input 0 (condition) must be TENSOR_BOOL8 of dimensions [1], is {} {:?}",
            cond.ty.name(),
            cond.dimensions
        ));
    }
    let ins = data_operands(g, &op.inputs[3..], "input", 3)?;
    let outs = data_operands(g, &op.outputs, "output", 0)?;
    for (pos, role) in [(1, "then"), (2, "else")] {
        let sub = subgraph_input(root, g, op, pos, role)?;
        if sub.input_indexes.len() != ins.len() || sub.output_indexes.len() != outs.len() {
            return Err(format!(
                "{role} branch has {} inputs and {} outputs, needs {} and {} (the IF's)",
                sub.input_indexes.len(),
                sub.output_indexes.len(),
                ins.len(),
                outs.len()
            ));
        }
        let sub_ins = listed(sub, &sub.input_indexes, "an input")?;
        let sub_outs = listed(sub, &sub.output_indexes, "an output")?;
        all_compatible(&sub_ins, &ins, &format!("{role} branch input"))?;
        all_compatible(&sub_outs, &outs, &format!("{role} branch output"))?;
    }
    Ok(())
}

fn check_while(root: &Graph, g: &Graph, op: &Operation) -> Result<(), String> {
    if op.inputs.len() < 3 {
        return Err(format!(
            "{} inputs given, WHILE needs the condition, the body and at least one loop operand",
            op.inputs.len()
        ));
    }
    let cond = subgraph_input(root, g, op, 0, "condition")?;
    let body = subgraph_input(root, g, op, 1, "body")?;
    let ins = data_operands(g, &op.inputs[2..], "input", 2)?;
    let outs = data_operands(g, &op.outputs, "output", 0)?;
    let m = outs.len();
    // Condition: m+k+n inputs, one TENSOR_BOOL8 [1] output.
    if cond.input_indexes.len() != ins.len() {
        return Err(format!(
            "condition has {} inputs, needs {} (one per WHILE input after the body)",
            cond.input_indexes.len(),
            ins.len()
        ));
    }
    let cond_ins = listed(cond, &cond.input_indexes, "an input")?;
    all_compatible(&cond_ins, &ins, "condition input")?;
    let cond_outs = listed(cond, &cond.output_indexes, "an output")?;
    match cond_outs.as_slice() {
        [o] if is_condition(o) => {}
        [o] => {
            return Err(format!(
                "condition output must be TENSOR_BOOL8 of dimensions [1], is {} {:?}",
                o.ty.name(),
                o.dimensions
            ));
        }
        _ => {
            return Err(format!(
                "condition has {} outputs, needs 1",
                cond_outs.len()
            ));
        }
    }
    // Body: m+k+n inputs, m+k outputs with m <= m+k <= m+k+n.
    if body.input_indexes.len() != ins.len() {
        return Err(format!(
            "body has {} inputs, needs {} (one per WHILE input after the body)",
            body.input_indexes.len(),
            ins.len()
        ));
    }
    let state = body.output_indexes.len();
    if state < m || state > ins.len() {
        return Err(format!(
            "body has {state} outputs, needs between {m} (one per WHILE output) and {} (one \
             per WHILE input after the body)",
            ins.len()
        ));
    }
    let body_ins = listed(body, &body.input_indexes, "an input")?;
    let body_outs = listed(body, &body.output_indexes, "an output")?;
    all_compatible(&body_ins, &ins, "body input")?;
    all_compatible(&body_outs, &outs, "body output")?;
    all_compatible(
        &body_outs,
        &body_ins,
        "body output (fed back as the same body input)",
    )?;
    Ok(())
}

// ---------------------------------------------------------------- reference checks

/// The referenced graphs `g`'s SUBGRAPH operands name, ascending, without repeats (indexes
/// out of range left out: the operand checks report them).
fn references(root: &Graph, g: &Graph) -> Vec<usize> {
    let mut r: Vec<usize> = g
        .operands
        .iter()
        .filter_map(|o| match o.lifetime {
            Lifetime::Subgraph { index } if (index as usize) < root.referenced.len() => {
                Some(index as usize)
            }
            _ => None,
        })
        .collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// The model-wide rules of subgraph references: only the root has referenced graphs, no
/// graph reaches itself through SUBGRAPH operands, and no chain of references from the root
/// is longer than [`MAX_NESTING_DEPTH`]. Iterative: hostile models cannot deepen the stack.
pub(crate) fn check_references(root: &Graph) -> Result<(), GraphError> {
    let n = root.referenced.len();
    if let Some(k) = root
        .referenced
        .iter()
        .position(|s| !s.referenced.is_empty())
    {
        return Err(GraphError::InvalidGraph(format!(
            "referenced graph {k} has referenced graphs of its own; only the root graph may"
        )));
    }
    // Node 0 is the root, node 1 + k referenced graph k.
    let edges: Vec<Vec<usize>> = std::iter::once(root)
        .chain(&root.referenced)
        .map(|g| references(root, g).into_iter().map(|k| k + 1).collect())
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; n + 1];
    // Longest chain of references from each finished node.
    let mut height = vec![0usize; n + 1];
    for start in 0..=n {
        if mark[start] != Mark::New {
            continue;
        }
        // (node, next edge to follow): the current path.
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::OnPath;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            match edges[node].get(*next) {
                Some(&child) => {
                    *next += 1;
                    match mark[child] {
                        Mark::New => {
                            mark[child] = Mark::OnPath;
                            path.push((child, 0));
                        }
                        Mark::OnPath => {
                            let from = path.iter().position(|&(p, _)| p == child).unwrap_or(0);
                            let cycle: Vec<String> = path[from..]
                                .iter()
                                .map(|&(p, _)| node_name(p))
                                .chain(std::iter::once(node_name(child)))
                                .collect();
                            return Err(GraphError::InvalidGraph(format!(
                                "{} reaches itself through IF/WHILE references ({}); \
                                 recursion is not allowed",
                                node_name(child),
                                cycle.join(" -> ")
                            )));
                        }
                        Mark::Done => {}
                    }
                }
                None => {
                    height[node] = edges[node]
                        .iter()
                        .map(|&c| height[c] + 1)
                        .max()
                        .unwrap_or(0);
                    if height[node] > MAX_NESTING_DEPTH {
                        return Err(GraphError::InvalidGraph(format!(
                            "IF/WHILE nest {} deep from {}, at most {MAX_NESTING_DEPTH} allowed",
                            height[node],
                            node_name(node)
                        )));
                    }
                    mark[node] = Mark::Done;
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

/// How [`check_references`] names node `p`.
fn node_name(p: usize) -> String {
    match p {
        0 => "the root graph".into(),
        k => format!("referenced graph {}", k - 1),
    }
}

/// Checks every operation of every graph reachable from operation `oi` of `root` (when it is
/// IF or WHILE) with `check_op(graph, operation)`: a control-flow operation runs only when
/// all of them do. Each graph is visited once, so reference cycles end the walk.
pub(crate) fn check_nested(
    root: &Graph,
    oi: usize,
    check_op: &dyn Fn(&Graph, usize) -> Result<(), Issue>,
) -> Result<(), Issue> {
    let Some(op) = root.operations.get(oi) else {
        return Ok(());
    };
    if !is_control_flow(op.op) {
        return Ok(());
    }
    let mut seen = vec![false; root.referenced.len()];
    let mut todo: Vec<usize> = op
        .inputs
        .iter()
        .filter_map(|&x| match root.operands.get(x as usize)?.lifetime {
            Lifetime::Subgraph { index } => Some(index as usize),
            _ => None,
        })
        .collect();
    while let Some(k) = todo.pop() {
        let Some(sub) = root.referenced.get(k) else {
            continue;
        };
        if std::mem::replace(&mut seen[k], true) {
            continue;
        }
        for j in 0..sub.operations.len() {
            check_op(sub, j).map_err(|issue| {
                let name = sub.operations[j].op.name();
                match issue {
                    Issue::Invalid(r) => {
                        Issue::Invalid(format!("referenced graph {k}, operation {j} ({name}): {r}"))
                    }
                    Issue::Unsupported(r) => Issue::Unsupported(format!(
                        "referenced graph {k}, operation {j} ({name}): {r}"
                    )),
                }
            })?;
        }
        todo.extend(references(root, sub));
    }
    Ok(())
}

// ---------------------------------------------------------------- execution

/// Runs referenced graphs for IF and WHILE: the interpreter, one nesting level down.
pub(crate) trait SubgraphRunner {
    /// Runs referenced graph `index` on `inputs` (one per graph input, None for an omitted
    /// one); returns its outputs in order.
    fn run_subgraph(
        &self,
        index: usize,
        inputs: &[Option<&Tensor>],
    ) -> Result<Vec<Tensor>, ExecError>;
}

/// What IF and WHILE see when they run: the operation, its graph and the current values.
pub(crate) struct CfCtx<'a> {
    pub(crate) graph: &'a Graph,
    pub(crate) op: &'a Operation,
    pub(crate) index: usize,
    pub(crate) values: &'a [Option<Cow<'a, Tensor>>],
    /// How long one WHILE may loop (already cut to [`MAX_LOOP_TIMEOUT`]).
    pub(crate) loop_timeout: Duration,
}

impl CfCtx<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> ExecError {
        ExecError::InvalidArgument(format!(
            "operation {} ({}): {msg}",
            self.index,
            self.op.op.name()
        ))
    }

    /// The referenced graph input `pos` names (validation checked it).
    fn subgraph(&self, pos: usize) -> Result<usize, ExecError> {
        match self
            .op
            .inputs
            .get(pos)
            .and_then(|&x| self.graph.operands.get(x as usize))
            .map(|o| &o.lifetime)
        {
            Some(Lifetime::Subgraph { index }) => Ok(*index as usize),
            _ => Err(self.err(format!("input {pos} is not a SUBGRAPH operand"))),
        }
    }

    /// The current values of inputs `from..`.
    fn values_from(&self, from: usize) -> Vec<Option<&Tensor>> {
        self.op
            .inputs
            .iter()
            .skip(from)
            .map(|&x| self.values.get(x as usize).and_then(|v| v.as_deref()))
            .collect()
    }
}

/// Runs IF or WHILE.
pub(crate) fn run(ctx: &CfCtx<'_>, runner: &dyn SubgraphRunner) -> Result<Vec<Tensor>, ExecError> {
    match ctx.op.op {
        O::If => run_if(ctx, runner),
        O::While => run_while(ctx, runner),
        other => Err(ctx.err(format!("{} is not a control-flow operation", other.name()))),
    }
}

/// The value of a TENSOR_BOOL8 `[1]` condition.
fn truth(ctx: &CfCtx<'_>, t: Option<&Tensor>, what: &str) -> Result<bool, ExecError> {
    match t.map(|t| &t.data) {
        Some(Data::U8(v)) if v.len() == 1 => Ok(v[0] != 0),
        Some(d) => Err(ctx.err(format!(
            "{what} holds {} values of the wrong kind or count, needs one TENSOR_BOOL8",
            d.len()
        ))),
        None => Err(ctx.err(format!("{what} has no value"))),
    }
}

fn run_if(ctx: &CfCtx<'_>, runner: &dyn SubgraphRunner) -> Result<Vec<Tensor>, ExecError> {
    let cond_value = ctx.values_from(0).first().copied().flatten();
    let cond = truth(ctx, cond_value, "the condition")?;
    let branch = ctx.subgraph(if cond { 1 } else { 2 })?;
    runner.run_subgraph(branch, &ctx.values_from(3))
}

fn run_while(ctx: &CfCtx<'_>, runner: &dyn SubgraphRunner) -> Result<Vec<Tensor>, ExecError> {
    let cond_graph = ctx.subgraph(0)?;
    let body_graph = ctx.subgraph(1)?;
    let initial = ctx.values_from(2);
    let m = ctx.op.outputs.len();
    let timeout = ctx.loop_timeout;
    let start = Instant::now();
    // The m+k loop-carried values once the body has run; before that, the initial ones.
    let mut state: Option<Vec<Tensor>> = None;
    loop {
        let args: Vec<Option<&Tensor>> = match &state {
            Some(s) => s
                .iter()
                .map(Some)
                .chain(initial.iter().skip(s.len()).copied())
                .collect(),
            None => initial.clone(),
        };
        let verdict = runner.run_subgraph(cond_graph, &args)?;
        if !truth(ctx, verdict.first(), "the condition's output")? {
            break;
        }
        state = Some(runner.run_subgraph(body_graph, &args)?);
        if start.elapsed() > timeout {
            return Err(ExecError::LoopTimeout(format!(
                "operation {} (WHILE) still looping after {timeout:?}",
                ctx.index
            )));
        }
    }
    match state {
        Some(mut s) => {
            s.truncate(m);
            Ok(s)
        }
        None => initial
            .iter()
            .take(m)
            .enumerate()
            .map(|(i, v)| {
                v.cloned()
                    .ok_or_else(|| ctx.err(format!("loop operand {i} has no value")))
            })
            .collect(),
    }
}
