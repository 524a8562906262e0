//! RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR. Expected values are worked out by hand in the
//! comments.

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// Size argument: INT32 extent or scale.
#[derive(Clone, Copy)]
enum Sz {
    I(i32, i32),
    F(f32, f32),
    H(f32, f32),
}

/// A resize graph: `flags` = (layout, align_corners, half_pixel_centers), each omitted when
/// None (trailing only).
fn resize(
    op: OperationType,
    ty: OperandType,
    in_dims: &[u32],
    sz: Sz,
    flags: &[bool],
    out_dims: &[u32],
    q: Option<(f32, i32, f32, i32)>,
) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, in_dims);
    let (w, h) = match sz {
        Sz::I(w, h) => (b.int(w), b.int(h)),
        Sz::F(w, h) => (b.float(w), b.float(h)),
        Sz::H(w, h) => (half(&mut b, w), half(&mut b, h)),
    };
    let mut ins = vec![x, w, h];
    for &f in flags {
        ins.push(b.boolean(f));
    }
    let o = b.output(ty, out_dims);
    if let Some((s, z, os, oz)) = q {
        b.q(x, s, z);
        b.q(o, os, oz);
    }
    b.op(op, &ins, &[o]);
    b.g
}

const NN: OperationType = O::ResizeNearestNeighbor;
const BL: OperationType = O::ResizeBilinear;

// ---------------------------------------------------------------- RESIZE_NEAREST_NEIGHBOR

#[test]
fn nearest_downscale_takes_every_other_pixel() {
    // Scale 2: rows and columns 0 and 2 of a 4×4 ramp.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 4, 4, 1],
        Sz::I(2, 2),
        &[false],
        &[1, 2, 2, 1],
        None,
    );
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let (out, _) = run_f32(g, &[&x]);
    assert_eq!(out, vec![0.0, 2.0, 8.0, 10.0]);
}

#[test]
fn nearest_upscale_floors_the_source_coordinate() {
    // Scale 2/3: output 0, 1, 2 read input floor(0), floor(0.67), floor(1.33) = 0, 0, 1.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        None,
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(out, vec![1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0]);
}

#[test]
fn nearest_align_corners_rounds_half_away_from_zero() {
    // Scale 1/2: round(0), round(0.5), round(1) = 0, 1, 1.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false, true],
        &[1, 3, 3, 1],
        None,
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(out, vec![1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 3.0, 4.0, 4.0]);
}

#[test]
fn nearest_half_pixel_centers_shift_the_sample() {
    // Width 3 → 2, scale 1.5: plain floor(0), floor(1.5) = 0, 1; half-pixel floor(0.75),
    // floor(2.25) = 0, 2.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 1, 3, 1],
        Sz::I(2, 1),
        &[false, false, false],
        &[1, 1, 2, 1],
        None,
    );
    let (out, _) = run_f32(g, &[&[5.0, 6.0, 7.0]]);
    assert_eq!(out, vec![5.0, 6.0]);
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 1, 3, 1],
        Sz::I(2, 1),
        &[false, false, true],
        &[1, 1, 2, 1],
        None,
    );
    let (out, _) = run_f32(g, &[&[5.0, 6.0, 7.0]]);
    assert_eq!(out, vec![5.0, 7.0]);
}

#[test]
fn nearest_nchw_layout() {
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 2],
        Sz::I(3, 3),
        &[true],
        &[1, 2, 3, 3],
        None,
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]);
    assert_eq!(
        out,
        vec![
            1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 5.0, 6.0, 5.0, 5.0, 6.0, 7.0, 7.0,
            8.0
        ]
    );
}

#[test]
fn nearest_scale_form_floors_the_output_extent() {
    // Width 2 × 1.5 = 3, height 2 × 1.0 = 2.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::F(1.5, 1.0),
        &[false],
        &[],
        None,
    );
    let (out, d) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(d, vec![1, 2, 3, 1]);
    assert_eq!(out, vec![1.0, 1.0, 2.0, 3.0, 3.0, 4.0]);
}

#[test]
fn nearest_float16_with_float16_scales() {
    let g = resize(
        NN,
        T::TensorFloat16,
        &[1, 2, 2, 1],
        Sz::H(1.5, 1.0),
        &[false],
        &[],
        None,
    );
    let (out, d) = run_bytes(g, &[(f16_bytes(&[1.0, 2.0, 3.0, 4.0]), vec![])]);
    assert_eq!(d, vec![1, 2, 3, 1]);
    assert_eq!(f16_vals(&out), vec![1.0, 1.0, 2.0, 3.0, 3.0, 4.0]);
}

#[test]
fn nearest_quant8_asymm_and_signed_copy_values() {
    let g = resize(
        NN,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        Some((0.5, 3, 0.5, 3)),
    );
    let (out, _) = run_bytes(g, &[(vec![10, 20, 30, 40], vec![])]);
    assert_eq!(out, vec![10, 10, 20, 10, 10, 20, 30, 30, 40]);
    let g = resize(
        NN,
        T::TensorQuant8AsymmSigned,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        Some((0.5, -3, 0.5, -3)),
    );
    let x = [-10i8, 20, -30, 40].map(|v| v as u8).to_vec();
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    let got: Vec<i8> = out.iter().map(|&v| v as i8).collect();
    assert_eq!(got, vec![-10, -10, 20, -10, -10, 20, -30, -30, 40]);
}

#[test]
fn nearest_refuses_float32_scales_for_float16_input() {
    invalid(resize(
        NN,
        T::TensorFloat16,
        &[1, 2, 2, 1],
        Sz::F(1.5, 1.0),
        &[false],
        &[],
        None,
    ));
}

#[test]
fn nearest_refuses_float16_scales_for_float32_input() {
    invalid(resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::H(1.5, 1.0),
        &[false],
        &[],
        None,
    ));
}

#[test]
fn nearest_refuses_missing_layout() {
    invalid(resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[],
        &[],
        None,
    ));
}

#[test]
fn nearest_refuses_output_quantization_different_from_input() {
    invalid(resize(
        NN,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[],
        Some((0.5, 3, 0.25, 3)),
    ));
}

#[test]
fn nearest_refuses_align_corners_with_half_pixel_centers() {
    invalid(resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false, true, true],
        &[],
        None,
    ));
}

#[test]
fn nearest_refuses_non_positive_constant_size_or_scale() {
    invalid(resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(0, 3),
        &[false],
        &[],
        None,
    ));
    invalid(resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::F(1.0, -2.0),
        &[false],
        &[],
        None,
    ));
}

#[test]
fn nearest_refuses_int32_input_and_non_4d_input() {
    invalid(resize(
        NN,
        T::TensorInt32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[],
        None,
    ));
    invalid(resize(
        NN,
        T::TensorFloat32,
        &[2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[],
        None,
    ));
}

#[test]
fn nearest_align_and_half_pixel_given_at_execution_fail() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 1]);
    let w = b.int(2);
    let h = b.int(2);
    let l = b.boolean(false);
    let al = b.input(T::Bool, &[]);
    let hp = b.input(T::Bool, &[]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(NN, &[x, w, h, l, al, hp], &[o]);
    let e = exec_err(
        b.g,
        &[(fb(&[1.0]), vec![]), (vec![1], vec![]), (vec![1], vec![])],
    );
    assert!(format!("{e}").contains("cannot both be true"), "{e}");
}

#[test]
fn nearest_scale_giving_an_empty_output_fails_at_execution() {
    // 2 × 0.25 = 0.5 floors to 0.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::F(0.25, 1.0),
        &[false],
        &[],
        None,
    );
    let e = exec_err(g, &[(fb(&[1.0, 2.0, 3.0, 4.0]), vec![])]);
    assert!(format!("{e}").contains("must be >= 1"), "{e}");
}

// ---------------------------------------------------------------- RESIZE_BILINEAR

#[test]
fn bilinear_nchw_interpolates_each_channel() {
    // Channel 0 [[1, 2], [3, 4]] to 3×3 at scale 2/3 (see the NHWC test in tests.rs);
    // channel 1 is twice channel 0.
    let g = resize(
        BL,
        T::TensorFloat32,
        &[1, 2, 2, 2],
        Sz::I(3, 3),
        &[true],
        &[1, 2, 3, 3],
        None,
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0, 2.0, 4.0, 6.0, 8.0]]);
    let c0 = [
        1.0,
        5.0 / 3.0,
        2.0,
        7.0 / 3.0,
        3.0,
        10.0 / 3.0,
        3.0,
        11.0 / 3.0,
        4.0,
    ];
    let want: Vec<f32> = c0
        .iter()
        .copied()
        .chain(c0.iter().map(|v| v * 2.0))
        .collect();
    close(&out, &want);
}

#[test]
fn bilinear_float16_accepts_float16_scales() {
    // The old check refused FLOAT16 scales; NNAPI requires them for TENSOR_FLOAT16.
    let g = resize(
        BL,
        T::TensorFloat16,
        &[1, 2, 2, 1],
        Sz::H(2.0, 1.0),
        &[],
        &[],
        None,
    );
    let (out, d) = run_bytes(g, &[(f16_bytes(&[1.0, 2.0, 3.0, 4.0]), vec![])]);
    assert_eq!(d, vec![1, 2, 4, 1]);
    assert_eq!(f16_vals(&out), vec![1.0, 1.5, 2.0, 2.0, 3.0, 3.5, 4.0, 4.0]);
}

#[test]
fn bilinear_float16_with_int32_sizes() {
    let g = resize(
        BL,
        T::TensorFloat16,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        None,
    );
    let (out, _) = run_bytes(g, &[(f16_bytes(&[1.0, 2.0, 3.0, 4.0]), vec![])]);
    let want = [
        1.0,
        5.0 / 3.0,
        2.0,
        7.0 / 3.0,
        3.0,
        10.0 / 3.0,
        3.0,
        11.0 / 3.0,
        4.0,
    ];
    for (g, w) in f16_vals(&out).iter().zip(want) {
        assert!((g - w).abs() < 2e-3, "{g} vs {w}");
    }
}

#[test]
fn bilinear_quant8_rounds_the_interpolation() {
    // [[10, 20], [30, 40]] to 3×3: 16.67 → 17, 23.33 → 23, 33.33 → 33, 36.67 → 37.
    let g = resize(
        BL,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        Some((0.5, 0, 0.5, 0)),
    );
    let (out, _) = run_bytes(g, &[(vec![10, 20, 30, 40], vec![])]);
    assert_eq!(out, vec![10, 17, 20, 23, 30, 33, 30, 37, 40]);
}

#[test]
fn bilinear_quant8_signed() {
    // [[-40, -20], [0, 20]]: row 0 [-40, -26.67, -20], row 1 [-13.33, 0, 6.67],
    // row 2 [0, 13.33, 20].
    let g = resize(
        BL,
        T::TensorQuant8AsymmSigned,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        Some((0.5, 0, 0.5, 0)),
    );
    let x = [-40i8, -20, 0, 20].map(|v| v as u8).to_vec();
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    let got: Vec<i8> = out.iter().map(|&v| v as i8).collect();
    assert_eq!(got, vec![-40, -27, -20, -13, 0, 7, 0, 13, 20]);
}

#[test]
fn bilinear_refuses_float32_scales_for_float16_input() {
    invalid(resize(
        BL,
        T::TensorFloat16,
        &[1, 2, 2, 1],
        Sz::F(2.0, 1.0),
        &[],
        &[],
        None,
    ));
}

#[test]
fn bilinear_refuses_mixed_size_types() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
    let w = b.int(3);
    let h = b.float(1.5);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(BL, &[x, w, h], &[o]);
    invalid(b.g);
}

#[test]
fn bilinear_refuses_output_quantization_different_from_input() {
    invalid(resize(
        BL,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[],
        &[],
        Some((0.5, 0, 0.5, 1)),
    ));
}

#[test]
fn bilinear_refuses_seven_arguments_and_both_flags() {
    invalid(resize(
        BL,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false, false, false, false],
        &[],
        None,
    ));
    invalid(resize(
        BL,
        T::TensorFloat32,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false, true, true],
        &[],
        None,
    ));
}

#[test]
fn bilinear_size_given_at_execution_must_be_positive() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 1]);
    let w = b.input(T::Int32, &[]);
    let h = b.int(1);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(BL, &[x, w, h], &[o]);
    let e = exec_err(
        b.g,
        &[(fb(&[1.0]), vec![]), (0i32.to_le_bytes().to_vec(), vec![])],
    );
    assert!(format!("{e}").contains("output width must be > 0"), "{e}");
}

#[test]
fn nearest_huge_output_size_fails_without_allocating() {
    // 2^20 × 2^20 pixels is beyond the element cap.
    let g = resize(
        NN,
        T::TensorFloat32,
        &[1, 1, 1, 1],
        Sz::I(1 << 20, 1 << 20),
        &[false],
        &[],
        None,
    );
    let e = exec_err(g, &[(fb(&[1.0]), vec![])]);
    assert!(format!("{e}").contains("too large"), "{e}");
}

#[test]
fn nearest_batches_are_resized_separately() {
    let g = resize(
        NN,
        T::TensorFloat32,
        &[2, 1, 1, 1],
        Sz::I(2, 2),
        &[false],
        &[2, 2, 2, 1],
        None,
    );
    let (out, _) = run_f32(g, &[&[1.0, 2.0]]);
    assert_eq!(out, vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
}

// ------------------------------------------------ examples of the NNAPI test specifications
// Inputs and expected outputs of AOSP's resize_nearest_neighbor_v1_3.mod.py.

#[test]
fn spec_nearest_half_pixel_centers_and_align_corners_examples() {
    type Case = (
        &'static [u32],
        (i32, i32),
        bool,
        bool,
        &'static [f32],
        &'static [f32],
    );
    let ramp16: &[f32] = &[
        1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0,
    ];
    let q4: &[f32] = &[1.0, 2.0, 3.0, 4.0];
    let cases: [Case; 12] = [
        (
            &[1, 2, 5, 1],
            (2, 2),
            false,
            true,
            &[1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            &[2.0, 4.0, 2.0, 4.0],
        ),
        (&[1, 2, 2, 1], (1, 1), false, true, q4, &[4.0]),
        (
            &[1, 2, 2, 1],
            (3, 3),
            false,
            true,
            q4,
            &[1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 3.0, 4.0, 4.0],
        ),
        (
            &[1, 2, 2, 1],
            (5, 2),
            false,
            true,
            q4,
            &[1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 4.0],
        ),
        (
            &[1, 4, 4, 1],
            (3, 3),
            false,
            true,
            ramp16,
            &[1.0, 3.0, 4.0, 9.0, 11.0, 12.0, 13.0, 15.0, 16.0],
        ),
        (
            &[1, 2, 2, 1],
            (2, 5),
            false,
            true,
            q4,
            &[1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0],
        ),
        (
            &[1, 2, 2, 1],
            (4, 4),
            false,
            true,
            q4,
            &[
                1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0,
            ],
        ),
        (&[1, 2, 2, 1], (1, 1), true, false, q4, &[1.0]),
        (
            &[1, 2, 2, 1],
            (3, 3),
            true,
            false,
            q4,
            &[1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 3.0, 4.0, 4.0],
        ),
        (
            &[1, 3, 3, 1],
            (2, 2),
            true,
            false,
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            &[1.0, 3.0, 7.0, 9.0],
        ),
        (
            &[1, 4, 4, 1],
            (3, 3),
            true,
            false,
            ramp16,
            &[1.0, 3.0, 4.0, 9.0, 11.0, 12.0, 13.0, 15.0, 16.0],
        ),
        (
            &[2, 2, 2, 2],
            (3, 3),
            false,
            true,
            &[
                1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 8.0, 8.0,
            ],
            &[
                1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0,
                4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 6.0, 6.0, 7.0, 7.0, 8.0, 8.0, 8.0, 8.0, 7.0, 7.0,
                8.0, 8.0, 8.0, 8.0,
            ],
        ),
    ];
    for (i, (dims, (w, h), align, half, x, want)) in cases.into_iter().enumerate() {
        let g = resize(
            NN,
            T::TensorFloat32,
            dims,
            Sz::I(w, h),
            &[false, align, half],
            &[],
            None,
        );
        let (out, _) = run_f32(g, &[x]);
        assert_eq!(out, want.to_vec(), "case {i}");
    }
}

#[test]
fn spec_nearest_default_values_scale_form_and_quant8() {
    // Scales 1.6 × 1.8 on 2×2 give 3×3; the sampling scale is then 2/3.
    let x = [
        1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 8.0, 8.0,
    ];
    let want = [
        1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 4.0, 4.0,
        5.0, 5.0, 5.0, 5.0, 6.0, 6.0, 5.0, 5.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 7.0, 7.0, 8.0, 8.0,
    ];
    let g = resize(
        NN,
        T::TensorFloat32,
        &[2, 2, 2, 2],
        Sz::F(1.6, 1.8),
        &[false, false, false],
        &[],
        None,
    );
    let (out, d) = run_f32(g, &[&x]);
    assert_eq!(d, vec![2, 3, 3, 2]);
    assert_eq!(out, want.to_vec());
    // quant8 (0.25, 100): q = 100 + 4·v.
    let g = resize(
        NN,
        T::TensorQuant8Asymm,
        &[2, 2, 2, 2],
        Sz::I(3, 3),
        &[false, false, false],
        &[],
        Some((0.25, 100, 0.25, 100)),
    );
    let xq: Vec<u8> = x.iter().map(|&v| (100.0 + 4.0 * v) as u8).collect();
    let (out, _) = run_bytes(g, &[(xq, vec![])]);
    let wq: Vec<u8> = want.iter().map(|&v| (100.0 + 4.0 * v) as u8).collect();
    assert_eq!(out, wq);
}

// resize_bilinear_v1_2.mod.py examples.

const BL1_OUT: [f32; 9] = [
    1.0,
    1.0,
    1.0,
    1.666_666_7,
    1.666_666_7,
    1.666_666_7,
    2.0,
    2.0,
    2.0,
];
const BL2_X: [f32; 8] = [3.0, 4.0, 6.0, 10.0, 9.0, 10.0, 12.0, 16.0];
const BL2_OUT: [f32; 18] = [
    3.0, 4.0, 5.0, 8.0, 6.0, 10.0, 7.0, 8.0, 9.0, 12.0, 10.0, 14.0, 9.0, 10.0, 11.0, 14.0, 12.0,
    16.0,
];

#[test]
fn spec_bilinear_sizes_and_scales_float32_and_float16() {
    for sz in [Sz::I(3, 3), Sz::F(1.5, 1.5), Sz::F(1.8, 1.8)] {
        let g = resize(
            BL,
            T::TensorFloat32,
            &[1, 2, 2, 1],
            sz,
            &[],
            &[1, 3, 3, 1],
            None,
        );
        let (out, _) = run_f32(g, &[&[1.0, 1.0, 2.0, 2.0]]);
        close(&out, &BL1_OUT);
    }
    let g = resize(
        BL,
        T::TensorFloat16,
        &[1, 2, 2, 1],
        Sz::H(1.5, 1.5),
        &[false],
        &[1, 3, 3, 1],
        None,
    );
    let (out, _) = run_bytes(g, &[(f16_bytes(&[1.0, 1.0, 2.0, 2.0]), vec![])]);
    for (g, w) in f16_vals(&out).iter().zip(BL1_OUT) {
        assert!((g - w).abs() < 1e-3, "{g} vs {w}");
    }
}

#[test]
fn spec_bilinear_two_channels_both_layouts() {
    for sz in [Sz::I(3, 3), Sz::F(1.6, 1.6)] {
        let g = resize(
            BL,
            T::TensorFloat32,
            &[1, 2, 2, 2],
            sz,
            &[false],
            &[1, 3, 3, 2],
            None,
        );
        let (out, _) = run_f32(g, &[&BL2_X]);
        close(&out, &BL2_OUT);
    }
    // NCHW: channel 0 [3, 6, 9, 12], channel 1 [4, 10, 10, 16].
    let g = resize(
        BL,
        T::TensorFloat32,
        &[1, 2, 2, 2],
        Sz::I(3, 3),
        &[true],
        &[1, 2, 3, 3],
        None,
    );
    let x = [3.0, 6.0, 9.0, 12.0, 4.0, 10.0, 10.0, 16.0];
    let (out, _) = run_f32(g, &[&x]);
    let c0: Vec<f32> = BL2_OUT.iter().step_by(2).copied().collect();
    let c1: Vec<f32> = BL2_OUT.iter().skip(1).step_by(2).copied().collect();
    close(&out, &[c0, c1].concat());
}

#[test]
fn spec_bilinear_quant8() {
    // Scale 0.01: 1.6667 quantizes to 167.
    let g = resize(
        BL,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 1],
        Sz::I(3, 3),
        &[false],
        &[1, 3, 3, 1],
        Some((0.01, 0, 0.01, 0)),
    );
    let (out, _) = run_bytes(g, &[(vec![100, 100, 200, 200], vec![])]);
    let want: Vec<u8> = BL1_OUT.iter().map(|&v| (v * 100.0).round() as u8).collect();
    assert_eq!(out, want);
    // Scale 0.25: exact.
    let g = resize(
        BL,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 2],
        Sz::F(1.6, 1.6),
        &[false],
        &[1, 3, 3, 2],
        Some((0.25, 0, 0.25, 0)),
    );
    let x: Vec<u8> = BL2_X.iter().map(|&v| (4.0 * v) as u8).collect();
    let (out, _) = run_bytes(g, &[(x, vec![])]);
    let want: Vec<u8> = BL2_OUT.iter().map(|&v| (4.0 * v) as u8).collect();
    assert_eq!(out, want);
}
