//! UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN lowered from hand-built graphs
//! and executed on the CPU-only driver, the hidden states carried between executions as
//! state inputs and outputs. Each step is h = act(W·x + R·h + bias); the expected values are
//! worked by hand in the comments.

use super::code;
use super::tests::{
    G, assert_close, f16_bits, f32s, float_const, node0_refusal, quantize_const, run, to_f32s,
};
use super::{Lowered, lower_model, lower_nodes};
use crate::graph::{Activation, ElementType, Graph, Options};

const F32: ElementType = ElementType::Float32;

/// A variable FLOAT32 state tensor `name` of `shape`, its buffer `initial` (or none).
fn state(g: &mut G, name: &str, shape: &[i32], initial: Option<&[f32]>) -> i32 {
    let h = g.f(name, shape);
    g.sub.tensors[h as usize].is_variable = true;
    g.sub.tensors[h as usize].data = initial.map(f32s);
    h
}

/// x (batch 2, time 2, input 1; `[time, batch, 1]` when time-major) → UNIDIRECTIONAL_SEQUENCE_RNN
/// with 2 units: W = [[1], [2]], R = [[0.5, 1], [0, -1]], bias [0.1, 0], the variable hidden
/// state h (initial `h0`, or none).
fn uni_graph(time_major: bool, activation: Activation, h0: Option<&[f32]>) -> Graph {
    let mut g = G::default();
    let x = g.f("x", &[2, 2, 1]);
    let w = g.c("w", F32, &[2, 1], f32s(&[1.0, 2.0]));
    let r = g.c("r", F32, &[2, 2], f32s(&[0.5, 1.0, 0.0, -1.0]));
    let bias = g.c("bias", F32, &[2], f32s(&[0.1, 0.0]));
    let h = state(&mut g, "h", &[2, 2], h0);
    let y = g.f("y", &[2, 2, 2]);
    uni_node(g, [x, w, r, bias, h], y, time_major, activation)
}

/// The graph of `g` with UNIDIRECTIONAL_SEQUENCE_RNN over `inputs` (x, w, r, bias, h)
/// writing y, its input x and output y.
fn uni_node(mut g: G, inputs: [i32; 5], y: i32, time_major: bool, activation: Activation) -> Graph {
    let options = Options::SequenceRnn {
        time_major,
        activation,
        asymmetric_quantize_inputs: false,
    };
    g.n(code::UNIDIRECTIONAL_SEQUENCE_RNN, &inputs, &[y], options);
    g.graph(&inputs[..1], &[y])
}

// Batch 0 reads x = 1 then 2, batch 1 reads -1 then 0.5, from h = 0 (activation NONE):
//   b0 t0: [1 + 0.1, 2] = [1.1, 2]
//   b0 t1: [2 + 0.5·1.1 + 1·2 + 0.1, 4 - 2] = [4.65, 2]
//   b1 t0: [-1 + 0.1, -2] = [-0.9, -2]
//   b1 t1: [0.5 - 0.45 - 2 + 0.1, 1 + 2] = [-1.85, 3]
const UNI_B0: [f32; 4] = [1.1, 2.0, 4.65, 2.0];
const UNI_B1: [f32; 4] = [-0.9, -2.0, -1.85, 3.0];

/// Runs a lowered batch-major [`uni_graph`] on x = [[1, 2], [-1, 0.5]] ([batch, time]) from
/// its initial hidden state.
fn run_batch_major(l: &Lowered) -> Vec<Vec<u8>> {
    run(
        l,
        &[f32s(&[1.0, 2.0, -1.0, 0.5]), l.state[0].initial.clone()],
    )
}

#[test]
fn unidirectional_batch_major_runs_each_batch_through_time_and_outputs_the_last_state() {
    let l = lower_model(&uni_graph(false, Activation::None, None)).unwrap();
    assert_eq!(l.state.len(), 1);
    let s = &l.state[0];
    assert_eq!((s.name.as_str(), s.input, s.output), ("h", 1, 1));
    assert_eq!(s.initial, f32s(&[0.0; 4]));
    // x is [batch, time, 1]: batch 0 = [1, 2], batch 1 = [-1, 0.5].
    let out = run_batch_major(&l);
    let want: Vec<f32> = UNI_B0.iter().chain(&UNI_B1).copied().collect();
    assert_close(&to_f32s(&out[0]), &want);
    assert_close(&to_f32s(&out[1]), &[4.65, 2.0, -1.85, 3.0]);
    // The next execution starts from that state: b0 t0 = [1 + 0.5·4.65 + 2 + 0.1, 2 - 2].
    let next = run(&l, &[f32s(&[1.0, 2.0, -1.0, 0.5]), out[1].clone()]);
    assert_close(&to_f32s(&next[0])[..2], &[5.425, 0.0]);
}

#[test]
fn unidirectional_time_major_reads_and_writes_time_first() {
    let l = lower_model(&uni_graph(true, Activation::None, None)).unwrap();
    // x is [time, batch, 1]: t0 = [1, -1], t1 = [2, 0.5]; y is [time, batch, units].
    let out = run(
        &l,
        &[f32s(&[1.0, -1.0, 2.0, 0.5]), l.state[0].initial.clone()],
    );
    let want = [
        UNI_B0[0], UNI_B0[1], UNI_B1[0], UNI_B1[1], UNI_B0[2], UNI_B0[3], UNI_B1[2], UNI_B1[3],
    ];
    assert_close(&to_f32s(&out[0]), &want);
}

#[test]
fn unidirectional_applies_relu_inside_the_recurrence() {
    let l = lower_model(&uni_graph(false, Activation::Relu, None)).unwrap();
    // Batch 1: t0 [-0.9, -2] → [0, 0]; t1 [0.5 + 0.1, 1] = [0.6, 1]. Batch 0 stays positive.
    let out = run_batch_major(&l);
    assert_close(
        &to_f32s(&out[0]),
        &[1.1, 2.0, 4.65, 2.0, 0.0, 0.0, 0.6, 1.0],
    );
}

#[test]
fn unidirectional_applies_tanh_inside_the_recurrence() {
    let l = lower_model(&uni_graph(false, Activation::Tanh, None)).unwrap();
    let out = run_batch_major(&l);
    let got = to_f32s(&out[0]);
    // t0 of batch 0: tanh([1.1, 2]); t1: tanh([2 + 0.5·tanh 1.1 + tanh 2 + 0.1, 4 - tanh 2]).
    let (a, c) = (1.1f32.tanh(), 2f32.tanh());
    let t1 = [(2.1 + 0.5 * a + c).tanh(), (4.0 - c).tanh()];
    assert_close(&got[..4], &[a, c, t1[0], t1[1]]);
}

#[test]
fn unidirectional_state_starts_from_the_variable_buffer() {
    let l = lower_model(&uni_graph(
        false,
        Activation::None,
        Some(&[1.0, 1.0, 0.0, 0.0]),
    ))
    .unwrap();
    assert_eq!(l.state[0].initial, f32s(&[1.0, 1.0, 0.0, 0.0]));
    // b0 t0 from h = [1, 1]: [1 + 0.5 + 1 + 0.1, 2 + 0 - 1] = [2.6, 1].
    let out = run_batch_major(&l);
    assert_close(&to_f32s(&out[0])[..2], &[2.6, 1.0]);
}

#[test]
fn unidirectional_in_float16_runs_on_the_executor() {
    let mut g = G::default();
    let f16 = ElementType::Float16;
    // Time 2, batch 1, one unit: W = 1, R = 0.5, bias 0; x = [1, 2] → [1, 2 + 0.5] = [1, 2.5].
    let x = g.t("x", f16, &[2, 1, 1]);
    let w = g.c("w", f16, &[1, 1], f16_bits(&[0x3C00]));
    let r = g.c("r", f16, &[1, 1], f16_bits(&[0x3800]));
    let bias = g.c("bias", f16, &[1], f16_bits(&[0]));
    let h = g.t("h", f16, &[1, 1]);
    g.sub.tensors[h as usize].is_variable = true;
    let y = g.t("y", f16, &[2, 1, 1]);
    let graph = uni_node(g, [x, w, r, bias, h], y, true, Activation::None);
    let l = lower_model(&graph).unwrap();
    let out = run(
        &l,
        &[f16_bits(&[0x3C00, 0x4000]), l.state[0].initial.clone()],
    );
    // 1.0 = 0x3C00, 2.5 = 0x4100 in IEEE half precision.
    assert_eq!(out[0], f16_bits(&[0x3C00, 0x4100]));
    assert_eq!(out[1], f16_bits(&[0x4100]));
}

#[test]
fn unidirectional_hybrid_computes_in_float_with_its_int8_weights_dequantized_at_import() {
    // W int8 [2, 4] at 0.5 → [1, 2]; R int8 [1, 2, 0, -2] at 0.5 → [0.5, 1, 0, -1]: the
    // float graph's weights, so its outputs.
    let mut graph = uni_graph(false, Activation::None, None);
    quantize_const(&mut graph, 1, ElementType::Int8, &[2, 4], 0.5, 0);
    let r = [1i8, 2, 0, -2].map(|v| v as u8);
    quantize_const(&mut graph, 2, ElementType::Int8, &r, 0.5, 0);
    let l = lower_model(&graph).unwrap();
    let op = &l.model.operations[0];
    assert_close(&float_const(&l, op.inputs[1]), &[1.0, 2.0]);
    assert_close(&float_const(&l, op.inputs[2]), &[0.5, 1.0, 0.0, -1.0]);
    let out = run_batch_major(&l);
    let want: Vec<f32> = UNI_B0.iter().chain(&UNI_B1).copied().collect();
    assert_close(&to_f32s(&out[0]), &want);
}

#[test]
fn unidirectional_with_int8_weights_and_a_float16_input_is_refused() {
    let mut graph = uni_graph(false, Activation::None, None);
    quantize_const(&mut graph, 1, ElementType::Int8, &[2, 4], 0.5, 0);
    graph.subgraphs[0].tensors[0].element_type = ElementType::Float16;
    let why = node0_refusal(&graph, "UNIDIRECTIONAL_SEQUENCE_RNN");
    assert!(
        why.contains("FLOAT16 input with quantized weights"),
        "{why}"
    );
}

#[test]
fn unidirectional_in_a_delegate_partition_is_refused_as_whole_model_only() {
    let graph = uni_graph(true, Activation::None, None);
    let err = lower_nodes(&graph.subgraphs[0], &[0]).unwrap_err();
    assert!(err.to_string().contains("recurrent state"), "{err}");
}

/// Which auxiliary inputs a bidirectional graph has.
#[derive(Clone, Copy, PartialEq)]
enum Aux {
    None,
    /// The auxiliary input alone: the backward cell's input.
    Parallel,
    /// The auxiliary input and both auxiliary weights (1 each).
    Cross,
}

/// [`bidi_sized`] with batch 1 and time 3.
fn bidi_graph(time_major: bool, merge: bool, aux: Aux) -> Graph {
    bidi_sized((1, 3), time_major, merge, aux)
}

/// x ([time, batch, 1] when time-major, else [batch, time, 1]) → BIDIRECTIONAL_SEQUENCE_RNN
/// with one forward unit (W = 1, R = 0.5, bias 0) and one backward unit (W = -1, R = 2,
/// bias 1), activation NONE; the auxiliary input `a` of the same shape as x when `aux` is
/// not None.
fn bidi_sized((batch, time): (i32, i32), time_major: bool, merge: bool, aux: Aux) -> Graph {
    let mut g = G::default();
    let seq = |n: i32| {
        if time_major {
            [time, batch, n]
        } else {
            [batch, time, n]
        }
    };
    let x = g.f("x", &seq(1));
    let fw_w = g.c("fw_w", F32, &[1, 1], f32s(&[1.0]));
    let fw_r = g.c("fw_r", F32, &[1, 1], f32s(&[0.5]));
    let fw_b = g.c("fw_b", F32, &[1], f32s(&[0.0]));
    let fw_h = state(&mut g, "fw_h", &[batch, 1], None);
    let bw_w = g.c("bw_w", F32, &[1, 1], f32s(&[-1.0]));
    let bw_r = g.c("bw_r", F32, &[1, 1], f32s(&[2.0]));
    let bw_b = g.c("bw_b", F32, &[1], f32s(&[1.0]));
    let bw_h = state(&mut g, "bw_h", &[batch, 1], None);
    let mut inputs = vec![x];
    let a = if aux == Aux::None {
        -1
    } else {
        let a = g.f("a", &seq(1));
        inputs.push(a);
        a
    };
    let (fw_aw, bw_aw) = if aux == Aux::Cross {
        (
            g.c("fw_aw", F32, &[1, 1], f32s(&[1.0])),
            g.c("bw_aw", F32, &[1, 1], f32s(&[1.0])),
        )
    } else {
        (-1, -1)
    };
    let node_inputs = [
        x, fw_w, fw_r, fw_b, fw_h, bw_w, bw_r, bw_b, bw_h, a, fw_aw, bw_aw,
    ];
    let outputs = if merge {
        vec![g.f("y", &seq(2))]
    } else {
        vec![g.f("fw_y", &seq(1)), g.f("bw_y", &seq(1))]
    };
    let options = Options::BidirectionalSequenceRnn {
        time_major,
        activation: Activation::None,
        merge_outputs: merge,
        asymmetric_quantize_inputs: false,
    };
    g.n(
        code::BIDIRECTIONAL_SEQUENCE_RNN,
        &node_inputs,
        &outputs,
        options,
    );
    g.graph(&inputs, &outputs)
}

// x = [1, 2, 3] from zero states:
//   forward:  t0 1; t1 2 + 0.5·1 = 2.5; t2 3 + 0.5·2.5 = 4.25
//   backward: t2 -3 + 1 = -2; t1 -2 + 2·(-2) + 1 = -5; t0 -1 + 2·(-5) + 1 = -10
const X: [f32; 3] = [1.0, 2.0, 3.0];

#[test]
fn bidirectional_merged_interleaves_forward_and_backward_units_per_step() {
    let l = lower_model(&bidi_graph(true, true, Aux::None)).unwrap();
    let names: Vec<(&str, usize, usize)> = l
        .state
        .iter()
        .map(|s| (s.name.as_str(), s.input, s.output))
        .collect();
    assert_eq!(names, [("fw_h", 1, 1), ("bw_h", 2, 2)]);
    let out = run(&l, &[f32s(&X), f32s(&[0.0]), f32s(&[0.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, -10.0, 2.5, -5.0, 4.25, -2.0]);
    // The states after: the forward cell's last step (t2), the backward cell's (t0).
    assert_close(&to_f32s(&out[1]), &[4.25]);
    assert_close(&to_f32s(&out[2]), &[-10.0]);
    // Carried: forward t0 from 4.25 is 1 + 2.125 = 3.125; backward t2 from -10 is
    // -3 - 20 + 1 = -22, then t1 -2 - 44 + 1 = -45, t0 -1 - 90 + 1 = -90.
    let next = run(&l, &[f32s(&X), out[1].clone(), out[2].clone()]);
    let got = to_f32s(&next[0]);
    assert_close(&[got[0], got[1], got[5]], &[3.125, -90.0, -22.0]);
}

#[test]
fn bidirectional_separate_outputs_in_batch_major_form() {
    let l = lower_model(&bidi_graph(false, false, Aux::None)).unwrap();
    assert_eq!(l.outputs.len(), 4);
    // One batch: batch-major and time-major hold the same bytes.
    let out = run(&l, &[f32s(&X), f32s(&[0.0]), f32s(&[0.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 2.5, 4.25]);
    assert_close(&to_f32s(&out[1]), &[-10.0, -5.0, -2.0]);
    assert_close(&to_f32s(&out[2]), &[4.25]);
    assert_close(&to_f32s(&out[3]), &[-10.0]);
}

#[test]
fn bidirectional_batch_major_with_two_batches_keeps_each_batch_s_sequence() {
    // Batch 0 reads [1, 2], batch 1 [3, 0]:
    //   forward:  b0 1, 2 + 0.5 = 2.5; b1 3, 0 + 1.5 = 1.5
    //   backward: b0 t1 -2 + 1 = -1, t0 -1 - 2 + 1 = -2; b1 t1 0 + 1 = 1, t0 -3 + 2 + 1 = 0
    let l = lower_model(&bidi_sized((2, 2), false, false, Aux::None)).unwrap();
    let zeros = f32s(&[0.0, 0.0]);
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 0.0]), zeros.clone(), zeros]);
    assert_close(&to_f32s(&out[0]), &[1.0, 2.5, 3.0, 1.5]);
    assert_close(&to_f32s(&out[1]), &[-2.0, -1.0, 0.0, 1.0]);
    assert_close(&to_f32s(&out[2]), &[2.5, 1.5]);
    assert_close(&to_f32s(&out[3]), &[-2.0, 0.0]);
}

#[test]
fn bidirectional_cross_linked_aux_input_adds_to_both_cells() {
    let l = lower_model(&bidi_graph(true, true, Aux::Cross)).unwrap();
    // a = 1 everywhere, aux weights 1: each pre-activation gains 1.
    //   forward:  t0 1 + 1 = 2; t1 2 + 1 + 1 = 4; t2 3 + 2 + 1 = 6
    //   backward: t2 -3 + 1 + 1 = -1; t1 -2 - 2 + 1 + 1 = -2; t0 -1 - 4 + 1 + 1 = -3
    let zero = f32s(&[0.0]);
    let out = run(&l, &[f32s(&X), f32s(&[1.0; 3]), zero.clone(), zero]);
    assert_close(&to_f32s(&out[0]), &[2.0, -3.0, 4.0, -2.0, 6.0, -1.0]);
}

#[test]
fn bidirectional_parallel_linked_aux_input_is_the_backward_cell_s_input() {
    let l = lower_model(&bidi_graph(true, true, Aux::Parallel)).unwrap();
    // a = [0.5, 0, -1]; backward on a: t2 1 + 1 = 2; t1 0 + 4 + 1 = 5; t0 -0.5 + 10 + 1 = 10.5.
    let zero = f32s(&[0.0]);
    let out = run(&l, &[f32s(&X), f32s(&[0.5, 0.0, -1.0]), zero.clone(), zero]);
    assert_close(&to_f32s(&out[0]), &[1.0, 10.5, 2.5, 5.0, 4.25, 2.0]);
}

fn refusal(graph: &Graph) -> String {
    node0_refusal(graph, "BIDIRECTIONAL_SEQUENCE_RNN")
}

#[test]
fn bidirectional_batch_major_parallel_linking_is_refused_where_litert_ignores_the_aux_input() {
    let why = refusal(&bidi_graph(false, true, Aux::Parallel));
    assert!(why.contains("batch-major"), "{why}");
}

/// [`bidi_graph`] (batch 1, time 3) cross-linked with an auxiliary input of size 2 (aux
/// weights [[1, 1]]), where the input has size 1.
fn bidi_aux_size_2(time_major: bool) -> Graph {
    let mut graph = bidi_graph(time_major, true, Aux::Cross);
    let sub = &mut graph.subgraphs[0];
    let a = sub.nodes[0].inputs[9] as usize;
    sub.tensors[a].shape = if time_major {
        vec![3, 1, 2]
    } else {
        vec![1, 3, 2]
    };
    for w in [10, 11] {
        let t = sub.nodes[0].inputs[w] as usize;
        sub.tensors[t].shape = vec![1, 2];
        sub.tensors[t].data = Some(f32s(&[1.0, 1.0]));
    }
    graph
}

#[test]
fn bidirectional_time_major_cross_linking_with_another_aux_size_is_refused() {
    let graph = bidi_aux_size_2(true);
    let why = refusal(&graph);
    assert!(why.contains("Some(2)") && why.contains("Some(1)"), "{why}");
}

#[test]
fn bidirectional_with_one_aux_weight_only_is_refused() {
    let mut graph = bidi_graph(true, true, Aux::Cross);
    graph.subgraphs[0].nodes[0].inputs[11] = -1;
    let why = refusal(&graph);
    assert!(why.contains("auxiliary"), "{why}");
}

#[test]
fn bidirectional_with_two_outputs_but_merge_outputs_is_refused() {
    let mut graph = bidi_graph(true, false, Aux::None);
    if let Options::BidirectionalSequenceRnn { merge_outputs, .. } =
        &mut graph.subgraphs[0].nodes[0].options
    {
        *merge_outputs = true;
    }
    let why = refusal(&graph);
    assert!(why.contains("2 outputs, expected 1"), "{why}");
}

/// Makes node input `k` of a bidirectional `graph` an int8 constant `q` at scale 0.5.
fn quantize_input(graph: &mut Graph, k: usize, q: &[i8]) {
    let t = graph.subgraphs[0].nodes[0].inputs[k] as usize;
    let q: Vec<u8> = q.iter().map(|&v| v as u8).collect();
    quantize_const(graph, t, ElementType::Int8, &q, 0.5, 0);
}

#[test]
fn bidirectional_hybrid_dequantizes_its_weights_and_aux_weights_at_import() {
    // Batch-major, one batch, cross-linked: every weight int8 at 0.5 holding the float
    // graph's (1 → 2, 0.5 → 1, -1 → -2, 2 → 4; aux weights 1 → 2), so its outputs.
    let mut graph = bidi_graph(false, true, Aux::Cross);
    for (k, q) in [(1, 2), (2, 1), (5, -2), (6, 4), (10, 2), (11, 2)] {
        quantize_input(&mut graph, k, &[q]);
    }
    let l = lower_model(&graph).unwrap();
    let op = &l.model.operations[0];
    let weights: Vec<f32> = [1, 2, 5, 6, 10, 11]
        .iter()
        .flat_map(|&k| float_const(&l, op.inputs[k]))
        .collect();
    assert_close(&weights, &[1.0, 0.5, -1.0, 2.0, 1.0, 1.0]);
    let zero = f32s(&[0.0]);
    let out = run(&l, &[f32s(&X), f32s(&[1.0; 3]), zero.clone(), zero]);
    assert_close(&to_f32s(&out[0]), &[2.0, -3.0, 4.0, -2.0, 6.0, -1.0]);
}

#[test]
fn bidirectional_hybrid_time_major_over_several_steps_is_refused_where_litert_repeats_it() {
    let mut graph = bidi_graph(true, true, Aux::None);
    quantize_input(&mut graph, 1, &[2]);
    let why = refusal(&graph);
    assert!(why.contains("hybrid") && why.contains("3 steps"), "{why}");
}

#[test]
fn bidirectional_hybrid_batch_major_with_another_aux_size_is_refused() {
    let mut graph = bidi_aux_size_2(false);
    quantize_input(&mut graph, 10, &[2, 2]);
    let why = refusal(&graph);
    assert!(why.contains("hybrid") && why.contains("Some(2)"), "{why}");
}
