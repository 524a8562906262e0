//! Tests of the detection family. Expected values are worked out by hand in the comments
//! (bilinear samples of linear ramps, maxima of small grids, box arithmetic, IoU = 81/119 for
//! two 10x10 boxes offset by one pixel).

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

// ---------------------------------------------------------------- helpers

fn u16b(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn i8b(v: &[i32]) -> Vec<u8> {
    v.iter().map(|&x| x as i8 as u8).collect()
}
fn u8b(v: &[i32]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}
fn close_tol(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{a:?} vs {b:?}");
    }
}
/// Quantized results within one quantum of the exact ones.
fn within_one(got: &[i32], want: &[i32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1, "{got:?} vs {want:?}");
    }
}

fn fscalar(b: &mut B, ty: OperandType, v: f32) -> u32 {
    if ty == T::TensorFloat16 {
        half(b, v)
    } else {
        b.float(v)
    }
}

fn is_q8(ty: OperandType) -> bool {
    matches!(ty, T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned)
}

// ---------------------------------------------------------------- ROI_ALIGN / ROI_POOLING

/// One ROI_ALIGN or ROI_POOLING graph: feature map, boxes and batch indices are inputs.
struct Roi {
    op: OperationType,
    ty: OperandType,
    in_dims: Vec<u32>,
    n_rois: u32,
    out_hw: (i32, i32),
    ratio: (f32, f32),
    sampling: (i32, i32),
    nchw: bool,
    in_q: (f32, i32),
    out_q: (f32, i32),
    roi_q: (f32, i32),
    out_ty: Option<OperandType>,
    roi_ty: Option<OperandType>,
}

fn roi(op: OperationType, ty: OperandType, in_dims: &[u32]) -> Roi {
    let q = if is_q8(ty) { (1.0, 0) } else { (0.0, 0) };
    Roi {
        op,
        ty,
        in_dims: in_dims.to_vec(),
        n_rois: 1,
        out_hw: (2, 2),
        ratio: (1.0, 1.0),
        sampling: (2, 2),
        nchw: false,
        in_q: q,
        out_q: q,
        roi_q: if is_q8(ty) { (0.125, 0) } else { (0.0, 0) },
        out_ty: None,
        roi_ty: None,
    }
}

impl Roi {
    fn graph(&self) -> Graph {
        let mut b = B::new();
        let x = b.input(self.ty, &self.in_dims);
        b.q(x, self.in_q.0, self.in_q.1);
        let roi_ty = self.roi_ty.unwrap_or(if is_q8(self.ty) {
            T::TensorQuant16Asymm
        } else {
            self.ty
        });
        let r = b.input(roi_ty, &[self.n_rois, 4]);
        b.q(r, self.roi_q.0, self.roi_q.1);
        let bi = b.input(T::TensorInt32, &[self.n_rois]);
        let oh = b.int(self.out_hw.0);
        let ow = b.int(self.out_hw.1);
        let sty = if self.ty == T::TensorFloat16 {
            T::TensorFloat16
        } else {
            T::TensorFloat32
        };
        let hr = fscalar(&mut b, sty, self.ratio.0);
        let wr = fscalar(&mut b, sty, self.ratio.1);
        let mut ins = vec![x, r, bi, oh, ow, hr, wr];
        if self.op == O::RoiAlign {
            ins.push(b.int(self.sampling.0));
            ins.push(b.int(self.sampling.1));
        }
        ins.push(b.boolean(self.nchw));
        let c = if self.nchw {
            self.in_dims[1]
        } else {
            *self.in_dims.last().unwrap()
        };
        let (oh, ow) = (self.out_hw.0.max(0) as u32, self.out_hw.1.max(0) as u32);
        let od = if self.nchw {
            [self.n_rois, c, oh, ow]
        } else {
            [self.n_rois, oh, ow, c]
        };
        let o = b.output(self.out_ty.unwrap_or(self.ty), &od);
        b.q(o, self.out_q.0, self.out_q.1);
        b.op(self.op, &ins, &[o]);
        b.g
    }

    /// Runs with real values: the feature map quantized with `in_q` when 8-bit, boxes with
    /// scale 0.125 when quantized.
    fn run(
        &self,
        x: &[f32],
        rois: &[f32],
        batch: &[i32],
    ) -> Result<(Vec<f32>, Vec<u32>), ExecError> {
        let (xb, rb) = self.bytes(x, rois);
        let mut r = run_outputs(self.graph(), &[xb, rb, i32_bytes(batch)])?;
        let (o, d) = r.remove(0);
        let v = match self.ty {
            T::TensorFloat32 => bf(&o),
            T::TensorFloat16 => f16_vals(&o),
            T::TensorQuant8Asymm => o.iter().map(|&q| f32::from(q)).collect(),
            _ => o.iter().map(|&q| f32::from(q as i8)).collect(),
        };
        Ok((v, d))
    }

    fn bytes(&self, x: &[f32], rois: &[f32]) -> (Vec<u8>, Vec<u8>) {
        let quant = |v: f32| (v / self.in_q.0).round() as i32 + self.in_q.1;
        let xb = match self.ty {
            T::TensorFloat32 => fb(x),
            T::TensorFloat16 => f16_bytes(x),
            T::TensorQuant8Asymm => u8b(&x.iter().map(|&v| quant(v)).collect::<Vec<_>>()),
            _ => i8b(&x.iter().map(|&v| quant(v)).collect::<Vec<_>>()),
        };
        let rb = match self.ty {
            T::TensorFloat32 => fb(rois),
            T::TensorFloat16 => f16_bytes(rois),
            _ => u16b(&rois.iter().map(|&v| (v * 8.0) as u16).collect::<Vec<_>>()),
        };
        (xb, rb)
    }

    fn err(&self, x: &[f32], rois: &[f32], batch: &[i32]) -> String {
        let (xb, rb) = self.bytes(x, rois);
        exec_error(self.graph(), &[xb, rb, i32_bytes(batch)])
    }
}

/// 4x4 ramp v = 4y + x (NHWC, one channel).
fn ramp() -> Vec<f32> {
    (0..16).map(|v| v as f32).collect()
}

// A 4x4 box at stride 1 cut in 2x2 cells with 2x2 samples: the samples sit at 0.5 and 1.5 in
// the first cell, 2.5 and 3.5 (clamped to the last pixel, 3) in the second. On the ramp
// 4y + x the averages are 4·1 + 1 = 5, 4·1 + 2.75 = 6.75, 4·2.75 + 1 = 12, 4·2.75 + 2.75.
const ALIGN_RAMP: [f32; 4] = [5.0, 6.75, 12.0, 13.75];

#[test]
fn roi_align_float32_averages_bilinear_samples() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let (o, d) = s.run(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    assert_eq!(d, vec![1, 2, 2, 1]);
    close(&o, &ALIGN_RAMP);
}

#[test]
fn roi_align_nchw_two_channels() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 2, 4, 4]);
    s.nchw = true;
    let mut x = ramp();
    x.extend(ramp().iter().map(|v| 2.0 * v));
    let (o, d) = s.run(&x, &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    assert_eq!(d, vec![1, 2, 2, 2]);
    let mut want = ALIGN_RAMP.to_vec();
    want.extend(ALIGN_RAMP.iter().map(|v| 2.0 * v));
    close(&o, &want);
}

#[test]
fn roi_align_float16() {
    let s = roi(O::RoiAlign, T::TensorFloat16, &[1, 4, 4, 1]);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    close_tol(&o, &ALIGN_RAMP, 1e-2);
}

#[test]
fn roi_align_quant8_requantizes_to_the_output_scale() {
    let mut s = roi(O::RoiAlign, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.in_q = (0.5, 3);
    s.out_q = (0.25, 10);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    // 5 / 0.25 + 10 = 30, 6.75 → 37, 12 → 58, 13.75 → 65
    let got: Vec<i32> = o.iter().map(|&v| v as i32).collect();
    within_one(&got, &[30, 37, 58, 65]);
}

#[test]
fn roi_align_quant8_signed() {
    let mut s = roi(O::RoiAlign, T::TensorQuant8AsymmSigned, &[1, 4, 4, 1]);
    s.in_q = (0.5, -100);
    s.out_q = (0.25, -118);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    let got: Vec<i32> = o.iter().map(|&v| v as i32).collect();
    within_one(&got, &[-98, -91, -70, -63]);
}

#[test]
fn roi_align_quant8_output_saturates() {
    let mut s = roi(O::RoiAlign, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.out_q = (0.01, 0);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    assert_eq!(o, vec![255.0; 4]);
}

#[test]
fn roi_align_adaptive_sampling_uses_ceil_of_the_bin_size() {
    // One 4x4 cell: ceil(4) = 4 samples per axis at 0.5, 1.5, 2.5, 3.5→3: mean 1.875.
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.out_hw = (1, 1);
    s.sampling = (0, 0);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    close(&o, &[4.0 * 1.875 + 1.875]);
}

#[test]
fn roi_align_ratio_scales_boxes_to_the_feature_map() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.ratio = (2.0, 2.0);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 8.0, 8.0], &[0]).unwrap();
    close(&o, &ALIGN_RAMP);
}

#[test]
fn roi_align_reads_the_batch_of_each_region() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[2, 4, 4, 1]);
    s.n_rois = 2;
    let mut x = ramp();
    x.extend(ramp().iter().map(|v| v + 100.0));
    let (o, d) = s
        .run(&x, &[0.0, 0.0, 4.0, 4.0, 0.0, 0.0, 4.0, 4.0], &[1, 0])
        .unwrap();
    assert_eq!(d, vec![2, 2, 2, 1]);
    let mut want: Vec<f32> = ALIGN_RAMP.iter().map(|v| v + 100.0).collect();
    want.extend(ALIGN_RAMP);
    close(&o, &want);
}

#[test]
fn roi_align_small_box_is_widened_to_one_pixel() {
    // A degenerate box at (1, 1) becomes 1x1: one cell, samples at 1.25 and 1.75 per axis,
    // mean 1.5 → 4·1.5 + 1.5.
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.out_hw = (1, 1);
    let (o, _) = s.run(&ramp(), &[1.0, 1.0, 1.0, 1.0], &[0]).unwrap();
    close(&o, &[7.5]);
}

#[test]
fn roi_align_refuses_wrong_argument_count() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let mut g = s.graph();
    g.operations[0].inputs.pop();
    assert!(refused(g).contains("inputs given"));
}

#[test]
fn roi_align_refuses_float_boxes_with_quantized_input() {
    let mut s = roi(O::RoiAlign, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.roi_ty = Some(T::TensorFloat32);
    s.roi_q = (0.0, 0);
    assert!(refused(s.graph()).contains("rois"));
}

#[test]
fn roi_align_refuses_quantized_boxes_without_scale_one_eighth() {
    let mut s = roi(O::RoiAlign, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.roi_q = (0.25, 0);
    assert!(refused(s.graph()).contains("scale 0.125"));
}

#[test]
fn roi_align_refuses_output_of_another_type() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.out_ty = Some(T::TensorFloat16);
    assert!(refused(s.graph()).contains("output type"));
}

#[test]
fn roi_align_refuses_int32_input() {
    let s = roi(O::RoiAlign, T::TensorInt32, &[1, 4, 4, 1]);
    assert!(refused(s.graph()).contains("input 0 must be"));
}

#[test]
fn roi_align_refuses_zero_output_height() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.out_hw = (0, 2);
    assert!(refused(s.graph()).contains("output height must be > 0"));
}

#[test]
fn roi_align_refuses_negative_sampling_ratio() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.sampling = (2, -1);
    assert!(refused(s.graph()).contains("width sampling ratio must be >= 0"));
}

#[test]
fn roi_align_refuses_non_positive_ratio() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.ratio = (0.0, 1.0);
    assert!(refused(s.graph()).contains("height ratio must be > 0"));
}

#[test]
fn roi_align_refuses_boxes_not_four_wide() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let mut g = s.graph();
    g.operands[1].dimensions = vec![1, 5];
    assert!(refused(g).contains("4 values per region"));
}

#[test]
fn roi_align_fails_on_batch_index_out_of_range() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[1]);
    assert!(e.contains("batch index 1 outside [0, 1)"), "{e}");
}

#[test]
fn roi_align_fails_on_negative_batch_index() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[-1]);
    assert!(e.contains("batch index -1"), "{e}");
}

#[test]
fn roi_align_fails_on_inverted_box() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[3.0, 0.0, 1.0, 4.0], &[0]);
    assert!(e.contains("x2 < x1"), "{e}");
}

#[test]
fn roi_align_fails_on_box_outside_the_map() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[0.0, 0.0, 4.5, 4.0], &[0]);
    assert!(e.contains("outside the 4x4 feature map"), "{e}");
}

#[test]
fn roi_align_fails_on_negative_coordinate() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[-1.0, 0.0, 2.0, 2.0], &[0]);
    assert!(e.contains("negative coordinate"), "{e}");
}

#[test]
fn roi_align_fails_on_huge_sampling_ratio() {
    let mut s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    s.sampling = (i32::MAX, i32::MAX);
    let e = s.err(&ramp(), &[0.0, 0.0, 4.0, 4.0], &[0]);
    assert!(e.contains("samples"), "{e}");
}

#[test]
fn roi_align_fails_on_batch_indices_of_another_length() {
    let s = roi(O::RoiAlign, T::TensorFloat32, &[1, 4, 4, 1]);
    let mut g = s.graph();
    g.operands[2].dimensions = vec![0];
    let (xb, rb) = s.bytes(&ramp(), &[0.0, 0.0, 4.0, 4.0]);
    let p = PreparedGraph::new(g).unwrap();
    let bi = i32_bytes(&[0, 0]);
    let args = [
        InputArg::Value {
            data: &xb,
            dimensions: vec![],
        },
        InputArg::Value {
            data: &rb,
            dimensions: vec![],
        },
        InputArg::Value {
            data: &bi,
            dimensions: vec![2],
        },
    ];
    let mut out = [0u8; 64];
    let e = p.execute(&[], &args, &mut [&mut out[..]]).unwrap_err();
    assert!(format!("{e}").contains("one per region"), "{e}");
}

// 4x4 ramp, box (0,0)-(3,3) at stride 1: corners 0 and 3, 4 pixels, 2x2 bins of 2 pixels:
// maxima at (1,1)=5, (1,3)=7, (3,1)=13, (3,3)=15.
const POOL_RAMP: [f32; 4] = [5.0, 7.0, 13.0, 15.0];

#[test]
fn roi_pooling_float32_takes_bin_maxima() {
    let s = roi(O::RoiPooling, T::TensorFloat32, &[1, 4, 4, 1]);
    let (o, d) = s.run(&ramp(), &[0.0, 0.0, 3.0, 3.0], &[0]).unwrap();
    assert_eq!(d, vec![1, 2, 2, 1]);
    close(&o, &POOL_RAMP);
}

#[test]
fn roi_pooling_nchw_two_channels() {
    // Second channel -v: the maxima are the first pixels of each bin, 0, -2, -8, -10.
    let mut s = roi(O::RoiPooling, T::TensorFloat32, &[1, 2, 4, 4]);
    s.nchw = true;
    let mut x = ramp();
    x.extend(ramp().iter().map(|v| -v));
    let (o, d) = s.run(&x, &[0.0, 0.0, 3.0, 3.0], &[0]).unwrap();
    assert_eq!(d, vec![1, 2, 2, 2]);
    close(&o, &[5.0, 7.0, 13.0, 15.0, 0.0, -2.0, -8.0, -10.0]);
}

#[test]
fn roi_pooling_float16() {
    let s = roi(O::RoiPooling, T::TensorFloat16, &[1, 4, 4, 1]);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 3.0, 3.0], &[0]).unwrap();
    close(&o, &POOL_RAMP);
}

#[test]
fn roi_pooling_quant8_keeps_the_quantization() {
    let mut s = roi(O::RoiPooling, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.in_q = (0.5, 7);
    s.out_q = (0.5, 7);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 3.0, 3.0], &[0]).unwrap();
    // q = 2v + 7
    assert_eq!(o, vec![17.0, 21.0, 33.0, 37.0]);
}

#[test]
fn roi_pooling_quant8_signed() {
    let mut s = roi(O::RoiPooling, T::TensorQuant8AsymmSigned, &[1, 4, 4, 1]);
    s.in_q = (0.5, -20);
    s.out_q = (0.5, -20);
    let (o, _) = s.run(&ramp(), &[0.0, 0.0, 3.0, 3.0], &[0]).unwrap();
    assert_eq!(o, vec![-10.0, -6.0, 6.0, 10.0]);
}

#[test]
fn roi_pooling_rounds_corners_half_away_from_zero() {
    // x: round(0) = 0, round(1.4) = 1; y: round(0.5) = 1, round(1.5) = 2. One bin, columns
    // [0, 2), rows [1, 3): maximum v(2, 1) = 9.
    let mut s = roi(O::RoiPooling, T::TensorFloat32, &[1, 4, 4, 1]);
    s.out_hw = (1, 1);
    let (o, _) = s.run(&ramp(), &[0.0, 0.5, 1.4, 1.5], &[0]).unwrap();
    close(&o, &[9.0]);
}

#[test]
fn roi_pooling_empty_bin_gives_zero_point() {
    // A box on the right edge (x = 4) has its only column outside the map.
    let mut s = roi(O::RoiPooling, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.in_q = (0.5, 7);
    s.out_q = (0.5, 7);
    s.out_hw = (1, 1);
    let (o, _) = s.run(&ramp(), &[4.0, 0.0, 4.0, 4.0], &[0]).unwrap();
    assert_eq!(o, vec![7.0]);
}

#[test]
fn roi_pooling_refuses_output_quantization_differing_from_input() {
    let mut s = roi(O::RoiPooling, T::TensorQuant8Asymm, &[1, 4, 4, 1]);
    s.out_q = (0.5, 0);
    assert!(refused(s.graph()).contains("scale and zero point must equal"));
}

#[test]
fn roi_pooling_refuses_wrong_argument_count() {
    let s = roi(O::RoiPooling, T::TensorFloat32, &[1, 4, 4, 1]);
    let mut g = s.graph();
    let extra = g.operations[0].inputs[3];
    g.operations[0].inputs.push(extra);
    assert!(refused(g).contains("inputs given"));
}

#[test]
fn roi_pooling_refuses_non_bool_layout() {
    let s = roi(O::RoiPooling, T::TensorFloat32, &[1, 4, 4, 1]);
    let mut g = s.graph();
    let h = g.operations[0].inputs[3];
    g.operations[0].inputs[7] = h;
    assert!(refused(g).contains("layout"));
}

#[test]
fn roi_pooling_refuses_input_of_rank_three() {
    let s = roi(O::RoiPooling, T::TensorFloat32, &[4, 4, 1]);
    assert!(refused(s.graph()).contains("rank 4"));
}

#[test]
fn roi_pooling_fails_on_batch_index_out_of_range() {
    let s = roi(O::RoiPooling, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[0.0, 0.0, 3.0, 3.0], &[2]);
    assert!(e.contains("batch index 2"), "{e}");
}

#[test]
fn roi_pooling_fails_on_inverted_box() {
    let s = roi(O::RoiPooling, T::TensorFloat32, &[1, 4, 4, 1]);
    let e = s.err(&ramp(), &[0.0, 3.0, 3.0, 1.0], &[0]);
    assert!(e.contains("y2 < y1"), "{e}");
}

fn b_u16(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}
fn b_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

// ---------------------------------------------------------------- AXIS_ALIGNED_BBOX_TRANSFORM

/// A transform of `n` boxes by `k` classes of deltas over `images` image sizes.
struct Bbox {
    boxes: OperandType,
    deltas: OperandType,
    n: u32,
    k: u32,
    images: u32,
    delta_q: (f32, i32),
    box_q: (f32, i32),
    out_q: (f32, i32),
    out_ty: Option<OperandType>,
}

fn bbox(boxes: OperandType, deltas: OperandType, n: u32, k: u32, images: u32) -> Bbox {
    let q16 = if boxes == T::TensorQuant16Asymm {
        (0.125, 0)
    } else {
        (0.0, 0)
    };
    Bbox {
        boxes,
        deltas,
        n,
        k,
        images,
        delta_q: if is_q8(deltas) { (0.05, 128) } else { (0.0, 0) },
        box_q: q16,
        out_q: q16,
        out_ty: None,
    }
}

impl Bbox {
    fn graph(&self) -> Graph {
        let mut b = B::new();
        let r = b.input(self.boxes, &[self.n, 4]);
        b.q(r, self.box_q.0, self.box_q.1);
        let d = b.input(self.deltas, &[self.n, 4 * self.k]);
        b.q(d, self.delta_q.0, self.delta_q.1);
        let bi = b.input(T::TensorInt32, &[self.n]);
        let info = b.input(self.boxes, &[self.images, 2]);
        b.q(info, self.box_q.0, self.box_q.1);
        let o = b.output(self.out_ty.unwrap_or(self.boxes), &[self.n, 4 * self.k]);
        b.q(o, self.out_q.0, self.out_q.1);
        b.op(O::AxisAlignedBboxTransform, &[r, d, bi, info], &[o]);
        b.g
    }
}

/// Box (0,0)-(10,10): centre (5, 5), 10x10. Class 0 deltas 0 keep it; class 1 moves the
/// centre by (0.1·10, 0.2·10) and doubles the width: (6, 7), 20x10 → (-4, 2)-(16, 12),
/// clipped to the 15x20 image (width 15, height 20): (0, 2)-(15, 12).
const LN2: f32 = std::f32::consts::LN_2;

#[test]
fn bbox_transform_float32_moves_scales_and_clips() {
    let g = bbox(T::TensorFloat32, T::TensorFloat32, 1, 2, 1).graph();
    let r = run_outputs(
        g,
        &[
            fb(&[0.0, 0.0, 10.0, 10.0]),
            fb(&[0.0, 0.0, 0.0, 0.0, 0.1, 0.2, LN2, 0.0]),
            i32_bytes(&[0]),
            fb(&[20.0, 15.0]),
        ],
    )
    .unwrap();
    assert_eq!(r[0].1, vec![1, 8]);
    close(&bf(&r[0].0), &[0.0, 0.0, 10.0, 10.0, 0.0, 2.0, 15.0, 12.0]);
}

#[test]
fn bbox_transform_float16() {
    let g = bbox(T::TensorFloat16, T::TensorFloat16, 1, 2, 1).graph();
    let r = run_outputs(
        g,
        &[
            f16_bytes(&[0.0, 0.0, 10.0, 10.0]),
            f16_bytes(&[0.0, 0.0, 0.0, 0.0, 0.1, 0.2, LN2, 0.0]),
            i32_bytes(&[0]),
            f16_bytes(&[20.0, 15.0]),
        ],
    )
    .unwrap();
    close_tol(
        &f16_vals(&r[0].0),
        &[0.0, 0.0, 10.0, 10.0, 0.0, 2.0, 15.0, 12.0],
        2e-2,
    );
}

#[test]
fn bbox_transform_quant16_boxes_with_quant8_deltas() {
    // Boxes ×8: (0,0)-(80,80) is (0,0)-(10,10); deltas (q - 128)·0.05: 130 → 0.1, 132 → 0.2.
    // Class 1: centre (6, 7), 10x10 → (1, 2)-(11, 12) → ×8.
    let g = bbox(T::TensorQuant16Asymm, T::TensorQuant8Asymm, 1, 2, 1).graph();
    let r = run_outputs(
        g,
        &[
            u16b(&[0, 0, 80, 80]),
            u8b(&[128, 128, 128, 128, 130, 132, 128, 128]),
            i32_bytes(&[0]),
            u16b(&[160, 120]),
        ],
    )
    .unwrap();
    assert_eq!(b_u16(&r[0].0), vec![0, 0, 80, 80, 8, 16, 88, 96]);
}

#[test]
fn bbox_transform_quant16_boxes_with_signed_deltas() {
    let mut s = bbox(T::TensorQuant16Asymm, T::TensorQuant8AsymmSigned, 1, 2, 1);
    s.delta_q = (0.05, 0);
    let r = run_outputs(
        s.graph(),
        &[
            u16b(&[0, 0, 80, 80]),
            i8b(&[0, 0, 0, 0, 2, 4, 0, 0]),
            i32_bytes(&[0]),
            u16b(&[160, 120]),
        ],
    )
    .unwrap();
    assert_eq!(b_u16(&r[0].0), vec![0, 0, 80, 80, 8, 16, 88, 96]);
}

#[test]
fn bbox_transform_clips_each_box_to_its_own_image() {
    // Deltas (1, 0, ln 2, 0): centre x 5 + 10 = 15, width 20 → (5, 0)-(25, 10); image 0 is
    // 100 wide, image 1 only 15.
    let g = bbox(T::TensorFloat32, T::TensorFloat32, 2, 1, 2).graph();
    let r = run_outputs(
        g,
        &[
            fb(&[0.0, 0.0, 10.0, 10.0, 0.0, 0.0, 10.0, 10.0]),
            fb(&[1.0, 0.0, LN2, 0.0, 1.0, 0.0, LN2, 0.0]),
            i32_bytes(&[0, 1]),
            fb(&[100.0, 100.0, 20.0, 15.0]),
        ],
    )
    .unwrap();
    close(&bf(&r[0].0), &[5.0, 0.0, 25.0, 10.0, 5.0, 0.0, 15.0, 10.0]);
}

#[test]
fn bbox_transform_refuses_float_deltas_with_quantized_boxes() {
    let g = bbox(T::TensorQuant16Asymm, T::TensorFloat32, 1, 1, 1).graph();
    assert!(refused(g).contains("bounding box deltas"));
}

#[test]
fn bbox_transform_refuses_boxes_without_scale_one_eighth() {
    let mut s = bbox(T::TensorQuant16Asymm, T::TensorQuant8Asymm, 1, 1, 1);
    s.box_q = (0.25, 0);
    assert!(refused(s.graph()).contains("scale 0.125"));
}

#[test]
fn bbox_transform_refuses_output_quantization_other_than_one_eighth() {
    let mut s = bbox(T::TensorQuant16Asymm, T::TensorQuant8Asymm, 1, 1, 1);
    s.out_q = (0.5, 0);
    assert!(refused(s.graph()).contains("output 0 (boxes)"));
}

#[test]
fn bbox_transform_refuses_output_of_another_type() {
    let mut s = bbox(T::TensorFloat32, T::TensorFloat32, 1, 1, 1);
    s.out_ty = Some(T::TensorFloat16);
    assert!(refused(s.graph()).contains("must be TENSOR_FLOAT32"));
}

#[test]
fn bbox_transform_refuses_quant8_boxes() {
    let s = bbox(T::TensorQuant8Asymm, T::TensorQuant8Asymm, 1, 1, 1);
    let mut g = s.graph();
    for i in [0, 3, 4] {
        g.operands[i].scale = 1.0;
    }
    assert!(refused(g).contains("input 0 (boxes) must be"));
}

#[test]
fn bbox_transform_refuses_wrong_argument_count() {
    let mut g = bbox(T::TensorFloat32, T::TensorFloat32, 1, 1, 1).graph();
    g.operations[0].inputs.pop();
    assert!(refused(g).contains("inputs given"));
}

#[test]
fn bbox_transform_fails_on_batch_index_out_of_range() {
    let g = bbox(T::TensorFloat32, T::TensorFloat32, 1, 1, 1).graph();
    let e = exec_error(
        g,
        &[
            fb(&[0.0, 0.0, 1.0, 1.0]),
            fb(&[0.0; 4]),
            i32_bytes(&[1]),
            fb(&[10.0, 10.0]),
        ],
    );
    assert!(e.contains("batch index 1 outside [0, 1)"), "{e}");
}

#[test]
fn bbox_transform_fails_on_inverted_box() {
    let g = bbox(T::TensorFloat32, T::TensorFloat32, 1, 1, 1).graph();
    let e = exec_error(
        g,
        &[
            fb(&[0.0, 2.0, 1.0, 1.0]),
            fb(&[0.0; 4]),
            i32_bytes(&[0]),
            fb(&[10.0, 10.0]),
        ],
    );
    assert!(e.contains("x2 < x1 or y2 < y1"), "{e}");
}

#[test]
fn bbox_transform_fails_on_deltas_not_four_per_class() {
    let mut g = bbox(T::TensorFloat32, T::TensorFloat32, 1, 1, 1).graph();
    g.operands[1].dimensions = vec![1, 6];
    g.operands[4].dimensions = vec![1, 0];
    let e = exec_error(
        g,
        &[
            fb(&[0.0, 0.0, 1.0, 1.0]),
            fb(&[0.0; 6]),
            i32_bytes(&[0]),
            fb(&[10.0, 10.0]),
        ],
    );
    assert!(e.contains("4 * num_classes"), "{e}");
}

// ---------------------------------------------------------------- BOX_WITH_NMS_LIMIT

/// BOX_WITH_NMS_LIMIT of `n` regions by `k` classes; every output of unknown extent.
struct Nms {
    ty: OperandType,
    n: u32,
    k: u32,
    score_thr: f32,
    max_det: i32,
    kernel: i32,
    iou: f32,
    sigma: f32,
    keep: f32,
    score_q: (f32, i32),
    out_score_q: (f32, i32),
    class_ty: OperandType,
}

fn nms(ty: OperandType, kernel: i32) -> Nms {
    let q = match ty {
        T::TensorQuant8Asymm => (0.01, 0),
        T::TensorQuant8AsymmSigned => (0.01, -128),
        _ => (0.0, 0),
    };
    Nms {
        ty,
        n: 4,
        k: 3,
        score_thr: 0.15,
        max_det: -1,
        kernel,
        iou: 0.5,
        sigma: 0.5,
        keep: 0.1,
        score_q: q,
        out_score_q: q,
        class_ty: T::TensorInt32,
    }
}

impl Nms {
    fn roi_ty(&self) -> OperandType {
        if is_q8(self.ty) {
            T::TensorQuant16Asymm
        } else {
            self.ty
        }
    }

    /// Adds the operation to `b` and returns its four outputs: graph outputs when `outputs`,
    /// temporaries otherwise.
    fn add(&self, b: &mut B, outputs: bool) -> [u32; 4] {
        let s = b.input(self.ty, &[self.n, self.k]);
        b.q(s, self.score_q.0, self.score_q.1);
        let rt = self.roi_ty();
        let r = b.input(rt, &[self.n, 4 * self.k]);
        if rt == T::TensorQuant16Asymm {
            b.q(r, 0.125, 0);
        }
        let bi = b.input(T::TensorInt32, &[self.n]);
        let st = if self.ty == T::TensorFloat16 {
            T::TensorFloat16
        } else {
            T::TensorFloat32
        };
        let thr = fscalar(b, st, self.score_thr);
        let md = b.int(self.max_det);
        let kr = b.int(self.kernel);
        let iou = fscalar(b, st, self.iou);
        let sg = fscalar(b, st, self.sigma);
        let keep = fscalar(b, st, self.keep);
        let mut mk = |ty: OperandType, dims: &[u32]| {
            if outputs {
                b.output(ty, dims)
            } else {
                b.temp(ty, dims)
            }
        };
        let os = mk(self.ty, &[0]);
        let ob = mk(rt, &[0, 4]);
        let oc = mk(self.class_ty, &[0]);
        let obt = mk(T::TensorInt32, &[0]);
        b.q(os, self.out_score_q.0, self.out_score_q.1);
        if rt == T::TensorQuant16Asymm {
            b.q(ob, 0.125, 0);
        }
        b.op(
            O::BoxWithNmsLimit,
            &[s, r, bi, thr, md, kr, iou, sg, keep],
            &[os, ob, oc, obt],
        );
        [os, ob, oc, obt]
    }

    fn graph(&self) -> Graph {
        let mut b = B::new();
        self.add(&mut b, true);
        b.g
    }
}

/// Four regions, the same box for every class: r1 overlaps r0 with IoU 81/119 ≈ 0.68, r2 is
/// apart, r3 equals r0.
const NMS_BOXES: [[f32; 4]; 4] = [
    [0.0, 0.0, 10.0, 10.0],
    [1.0, 1.0, 11.0, 11.0],
    [20.0, 20.0, 30.0, 30.0],
    [0.0, 0.0, 10.0, 10.0],
];
const NMS_SCORES: [f32; 12] = [
    0.9, 0.9, 0.1, //
    0.1, 0.8, 0.7, //
    0.1, 0.7, 0.2, //
    0.1, 0.05, 0.6,
];

fn nms_boxes() -> Vec<f32> {
    NMS_BOXES
        .iter()
        .flat_map(|b| b.iter().copied().cycle().take(12))
        .collect()
}

fn boxes_of(regions: &[usize]) -> Vec<f32> {
    regions.iter().flat_map(|&r| NMS_BOXES[r]).collect()
}

/// A float32 run's outputs: scores, boxes, classes, batch indices, and the score shape.
type NmsOut = (Vec<f32>, Vec<f32>, Vec<i32>, Vec<i32>, Vec<u32>);

fn nms_f32(s: &Nms, batch: &[i32]) -> NmsOut {
    let r = run_outputs(
        s.graph(),
        &[fb(&NMS_SCORES), fb(&nms_boxes()), i32_bytes(batch)],
    )
    .unwrap();
    (
        bf(&r[0].0),
        bf(&r[1].0),
        b_i32(&r[2].0),
        b_i32(&r[3].0),
        r[0].1.clone(),
    )
}

#[test]
fn box_nms_hard_suppresses_overlaps_per_class() {
    // Class 1 candidates (> 0.15): r0 .9, r1 .8, r2 .7; r1 overlaps r0 (0.68 >= 0.5) and
    // goes. Class 2: r1 .7, r2 .2, r3 .6; r3 overlaps r1 and goes. Grouped by class.
    let (s, b, c, bt, d) = nms_f32(&nms(T::TensorFloat32, 0), &[0; 4]);
    assert_eq!(d, vec![4]);
    close(&s, &[0.9, 0.7, 0.7, 0.2]);
    close(&b, &boxes_of(&[0, 2, 1, 2]));
    assert_eq!(c, vec![1, 1, 2, 2]);
    assert_eq!(bt, vec![0; 4]);
}

#[test]
fn box_nms_linear_kernel_decays_overlapping_scores() {
    // Overlapping scores × (1 - 81/119): r1 class 1 0.8 → 0.255462, r3 class 2 0.6 → 0.191597.
    let (s, b, c, _, _) = nms_f32(&nms(T::TensorFloat32, 1), &[0; 4]);
    close(&s, &[0.9, 0.7, 0.255_462, 0.7, 0.2, 0.191_597]);
    close(&b, &boxes_of(&[0, 2, 1, 1, 2, 3]));
    assert_eq!(c, vec![1, 1, 1, 2, 2, 2]);
}

#[test]
fn box_nms_gaussian_kernel_decays_overlapping_scores() {
    // × exp(-iou² / 0.5) = 0.395886: r1 class 1 → 0.316709, r3 class 2 → 0.237531 (now above
    // r2's 0.2).
    let (s, b, c, _, _) = nms_f32(&nms(T::TensorFloat32, 2), &[0; 4]);
    close(&s, &[0.9, 0.7, 0.316_709, 0.7, 0.237_531, 0.2]);
    close(&b, &boxes_of(&[0, 2, 1, 1, 3, 2]));
    assert_eq!(c, vec![1, 1, 1, 2, 2, 2]);
}

#[test]
fn box_nms_keeps_the_best_max_detections() {
    let mut s = nms(T::TensorFloat32, 0);
    s.max_det = 3;
    let (sc, b, c, _, _) = nms_f32(&s, &[0; 4]);
    close(&sc, &[0.9, 0.7, 0.7]);
    close(&b, &boxes_of(&[0, 2, 1]));
    assert_eq!(c, vec![1, 1, 2]);
}

#[test]
fn box_nms_max_detections_also_limits_each_class() {
    let mut s = nms(T::TensorFloat32, 0);
    s.max_det = 1;
    let (sc, b, c, _, _) = nms_f32(&s, &[0; 4]);
    close(&sc, &[0.9]);
    close(&b, &boxes_of(&[0]));
    assert_eq!(c, vec![1]);
}

#[test]
fn box_nms_runs_each_batch_separately() {
    // Batch 0 = r0, r1: class 1 keeps r0, class 2 r1. Batch 1 = r2, r3: class 1 r2 (r3 is
    // under the threshold), class 2 r3 .6 then r2 .2.
    let (s, b, c, bt, _) = nms_f32(&nms(T::TensorFloat32, 0), &[0, 0, 1, 1]);
    close(&s, &[0.9, 0.7, 0.7, 0.6, 0.2]);
    close(&b, &boxes_of(&[0, 1, 2, 3, 2]));
    assert_eq!(c, vec![1, 2, 1, 2, 2]);
    assert_eq!(bt, vec![0, 0, 1, 1, 1]);
}

#[test]
fn box_nms_float16() {
    let s = nms(T::TensorFloat16, 0);
    let r = run_outputs(
        s.graph(),
        &[
            f16_bytes(&NMS_SCORES),
            f16_bytes(&nms_boxes()),
            i32_bytes(&[0; 4]),
        ],
    )
    .unwrap();
    close_tol(&f16_vals(&r[0].0), &[0.9, 0.7, 0.7, 0.2], 1e-3);
    close(&f16_vals(&r[1].0), &boxes_of(&[0, 2, 1, 2]));
    assert_eq!(b_i32(&r[2].0), vec![1, 1, 2, 2]);
}

fn quant_boxes() -> Vec<u16> {
    nms_boxes().iter().map(|&v| (v * 8.0) as u16).collect()
}

#[test]
fn box_nms_quant8_scores_and_quant16_boxes() {
    let s = nms(T::TensorQuant8Asymm, 0);
    let q: Vec<i32> = NMS_SCORES
        .iter()
        .map(|&v| (v * 100.0).round() as i32)
        .collect();
    let r = run_outputs(
        s.graph(),
        &[u8b(&q), u16b(&quant_boxes()), i32_bytes(&[0; 4])],
    )
    .unwrap();
    assert_eq!(r[0].0, vec![90, 70, 70, 20]);
    let want: Vec<u16> = boxes_of(&[0, 2, 1, 2])
        .iter()
        .map(|&v| (v * 8.0) as u16)
        .collect();
    assert_eq!(b_u16(&r[1].0), want);
    assert_eq!(b_i32(&r[2].0), vec![1, 1, 2, 2]);
}

#[test]
fn box_nms_quant8_signed_scores() {
    let s = nms(T::TensorQuant8AsymmSigned, 0);
    let q: Vec<i32> = NMS_SCORES
        .iter()
        .map(|&v| (v * 100.0).round() as i32 - 128)
        .collect();
    let r = run_outputs(
        s.graph(),
        &[i8b(&q), u16b(&quant_boxes()), i32_bytes(&[0; 4])],
    )
    .unwrap();
    let got: Vec<i32> = r[0].0.iter().map(|&b| i32::from(b as i8)).collect();
    assert_eq!(got, vec![-38, -58, -58, -108]);
    assert_eq!(b_i32(&r[2].0), vec![1, 1, 2, 2]);
}

#[test]
fn box_nms_with_nothing_above_threshold_gives_empty_outputs() {
    let mut s = nms(T::TensorFloat32, 0);
    s.score_thr = 0.95;
    let r = run_outputs(
        s.graph(),
        &[fb(&NMS_SCORES), fb(&nms_boxes()), i32_bytes(&[0; 4])],
    )
    .unwrap();
    let shapes: Vec<Vec<u32>> = r.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(shapes, vec![vec![0], vec![0, 4], vec![0], vec![0]]);
}

#[test]
fn roi_align_of_no_regions_gives_an_empty_output() {
    // BOX_WITH_NMS_LIMIT selects nothing; ROI_ALIGN of its (empty) boxes gives [0, 2, 2, 1].
    let mut s = nms(T::TensorFloat32, 0);
    s.score_thr = 0.95;
    let mut b = B::new();
    let [_, ob, _, obt] = s.add(&mut b, false);
    let x = b.input(T::TensorFloat32, &[1, 4, 4, 1]);
    let oh = b.int(2);
    let ow = b.int(2);
    let hr = b.float(1.0);
    let wr = b.float(1.0);
    let sr = b.int(2);
    let layout = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[0, 2, 2, 1]);
    b.op(
        O::RoiAlign,
        &[x, ob, obt, oh, ow, hr, wr, sr, sr, layout],
        &[o],
    );
    let r = run_outputs(
        b.g,
        &[
            fb(&NMS_SCORES),
            fb(&nms_boxes()),
            i32_bytes(&[0; 4]),
            fb(&ramp()),
        ],
    )
    .unwrap();
    assert_eq!(r[0].1, vec![0, 2, 2, 1]);
    assert!(r[0].0.is_empty());
}

#[test]
fn box_nms_refuses_unknown_constant_kernel() {
    assert!(refused(nms(T::TensorFloat32, 3).graph()).contains("NMS kernel must be"));
}

#[test]
fn box_nms_refuses_three_outputs() {
    let mut g = nms(T::TensorFloat32, 0).graph();
    g.operations[0].outputs.pop();
    g.operands.pop();
    g.output_indexes.pop();
    assert!(refused(g).contains("outputs given"));
}

#[test]
fn box_nms_refuses_score_output_quantization_differing_from_input() {
    let mut s = nms(T::TensorQuant8Asymm, 0);
    s.out_score_q = (0.02, 0);
    assert!(refused(s.graph()).contains("scale and zero point must equal"));
}

#[test]
fn box_nms_refuses_float_classes_output() {
    let mut s = nms(T::TensorFloat32, 0);
    s.class_ty = T::TensorFloat32;
    assert!(refused(s.graph()).contains("output 2 (classes)"));
}

#[test]
fn box_nms_refuses_float_boxes_with_quantized_scores() {
    let s = nms(T::TensorQuant8Asymm, 0);
    let mut g = s.graph();
    g.operands[1].ty = T::TensorFloat32;
    g.operands[1].scale = 0.0;
    assert!(refused(g).contains("input 1 (boxes)"));
}

#[test]
fn box_nms_fails_on_unknown_kernel_given_at_execution() {
    let s = nms(T::TensorFloat32, 0);
    let mut g = s.graph();
    let kernel = g.operations[0].inputs[5] as usize;
    g.operands[kernel].lifetime = Lifetime::SubgraphInput;
    g.input_indexes.push(kernel as u32);
    let e = exec_error(
        g,
        &[
            fb(&NMS_SCORES),
            fb(&nms_boxes()),
            i32_bytes(&[0; 4]),
            i32_bytes(&[7]),
        ],
    );
    assert!(e.contains("NMS kernel must be"), "{e}");
}

#[test]
fn box_nms_fails_with_a_single_class() {
    let mut s = nms(T::TensorFloat32, 0);
    s.k = 1;
    let e = exec_error(
        s.graph(),
        &[
            fb(&[0.5; 4]),
            fb(&boxes_of(&[0, 1, 2, 3])),
            i32_bytes(&[0; 4]),
        ],
    );
    assert!(e.contains("at least 2 classes"), "{e}");
}

#[test]
fn box_nms_fails_on_boxes_of_the_wrong_width() {
    let s = nms(T::TensorFloat32, 0);
    let mut g = s.graph();
    g.operands[1].dimensions = vec![4, 8];
    let e = exec_error(g, &[fb(&NMS_SCORES), fb(&[1.0; 32]), i32_bytes(&[0; 4])]);
    assert!(e.contains("one box per class"), "{e}");
}

#[test]
fn box_nms_fails_on_inverted_box() {
    let s = nms(T::TensorFloat32, 0);
    let mut bx = nms_boxes();
    bx[4] = 50.0;
    let e = exec_error(s.graph(), &[fb(&NMS_SCORES), fb(&bx), i32_bytes(&[0; 4])]);
    assert!(e.contains("x2 < x1"), "{e}");
}

// ---------------------------------------------------------------- GENERATE_PROPOSALS

/// GENERATE_PROPOSALS over `b` images of an `h`x`w` map with `a` anchors, stride 10.
struct Gp {
    ty: OperandType,
    nchw: bool,
    b: u32,
    h: u32,
    w: u32,
    a: u32,
    pre: i32,
    post: i32,
    iou: f32,
    min_size: f32,
    anchor_q: (f32, i32),
}

fn gp(ty: OperandType) -> Gp {
    Gp {
        ty,
        nchw: false,
        b: 1,
        h: 1,
        w: 2,
        a: 2,
        pre: -1,
        post: -1,
        iou: 0.3,
        min_size: 0.0,
        anchor_q: if is_q8(ty) { (0.125, 0) } else { (0.0, 0) },
    }
}

impl Gp {
    fn graph(&self) -> Graph {
        let mut b = B::new();
        let q8 = is_q8(self.ty);
        let (sd, dd) = if self.nchw {
            (
                [self.b, self.a, self.h, self.w],
                [self.b, 4 * self.a, self.h, self.w],
            )
        } else {
            (
                [self.b, self.h, self.w, self.a],
                [self.b, self.h, self.w, 4 * self.a],
            )
        };
        let s = b.input(self.ty, &sd);
        let d = b.input(self.ty, &dd);
        if q8 {
            let zp = if self.ty == T::TensorQuant8Asymm {
                0
            } else {
                -128
            };
            b.q(s, 0.01, zp);
            b.q(d, 0.05, zp + 128);
        }
        let (at, it) = if q8 {
            (T::TensorQuant16Symm, T::TensorQuant16Asymm)
        } else {
            (self.ty, self.ty)
        };
        let an = b.input(at, &[self.a, 4]);
        b.q(an, self.anchor_q.0, self.anchor_q.1);
        let info = b.input(it, &[self.b, 2]);
        if q8 {
            b.q(info, 0.125, 0);
        }
        let st = if self.ty == T::TensorFloat16 {
            T::TensorFloat16
        } else {
            T::TensorFloat32
        };
        let hs = fscalar(&mut b, st, 10.0);
        let ws = fscalar(&mut b, st, 10.0);
        let pre = b.int(self.pre);
        let post = b.int(self.post);
        let iou = fscalar(&mut b, st, self.iou);
        let ms = fscalar(&mut b, st, self.min_size);
        let layout = b.boolean(self.nchw);
        let os = b.output(self.ty, &[0]);
        let ob = b.output(it, &[0, 4]);
        let obt = b.output(T::TensorInt32, &[0]);
        if q8 {
            let zp = if self.ty == T::TensorQuant8Asymm {
                0
            } else {
                -128
            };
            b.q(os, 0.01, zp);
            b.q(ob, 0.125, 0);
        }
        b.op(
            O::GenerateProposals,
            &[s, d, an, info, hs, ws, pre, post, iou, ms, layout],
            &[os, ob, obt],
        );
        b.g
    }

    /// Float32 run: scores, boxes, batch indices.
    fn run(&self, scores: &[f32], deltas: &[f32], anchors: &[f32], info: &[f32]) -> NmsOut {
        let r = run_outputs(
            self.graph(),
            &[fb(scores), fb(deltas), fb(anchors), fb(info)],
        )
        .unwrap();
        (
            bf(&r[0].0),
            bf(&r[1].0),
            b_i32(&r[2].0),
            vec![],
            r[0].1.clone(),
        )
    }
}

// Anchors (0,0)-(10,10) and (0,0)-(20,20) on cells x = 0 and x = 10 give, in (y, x, anchor)
// order, p0 (0,0)-(10,10), p1 (0,0)-(20,20), p2 (10,0)-(20,10), p3 (10,0)-(30,20). IoUs:
// p0·p1 1/4, p1·p2 1/4, p1·p3 1/3, p2·p3 1/4, the others 0. With threshold 0.3 and scores
// .9 .8 .7 .6, p3 falls to p1.
const GP_ANCHORS: [f32; 8] = [0.0, 0.0, 10.0, 10.0, 0.0, 0.0, 20.0, 20.0];
const GP_SCORES: [f32; 4] = [0.9, 0.8, 0.7, 0.6];
const GP_P: [[f32; 4]; 4] = [
    [0.0, 0.0, 10.0, 10.0],
    [0.0, 0.0, 20.0, 20.0],
    [10.0, 0.0, 20.0, 10.0],
    [10.0, 0.0, 30.0, 20.0],
];
fn gp_boxes(p: &[usize]) -> Vec<f32> {
    p.iter().flat_map(|&i| GP_P[i]).collect()
}

#[test]
fn generate_proposals_float32_places_anchors_and_suppresses() {
    let (s, b, bt, _, d) =
        gp(T::TensorFloat32).run(&GP_SCORES, &[0.0; 16], &GP_ANCHORS, &[100.0, 100.0]);
    assert_eq!(d, vec![3]);
    close(&s, &[0.9, 0.8, 0.7]);
    close(&b, &gp_boxes(&[0, 1, 2]));
    assert_eq!(bt, vec![0, 0, 0]);
}

#[test]
fn generate_proposals_nchw() {
    let mut g = gp(T::TensorFloat32);
    g.nchw = true;
    // [1, anchors, 1, 2]: anchor 0 over x is .9 .7, anchor 1 is .8 .6.
    let (s, b, _, _, _) = g.run(
        &[0.9, 0.7, 0.8, 0.6],
        &[0.0; 16],
        &GP_ANCHORS,
        &[100.0, 100.0],
    );
    close(&s, &[0.9, 0.8, 0.7]);
    close(&b, &gp_boxes(&[0, 1, 2]));
}

#[test]
fn generate_proposals_nchw_deltas_follow_their_anchor() {
    // Delta x 0.1 on anchor 0 of cell x = 10 only (channel 0, second column): p2 moves by 1.
    let mut g = gp(T::TensorFloat32);
    g.nchw = true;
    let mut dl = [0.0f32; 16];
    dl[1] = 0.1;
    let (_, b, _, _, _) = g.run(&[0.9, 0.7, 0.8, 0.6], &dl, &GP_ANCHORS, &[100.0, 100.0]);
    close(&b[8..12], &[11.0, 0.0, 21.0, 10.0]);
}

#[test]
fn generate_proposals_pre_nms_keeps_the_best_scores() {
    let mut g = gp(T::TensorFloat32);
    g.pre = 2;
    let (s, b, _, _, _) = g.run(&GP_SCORES, &[0.0; 16], &GP_ANCHORS, &[100.0, 100.0]);
    close(&s, &[0.9, 0.8]);
    close(&b, &gp_boxes(&[0, 1]));
}

#[test]
fn generate_proposals_post_nms_limits_the_output() {
    let mut g = gp(T::TensorFloat32);
    g.post = 1;
    let (s, _, _, _, _) = g.run(&GP_SCORES, &[0.0; 16], &GP_ANCHORS, &[100.0, 100.0]);
    close(&s, &[0.9]);
}

#[test]
fn generate_proposals_drops_boxes_not_above_min_size() {
    // 10x10 boxes are not > 10: only p1 and p3 remain, and p3 falls to p1.
    let mut g = gp(T::TensorFloat32);
    g.min_size = 10.0;
    let (s, b, _, _, _) = g.run(&GP_SCORES, &[0.0; 16], &GP_ANCHORS, &[100.0, 100.0]);
    close(&s, &[0.8]);
    close(&b, &gp_boxes(&[1]));
}

#[test]
fn generate_proposals_moves_and_clips_to_the_image() {
    // One anchor (0,0)-(20,20), delta x 0.5: (10,0)-(30,20), clipped to width 25.
    let mut g = gp(T::TensorFloat32);
    g.w = 1;
    g.a = 1;
    let (_, b, _, _, _) = g.run(
        &[0.5],
        &[0.5, 0.0, 0.0, 0.0],
        &[0.0, 0.0, 20.0, 20.0],
        &[100.0, 25.0],
    );
    close(&b, &[10.0, 0.0, 25.0, 20.0]);
}

#[test]
fn generate_proposals_runs_each_image_separately() {
    // Image 1 scores .1 .2 .3 .4: p3 first, p1 falls to it, then p2 and p0.
    let mut g = gp(T::TensorFloat32);
    g.b = 2;
    let mut sc = GP_SCORES.to_vec();
    sc.extend([0.1, 0.2, 0.3, 0.4]);
    let (s, b, bt, _, _) = g.run(&sc, &[0.0; 32], &GP_ANCHORS, &[100.0; 4]);
    close(&s, &[0.9, 0.8, 0.7, 0.4, 0.3, 0.1]);
    close(&b, &gp_boxes(&[0, 1, 2, 3, 2, 0]));
    assert_eq!(bt, vec![0, 0, 0, 1, 1, 1]);
}

#[test]
fn generate_proposals_float16() {
    let g = gp(T::TensorFloat16);
    let r = run_outputs(
        g.graph(),
        &[
            f16_bytes(&GP_SCORES),
            f16_bytes(&[0.0; 16]),
            f16_bytes(&GP_ANCHORS),
            f16_bytes(&[100.0, 100.0]),
        ],
    )
    .unwrap();
    close_tol(&f16_vals(&r[0].0), &[0.9, 0.8, 0.7], 1e-3);
    close(&f16_vals(&r[1].0), &gp_boxes(&[0, 1, 2]));
}

fn i16b(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| ((x * 8.0) as i16).to_le_bytes())
        .collect()
}

#[test]
fn generate_proposals_quant8() {
    let g = gp(T::TensorQuant8Asymm);
    let r = run_outputs(
        g.graph(),
        &[
            u8b(&[90, 80, 70, 60]),
            vec![128; 16],
            i16b(&GP_ANCHORS),
            u16b(&[800, 800]),
        ],
    )
    .unwrap();
    assert_eq!(r[0].0, vec![90, 80, 70]);
    let want: Vec<u16> = gp_boxes(&[0, 1, 2])
        .iter()
        .map(|&v| (v * 8.0) as u16)
        .collect();
    assert_eq!(b_u16(&r[1].0), want);
    assert_eq!(b_i32(&r[2].0), vec![0, 0, 0]);
}

#[test]
fn generate_proposals_quant8_signed() {
    let g = gp(T::TensorQuant8AsymmSigned);
    let r = run_outputs(
        g.graph(),
        &[
            i8b(&[-38, -48, -58, -68]),
            vec![0; 16],
            i16b(&GP_ANCHORS),
            u16b(&[800, 800]),
        ],
    )
    .unwrap();
    let got: Vec<i32> = r[0].0.iter().map(|&b| i32::from(b as i8)).collect();
    assert_eq!(got, vec![-38, -48, -58]);
}

#[test]
fn generate_proposals_refuses_anchors_without_scale_one_eighth() {
    let mut g = gp(T::TensorQuant8Asymm);
    g.anchor_q = (0.25, 0);
    assert!(refused(g.graph()).contains("input 2 (anchors)"));
}

#[test]
fn generate_proposals_refuses_asymmetric_anchors() {
    let mut g = gp(T::TensorQuant8Asymm).graph();
    g.operands[2].ty = T::TensorQuant16Asymm;
    assert!(refused(g).contains("input 2 (anchors) must be TENSOR_QUANT16_SYMM"));
}

#[test]
fn generate_proposals_refuses_wrong_argument_count() {
    let mut g = gp(T::TensorFloat32).graph();
    g.operations[0].inputs.pop();
    assert!(refused(g).contains("inputs given"));
}

#[test]
fn generate_proposals_refuses_boxes_output_of_another_type() {
    let mut g = gp(T::TensorFloat32).graph();
    let o = g.operations[0].outputs[1] as usize;
    g.operands[o].ty = T::TensorFloat16;
    assert!(refused(g).contains("output 1 (boxes)"));
}

#[test]
fn generate_proposals_fails_on_deltas_not_four_per_anchor() {
    let mut g = gp(T::TensorFloat32).graph();
    g.operands[1].dimensions = vec![1, 1, 2, 6];
    let e = exec_error(
        g,
        &[
            fb(&GP_SCORES),
            fb(&[0.0; 12]),
            fb(&GP_ANCHORS),
            fb(&[100.0, 100.0]),
        ],
    );
    assert!(e.contains("4 values per anchor"), "{e}");
}

#[test]
fn generate_proposals_fails_on_anchor_count_mismatch() {
    let mut g = gp(T::TensorFloat32).graph();
    g.operands[2].dimensions = vec![1, 4];
    let e = exec_error(
        g,
        &[
            fb(&GP_SCORES),
            fb(&[0.0; 16]),
            fb(&GP_ANCHORS[..4]),
            fb(&[100.0, 100.0]),
        ],
    );
    assert!(e.contains("one box per anchor"), "{e}");
}

#[test]
fn generate_proposals_fails_on_inverted_anchor() {
    let g = gp(T::TensorFloat32).graph();
    let mut an = GP_ANCHORS;
    an[0] = 15.0;
    let e = exec_error(
        g,
        &[fb(&GP_SCORES), fb(&[0.0; 16]), fb(&an), fb(&[100.0, 100.0])],
    );
    assert!(e.contains("anchor 0"), "{e}");
}

// ---------------------------------------------------------------- HEATMAP_MAX_KEYPOINT

/// HEATMAP_MAX_KEYPOINT of `n` boxes with `k` keypoints on `s`x`s` heatmaps.
fn heatmap_graph(ty: OperandType, n: u32, k: u32, s: u32, nchw: bool) -> Graph {
    let mut b = B::new();
    let q8 = is_q8(ty);
    let hd = if nchw { [n, k, s, s] } else { [n, s, s, k] };
    let h = b.input(ty, &hd);
    let bt = if q8 { T::TensorQuant16Asymm } else { ty };
    let bx = b.input(bt, &[n, 4]);
    let layout = b.boolean(nchw);
    let os = b.output(ty, &[n, k]);
    let ok = b.output(bt, &[n, k, 2]);
    if q8 {
        let zp = if ty == T::TensorQuant8Asymm { 0 } else { -128 };
        b.q(h, 0.1, zp);
        b.q(bx, 0.125, 0);
        b.q(os, 0.05, zp);
        b.q(ok, 0.125, 0);
    }
    b.op(O::HeatmapMaxKeypoint, &[h, bx, layout], &[os, ok]);
    b.g
}

fn heatmap_f32(g: Graph, hm: &[f32], boxes: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let r = run_outputs(g, &[fb(hm), fb(boxes)]).unwrap();
    (bf(&r[0].0), bf(&r[1].0))
}

const HM_BOX: [f32; 4] = [0.0, 0.0, 30.0, 60.0];

#[test]
fn heatmap_symmetric_peak_stays_on_its_pixel() {
    // Peak 4 at (1, 1), symmetric neighbours: no correction; x = 1.5/3 of 30, y = 1.5/3 of 60.
    let hm = [0.0, 1.0, 0.0, 1.0, 4.0, 1.0, 0.0, 1.0, 0.0];
    let (s, kp) = heatmap_f32(
        heatmap_graph(T::TensorFloat32, 1, 1, 3, false),
        &hm,
        &HM_BOX,
    );
    close(&s, &[4.0]);
    close(&kp, &[15.0, 30.0]);
}

#[test]
fn heatmap_peak_moves_towards_the_larger_neighbour() {
    // Row 1 is 1 4 2: b = (-0.5, 0), A = diag(-5, -8): delta x = 0.1, score
    // 4 + 0.05 - 0.025 = 4.025; x = (1 + 0.1 + 0.5)/3 · 30 = 16.
    let hm = [0.0, 0.0, 0.0, 1.0, 4.0, 2.0, 0.0, 0.0, 0.0];
    let (s, kp) = heatmap_f32(
        heatmap_graph(T::TensorFloat32, 1, 1, 3, false),
        &hm,
        &HM_BOX,
    );
    close(&s, &[4.025]);
    close(&kp, &[16.0, 30.0]);
}

#[test]
fn heatmap_corner_peak_mirrors_its_neighbourhood() {
    // Peak 5 at (0, 0): the row and column before it mirror row and column 1, so the grid is
    // symmetric and the peak stays: x = 0.5/3 · 30, y = 0.5/3 · 60.
    let hm = [5.0, 2.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    let (s, kp) = heatmap_f32(
        heatmap_graph(T::TensorFloat32, 1, 1, 3, false),
        &hm,
        &HM_BOX,
    );
    close(&s, &[5.0]);
    close(&kp, &[5.0, 10.0]);
}

#[test]
fn heatmap_flat_map_keeps_the_first_maximum() {
    // A singular Hessian: no refinement, the first pixel, score unchanged.
    let (s, kp) = heatmap_f32(
        heatmap_graph(T::TensorFloat32, 1, 1, 3, false),
        &[1.0; 9],
        &HM_BOX,
    );
    close(&s, &[1.0]);
    close(&kp, &[5.0, 10.0]);
}

#[test]
fn heatmap_nchw_two_keypoints_and_boxes_offset() {
    // Keypoint 0 the symmetric peak, keypoint 1 the corner peak; the box starts at (10, 20).
    let mut hm = vec![0.0, 1.0, 0.0, 1.0, 4.0, 1.0, 0.0, 1.0, 0.0];
    hm.extend([5.0, 2.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    let (s, kp) = heatmap_f32(
        heatmap_graph(T::TensorFloat32, 1, 2, 3, true),
        &hm,
        &[10.0, 20.0, 40.0, 80.0],
    );
    close(&s, &[4.0, 5.0]);
    close(&kp, &[25.0, 50.0, 15.0, 30.0]);
}

#[test]
fn heatmap_nhwc_two_keypoints_interleaved() {
    let a = [0.0, 1.0, 0.0, 1.0, 4.0, 1.0, 0.0, 1.0, 0.0];
    let c = [5.0, 2.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    let hm: Vec<f32> = a.iter().zip(&c).flat_map(|(&x, &y)| [x, y]).collect();
    let (s, kp) = heatmap_f32(
        heatmap_graph(T::TensorFloat32, 1, 2, 3, false),
        &hm,
        &HM_BOX,
    );
    close(&s, &[4.0, 5.0]);
    close(&kp, &[15.0, 30.0, 5.0, 10.0]);
}

#[test]
fn heatmap_float16() {
    let hm = [0.0, 0.0, 0.0, 1.0, 4.0, 2.0, 0.0, 0.0, 0.0];
    let r = run_outputs(
        heatmap_graph(T::TensorFloat16, 1, 1, 3, false),
        &[f16_bytes(&hm), f16_bytes(&HM_BOX)],
    )
    .unwrap();
    close_tol(&f16_vals(&r[0].0), &[4.025], 1e-2);
    close_tol(&f16_vals(&r[1].0), &[16.0, 30.0], 2e-2);
}

#[test]
fn heatmap_quant8() {
    // Heatmap ×10 (scale 0.1); score 4.025 / 0.05 ≈ 80.5; keypoints ×8.
    let hm = [0, 0, 0, 10, 40, 20, 0, 0, 0];
    let r = run_outputs(
        heatmap_graph(T::TensorQuant8Asymm, 1, 1, 3, false),
        &[u8b(&hm), u16b(&[0, 0, 240, 480])],
    )
    .unwrap();
    within_one(&[i32::from(r[0].0[0])], &[81]);
    assert_eq!(b_u16(&r[1].0), vec![128, 240]);
}

#[test]
fn heatmap_quant8_signed() {
    let hm: Vec<i32> = [0, 0, 0, 10, 40, 20, 0, 0, 0]
        .iter()
        .map(|v| v - 128)
        .collect();
    let r = run_outputs(
        heatmap_graph(T::TensorQuant8AsymmSigned, 1, 1, 3, false),
        &[i8b(&hm), u16b(&[0, 0, 240, 480])],
    )
    .unwrap();
    within_one(&[i32::from(r[0].0[0] as i8)], &[81 - 128]);
    assert_eq!(b_u16(&r[1].0), vec![128, 240]);
}

#[test]
fn heatmap_refuses_keypoints_of_another_type() {
    let mut g = heatmap_graph(T::TensorFloat32, 1, 1, 3, false);
    let o = g.operations[0].outputs[1] as usize;
    g.operands[o].ty = T::TensorFloat16;
    assert!(refused(g).contains("output 1 (keypoints)"));
}

#[test]
fn heatmap_refuses_quantized_boxes_without_scale_one_eighth() {
    let mut g = heatmap_graph(T::TensorQuant8Asymm, 1, 1, 3, false);
    g.operands[1].scale = 1.0;
    assert!(refused(g).contains("scale 0.125"));
}

#[test]
fn heatmap_refuses_wrong_argument_count() {
    let mut g = heatmap_graph(T::TensorFloat32, 1, 1, 3, false);
    g.operations[0].inputs.pop();
    assert!(refused(g).contains("inputs given"));
}

#[test]
fn heatmap_fails_on_non_square_heatmap() {
    let mut g = heatmap_graph(T::TensorFloat32, 1, 1, 3, false);
    g.operands[0].dimensions = vec![1, 3, 2, 1];
    let e = exec_error(g, &[fb(&[0.0; 6]), fb(&HM_BOX)]);
    assert!(e.contains("square and at least 2x2"), "{e}");
}

#[test]
fn heatmap_fails_on_one_pixel_heatmap() {
    let g = heatmap_graph(T::TensorFloat32, 1, 1, 1, false);
    let e = exec_error(g, &[fb(&[1.0]), fb(&HM_BOX)]);
    assert!(e.contains("at least 2x2"), "{e}");
}

#[test]
fn heatmap_fails_on_box_count_mismatch() {
    let mut g = heatmap_graph(T::TensorFloat32, 1, 1, 3, false);
    g.operands[1].dimensions = vec![2, 4];
    let e = exec_error(g, &[fb(&[0.0; 9]), fb(&[0.0; 8])]);
    assert!(e.contains("one per heatmap"), "{e}");
}

#[test]
fn heatmap_fails_on_inverted_box() {
    let g = heatmap_graph(T::TensorFloat32, 1, 1, 3, false);
    let e = exec_error(g, &[fb(&[0.0; 9]), fb(&[5.0, 0.0, 1.0, 1.0])]);
    assert!(e.contains("x2 < x1"), "{e}");
}

// ---------------------------------------------------------------- DETECTION_POSTPROCESSING

/// DETECTION_POSTPROCESSING of `b` batches of `a` anchors and `c` classes.
struct Dp {
    ty: OperandType,
    b: u32,
    a: u32,
    c: u32,
    len: u32,
    scales: [f32; 4],
    regular: bool,
    max_det: i32,
    max_classes: i32,
    per_class: i32,
    score_thr: f32,
    iou: f32,
    bg_in_label: bool,
}

fn dp(regular: bool) -> Dp {
    Dp {
        ty: T::TensorFloat32,
        b: 1,
        a: 3,
        c: 3,
        len: 4,
        scales: [10.0; 4],
        regular,
        max_det: 4,
        max_classes: 1,
        per_class: 3,
        score_thr: 0.15,
        iou: 0.5,
        bg_in_label: false,
    }
}

impl Dp {
    fn n_out(&self) -> u32 {
        let m = self.max_det.max(0) as u32;
        if self.regular {
            m
        } else {
            m * self.max_classes.max(0) as u32
        }
    }

    fn graph(&self) -> Graph {
        let mut b = B::new();
        let t = self.ty;
        let s = b.input(t, &[self.b, self.a, self.c]);
        let d = b.input(t, &[self.b, self.a, self.len]);
        let an = b.input(t, &[self.a, 4]);
        let sc: Vec<u32> = self.scales.iter().map(|&v| fscalar(&mut b, t, v)).collect();
        let reg = b.boolean(self.regular);
        let md = b.int(self.max_det);
        let mc = b.int(self.max_classes);
        let pc = b.int(self.per_class);
        let st = fscalar(&mut b, t, self.score_thr);
        let it = fscalar(&mut b, t, self.iou);
        let bg = b.boolean(self.bg_in_label);
        let n = self.n_out();
        let os = b.output(t, &[self.b, n]);
        let ob = b.output(t, &[self.b, n, 4]);
        let oc = b.output(T::TensorInt32, &[self.b, n]);
        let on = b.output(T::TensorInt32, &[self.b]);
        b.op(
            O::DetectionPostprocessing,
            &[
                s, d, an, sc[0], sc[1], sc[2], sc[3], reg, md, mc, pc, st, it, bg,
            ],
            &[os, ob, oc, on],
        );
        b.g
    }

    /// Float32 run: scores, boxes, classes, detection counts.
    fn run(&self, scores: &[f32], deltas: &[f32], anchors: &[f32]) -> NmsOut {
        let r = run_outputs(self.graph(), &[fb(scores), fb(deltas), fb(anchors)]).unwrap();
        (
            bf(&r[0].0),
            bf(&r[1].0),
            b_i32(&r[2].0),
            b_i32(&r[3].0),
            r[0].1.clone(),
        )
    }
}

// Anchors (centre y, centre x, h, w) (5,5,10,10), (6,6,10,10), (25,25,10,10) decode with zero
// encodings to (0,0)-(10,10), (1,1)-(11,11) (IoU 81/119 with the first) and (20,20)-(30,30).
const DP_ANCHORS: [f32; 12] = [
    5.0, 5.0, 10.0, 10.0, 6.0, 6.0, 10.0, 10.0, 25.0, 25.0, 10.0, 10.0,
];
const DP_SCORES: [f32; 9] = [0.0, 0.9, 0.2, 0.0, 0.8, 0.7, 0.0, 0.1, 0.6];
const DP_BOXES: [[f32; 4]; 3] = [
    [0.0, 0.0, 10.0, 10.0],
    [1.0, 1.0, 11.0, 11.0],
    [20.0, 20.0, 30.0, 30.0],
];
fn dp_boxes(a: &[usize], pad: usize) -> Vec<f32> {
    let mut v: Vec<f32> = a.iter().flat_map(|&i| DP_BOXES[i]).collect();
    v.extend(std::iter::repeat_n(0.0, 4 * pad));
    v
}

#[test]
fn detection_postprocessing_regular_nms_per_class() {
    // Class 1: a0 .9 beats a1 .8 (overlap); class 2: a1 .7 beats a0 .2, a2 .6 stays.
    let (s, b, c, n, d) = dp(true).run(&DP_SCORES, &[0.0; 12], &DP_ANCHORS);
    assert_eq!(d, vec![1, 4]);
    close(&s, &[0.9, 0.7, 0.6, 0.0]);
    close(&b, &dp_boxes(&[0, 1, 2], 1));
    assert_eq!(c, vec![0, 1, 1, 0]);
    assert_eq!(n, vec![3]);
}

#[test]
fn detection_postprocessing_background_in_label_keeps_class_numbers() {
    let mut p = dp(true);
    p.bg_in_label = true;
    let (_, _, c, _, _) = p.run(&DP_SCORES, &[0.0; 12], &DP_ANCHORS);
    assert_eq!(c, vec![1, 2, 2, 0]);
}

#[test]
fn detection_postprocessing_regular_keeps_max_detections() {
    let mut p = dp(true);
    p.max_det = 2;
    let (s, _, c, n, d) = p.run(&DP_SCORES, &[0.0; 12], &DP_ANCHORS);
    assert_eq!(d, vec![1, 2]);
    close(&s, &[0.9, 0.7]);
    assert_eq!(c, vec![0, 1]);
    assert_eq!(n, vec![2]);
}

#[test]
fn detection_postprocessing_fast_nms_on_best_class() {
    // Best scores a0 .9, a1 .8, a2 .6: a1 falls to a0; one class each: a0 class 1, a2 class 2.
    let (s, b, c, n, _) = dp(false).run(&DP_SCORES, &[0.0; 12], &DP_ANCHORS);
    close(&s, &[0.9, 0.6, 0.0, 0.0]);
    close(&b, &dp_boxes(&[0, 2], 2));
    assert_eq!(c, vec![0, 1, 0, 0]);
    assert_eq!(n, vec![2]);
}

#[test]
fn detection_postprocessing_fast_nms_with_two_classes_per_detection() {
    let mut p = dp(false);
    p.max_classes = 2;
    let (s, b, c, n, d) = p.run(&DP_SCORES, &[0.0; 12], &DP_ANCHORS);
    assert_eq!(d, vec![1, 8]);
    close(&s, &[0.9, 0.2, 0.6, 0.1, 0.0, 0.0, 0.0, 0.0]);
    close(&b, &dp_boxes(&[0, 0, 2, 2], 4));
    assert_eq!(c, vec![0, 1, 1, 0, 0, 0, 0, 0]);
    assert_eq!(n, vec![4]);
}

#[test]
fn detection_postprocessing_decodes_scaled_encodings() {
    // Anchor (5, 5, 10, 10), encodings (1, 2, 5 ln 2, 0) with scales (10, 10, 5, 5):
    // centre (6, 7), height 20, width 10 → (-4, 2)-(16, 12).
    let mut p = dp(false);
    p.a = 1;
    p.c = 2;
    p.max_det = 1;
    p.scales = [10.0, 10.0, 5.0, 5.0];
    let (s, b, _, _, _) = p.run(
        &[0.0, 0.9],
        &[1.0, 2.0, 5.0 * LN2, 0.0],
        &[5.0, 5.0, 10.0, 10.0],
    );
    close(&s, &[0.9]);
    close(&b, &[-4.0, 2.0, 16.0, 12.0]);
}

#[test]
fn detection_postprocessing_ignores_encoding_values_past_four() {
    let mut p = dp(true);
    p.len = 6;
    // Each anchor's encoding is (0, 0, 0, 0, 7, 7): the extra values change nothing.
    let enc = [0.0, 0.0, 0.0, 0.0, 7.0, 7.0].repeat(3);
    let (s, b, _, _, _) = p.run(&DP_SCORES, &enc, &DP_ANCHORS);
    close(&s, &[0.9, 0.7, 0.6, 0.0]);
    close(&b, &dp_boxes(&[0, 1, 2], 1));
}

#[test]
fn detection_postprocessing_pads_each_batch() {
    // Batch 1 has no score above the threshold: count 0 and zero rows.
    let mut p = dp(true);
    p.b = 2;
    let mut sc = DP_SCORES.to_vec();
    sc.extend([0.0; 9]);
    let (s, _, _, n, d) = p.run(&sc, &[0.0; 24], &DP_ANCHORS);
    assert_eq!(d, vec![2, 4]);
    close(&s, &[0.9, 0.7, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(n, vec![3, 0]);
}

#[test]
fn detection_postprocessing_float16() {
    let mut p = dp(true);
    p.ty = T::TensorFloat16;
    let r = run_outputs(
        p.graph(),
        &[
            f16_bytes(&DP_SCORES),
            f16_bytes(&[0.0; 12]),
            f16_bytes(&DP_ANCHORS),
        ],
    )
    .unwrap();
    close_tol(&f16_vals(&r[0].0), &[0.9, 0.7, 0.6, 0.0], 1e-3);
    close(&f16_vals(&r[1].0), &dp_boxes(&[0, 1, 2], 1));
    assert_eq!(b_i32(&r[3].0), vec![3]);
}

#[test]
fn detection_postprocessing_refuses_quantized_scores() {
    let mut p = dp(true);
    p.ty = T::TensorQuant8Asymm;
    let mut g = p.graph();
    for o in &mut g.operands {
        if o.ty == T::TensorQuant8Asymm {
            o.scale = 1.0;
        }
    }
    assert!(refused(g).contains("must be TENSOR_FLOAT32 or TENSOR_FLOAT16"));
}

#[test]
fn detection_postprocessing_refuses_zero_max_detections() {
    let mut p = dp(true);
    p.max_det = 0;
    assert!(refused(p.graph()).contains("maximum detections must be > 0"));
}

#[test]
fn detection_postprocessing_refuses_zero_scale() {
    let mut p = dp(true);
    p.scales[2] = 0.0;
    assert!(refused(p.graph()).contains("h scale must be > 0"));
}

#[test]
fn detection_postprocessing_refuses_negative_iou_threshold() {
    let mut p = dp(true);
    p.iou = -0.5;
    assert!(refused(p.graph()).contains("IoU threshold must be >= 0"));
}

#[test]
fn detection_postprocessing_refuses_float_classes_output() {
    let mut g = dp(true).graph();
    let o = g.operations[0].outputs[2] as usize;
    g.operands[o].ty = T::TensorFloat32;
    assert!(refused(g).contains("output 2 (classes)"));
}

#[test]
fn detection_postprocessing_refuses_wrong_argument_count() {
    let mut g = dp(true).graph();
    g.operations[0].inputs.pop();
    assert!(refused(g).contains("inputs given"));
}

#[test]
fn detection_postprocessing_fails_on_zero_per_class_limit_with_regular_nms() {
    let mut p = dp(true);
    p.per_class = 0;
    let e = exec_error(
        p.graph(),
        &[fb(&DP_SCORES), fb(&[0.0; 12]), fb(&DP_ANCHORS)],
    );
    assert!(
        e.contains("maximum detections per class must be > 0"),
        "{e}"
    );
}

#[test]
fn detection_postprocessing_fails_on_zero_classes_per_detection_with_fast_nms() {
    let mut p = dp(false);
    p.max_classes = 0;
    let mut g = p.graph();
    // The outputs' extent is unknown when it would be 0.
    for k in 0..3 {
        let o = g.operations[0].outputs[k] as usize;
        g.operands[o].dimensions[1] = 0;
    }
    let e = exec_error(g, &[fb(&DP_SCORES), fb(&[0.0; 12]), fb(&DP_ANCHORS)]);
    assert!(
        e.contains("maximum classes per detection must be > 0"),
        "{e}"
    );
}

#[test]
fn detection_postprocessing_fails_with_a_single_class() {
    let mut p = dp(true);
    p.c = 1;
    let e = exec_error(p.graph(), &[fb(&[0.5; 3]), fb(&[0.0; 12]), fb(&DP_ANCHORS)]);
    assert!(e.contains("at least 2 classes"), "{e}");
}

#[test]
fn detection_postprocessing_fails_on_short_encodings() {
    let mut p = dp(true);
    p.len = 3;
    let e = exec_error(p.graph(), &[fb(&DP_SCORES), fb(&[0.0; 9]), fb(&DP_ANCHORS)]);
    assert!(e.contains(">= 4"), "{e}");
}

#[test]
fn detection_postprocessing_fails_on_anchor_count_mismatch() {
    let p = dp(true);
    let mut g = p.graph();
    g.operands[2].dimensions = vec![2, 4];
    let e = exec_error(g, &[fb(&DP_SCORES), fb(&[0.0; 12]), fb(&DP_ANCHORS[..8])]);
    assert!(e.contains("one per anchor"), "{e}");
}

#[test]
fn roi_align_of_no_regions_with_huge_cells_fails_instead_of_allocating() {
    // No region selected, but 2^30 x 2^30 cells per region: refused before any allocation.
    let mut s = nms(T::TensorFloat32, 0);
    s.score_thr = 0.95;
    let mut b = B::new();
    let [_, ob, _, obt] = s.add(&mut b, false);
    let x = b.input(T::TensorFloat32, &[1, 4, 4, 1]);
    let big = b.int(1 << 30);
    let hr = b.float(1.0);
    let sr = b.int(2);
    let layout = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[0, 0, 0, 1]);
    b.op(
        O::RoiAlign,
        &[x, ob, obt, big, big, hr, hr, sr, sr, layout],
        &[o],
    );
    let e = exec_error(
        b.g,
        &[
            fb(&NMS_SCORES),
            fb(&nms_boxes()),
            i32_bytes(&[0; 4]),
            fb(&ramp()),
        ],
    );
    assert!(e.contains("too large"), "{e}");
}

#[test]
fn generate_proposals_feed_roi_align() {
    // The three proposals (0,0)-(10,10), (0,0)-(20,20), (10,0)-(20,10) at ratio 5 cover
    // (0,0)-(2,2), the whole 4x4 ramp and (2,0)-(4,2): one cell of 2x2 samples each gives
    // 4·1 + 1 = 5, 4·2 + 2 = 10 (samples 1 and 3) and 4·1 + 2.75 = 6.75.
    let mut b = B::new();
    let g = gp(T::TensorFloat32);
    let mut gg = g.graph();
    // Turn the proposal boxes and batch indices into temporaries feeding ROI_ALIGN.
    let ob = gg.operations[0].outputs[1];
    let obt = gg.operations[0].outputs[2];
    for &o in &[ob, obt] {
        gg.operands[o as usize].lifetime = Lifetime::TemporaryVariable;
    }
    gg.output_indexes.retain(|&o| o != ob && o != obt);
    b.g = gg;
    let x = b.input(T::TensorFloat32, &[1, 4, 4, 1]);
    let one = b.int(1);
    let ratio = b.float(5.0);
    let sr = b.int(2);
    let layout = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[0, 1, 1, 1]);
    b.op(
        O::RoiAlign,
        &[x, ob, obt, one, one, ratio, ratio, sr, sr, layout],
        &[o],
    );
    let r = run_outputs(
        b.g,
        &[
            fb(&GP_SCORES),
            fb(&[0.0; 16]),
            fb(&GP_ANCHORS),
            fb(&[100.0, 100.0]),
            fb(&ramp()),
        ],
    )
    .unwrap();
    close(&bf(&r[0].0), &[0.9, 0.8, 0.7]);
    assert_eq!(r[1].1, vec![3, 1, 1, 1]);
    close(&bf(&r[1].0), &[5.0, 10.0, 6.75]);
}
