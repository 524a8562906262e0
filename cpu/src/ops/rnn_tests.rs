//! RNN, SVDF, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN. Expected values are
//! printed by cpu/testdata/rnn_gen.py, a plain-Python version of the NNAPI definitions.

use crate::test_support::*;
use crate::{Graph, Lifetime, OperandType as T, OperationType as O, PreparedGraph};

/// Float16 results within half precision of `want`.
fn close16(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 4e-3 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// Constant tensor of type `ty` (float32 or float16) holding `v`.
fn fc(b: &mut B, ty: T, dims: &[u32], v: &[f32]) -> u32 {
    if ty == T::TensorFloat16 {
        b.konst(ty, dims, f16_bytes(v))
    } else {
        b.f32c(dims, v)
    }
}

// ---------------------------------------------------------------- RNN

const X: [f32; 6] = [1.0, 2.0, 3.0, -1.0, 0.5, 2.0];
const W: [f32; 6] = [0.1, 0.2, 0.3, -0.4, 0.5, -0.6];
const R: [f32; 4] = [0.5, -0.5, 0.25, 1.0];
const BIAS: [f32; 2] = [0.1, -0.2];
const H: [f32; 4] = [1.0, -1.0, 0.5, 2.0];

/// RNN with input `[2, 3]` and hidden state `[2, 2]` as graph inputs.
fn rnn_graph(ty: T, wdims: &[u32], act: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, &[2, 3]);
    let w = fc(&mut b, ty, wdims, &W);
    let r = fc(&mut b, ty, &[2, 2], &R);
    let bias = fc(&mut b, ty, &[2], &BIAS);
    let h = b.input(ty, &[2, 2]);
    let a = b.int(act);
    let ho = b.output(ty, &[2, 2]);
    let o = b.output(ty, &[2, 2]);
    b.op(O::Rnn, &[x, w, r, bias, h, a], &[ho, o]);
    b.g
}

#[test]
fn rnn_float32_both_outputs_are_the_new_state() {
    let g = rnn_graph(T::TensorFloat32, &[2, 3], 0);
    let r = run_outputs(g, &[fb(&X), fb(&H)]).unwrap();
    let want = [2.5, -2.15, -0.05, 1.375];
    close(&bf(&r[0].0), &want);
    close(&bf(&r[1].0), &want);
    assert_eq!(r[1].1, vec![2, 2]);
}

#[test]
fn rnn_relu_clamps_negative_units() {
    let g = rnn_graph(T::TensorFloat32, &[2, 3], 1);
    let r = run_outputs(g, &[fb(&X), fb(&H)]).unwrap();
    close(&bf(&r[1].0), &[2.5, 0.0, 0.0, 1.375]);
}

#[test]
fn rnn_tanh_and_sigmoid_codes_apply_to_the_cell_sum() {
    let sums = [2.5f32, -2.15, -0.05, 1.375];
    let g = rnn_graph(T::TensorFloat32, &[2, 3], 4);
    let r = run_outputs(g, &[fb(&X), fb(&H)]).unwrap();
    close(&bf(&r[1].0), &sums.map(f32::tanh));
    close(&bf(&r[0].0), &sums.map(f32::tanh));
    let g = rnn_graph(T::TensorFloat32, &[2, 3], 6);
    let r = run_outputs(g, &[fb(&X), fb(&H)]).unwrap();
    close(&bf(&r[1].0), &sums.map(|v| 1.0 / (1.0 + (-v).exp())));
}

#[test]
fn rnn_float16() {
    let g = rnn_graph(T::TensorFloat16, &[2, 3], 0);
    let r = run_outputs(g, &[f16_bytes(&X), f16_bytes(&H)]).unwrap();
    close16(&f16_vals(&r[0].0), &[2.5, -2.15, -0.05, 1.375]);
}

#[test]
fn rnn_declared_weights_not_matching_input_size_are_refused() {
    let g = rnn_graph(T::TensorFloat32, &[3, 2], 0);
    assert!(refused(g).contains("input size must equal the weights' second extent"));
}

#[test]
fn rnn_weights_not_matching_input_size_fail_at_execution() {
    let mut g = rnn_graph(T::TensorFloat32, &[2, 3], 0);
    let x = g.operations[0].inputs[0] as usize;
    g.operands[x].dimensions = vec![0, 0];
    let m = exec_message(run_outputs_dims(
        g,
        &[(fb(&X), vec![3, 2]), (fb(&H), vec![])],
    ));
    assert!(m.contains("weights' second extent is 3, must be 2"), "{m}");
}

#[test]
fn rnn_recurrent_weights_must_be_square() {
    let g = rnn_graph(T::TensorFloat32, &[2, 3], 0);
    let g2 = {
        let mut b = B::new();
        b.g = g;
        let r2 = b.f32c(&[2, 1], &[0.5, 0.25]);
        b.g.operations[0].inputs[2] = r2;
        b.g
    };
    assert!(refused(g2).contains("recurrent weights must be [num_units, num_units]"));
}

#[test]
fn rnn_omitted_activation_means_none() {
    let mut g = rnn_graph(T::TensorFloat32, &[2, 3], 1);
    let a = g.operations[0].inputs[5] as usize;
    g.operands[a].lifetime = Lifetime::NoValue;
    let r = run_outputs(g, &[fb(&X), fb(&H)]).unwrap();
    close(&bf(&r[1].0), &[2.5, -2.15, -0.05, 1.375]);
}

#[test]
fn rnn_invalid_activation_is_refused() {
    let g = rnn_graph(T::TensorFloat32, &[2, 3], 5);
    assert!(refused(g).contains("fused activation 5"));
}

#[test]
fn rnn_five_inputs_are_refused() {
    let mut g = rnn_graph(T::TensorFloat32, &[2, 3], 0);
    g.operations[0].inputs.pop();
    assert!(refused(g).contains("5 inputs given"));
}

#[test]
fn rnn_mixed_float_types_are_refused() {
    let mut g = rnn_graph(T::TensorFloat32, &[2, 3], 0);
    let out = g.operations[0].outputs[1] as usize;
    g.operands[out].ty = T::TensorFloat16;
    assert!(refused(g).contains("output 1 type"));
}

#[test]
fn rnn_quant8_input_is_refused() {
    let mut g = rnn_graph(T::TensorFloat32, &[2, 3], 0);
    let x = g.operations[0].inputs[0] as usize;
    g.operands[x].ty = T::TensorQuant8Asymm;
    g.operands[x].scale = 1.0;
    assert!(refused(g).contains("TENSOR_FLOAT32 or TENSOR_FLOAT16"));
}

// ---------------------------------------------------------------- SVDF

const SX: [f32; 4] = [1.0, -2.0, 0.5, 3.0];
const SWF: [f32; 8] = [0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8];
const SWT: [f32; 12] = [
    1.0, 0.5, -1.0, 0.25, -0.5, 2.0, -1.5, 1.0, 0.5, 0.75, 0.25, 1.0,
];
const SB: [f32; 2] = [0.1, -0.1];

fn svdf_state() -> Vec<f32> {
    let mut s: Vec<f32> = (0..12)
        .map(|i| 0.1 * (i + 1) as f32 * if i % 2 == 1 { 1.0 } else { -1.0 })
        .collect();
    s.extend((0..12).map(|i| 0.05 * i as f32));
    s
}

/// SVDF: batch 2, input 2, units 2, rank 2 (4 filters), memory 3; input and state are graph
/// inputs.
fn svdf_graph(ty: T, bias: bool, rank: i32, act: i32, state_w: u32) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, &[2, 2]);
    let wf = fc(&mut b, ty, &[4, 2], &SWF);
    let wt = fc(&mut b, ty, &[4, 3], &SWT);
    let bi = if bias {
        fc(&mut b, ty, &[2], &SB)
    } else {
        b.add(ty, &[0], Lifetime::NoValue)
    };
    let s = b.input(ty, &[2, state_w]);
    let rk = b.int(rank);
    let a = b.int(act);
    let so = b.output(ty, &[2, 0]);
    let o = b.output(ty, &[2, 0]);
    b.op(O::Svdf, &[x, wf, wt, bi, s, rk, a], &[so, o]);
    b.g
}

const SVDF_STATE1: [f32; 24] = [
    0.2, -0.3, 0.0, -0.5, -1.1, 0.0, 0.8, 1.7, 0.0, -1.1, -0.9, 0.0, 0.05, 0.65, 0.0, 0.2, 1.05,
    0.0, 0.35, -1.55, 0.0, 0.5, 2.75, 0.0,
];

#[test]
fn svdf_float32_with_bias_updates_state_and_output() {
    let g = svdf_graph(T::TensorFloat32, true, 2, 0, 12);
    let r = run_outputs(g, &[fb(&SX), fb(&svdf_state())]).unwrap();
    assert_eq!(r[0].1, vec![2, 12]);
    close(&bf(&r[0].0), &SVDF_STATE1);
    assert_eq!(r[1].1, vec![2, 2]);
    close(&bf(&r[1].0), &[-1.45, 2.175, 1.5125, 2.2375]);
}

#[test]
fn svdf_tanh_applies_to_the_output_not_the_state() {
    let g = svdf_graph(T::TensorFloat32, true, 2, 4, 12);
    let r = run_outputs(g, &[fb(&SX), fb(&svdf_state())]).unwrap();
    close(&bf(&r[0].0), &SVDF_STATE1);
    close(
        &bf(&r[1].0),
        &[-1.45f32, 2.175, 1.5125, 2.2375].map(f32::tanh),
    );
}

#[test]
fn svdf_omitted_bias_with_relu() {
    let g = svdf_graph(T::TensorFloat32, false, 2, 1, 12);
    let r = run_outputs(g, &[fb(&SX), fb(&svdf_state())]).unwrap();
    close(&bf(&r[0].0), &SVDF_STATE1);
    close(&bf(&r[1].0), &[0.0, 2.275, 1.4125, 2.3375]);
}

#[test]
fn svdf_second_step_consumes_the_returned_state() {
    let g = svdf_graph(T::TensorFloat32, true, 2, 1, 12);
    let r = run_outputs(g, &[fb(&[2.0, 1.0, -1.0, -1.0]), fb(&SVDF_STATE1)]).unwrap();
    close(
        &bf(&r[0].0),
        &[
            -0.3, 0.4, 0.0, -1.1, -0.2, 0.0, 1.7, 0.4, 0.0, -0.9, 2.2, 0.0, 0.65, -0.3, 0.0, 1.05,
            -0.1, 0.0, -1.55, 0.1, 0.0, 2.75, -1.5, 0.0,
        ],
    );
    close(&bf(&r[1].0), &[0.0, 1.75, 0.1, 0.0]);
}

#[test]
fn svdf_float16() {
    let g = svdf_graph(T::TensorFloat16, true, 2, 0, 12);
    let r = run_outputs(g, &[f16_bytes(&SX), f16_bytes(&svdf_state())]).unwrap();
    close16(&f16_vals(&r[0].0), &SVDF_STATE1);
    close16(&f16_vals(&r[1].0), &[-1.45, 2.175, 1.5125, 2.2375]);
}

#[test]
fn svdf_filters_not_a_multiple_of_constant_rank_are_refused() {
    let g = svdf_graph(T::TensorFloat32, false, 3, 0, 12);
    assert!(refused(g).contains("not a multiple of rank 3"));
}

#[test]
fn svdf_filters_not_a_multiple_of_rank_fail_at_execution() {
    let mut b = B::new();
    b.g = svdf_graph(T::TensorFloat32, false, 2, 0, 12);
    let rk = b.input(T::Int32, &[]);
    b.g.operations[0].inputs[5] = rk;
    let m = exec_message(run_outputs(
        b.g,
        &[fb(&SX), fb(&svdf_state()), 3i32.to_le_bytes().to_vec()],
    ));
    assert!(m.contains("not a multiple of rank 3"), "{m}");
}

#[test]
fn svdf_declared_state_width_must_be_memory_times_filters() {
    let g = svdf_graph(T::TensorFloat32, true, 2, 0, 8);
    assert!(refused(g).contains("state width 8 must be"));
}

#[test]
fn svdf_state_width_must_be_memory_times_filters_at_execution() {
    let mut g = svdf_graph(T::TensorFloat32, true, 2, 0, 12);
    let s = g.operations[0].inputs[4] as usize;
    g.operands[s].dimensions = vec![2, 0];
    let m = exec_message(run_outputs_dims(
        g,
        &[(fb(&SX), vec![]), (fb(&[0.0; 16]), vec![2, 8])],
    ));
    assert!(m.contains("state width"), "{m}");
}

#[test]
fn svdf_rank_zero_is_refused() {
    let g = svdf_graph(T::TensorFloat32, true, 0, 0, 12);
    assert!(refused(g).contains("rank must be > 0"));
}

#[test]
fn svdf_one_output_is_refused() {
    let mut g = svdf_graph(T::TensorFloat32, true, 2, 0, 12);
    g.operations[0].outputs.pop();
    assert!(PreparedGraph::new(g).is_err());
}

#[test]
fn svdf_int32_rank_operand_type_is_checked() {
    let mut g = svdf_graph(T::TensorFloat32, true, 2, 0, 12);
    let rk = g.operations[0].inputs[5] as usize;
    g.operands[rk].ty = T::Float32;
    assert!(refused(g).contains("rank"));
}

// ---------------------------------------------------------------- sequences

/// Time-major input `[3, 2, 2]`.
const QX: [f32; 12] = [
    1.0, 0.0, 0.5, -1.0, -0.5, 2.0, 1.0, 1.0, 0.0, -1.0, 2.0, 0.5,
];
const QW: [f32; 4] = [0.5, -0.25, 0.75, 0.5];
const QR: [f32; 4] = [0.1, 0.2, -0.3, 0.4];
const QB: [f32; 2] = [0.05, -0.05];
const QH: [f32; 4] = [0.2, -0.1, 0.0, 0.3];
const UNI_OUT: [f32; 12] = [
    0.55, 0.6, 0.61, -0.055, -0.525, 0.65, 0.35, 0.995, 0.3775, -0.1325, 1.159, 1.993,
];
const UNI_STATE: [f32; 4] = [0.3775, -0.1325, 1.159, 1.993];

/// `[t, b, n]` → `[b, t, n]`.
fn to_batch_major(v: &[f32], t: usize, b: usize, n: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for j in 0..b {
        for i in 0..t {
            out.extend_from_slice(&v[(i * b + j) * n..(i * b + j + 1) * n]);
        }
    }
    out
}

fn uni_graph(ty: T, time_major: i32, act: i32, with_state: bool) -> Graph {
    let mut b = B::new();
    let xd = if time_major == 0 {
        [2, 3, 2]
    } else {
        [3, 2, 2]
    };
    let x = b.input(ty, &xd);
    let w = fc(&mut b, ty, &[2, 2], &QW);
    let r = fc(&mut b, ty, &[2, 2], &QR);
    let bias = fc(&mut b, ty, &[2], &QB);
    let h = b.input(ty, &[2, 2]);
    let a = b.int(act);
    let tm = b.int(time_major);
    let o = b.output(ty, &xd);
    let mut outs = vec![o];
    if with_state {
        outs.push(b.output(ty, &[2, 2]));
    }
    b.op(
        O::UnidirectionalSequenceRnn,
        &[x, w, r, bias, h, a, tm],
        &outs,
    );
    b.g
}

#[test]
fn unidirectional_time_major_with_state_output() {
    let g = uni_graph(T::TensorFloat32, 1, 0, true);
    let r = run_outputs(g, &[fb(&QX), fb(&QH)]).unwrap();
    assert_eq!(r[0].1, vec![3, 2, 2]);
    close(&bf(&r[0].0), &UNI_OUT);
    assert_eq!(r[1].1, vec![2, 2]);
    close(&bf(&r[1].0), &UNI_STATE);
}

#[test]
fn unidirectional_batch_major() {
    let g = uni_graph(T::TensorFloat32, 0, 0, false);
    let x = to_batch_major(&QX, 3, 2, 2);
    let r = run_outputs(g, &[fb(&x), fb(&QH)]).unwrap();
    assert_eq!(r[0].1, vec![2, 3, 2]);
    close(
        &bf(&r[0].0),
        &[
            0.55, 0.6, -0.525, 0.65, 0.3775, -0.1325, 0.61, -0.055, 0.35, 0.995, 1.159, 1.993,
        ],
    );
}

#[test]
fn unidirectional_relu6_feeds_clamped_state_forward() {
    let g = uni_graph(T::TensorFloat32, 1, 3, false);
    let r = run_outputs(g, &[fb(&QX), fb(&QH)]).unwrap();
    close(
        &bf(&r[0].0),
        &[
            0.55, 0.6, 0.61, 0.0, 0.0, 0.65, 0.361, 1.017, 0.43, 0.0, 1.1645, 1.9985,
        ],
    );
}

#[test]
fn unidirectional_float16() {
    let g = uni_graph(T::TensorFloat16, 1, 0, true);
    let r = run_outputs(g, &[f16_bytes(&QX), f16_bytes(&QH)]).unwrap();
    close16(&f16_vals(&r[0].0), &UNI_OUT);
    close16(&f16_vals(&r[1].0), &UNI_STATE);
}

#[test]
fn unidirectional_time_major_two_is_refused() {
    let g = uni_graph(T::TensorFloat32, 2, 0, false);
    assert!(refused(g).contains("time_major must be 0 or 1"));
}

#[test]
fn unidirectional_three_outputs_are_refused() {
    let mut b = B::new();
    let g0 = uni_graph(T::TensorFloat32, 1, 0, true);
    b.g = g0;
    let extra = b.output(T::TensorFloat32, &[2, 2]);
    b.g.operations[0].outputs.push(extra);
    assert!(refused(b.g).contains("3 outputs given"));
}

#[test]
fn unidirectional_declared_hidden_state_of_wrong_units_is_refused() {
    let mut g = uni_graph(T::TensorFloat32, 1, 0, false);
    let h = g.operations[0].inputs[4] as usize;
    g.operands[h].dimensions = vec![2, 1];
    assert!(refused(g).contains("hidden state width must equal num_units"));
}

#[test]
fn unidirectional_hidden_state_of_wrong_units_fails_at_execution() {
    let mut g = uni_graph(T::TensorFloat32, 1, 0, false);
    let h = g.operations[0].inputs[4] as usize;
    g.operands[h].dimensions = vec![2, 0];
    let m = exec_message(run_outputs_dims(
        g,
        &[(fb(&QX), vec![]), (fb(&[0.0, 0.0]), vec![2, 1])],
    ));
    assert!(m.contains("hidden state units is 1, must be 2"), "{m}");
}

// ---------------------------------------------------------------- BIDIRECTIONAL

const BW: [f32; 2] = [-0.5, 1.0];
const BR: [f32; 1] = [0.5];
const BB: [f32; 1] = [0.1];
const BH: [f32; 2] = [0.3, -0.2];
const BW_OUT: [f32; 6] = [0.5875, -0.975, 1.975, 0.35, -0.75, -0.5];
/// Time-major auxiliary input `[3, 2, 1]`.
const AX: [f32; 6] = [1.0, -1.0, 0.5, 2.0, -2.0, 0.25];

#[derive(Clone, Copy)]
enum Aux {
    None,
    Parallel,
    Cross,
}

/// BIDIRECTIONAL_SEQUENCE_RNN over QX (forward: 2 units, backward: 1 unit); graph inputs are
/// the input and, when used, the auxiliary input.
fn bi_graph(ty: T, time_major: bool, merge: bool, state: bool, aux: Aux) -> Graph {
    let mut b = B::new();
    let (xd, ad) = if time_major {
        ([3, 2, 2], [3, 2, 1])
    } else {
        ([2, 3, 2], [2, 3, 1])
    };
    let x = b.input(ty, &xd);
    let fw = fc(&mut b, ty, &[2, 2], &QW);
    let fr = fc(&mut b, ty, &[2, 2], &QR);
    let fbias = fc(&mut b, ty, &[2], &QB);
    let fh = fc(&mut b, ty, &[2, 2], &QH);
    let bw = match aux {
        Aux::Parallel => fc(&mut b, ty, &[1, 1], &[0.8]),
        _ => fc(&mut b, ty, &[1, 2], &BW),
    };
    let br = fc(&mut b, ty, &[1, 1], &BR);
    let bbias = fc(&mut b, ty, &[1], &BB);
    let bh_ = fc(&mut b, ty, &[2, 1], &BH);
    let (ai, faw, baw) = match aux {
        Aux::None => (
            b.add(ty, &[0], Lifetime::NoValue),
            b.add(ty, &[0], Lifetime::NoValue),
            b.add(ty, &[0], Lifetime::NoValue),
        ),
        Aux::Parallel => (
            b.input(ty, &ad),
            b.add(ty, &[0], Lifetime::NoValue),
            b.add(ty, &[0], Lifetime::NoValue),
        ),
        Aux::Cross => (
            b.input(ty, &ad),
            fc(&mut b, ty, &[2, 1], &[0.5, -1.0]),
            fc(&mut b, ty, &[1, 1], &[2.0]),
        ),
    };
    let act = b.int(0);
    let tm = b.boolean(time_major);
    let mg = b.boolean(merge);
    let od = |n: u32| if time_major { [3, 2, n] } else { [2, 3, n] };
    let mut outs = vec![b.output(ty, &od(if merge { 3 } else { 2 }))];
    if !merge {
        outs.push(b.output(ty, &od(1)));
    }
    if state {
        outs.push(b.output(ty, &[2, 2]));
        outs.push(b.output(ty, &[2, 1]));
    }
    let ins = [
        x, fw, fr, fbias, fh, bw, br, bbias, bh_, ai, faw, baw, act, tm, mg,
    ];
    b.op(O::BidirectionalSequenceRnn, &ins, &outs);
    b.g
}

fn bi_run(g: Graph, ty: T, inputs: &[&[f32]]) -> Vec<(Vec<f32>, Vec<u32>)> {
    let ins: Vec<Vec<u8>> = inputs.iter().map(|v| float_bytes(ty, v)).collect();
    run_outputs(g, &ins)
        .unwrap()
        .into_iter()
        .map(|(b, d)| (float_vals(ty, &b), d))
        .collect()
}

#[test]
fn bidirectional_separate_outputs_time_major() {
    let g = bi_graph(T::TensorFloat32, true, false, false, Aux::None);
    let r = bi_run(g, T::TensorFloat32, &[&QX]);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].1, vec![3, 2, 2]);
    close(&r[0].0, &UNI_OUT);
    assert_eq!(r[1].1, vec![3, 2, 1]);
    close(&r[1].0, &BW_OUT);
}

#[test]
fn bidirectional_merged_outputs_concatenate_forward_then_backward() {
    let g = bi_graph(T::TensorFloat32, true, true, false, Aux::None);
    let r = bi_run(g, T::TensorFloat32, &[&QX]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, vec![3, 2, 3]);
    close(
        &r[0].0,
        &[
            0.55, 0.6, 0.5875, 0.61, -0.055, -0.975, -0.525, 0.65, 1.975, 0.35, 0.995, 0.35,
            0.3775, -0.1325, -0.75, 1.159, 1.993, -0.5,
        ],
    );
}

#[test]
fn bidirectional_state_outputs_give_final_forward_and_backward_states() {
    let g = bi_graph(T::TensorFloat32, true, false, true, Aux::None);
    let r = bi_run(g, T::TensorFloat32, &[&QX]);
    assert_eq!(r.len(), 4);
    close(&r[2].0, &UNI_STATE);
    // The backward pass ends at time 0.
    close(&r[3].0, &[0.5875, -0.975]);
}

#[test]
fn bidirectional_merged_with_state_has_three_outputs() {
    let g = bi_graph(T::TensorFloat32, true, true, true, Aux::None);
    let r = bi_run(g, T::TensorFloat32, &[&QX]);
    assert_eq!(r.len(), 3);
    close(&r[1].0, &UNI_STATE);
    close(&r[2].0, &[0.5875, -0.975]);
}

#[test]
fn bidirectional_batch_major() {
    let g = bi_graph(T::TensorFloat32, false, false, false, Aux::None);
    let r = bi_run(g, T::TensorFloat32, &[&to_batch_major(&QX, 3, 2, 2)]);
    assert_eq!(r[0].1, vec![2, 3, 2]);
    close(&r[0].0, &to_batch_major(&UNI_OUT, 3, 2, 2));
    close(&r[1].0, &[0.5875, 1.975, -0.75, -0.975, 0.35, -0.5]);
}

#[test]
fn bidirectional_parallel_linking_feeds_aux_input_to_backward_cell() {
    let g = bi_graph(T::TensorFloat32, true, false, false, Aux::Parallel);
    let r = bi_run(g, T::TensorFloat32, &[&QX, &AX]);
    close(&r[0].0, &UNI_OUT);
    close(&r[1].0, &[0.8125, 0.2, -0.175, 1.8, -1.35, 0.2]);
}

#[test]
fn bidirectional_cross_linking_adds_aux_weights_to_both_cells() {
    let g = bi_graph(T::TensorFloat32, true, false, false, Aux::Cross);
    let r = bi_run(g, T::TensorFloat32, &[&QX, &AX]);
    close(
        &r[0].0,
        &[
            1.05, -0.4, 0.11, 0.945, -0.425, -0.4, 1.5, -0.455, -0.8225, 1.4175, 1.109, 0.818,
        ],
    );
    close(&r[1].0, &[2.0875, -0.85, 0.975, 4.6, -4.75, 0.0]);
}

#[test]
fn bidirectional_float16_batch_major_cross_linking() {
    let g = bi_graph(T::TensorFloat16, false, false, false, Aux::Cross);
    let x = to_batch_major(&QX, 3, 2, 2);
    let a = to_batch_major(&AX, 3, 2, 1);
    let r = bi_run(g, T::TensorFloat16, &[&x, &a]);
    close16(
        &r[1].0,
        &to_batch_major(&[2.0875, -0.85, 0.975, 4.6, -4.75, 0.0], 3, 2, 1),
    );
}

#[test]
fn bidirectional_aux_weights_without_aux_input_are_refused() {
    let mut g = bi_graph(T::TensorFloat32, true, false, false, Aux::Cross);
    let ai = g.operations[0].inputs[9] as usize;
    g.input_indexes.retain(|&i| i as usize != ai);
    g.operands[ai].lifetime = Lifetime::NoValue;
    assert!(refused(g).contains("auxiliary input and weights"));
}

#[test]
fn bidirectional_merge_with_two_outputs_is_refused() {
    let mut g = bi_graph(T::TensorFloat32, true, false, false, Aux::None);
    let mg = g.operations[0].inputs[14] as usize;
    if let Lifetime::ConstantCopy { offset, .. } = g.operands[mg].lifetime {
        g.operand_values[offset] = 1;
    }
    assert!(refused(g).contains("merge_outputs true"));
}

#[test]
fn bidirectional_sixteen_inputs_are_refused() {
    let mut g = bi_graph(T::TensorFloat32, true, false, false, Aux::None);
    let extra = g.operations[0].inputs[12];
    g.operations[0].inputs.push(extra);
    assert!(refused(g).contains("16 inputs given"));
}

#[test]
fn bidirectional_int32_time_major_is_refused() {
    let mut g = bi_graph(T::TensorFloat32, true, false, false, Aux::None);
    let act = g.operations[0].inputs[12];
    g.operations[0].inputs[13] = act;
    assert!(refused(g).contains("time_major"));
}

#[test]
fn bidirectional_aux_input_with_other_time_steps_fails_at_execution() {
    let mut g = bi_graph(T::TensorFloat32, true, false, false, Aux::Parallel);
    let ai = g.operations[0].inputs[9] as usize;
    g.operands[ai].dimensions = vec![2, 2, 1];
    let m = exec_message(run_outputs(g, &[fb(&QX), fb(&[0.0; 4])]));
    assert!(m.contains("auxiliary input has 2 steps"), "{m}");
}

#[test]
fn bidirectional_float16_merged_outputs() {
    let g = bi_graph(T::TensorFloat16, true, true, false, Aux::None);
    let r = bi_run(g, T::TensorFloat16, &[&QX]);
    close16(
        &r[0].0,
        &[
            0.55, 0.6, 0.5875, 0.61, -0.055, -0.975, -0.525, 0.65, 1.975, 0.35, 0.995, 0.35,
            0.3775, -0.1325, -0.75, 1.159, 1.993, -0.5,
        ],
    );
}

#[test]
fn bidirectional_backward_hidden_state_batch_must_match_forward() {
    let mut b = B::new();
    b.g = bi_graph(T::TensorFloat32, true, false, false, Aux::None);
    let bh3 = b.f32c(&[3, 1], &[0.0; 3]);
    b.g.operations[0].inputs[8] = bh3;
    assert!(refused(b.g).contains("same batch"));
}
