//! TRANSPOSE_CONV_2D and GROUPED_CONV_2D. Expected values are worked out by hand in the
//! comments.

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

fn per_channel(b: &mut B, dims: &[u32], v: &[i8], scales: &[f32]) -> u32 {
    let i = b.konst(
        T::TensorQuant8SymmPerChannel,
        dims,
        v.iter().map(|&x| x as u8).collect(),
    );
    b.g.operands[i as usize].channel_quant = Some(ChannelQuant {
        channel_dim: 0,
        scales: scales.to_vec(),
    });
    i
}

fn ints(b: &mut B, v: &[i32]) -> Vec<u32> {
    v.iter().map(|&x| b.int(x)).collect()
}

// ---------------------------------------------------------------- TRANSPOSE_CONV_2D

/// Explicit-padding float32 TRANSPOSE_CONV_2D with pads (l, r, t, b), strides (w, h), act.
#[allow(clippy::too_many_arguments)]
fn tconv_f32(
    in_dims: &[u32],
    filt: (&[u32], &[f32]),
    bias: &[f32],
    pads: [i32; 4],
    strides: [i32; 2],
    act: i32,
    nchw: bool,
    out_dims: &[u32],
) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, in_dims);
    let f = b.f32c(filt.0, filt.1);
    let bi = b.f32c(&[bias.len() as u32], bias);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &pads));
    ins.extend(ints(&mut b, &strides));
    ins.push(b.int(act));
    ins.push(b.boolean(nchw));
    let o = b.output(T::TensorFloat32, out_dims);
    b.op(O::TransposeConv2d, &ins, &[o]);
    b.g
}

#[test]
fn transpose_conv_stride2_places_each_scaled_filter_without_overlap() {
    // Input [[1, 2], [3, 4]], filter [[1, 2], [3, 4]], stride 2: each input pixel v writes
    // v·filter into its own 2×2 block; bias 1.
    let g = tconv_f32(
        &[1, 2, 2, 1],
        (&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]),
        &[1.0],
        [0, 0, 0, 0],
        [2, 2],
        0,
        false,
        &[1, 4, 4, 1],
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(d, vec![1, 4, 4, 1]);
    let want = [
        1.0, 2.0, 2.0, 4.0, 3.0, 4.0, 6.0, 8.0, 3.0, 6.0, 4.0, 8.0, 9.0, 12.0, 12.0, 16.0,
    ]
    .map(|v: f32| v + 1.0);
    close(&out, &want);
}

#[test]
fn transpose_conv_fused_relu6_clamps() {
    let g = tconv_f32(
        &[1, 2, 2, 1],
        (&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]),
        &[1.0],
        [0, 0, 0, 0],
        [2, 2],
        3,
        false,
        &[1, 4, 4, 1],
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    let want = [
        2.0, 3.0, 3.0, 5.0, 4.0, 5.0, 6.0, 6.0, 4.0, 6.0, 5.0, 6.0, 6.0, 6.0, 6.0, 6.0,
    ];
    close(&out, &want);
}

#[test]
fn transpose_conv_stride1_overlapping_windows_sum() {
    // Input [1, 2], filter [1, 1]: [1, 1 + 2, 2].
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [0, 0, 0, 0],
        [1, 1],
        0,
        false,
        &[1, 1, 3, 1],
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0]]);
    close(&out, &[1.0, 3.0, 2.0]);
}

#[test]
fn transpose_conv_left_padding_crops_and_negative_right_padding_extends() {
    // Padding left 1 crops the first column: [3, 2].
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [1, 0, 0, 0],
        [1, 1],
        0,
        false,
        &[],
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0]]);
    assert_eq!(d, vec![1, 1, 2, 1]);
    close(&out, &[3.0, 2.0]);
    // Padding right -1 adds a column nothing reaches: [1, 3, 2, 0].
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [0, -1, 0, 0],
        [1, 1],
        0,
        false,
        &[],
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0]]);
    assert_eq!(d, vec![1, 1, 4, 1]);
    close(&out, &[1.0, 3.0, 2.0, 0.0]);
}

#[test]
fn transpose_conv_nchw_two_output_channels() {
    // Input NCHW [1, 1, 1, 2] = [1, 2]; filter [2, 1, 1, 1] = [1, -1]; bias [0, 10].
    // NHWC result [[1, 9], [2, 8]], NCHW [1, 2, 9, 8].
    let g = tconv_f32(
        &[1, 1, 1, 2],
        (&[2, 1, 1, 1], &[1.0, -1.0]),
        &[0.0, 10.0],
        [0, 0, 0, 0],
        [1, 1],
        0,
        true,
        &[1, 2, 1, 2],
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0]]);
    assert_eq!(d, vec![1, 2, 1, 2]);
    close(&out, &[1.0, 2.0, 9.0, 8.0]);
}

/// Implicit-padding float32 TRANSPOSE_CONV_2D with an output shape constant.
fn tconv_implicit(
    in_dims: &[u32],
    filt: (&[u32], &[f32]),
    shape: &[i32],
    scheme: i32,
    stride: i32,
    nchw: bool,
) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, in_dims);
    let f = b.f32c(filt.0, filt.1);
    let bi = b.f32c(&[1], &[0.0]);
    let s = b.i32c(&[4], shape);
    let mut ins = vec![x, f, bi, s];
    ins.extend(ints(&mut b, &[scheme, stride, stride, 0]));
    ins.push(b.boolean(nchw));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    b.g
}

#[test]
fn transpose_conv_implicit_same_pads_the_tail_to_the_requested_shape() {
    // Output 4 wide with a 3-wide filter and stride 2: tmp = (2 - 1)·2 + 3 = 5, head 0,
    // tail 1. Each input pixel adds its value over a 3×3 block at (2·iy, 2·ix), clipped.
    let g = tconv_implicit(
        &[1, 2, 2, 1],
        (&[1, 3, 3, 1], &[1.0; 9]),
        &[1, 4, 4, 1],
        1,
        2,
        false,
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(d, vec![1, 4, 4, 1]);
    close(
        &out,
        &[
            1.0, 1.0, 3.0, 2.0, 1.0, 1.0, 3.0, 2.0, 4.0, 4.0, 10.0, 6.0, 3.0, 3.0, 7.0, 4.0,
        ],
    );
}

#[test]
fn transpose_conv_implicit_same_reads_nchw_output_shape() {
    // The same as NCHW (one channel, so the data order is unchanged); the shape tensor is
    // [N, C, H, W].
    let g = tconv_implicit(
        &[1, 1, 2, 2],
        (&[1, 3, 3, 1], &[1.0; 9]),
        &[1, 1, 4, 4],
        1,
        2,
        true,
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(d, vec![1, 1, 4, 4]);
    assert_eq!(out[10], 10.0);
    assert_eq!(out[15], 4.0);
}

#[test]
fn transpose_conv_implicit_valid_has_no_padding() {
    // VALID: out = (2 - 1)·1 + 2 = 3 whatever the shape tensor says.
    let g = tconv_implicit(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[1, 1, 3, 1],
        2,
        1,
        false,
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0]]);
    assert_eq!(d, vec![1, 1, 3, 1]);
    close(&out, &[1.0, 3.0, 2.0]);
}

#[test]
fn transpose_conv_float16() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat16, &[1, 1, 2, 1]);
    let f = b.konst(T::TensorFloat16, &[1, 1, 2, 1], f16_bytes(&[1.0, 1.0]));
    let bi = b.konst(T::TensorFloat16, &[1], f16_bytes(&[0.5]));
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat16, &[1, 1, 3, 1]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(f16_bytes(&[1.0, 2.0]), vec![])]);
    assert_eq!(f16_vals(&out), vec![1.5, 3.5, 2.5]);
}

/// Quantized TRANSPOSE_CONV_2D on input [1, 2] (scale 0.5) with a [1, 1] filter (scale 0.25)
/// and the given bias, output scale 0.25, stride 1, no padding.
fn tconv_q(ty: OperandType, in_zp: i32, f_zp: i32, bias: i32, out_zp: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, &[1, 1, 2, 1]);
    b.q(x, 0.5, in_zp);
    let f = q8c(&mut b, ty, &[1, 1, 2, 1], &[4 + f_zp, 4 + f_zp], 0.25, f_zp);
    let bi = b.i32c(&[1], &[bias]);
    b.q(bi, 0.125, 0);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    ins.push(b.boolean(false));
    let o = b.output(ty, &[1, 1, 3, 1]);
    b.q(o, 0.25, out_zp);
    b.op(O::TransposeConv2d, &ins, &[o]);
    b.g
}

#[test]
fn transpose_conv_quant8_asymm_requantizes_exactly() {
    // Centered input [2, 4] times filter [4, 4]: accumulators [8, 24, 16], + bias 4 →
    // [12, 28, 20], × 0.5·0.25/0.25 = 0.5 → [6, 14, 10], + zero point 10.
    let g = tconv_q(T::TensorQuant8Asymm, 100, 128, 4, 10);
    let (out, _) = run_bytes(g, &[(vec![102, 104], vec![])]);
    assert_eq!(out, vec![16, 24, 20]);
}

#[test]
fn transpose_conv_quant8_rounds_ties_up() {
    // Bias 5: [13, 29, 21] × 0.5 = [6.5, 14.5, 10.5] round to [7, 15, 11].
    let g = tconv_q(T::TensorQuant8Asymm, 100, 128, 5, 10);
    let (out, _) = run_bytes(g, &[(vec![102, 104], vec![])]);
    assert_eq!(out, vec![17, 25, 21]);
}

#[test]
fn transpose_conv_quant8_saturates_at_the_type_range() {
    // Zero point 250: [256, 264, 260] saturate to 255.
    let g = tconv_q(T::TensorQuant8Asymm, 100, 128, 4, 250);
    let (out, _) = run_bytes(g, &[(vec![102, 104], vec![])]);
    assert_eq!(out, vec![255, 255, 255]);
}

#[test]
fn transpose_conv_quant8_asymm_signed() {
    let g = tconv_q(T::TensorQuant8AsymmSigned, -28, 0, 4, -118);
    let x = [-26i8, -24].map(|v| v as u8).to_vec();
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    let got: Vec<i8> = out.iter().map(|&v| v as i8).collect();
    assert_eq!(got, vec![-112, -104, -108]);
}

#[test]
fn transpose_conv_per_channel_filter_scales_each_output_channel() {
    // Filter [2, 1, 1, 1] = [4, 2] with scales [0.25, 0.5] (both real 1). Input [1, 2] at
    // scale 0.5 (centered [2, 4]); output scale 0.25, zero point 10.
    // Channel 0: [8, 16] × 0.5 = [4, 8]; channel 1: [4, 8] × 1 = [4, 8].
    for ty in [T::TensorQuant8Asymm, T::TensorQuant8AsymmSigned] {
        let (zp, ozp) = if ty == T::TensorQuant8Asymm {
            (100, 10)
        } else {
            (-28, -118)
        };
        let mut b = B::new();
        let x = b.input(ty, &[1, 1, 2, 1]);
        b.q(x, 0.5, zp);
        let f = per_channel(&mut b, &[2, 1, 1, 1], &[4, 2], &[0.25, 0.5]);
        let bi = b.i32c(&[2], &[0, 0]);
        let mut ins = vec![x, f, bi];
        ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
        ins.push(b.boolean(false));
        let o = b.output(ty, &[1, 1, 2, 2]);
        b.q(o, 0.25, ozp);
        b.op(O::TransposeConv2d, &ins, &[o]);
        let xin = vec![(zp + 2) as u8, (zp + 4) as u8];
        let (out, _) = run_bytes(b.g, &[(xin, vec![])]);
        let want: Vec<u8> = [4, 4, 8, 8].iter().map(|v| (v + ozp) as u8).collect();
        assert_eq!(out, want, "{ty:?}");
    }
}

#[test]
fn transpose_conv_refuses_filter_of_another_float_type() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 2, 1]);
    let f = b.konst(T::TensorFloat16, &[1, 1, 1, 1], f16_bytes(&[1.0]));
    let bi = b.f32c(&[1], &[0.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn transpose_conv_refuses_per_channel_filter_on_another_dimension() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 1, 2, 1]);
    b.q(x, 0.5, 0);
    let f = per_channel(&mut b, &[1, 1, 1, 2], &[1, 1], &[0.5, 0.5]);
    b.g.operands[f as usize].channel_quant = Some(ChannelQuant {
        channel_dim: 3,
        scales: vec![0.5, 0.5],
    });
    let bi = b.i32c(&[1], &[0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorQuant8Asymm, &[]);
    b.q(o, 0.5, 0);
    b.op(O::TransposeConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn transpose_conv_refuses_quantized_bias_that_is_not_int32() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 1, 2, 1]);
    b.q(x, 0.5, 0);
    let f = q8c(&mut b, T::TensorQuant8Asymm, &[1, 1, 1, 1], &[1], 0.5, 0);
    let bi = q8c(&mut b, T::TensorQuant8Asymm, &[1], &[1], 0.25, 0);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorQuant8Asymm, &[]);
    b.q(o, 0.5, 0);
    b.op(O::TransposeConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn transpose_conv_refuses_ten_arguments() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 2, 1]);
    let f = b.f32c(&[1, 1, 1, 1], &[1.0]);
    let bi = b.f32c(&[1], &[0.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn transpose_conv_refuses_constant_zero_stride() {
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [0, 0, 0, 0],
        [0, 1],
        0,
        false,
        &[],
    );
    invalid(g);
}

#[test]
fn transpose_conv_refuses_negative_left_padding_and_bad_activation() {
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [-1, 0, 0, 0],
        [1, 1],
        0,
        false,
        &[],
    );
    invalid(g);
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [0, 0, 0, 0],
        [1, 1],
        4,
        false,
        &[],
    );
    invalid(g);
}

#[test]
fn transpose_conv_refuses_unknown_padding_scheme() {
    invalid(tconv_implicit(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[1, 1, 3, 1],
        3,
        1,
        false,
    ));
}

#[test]
fn transpose_conv_refuses_output_shape_of_three_values() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 2, 1]);
    let f = b.f32c(&[1, 1, 1, 1], &[1.0]);
    let bi = b.f32c(&[1], &[0.0]);
    let s = b.i32c(&[3], &[1, 1, 2]);
    let mut ins = vec![x, f, bi, s];
    ins.extend(ints(&mut b, &[1, 1, 1, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn transpose_conv_padding_larger_than_the_output_fails_at_execution() {
    // Width (2 - 1) + 2 - 2 - 1 = 0.
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [2, 1, 0, 0],
        [1, 1],
        0,
        false,
        &[],
    );
    let e = exec_err(g, &[(fb(&[1.0, 2.0]), vec![])]);
    assert!(format!("{e}").contains("must be > 0"), "{e}");
}

#[test]
fn transpose_conv_filter_depth_mismatch_fails_at_execution() {
    let g = tconv_f32(
        &[1, 1, 1, 2],
        (&[1, 1, 1, 1], &[1.0]),
        &[0.0],
        [0, 0, 0, 0],
        [1, 1],
        0,
        false,
        &[],
    );
    let e = exec_err(g, &[(fb(&[1.0, 2.0]), vec![])]);
    assert!(format!("{e}").contains("filter depth"), "{e}");
}

#[test]
fn transpose_conv_bias_length_mismatch_fails_at_execution() {
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 1, 1], &[1.0]),
        &[0.0, 1.0],
        [0, 0, 0, 0],
        [1, 1],
        0,
        false,
        &[],
    );
    let e = exec_err(g, &[(fb(&[1.0, 2.0]), vec![])]);
    assert!(format!("{e}").contains("bias"), "{e}");
}

#[test]
fn transpose_conv_huge_stride_fails_without_allocating() {
    // (2 - 1) · (2^31 - 1) + 1 columns is beyond the element cap.
    let g = tconv_f32(
        &[1, 1, 2, 1],
        (&[1, 1, 1, 1], &[1.0]),
        &[0.0],
        [0, 0, 0, 0],
        [i32::MAX, 1],
        0,
        false,
        &[],
    );
    let e = exec_err(g, &[(fb(&[1.0, 2.0]), vec![])]);
    assert!(format!("{e}").contains("too large"), "{e}");
}

// ---------------------------------------------------------------- GROUPED_CONV_2D

/// Implicit-padding GROUPED_CONV_2D on float32.
fn grouped_f32(
    in_dims: &[u32],
    filt: (&[u32], &[f32]),
    bias: &[f32],
    scheme: i32,
    groups: i32,
    nchw: bool,
    out_dims: &[u32],
) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, in_dims);
    let f = b.f32c(filt.0, filt.1);
    let bi = b.f32c(&[bias.len() as u32], bias);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[scheme, 1, 1, groups, 0]));
    ins.push(b.boolean(nchw));
    let o = b.output(T::TensorFloat32, out_dims);
    b.op(O::GroupedConv2d, &ins, &[o]);
    b.g
}

#[test]
fn grouped_conv_each_group_sees_only_its_channels() {
    // Input [1, 2, 3, 4], 2 groups of 2 channels; filters [1, 1] and [1, -1], bias [0, 100]:
    // 1 + 2 = 3 and 3 - 4 + 100 = 99.
    let g = grouped_f32(
        &[1, 1, 1, 4],
        (&[2, 1, 1, 2], &[1.0, 1.0, 1.0, -1.0]),
        &[0.0, 100.0],
        2,
        2,
        false,
        &[1, 1, 1, 2],
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    close(&out, &[3.0, 99.0]);
}

#[test]
fn grouped_conv_nchw_layout() {
    let g = grouped_f32(
        &[1, 4, 1, 1],
        (&[2, 1, 1, 2], &[1.0, 1.0, 1.0, -1.0]),
        &[0.0, 100.0],
        2,
        2,
        true,
        &[1, 2, 1, 1],
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    close(&out, &[3.0, 99.0]);
}

/// Pixels (c0, c1): (1, 10), (2, 20), (3, 30), (4, 40); depthwise-like 2 groups of 1 channel
/// with 2×2 filters [1, 1, 1, 1] and [1, 0, 0, 1].
const GX: [f32; 8] = [1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0];
const GF: [f32; 8] = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0];

#[test]
fn grouped_conv_implicit_valid_window() {
    // Channel 0: 1 + 2 + 3 + 4 = 10; channel 1: 10 + 40 = 50.
    let g = grouped_f32(
        &[1, 2, 2, 2],
        (&[2, 2, 2, 1], &GF),
        &[0.0, 0.0],
        2,
        2,
        false,
        &[1, 1, 1, 2],
    );
    let (out, _) = run_f32(g, &[&GX]);
    close(&out, &[10.0, 50.0]);
}

#[test]
fn grouped_conv_implicit_same_pads_bottom_right() {
    // SAME, 2×2 filter, stride 1: padding head 0, tail 1. Channel 0 windows: 10, 2 + 4,
    // 3 + 4, 4; channel 1: 10 + 40, 20, 30, 40.
    let g = grouped_f32(
        &[1, 2, 2, 2],
        (&[2, 2, 2, 1], &GF),
        &[0.0, 0.0],
        1,
        2,
        false,
        &[1, 2, 2, 2],
    );
    let (out, _) = run_f32(g, &[&GX]);
    close(&out, &[10.0, 50.0, 6.0, 20.0, 7.0, 30.0, 4.0, 40.0]);
}

#[test]
fn grouped_conv_explicit_left_padding() {
    // Pads (l 1, r 0, t 0, b 0) with the 2×2 filters: output 1×2. Column 0 sees only input
    // column 0 through taps (0, 1) and (1, 1): ch0 1 + 3 = 4, ch1 0·10 + 1·30 = 30; column 1
    // is the VALID window: 10, 50.
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 2]);
    let f = b.f32c(&[2, 2, 2, 1], &GF);
    let bi = b.f32c(&[2], &[0.0, 0.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[1, 0, 0, 0, 1, 1, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[1, 1, 2, 2]);
    b.op(O::GroupedConv2d, &ins, &[o]);
    let (out, _) = run_f32(b.g, &[&GX]);
    close(&out, &[4.0, 30.0, 10.0, 50.0]);
}

#[test]
fn grouped_conv_float16() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat16, &[1, 1, 1, 4]);
    let f = b.konst(
        T::TensorFloat16,
        &[2, 1, 1, 2],
        f16_bytes(&[1.0, 1.0, 1.0, -1.0]),
    );
    let bi = b.konst(T::TensorFloat16, &[2], f16_bytes(&[0.0, 100.0]));
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[2, 1, 1, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat16, &[1, 1, 1, 2]);
    b.op(O::GroupedConv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(f16_bytes(&[1.0, 2.0, 3.0, 4.0]), vec![])]);
    assert_eq!(f16_vals(&out), vec![3.0, 99.0]);
}

/// Quantized GROUPED_CONV_2D of the first float test: input scale 0.5, filter scale 0.5,
/// bias scale 0.25, output scale 1.
fn grouped_q(ty: OperandType, in_zp: i32, f_zp: i32, out_zp: i32, pc: bool) -> (Graph, Vec<u8>) {
    let mut b = B::new();
    let x = b.input(ty, &[1, 1, 1, 4]);
    b.q(x, 0.5, in_zp);
    let (f, bias) = if pc {
        // Channel 1 at scale 0.25: real [1, -1] is [4, -4]; its bias scale is 0.125.
        let f = per_channel(&mut b, &[2, 1, 1, 2], &[2, 2, 4, -4], &[0.5, 0.25]);
        (f, [0, 800])
    } else {
        let v = [2, 2, 2, -2].map(|v| v + f_zp);
        (q8c(&mut b, ty, &[2, 1, 1, 2], &v, 0.5, f_zp), [0, 400])
    };
    let bi = b.i32c(&[2], &bias);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[2, 1, 1, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(ty, &[1, 1, 1, 2]);
    b.q(o, 1.0, out_zp);
    b.op(O::GroupedConv2d, &ins, &[o]);
    let xin = [2, 4, 6, 8].iter().map(|v| (v + in_zp) as u8).collect();
    (b.g, xin)
}

#[test]
fn grouped_conv_quant8_asymm() {
    // Channel 0: [2, 4]·[2, 2] = 12 × 0.25 = 3; channel 1: [6, 8]·[2, -2] + 400 = 396 × 0.25
    // = 99.
    let (g, x) = grouped_q(T::TensorQuant8Asymm, 0, 128, 0, false);
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    assert_eq!(out, vec![3, 99]);
}

#[test]
fn grouped_conv_quant8_asymm_signed() {
    let (g, x) = grouped_q(T::TensorQuant8AsymmSigned, -10, 0, -100, false);
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    assert_eq!(
        out.iter().map(|&v| v as i8).collect::<Vec<_>>(),
        vec![-97, -1]
    );
}

#[test]
fn grouped_conv_per_channel_filter() {
    // Channel 1: [6, 8]·[4, -4] + 800 = 792 × 0.5·0.25 = 99.
    let (g, x) = grouped_q(T::TensorQuant8Asymm, 0, 0, 0, true);
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    assert_eq!(out, vec![3, 99]);
}

#[test]
fn grouped_conv_refuses_groups_not_dividing_the_output_depth() {
    invalid(grouped_f32(
        &[1, 1, 1, 3],
        (&[2, 1, 1, 1], &[1.0, 1.0]),
        &[0.0, 0.0],
        2,
        3,
        false,
        &[],
    ));
}

#[test]
fn grouped_conv_refuses_zero_groups() {
    invalid(grouped_f32(
        &[1, 1, 1, 2],
        (&[2, 1, 1, 1], &[1.0, 1.0]),
        &[0.0, 0.0],
        2,
        0,
        false,
        &[],
    ));
}

#[test]
fn grouped_conv_refuses_eleven_arguments() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 2]);
    let f = b.f32c(&[2, 1, 1, 1], &[1.0, 1.0]);
    let bi = b.f32c(&[2], &[0.0, 0.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 2, 0]));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::GroupedConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn grouped_conv_refuses_per_channel_filter_for_float_input() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 2]);
    let f = per_channel(&mut b, &[2, 1, 1, 1], &[1, 1], &[0.5, 0.5]);
    let bi = b.f32c(&[2], &[0.0, 0.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[2, 1, 1, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::GroupedConv2d, &ins, &[o]);
    invalid(b.g);
}

#[test]
fn grouped_conv_input_depth_mismatch_fails_at_execution() {
    // Filter depth 1 × 2 groups needs 2 input channels; 4 given.
    let g = grouped_f32(
        &[1, 1, 1, 4],
        (&[2, 1, 1, 1], &[1.0, 1.0]),
        &[0.0, 0.0],
        2,
        2,
        false,
        &[],
    );
    let e = exec_err(g, &[(fb(&[1.0, 2.0, 3.0, 4.0]), vec![])]);
    assert!(format!("{e}").contains("groups"), "{e}");
}

#[test]
fn transpose_conv_batches_are_independent() {
    // Batch 0 [1, 2] → [1, 3, 2]; batch 1 [10, 20] → [10, 30, 20].
    let g = tconv_f32(
        &[2, 1, 2, 1],
        (&[1, 1, 2, 1], &[1.0, 1.0]),
        &[0.0],
        [0, 0, 0, 0],
        [1, 1],
        0,
        false,
        &[2, 1, 3, 1],
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 10.0, 20.0]]);
    close(&out, &[1.0, 3.0, 2.0, 10.0, 30.0, 20.0]);
}

#[test]
fn transpose_conv_quant8_nchw_per_channel() {
    // The per-channel test in NCHW: channel 0 [4, 8], channel 1 [4, 8], plus zero point 10.
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 1, 1, 2]);
    b.q(x, 0.5, 100);
    let f = per_channel(&mut b, &[2, 1, 1, 1], &[4, 2], &[0.25, 0.5]);
    let bi = b.i32c(&[2], &[0, 0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[0, 0, 0, 0, 1, 1, 0]));
    ins.push(b.boolean(true));
    let o = b.output(T::TensorQuant8Asymm, &[1, 2, 1, 2]);
    b.q(o, 0.25, 10);
    b.op(O::TransposeConv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![102, 104], vec![])]);
    assert_eq!(out, vec![14, 18, 14, 18]);
}

#[test]
fn grouped_conv_stride_two_over_two_batches() {
    // Filters [1] (group 0) and [-1] (group 1), VALID, stride 2: columns 0 and 2.
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 1, 4, 2]);
    let f = b.f32c(&[2, 1, 1, 1], &[1.0, -1.0]);
    let bi = b.f32c(&[2], &[0.0, 0.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[2, 2, 2, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[2, 1, 2, 2]);
    b.op(O::GroupedConv2d, &ins, &[o]);
    let x: Vec<f32> = (1..=8).flat_map(|v| [v as f32, 10.0 * v as f32]).collect();
    let (out, _) = run_f32(b.g, &[&x]);
    close(&out, &[1.0, -10.0, 3.0, -30.0, 5.0, -50.0, 7.0, -70.0]);
}

// ------------------------------------------------ examples of the NNAPI test specifications
// The inputs, weights and expected outputs below are the examples of AOSP's
// transpose_conv2d.mod.py and grouped_conv2d.mod.py (V1_2); quantized expectations are the
// float ones divided by the output scale, plus the zero point (none of them is a tie).

/// NHWC `[n, h, w, c]` data to NCHW.
fn to_nchw(v: &[f32], d: [usize; 4]) -> Vec<f32> {
    crate::ops::nhwc_to_nchw(v, &d.map(|x| x as u32)).1
}

const TC1_W: [f32; 18] = [
    1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0,
    18.0,
];
const TC1_OUT: [f32; 50] = [
    -0.5, 0.0, 1.5, 2.0, 5.5, 8.0, 4.5, 6.0, 8.5, 10.0, 5.5, 6.0, 7.5, 8.0, 23.5, 26.0, 16.5, 18.0,
    20.5, 22.0, 14.5, 18.0, 22.5, 26.0, 60.5, 70.0, 40.5, 46.0, 52.5, 58.0, 19.5, 22.0, 25.5, 28.0,
    59.5, 66.0, 34.5, 38.0, 42.5, 46.0, 37.5, 40.0, 43.5, 46.0, 101.5, 108.0, 58.5, 62.0, 66.5,
    70.0,
];

#[test]
fn spec_transpose_conv_valid_stride2_two_channels_both_layouts() {
    for nchw in [false, true] {
        let shape = if nchw { [1, 2, 5, 5] } else { [1, 5, 5, 2] };
        let mut b = B::new();
        let in_dims = if nchw { [1, 1, 2, 2] } else { [1, 2, 2, 1] };
        let x = b.input(T::TensorFloat32, &in_dims);
        let f = b.f32c(&[2, 3, 3, 1], &TC1_W);
        let bi = b.f32c(&[2], &[-1.5, -2.0]);
        let s = b.i32c(&[4], &shape);
        let mut ins = vec![x, f, bi, s];
        ins.extend(ints(&mut b, &[2, 2, 2, 0]));
        ins.push(b.boolean(nchw));
        let o = b.output(T::TensorFloat32, &[]);
        b.op(O::TransposeConv2d, &ins, &[o]);
        let (out, d) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
        let want = if nchw {
            to_nchw(&TC1_OUT, [1, 5, 5, 2])
        } else {
            TC1_OUT.to_vec()
        };
        assert_eq!(d, shape.map(|v| v as u32).to_vec());
        close(&out, &want);
    }
}

#[test]
fn spec_transpose_conv_quant8_with_multiplier_above_one_saturates() {
    // Input (0.5, 100), weights (0.5, 128), bias 0.25, output (0.1, 80): multiplier 2.5.
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 2, 2, 1]);
    b.q(x, 0.5, 100);
    let wq: Vec<i32> = TC1_W.iter().map(|&w| 128 + (w * 2.0) as i32).collect();
    let f = q8c(&mut b, T::TensorQuant8Asymm, &[2, 3, 3, 1], &wq, 0.5, 128);
    let bi = b.i32c(&[2], &[-6, -8]);
    b.q(bi, 0.25, 0);
    let s = b.i32c(&[4], &[1, 5, 5, 2]);
    let mut ins = vec![x, f, bi, s];
    ins.extend(ints(&mut b, &[2, 2, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorQuant8Asymm, &[1, 5, 5, 2]);
    b.q(o, 0.1, 80);
    b.op(O::TransposeConv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![102, 104, 106, 108], vec![])]);
    let want: Vec<u8> = TC1_OUT
        .iter()
        .map(|&v| (80.0 + v * 10.0).round().clamp(0.0, 255.0) as u8)
        .collect();
    assert_eq!(out, want);
}

/// TEST 2 of the spec: SAME with stride 3 (padding head 1, tail 1 across the width), RELU.
fn spec_tc2(ty: OperandType) -> Graph {
    let w = [9.0, 5.0, 6.0, 9.0, 8.0, 5.0, 3.0, 1.0, 4.0];
    let mut b = B::new();
    let x = b.input(ty, &[1, 1, 2, 1]);
    let (f, bi) = if ty == T::TensorFloat32 {
        (b.f32c(&[1, 3, 3, 1], &w), b.f32c(&[1], &[-1000.0]))
    } else {
        b.q(x, 2.0, 0);
        let wq: Vec<i32> = w.iter().map(|&v: &f32| 128 + (v * 4.0) as i32).collect();
        let f = q8c(&mut b, ty, &[1, 3, 3, 1], &wq, 0.25, 128);
        let bi = b.i32c(&[1], &[-2000]);
        (f, b.q(bi, 0.5, 0))
    };
    let s = b.i32c(&[4], &[1, 3, 4, 1]);
    let mut ins = vec![x, f, bi, s];
    ins.extend(ints(&mut b, &[1, 3, 3, 1]));
    ins.push(b.boolean(false));
    let o = b.output(ty, &[1, 3, 4, 1]);
    if ty != T::TensorFloat32 {
        b.q(o, 20.0, 50);
    }
    b.op(O::TransposeConv2d, &ins, &[o]);
    b.g
}

const TC2_OUT: [f32; 12] = [
    500.0, 800.0, 3500.0, 1500.0, 1400.0, 500.0, 3500.0, 3000.0, 0.0, 200.0, 500.0, 0.0,
];

#[test]
fn spec_transpose_conv_same_stride3_relu() {
    let (out, _) = run_f32(spec_tc2(T::TensorFloat32), &[&[300.0, 500.0]]);
    close(&out, &TC2_OUT);
}

#[test]
fn spec_transpose_conv_same_stride3_relu_quant8() {
    let (out, _) = run_bytes(spec_tc2(T::TensorQuant8Asymm), &[(vec![150, 250], vec![])]);
    let want: Vec<u8> = TC2_OUT.iter().map(|&v| (50.0 + v / 20.0) as u8).collect();
    assert_eq!(out, want);
}

/// The 1..=32 input `[1, 4, 4, 2]` and 1..=18 filter `[1, 3, 3, 2]` of spec tests 3 to 5.
fn spec_tc_4x4(tail: &[i32], shape: Option<[i32; 4]>) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 4, 4, 2]);
    let w: Vec<f32> = (1..=18).map(|v| v as f32).collect();
    let f = b.f32c(&[1, 3, 3, 2], &w);
    let bi = b.f32c(&[1], &[0.0]);
    let mut ins = vec![x, f, bi];
    if let Some(s) = shape {
        ins.push(b.i32c(&[4], &s));
    }
    ins.extend(ints(&mut b, tail));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    b.g
}

fn ramp32() -> Vec<f32> {
    (1..=32).map(|v| v as f32).collect()
}

#[test]
fn spec_transpose_conv_same_stride1_two_input_channels() {
    let g = spec_tc_4x4(&[1, 1, 1, 0], Some([1, 4, 4, 1]));
    let (out, d) = run_f32(g, &[&ramp32()]);
    assert_eq!(d, vec![1, 4, 4, 1]);
    close(
        &out,
        &[
            184.0, 412.0, 568.0, 528.0, 678.0, 1347.0, 1689.0, 1434.0, 1494.0, 2715.0, 3057.0,
            2442.0, 1968.0, 3352.0, 3652.0, 2760.0,
        ],
    );
}

#[test]
fn spec_transpose_conv_valid_stride1_grows_by_the_filter() {
    let g = spec_tc_4x4(&[2, 1, 1, 0], Some([1, 6, 6, 1]));
    let (out, d) = run_f32(g, &[&ramp32()]);
    assert_eq!(d, vec![1, 6, 6, 1]);
    close(
        &out,
        &[
            5.0, 22.0, 59.0, 101.0, 114.0, 83.0, 52.0, 184.0, 412.0, 568.0, 528.0, 344.0, 237.0,
            678.0, 1347.0, 1689.0, 1434.0, 879.0, 597.0, 1494.0, 2715.0, 3057.0, 2442.0, 1431.0,
            856.0, 1968.0, 3352.0, 3652.0, 2760.0, 1548.0, 689.0, 1534.0, 2543.0, 2729.0, 2010.0,
            1103.0,
        ],
    );
}

#[test]
fn spec_transpose_conv_explicit_asymmetric_padding() {
    // Pads left 1, right 2, top 2, bottom 1.
    let g = spec_tc_4x4(&[1, 2, 2, 1, 1, 1, 0], None);
    let (out, d) = run_f32(g, &[&ramp32()]);
    assert_eq!(d, vec![1, 3, 3, 1]);
    close(
        &out,
        &[
            678.0, 1347.0, 1689.0, 1494.0, 2715.0, 3057.0, 1968.0, 3352.0, 3652.0,
        ],
    );
}

#[test]
fn spec_transpose_conv_same_stride2_one_by_one_filter_has_negative_tail() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
    let f = b.f32c(&[1, 1, 1, 1], &[2.0]);
    let bi = b.f32c(&[1], &[0.0]);
    let s = b.i32c(&[4], &[1, 4, 4, 1]);
    let mut ins = vec![x, f, bi, s];
    ins.extend(ints(&mut b, &[1, 2, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[1, 4, 4, 1]);
    b.op(O::TransposeConv2d, &ins, &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
    close(
        &out,
        &[
            2.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 6.0, 0.0, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
    );
}

const GC2_X: [f32; 12] = [1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 1.0, 2.0, 3.0, 3.0, 3.0];
const GC2_W: [f32; 12] = [
    100.0, 20.0, 1.0, 200.0, 10.0, 2.0, 200.0, 30.0, 1.0, 100.0, 20.0, 3.0,
];
const GC2_OUT: [f32; 12] = [
    567.0, -873.0, 1480.0, -160.0, 608.0, -840.0, 1370.0, -10.0, 543.0, -907.0, 760.0, -310.0,
];

/// Spec TEST 2: [1, 3, 2, 2] input, 2 groups, 2×3 filters, SAME, stride 1.
fn spec_gc2(ty: OperandType, nchw: bool) -> Graph {
    let mut b = B::new();
    let dims = if nchw { [1, 2, 3, 2] } else { [1, 3, 2, 2] };
    let x = b.input(ty, &dims);
    let (f, bi) = if ty == T::TensorFloat32 {
        (
            b.f32c(&[2, 2, 3, 1], &GC2_W),
            b.f32c(&[2], &[500.0, -1000.0]),
        )
    } else {
        b.q(x, 0.25, 128);
        let wq: Vec<i32> = GC2_W.iter().map(|&v| v as i32).collect();
        let f = q8c(&mut b, ty, &[2, 2, 3, 1], &wq, 1.0, 0);
        let bi = b.i32c(&[2], &[2000, -4000]);
        (f, b.q(bi, 0.25, 0))
    };
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[1, 1, 1, 2, 0]));
    ins.push(b.boolean(nchw));
    let o = b.output(ty, &dims);
    if ty != T::TensorFloat32 {
        b.q(o, 10.0, 100);
    }
    b.op(O::GroupedConv2d, &ins, &[o]);
    b.g
}

#[test]
fn spec_grouped_conv_same_two_groups_both_layouts() {
    let (out, _) = run_f32(spec_gc2(T::TensorFloat32, false), &[&GC2_X]);
    close(&out, &GC2_OUT);
    let x = to_nchw(&GC2_X, [1, 3, 2, 2]);
    let (out, _) = run_f32(spec_gc2(T::TensorFloat32, true), &[&x]);
    close(&out, &to_nchw(&GC2_OUT, [1, 3, 2, 2]));
}

#[test]
fn spec_grouped_conv_same_two_groups_quant8() {
    let x: Vec<u8> = GC2_X.iter().map(|&v| (128.0 + v * 4.0) as u8).collect();
    let (out, _) = run_bytes(spec_gc2(T::TensorQuant8Asymm, false), &[(x, vec![])]);
    let want: Vec<u8> = GC2_OUT
        .iter()
        .map(|&v| (100.0 + v / 10.0).round() as u8)
        .collect();
    assert_eq!(out, want);
}

#[test]
fn spec_grouped_conv_three_groups_of_pointwise_filters() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 9]);
    let w = [
        1.0, 2.0, 3.0, 2.0, 1.0, 0.0, 2.0, 3.0, 3.0, 6.0, 6.0, 6.0, 9.0, 8.0, 5.0, 2.0, 1.0, 1.0,
    ];
    let f = b.f32c(&[6, 1, 1, 3], &w);
    let bi = b.f32c(&[6], &[10.0, -20.0, 30.0, -40.0, 50.0, -60.0]);
    let mut ins = vec![x, f, bi];
    ins.extend(ints(&mut b, &[1, 1, 1, 3, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorFloat32, &[1, 2, 2, 6]);
    b.op(O::GroupedConv2d, &ins, &[o]);
    let xin = [
        1.0, 2.0, 3.0, 4.0, 55.0, 4.0, 3.0, 2.0, 1.0, 5.0, 4.0, 3.0, 2.0, 11.0, 2.0, 3.0, 4.0, 5.0,
        2.0, 3.0, 2.0, 3.0, 22.0, 3.0, 2.0, 3.0, 2.0, 1.0, 0.0, 2.0, 1.0, 33.0, 1.0, 2.0, 0.0, 1.0,
    ];
    let (out, _) = run_f32(b.g, &[&xin]);
    close(
        &out,
        &[
            24.0, -16.0, 215.0, 338.0, 98.0, -51.0, 32.0, -6.0, 73.0, 50.0, 134.0, -45.0, 24.0,
            -13.0, 111.0, 128.0, 102.0, -51.0, 17.0, -18.0, 134.0, 170.0, 73.0, -55.0,
        ],
    );
}

#[test]
fn spec_transpose_conv_per_channel_quant8() {
    // Input (0.25, 100); filter scales [0.25, 0.5] (channel 0 weights / 0.25, channel 1
    // weights / 0.5, all exact); bias scales [0.0625, 0.125]; output (0.5, 80).
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 2, 2, 1]);
    b.q(x, 0.25, 100);
    let fq: Vec<i8> = TC1_W
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            if i < 9 {
                (w * 4.0) as i8
            } else {
                (w * 2.0) as i8
            }
        })
        .collect();
    let f = per_channel(&mut b, &[2, 3, 3, 1], &fq, &[0.25, 0.5]);
    let bi = b.i32c(&[2], &[-24, -16]);
    let s = b.i32c(&[4], &[1, 5, 5, 2]);
    let mut ins = vec![x, f, bi, s];
    ins.extend(ints(&mut b, &[2, 2, 2, 0]));
    ins.push(b.boolean(false));
    let o = b.output(T::TensorQuant8Asymm, &[1, 5, 5, 2]);
    b.q(o, 0.5, 80);
    b.op(O::TransposeConv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![104, 108, 112, 116], vec![])]);
    let want: Vec<u8> = TC1_OUT
        .iter()
        .map(|&v| (80.0 + 2.0 * v).clamp(0.0, 255.0) as u8)
        .collect();
    assert_eq!(out, want);
}
