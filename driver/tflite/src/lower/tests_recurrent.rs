//! RNN and SVDF lowered from hand-built graphs and executed on the CPU-only driver, the
//! variable state carried between executions as a state input and output. Expected values
//! are worked by hand in the comments.

use super::code;
use super::tests::{
    G, assert_close, f32s, float_const, node0_refusal, quantize_const, run, to_f32s,
};
use super::{lower_model, lower_nodes};
use crate::graph::{Activation, ElementType, Graph, Options};

/// x [1, 2] → RNN (units 2, RELU) with W = [[0.5, -1], [1, 0.25]], R = [[0.1, 0.2],
/// [-0.3, 0.4]], bias [0.1, -0.2] and the variable state h (initial `h0`, or none).
fn rnn_graph(h0: Option<&[f32]>, activation: Activation) -> Graph {
    let mut g = G::default();
    let ty = crate::graph::ElementType::Float32;
    let x = g.f("x", &[1, 2]);
    let w = g.c("w", ty, &[2, 2], f32s(&[0.5, -1.0, 1.0, 0.25]));
    let r = g.c("r", ty, &[2, 2], f32s(&[0.1, 0.2, -0.3, 0.4]));
    let bias = g.c("bias", ty, &[2], f32s(&[0.1, -0.2]));
    let h = g.f("h", &[1, 2]);
    g.sub.tensors[h as usize].is_variable = true;
    g.sub.tensors[h as usize].data = h0.map(f32s);
    let y = g.f("y", &[1, 2]);
    let options = Options::Rnn {
        activation,
        asymmetric_quantize_inputs: false,
    };
    g.n(code::RNN, &[x, w, r, bias, h], &[y], options);
    g.graph(&[x], &[y])
}

#[test]
fn rnn_state_starts_from_the_variable_buffer_and_is_carried_between_executions() {
    let l = lower_model(&rnn_graph(Some(&[1.0, -1.0]), Activation::Relu)).unwrap();
    assert_eq!(l.state.len(), 1);
    let s = &l.state[0];
    assert_eq!((s.name.as_str(), s.input, s.output), ("h", 1, 1));
    assert_eq!(s.initial, f32s(&[1.0, -1.0]));
    // Step 1, x = [1, 2], h = [1, -1]:
    //   unit 0: 0.5 - 2 = -1.5; 0.1 - 0.2 = -0.1; + 0.1 → -1.5 → RELU 0
    //   unit 1: 1 + 0.5 = 1.5; -0.3 - 0.4 = -0.7; - 0.2 → 0.6
    let first = run(&l, &[f32s(&[1.0, 2.0]), s.initial.clone()]);
    assert_close(&to_f32s(&first[0]), &[0.0, 0.6]);
    assert_close(&to_f32s(&first[1]), &[0.0, 0.6]);
    // Step 2, h = [0, 0.6]: unit 0: -1.5 + 0.12 + 0.1 → 0; unit 1: 1.5 + 0.24 - 0.2 = 1.54.
    let second = run(&l, &[f32s(&[1.0, 2.0]), first[1].clone()]);
    assert_close(&to_f32s(&second[0]), &[0.0, 1.54]);
}

#[test]
fn rnn_state_without_a_buffer_starts_at_zero() {
    let l = lower_model(&rnn_graph(None, Activation::None)).unwrap();
    assert_eq!(l.state[0].initial, f32s(&[0.0, 0.0]));
    // x = [1, 2], h = 0: unit 0: -1.5 + 0.1 = -1.4; unit 1: 1.5 - 0.2 = 1.3.
    let out = run(&l, &[f32s(&[1.0, 2.0]), l.state[0].initial.clone()]);
    assert_close(&to_f32s(&out[0]), &[-1.4, 1.3]);
}

#[test]
fn rnn_with_a_tanh_inside_the_recurrence_applies_it_to_the_new_state() {
    let l = lower_model(&rnn_graph(None, Activation::Tanh)).unwrap();
    let out = run(&l, &[f32s(&[1.0, 2.0]), l.state[0].initial.clone()]);
    assert_close(&to_f32s(&out[0]), &[(-1.4f32).tanh(), 1.3f32.tanh()]);
}

#[test]
fn rnn_with_a_sign_bit_activation_is_refused_naming_it() {
    let why = rnn_refusal(&rnn_graph(None, Activation::SignBit));
    assert!(why.contains("SignBit"), "{why}");
}

#[test]
fn rnn_in_a_delegate_partition_is_refused_as_whole_model_only() {
    let graph = rnn_graph(None, Activation::None);
    let err = lower_nodes(&graph.subgraphs[0], &[0]).unwrap_err();
    assert!(err.to_string().contains("recurrent state"), "{err}");
}

#[test]
fn rnn_whose_state_is_not_a_variable_tensor_is_refused() {
    let mut graph = rnn_graph(Some(&[0.0, 0.0]), Activation::None);
    graph.subgraphs[0].tensors[4].is_variable = false;
    let err = lower_model(&graph).unwrap_err();
    assert!(err.to_string().contains("not a variable tensor"), "{err}");
}

/// x [1, 2] → SVDF (rank 1, one unit, memory 2) with weights_feature [1, 2], weights_time
/// [0.5, 1], bias [0.25] (or none), the variable state s [1, 2] initially `s0`.
fn svdf_graph(s0: &[f32], bias: bool) -> Graph {
    let mut g = G::default();
    let ty = crate::graph::ElementType::Float32;
    let x = g.f("x", &[1, 2]);
    let wf = g.c("wf", ty, &[1, 2], f32s(&[1.0, 2.0]));
    let wt = g.c("wt", ty, &[1, 2], f32s(&[0.5, 1.0]));
    let b = if bias {
        g.c("bias", ty, &[1], f32s(&[0.25]))
    } else {
        -1
    };
    let s = g.f("s", &[1, 2]);
    g.sub.tensors[s as usize].is_variable = true;
    g.sub.tensors[s as usize].data = Some(f32s(s0));
    let y = g.f("y", &[1, 1]);
    let options = Options::Svdf {
        rank: 1,
        activation: Activation::None,
        asymmetric_quantize_inputs: false,
    };
    g.n(code::SVDF, &[x, wf, wt, b, s], &[y], options);
    g.graph(&[x], &[y])
}

#[test]
fn svdf_with_a_nonzero_initial_state_matches_tflite_s_shift_then_write_order() {
    let l = lower_model(&svdf_graph(&[3.0, 4.0], true)).unwrap();
    let s = &l.state[0];
    // TFLite: memory [3, 4]; x = [1, 1] → feature 1 + 2 = 3; shift then write → [4, 3];
    // y = 0.5·4 + 1·3 + 0.25 = 5.25.
    let first = run(&l, &[f32s(&[1.0, 1.0]), s.initial.clone()]);
    assert_close(&to_f32s(&first[0]), &[5.25]);
    // x = [2, 0] → feature 2; memory [3, 2]; y = 1.5 + 2 + 0.25 = 3.75.
    let second = run(&l, &[f32s(&[2.0, 0.0]), first[1].clone()]);
    assert_close(&to_f32s(&second[0]), &[3.75]);
}

#[test]
fn svdf_without_a_bias_gets_a_zero_bias() {
    let l = lower_model(&svdf_graph(&[0.0, 0.0], false)).unwrap();
    // Memory 0 → [0, 3] for x = [1, 1]: y = 1·3 = 3.
    let out = run(&l, &[f32s(&[1.0, 1.0]), l.state[0].initial.clone()]);
    assert_close(&to_f32s(&out[0]), &[3.0]);
}

/// [`rnn_graph`] (no initial state, activation NONE) made hybrid: W int8 at scale 0.25
/// ([2, -4, 4, 1] → [0.5, -1, 1, 0.25]) and R uint8 at scale 0.1, zero point 10
/// ([11, 12, 7, 14] → [0.1, 0.2, -0.3, 0.4]): the float graph's weights.
fn hybrid_rnn_graph() -> Graph {
    let mut graph = rnn_graph(None, Activation::None);
    let w = [2i8, -4, 4, 1].map(|v| v as u8);
    quantize_const(&mut graph, 1, ElementType::Int8, &w, 0.25, 0);
    quantize_const(&mut graph, 2, ElementType::UInt8, &[11, 12, 7, 14], 0.1, 10);
    graph
}

#[test]
fn hybrid_rnn_computes_in_float_with_its_quantized_weights_dequantized_at_import() {
    let l = lower_model(&hybrid_rnn_graph()).unwrap();
    let rnn = &l.model.operations[0];
    assert_close(&float_const(&l, rnn.inputs[1]), &[0.5, -1.0, 1.0, 0.25]);
    assert_close(&float_const(&l, rnn.inputs[2]), &[0.1, 0.2, -0.3, 0.4]);
    // As the float graph: x = [1, 2], h = 0 → [-1.4, 1.3].
    let out = run(&l, &[f32s(&[1.0, 2.0]), l.state[0].initial.clone()]);
    assert_close(&to_f32s(&out[0]), &[-1.4, 1.3]);
}

/// The reason the RNN node of `graph` is refused.
fn rnn_refusal(graph: &Graph) -> String {
    node0_refusal(graph, "RNN")
}

#[test]
fn hybrid_rnn_with_a_float16_input_is_refused() {
    let mut graph = hybrid_rnn_graph();
    graph.subgraphs[0].tensors[0].element_type = ElementType::Float16;
    let why = rnn_refusal(&graph);
    assert!(
        why.contains("FLOAT16 input with quantized weights"),
        "{why}"
    );
}

#[test]
fn hybrid_rnn_with_quantized_weights_computed_at_run_time_is_refused() {
    let mut graph = hybrid_rnn_graph();
    let sub = &mut graph.subgraphs[0];
    sub.tensors[1].data = None;
    sub.inputs.push(1);
    let why = rnn_refusal(&graph);
    assert!(why.contains("computed at run time"), "{why}");
}

#[test]
fn hybrid_rnn_with_a_quantized_bias_is_refused() {
    let mut graph = hybrid_rnn_graph();
    quantize_const(&mut graph, 3, ElementType::Int8, &[1, 254], 0.1, 0);
    let why = rnn_refusal(&graph);
    assert!(why.contains("input 3"), "{why}");
}

#[test]
fn integer_rnn_with_a_quantized_input_is_refused() {
    let mut graph = hybrid_rnn_graph();
    let x = &mut graph.subgraphs[0].tensors[0];
    x.element_type = ElementType::Int8;
    x.quantization.scales = vec![0.1];
    x.quantization.zero_points = vec![0];
    let why = rnn_refusal(&graph);
    assert!(why.contains("input 0") && why.contains("integer"), "{why}");
}

#[test]
fn hybrid_svdf_computes_in_float_with_its_quantized_weights_dequantized_at_import() {
    // weights_feature int8 [4, 8] at 0.25 → [1, 2]; weights_time int8 [1, 2] at 0.5 →
    // [0.5, 1]: the float graph's.
    let mut graph = svdf_graph(&[3.0, 4.0], true);
    quantize_const(&mut graph, 1, ElementType::Int8, &[4, 8], 0.25, 0);
    quantize_const(&mut graph, 2, ElementType::Int8, &[1, 2], 0.5, 0);
    let l = lower_model(&graph).unwrap();
    let svdf = &l.model.operations[0];
    assert_close(&float_const(&l, svdf.inputs[1]), &[1.0, 2.0]);
    assert_close(&float_const(&l, svdf.inputs[2]), &[0.5, 1.0]);
    // As the float graph's first step: y = 5.25.
    let out = run(&l, &[f32s(&[1.0, 1.0]), l.state[0].initial.clone()]);
    assert_close(&to_f32s(&out[0]), &[5.25]);
}
