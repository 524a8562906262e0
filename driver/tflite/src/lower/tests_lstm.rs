//! LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM lowered from hand-built
//! graphs and executed on the CPU-only driver, the variable output and cell states carried
//! between executions as state inputs and outputs. The expected values are worked in float64
//! by `scripts/tflite/lstm_reference.py` (numpy, from TFLite's description of the cell; its
//! weights follow the same `pattern` formula as here), one printed line per check.

use nnaccel_hal::{OperandLifetime, OperandType, OperationType};

use super::code;
use super::tests::{G, assert_close, f32s, float_const, quantize_const, run, to_f32s};
use super::{LowerError, Lowered, lower_model, lower_nodes};
use crate::graph::{Activation, ElementType, Graph, LstmCell, LstmKernel, Options};

/// Weight value `[i][j]` of the tensor at TFLite input `k`: ((7k + 3i + 5j) mod 11 − 5) / 10.
fn pattern(k: usize, rows: usize, cols: usize) -> Vec<f32> {
    let mut v = Vec::new();
    for i in 0..rows {
        for j in 0..cols {
            v.push(((7 * k + 3 * i + 5 * j) % 11) as f32 / 10.0 - 0.5);
        }
    }
    v
}

/// The shape and optional parts of one cell.
#[derive(Clone, Copy, Default)]
struct Spec {
    n_input: usize,
    n_cell: usize,
    n_output: usize,
    cifg: bool,
    peephole: bool,
    projection: bool,
}

impl Spec {
    fn new(n_input: usize, n_cell: usize) -> Self {
        Self {
            n_input,
            n_cell,
            n_output: n_cell,
            ..Self::default()
        }
    }
}

/// The 17 weight, bias and projection tensors of a cell whose first one is TFLite input
/// `base` (-1 where omitted), patterned on their input indexes.
fn cell(g: &mut G, spec: Spec, base: usize, prefix: &str) -> Vec<i32> {
    let (ni, nc, no) = (spec.n_input, spec.n_cell, spec.n_output);
    let mut ts = Vec::new();
    for off in 0..17 {
        let shape = match off {
            0 | 4 | 11 if spec.cifg => None,
            8 if spec.cifg => None,
            0..=3 => Some((nc, ni)),
            4..=7 => Some((nc, no)),
            8..=10 if spec.peephole => Some((nc, 1)),
            11..=14 => Some((nc, 1)),
            15 if spec.projection => Some((no, nc)),
            16 if spec.projection => Some((no, 1)),
            _ => None,
        };
        ts.push(match shape {
            Some((r, c)) => {
                let dims: Vec<i32> = if matches!(off, 0..=7 | 15) {
                    vec![r as i32, c as i32]
                } else {
                    vec![r as i32]
                };
                let name = format!("{prefix}w{off}");
                g.c(
                    &name,
                    ElementType::Float32,
                    &dims,
                    f32s(&pattern(base + off, r, c)),
                )
            }
            None => -1,
        });
    }
    ts
}

/// A variable FLOAT32 tensor with initial value `init`.
fn state(g: &mut G, name: &str, shape: &[i32], init: &[f32]) -> i32 {
    let t = g.f(name, shape);
    g.sub.tensors[t as usize].is_variable = true;
    g.sub.tensors[t as usize].data = Some(f32s(init));
    t
}

fn lstm_cell(activation: Activation, cell_clip: f32, proj_clip: f32) -> LstmCell {
    LstmCell {
        activation,
        cell_clip,
        proj_clip,
        asymmetric_quantize_inputs: false,
    }
}

/// One LSTM node, x [batch, n_input] → y [batch, n_output], states h and c from `h0`, `c0`;
/// with `layer_norm` the 24-input form (coefficients pattern(20 + g) + 0.5, the input gate's
/// omitted with CIFG).
fn lstm_graph(
    spec: Spec,
    batch: usize,
    h0: &[f32],
    c0: &[f32],
    options: Options,
    layer_norm: bool,
) -> Graph {
    let mut g = G::default();
    let b = batch as i32;
    let x = g.f("x", &[b, spec.n_input as i32]);
    let mut ins = vec![x];
    ins.extend(cell(&mut g, spec, 1, ""));
    ins.push(state(&mut g, "h", &[b, spec.n_output as i32], h0));
    ins.push(state(&mut g, "c", &[b, spec.n_cell as i32], c0));
    if layer_norm {
        for k in 0..4 {
            if k == 0 && spec.cifg {
                ins.push(-1);
                continue;
            }
            let v: Vec<f32> = pattern(20 + k, spec.n_cell, 1)
                .iter()
                .map(|w| w + 0.5)
                .collect();
            let t = g.c(
                &format!("ln{k}"),
                ElementType::Float32,
                &[spec.n_cell as i32],
                f32s(&v),
            );
            ins.push(t);
        }
    }
    let y = g.f("y", &[b, spec.n_output as i32]);
    g.n(code::LSTM, &ins, &[y], options);
    g.graph(&[x], &[y])
}

fn full(cell: LstmCell) -> Options {
    Options::Lstm {
        cell,
        kernel: LstmKernel::Full,
    }
}

/// The only operation of `l`.
fn only_op(l: &Lowered) -> &nnaccel_hal::Operation {
    assert_eq!(l.model.operations.len(), 1);
    &l.model.operations[0]
}

fn unsupported(err: LowerError) -> String {
    match err {
        LowerError::Unsupported { why, .. } => why,
        other => panic!("not Unsupported: {other}"),
    }
}

#[test]
fn lstm_states_start_from_the_variable_buffers_and_are_carried_between_steps() {
    let options = tanh_full();
    let graph = lstm_graph(
        Spec::new(3, 2),
        1,
        &[0.25, -0.5],
        &[1.0, -1.0],
        options,
        false,
    );
    let l = lower_model(&graph).unwrap();
    let op = only_op(&l);
    assert_eq!(op.operation_type, OperationType::Lstm);
    assert_eq!((op.inputs.len(), op.outputs.len()), (23, 4));
    let names: Vec<_> = l
        .state
        .iter()
        .map(|s| (s.name.as_str(), s.input, s.output))
        .collect();
    assert_eq!(names, [("h", 1, 1), ("c", 2, 2)]);
    assert_eq!(l.state[1].initial, f32s(&[1.0, -1.0]));
    let x = f32s(&[0.5, -1.0, 2.0]);
    let first = run(
        &l,
        &[
            x.clone(),
            l.state[0].initial.clone(),
            l.state[1].initial.clone(),
        ],
    );
    // lstm_reference.py: "lstm_step h1", "lstm_step c1".
    assert_close(&to_f32s(&first[0]), &[0.4351203, -0.6578444]);
    assert_close(&to_f32s(&first[1]), &[0.4351203, -0.6578444]);
    assert_close(&to_f32s(&first[2]), &[0.8654091, -1.297195]);
    let second = run(&l, &[x, first[1].clone(), first[2].clone()]);
    // "lstm_step h2", "lstm_step c2".
    assert_close(&to_f32s(&second[0]), &[0.4052923, -0.6659793]);
    assert_close(&to_f32s(&second[2]), &[0.8184395, -1.417822]);
}

/// Little-endian float16 bytes of `v`.
fn f16s(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| nnaccel_cpu::f32_to_f16(x).to_le_bytes())
        .collect()
}

fn from_f16s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| nnaccel_cpu::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}

#[test]
fn float16_lstm_runs_in_half_precision_with_float16_clips() {
    let options = tanh_full();
    let mut graph = lstm_graph(
        Spec::new(3, 2),
        1,
        &[0.25, -0.5],
        &[1.0, -1.0],
        options,
        false,
    );
    for t in &mut graph.subgraphs[0].tensors {
        t.element_type = ElementType::Float16;
        t.data = t.data.as_deref().map(|d| f16s(&to_f32s(d)));
    }
    let l = lower_model(&graph).unwrap();
    let op = only_op(&l);
    let clip = op.inputs[21] as usize;
    assert_eq!(l.model.operands[clip].operand_type, OperandType::Float16);
    let out = run(
        &l,
        &[
            f16s(&[0.5, -1.0, 2.0]),
            f16s(&[0.25, -0.5]),
            f16s(&[1.0, -1.0]),
        ],
    );
    // "lstm_step h1", "lstm_step c1" within float16's precision (the weights rounded to
    // float16, ~5e-4 relative; the executor computes in f32 and rounds the results once).
    for (got, want) in [
        (from_f16s(&out[0]), [0.4351203, -0.6578444]),
        (from_f16s(&out[2]), [0.8654091, -1.297195]),
    ] {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 2e-3 * w.abs().max(1.0),
                "{got:?} vs {want:?}"
            );
        }
    }
}

const CIFG_H0: [f32; 4] = [0.1, -0.2, 0.3, 0.0];
const CIFG_C0: [f32; 6] = [0.2, -0.3, 0.4, -0.1, 0.5, 0.0];

/// LSTM with CIFG, peephole and projection (input 2, cell 3, output 2, batch 2; RELU, cell
/// clip 0.5, projection clip 0.38), its states from `CIFG_H0`, `CIFG_C0`.
fn cifg_graph() -> Graph {
    let spec = Spec {
        n_output: 2,
        cifg: true,
        peephole: true,
        projection: true,
        ..Spec::new(2, 3)
    };
    let options = full(lstm_cell(Activation::Relu, 0.5, 0.38));
    lstm_graph(spec, 2, &CIFG_H0, &CIFG_C0, options, false)
}

/// Runs a lowered [`cifg_graph`] and checks its output and cell state.
fn check_cifg_outputs(l: &Lowered) {
    let x = f32s(&[1.0, -0.5, -2.0, 0.25]);
    let out = run(l, &[x, f32s(&CIFG_H0), f32s(&CIFG_C0)]);
    // "cifg h", "cifg c".
    assert_close(&to_f32s(&out[0]), &[0.2813784, -0.38, 0.38, -0.3159456]);
    assert_close(
        &to_f32s(&out[2]),
        &[0.5, -0.1745278, 0.2932081, -0.05998884, 0.4663433, 0.0],
    );
}

#[test]
fn lstm_with_cifg_peephole_and_projection_clips_the_cell_and_the_projection() {
    let l = lower_model(&cifg_graph()).unwrap();
    let op = only_op(&l);
    // CIFG: the input-gate weights, recurrent weights, peephole and bias are NO_VALUE.
    for k in [1, 5, 9, 12] {
        let o = op.inputs[k] as usize;
        assert_eq!(
            l.model.operands[o].lifetime,
            OperandLifetime::NoValue,
            "input {k}"
        );
    }
    // The scratch buffer holds 3 gates with CIFG.
    let scratch = op.outputs[0] as usize;
    assert_eq!(l.model.operands[scratch].dimensions, [2, 9]);
    check_cifg_outputs(&l);
}

#[test]
fn lstm_with_layer_norm_coefficients_takes_the_27_input_form() {
    let spec = Spec {
        peephole: true,
        ..Spec::new(2, 3)
    };
    let options = tanh_full();
    let c0 = [0.5, -0.25, 1.0];
    let l = lower_model(&lstm_graph(spec, 1, &[0.0; 3], &c0, options, true)).unwrap();
    assert_eq!(only_op(&l).inputs.len(), 27);
    let out = run(&l, &[f32s(&[0.75, -1.5]), f32s(&[0.0; 3]), f32s(&c0)]);
    // "layer_norm h", "layer_norm c".
    assert_close(&to_f32s(&out[0]), &[0.2838703, -0.3017012, 0.1865329]);
    assert_close(&to_f32s(&out[2]), &[0.4881772, -0.4137619, 0.6261358]);
}

/// Why the plain LSTM (input 3, cell 2) with `options`, changed by `edit`, is refused.
fn refusal(options: Options, edit: impl FnOnce(&mut Graph)) -> String {
    let mut graph = lstm_graph(Spec::new(3, 2), 1, &[0.0; 2], &[0.0; 2], options, false);
    edit(&mut graph);
    unsupported(lower_model(&graph).unwrap_err())
}

fn tanh_full() -> Options {
    full(lstm_cell(Activation::Tanh, 0.0, 0.0))
}

#[test]
fn lstm_basic_kernel_is_refused_naming_it() {
    let options = Options::Lstm {
        cell: lstm_cell(Activation::Tanh, 0.0, 0.0),
        kernel: LstmKernel::Basic,
    };
    let why = refusal(options, |_| {});
    assert!(why.contains("BASIC"), "{why}");
}

/// The TFLite inputs of the one-direction forms that a hybrid LSTM holds quantized: gate
/// weights 1–8, peepholes 9–11, projection weights 16.
const WEIGHTS: [usize; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16];

/// Makes each present node input of `inputs` (a [`pattern`] tensor, multiples of 0.1 in
/// [-0.5, 0.5]) an int8 constant at scale 0.1: q = 10·v, exactly the pattern's
/// `(7k + 3i + 5j) mod 11 − 5`, which dequantizes to the float graph's weights.
fn make_hybrid(graph: &mut Graph, inputs: impl IntoIterator<Item = usize>) {
    for k in inputs {
        let t = graph.subgraphs[0].nodes[0].inputs[k];
        let Ok(t) = usize::try_from(t) else { continue };
        let data = graph.subgraphs[0].tensors[t].data.clone().unwrap();
        let q: Vec<u8> = to_f32s(&data)
            .iter()
            .map(|v| (v * 10.0).round() as i8 as u8)
            .collect();
        quantize_const(graph, t, ElementType::Int8, &q, 0.1, 0);
    }
}

/// Each present input of `inputs` of the only operation of `l` is a FLOAT32 constant
/// holding [`pattern`]`(k)` (of the dimensions it has).
fn assert_dequantized_patterns(l: &Lowered, inputs: impl IntoIterator<Item = usize>) {
    let op = only_op(l);
    for k in inputs {
        let o = op.inputs[k];
        let operand = &l.model.operands[o as usize];
        if operand.lifetime == OperandLifetime::NoValue {
            continue;
        }
        let rows = operand.dimensions[0] as usize;
        let cols = operand.dimensions.get(1).map_or(1, |&c| c as usize);
        assert_close(&float_const(l, o), &pattern(k, rows, cols));
    }
}

/// The FLOAT32 outputs `got` (a hybrid model's) are those of the float model, `want`: as
/// many, each close.
fn assert_same_outputs(got: &[Vec<u8>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_close(&to_f32s(g), &to_f32s(w));
    }
}

#[test]
fn hybrid_lstm_with_cifg_peephole_and_projection_dequantizes_every_weight_at_import() {
    let mut graph = cifg_graph();
    make_hybrid(&mut graph, WEIGHTS);
    let l = lower_model(&graph).unwrap();
    assert_dequantized_patterns(&l, WEIGHTS);
    // The float graph's outputs.
    check_cifg_outputs(&l);
}

#[test]
fn hybrid_lstm_with_a_float16_input_is_refused() {
    let why = refusal(tanh_full(), |graph| {
        make_hybrid(graph, [2]);
        // Every other tensor float16.
        for t in &mut graph.subgraphs[0].tensors {
            if t.element_type == ElementType::Float32 {
                t.element_type = ElementType::Float16;
                t.data = t.data.as_deref().map(|d| f16s(&to_f32s(d)));
            }
        }
    });
    assert!(
        why.contains("FLOAT16 input with quantized weights"),
        "{why}"
    );
}

#[test]
fn hybrid_lstm_with_quantized_weights_computed_at_run_time_is_refused() {
    let why = refusal(tanh_full(), |graph| {
        make_hybrid(graph, [2]);
        let sub = &mut graph.subgraphs[0];
        let w = sub.nodes[0].inputs[2];
        sub.tensors[w as usize].data = None;
        sub.inputs.push(w);
    });
    assert!(why.contains("computed at run time"), "{why}");
}

#[test]
fn hybrid_lstm_with_a_quantized_bias_is_refused() {
    let why = refusal(tanh_full(), |graph| make_hybrid(graph, [2, 13]));
    assert!(why.contains("input 13") && why.contains("INT8"), "{why}");
}

#[test]
fn integer_lstm_is_refused_naming_the_input_type() {
    let why = refusal(tanh_full(), |graph| {
        graph.subgraphs[0].tensors[0].element_type = ElementType::Int8;
    });
    assert!(why.contains("INT8") && why.contains("integer"), "{why}");
}

#[test]
fn lstm_with_a_sign_bit_activation_or_a_negative_clip_is_refused() {
    let why = refusal(full(lstm_cell(Activation::SignBit, 0.0, 0.0)), |_| {});
    assert!(why.contains("SignBit"), "{why}");
    let why = refusal(full(lstm_cell(Activation::Tanh, -1.0, 0.0)), |_| {});
    assert!(why.contains("cell_clip"), "{why}");
}

#[test]
fn lstm_with_a_missing_state_input_is_refused() {
    let why = refusal(tanh_full(), |graph| {
        graph.subgraphs[0].nodes[0].inputs.truncate(19);
    });
    assert!(why.contains("input 19"), "{why}");
}

/// A graph with the sequence input x of `shape` and the inputs so far: x and the first
/// cell's tensors (input 2, cell 2, patterned from input 1, names after `prefix`).
fn sequence_start(shape: &[i32], prefix: &str) -> (G, i32, Vec<i32>) {
    let mut g = G::default();
    let x = g.f("x", shape);
    let mut ins = vec![x];
    ins.extend(cell(&mut g, Spec::new(2, 2), 1, prefix));
    (g, x, ins)
}

#[test]
fn lstm_in_a_delegate_partition_is_refused_as_whole_model_only() {
    let graph = lstm_graph(Spec::new(3, 2), 1, &[0.0; 2], &[0.0; 2], tanh_full(), false);
    let err = lower_nodes(&graph.subgraphs[0], &[0]).unwrap_err();
    assert!(err.to_string().contains("recurrent state"), "{err}");
}

/// UNIDIRECTIONAL_SEQUENCE_LSTM: x [2, 3, 2] (batch-major), cell 2, zero initial states.
fn unidirectional_graph(diagonal: bool) -> Graph {
    let (mut g, x, mut ins) = sequence_start(&[2, 3, 2], "");
    ins.push(state(&mut g, "h", &[2, 2], &[0.0; 4]));
    ins.push(state(&mut g, "c", &[2, 2], &[0.0; 4]));
    let y = g.f("y", &[2, 3, 2]);
    let options = Options::UnidirectionalSequenceLstm {
        cell: lstm_cell(Activation::Tanh, 0.0, 0.0),
        time_major: false,
        diagonal_recurrent_tensors: diagonal,
    };
    g.n(code::UNIDIRECTIONAL_SEQUENCE_LSTM, &ins, &[y], options);
    g.graph(&[x], &[y])
}

#[test]
fn unidirectional_sequence_lstm_outputs_its_final_states_as_the_state_outputs() {
    let l = lower_model(&unidirectional_graph(false)).unwrap();
    let op = only_op(&l);
    assert_eq!(
        (op.operation_type, op.inputs.len(), op.outputs.len()),
        (OperationType::UnidirectionalSequenceLstm, 28, 3)
    );
    let x = f32s(&[1.0, 0.0, 0.0, 1.0, -1.0, 0.5, 0.5, 0.5, 2.0, -1.0, 0.0, 0.0]);
    let zeros = f32s(&[0.0; 4]);
    let first = run(&l, &[x.clone(), zeros.clone(), zeros]);
    // "uni out (batch-major)", "uni h", "uni c".
    assert_close(
        &to_f32s(&first[0]),
        &[
            0.23466,
            -0.2577828,
            0.1310439,
            -0.06157708,
            0.07042916,
            0.01142498,
            0.1458532,
            -0.137596,
            0.4283744,
            -0.5175167,
            0.2188987,
            -0.1932849,
        ],
    );
    assert_close(
        &to_f32s(&first[1]),
        &[0.07042916, 0.01142498, 0.2188987, -0.1932849],
    );
    assert_close(
        &to_f32s(&first[2]),
        &[0.1678768, 0.02454202, 0.5055528, -0.3764503],
    );
    // "uni out run 2": the same sequence again from the carried states.
    let second = run(&l, &[x, first[1].clone(), first[2].clone()]);
    assert_close(
        &to_f32s(&second[0]),
        &[
            0.2604354,
            -0.2444061,
            0.1432807,
            -0.05592859,
            0.08009888,
            0.0141719,
            0.2138507,
            -0.1813898,
            0.4461004,
            -0.533704,
            0.2279101,
            -0.1984458,
        ],
    );
}

#[test]
fn hybrid_unidirectional_sequence_lstm_computes_as_the_float_one_with_dequantized_weights() {
    let float = lower_model(&unidirectional_graph(false)).unwrap();
    let mut graph = unidirectional_graph(false);
    make_hybrid(&mut graph, WEIGHTS);
    let hybrid = lower_model(&graph).unwrap();
    assert_dequantized_patterns(&hybrid, WEIGHTS);
    let x = f32s(&[1.0, 0.0, 0.0, 1.0, -1.0, 0.5, 0.5, 0.5, 2.0, -1.0, 0.0, 0.0]);
    let zeros = f32s(&[0.0; 4]);
    let inputs = [x, zeros.clone(), zeros];
    let (want, got) = (run(&float, &inputs), run(&hybrid, &inputs));
    assert_same_outputs(&got, &want);
}

#[test]
fn unidirectional_sequence_lstm_with_diagonal_recurrent_weights_is_refused() {
    let why = unsupported(lower_model(&unidirectional_graph(true)).unwrap_err());
    assert!(why.contains("diagonal"), "{why}");
}

/// BIDIRECTIONAL_SEQUENCE_LSTM: x [2, 1, 2] (time-major), forward and backward cells of 2.
fn bidirectional_graph(merge_outputs: bool) -> Graph {
    let (mut g, x, mut ins) = sequence_start(&[2, 1, 2], "fw_");
    ins.extend(cell(&mut g, Spec::new(2, 2), 18, "bw_"));
    for name in ["fw_h", "fw_c", "bw_h", "bw_c"] {
        ins.push(state(&mut g, name, &[1, 2], &[0.0; 2]));
    }
    ins.extend([-1; 9]);
    let outputs = if merge_outputs {
        vec![g.f("y", &[2, 1, 4])]
    } else {
        vec![g.f("fw_y", &[2, 1, 2]), g.f("bw_y", &[2, 1, 2])]
    };
    let options = Options::BidirectionalSequenceLstm {
        cell: lstm_cell(Activation::Tanh, 0.0, 0.0),
        merge_outputs,
        time_major: true,
    };
    g.n(code::BIDIRECTIONAL_SEQUENCE_LSTM, &ins, &outputs, options);
    g.graph(&[x], &outputs)
}

/// Runs a lowered bidirectional graph on x = [[[1, -1]], [[0.5, 2]]] from zero states.
fn run_bidirectional(l: &Lowered) -> Vec<Vec<u8>> {
    let mut inputs = vec![f32s(&[1.0, -1.0, 0.5, 2.0])];
    inputs.extend(std::iter::repeat_n(f32s(&[0.0; 2]), 4));
    run(l, &inputs)
}

#[test]
fn hybrid_bidirectional_sequence_lstm_dequantizes_both_cells_weights() {
    // Both cells' gate weights (inputs 1–8 and 18–25); the biases (12–15, 29–32) stay float.
    let weights: Vec<usize> = (1..=8).chain(18..=25).collect();
    let float = lower_model(&bidirectional_graph(true)).unwrap();
    let mut graph = bidirectional_graph(true);
    make_hybrid(&mut graph, weights.iter().copied());
    let hybrid = lower_model(&graph).unwrap();
    assert_dequantized_patterns(&hybrid, weights);
    let (want, got) = (run_bidirectional(&float), run_bidirectional(&hybrid));
    assert_same_outputs(&got, &want);
}

#[test]
fn bidirectional_sequence_lstm_with_merged_outputs_concatenates_both_directions() {
    let l = lower_model(&bidirectional_graph(true)).unwrap();
    let op = only_op(&l);
    assert_eq!((op.inputs.len(), op.outputs.len()), (61, 5));
    let names: Vec<_> = l.state.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["fw_h", "fw_c", "bw_h", "bw_c"]);
    let out = run_bidirectional(&l);
    // "bi fw out" and "bi bw out", per time step forward then backward.
    assert_close(
        &to_f32s(&out[0]),
        &[
            0.3356039,
            -0.3367991,
            0.08240794,
            -0.3834249,
            0.1157567,
            -0.0217071,
            -0.07123037,
            -0.1078367,
        ],
    );
    // "bi fw h", "bi fw c", "bi bw h", "bi bw c".
    assert_close(&to_f32s(&out[1]), &[0.1157567, -0.0217071]);
    assert_close(&to_f32s(&out[2]), &[0.4674123, -0.04276251]);
    assert_close(&to_f32s(&out[3]), &[0.08240794, -0.3834249]);
    assert_close(&to_f32s(&out[4]), &[0.2408943, -0.6266526]);
}

#[test]
fn bidirectional_sequence_lstm_without_merging_has_two_outputs() {
    let l = lower_model(&bidirectional_graph(false)).unwrap();
    assert_eq!(only_op(&l).outputs.len(), 6);
    let out = run_bidirectional(&l);
    assert_close(
        &to_f32s(&out[0]),
        &[0.3356039, -0.3367991, 0.1157567, -0.0217071],
    );
    assert_close(
        &to_f32s(&out[1]),
        &[0.08240794, -0.3834249, -0.07123037, -0.1078367],
    );
}

#[test]
fn bidirectional_sequence_lstm_with_the_wrong_output_count_is_refused() {
    let mut graph = bidirectional_graph(false);
    if let Options::BidirectionalSequenceLstm { merge_outputs, .. } =
        &mut graph.subgraphs[0].nodes[0].options
    {
        *merge_outputs = true;
    }
    let why = unsupported(lower_model(&graph).unwrap_err());
    assert!(why.contains("merge_outputs"), "{why}");
}
