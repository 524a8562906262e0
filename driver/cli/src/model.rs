//! The model a command works on, from either format: an nnaccel JSON model file, or a
//! TensorFlow Lite flatbuffer (recognised by its file identifier `TFL3`, not by its name),
//! read and lowered to an NN HAL model by `nnaccel-tflite`. Both end as one [`LoadedModel`]:
//! the HAL model, names for its inputs and outputs where the format has them, and the state
//! variables a TFLite model carries between executions. The inputs files (JSON, `.npz`,
//! `.npy`) are read against it here too.

use std::io::Read;
use std::path::Path;

use nnaccel_hal::Model;
use nnaccel_protocol::modelfile::{self, InputValue};

use crate::CliError;
use crate::npz::{self, InputSpec};

/// A resource variable of a TFLite model: a model input and a model output of the lowered
/// model that carry its value from one execution to the next.
#[derive(Debug, Clone)]
pub struct State {
    /// The variable's name (VAR_HANDLE's `shared_name`).
    pub name: String,
    /// Its position among the model's inputs.
    pub input: usize,
    /// Its position among the model's outputs.
    pub output: usize,
    /// Its value before the first execution.
    pub initial: Vec<u8>,
}

/// A model ready to prepare, from either format.
#[derive(Debug)]
pub struct LoadedModel {
    /// The HAL model.
    pub model: Model,
    /// Per model input: its tensor name (TFLite), or None (JSON).
    pub input_names: Vec<Option<String>>,
    /// Per model output: its tensor name (TFLite), or None (JSON).
    pub output_names: Vec<Option<String>>,
    /// State variables (TFLite resource variables), their inputs and outputs last.
    pub state: Vec<State>,
    /// TFLite only: per model operation, the node it came from, and per node its operator
    /// name, for `info`.
    pub tflite: Option<TfliteMap>,
}

/// How a TFLite model's nodes became operations.
#[derive(Debug, Clone)]
pub struct TfliteMap {
    /// Per node of the main subgraph: its operator's name (`CONV_2D`, a custom code, …).
    pub nodes: Vec<String>,
    /// Per model operation (main subgraph): the node it came from.
    pub origins: Vec<usize>,
}

/// The first bytes of `path` if it is a regular file (opened without blocking, so a FIFO is
/// not waited on); None otherwise, and the format's own reader reports what is wrong.
fn head(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = Vec::with_capacity(8);
    file.take(8).read_to_end(&mut head).ok()?;
    Some(head)
}

/// Whether `path` holds a TFLite flatbuffer.
pub fn is_tflite(path: &Path) -> bool {
    head(path).is_some_and(|h| nnaccel_tflite::read::looks_like_tflite(&h))
}

/// Reads a model file of either format; a TFLite model is lowered to a HAL model here, so an
/// operation without an NNAPI equivalent is an error naming it and its node index.
pub fn load(path: &Path) -> Result<LoadedModel, CliError> {
    if is_tflite(path) {
        return load_tflite(path);
    }
    let loaded = modelfile::load_model(path)?;
    let model = loaded.model;
    Ok(LoadedModel {
        input_names: vec![None; model.input_indexes.len()],
        output_names: vec![None; model.output_indexes.len()],
        model,
        state: Vec::new(),
        tflite: None,
    })
}

/// Reads and lowers a TFLite model.
fn load_tflite(path: &Path) -> Result<LoadedModel, CliError> {
    use nnaccel_tflite::{lower, read};
    let at = |e: &dyn std::fmt::Display| CliError(format!("{}: {e}", path.display()));
    let graph = read::read_file(path).map_err(|e| match e {
        // These name the file themselves.
        read::ReadError::Io { .. } | read::ReadError::NotRegularFile { .. } => CliError::from(e),
        e => at(&e),
    })?;
    let lowered = lower::lower_model(&graph).map_err(|e| {
        // Every node the lowering cannot map, not only the first.
        let unsupported: Vec<String> = graph
            .subgraphs
            .first()
            .map(|g| {
                (0..g.nodes.len())
                    .filter_map(|n| lower::check_node(g, n).err())
                    .map(|e| format!("\n  {e}"))
                    .collect()
            })
            .unwrap_or_default();
        match unsupported.len() {
            0 | 1 => at(&e),
            n => CliError(format!(
                "{}: {n} nodes cannot be lowered to NN HAL operations:{}",
                path.display(),
                unsupported.concat()
            )),
        }
    })?;
    let nodes = graph
        .subgraphs
        .first()
        .map(|g| g.nodes.iter().map(node_name).collect())
        .unwrap_or_default();
    Ok(LoadedModel {
        input_names: lowered
            .inputs
            .iter()
            .map(|t| Some(t.name.clone()))
            .collect(),
        output_names: lowered
            .outputs
            .iter()
            .map(|t| Some(t.name.clone()))
            .collect(),
        state: lowered
            .state
            .into_iter()
            .map(|s| State {
                name: s.name,
                input: s.input,
                output: s.output,
                initial: s.initial,
            })
            .collect(),
        tflite: Some(TfliteMap {
            nodes,
            origins: lowered.origins,
        }),
        model: lowered.model,
    })
}

/// A node's operator for messages: its builtin name, or `CUSTOM(name)`.
pub fn node_name(node: &nnaccel_tflite::graph::Node) -> String {
    match &node.custom_code {
        Some(code) if node.builtin_code == nnaccel_tflite::graph::CUSTOM => {
            format!("CUSTOM({code})")
        }
        _ => nnaccel_tflite::graph::builtin_name(node.builtin_code).into_owned(),
    }
}

impl LoadedModel {
    /// The state variable model input `k` carries, if any.
    fn state_at_input(&self, k: usize) -> Option<&State> {
        self.state.iter().find(|s| s.input == k)
    }

    /// Whether model output `k` carries a state variable.
    pub fn is_state_output(&self, k: usize) -> bool {
        self.state.iter().any(|s| s.output == k)
    }

    /// The positions of the model inputs an inputs file gives: all but the state inputs.
    pub fn user_inputs(&self) -> Vec<usize> {
        (0..self.model.input_indexes.len())
            .filter(|&k| self.state_at_input(k).is_none())
            .collect()
    }

    /// The positions of the model outputs shown and written: all but the state outputs.
    pub fn user_outputs(&self) -> Vec<usize> {
        (0..self.model.output_indexes.len())
            .filter(|&k| !self.is_state_output(k))
            .collect()
    }

    /// What the inputs file must give for each of [`Self::user_inputs`].
    fn input_specs(&self) -> Result<Vec<InputSpec>, CliError> {
        self.user_inputs()
            .into_iter()
            .map(|k| {
                let operand = self
                    .model
                    .input_indexes
                    .get(k)
                    .and_then(|&i| self.model.operands.get(i as usize))
                    .ok_or_else(|| {
                        CliError(format!(
                            "model input {k} names an operand that does not exist"
                        ))
                    })?;
                Ok(InputSpec {
                    name: self.input_names.get(k).cloned().flatten(),
                    ty: operand.operand_type,
                    dims: operand.dimensions.clone(),
                })
            })
            .collect()
    }

    /// The request's inputs from an inputs file: `.npz` or `.npy` (recognised by their
    /// magic bytes) or JSON. The file gives the user inputs; state inputs get their initial
    /// values (a JSON file that gives every model input, state ones included, is taken whole).
    pub fn load_inputs(&self, path: &Path) -> Result<Vec<InputValue>, CliError> {
        let arrays = head(path).is_some_and(|h| npz::is_zip(&h) || npz::is_npy(&h));
        let user = if arrays {
            let bytes = modelfile::read_bytes(path)?;
            let specs = self.input_specs()?;
            npz::inputs_from_bytes(&bytes, &specs)
                .map_err(|e| CliError(format!("{}: {e}", path.display())))?
        } else {
            let inputs = modelfile::load_inputs(path, &self.model)?;
            if inputs.len() == self.model.input_indexes.len() {
                return Ok(inputs);
            }
            inputs
        };
        Ok(self.with_state(user))
    }

    /// `user` (one per [`Self::user_inputs`]) with the state inputs' initial values put in
    /// their places.
    pub fn with_state(&self, user: Vec<InputValue>) -> Vec<InputValue> {
        if self.state.is_empty() {
            return user;
        }
        let mut user = user.into_iter();
        let mut all = Vec::with_capacity(self.model.input_indexes.len());
        for k in 0..self.model.input_indexes.len() {
            match self.state_at_input(k) {
                Some(s) => all.push(InputValue {
                    element_count: s.initial.len() / self.input_element_size(k),
                    bytes: s.initial.clone(),
                    dimensions: Vec::new(),
                    has_no_value: false,
                }),
                None => all.extend(user.next()),
            }
        }
        // More values than inputs: left for the driver to refuse, as for a JSON model.
        all.extend(user);
        all
    }

    /// Bytes per element of model input `k` (1 when it cannot be told).
    fn input_element_size(&self, k: usize) -> usize {
        self.model
            .input_indexes
            .get(k)
            .and_then(|&i| self.model.operands.get(i as usize))
            .map_or(1, |o| o.operand_type.element_size().max(1))
    }

    /// The name output `k` has in an `--outputs` archive and in messages.
    pub fn output_label(&self, k: usize) -> Option<&str> {
        self.output_names.get(k).and_then(|n| n.as_deref())
    }

    /// Prints which model input and output each TFLite tensor became (`import`, `info`).
    pub fn print_ports(&self) {
        let name = |n: Option<&String>| n.map_or(String::new(), |n| format!(" '{n}'"));
        let operand = |idx: Option<&u32>| {
            idx.and_then(|&i| self.model.operands.get(i as usize))
                .map_or(String::new(), |o| {
                    format!(" {} {:?}", o.operand_type, o.dimensions)
                })
        };
        for k in 0..self.model.input_indexes.len() {
            let state = self.state_at_input(k);
            println!(
                "input {k}:{}{}{}",
                name(self.input_names.get(k).and_then(Option::as_ref)),
                operand(self.model.input_indexes.get(k)),
                state.map_or(String::new(), |s| format!(
                    " (state variable '{}', an initial value of {} bytes)",
                    s.name,
                    s.initial.len()
                ))
            );
        }
        for k in 0..self.model.output_indexes.len() {
            println!(
                "output {k}:{}{}{}",
                name(self.output_names.get(k).and_then(Option::as_ref)),
                operand(self.model.output_indexes.get(k)),
                if self.is_state_output(k) {
                    " (state variable's new value)"
                } else {
                    ""
                }
            );
        }
    }

    /// Operations, and for a TFLite model its nodes, for the "model:" lines.
    pub fn summary(&self) -> String {
        let ops = self.model.operations.len();
        let ops = format!("{ops} operation{}", if ops == 1 { "" } else { "s" });
        match &self.tflite {
            None => ops,
            Some(map) => format!(
                "TFLite, {} node{} as {ops}{}",
                map.nodes.len(),
                if map.nodes.len() == 1 { "" } else { "s" },
                match self.state.len() {
                    0 => String::new(),
                    1 => ", 1 state variable".to_string(),
                    n => format!(", {n} state variables"),
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// out = x + s over float32 [4], with input 1 (s) and output 1 a state variable.
    fn stateful() -> LoadedModel {
        let text = r#"{
          "version": 1,
          "operands": [
            {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_INPUT"},
            {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_INPUT"},
            {"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [0]},
            {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_OUTPUT"},
            {"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "MODEL_OUTPUT"}
          ],
          "operations": [
            {"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]},
            {"type": "ADD", "inputs": [0, 1, 2], "outputs": [4]}
          ],
          "inputIndexes": [0, 1],
          "outputIndexes": [3, 4],
          "relaxComputationFloat32toFloat16": false
        }"#;
        let model = modelfile::parse_model(text).map(|l| l.model);
        LoadedModel {
            model: model.unwrap_or_else(|e| panic!("{e}")),
            input_names: vec![Some("x".into()), Some("acc".into())],
            output_names: vec![Some("y".into()), Some("acc".into())],
            state: vec![State {
                name: "acc".into(),
                input: 1,
                output: 1,
                initial: [1.0f32, 2.0, 3.0, 4.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            }],
            tflite: None,
        }
    }

    fn value(bytes: Vec<u8>) -> InputValue {
        InputValue {
            element_count: bytes.len() / 4,
            bytes,
            dimensions: Vec::new(),
            has_no_value: false,
        }
    }

    #[test]
    fn state_inputs_are_not_the_users_and_start_from_their_initial_values() {
        let m = stateful();
        assert_eq!(m.user_inputs(), [0]);
        assert_eq!(m.user_outputs(), [0]);
        let x = value(vec![9; 16]);
        let all = m.with_state(vec![x.clone()]);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], x);
        assert_eq!(all[1].bytes, m.state[0].initial);
        assert_eq!(all[1].element_count, 4);
        assert_eq!(m.summary(), "2 operations");
    }

    #[test]
    fn a_json_inputs_file_gives_the_user_inputs_or_all_of_them() {
        let dir = std::env::temp_dir().join(format!("nnaccelctl-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let m = stateful();
        let one = dir.join("one.json");
        std::fs::write(&one, r#"{"inputs": [[0, 0, 0, 0]]}"#).unwrap_or_else(|e| panic!("{e}"));
        let inputs = m.load_inputs(&one).unwrap_or_else(|e| panic!("{}", e.0));
        assert_eq!(inputs.len(), 2);
        assert_eq!(inputs[0].bytes, vec![0; 16]);
        assert_eq!(inputs[1].bytes, m.state[0].initial);
        let both = dir.join("both.json");
        std::fs::write(&both, r#"{"inputs": [[0, 0, 0, 0], [5, 5, 5, 5]]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let inputs = m.load_inputs(&both).unwrap_or_else(|e| panic!("{}", e.0));
        assert_eq!(
            inputs[1].bytes,
            value([5.0f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect()).bytes
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
