//! IF and WHILE: NNAPI's IF and WHILE with the TFLite subgraphs they name lowered as the
//! model's referenced subgraphs (each once, however many nodes name it).

use std::cell::RefCell;
use std::rc::Rc;

use nnaccel_hal::{Operand, OperationType};

use super::build::{Builder, Part, Refs};
use super::{LowerError, lower_whole};
use crate::graph::Options;

type Result<T> = std::result::Result<T, LowerError>;

/// The SUBGRAPH operand naming TFLite subgraph `k`, lowering it first if no node did.
fn subgraph_operand(b: &mut Builder<'_>, k: i32) -> Result<u32> {
    let refs = b.refs.clone().ok_or_else(|| super::whole_model_only(b))?;
    let graph = refs.borrow().graph;
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k > 0 && k < graph.subgraphs.len())
        .ok_or_else(|| b.err(format!("subgraph {k} does not exist (or is the main one)")))?;
    let known = refs.borrow().index.get(&k).copied();
    let index = match known {
        Some(i) => {
            if refs
                .borrow()
                .parts
                .get(i as usize)
                .is_some_and(Option::is_none)
            {
                return Err(b.err(format!("subgraph {k} runs itself (recursion)")));
            }
            i
        }
        None => {
            let i = {
                let mut r = refs.borrow_mut();
                let i = r.parts.len() as u32;
                r.parts.push(None);
                r.index.insert(k, i);
                i
            };
            let part = lower_referenced(graph, k, refs.clone())
                .map_err(|e| b.err(format!("in subgraph {k}: {e}")))?;
            refs.borrow_mut().parts[i as usize] = Some(part);
            i
        }
    };
    Ok(b.push_operand(Operand::subgraph(index)))
}

/// Lowers TFLite subgraph `k` whole: its inputs and outputs are the referenced subgraph's.
fn lower_referenced<'g>(
    graph: &'g crate::graph::Graph,
    k: usize,
    refs: Rc<RefCell<Refs<'g>>>,
) -> Result<Part> {
    let sub = &graph.subgraphs[k];
    let mut b = Builder::new(sub);
    b.refs = Some(refs);
    let (inputs, outputs, _) = lower_whole(&mut b, None)?;
    Ok(b.into_part(&inputs, &outputs))
}

/// The node's inputs from `from` on, as operands.
fn operands_from(b: &mut Builder<'_>, from: usize) -> Result<Vec<u32>> {
    let n = b.cur()?.inputs.len();
    (from..n).map(|k| b.value(b.input(k)?)).collect()
}

/// IF: condition, then and else subgraphs, the inputs.
pub(super) fn if_(b: &mut Builder<'_>) -> Result<()> {
    let Options::If {
        then_subgraph,
        else_subgraph,
    } = b.cur()?.options
    else {
        return Err(b.err("no IF options"));
    };
    let cond = b.value(b.input(0)?)?;
    let then = subgraph_operand(b, then_subgraph)?;
    let otherwise = subgraph_operand(b, else_subgraph)?;
    let mut args = vec![cond, then, otherwise];
    args.extend(operands_from(b, 1)?);
    let ys = b.define_outputs()?;
    b.op(OperationType::If, args, ys);
    Ok(())
}

/// WHILE: condition and body subgraphs, the loop variables.
pub(super) fn while_(b: &mut Builder<'_>) -> Result<()> {
    let Options::While {
        cond_subgraph,
        body_subgraph,
    } = b.cur()?.options
    else {
        return Err(b.err("no WHILE options"));
    };
    let cond = subgraph_operand(b, cond_subgraph)?;
    let body = subgraph_operand(b, body_subgraph)?;
    let mut args = vec![cond, body];
    args.extend(operands_from(b, 0)?);
    let ys = b.define_outputs()?;
    // TFLite's WHILE gives each output its loop variable's shape at Prepare, so a file may
    // store none for it; NNAPI needs the loop variable's dimensions there.
    for (k, &y) in ys.iter().enumerate() {
        if b.shape(b.output(k)?)?.is_empty() {
            if let Some(&x) = args.get(2 + k) {
                let dims = b.dims(x).to_vec();
                b.set_dims(y, dims);
            }
        }
    }
    b.op(OperationType::While, args, ys);
    Ok(())
}

/// The referenced subgraphs lowered for the model, in index order.
pub(super) fn take_parts(refs: &Rc<RefCell<Refs<'_>>>) -> Result<Vec<Part>> {
    refs.borrow_mut()
        .parts
        .drain(..)
        .enumerate()
        .map(|(i, p)| {
            p.ok_or_else(|| LowerError::BadGraph(format!("referenced subgraph {i} unfinished")))
        })
        .collect()
}
