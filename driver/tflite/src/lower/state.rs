//! Resource variables: VAR_HANDLE names a variable, READ_VARIABLE reads it, ASSIGN_VARIABLE
//! writes it, CALL_ONCE runs the init subgraph that gives the first values. A variable read
//! before it is written (in node order) and written somewhere becomes a state input (its
//! value before the execution) and a state output (its value after); one never written is
//! the constant its init subgraph assigns; one written and never read before is not state.

use std::collections::{HashMap, HashSet};

use super::build::{Builder, byte_len, node_name};
use super::code::{ASSIGN_VARIABLE, CALL_ONCE, READ_VARIABLE, VAR_HANDLE};
use super::{LowerError, StateVariable, TensorInfo, as_output, info};
use crate::graph::{Graph, Options, Subgraph};

type Result<T> = std::result::Result<T, LowerError>;

/// The variables of the main subgraph while it is lowered.
pub(super) struct Variables {
    /// Initial value bytes by variable name (from the init subgraphs).
    initial: HashMap<String, Vec<u8>>,
    /// Resource tensor of the main subgraph → variable name.
    handles: HashMap<usize, String>,
    /// Names written by an ASSIGN_VARIABLE of the main subgraph.
    assigned: HashSet<String>,
    /// The operand holding each variable's current value.
    current: HashMap<String, u32>,
    /// Variables read before written: name, the input operand, the READ_VARIABLE's tensor.
    reads: Vec<(String, u32, usize)>,
}

fn var_name(options: &Options) -> Option<String> {
    match options {
        Options::VarHandle {
            container,
            shared_name,
        } if container.is_empty() => Some(shared_name.clone()),
        Options::VarHandle {
            container,
            shared_name,
        } => Some(format!("{container}/{shared_name}")),
        _ => None,
    }
}

/// VAR_HANDLE outputs of `sub`: resource tensor → variable name.
fn handles_of(sub: &Subgraph) -> HashMap<usize, String> {
    let mut handles = HashMap::new();
    for n in &sub.nodes {
        if n.builtin_code != VAR_HANDLE {
            continue;
        }
        let out = n.outputs.first().and_then(|&t| usize::try_from(t).ok());
        if let (Some(t), Some(name)) = (out, var_name(&n.options)) {
            handles.insert(t, name);
        }
    }
    handles
}

/// The variable a node's resource input (input 0) names.
fn handle(b: &Builder<'_>, handles: &HashMap<usize, String>) -> Result<String> {
    let t = b.input(0)?;
    handles.get(&t).cloned().ok_or_else(|| {
        b.err(format!(
            "resource tensor {t} does not come from a VAR_HANDLE"
        ))
    })
}

impl Variables {
    /// Evaluates the init subgraphs the main subgraph's CALL_ONCE nodes name.
    pub fn new(graph: &Graph) -> Result<Self> {
        let mut initial = HashMap::new();
        let main = graph
            .subgraphs
            .first()
            .ok_or_else(|| LowerError::BadGraph("the model has no subgraph".into()))?;
        for n in &main.nodes {
            let Options::CallOnce { init_subgraph } = n.options else {
                continue;
            };
            let init = usize::try_from(init_subgraph)
                .ok()
                .filter(|&i| i > 0)
                .and_then(|i| graph.subgraphs.get(i))
                .ok_or_else(|| {
                    LowerError::BadGraph(format!(
                        "CALL_ONCE names subgraph {init_subgraph}, which does not exist"
                    ))
                })?;
            evaluate_init(init, init_subgraph, &mut initial)?;
        }
        let mut b = Builder::new(main);
        let handles = handles_of(main);
        let mut assigned = HashSet::new();
        for (i, n) in main.nodes.iter().enumerate() {
            if n.builtin_code == ASSIGN_VARIABLE {
                b.node = i;
                assigned.insert(handle(&b, &handles)?);
            }
        }
        b.node = 0;
        Ok(Self {
            initial,
            handles,
            assigned,
            current: HashMap::new(),
            reads: Vec::new(),
        })
    }

    /// Lowers the node if it is a variable operation (true), else leaves it (false).
    pub fn lower(&mut self, b: &mut Builder<'_>) -> Result<bool> {
        match b.cur()?.builtin_code {
            VAR_HANDLE | CALL_ONCE => Ok(true),
            READ_VARIABLE => {
                b.arity(1..=1, 1)?;
                let name = handle(b, &self.handles)?;
                let t = b.output(0)?;
                if let Some(&o) = self.current.get(&name) {
                    b.values.insert(t, o);
                } else if !self.assigned.contains(&name) {
                    let bytes = self.initial_of(b, &name, t)?;
                    let operand = b.describe(t)?;
                    let o = b.constant(operand, bytes);
                    b.values.insert(t, o);
                    self.current.insert(name, o);
                } else {
                    self.initial_of(b, &name, t)?;
                    let o = b.define(t)?;
                    self.reads.push((name.clone(), o, t));
                    self.current.insert(name, o);
                }
                Ok(true)
            }
            ASSIGN_VARIABLE => {
                b.arity(2..=2, 0)?;
                let name = handle(b, &self.handles)?;
                let v = b.value(b.input(1)?)?;
                self.current.insert(name, v);
                Ok(true)
            }
            code if super::recurrent::is_recurrent(code) => {
                self.recurrent(b)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// A recurrent node: each of its state inputs ([`super::recurrent::state_inputs`]) is a
    /// variable tensor, carried as a state variable named after the tensor (initial value: its
    /// buffer, zeros when it has none).
    fn recurrent(&mut self, b: &mut Builder<'_>) -> Result<()> {
        let mut states_in = Vec::new();
        let mut names = Vec::new();
        for k in super::recurrent::state_inputs(b)? {
            let t = b.input(k)?;
            let tensor = b.tensor(t)?;
            if !tensor.is_variable {
                return Err(b.err(format!(
                    "the state input {k} (tensor {t}, {}) is not a variable tensor",
                    tensor.name
                )));
            }
            let name = tensor.name.clone();
            if names.contains(&name) {
                return Err(b.err(format!(
                    "the state tensor {name:?} is two of the node's states"
                )));
            }
            let state_in = match self.current.get(&name) {
                Some(&o) => o,
                None => {
                    if self.initial.contains_key(&name) || self.assigned.contains(&name) {
                        return Err(b.err(format!(
                            "the state tensor's name {name:?} is also a resource variable's"
                        )));
                    }
                    let want = byte_len(&b.describe(t)?).ok_or_else(|| {
                        b.err(format!("the state tensor {t} ({name}) has no static size"))
                    })?;
                    let bytes = tensor.data.clone().unwrap_or_else(|| vec![0; want]);
                    if bytes.len() != want {
                        return Err(b.err(format!(
                            "the state tensor {t} ({name}) has {} bytes of initial value, its \
                             shape {want}",
                            bytes.len()
                        )));
                    }
                    let bytes = super::recurrent::initial_state(b, bytes)?;
                    let o = b.define(t)?;
                    self.initial.insert(name.clone(), bytes);
                    self.reads.push((name.clone(), o, t));
                    o
                }
            };
            b.values.insert(t, state_in);
            states_in.push(state_in);
            names.push(name);
        }
        let states_out = super::recurrent::lower(b, &states_in)?;
        if states_out.len() != names.len() {
            return Err(b.err(format!(
                "internal: {} states in, {} out",
                names.len(),
                states_out.len()
            )));
        }
        for (name, o) in names.into_iter().zip(states_out) {
            self.current.insert(name, o);
        }
        Ok(())
    }

    /// The initial bytes of variable `name`, checked against tensor `t` that reads it.
    fn initial_of(&self, b: &Builder<'_>, name: &str, t: usize) -> Result<Vec<u8>> {
        let bytes = self.initial.get(name).cloned().ok_or_else(|| {
            b.err(format!(
                "variable {name:?} is read before any value is assigned to it"
            ))
        })?;
        let want = byte_len(&b.describe(t)?);
        if want.is_some_and(|w| w != bytes.len()) {
            return Err(b.err(format!(
                "variable {name:?}: its initial value has {} bytes, its reads {} ",
                bytes.len(),
                want.unwrap_or(0)
            )));
        }
        Ok(bytes)
    }

    /// Adds the state inputs and outputs after the model's own; returns the variables.
    pub fn finish(
        self,
        b: &mut Builder<'_>,
        io: &mut Io<'_>,
        taken: &mut HashSet<u32>,
    ) -> Result<Vec<StateVariable>> {
        let mut state = Vec::new();
        for (name, input, t) in self.reads {
            let Some(&last) = self.current.get(&name) else {
                continue;
            };
            let out = as_output(b, last, taken);
            taken.insert(out);
            let initial = self.initial.get(&name).cloned().unwrap_or_default();
            let tensor_info = TensorInfo {
                name: name.clone(),
                ..info(b.sub, t, None)?
            };
            state.push(StateVariable {
                name,
                input: io.inputs.len(),
                output: io.outputs.len(),
                initial,
            });
            io.inputs.push(input);
            io.input_infos.push(tensor_info.clone());
            io.outputs.push(out);
            io.output_infos.push(tensor_info);
        }
        Ok(state)
    }
}

/// The model's inputs and outputs being collected.
pub(super) struct Io<'a> {
    pub inputs: &'a mut Vec<u32>,
    pub input_infos: &'a mut Vec<TensorInfo>,
    pub outputs: &'a mut Vec<u32>,
    pub output_infos: &'a mut Vec<TensorInfo>,
}

/// Runs an init subgraph that only assigns constants to variables.
fn evaluate_init(
    init: &Subgraph,
    index: i32,
    initial: &mut HashMap<String, Vec<u8>>,
) -> Result<()> {
    let handles = handles_of(init);
    let mut b = Builder::new(init);
    for (i, n) in init.nodes.iter().enumerate() {
        b.node = i;
        match n.builtin_code {
            VAR_HANDLE => {}
            ASSIGN_VARIABLE => {
                let name = handle(&b, &handles)?;
                let v = b.input(1)?;
                if !b.is_constant(v) {
                    return Err(b.err(format!(
                        "in init subgraph {index}: the value assigned to {name:?} is not a \
                         constant (only constant initial values are evaluated at import)"
                    )));
                }
                initial.insert(name, b.const_bytes(v)?);
            }
            _ if b.folded_producer_of_node(i) => {}
            _ => {
                return Err(LowerError::Unsupported {
                    node: i,
                    op: node_name(n),
                    why: format!(
                        "in init subgraph {index}: only VAR_HANDLE and ASSIGN_VARIABLE of \
                         constants are evaluated at import"
                    ),
                });
            }
        }
    }
    Ok(())
}
