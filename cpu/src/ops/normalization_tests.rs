//! LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION. Expected values are worked out by
//! hand in the comments.

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// LRN graph on a float32 input of `dims` with (radius, bias, alpha, beta, axis).
fn lrn_graph(dims: &[u32], radius: i32, p: (f32, f32, f32), axis: Option<i32>) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, dims);
    let r = b.int(radius);
    let bias = b.float(p.0);
    let alpha = b.float(p.1);
    let beta = b.float(p.2);
    let mut ins = vec![x, r, bias, alpha, beta];
    if let Some(a) = axis {
        ins.push(b.int(a));
    }
    let o = b.output(T::TensorFloat32, dims);
    b.op(O::LocalResponseNormalization, &ins, &[o]);
    b.g
}

// ---------------------------------------------------------------- LOCAL_RESPONSE_NORMALIZATION

#[test]
fn lrn_radius_covering_depth_divides_by_the_l2_norm() {
    // Squares sum to 1.21+0.36+0.49+1.44+0.49+0.01 = 4; bias 0, alpha 1, beta 0.5 → x / 2.
    let g = lrn_graph(&[1, 1, 1, 6], 20, (0.0, 1.0, 0.5), None);
    let (out, d) = run_f32(g, &[&[-1.1, 0.6, 0.7, 1.2, -0.7, 0.1]]);
    assert_eq!(d, vec![1, 1, 1, 6]);
    close(&out, &[-0.55, 0.3, 0.35, 0.6, -0.35, 0.05]);
}

#[test]
fn lrn_small_radius_clips_the_window_at_the_edges() {
    // radius 1, bias 1, alpha 1, beta 1 on [1, 2, 3]: windows {1,2}, {1,2,3}, {2,3} have
    // square sums 5, 14, 13, so the outputs are 1/6, 2/15, 3/14.
    let g = lrn_graph(&[3], 1, (1.0, 1.0, 1.0), None);
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0]]);
    close(&out, &[1.0 / 6.0, 2.0 / 15.0, 3.0 / 14.0]);
}

#[test]
fn lrn_radius_zero_uses_only_the_element_itself() {
    // x / (1 + x²)
    let g = lrn_graph(&[1, 2], 0, (1.0, 1.0, 1.0), None);
    let (out, _) = run_f32(g, &[&[2.0, -3.0]]);
    close(&out, &[2.0 / 5.0, -3.0 / 10.0]);
}

#[test]
fn lrn_negative_axis_normalizes_along_that_dimension() {
    // [3, 2] along axis -2 (= 0): column 0 is [1, 2, 3], column 1 is [0, 1, 0].
    // Column 0 as in the clipped-window test; column 1: sums 1, 1, 1 → [0, 1/2, 0].
    let g = lrn_graph(&[3, 2], 1, (1.0, 1.0, 1.0), Some(-2));
    let (out, _) = run_f32(g, &[&[1.0, 0.0, 2.0, 1.0, 3.0, 0.0]]);
    close(&out, &[1.0 / 6.0, 0.0, 2.0 / 15.0, 0.5, 3.0 / 14.0, 0.0]);
}

#[test]
fn lrn_explicit_last_axis_matches_the_default() {
    let g = lrn_graph(&[1, 3], 1, (1.0, 1.0, 1.0), Some(1));
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0]]);
    close(&out, &[1.0 / 6.0, 2.0 / 15.0, 3.0 / 14.0]);
}

#[test]
fn lrn_float16_with_float16_scalars() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat16, &[3]);
    let r = b.int(1);
    let bias = half(&mut b, 1.0);
    let alpha = half(&mut b, 1.0);
    let beta = half(&mut b, 1.0);
    let o = b.output(T::TensorFloat16, &[3]);
    b.op(
        O::LocalResponseNormalization,
        &[x, r, bias, alpha, beta],
        &[o],
    );
    let (out, _) = run_bytes(b.g, &[(f16_bytes(&[1.0, 2.0, 3.0]), vec![])]);
    let got = f16_vals(&out);
    for (g, w) in got.iter().zip([1.0 / 6.0, 2.0 / 15.0, 3.0f32 / 14.0]) {
        assert!((g - w).abs() < 1e-3, "{got:?}");
    }
}

#[test]
fn lrn_refuses_negative_constant_radius() {
    invalid(lrn_graph(&[1, 3], -1, (1.0, 1.0, 1.0), None));
}

#[test]
fn lrn_refuses_constant_axis_out_of_range() {
    invalid(lrn_graph(&[1, 3], 1, (1.0, 1.0, 1.0), Some(2)));
    invalid(lrn_graph(&[1, 3], 1, (1.0, 1.0, 1.0), Some(-3)));
}

#[test]
fn lrn_refuses_rank_above_four() {
    invalid(lrn_graph(&[1, 1, 1, 1, 3], 1, (1.0, 1.0, 1.0), None));
}

#[test]
fn lrn_refuses_float32_scalars_for_float16_input() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat16, &[3]);
    let r = b.int(1);
    let bias = b.float(1.0);
    let alpha = b.float(1.0);
    let beta = b.float(1.0);
    let o = b.output(T::TensorFloat16, &[3]);
    b.op(
        O::LocalResponseNormalization,
        &[x, r, bias, alpha, beta],
        &[o],
    );
    invalid(b.g);
}

#[test]
fn lrn_refuses_wrong_argument_count() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let r = b.int(1);
    let bias = b.float(1.0);
    let o = b.output(T::TensorFloat32, &[3]);
    b.op(O::LocalResponseNormalization, &[x, r, bias], &[o]);
    invalid(b.g);
}

#[test]
fn lrn_refuses_output_of_another_type() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let r = b.int(1);
    let bias = b.float(1.0);
    let alpha = b.float(1.0);
    let beta = b.float(1.0);
    let o = b.output(T::TensorFloat16, &[3]);
    b.op(
        O::LocalResponseNormalization,
        &[x, r, bias, alpha, beta],
        &[o],
    );
    invalid(b.g);
}

#[test]
fn lrn_quant8_input_is_unsupported() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[3]);
    b.q(x, 0.5, 0);
    let r = b.int(1);
    let bias = b.float(1.0);
    let alpha = b.float(1.0);
    let beta = b.float(1.0);
    let o = b.output(T::TensorQuant8Asymm, &[3]);
    b.q(o, 0.5, 0);
    b.op(
        O::LocalResponseNormalization,
        &[x, r, bias, alpha, beta],
        &[o],
    );
    let r = PreparedGraph::new(b.g);
    assert!(
        matches!(r, Err(GraphError::Unsupported { index: 0, .. })),
        "{r:?}"
    );
}

#[test]
fn lrn_negative_radius_given_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let r = b.input(T::Int32, &[]);
    let bias = b.float(1.0);
    let alpha = b.float(1.0);
    let beta = b.float(1.0);
    let o = b.output(T::TensorFloat32, &[3]);
    b.op(
        O::LocalResponseNormalization,
        &[x, r, bias, alpha, beta],
        &[o],
    );
    let e = exec_err(
        b.g,
        &[
            (fb(&[1.0, 2.0, 3.0]), vec![]),
            ((-2i32).to_le_bytes().to_vec(), vec![]),
        ],
    );
    assert!(format!("{e}").contains("radius must be >= 0"), "{e}");
}

// ---------------------------------------------------------------- INSTANCE_NORMALIZATION

/// gamma 2, beta 1, epsilon 3 on a [1, 2, 2, 2] input (NHWC or NCHW).
fn instance_graph(ty: OperandType, nchw: bool) -> Graph {
    let mut b = B::new();
    let dims = [1, 2, 2, 2];
    let x = b.input(ty, &dims);
    let (g, be, e) = if ty == T::TensorFloat16 {
        (half(&mut b, 2.0), half(&mut b, 1.0), half(&mut b, 3.0))
    } else {
        (b.float(2.0), b.float(1.0), b.float(3.0))
    };
    let l = b.boolean(nchw);
    let o = b.output(ty, &dims);
    b.op(O::InstanceNormalization, &[x, g, be, e, l], &[o]);
    b.g
}

// Channel 0 holds [1, 3, 1, 3]: mean 2, variance 1, so (x - 2) · 2 / sqrt(1 + 3) + 1 = x - 1.
// Channel 1 holds [10, 10, 10, 10]: variance 0, every output is beta = 1.

#[test]
fn instance_norm_nhwc_normalizes_each_channel_over_height_and_width() {
    let g = instance_graph(T::TensorFloat32, false);
    let (out, _) = run_f32(g, &[&[1.0, 10.0, 3.0, 10.0, 1.0, 10.0, 3.0, 10.0]]);
    close(&out, &[0.0, 1.0, 2.0, 1.0, 0.0, 1.0, 2.0, 1.0]);
}

#[test]
fn instance_norm_nchw_layout() {
    let g = instance_graph(T::TensorFloat32, true);
    let (out, _) = run_f32(g, &[&[1.0, 3.0, 1.0, 3.0, 10.0, 10.0, 10.0, 10.0]]);
    close(&out, &[0.0, 2.0, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0]);
}

#[test]
fn instance_norm_float16() {
    let g = instance_graph(T::TensorFloat16, false);
    let x = f16_bytes(&[1.0, 10.0, 3.0, 10.0, 1.0, 10.0, 3.0, 10.0]);
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    assert_eq!(f16_vals(&out), vec![0.0, 1.0, 2.0, 1.0, 0.0, 1.0, 2.0, 1.0]);
}

#[test]
fn instance_norm_refuses_non_4d_input() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let g = b.float(1.0);
    let be = b.float(0.0);
    let e = b.float(1.0);
    let l = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[2, 2]);
    b.op(O::InstanceNormalization, &[x, g, be, e, l], &[o]);
    invalid(b.g);
}

#[test]
fn instance_norm_accepts_zero_epsilon() {
    // NNAPI puts no bound on epsilon. [1, 3]: mean 2, variance 1 → [-1, 1].
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 2, 1]);
    let g = b.float(1.0);
    let be = b.float(0.0);
    let e = b.float(0.0);
    let l = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[1, 1, 2, 1]);
    b.op(O::InstanceNormalization, &[x, g, be, e, l], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 3.0]]);
    close(&out, &[-1.0, 1.0]);
}

#[test]
fn instance_norm_refuses_missing_layout() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 2]);
    let g = b.float(1.0);
    let be = b.float(0.0);
    let e = b.float(1.0);
    let o = b.output(T::TensorFloat32, &[1, 1, 1, 2]);
    b.op(O::InstanceNormalization, &[x, g, be, e], &[o]);
    invalid(b.g);
}

#[test]
fn instance_norm_refuses_int32_gamma() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 2]);
    let g = b.int(1);
    let be = b.float(0.0);
    let e = b.float(1.0);
    let l = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[1, 1, 1, 2]);
    b.op(O::InstanceNormalization, &[x, g, be, e, l], &[o]);
    invalid(b.g);
}

#[test]
fn instance_norm_rank_known_only_at_execution_is_checked() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[]);
    let g = b.float(1.0);
    let be = b.float(0.0);
    let e = b.float(1.0);
    let l = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::InstanceNormalization, &[x, g, be, e, l], &[o]);
    let e = exec_err(b.g, &[(fb(&[1.0, 2.0]), vec![2])]);
    assert!(format!("{e}").contains("4-D"), "{e}");
}

#[test]
fn instance_norm_batches_are_normalized_separately() {
    // Batch 0 [1, 3] and batch 1 [10, 14] both become [-1, 1] (gamma 1, beta 0, epsilon 0).
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 1, 2, 1]);
    let g = b.float(1.0);
    let be = b.float(0.0);
    let e = b.float(0.0);
    let l = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[2, 1, 2, 1]);
    b.op(O::InstanceNormalization, &[x, g, be, e, l], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 3.0, 10.0, 14.0]]);
    close(&out, &[-1.0, 1.0, -1.0, 1.0]);
}

#[test]
fn lrn_4d_input_normalizes_along_depth_per_pixel() {
    // Pixel [1, 2]: square sum 5 → [1/√5, 2/√5]; pixel [3, 4]: 25 → [0.6, 0.8].
    let g = lrn_graph(&[1, 1, 2, 2], 1, (0.0, 1.0, 0.5), None);
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    let r5 = 5f32.sqrt();
    close(&out, &[1.0 / r5, 2.0 / r5, 0.6, 0.8]);
}

// ------------------------------------------------ examples of the NNAPI test specifications
// local_response_normalization_v1_2.mod.py: [2, 2, 2, 6] of [-1.1, .6, .7, 1.2, -.7, .1].

const LRN_X: [f32; 6] = [-1.1, 0.6, 0.7, 1.2, -0.7, 0.1];

fn lrn_spec(radius: i32, bias: f32, alpha: f32, want: [f32; 6]) {
    let x: Vec<f32> = LRN_X.iter().copied().cycle().take(48).collect();
    let want: Vec<f32> = want.iter().copied().cycle().take(48).collect();
    let g = lrn_graph(&[2, 2, 2, 6], radius, (bias, alpha, 0.5), Some(-1));
    let (out, _) = run_f32(g, &[&x]);
    close(&out, &want);
}

#[test]
fn spec_lrn_examples() {
    lrn_spec(20, 0.0, 1.0, [-0.55, 0.3, 0.35, 0.6, -0.35, 0.05]);
    lrn_spec(20, 9.0, 4.0, [-0.22, 0.12, 0.14, 0.24, -0.14, 0.02]);
    lrn_spec(
        2,
        9.0,
        4.0,
        [
            -0.264_925_7,
            0.125_108_64,
            0.140_112_13,
            0.267_261_27,
            -0.161_787_55,
            0.024_426_6,
        ],
    );
}

#[test]
fn spec_lrn_along_a_leading_axis() {
    // The spec's "all dims and axis" variant moves the normalized axis: the same values
    // along axis 0 of a [6, 2] tensor.
    let mut x = Vec::new();
    for v in LRN_X {
        x.extend([v, v]);
    }
    let g = lrn_graph(&[6, 2], 2, (9.0, 4.0, 0.5), Some(0));
    let (out, _) = run_f32(g, &[&x]);
    let want = [
        -0.264_925_7,
        0.125_108_64,
        0.140_112_13,
        0.267_261_27,
        -0.161_787_55,
        0.024_426_6,
    ];
    let mut w = Vec::new();
    for v in want {
        w.extend([v, v]);
    }
    close(&out, &w);
}
