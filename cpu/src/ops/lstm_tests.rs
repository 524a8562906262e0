//! Tests of the float LSTM family. The expected values come from the independent numpy model
//! in `cpu/testdata/lstm_gen.py`, whose printed cases are embedded at the end of this file.

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// One generated case: the operation's tensor inputs by position (the others are omitted,
/// except the activation, the clips and the BOOL flags), and the expected outputs (shape only
/// when the data is empty).
pub(super) struct Case {
    n_inputs: usize,
    tensors: &'static [(usize, &'static [u32], &'static [f32])],
    act: i32,
    cell_clip: f32,
    proj_clip: f32,
    flags: &'static [(usize, bool)],
    outputs: &'static [(&'static [u32], &'static [f32])],
}

/// Every output as f32 with its shape, or the execution error.
type Outs = Result<Vec<(Vec<f32>, Vec<u32>)>, ExecError>;

fn act_index(op: OperationType) -> usize {
    if op == O::BidirectionalSequenceLstm {
        48
    } else {
        20
    }
}

/// A case's operation under construction: the builder, the input and output operand lists and
/// the bytes of input 0 (the only graph input).
struct Parts {
    b: B,
    ins: Vec<u32>,
    outs: Vec<u32>,
    x: Vec<u8>,
    op: OperationType,
    ty: OperandType,
}

impl Parts {
    fn new(case: &Case, op: OperationType, ty: OperandType) -> Self {
        let mut b = B::new();
        let a = act_index(op);
        let st = crate::check::float_scalar(ty);
        let mut ins = Vec::new();
        let mut x = Vec::new();
        for i in 0..case.n_inputs {
            let id = if let Some(&(_, d, v)) = case.tensors.iter().find(|t| t.0 == i) {
                if i == 0 {
                    x = float_bytes(ty, v);
                    b.input(ty, d)
                } else {
                    b.konst(ty, d, float_bytes(ty, v))
                }
            } else if i == a {
                b.int(case.act)
            } else if i == a + 1 || i == a + 2 {
                let v = if i == a + 1 {
                    case.cell_clip
                } else {
                    case.proj_clip
                };
                b.konst(st, &[], float_bytes(st, &[v]))
            } else if let Some(&(_, f)) = case.flags.iter().find(|f| f.0 == i) {
                b.boolean(f)
            } else {
                b.add(ty, &[], Lifetime::NoValue)
            };
            ins.push(id);
        }
        let outs = case.outputs.iter().map(|(d, _)| b.output(ty, d)).collect();
        Parts {
            b,
            ins,
            outs,
            x,
            op,
            ty,
        }
    }

    /// Replaces input `i` by an omitted operand.
    fn omit(&mut self, i: usize) {
        self.ins[i] = self.b.add(self.ty, &[], Lifetime::NoValue);
    }

    /// Replaces input `i` by a constant tensor.
    fn set(&mut self, i: usize, ty: OperandType, dims: &[u32], v: &[f32]) {
        self.ins[i] = self.b.konst(ty, dims, float_bytes(ty, v));
    }

    fn graph(mut self) -> (Graph, Vec<u8>) {
        self.b.op(self.op, &self.ins, &self.outs);
        (self.b.g, self.x)
    }
}

/// Runs a graph whose only input is input 0; returns every output as f32 with its shape.
fn run_all(g: Graph, x: &[u8]) -> Outs {
    run_inputs(g, &[x])
}

/// Runs a graph with these graph inputs (model dimensions).
fn run_inputs(g: Graph, xs: &[&[u8]]) -> Outs {
    let tys: Vec<OperandType> = g
        .output_indexes
        .iter()
        .map(|&i| g.operands[i as usize].ty)
        .collect();
    let inputs: Vec<Vec<u8>> = xs.iter().map(|x| x.to_vec()).collect();
    Ok(run_outputs(g, &inputs)?
        .into_iter()
        .zip(tys)
        .map(|((b, dims), ty)| (float_vals(ty, &b), dims))
        .collect())
}

fn assert_near(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{k}]: got {g}, want {w}\n{got:?}\n{want:?}"
        );
    }
}

/// Runs `case` as `op` on `ty` tensors and compares every output.
fn check(case: &Case, op: OperationType, ty: OperandType) {
    let tol = if ty == T::TensorFloat16 { 2e-2 } else { 2e-6 };
    let (g, x) = Parts::new(case, op, ty).graph();
    let got = run_all(g, &x).expect("executes");
    assert_eq!(got.len(), case.outputs.len());
    for (k, ((v, d), (wd, wv))) in got.iter().zip(case.outputs).enumerate() {
        assert_eq!(&d[..], *wd, "output {k} shape");
        if !wv.is_empty() {
            assert_near(v, wv, tol, &format!("output {k}"));
        }
    }
}

fn invalid(p: Parts, needle: &str) {
    let (g, _) = p.graph();
    let reason = refused(g);
    assert!(
        reason.contains(needle),
        "reason {reason:?} lacks {needle:?}"
    );
}

fn exec_fails(p: Parts, needle: &str) {
    let (g, x) = p.graph();
    exec_result_fails(run_all(g, &x), needle);
}

fn exec_result_fails(r: Outs, needle: &str) {
    match r {
        Err(ExecError::InvalidArgument(m)) => {
            assert!(m.contains(needle), "message {m:?} lacks {needle:?}")
        }
        other => panic!("expected an InvalidArgument containing {needle:?}, got {other:?}"),
    }
}

use cases::*;

// ---- LSTM: results ----

#[test]
fn lstm_plain_float32_matches_reference() {
    check(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
}

#[test]
fn lstm_plain_float16_matches_reference() {
    check(&LSTM_PLAIN, O::Lstm, T::TensorFloat16);
}

#[test]
fn lstm_cifg_peephole_projection_with_bias() {
    check(&LSTM_CIFG_PEEPHOLE_PROJECTION, O::Lstm, T::TensorFloat32);
}

#[test]
fn lstm_cifg_peephole_projection_float16() {
    check(&LSTM_CIFG_PEEPHOLE_PROJECTION, O::Lstm, T::TensorFloat16);
}

#[test]
fn lstm_cell_and_projection_clipping() {
    check(&LSTM_CLIPPED, O::Lstm, T::TensorFloat32);
    // The clips bind: the cell state stays within 0.3 and the output within 0.1.
    assert!(LSTM_CLIPPED.outputs[2].1.iter().any(|v| v.abs() == 0.3));
    assert!(LSTM_CLIPPED.outputs[3].1.iter().any(|v| v.abs() == 0.1));
}

#[test]
fn lstm_relu6_activation_and_projection_without_bias() {
    check(&LSTM_RELU6_PROJECTION_NO_BIAS, O::Lstm, T::TensorFloat32);
}

#[test]
fn lstm_sigmoid_activation() {
    check(&LSTM_SIGMOID, O::Lstm, T::TensorFloat32);
}

#[test]
fn lstm_layer_norm_with_peephole_and_projection() {
    check(&LSTM_LAYER_NORM, O::Lstm, T::TensorFloat32);
}

#[test]
fn lstm_layer_norm_float16() {
    check(&LSTM_LAYER_NORM, O::Lstm, T::TensorFloat16);
}

#[test]
fn lstm_layer_norm_cifg_without_input_layer_norm_weights() {
    check(&LSTM_LAYER_NORM_CIFG, O::Lstm, T::TensorFloat32);
}

#[test]
fn lstm_27_inputs_with_layer_norm_omitted_equals_23_input_form() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    for _ in 23..27 {
        let id = c.b.add(T::TensorFloat32, &[], Lifetime::NoValue);
        c.ins.push(id);
    }
    let (g, x) = c.graph();
    let got = run_all(g, &x).unwrap();
    assert_near(&got[3].0, LSTM_PLAIN.outputs[3].1, 2e-6, "output");
}

#[test]
fn lstm_scratch_buffer_has_three_gates_with_cifg() {
    let (g, x) = Parts::new(&LSTM_CIFG_PEEPHOLE_PROJECTION, O::Lstm, T::TensorFloat32).graph();
    let got = run_all(g, &x).unwrap();
    assert_eq!(got[0].1, vec![2, 12]);
    let (g, x) = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32).graph();
    assert_eq!(run_all(g, &x).unwrap()[0].1, vec![2, 16]);
}

#[test]
fn lstm_outputs_with_unknown_declared_shapes_get_their_shapes() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    for &o in &c.outs {
        c.b.g.operands[o as usize].dimensions = vec![0, 0];
    }
    let (g, x) = c.graph();
    let got = run_all(g, &x).unwrap();
    assert_eq!(got[1].1, vec![2, 4]);
    assert_near(&got[2].0, LSTM_PLAIN.outputs[2].1, 2e-6, "cell state");
}

// ---- LSTM: static errors ----

#[test]
fn lstm_rejects_24_inputs() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    let id = c.b.add(T::TensorFloat32, &[], Lifetime::NoValue);
    c.ins.push(id);
    invalid(c, "24 inputs given");
}

#[test]
fn lstm_rejects_three_outputs() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.outs.pop();
    let last = *c.b.g.output_indexes.last().unwrap();
    c.b.g.output_indexes.pop();
    c.b.g.operands[last as usize].lifetime = Lifetime::TemporaryVariable;
    // The dropped output operand (the last one) is removed from the graph altogether.
    let (mut g, _) = c.graph();
    g.operands.remove(last as usize);
    match PreparedGraph::new(g) {
        Err(GraphError::InvalidOperation { reason, .. }) => {
            assert!(reason.contains("3 outputs given"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lstm_rejects_quantized_input() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    let id = c.b.input(T::TensorQuant8Asymm, &[2, 3]);
    c.b.q(id, 0.5, 0);
    c.ins[0] = id;
    invalid(c, "input 0 must be TENSOR_FLOAT32 or TENSOR_FLOAT16");
}

#[test]
fn lstm_rejects_weight_of_other_float_type() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.set(3, T::TensorFloat16, &[4, 3], &[0.0; 12]);
    invalid(c, "input 3");
}

#[test]
fn lstm_rejects_omitted_input_to_forget_weights() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.omit(2);
    invalid(c, "input 2 (input-to-forget weights) is required");
}

#[test]
fn lstm_rejects_omitted_cell_state() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.omit(19);
    invalid(c, "cell state in");
}

#[test]
fn lstm_rejects_input_weights_without_recurrent_input_weights() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.omit(5);
    invalid(c, "both be given or both omitted");
}

#[test]
fn lstm_rejects_input_gate_bias_with_cifg() {
    let mut c = Parts::new(&LSTM_CIFG_PEEPHOLE_PROJECTION, O::Lstm, T::TensorFloat32);
    c.set(12, T::TensorFloat32, &[4], &[0.0; 4]);
    invalid(c, "input gate bias must be omitted with CIFG");
}

#[test]
fn lstm_rejects_missing_input_gate_bias_without_cifg() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.omit(12);
    invalid(c, "input gate bias is required without CIFG");
}

#[test]
fn lstm_rejects_partial_peephole_weights() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.set(10, T::TensorFloat32, &[4], &[0.0; 4]);
    invalid(c, "peephole weights");
}

#[test]
fn lstm_rejects_projection_bias_without_weights() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.set(17, T::TensorFloat32, &[4], &[0.0; 4]);
    invalid(c, "projection bias needs projection weights");
}

#[test]
fn lstm_rejects_partial_layer_norm_weights() {
    let mut c = Parts::new(&LSTM_LAYER_NORM, O::Lstm, T::TensorFloat32);
    c.omit(25);
    invalid(c, "layer-norm weights must all be given or all omitted");
}

#[test]
fn lstm_rejects_layer_norm_without_input_weights_when_not_cifg() {
    let mut c = Parts::new(&LSTM_LAYER_NORM, O::Lstm, T::TensorFloat32);
    c.omit(23);
    invalid(c, "needs input layer-norm weights");
}

#[test]
fn lstm_rejects_constant_activation_sign_bit() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.ins[20] = c.b.int(5);
    invalid(c, "fused activation 5");
}

#[test]
fn lstm_rejects_negative_constant_cell_clip() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.ins[21] = c.b.float(-1.0);
    invalid(c, "cell clip must be >= 0");
}

#[test]
fn lstm_rejects_negative_constant_projection_clip() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.ins[22] = c.b.float(-0.5);
    invalid(c, "projection clip must be >= 0");
}

#[test]
fn lstm_float16_rejects_float32_clip() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat16);
    c.ins[21] = c.b.float(0.0);
    invalid(c, "input 21 (cell clip) must be FLOAT16");
}

#[test]
fn lstm_rejects_output_of_other_type() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    let o = c.outs[2];
    c.b.g.operands[o as usize].ty = T::TensorFloat16;
    invalid(c, "output 2 type TENSOR_FLOAT16");
}

// ---- LSTM: execution errors ----

#[test]
fn lstm_fails_on_weights_not_matching_input_size() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.set(2, T::TensorFloat32, &[4, 2], &[0.0; 8]);
    exec_fails(
        c,
        "input 2 (input-to-forget weights) must have shape [4, 3]",
    );
}

#[test]
fn lstm_fails_on_output_size_differing_from_units_without_projection() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    for i in 5..=8 {
        c.set(i, T::TensorFloat32, &[4, 2], &[0.0; 8]);
    }
    c.set(18, T::TensorFloat32, &[2, 2], &[0.0; 4]);
    exec_fails(
        c,
        "without projection the output size (2) must equal num_units (4)",
    );
}

#[test]
fn lstm_fails_on_cell_state_of_wrong_shape() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.set(19, T::TensorFloat32, &[2, 3], &[0.0; 6]);
    exec_fails(c, "input 19 (cell state in) must have shape [2, 4]");
}

#[test]
fn lstm_fails_on_invalid_activation_given_at_execution() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.ins[20] = c.b.input(T::Int32, &[]);
    let (g, x) = c.graph();
    match run_inputs(g, &[&x, &5i32.to_le_bytes()]) {
        Err(ExecError::InvalidArgument(m)) => assert!(m.contains("fused activation 5"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn lstm_fails_on_negative_cell_clip_given_at_execution() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.ins[21] = c.b.input(T::Float32, &[]);
    let (g, x) = c.graph();
    match run_inputs(g, &[&x, &(-1f32).to_le_bytes()]) {
        Err(ExecError::InvalidArgument(m)) => assert!(m.contains("cell clip must be >= 0"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn lstm_fails_on_three_dimensional_input() {
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    let old = c.ins[0];
    c.ins[0] = c.b.input(T::TensorFloat32, &[1, 2, 3]);
    let (mut g, x) = c.graph();
    g.input_indexes.retain(|&i| i != old);
    g.operands[old as usize].lifetime = Lifetime::NoValue;
    exec_result_fails(run_all(g, &x), "input 0 (input) must be 2-D");
}

#[test]
fn lstm_fails_on_required_weights_omitted_at_execution() {
    // A model input may be given no value at execution: the presence rules are checked again.
    let mut c = Parts::new(&LSTM_PLAIN, O::Lstm, T::TensorFloat32);
    c.ins[3] = c.b.input(T::TensorFloat32, &[4, 3]);
    let (g, x) = c.graph();
    let p = PreparedGraph::new(g).unwrap();
    let mut bufs = vec![vec![0u8; 4096]; 4];
    let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let args = [
        InputArg::Value {
            data: &x,
            dimensions: vec![],
        },
        InputArg::NoValue,
    ];
    match p.execute(&[], &args, &mut outs) {
        Err(ExecError::InvalidArgument(m)) => {
            assert!(
                m.contains("input 3 (input-to-cell weights) is required"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

// ---- UNIDIRECTIONAL_SEQUENCE_LSTM ----

#[test]
fn unidirectional_time_major_with_state_outputs() {
    check(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn unidirectional_time_major_float16() {
    check(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat16,
    );
}

#[test]
fn unidirectional_batch_major_peephole_projection() {
    check(
        &UNI_BATCH_MAJOR_PROJECTION,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn unidirectional_layer_norm_cifg_cell_clip_single_output() {
    check(
        &UNI_LAYER_NORM_CIFG,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn unidirectional_last_step_equals_state_output() {
    let c = &UNI_TIME_MAJOR;
    let out = c.outputs[0].1;
    let h = c.outputs[1].1;
    // time-major [3, 2, 4]: the last step's [2, 4] block is the final output state.
    assert_eq!(&out[16..24], h);
}

#[test]
fn unidirectional_rejects_27_inputs() {
    let mut c = Parts::new(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.ins.pop();
    invalid(c, "27 inputs given, expected 28");
}

#[test]
fn unidirectional_rejects_two_outputs() {
    let mut c = Parts::new(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.outs.pop();
    let (mut g, _) = c.graph();
    let last = g.output_indexes.pop().unwrap();
    g.operands[last as usize].lifetime = Lifetime::TemporaryVariable;
    match PreparedGraph::new(g) {
        Err(GraphError::InvalidOperation { reason, .. }) => {
            assert!(reason.contains("2 outputs given"), "{reason}")
        }
        Err(GraphError::InvalidGraph(_)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn unidirectional_rejects_int32_time_major() {
    let mut c = Parts::new(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.ins[23] = c.b.int(1);
    invalid(c, "input 23 (time_major) must be BOOL");
}

#[test]
fn unidirectional_rejects_partial_peephole() {
    let mut c = Parts::new(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.set(9, T::TensorFloat32, &[4], &[0.0; 4]);
    invalid(c, "peephole weights");
}

#[test]
fn unidirectional_fails_on_two_dimensional_input() {
    let mut c = Parts::new(
        &UNI_TIME_MAJOR,
        O::UnidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    let id = c.b.input(T::TensorFloat32, &[6, 3]);
    let old = c.ins[0];
    c.ins[0] = id;
    let (mut g, x) = c.graph();
    g.input_indexes.retain(|&i| i != old);
    g.operands[old as usize].lifetime = Lifetime::NoValue;
    exec_result_fails(run_all(g, &x), "input 0 (input) must be 3-D");
}

// ---- BIDIRECTIONAL_SEQUENCE_LSTM ----

#[test]
fn bidirectional_separate_outputs_with_states() {
    check(&BI_SEPARATE, O::BidirectionalSequenceLstm, T::TensorFloat32);
}

#[test]
fn bidirectional_separate_outputs_float16() {
    check(&BI_SEPARATE, O::BidirectionalSequenceLstm, T::TensorFloat16);
}

#[test]
fn bidirectional_merged_batch_major_with_projection() {
    check(
        &BI_MERGED_BATCH_MAJOR,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn bidirectional_cross_linked_auxiliary_input() {
    check(
        &BI_CROSS_LINKED_AUX,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn bidirectional_parallel_linked_auxiliary_input_feeds_backward_cell() {
    check(
        &BI_PARALLEL_LINKED_AUX,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn bidirectional_layer_norm_peephole_cell_clip_batch_major() {
    check(
        &BI_LAYER_NORM_PEEPHOLE_CLIPPED,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
}

#[test]
fn bidirectional_rejects_partial_backward_layer_norm() {
    let mut c = Parts::new(
        &BI_LAYER_NORM_PEEPHOLE_CLIPPED,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.omit(60);
    invalid(c, "layer-norm weights must all be given or all omitted");
}

#[test]
fn bidirectional_backward_state_is_output_at_first_step() {
    // The backward cell runs from the last step to the first: its final output state is its
    // output at time 0 (time-major [3, 2, 3], separate outputs).
    let bw_out = BI_SEPARATE.outputs[1].1;
    let bw_h = BI_SEPARATE.outputs[4].1;
    assert_eq!(&bw_out[0..6], bw_h);
}

#[test]
fn bidirectional_rejects_merged_with_two_outputs() {
    let mut c = Parts::new(&BI_SEPARATE, O::BidirectionalSequenceLstm, T::TensorFloat32);
    c.ins[51] = c.b.boolean(true);
    invalid(c, "outputs given with merge_outputs true");
}

#[test]
fn bidirectional_rejects_60_inputs() {
    let mut c = Parts::new(&BI_SEPARATE, O::BidirectionalSequenceLstm, T::TensorFloat32);
    c.ins.pop();
    invalid(c, "60 inputs given, expected 61");
}

#[test]
fn bidirectional_rejects_aux_weights_without_aux_input() {
    let mut c = Parts::new(
        &BI_CROSS_LINKED_AUX,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.omit(39);
    invalid(c, "auxiliary weights are given without an auxiliary input");
}

#[test]
fn bidirectional_rejects_aux_weights_in_one_direction_only() {
    let mut c = Parts::new(
        &BI_CROSS_LINKED_AUX,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    for i in 44..48 {
        c.omit(i);
    }
    invalid(c, "both directions or neither");
}

#[test]
fn bidirectional_rejects_partial_forward_aux_weights() {
    let mut c = Parts::new(
        &BI_CROSS_LINKED_AUX,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.omit(42);
    invalid(
        c,
        "forward auxiliary weights must be all given or all omitted",
    );
}

#[test]
fn bidirectional_rejects_backward_cifg_mismatch_in_bias() {
    let mut c = Parts::new(&BI_SEPARATE, O::BidirectionalSequenceLstm, T::TensorFloat32);
    c.omit(29);
    invalid(c, "input gate bias is required without CIFG");
}

#[test]
fn bidirectional_fails_on_aux_input_with_other_step_count() {
    let mut c = Parts::new(
        &BI_CROSS_LINKED_AUX,
        O::BidirectionalSequenceLstm,
        T::TensorFloat32,
    );
    c.set(39, T::TensorFloat32, &[3, 1, 2], &[0.0; 6]);
    exec_fails(
        c,
        "the auxiliary input has 3 steps of batch 1, the input 2 of batch 1",
    );
}

#[test]
fn bidirectional_fails_on_backward_weights_of_wrong_shape() {
    let mut c = Parts::new(&BI_SEPARATE, O::BidirectionalSequenceLstm, T::TensorFloat32);
    c.set(19, T::TensorFloat32, &[3, 3], &[0.0; 9]);
    exec_fails(
        c,
        "input 19 (input-to-forget weights) must have shape [3, 2]",
    );
}

// ---- QUANTIZED_16BIT_LSTM ----

// The NNAPI conformance example for QUANTIZED_16BIT_LSTM (2 batches, 2 inputs, 4 cells), given
// there as one weight matrix [16, 6] (gate rows input, cell, forget, output; columns input then
// previous output) and one bias [16]; split here into the operation's 15 inputs.
const Q16_INPUT: [u8; 4] = [166, 179, 50, 150];
const Q16_PREV_OUTPUT: [u8; 8] = [136, 150, 140, 115, 135, 152, 138, 112];
#[rustfmt::skip]
const Q16_WEIGHTS: [u8; 96] = [
    254, 206, 77, 168, 146, 250, 71, 20, 215, 6, 235, 171, 223, 7, 118, 225, 10, 218,
    59, 130, 174, 26, 171, 108, 172, 60, 205, 65, 133, 34, 14, 0, 140, 168, 29, 49,
    240, 223, 133, 56, 206, 109, 142, 64, 246, 216, 54, 183, 137, 240, 103, 52, 24, 50,
    68, 51, 237, 112, 132, 179, 0, 220, 89, 23, 158, 110, 69, 4, 207, 253, 3, 169,
    106, 214, 67, 23, 195, 187, 59, 158, 45, 3, 11, 99, 119, 132, 49, 205, 109, 10,
    129, 218, 11, 98, 218, 48,
];
#[rustfmt::skip]
const Q16_BIAS: [i32; 16] = [
    -7876, 13488, -726, 32839, 39481, 48624, 48976, -21419, 9206, -46884, -11693, -38724,
    -58999, -17050, -41852, -40538,
];
const Q16_PREV_CELL: [i16; 8] = [876, 1034, 955, -909, 761, 1029, 796, -1036];
const Q16_CELL_OUT: [i16; 8] = [1485, 1177, 1373, -1023, 1019, 1355, 1097, -1235];
const Q16_OUTPUT: [u8; 8] = [140, 151, 146, 112, 136, 156, 142, 112];
const Q16_W_SCALE: f32 = 0.004_080_21;

/// The 15-input QUANTIZED_16BIT_LSTM graph of the conformance example; input 0 is the graph
/// input.
struct Q16 {
    b: B,
    ins: Vec<u32>,
    outs: Vec<u32>,
}

impl Q16 {
    fn new() -> Self {
        let mut b = B::new();
        let x = b.input(T::TensorQuant8Asymm, &[2, 2]);
        b.q(x, 1.0 / 128.0, 128);
        let mut ins = vec![x];
        // Gate blocks in the example's rows: input 0, cell 1, forget 2, output 3; NNAPI's
        // operand order is input, forget, cell, output.
        let block = [0usize, 2, 1, 3];
        for (cols, n) in [(0..2, 2u32), (2..6, 4)] {
            for &blk in &block {
                let mut v = Vec::new();
                for r in blk * 4..blk * 4 + 4 {
                    v.extend_from_slice(&Q16_WEIGHTS[r * 6 + cols.start..r * 6 + cols.end]);
                }
                let w = b.konst(T::TensorQuant8Asymm, &[4, n], v);
                b.q(w, Q16_W_SCALE, 100);
                ins.push(w);
            }
        }
        for &blk in &block {
            let v: Vec<u8> = Q16_BIAS[blk * 4..blk * 4 + 4]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let bi = b.konst(T::TensorInt32, &[4], v);
            b.q(bi, Q16_W_SCALE / 128.0, 0);
            ins.push(bi);
        }
        let cs = b.konst(
            T::TensorQuant16Symm,
            &[2, 4],
            Q16_PREV_CELL.iter().flat_map(|x| x.to_le_bytes()).collect(),
        );
        b.q(cs, 1.0 / 2048.0, 0);
        ins.push(cs);
        let po = b.konst(T::TensorQuant8Asymm, &[2, 4], Q16_PREV_OUTPUT.to_vec());
        b.q(po, 1.0 / 128.0, 128);
        ins.push(po);
        let c_out = b.output(T::TensorQuant16Symm, &[2, 4]);
        b.q(c_out, 1.0 / 2048.0, 0);
        let out = b.output(T::TensorQuant8Asymm, &[2, 4]);
        b.q(out, 1.0 / 128.0, 128);
        Q16 {
            b,
            ins,
            outs: vec![c_out, out],
        }
    }

    fn graph(mut self) -> Graph {
        self.b.op(O::Quantized16bitLstm, &self.ins, &self.outs);
        self.b.g
    }

    /// Runs with the example's input; returns (cell state out, output) raw.
    fn run(self) -> Result<(Vec<i16>, Vec<u8>), ExecError> {
        let outs = run_outputs(self.graph(), &[Q16_INPUT.to_vec()])?;
        let c = outs[0]
            .0
            .chunks_exact(2)
            .map(|x| i16::from_le_bytes([x[0], x[1]]))
            .collect();
        Ok((c, outs[1].0.clone()))
    }

    fn invalid(self, needle: &str) {
        let reason = refused(self.graph());
        assert!(reason.contains(needle), "{reason:?} lacks {needle:?}")
    }
}

#[test]
fn quantized_16bit_lstm_matches_conformance_example() {
    let (c, o) = Q16::new().run().unwrap();
    assert_eq!(c, Q16_CELL_OUT);
    assert_eq!(o, Q16_OUTPUT);
}

#[test]
fn quantized_16bit_fixed_point_logistic_and_tanh_track_float() {
    // Q3.12 inputs; results Q0.15. The 16-bit fixed-point forms stay within 16 units (2^-11) of
    // the float values over the whole range (their exp chain loses a few bits).
    for raw in (-32768i32..=32767).step_by(97) {
        let x = raw as f64 / 4096.0;
        let l = super::q16::logistic_q3(raw as i16) as f64;
        let t = super::q16::tanh_q3(raw as i16) as f64;
        let lf = (1.0 / (1.0 + (-x).exp())) * 32768.0;
        let tf = x.tanh() * 32768.0;
        assert!((l - lf).abs() <= 16.0, "logistic({x}) = {l}, float {lf}");
        assert!((t - tf).abs() <= 16.0, "tanh({x}) = {t}, float {tf}");
    }
    assert_eq!(super::q16::logistic_q3(0), 16384);
    assert_eq!(super::q16::tanh_q3(0), 0);
    // Saturated ends.
    assert!(super::q16::logistic_q3(i16::MAX) >= 32740);
    assert!(super::q16::tanh_q3(i16::MIN) <= -32760);
}

#[test]
fn quantized_16bit_lstm_rejects_14_inputs() {
    let mut q = Q16::new();
    q.ins.pop();
    q.invalid("14 inputs given");
}

#[test]
fn quantized_16bit_lstm_rejects_input_not_scaled_1_over_128() {
    let mut q = Q16::new();
    q.b.g.operands[q.ins[0] as usize].scale = 0.01;
    q.invalid("input 0 (input) must have scale 1/128 and zero point 128");
}

#[test]
fn quantized_16bit_lstm_rejects_weights_with_other_zero_point() {
    let mut q = Q16::new();
    q.b.g.operands[q.ins[6] as usize].zero_point = 99;
    q.invalid("input 6 (weights) must have the scale and zero point of input 1");
}

#[test]
fn quantized_16bit_lstm_rejects_bias_of_wrong_scale() {
    let mut q = Q16::new();
    q.b.g.operands[q.ins[10] as usize].scale = 0.5;
    q.invalid("input 10 (gate bias) must have scale weights scale / 128");
}

#[test]
fn quantized_16bit_lstm_rejects_cell_state_of_wrong_scale() {
    let mut q = Q16::new();
    q.b.g.operands[q.ins[13] as usize].scale = 1.0 / 1024.0;
    q.invalid("input 13 (previous cell state) must have scale 2^-11");
}

#[test]
fn quantized_16bit_lstm_rejects_float_weights() {
    let mut q = Q16::new();
    q.ins[3] = q.b.f32c(&[4, 2], &[0.0; 8]);
    q.invalid("input 3 (weights) must be TENSOR_QUANT8_ASYMM");
}

#[test]
fn quantized_16bit_lstm_rejects_output_of_other_quantization() {
    let q = Q16::new();
    let mut q = q;
    let o = q.outs[1];
    q.b.g.operands[o as usize].zero_point = 0;
    q.invalid("output 1 (output) must be TENSOR_QUANT8_ASYMM with scale 1/128");
}

#[test]
fn quantized_16bit_lstm_fails_on_weights_of_wrong_shape() {
    let mut q = Q16::new();
    let w = q.b.konst(T::TensorQuant8Asymm, &[4, 3], vec![100; 12]);
    q.b.q(w, Q16_W_SCALE, 100);
    q.ins[2] = w;
    match q.run() {
        Err(ExecError::InvalidArgument(m)) => {
            assert!(
                m.contains("input 2 (input-to-forget weights) must have shape [4, 2]"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn quantized_16bit_lstm_fails_on_previous_output_of_other_batch() {
    let mut q = Q16::new();
    let po = q.b.konst(T::TensorQuant8Asymm, &[1, 4], vec![128; 4]);
    q.b.q(po, 1.0 / 128.0, 128);
    q.ins[14] = po;
    match q.run() {
        Err(ExecError::InvalidArgument(m)) => {
            assert!(m.contains("input 14 (previous output)"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

// ---- QUANTIZED_LSTM ----

/// Output state out, cell state out and output of a QUANTIZED_LSTM run.
type Q8Outs = (Vec<i8>, Vec<i16>, Vec<i8>);

/// NNAPI's conformance example for QUANTIZED_LSTM without projection ("CIFG, Layer Norm"):
/// 2 batches, 5 inputs, 4 units, zero initial states.
struct Q8 {
    b: B,
    ins: Vec<u32>,
    outs: Vec<u32>,
}

#[rustfmt::skip]
const Q8_I2F: [i8; 20] = [-77, -13, 38, 25, 115, -64, -25, -51, 38, -102, -51, 38, -64, -51, -77, 38, -51, -77, -64, -64];
#[rustfmt::skip]
const Q8_I2C: [i8; 20] = [-51, -38, -25, -13, -64, 64, -25, -38, -25, -77, 77, -13, -51, -38, -89, 89, -115, -64, 102, 77];
#[rustfmt::skip]
const Q8_I2O: [i8; 20] = [-102, -51, -25, -115, -13, -89, 38, -38, -102, -25, 77, -25, 51, -89, -38, -64, 13, 64, -77, -51];
#[rustfmt::skip]
const Q8_R2F: [i8; 16] = [-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25, 25, 38, -13, 51];
#[rustfmt::skip]
const Q8_R2C: [i8; 16] = [-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25, 38, -13, 25, 64];
#[rustfmt::skip]
const Q8_R2O: [i8; 16] = [38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25, 13, 64, 25, -38];
const Q8_BF: [i32; 4] = [2147484, -6442451, -4294968, 2147484];
const Q8_BC: [i32; 4] = [-1073742, 15461883, 5368709, 1717987];
const Q8_BO: [i32; 4] = [1073742, -214748, 4294968, 2147484];
const Q8_LNF: [i16; 4] = [6553, 6553, 13107, 9830];
const Q8_LNC: [i16; 4] = [22937, 6553, 9830, 26214];
const Q8_LNO: [i16; 4] = [19660, 6553, 6553, 16384];
const Q8_INPUT: [i8; 10] = [90, 102, 13, 26, 38, 102, 13, 26, 51, 64];
const Q8_OUTPUT: [i8; 8] = [-15, 21, 14, 20, -15, 15, 5, 27];
const Q8_CELL_OUT: [i16; 8] = [-11692, 9960, 5491, 8861, -9422, 7726, 2056, 13149];

// The projection example's extra operands (output size 3, no CIFG).
#[rustfmt::skip]
const Q8_I2I: [i8; 20] = [64, 77, 89, -102, -115, 13, 25, 38, -51, 64, -102, 89, -77, 64, -51, -64, -51, -38, -25, -13];
const Q8_R2I_P: [i8; 12] = [-25, -38, 51, 13, -64, 115, -25, -38, -89, 6, -25, -77];
const Q8_BI: [i32; 4] = [644245, 3221226, 4724464, 8160438];
const Q8_LNI: [i16; 4] = [3277, 6553, 9830, 16384];
const Q8_PROJ: [i8; 12] = [-25, 51, 3, -51, 25, 127, 77, 20, 18, 51, -102, 51];

impl Q8 {
    /// The example without projection (CIFG, output size 4).
    fn new() -> Self {
        Q8::with(true, false)
    }

    /// The examples' graph: `cifg` omits the input gate, `proj` uses the projection example's
    /// output size 3 and projection weights.
    fn with(cifg: bool, proj: bool) -> Self {
        let n_out: u32 = if proj { 3 } else { 4 };
        let mut b = B::new();
        let i16b = |v: &[i16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let none = |b: &mut B| b.add(T::TensorInt32, &[], Lifetime::NoValue);
        let mut ins = Vec::new();
        let x = b.input(T::TensorQuant8AsymmSigned, &[2, 5]);
        b.q(x, 0.007_812_5, 0);
        ins.push(x);
        let ws = 0.007_843_14;
        if cifg {
            ins.push(none(&mut b));
        } else {
            let id = b.konst(T::TensorQuant8Symm, &[4, 5], i8_bytes(&Q8_I2I));
            ins.push(b.q(id, ws, 0));
        }
        for w in [&Q8_I2F[..], &Q8_I2C, &Q8_I2O] {
            let id = b.konst(T::TensorQuant8Symm, &[4, 5], i8_bytes(w));
            ins.push(b.q(id, ws, 0));
        }
        let rk = n_out as usize * 4;
        if cifg {
            ins.push(none(&mut b));
        } else {
            let id = b.konst(T::TensorQuant8Symm, &[4, n_out], i8_bytes(&Q8_R2I_P));
            ins.push(b.q(id, ws, 0));
        }
        for w in [&Q8_R2F[..], &Q8_R2C, &Q8_R2O] {
            let id = b.konst(T::TensorQuant8Symm, &[4, n_out], i8_bytes(&w[..rk]));
            ins.push(b.q(id, ws, 0));
        }
        for _ in 0..3 {
            ins.push(none(&mut b));
        }
        let bs = 4.656_61e-8;
        if cifg {
            ins.push(none(&mut b));
        } else {
            let id = b.konst(T::TensorInt32, &[4], i32_bytes(&Q8_BI));
            ins.push(b.q(id, bs, 0));
        }
        for bias in [&Q8_BF, &Q8_BC, &Q8_BO] {
            let id = b.konst(T::TensorInt32, &[4], i32_bytes(bias));
            ins.push(b.q(id, bs, 0));
        }
        if proj {
            let id = b.konst(T::TensorQuant8Symm, &[n_out, 4], i8_bytes(&Q8_PROJ));
            ins.push(b.q(id, 0.003_921_57, 0));
            ins.push(b.i32c(&[n_out], &[0; 3]));
        } else {
            ins.push(none(&mut b));
            ins.push(none(&mut b));
        }
        let h = b.konst(
            T::TensorQuant8AsymmSigned,
            &[2, n_out],
            vec![0; 2 * n_out as usize],
        );
        ins.push(b.q(h, 3.051_76e-5, 0));
        let c = b.konst(T::TensorQuant16Symm, &[2, 4], vec![0; 16]);
        ins.push(b.q(c, 3.051_76e-5, 0));
        let ls = 3.051_82e-5;
        if cifg {
            ins.push(none(&mut b));
        } else {
            let id = b.konst(T::TensorQuant16Symm, &[4], i16b(&Q8_LNI));
            ins.push(b.q(id, ls, 0));
        }
        for lw in [&Q8_LNF, &Q8_LNC, &Q8_LNO] {
            let id = b.konst(T::TensorQuant16Symm, &[4], i16b(lw));
            ins.push(b.q(id, ls, 0));
        }
        for v in [0.0, 0.0, 0.007_059, 0.007_812, 0.007_059, 0.007_812] {
            ins.push(b.float(v));
        }
        ins.push(b.int(0));
        ins.push(b.float(0.007));
        let mut outs = Vec::new();
        for (ty, d) in [
            (T::TensorQuant8AsymmSigned, n_out),
            (T::TensorQuant16Symm, 4),
            (T::TensorQuant8AsymmSigned, n_out),
        ] {
            let o = b.output(ty, &[2, d]);
            let scale = 3.051_76e-5;
            outs.push(b.q(o, scale, 0));
        }
        Q8 { b, ins, outs }
    }

    fn graph(mut self) -> Graph {
        self.b.op(O::QuantizedLstm, &self.ins, &self.outs);
        self.b.g
    }

    /// Runs with the example's input: (output state out, cell state out, output).
    fn run(self) -> Result<Q8Outs, ExecError> {
        let outs = run_outputs(self.graph(), &[i8_bytes(&Q8_INPUT)])?;
        Ok((
            i8_vals(&outs[0].0),
            outs[1]
                .0
                .chunks_exact(2)
                .map(|v| i16::from_le_bytes([v[0], v[1]]))
                .collect(),
            i8_vals(&outs[2].0),
        ))
    }

    fn invalid(self, needle: &str) {
        let reason = refused(self.graph());
        assert!(reason.contains(needle), "{reason:?} lacks {needle:?}")
    }
}

#[test]
fn quantized_lstm_layer_norm_projection_matches_conformance_example() {
    let (h, c, o) = Q8::with(false, true).run().unwrap();
    assert_eq!(c, [-14650, 8939, 5771, 6715, -11843, 7847, 1508, 12939]);
    assert_eq!(o, [127, 127, -108, -67, 127, 127]);
    assert_eq!(h, o);
}

#[test]
fn quantized_lstm_cifg_layer_norm_projection_matches_conformance_example() {
    let (h, c, o) = Q8::with(true, true).run().unwrap();
    assert_eq!(c, Q8_CELL_OUT);
    assert_eq!(o, [127, 127, 127, -128, 127, 127]);
    assert_eq!(h, o);
}

#[test]
fn quantized_lstm_cifg_layer_norm_matches_conformance_example() {
    let (h, c, o) = Q8::new().run().unwrap();
    assert_eq!(c, Q8_CELL_OUT);
    assert_eq!(o, Q8_OUTPUT);
    assert_eq!(h, Q8_OUTPUT);
}

#[test]
fn quantized_lstm_without_layer_norm_adds_the_gate_biases() {
    // Without layer normalization the biases join the gate matmuls: a large forget bias
    // saturates the forget gate, so the state changes (zero initial state, the cell gate
    // still contributes) and biases make a difference.
    let run_with = |bf: i32| {
        let mut q = Q8::with(true, false);
        for i in 21..24 {
            q.ins[i] = q.b.add(T::TensorInt32, &[], Lifetime::NoValue);
        }
        // Intermediate scales 2^-12 (no layer norm).
        for i in 26..30 {
            q.ins[i] = q.b.float(1.0 / 4096.0);
        }
        let id = q.b.i32c(&[4], &[bf; 4]);
        q.b.q(id, 4.656_61e-8, 0);
        q.ins[13] = id;
        q.run().unwrap()
    };
    let (_, c0, _) = run_with(0);
    let (_, c1, _) = run_with(1 << 28);
    assert_ne!(c0, c1);
}

#[test]
fn quantized_lstm_peepholes_read_previous_state_for_input_forget_and_new_for_output() {
    // The example's previous cell state is zero: input and forget peepholes then add nothing,
    // while the output peephole sees the new state and changes the output.
    let with_peep = |c2o: i16| {
        let mut q = Q8::with(false, true);
        for (i, v) in [(9, 3000i16), (10, -3000), (11, c2o)] {
            let id = q.b.konst(
                T::TensorQuant16Symm,
                &[4],
                [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect(),
            );
            q.b.q(id, 1.0, 0);
            q.ins[i] = id;
        }
        q.run().unwrap()
    };
    let base = Q8::with(false, true).run().unwrap();
    assert_eq!(with_peep(0), base);
    let changed = with_peep(30000);
    assert_eq!(
        changed.1, base.1,
        "the output peephole does not change the cell state"
    );
    assert_ne!(changed.2, base.2);
}

#[test]
fn quantized_lstm_rejects_31_inputs() {
    let mut q = Q8::new();
    q.ins.pop();
    q.invalid("31 inputs given");
}

#[test]
fn quantized_lstm_rejects_unsigned_input() {
    let mut q = Q8::new();
    let x = q.b.input(T::TensorQuant8Asymm, &[2, 5]);
    q.b.q(x, 0.007_812_5, 128);
    q.ins[0] = x;
    q.invalid("input 0 (input) must be TENSOR_QUANT8_ASYMM_SIGNED");
}

#[test]
fn quantized_lstm_rejects_cifg_with_input_layer_norm_weights() {
    let mut q = Q8::new();
    let id = q.b.konst(T::TensorQuant16Symm, &[4], vec![0; 8]);
    q.b.q(id, 3.051_82e-5, 0);
    q.ins[20] = id;
    q.invalid("with CIFG the input gate bias, cell-to-input and input layer-norm weights");
}

#[test]
fn quantized_lstm_rejects_partial_layer_norm() {
    let mut q = Q8::new();
    q.ins[22] = q.b.add(T::TensorInt32, &[], Lifetime::NoValue);
    q.invalid("layer-norm weights must be all given or all omitted");
}

#[test]
fn quantized_lstm_rejects_half_cifg() {
    let mut q = Q8::with(false, true);
    q.ins[5] = q.b.add(T::TensorInt32, &[], Lifetime::NoValue);
    q.invalid("both be given or both omitted (CIFG)");
}

#[test]
fn quantized_lstm_rejects_projection_bias_without_weights() {
    let mut q = Q8::with(false, true);
    q.ins[16] = q.b.add(T::TensorInt32, &[], Lifetime::NoValue);
    q.invalid("a projection bias needs projection weights");
}

#[test]
fn quantized_lstm_rejects_cell_state_scale_not_power_of_two() {
    let q = Q8::new();
    let c = q.ins[19];
    let mut q = q;
    q.b.g.operands[c as usize].scale = 3.0e-5;
    q.invalid("cell state scale");
}

#[test]
fn quantized_lstm_rejects_cell_state_scale_above_2_pow_minus_9() {
    let q = Q8::new();
    let c = q.ins[19];
    let mut q = q;
    q.b.g.operands[c as usize].scale = 1.0 / 256.0;
    q.invalid("no larger than 2^-9");
}

#[test]
fn quantized_lstm_rejects_int32_clip() {
    let mut q = Q8::new();
    q.ins[24] = q.b.int(0);
    q.invalid("input 24 (scale or clip) must be FLOAT32");
}

#[test]
fn quantized_lstm_rejects_float_cell_state_output() {
    let q = Q8::new();
    let o = q.outs[1];
    let mut q = q;
    q.b.g.operands[o as usize].ty = T::TensorQuant16Asymm;
    q.invalid("output 1 (cell state out) must be TENSOR_QUANT16_SYMM");
}

#[test]
fn quantized_lstm_fails_on_weights_of_wrong_shape() {
    let mut q = Q8::new();
    let id = q.b.konst(T::TensorQuant8Symm, &[4, 4], vec![0; 16]);
    q.b.q(id, 0.007_843_14, 0);
    q.ins[2] = id;
    match q.run() {
        Err(ExecError::InvalidArgument(m)) => assert!(
            m.contains("input 2 (input-to-forget weights) must have shape [4, 5]"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn quantized_lstm_rejects_negative_constant_cell_clip() {
    let mut q = Q8::new();
    q.ins[24] = q.b.float(-1.0);
    q.invalid("cell clip must be >= 0");
}

#[test]
fn quantized_lstm_rejects_zero_constant_intermediate_scale() {
    let mut q = Q8::new();
    q.ins[27] = q.b.float(0.0);
    q.invalid("input 27 (intermediate or hidden state scale) must be > 0");
}

#[test]
fn quantized_lstm_rejects_hidden_zero_point_out_of_int8() {
    let mut q = Q8::new();
    q.ins[30] = q.b.int(200);
    q.invalid("hidden state zero point 200 outside [-128, 127]");
}

#[test]
fn quantized_lstm_fails_on_negative_cell_clip_given_at_execution() {
    let mut q = Q8::new();
    q.ins[24] = q.b.input(T::Float32, &[]);
    let m = exec_error(q.graph(), &[i8_bytes(&Q8_INPUT), fb(&[-1.0])]);
    assert!(m.contains("cell clip must be >= 0"), "{m}");
}

#[test]
fn quantized_lstm_cell_clip_bounds_the_state() {
    // Clip 0.1 with scale 2^-15: |state| <= 3276.
    let mut q = Q8::new();
    q.ins[24] = q.b.float(0.1);
    let (_, c, _) = q.run().unwrap();
    assert!(c.iter().all(|&v| v.abs() <= 3276), "{c:?}");
    assert!(c.iter().any(|&v| v.abs() == 3276), "{c:?}");
}

#[rustfmt::skip]
mod cases {
    use super::Case;

    // Generated by cpu/testdata/lstm_gen.py; do not edit by hand.

    pub(super) const LSTM_PLAIN: Case = Case {
        n_inputs: 23,
        tensors: &[
            (0, &[2, 3], &[-0.19, -0.07, -0.23, -0.79, -0.91, 0.76]),
            (1, &[4, 3], &[0.69, -0.68, 0.12, -0.26, -0.57, -0.23, -0.14, 0.22, 0.47, -0.97, -0.49, 0.21]),
            (2, &[4, 3], &[0.13, -0.53, 0.32, 0.32, 0.03, -0.44, 0.26, -0.04, 0.31, 0.08, -0.76, 0.82]),
            (3, &[4, 3], &[0.69, -0.17, 0.26, 0.04, -0.54, -0.6, -0.1, 0.59, 0.19, 0.4, 0.46, 0.24]),
            (4, &[4, 3], &[0.43, 0.87, -0.16, 0.32, 0.75, -0.69, 0.56, -0.05, 0.11, 0.85, 0.63, -0.73]),
            (5, &[4, 4], &[-0.83, 1.0, 0.66, -0.93, 0.14, 0.22, -0.99, -0.64, -0.67, -0.08, 0.13, -0.1, 0.84, 0.63, -0.2, -0.59]),
            (6, &[4, 4], &[-0.97, -0.38, -0.66, -0.31, 0.24, 0.1, 0.43, -0.02, 0.68, -0.3, 0.1, 0.01, -0.96, -0.54, -0.83, -0.5]),
            (7, &[4, 4], &[-0.51, -0.12, 0.03, -0.98, -0.41, -0.28, -0.98, 0.12, 0.1, -0.82, -0.5, 0.81, -0.12, -0.48, 0.73, -0.09]),
            (8, &[4, 4], &[-0.17, 0.35, 0.62, -0.68, 0.4, 0.04, -0.84, 0.04, -0.1, -0.11, -0.46, -0.27, 0.52, -0.32, 0.72, 0.4]),
            (12, &[4], &[-0.28, 0.72, -0.3, 0.98]),
            (13, &[4], &[-0.99, -0.41, -0.25, 0.29]),
            (14, &[4], &[0.25, 0.81, 0.09, -0.68]),
            (15, &[4], &[0.5, -0.19, -0.65, -0.98]),
            (18, &[2, 4], &[-0.11, 0.37, 0.335, 0.075, 0.365, 0.45, 0.135, -0.495]),
            (19, &[2, 4], &[0.28, -0.01, 0.58, -0.28, 0.39, -0.27, 0.17, -0.1]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[],
        outputs: &[
            (&[2, 16], &[]),
            (&[2, 4], &[0.04620143, 0.12598217, 0.015572741, -0.156024, 0.13210969, 0.031847816, -0.06855031, -0.04013036]),
            (&[2, 4], &[0.06927565, 0.33610612, 0.057221465, -0.61602813, 0.3090722, 0.19503675, -0.25625473, -0.91451687]),
            (&[2, 4], &[0.04620143, 0.12598217, 0.015572741, -0.156024, 0.13210969, 0.031847816, -0.06855031, -0.04013036]),
        ],
    };

    pub(super) const LSTM_CIFG_PEEPHOLE_PROJECTION: Case = Case {
        n_inputs: 23,
        tensors: &[
            (0, &[2, 3], &[-0.74, -0.72, -0.38, -0.46, -0.14, 0.73]),
            (2, &[4, 3], &[-0.58, -0.36, -0.87, 0.25, 0.78, 0.19, -0.66, 0.08, -0.48, -0.23, -0.99, 0.92]),
            (3, &[4, 3], &[-0.54, -0.56, -0.91, -0.17, -0.91, 0.82, 0.25, -0.33, -0.47, 0.47, 0.8, 0.99]),
            (4, &[4, 3], &[-0.87, 0.21, 0.15, 0.53, -0.84, -0.68, 0.58, 0.89, 0.08, 0.03, 0.42, -0.6]),
            (6, &[4, 2], &[0.05, 0.14, -0.81, -0.74, 0.76, 0.69, 0.35, 0.39]),
            (7, &[4, 2], &[-0.83, -0.11, 0.95, 0.17, 0.6, -0.23, 0.75, 0.93]),
            (8, &[4, 2], &[0.65, -0.95, 0.26, 0.68, -0.74, -0.28, -0.45, 0.55]),
            (10, &[4], &[-0.25, -0.65, -0.46, -0.66]),
            (11, &[4], &[-0.22, -0.92, -0.51, -0.57]),
            (13, &[4], &[0.86, 0.35, 0.2, -0.7]),
            (14, &[4], &[-0.46, -0.33, -0.16, 0.93]),
            (15, &[4], &[-0.64, -0.2, 0.17, -0.92]),
            (16, &[2, 4], &[0.36, 0.38, -0.18, -0.79, 0.06, 0.04, 0.03, -0.24]),
            (17, &[2], &[-0.46, -0.96]),
            (18, &[2, 2], &[0.42, -0.11, 0.065, 0.435]),
            (19, &[2, 4], &[0.35, -0.9, -0.15, 0.55, -0.21, 0.88, -0.56, 0.55]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[],
        outputs: &[
            (&[2, 12], &[]),
            (&[2, 2], &[-0.453022, -0.95973533, -0.49320453, -0.9948017]),
            (&[2, 4], &[0.3483272, -0.16224205, -0.031167705, 0.1230029, -0.38254166, 0.6568678, -0.56002575, 0.74275273]),
            (&[2, 2], &[-0.453022, -0.95973533, -0.49320453, -0.9948017]),
        ],
    };

    pub(super) const LSTM_CLIPPED: Case = Case {
        n_inputs: 23,
        tensors: &[
            (0, &[2, 3], &[-0.76, 0.24, 0.1, -0.84, 0.94, -0.74]),
            (1, &[4, 3], &[0.34, 0.34, -0.35, -0.38, -0.14, 0.38, -0.26, 0.92, 0.19, -0.12, 0.27, -0.74]),
            (2, &[4, 3], &[-0.67, 0.9, -0.38, -0.05, -0.27, 0.64, 0.62, 0.74, -0.42, 0.25, -0.98, -0.44]),
            (3, &[4, 3], &[0.75, -0.25, 0.17, 0.89, 0.58, -0.65, 0.59, -0.38, -0.36, -0.25, -0.16, 0.78]),
            (4, &[4, 3], &[-0.29, -0.19, -0.13, 0.42, -1.0, 0.18, 0.45, 0.48, -0.86, -0.76, -0.75, -0.28]),
            (5, &[4, 2], &[0.4, -0.7, 0.64, -0.9, 0.34, 0.51, -0.6, -0.76]),
            (6, &[4, 2], &[0.04, -0.33, 0.97, 0.32, 0.84, -0.56, 0.27, -0.24]),
            (7, &[4, 2], &[0.2, -0.35, -0.48, 0.79, -0.93, -0.76, 0.87, 0.4]),
            (8, &[4, 2], &[-0.42, -0.38, -0.45, -0.53, 0.17, -0.32, -0.22, -0.25]),
            (9, &[4], &[-0.47, 0.15, 0.62, -0.18]),
            (10, &[4], &[-0.32, -0.1, -0.47, 0.52]),
            (11, &[4], &[0.37, 0.87, -0.43, 0.24]),
            (12, &[4], &[0.52, -0.42, 0.01, -0.33]),
            (13, &[4], &[0.34, 0.49, 0.44, -0.45]),
            (14, &[4], &[0.38, 0.14, -0.83, -0.27]),
            (15, &[4], &[0.54, 0.13, 0.27, 0.25]),
            (16, &[2, 4], &[0.11, -0.91, -0.88, 0.45, -0.72, 0.27, 0.04, 0.48]),
            (18, &[2, 2], &[0.47, -0.5, -0.315, 0.095]),
            (19, &[2, 4], &[0.79, 0.9, -0.21, -0.78, 0.33, 0.81, 0.95, -0.44]),
        ],
        act: 4,
        cell_clip: 0.3,
        proj_clip: 0.1,
        flags: &[],
        outputs: &[
            (&[2, 16], &[]),
            (&[2, 2], &[0.1, -0.1, -0.05385794, -0.02224552]),
            (&[2, 4], &[0.3, 0.06695405, -0.3, -0.11498385, -0.08766822, 0.3, -0.16513205, -0.3]),
            (&[2, 2], &[0.1, -0.1, -0.05385794, -0.02224552]),
        ],
    };

    pub(super) const LSTM_RELU6_PROJECTION_NO_BIAS: Case = Case {
        n_inputs: 23,
        tensors: &[
            (0, &[1, 2], &[0.37, -0.14]),
            (1, &[3, 2], &[-0.95, -0.03, 0.86, 0.24, 0.02, 0.99]),
            (2, &[3, 2], &[-0.73, -0.87, -0.25, 0.68, 0.13, -0.92]),
            (3, &[3, 2], &[0.87, -0.04, 0.75, 0.29, 0.85, 0.04]),
            (4, &[3, 2], &[-0.15, -0.88, 0.3, 0.78, -0.09, -0.22]),
            (5, &[3, 2], &[-0.52, -0.78, -0.05, 0.8, -0.51, 0.12]),
            (6, &[3, 2], &[0.16, -0.7, -0.62, 0.59, 0.17, 0.49]),
            (7, &[3, 2], &[0.25, 0.02, -0.87, 0.13, 0.0, -0.11]),
            (8, &[3, 2], &[0.05, -0.59, 0.91, -0.35, 0.41, -0.02]),
            (12, &[3], &[0.89, -0.77, 0.9]),
            (13, &[3], &[-0.9, -0.56, 0.97]),
            (14, &[3], &[-0.53, 0.02, 0.73]),
            (15, &[3], &[0.72, 0.79, 0.12]),
            (16, &[2, 3], &[-0.69, -0.22, -0.57, -0.13, -0.47, -0.81]),
            (18, &[1, 2], &[0.215, -0.445]),
            (19, &[1, 3], &[0.58, 0.85, -0.89]),
        ],
        act: 3,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[],
        outputs: &[
            (&[1, 12], &[]),
            (&[1, 2], &[-0.15205261, -0.119611494]),
            (&[1, 3], &[0.19214259, 0.2090066, 0.05926762]),
            (&[1, 2], &[-0.15205261, -0.119611494]),
        ],
    };

    pub(super) const LSTM_SIGMOID: Case = Case {
        n_inputs: 23,
        tensors: &[
            (0, &[1, 2], &[0.4, 0.93]),
            (1, &[3, 2], &[0.42, 0.72, -0.78, -0.99, -0.55, -0.1]),
            (2, &[3, 2], &[0.6, -0.03, -0.64, 0.87, -0.41, -0.34]),
            (3, &[3, 2], &[-0.89, -0.39, -0.72, 0.26, 0.56, 0.57]),
            (4, &[3, 2], &[0.14, -0.31, 0.23, -0.46, 0.73, -0.08]),
            (5, &[3, 3], &[-0.21, -0.91, 0.96, 0.42, 0.9, -0.15, 0.38, -0.19, -0.76]),
            (6, &[3, 3], &[0.95, -0.21, 0.93, -1.0, -0.73, 0.14, 0.14, 0.02, 0.56]),
            (7, &[3, 3], &[0.62, -0.27, 0.93, 0.19, 0.62, 0.96, 0.45, 0.54, 0.6]),
            (8, &[3, 3], &[0.98, -0.42, 0.56, -0.3, 0.23, -0.07, -0.79, 0.35, 0.9]),
            (12, &[3], &[0.91, 0.97, -0.96]),
            (13, &[3], &[0.28, -0.04, -0.56]),
            (14, &[3], &[0.52, 0.86, -0.39]),
            (15, &[3], &[-0.51, -0.78, -0.86]),
            (18, &[1, 3], &[-0.385, -0.32, 0.29]),
            (19, &[1, 3], &[-0.21, 0.82, 0.37]),
        ],
        act: 6,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[],
        outputs: &[
            (&[1, 12], &[]),
            (&[1, 3], &[0.17610916, 0.17561662, 0.24872628]),
            (&[1, 3], &[0.31082317, 0.84799796, 0.19773352]),
            (&[1, 3], &[0.17610916, 0.17561662, 0.24872628]),
        ],
    };

    pub(super) const LSTM_LAYER_NORM: Case = Case {
        n_inputs: 27,
        tensors: &[
            (0, &[2, 3], &[-0.03, 0.27, 0.64, -0.34, 0.84, 0.83]),
            (1, &[4, 3], &[0.56, 0.88, -0.2, -0.77, -0.7, 0.86, 0.06, -0.56, 0.99, -0.67, -0.78, -0.63]),
            (2, &[4, 3], &[-0.36, -0.67, -0.89, 0.53, 0.63, -0.94, -0.56, 0.38, -0.36, -0.9, 0.14, 0.97]),
            (3, &[4, 3], &[-0.5, 0.61, 0.69, 0.61, 0.02, -0.26, 0.31, -0.34, -0.37, 0.88, 0.97, -0.64]),
            (4, &[4, 3], &[-0.29, -0.64, -0.02, 0.17, 0.86, 0.76, -0.31, -0.34, 0.77, -0.18, 0.38, -0.67]),
            (5, &[4, 3], &[-0.91, -0.14, -0.29, 0.69, -0.65, -0.68, 0.25, -0.24, 0.65, -0.81, -0.89, 0.07]),
            (6, &[4, 3], &[-0.66, 0.38, 0.27, 0.72, -0.74, 0.18, -0.6, 0.23, -0.66, -0.46, 0.76, 0.66]),
            (7, &[4, 3], &[0.72, -0.17, -0.05, 0.76, -0.32, -0.08, 0.27, -0.08, 0.38, 0.58, 0.06, 0.33]),
            (8, &[4, 3], &[-0.18, -0.7, -0.12, 0.98, 0.03, 0.49, -0.84, -0.48, 0.17, 0.63, 0.95, 0.29]),
            (9, &[4], &[-0.94, -0.34, -0.33, 0.34]),
            (10, &[4], &[-0.74, 0.57, -0.91, -0.8]),
            (11, &[4], &[0.42, -0.12, 0.38, -0.45]),
            (12, &[4], &[-0.29, -0.17, -0.24, 0.61]),
            (13, &[4], &[-0.63, 0.13, 0.21, -0.43]),
            (14, &[4], &[-0.36, -0.29, -0.81, -0.32]),
            (15, &[4], &[0.56, -0.6, 0.41, 0.31]),
            (16, &[3, 4], &[-0.85, 0.76, -0.4, 0.65, 0.42, -0.47, 0.62, 0.63, 0.05, 0.69, -0.84, 0.53]),
            (18, &[2, 3], &[0.015, 0.21, -0.14, -0.44, 0.31, -0.27]),
            (19, &[2, 4], &[0.51, -0.29, -0.72, 0.69, -0.59, 0.68, -0.76, 0.14]),
            (23, &[4], &[0.58000004, 1.99, 0.43, 0.51]),
            (24, &[4], &[1.17, 1.8399999, 1.73, 0.62]),
            (25, &[4], &[1.3, 0.52, 1.62, 0.089999974]),
            (26, &[4], &[0.92, 0.32999998, 1.6700001, 1.1800001]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[],
        outputs: &[
            (&[2, 16], &[]),
            (&[2, 3], &[-0.15123798, 0.024162037, 0.15699755, 0.017648328, -0.2698602, 0.4399684]),
            (&[2, 4], &[0.36387476, -0.45505297, -1.2106092, 0.16640073, 0.5143099, -0.07527378, -1.1069722, -0.07951937]),
            (&[2, 3], &[-0.15123798, 0.024162037, 0.15699755, 0.017648328, -0.2698602, 0.4399684]),
        ],
    };

    pub(super) const LSTM_LAYER_NORM_CIFG: Case = Case {
        n_inputs: 27,
        tensors: &[
            (0, &[2, 3], &[-0.31, -0.94, -0.06, 0.27, 0.73, 0.04]),
            (2, &[4, 3], &[0.84, -0.56, -0.93, -0.33, 0.23, -0.68, -0.22, 0.37, -0.78, 0.59, 0.18, 0.64]),
            (3, &[4, 3], &[-0.85, -0.46, -0.1, -0.45, 0.31, -0.01, 0.4, 0.58, 0.21, 0.25, -0.4, -0.86]),
            (4, &[4, 3], &[-0.24, -0.96, -0.67, -0.66, 0.75, 0.97, -0.02, -0.07, 0.34, 0.66, 0.33, -0.09]),
            (6, &[4, 4], &[0.67, -0.87, 0.58, -0.22, 0.01, 0.17, 0.49, 0.15, -0.2, -0.34, 0.71, -0.75, -0.31, -0.37, -0.78, -0.74]),
            (7, &[4, 4], &[0.8, 0.05, -0.7, -0.6, -0.45, 0.64, 0.41, 0.54, 0.63, 0.78, 0.19, -0.0, -0.37, 0.5, -0.83, -0.55]),
            (8, &[4, 4], &[0.84, -0.22, -0.36, -0.97, -0.36, -0.69, 0.38, -0.74, -0.63, 0.52, 0.88, -0.32, -0.01, 0.46, -0.55, -0.21]),
            (13, &[4], &[0.98, -0.44, -0.79, 0.37]),
            (14, &[4], &[-0.78, 0.19, 0.22, 0.99]),
            (15, &[4], &[0.39, 0.81, 0.59, 0.93]),
            (18, &[2, 4], &[0.15, -0.105, 0.135, 0.14, 0.335, -0.415, -0.105, -0.405]),
            (19, &[2, 4], &[-0.36, -0.72, -0.34, 0.26, 0.42, -0.03, -0.51, -0.37]),
            (24, &[4], &[1.39, 1.13, 0.16000003, 1.99]),
            (25, &[4], &[0.62, 0.42000002, 0.57, 1.45]),
            (26, &[4], &[0.83, 0.37, 2.0, 0.089999974]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[],
        outputs: &[
            (&[2, 12], &[]),
            (&[2, 4], &[-0.27669543, -0.16702834, -0.2858583, 0.45905977, 0.089910336, -0.23182093, 0.037528887, -0.22897473]),
            (&[2, 4], &[-0.3385216, -0.27305007, -0.44970956, 0.7846444, 0.17612328, -0.30271995, 0.36075658, -0.32763228]),
            (&[2, 4], &[-0.27669543, -0.16702834, -0.2858583, 0.45905977, 0.089910336, -0.23182093, 0.037528887, -0.22897473]),
        ],
    };

    pub(super) const UNI_TIME_MAJOR: Case = Case {
        n_inputs: 28,
        tensors: &[
            (0, &[3, 2, 3], &[0.91, -0.35, -0.52, 0.08, 1.0, -0.63, 0.21, 0.2, 0.54, -0.04, 0.44, 0.66, -0.26, 0.94, 0.2, -0.02, -0.52, -0.23]),
            (1, &[4, 3], &[-0.88, 0.16, -0.46, 0.34, -0.62, -0.5, -0.98, 0.45, 0.5, 0.46, 0.46, -0.47]),
            (2, &[4, 3], &[0.38, 0.31, 0.47, -0.18, 0.59, -0.32, 0.86, 0.5, -0.88, -0.32, -0.03, -0.0]),
            (3, &[4, 3], &[-0.89, -0.25, -0.87, -0.34, -0.66, -0.55, 0.6, 0.01, 0.33, -0.68, -0.6, 0.24]),
            (4, &[4, 3], &[0.02, 0.46, -0.23, 0.37, -0.49, 0.4, 0.62, -0.12, -0.76, -0.01, 0.1, -0.41]),
            (5, &[4, 4], &[-0.66, 0.69, 0.58, 0.13, 0.76, 0.98, 0.23, -0.94, 0.26, -0.88, -0.81, 0.53, 0.33, 0.85, -0.05, -0.51]),
            (6, &[4, 4], &[-0.12, -0.64, -0.72, 0.4, 0.1, 0.54, -0.54, -0.56, 0.4, 0.64, -0.92, 0.91, 0.4, 0.62, 0.44, 0.12]),
            (7, &[4, 4], &[0.48, 0.62, 0.28, 0.24, -0.99, 0.25, 0.31, -0.14, -0.82, 0.61, -0.95, 0.95, 0.75, 0.05, 0.78, -0.79]),
            (8, &[4, 4], &[-0.78, -0.59, -0.06, 0.39, 0.6, -0.45, 0.14, 0.87, 0.14, -0.86, -0.9, 0.88, -0.65, -0.17, 0.11, -0.19]),
            (12, &[4], &[-0.37, 0.41, -0.89, 0.87]),
            (13, &[4], &[-0.93, -0.4, -0.42, -0.77]),
            (14, &[4], &[-0.06, 0.76, -0.39, 0.29]),
            (15, &[4], &[-0.49, 0.84, 0.9, 0.05]),
            (18, &[2, 4], &[0.145, 0.005, -0.26, 0.105, 0.18, -0.04, -0.215, -0.03]),
            (19, &[2, 4], &[-0.53, -0.12, 0.91, -0.52, 0.39, -0.62, 0.86, -0.55]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[(23, true)],
        outputs: &[
            (&[3, 2, 4], &[-0.08495897, 0.316093, 0.54625314, -0.21818255, 0.09651012, -0.15729685, 0.3406895, -0.29374868, -0.08308236, 0.32556984, 0.03438076, 0.13638397, -0.058775343, -0.03277986, -0.08646403, 0.118223, -0.04541844, 0.22176994, -0.0016448294, -0.014538287, 0.020770513, 0.36479285, -0.11047752, 0.15334599]),
            (&[2, 4], &[-0.04541844, 0.22176994, -0.0016448294, -0.014538287, 0.020770513, 0.36479285, -0.11047752, 0.15334599]),
            (&[2, 4], &[-0.10040029, 0.40904397, -0.0028986428, -0.02849852, 0.0572032, 0.5366755, -0.14071685, 0.30020848]),
        ],
    };

    pub(super) const UNI_BATCH_MAJOR_PROJECTION: Case = Case {
        n_inputs: 28,
        tensors: &[
            (0, &[2, 3, 3], &[-0.06, -0.78, 0.78, 0.43, 0.91, -0.47, -0.23, 0.36, 0.98, -0.41, -0.69, 0.24, 0.81, 0.48, 0.95, 0.38, -0.87, 0.03]),
            (1, &[4, 3], &[-0.8, 0.72, 0.8, -0.73, 0.87, -0.78, 0.11, 0.76, -0.9, 0.65, 0.94, -0.31]),
            (2, &[4, 3], &[0.02, 0.84, -0.17, 0.0, 0.18, -0.47, 0.98, 0.94, 0.54, 0.37, 0.77, 0.58]),
            (3, &[4, 3], &[-0.89, 0.08, -0.79, -0.75, -0.28, 0.49, -0.59, -0.64, 0.05, 0.12, -0.03, 0.97]),
            (4, &[4, 3], &[-0.1, 0.2, -0.82, 0.4, -0.41, 0.38, -0.62, 0.42, 0.59, -0.57, 0.15, 0.63]),
            (5, &[4, 2], &[0.7, -0.13, 0.64, 0.23, -0.47, 0.54, 0.43, -0.86]),
            (6, &[4, 2], &[-0.39, -0.59, 0.1, -0.02, 0.46, -0.41, -0.58, 0.65]),
            (7, &[4, 2], &[-0.26, 0.95, 0.7, 0.77, 0.89, 0.53, 0.3, -0.26]),
            (8, &[4, 2], &[0.35, 0.42, -0.95, -0.52, 0.04, -0.58, 0.35, -0.89]),
            (9, &[4], &[0.34, 0.09, -0.42, 0.72]),
            (10, &[4], &[0.89, 0.19, 0.09, 0.86]),
            (11, &[4], &[-0.09, 0.98, -0.14, -0.79]),
            (12, &[4], &[0.69, 0.26, -0.69, -0.24]),
            (13, &[4], &[-0.67, 0.69, 0.92, -0.52]),
            (14, &[4], &[0.95, 0.61, 0.91, 0.47]),
            (15, &[4], &[-0.52, -0.21, -0.48, 0.46]),
            (16, &[2, 4], &[0.52, -0.8, -0.73, 0.11, 0.96, -0.63, -0.26, -0.44]),
            (17, &[2], &[-0.48, 0.97]),
            (18, &[2, 2], &[-0.16, 0.14, -0.315, -0.14]),
            (19, &[2, 4], &[-0.76, 0.68, 0.1, 0.71, -0.66, 0.16, 0.05, -0.11]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[(23, false)],
        outputs: &[
            (&[2, 3, 2], &[-0.80434126, 0.6019335, -0.42715612, 1.1069655, -0.68233156, 0.8663398, -0.6808737, 0.853361, -0.648035, 0.8436993, -0.66075027, 0.88744545]),
            (&[2, 2], &[-0.68233156, 0.8663398, -0.66075027, 0.88744545]),
            (&[2, 4], &[1.0009185, 0.61603975, 0.22448796, 0.37527218, 0.41429403, 0.4010743, 0.35759586, 0.22829415]),
        ],
    };

    pub(super) const UNI_LAYER_NORM_CIFG: Case = Case {
        n_inputs: 28,
        tensors: &[
            (0, &[2, 1, 2], &[-0.11, -0.17, 0.05, -0.6]),
            (2, &[3, 2], &[0.88, -0.42, -0.86, 0.08, -0.92, -0.32]),
            (3, &[3, 2], &[0.41, 0.99, 0.02, -0.89, -0.1, 0.96]),
            (4, &[3, 2], &[0.76, -0.33, 0.13, 0.1, -0.36, -0.7]),
            (6, &[3, 3], &[0.37, -0.06, 0.04, 0.47, -0.99, -0.05, -0.63, 0.37, -0.47]),
            (7, &[3, 3], &[0.98, 0.64, -0.73, -0.53, 0.56, 0.64, -0.87, 0.12, -0.1]),
            (8, &[3, 3], &[0.37, 0.09, 0.8, -0.48, -0.78, -0.69, -0.76, 0.15, 0.06]),
            (13, &[3], &[0.16, -0.63, 0.21]),
            (14, &[3], &[0.39, -0.38, -0.22]),
            (15, &[3], &[0.29, 0.95, -0.09]),
            (18, &[1, 3], &[-0.205, -0.02, 0.105]),
            (19, &[1, 3], &[-0.93, -0.62, -0.5]),
            (25, &[3], &[0.57, 0.99, 1.3199999]),
            (26, &[3], &[0.23000002, 0.20999998, 0.58000004]),
            (27, &[3], &[0.44, 0.39, 0.36]),
        ],
        act: 4,
        cell_clip: 0.5,
        proj_clip: 0.0,
        flags: &[(23, true)],
        outputs: &[
            (&[2, 1, 3], &[-0.14754239, -0.18237309, -0.25521532, -0.051314555, -0.0825922, -0.24009718]),
        ],
    };

    pub(super) const BI_SEPARATE: Case = Case {
        n_inputs: 61,
        tensors: &[
            (0, &[3, 2, 2], &[-0.85, 0.66, 0.03, -0.31, 0.95, -0.54, -0.29, -0.69, 0.51, -0.53, 0.29, 0.82]),
            (1, &[3, 2], &[-0.15, 0.02, -0.62, -0.52, -0.55, 0.57]),
            (2, &[3, 2], &[-0.49, 0.13, -0.23, 0.35, -0.53, 0.54]),
            (3, &[3, 2], &[-0.9, -0.34, 0.91, -0.26, 0.26, 0.18]),
            (4, &[3, 2], &[0.27, -0.76, -0.28, 0.86, -0.96, -0.19]),
            (5, &[3, 3], &[0.69, 0.5, 0.89, -0.11, -0.99, 0.39, -0.96, 0.35, 0.98]),
            (6, &[3, 3], &[-0.35, 1.0, 0.16, 0.95, 0.84, 0.68, 0.05, 0.17, 0.41]),
            (7, &[3, 3], &[-0.08, 0.0, 0.94, -0.52, 0.0, 0.96, -0.08, 0.67, -0.1]),
            (8, &[3, 3], &[0.59, 0.82, -0.82, -0.36, -0.73, 0.07, -0.59, -0.06, -0.78]),
            (12, &[3], &[-0.97, 0.37, -0.13]),
            (13, &[3], &[0.2, -0.77, -0.52]),
            (14, &[3], &[-0.63, 0.83, -0.77]),
            (15, &[3], &[0.0, -0.44, -0.67]),
            (18, &[3, 2], &[-0.98, -0.25, -0.08, 0.12, -0.79, -0.19]),
            (19, &[3, 2], &[-0.23, -0.84, -0.59, -0.93, -0.39, -0.51]),
            (20, &[3, 2], &[0.15, 0.83, -0.77, 0.09, 0.47, -0.47]),
            (21, &[3, 2], &[-0.17, 0.98, 0.26, -0.18, -0.61, -0.24]),
            (22, &[3, 3], &[-0.4, 0.96, -0.48, -0.21, -0.62, -0.7, -0.24, 0.66, 0.36]),
            (23, &[3, 3], &[0.4, -0.19, -0.88, -0.28, -0.34, -0.39, -0.0, 0.4, -0.8]),
            (24, &[3, 3], &[-0.42, -0.06, 0.78, 0.55, 0.93, 0.3, -0.32, 1.0, -0.1]),
            (25, &[3, 3], &[0.47, -0.92, -0.38, -0.91, 0.69, -0.03, 0.73, 0.96, 0.76]),
            (29, &[3], &[0.65, 0.35, -0.29]),
            (30, &[3], &[0.97, -0.48, -0.08]),
            (31, &[3], &[-0.26, -0.39, -0.86]),
            (32, &[3], &[-0.41, 0.08, -0.43]),
            (35, &[2, 3], &[-0.15, 0.19, 0.36, -0.115, -0.09, -0.135]),
            (36, &[2, 3], &[-0.94, -0.57, -0.71, 0.09, -0.21, 0.84]),
            (37, &[2, 3], &[-0.385, -0.24, -0.125, 0.415, -0.495, -0.42]),
            (38, &[2, 3], &[-0.19, 0.85, -0.97, 0.94, -0.28, 0.01]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[(51, false), (52, true)],
        outputs: &[
            (&[3, 2, 3], &[-0.14728437, -0.049199507, -0.33415037, -0.047463503, 0.13193005, -0.007087451, -0.26413006, 0.103904516, -0.07236803, -0.05689695, 0.13282308, -0.13247015, -0.22410858, 0.14189021, -0.08401719, -0.10768396, 0.22566362, -0.09372321]),
            (&[3, 2, 3], &[-0.16948707, -0.11196882, -0.21029946, -0.13538343, -0.26223707, -0.15985683, -0.14016244, -0.3182019, -0.08135523, 0.006914511, -0.162192, -0.22071789, -0.114888735, -0.08344604, -0.12723534, 0.4366295, -0.1733289, -0.04324698]),
            (&[2, 3], &[-0.22410858, 0.14189021, -0.08401719, -0.10768396, 0.22566362, -0.09372321]),
            (&[2, 3], &[-0.37244064, 0.6001076, -0.2889291, -0.26844138, 0.46015474, -0.35665816]),
            (&[2, 3], &[-0.16948707, -0.11196882, -0.21029946, -0.13538343, -0.26223707, -0.15985683]),
            (&[2, 3], &[-0.26496994, -0.277684, -0.649009, -0.37084898, -0.57116055, -0.5220758]),
        ],
    };

    pub(super) const BI_MERGED_BATCH_MAJOR: Case = Case {
        n_inputs: 61,
        tensors: &[
            (0, &[2, 3, 2], &[0.48, -0.27, 0.57, -0.73, 0.38, -0.51, -0.35, -0.27, -0.46, -0.46, 0.03, 0.73]),
            (1, &[3, 2], &[0.24, 0.34, 0.37, 0.05, 0.45, -0.18]),
            (2, &[3, 2], &[-0.73, -0.92, -0.59, -0.8, 0.81, 0.52]),
            (3, &[3, 2], &[0.18, -0.03, 0.95, -0.58, -0.18, 0.88]),
            (4, &[3, 2], &[-0.79, 0.7, 0.95, 0.31, 0.7, -0.36]),
            (5, &[3, 2], &[-0.04, -0.02, -0.04, 0.49, -0.51, 0.37]),
            (6, &[3, 2], &[-0.31, 0.88, -0.42, 0.56, -0.96, 0.24]),
            (7, &[3, 2], &[0.59, -0.06, -0.06, -0.55, 0.94, -0.65]),
            (8, &[3, 2], &[-0.93, -0.72, -0.58, -0.83, -0.17, -0.27]),
            (12, &[3], &[-0.56, 0.56, 0.6]),
            (13, &[3], &[-0.75, 0.4, -0.45]),
            (14, &[3], &[-0.11, 0.43, -0.49]),
            (15, &[3], &[0.32, -0.74, -0.29]),
            (16, &[2, 3], &[0.52, 0.26, 0.38, -0.7, 0.11, -0.9]),
            (18, &[3, 2], &[-0.67, -0.09, 0.33, 0.0, 0.22, -0.95]),
            (19, &[3, 2], &[-0.2, 0.89, -0.7, -0.21, 0.62, -0.72]),
            (20, &[3, 2], &[0.3, -0.36, -0.46, 0.65, -0.15, 0.74]),
            (21, &[3, 2], &[-0.09, 0.65, 0.52, 0.83, 0.35, -0.24]),
            (22, &[3, 2], &[0.75, -0.72, 0.9, 0.08, -0.3, -0.69]),
            (23, &[3, 2], &[0.8, -0.29, -0.04, 0.64, -0.63, 0.42]),
            (24, &[3, 2], &[-0.29, -0.82, 0.79, 0.67, -0.11, -0.9]),
            (25, &[3, 2], &[0.41, -0.99, -0.91, 0.28, 0.13, -1.0]),
            (29, &[3], &[0.51, -0.36, -0.89]),
            (30, &[3], &[-0.82, 0.99, 0.16]),
            (31, &[3], &[-0.52, 0.09, 0.48]),
            (32, &[3], &[0.01, 0.55, 0.89]),
            (33, &[2, 3], &[-0.64, 0.82, -0.11, -0.89, -0.43, 0.73]),
            (35, &[2, 2], &[-0.445, 0.265, 0.235, -0.325]),
            (36, &[2, 3], &[0.32, -0.3, -0.77, -0.01, -0.49, 0.63]),
            (37, &[2, 2], &[-0.365, -0.305, 0.065, 0.075]),
            (38, &[2, 3], &[0.13, -0.56, 0.79, 0.56, -0.08, -0.03]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[(51, true), (52, false)],
        outputs: &[
            (&[2, 3, 4], &[-0.12745945, 0.3985897, -0.2973843, 0.35133007, -0.12707637, 0.46214184, -0.3322259, 0.37826952, -0.11316654, 0.42956892, -0.37355196, 0.4782118, -0.004732413, -0.007362368, 0.2637941, 0.1788034, -0.07032502, 0.16199256, 0.1889691, 0.16288927, -0.060543302, 0.114289366, 0.16969797, 0.07493549]),
        ],
    };

    pub(super) const BI_CROSS_LINKED_AUX: Case = Case {
        n_inputs: 61,
        tensors: &[
            (0, &[2, 1, 2], &[-0.7, 0.69, 0.53, -0.54]),
            (1, &[3, 2], &[-0.44, -0.3, 0.15, -0.19, 0.3, -0.33]),
            (2, &[3, 2], &[0.91, 0.35, -0.86, 0.55, 0.1, -0.83]),
            (3, &[3, 2], &[0.69, 0.8, 0.37, -0.32, -0.35, 0.71]),
            (4, &[3, 2], &[0.14, 0.35, -0.57, -0.66, -0.12, -0.57]),
            (5, &[3, 3], &[-0.1, -0.48, 0.11, -0.65, 0.16, 0.95, 0.31, -0.31, 0.44]),
            (6, &[3, 3], &[-0.68, 0.1, 0.96, -0.26, 0.77, -0.06, -0.66, 0.28, 0.72]),
            (7, &[3, 3], &[0.57, 0.68, 0.58, 0.78, -0.82, -0.68, -0.89, 0.18, -0.03]),
            (8, &[3, 3], &[-0.24, -0.41, -0.1, 0.97, -0.37, -0.51, -0.67, -0.92, 0.2]),
            (12, &[3], &[0.33, 0.49, -0.86]),
            (13, &[3], &[0.79, 0.1, -0.51]),
            (14, &[3], &[0.91, -0.15, -0.26]),
            (15, &[3], &[0.34, -0.36, 0.81]),
            (18, &[3, 2], &[0.63, 0.32, 0.4, -0.33, 0.65, -0.17]),
            (19, &[3, 2], &[0.68, 0.9, 0.51, 0.92, -0.13, -0.79]),
            (20, &[3, 2], &[0.01, 0.2, 0.07, 0.24, -0.73, -0.15]),
            (21, &[3, 2], &[0.0, -0.35, -0.06, 0.94, -0.51, -0.35]),
            (22, &[3, 3], &[-0.01, -0.23, -0.63, -0.54, -0.32, -0.12, 0.51, -0.92, -0.61]),
            (23, &[3, 3], &[0.32, -0.73, 0.34, -0.66, -0.94, 0.31, -0.92, 0.53, -0.5]),
            (24, &[3, 3], &[-0.48, -0.54, -0.09, -0.8, 0.44, 0.83, -0.84, 0.1, 0.99]),
            (25, &[3, 3], &[0.77, 0.14, 0.9, -0.9, -0.14, 0.04, -0.2, 0.19, 0.79]),
            (29, &[3], &[-0.47, 0.47, -0.52]),
            (30, &[3], &[0.91, 0.99, -0.06]),
            (31, &[3], &[-0.67, 0.37, 0.67]),
            (32, &[3], &[0.15, 0.03, -0.57]),
            (35, &[1, 3], &[-0.46, -0.13, -0.4]),
            (36, &[1, 3], &[-0.22, -0.0, -0.31]),
            (37, &[1, 3], &[0.115, -0.48, -0.255]),
            (38, &[1, 3], &[-0.4, 0.15, -0.87]),
            (39, &[2, 1, 2], &[0.8, -0.33, -0.5, 0.95]),
            (40, &[3, 2], &[0.7, -0.53, -0.68, 0.0, -0.98, -0.9]),
            (41, &[3, 2], &[-0.32, -0.64, -0.64, 0.12, -0.58, 0.52]),
            (42, &[3, 2], &[-0.91, 0.83, -0.93, 0.47, -0.27, -0.17]),
            (43, &[3, 2], &[0.44, 0.61, 0.88, -0.76, 0.12, -0.61]),
            (44, &[3, 2], &[0.22, -0.02, -0.75, 0.04, 0.94, 0.04]),
            (45, &[3, 2], &[-0.46, 0.26, -0.69, 0.22, -0.78, 0.64]),
            (46, &[3, 2], &[-0.56, -0.91, 0.6, 0.36, -0.94, -0.67]),
            (47, &[3, 2], &[0.32, -0.47, -0.93, 0.64, -0.22, 0.4]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[(51, false), (52, true)],
        outputs: &[
            (&[2, 1, 3], &[-0.34577554, -0.20494716, 0.019291542, -0.0120201865, 0.06149606, -0.09114431]),
            (&[2, 1, 3], &[-0.26943085, 0.11445974, -0.0009434386, -0.23218043, -0.018481374, -0.24368867]),
        ],
    };

    pub(super) const BI_PARALLEL_LINKED_AUX: Case = Case {
        n_inputs: 61,
        tensors: &[
            (0, &[2, 1, 2], &[-0.96, 0.52, -0.3, -0.03]),
            (2, &[3, 2], &[-0.88, -0.94, 0.82, 0.21, -0.62, 0.54]),
            (3, &[3, 2], &[0.73, 0.25, 0.97, -0.61, 0.59, -0.72]),
            (4, &[3, 2], &[-0.61, 0.27, 0.34, 0.61, 0.56, 0.01]),
            (6, &[3, 3], &[-0.5, -0.58, 0.8, -0.19, -0.78, 0.86, 0.65, 0.27, 0.0]),
            (7, &[3, 3], &[-0.27, -0.32, -0.84, 0.82, -0.16, 1.0, 1.0, -0.92, 0.6]),
            (8, &[3, 3], &[0.56, -0.85, 0.89, -0.65, -0.36, -0.61, -0.44, -0.78, -0.53]),
            (13, &[3], &[-0.6, 0.43, 0.74]),
            (14, &[3], &[-0.38, -0.3, -0.91]),
            (15, &[3], &[-0.91, -0.19, 0.87]),
            (19, &[3, 3], &[-0.48, -0.19, 0.47, -0.13, 0.15, -0.45, -0.01, -0.71, 0.22]),
            (20, &[3, 3], &[-0.1, 0.28, 0.22, -0.15, -0.37, -0.01, -0.25, 0.76, 0.99]),
            (21, &[3, 3], &[-0.09, 0.95, -0.68, -0.58, 0.49, 0.32, -0.22, -0.23, 0.12]),
            (23, &[3, 3], &[0.65, -0.34, -0.17, 0.67, -0.88, -0.48, 0.47, 0.76, 0.18]),
            (24, &[3, 3], &[0.69, 0.35, 0.61, 0.41, -0.49, -0.0, 0.39, 0.85, -0.48]),
            (25, &[3, 3], &[-0.7, 0.07, 0.04, -0.16, -0.76, 0.76, 0.76, 0.97, 0.17]),
            (30, &[3], &[-0.36, 0.12, 0.2]),
            (31, &[3], &[0.18, 0.07, -0.35]),
            (32, &[3], &[-0.43, -0.72, 0.31]),
            (35, &[1, 3], &[-0.09, 0.4, 0.43]),
            (36, &[1, 3], &[0.24, -0.97, 0.38]),
            (37, &[1, 3], &[0.36, 0.345, -0.44]),
            (38, &[1, 3], &[0.36, -0.97, 0.09]),
            (39, &[2, 1, 3], &[0.88, -0.48, -0.01, 0.13, -0.76, -0.19]),
        ],
        act: 4,
        cell_clip: 0.0,
        proj_clip: 0.0,
        flags: &[(51, true), (52, true)],
        outputs: &[
            (&[2, 1, 6], &[-0.151668, -0.26342523, 0.07544579, 0.005165515, -0.024013875, -0.16673258, -0.14821781, -0.29403135, -0.08834379, 0.03692224, -0.050694816, -0.039043397]),
            (&[1, 3], &[-0.14821781, -0.29403135, -0.08834379]),
            (&[1, 3], &[-0.42337763, -0.7583161, -0.12369078]),
            (&[1, 3], &[0.005165515, -0.024013875, -0.16673258]),
            (&[1, 3], &[0.019060483, -0.12872998, -0.3134094]),
        ],
    };

    pub(super) const BI_LAYER_NORM_PEEPHOLE_CLIPPED: Case = Case {
        n_inputs: 61,
        tensors: &[
            (0, &[2, 2, 2], &[-0.7, 0.18, -0.95, -0.14, -0.85, -0.0, -0.3, -0.46]),
            (1, &[3, 2], &[0.63, 0.01, -0.19, -0.57, 0.82, -0.33]),
            (2, &[3, 2], &[0.55, -0.57, -0.04, 0.39, -0.57, -0.09]),
            (3, &[3, 2], &[-0.69, 0.97, -0.7, -0.33, 0.15, -0.19]),
            (4, &[3, 2], &[-0.77, 0.95, -0.53, 0.46, 0.52, 0.76]),
            (5, &[3, 3], &[-0.05, -0.3, 0.64, 0.54, 0.36, -0.43, 0.37, 0.89, 0.31]),
            (6, &[3, 3], &[0.61, 0.15, -0.25, -0.15, -0.29, -0.12, 0.6, -0.11, 0.01]),
            (7, &[3, 3], &[0.64, 0.32, 0.91, -0.42, 0.87, -0.14, -0.54, -0.07, -0.99]),
            (8, &[3, 3], &[0.8, -0.71, -0.64, -0.0, -0.33, -0.75, 0.21, 0.4, -0.52]),
            (9, &[3], &[-0.75, -0.99, -0.59]),
            (10, &[3], &[-0.64, 0.5, 0.46]),
            (11, &[3], &[0.21, 0.14, 0.84]),
            (12, &[3], &[0.79, 0.61, 0.99]),
            (13, &[3], &[-0.43, -0.27, 0.6]),
            (14, &[3], &[-0.42, -0.59, 0.9]),
            (15, &[3], &[0.2, -0.99, -0.8]),
            (18, &[3, 2], &[0.78, 0.01, 0.59, -0.99, 0.34, -0.58]),
            (19, &[3, 2], &[0.73, -0.76, 0.76, -0.6, -0.77, 0.18]),
            (20, &[3, 2], &[-0.82, 0.34, -0.49, -0.07, 0.75, -0.94]),
            (21, &[3, 2], &[-0.41, -0.44, -0.0, 0.95, 0.43, 0.2]),
            (22, &[3, 3], &[-0.08, -0.39, -0.79, -0.92, 0.93, -0.52, -0.52, 0.39, -0.98]),
            (23, &[3, 3], &[0.73, 0.8, -0.94, 0.8, -0.27, -0.52, 0.75, 0.21, -0.93]),
            (24, &[3, 3], &[-0.96, -0.64, -0.14, 0.68, -0.85, -0.02, 0.47, 0.58, -0.22]),
            (25, &[3, 3], &[0.48, -0.12, -0.8, -0.83, 0.52, 0.69, -0.31, 0.67, 0.3]),
            (26, &[3], &[-0.76, -0.02, 0.73]),
            (27, &[3], &[0.67, -0.67, 0.81]),
            (28, &[3], &[-0.21, -0.55, -0.32]),
            (29, &[3], &[0.18, -0.28, -0.88]),
            (30, &[3], &[0.6, 0.76, 0.76]),
            (31, &[3], &[-0.31, -0.59, 0.55]),
            (32, &[3], &[-0.58, -0.11, -0.28]),
            (35, &[2, 3], &[-0.295, 0.38, -0.165, -0.245, -0.285, 0.41]),
            (36, &[2, 3], &[-0.58, -0.19, 0.05, -0.57, 0.8, 0.89]),
            (37, &[2, 3], &[0.17, -0.18, 0.02, 0.095, 0.32, 0.07]),
            (38, &[2, 3], &[0.24, -0.8, 0.57, -0.76, -0.76, -0.69]),
            (53, &[3], &[0.90999997, 1.05, 0.20999998]),
            (54, &[3], &[1.29, 1.6600001, 0.65999997]),
            (55, &[3], &[1.99, 0.07999998, 1.28]),
            (56, &[3], &[1.9200001, 0.22000003, 1.04]),
            (57, &[3], &[0.089999974, 1.8399999, 1.74]),
            (58, &[3], &[0.07999998, 0.90999997, 0.69]),
            (59, &[3], &[0.52, 1.49, 0.20999998]),
            (60, &[3], &[0.26999998, 1.94, 0.29000002]),
        ],
        act: 4,
        cell_clip: 0.2,
        proj_clip: 0.0,
        flags: &[(51, false), (52, false)],
        outputs: &[
            (&[2, 2, 3], &[-0.14322194, -0.06221119, -0.019157236, -0.14599302, -0.05931013, -0.018487109, 0.17155409, 0.05801201, 0.018746931, -0.13813664, -0.06266353, 0.0194727]),
            (&[2, 2, 3], &[0.068756275, -0.06040175, 0.06592484, 0.07337658, -0.0725866, 0.07000772, -0.0049506924, -0.08298929, 0.01326477, -0.08675004, -0.015841791, -0.08429776]),
        ],
    };
}
