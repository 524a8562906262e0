//! Tests of the detection family. Expected values are worked out by hand in the comments
//! (bilinear samples of linear ramps, maxima of small grids, box arithmetic, IoU = 81/119 for
//! two 10x10 boxes offset by one pixel).

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

// ---------------------------------------------------------------- helpers

fn hb(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| f32_to_f16(x).to_le_bytes())
        .collect()
}
fn bh(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}
fn u16b(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn i32b(v: &[i32]) -> Vec<u8> {
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

/// Runs `g` with byte inputs (model dims); every output's bytes and shape.
/// Every output's bytes and shape.
type Outs = Vec<(Vec<u8>, Vec<u32>)>;

fn run_all(g: Graph, inputs: &[Vec<u8>]) -> Result<Outs, ExecError> {
    let p = PreparedGraph::new(g).unwrap();
    let args: Vec<InputArg<'_>> = inputs
        .iter()
        .map(|d| InputArg::Value {
            data: d,
            dimensions: vec![],
        })
        .collect();
    let n_out = p.graph().output_indexes.len();
    let mut bufs = vec![vec![0u8; 1 << 16]; n_out];
    let shapes = {
        let mut outs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        p.execute(&[], &args, &mut outs)?
    };
    let g = p.graph();
    Ok(bufs
        .into_iter()
        .zip(shapes)
        .enumerate()
        .map(|(k, (mut b, s))| {
            let sz = g.operands[g.output_indexes[k] as usize].ty.element_size();
            let n: usize = s.dimensions.iter().map(|&d| d as usize).product();
            b.truncate(n * sz);
            (b, s.dimensions)
        })
        .collect())
}

fn exec_err(g: Graph, inputs: &[Vec<u8>]) -> String {
    match run_all(g, inputs) {
        Err(ExecError::InvalidArgument(m)) => m,
        other => panic!("expected an execution error, got {other:?}"),
    }
}

fn refused(g: Graph) -> String {
    match PreparedGraph::new(g) {
        Err(GraphError::InvalidOperation { reason, .. }) => reason,
        other => panic!("expected InvalidOperation, got {other:?}"),
    }
}

fn fscalar(b: &mut B, ty: OperandType, v: f32) -> u32 {
    if ty == T::TensorFloat16 {
        b.konst(T::Float16, &[], f32_to_f16(v).to_le_bytes().to_vec())
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
        let mut r = run_all(self.graph(), &[xb, rb, i32b(batch)])?;
        let (o, d) = r.remove(0);
        let v = match self.ty {
            T::TensorFloat32 => bf(&o),
            T::TensorFloat16 => bh(&o),
            T::TensorQuant8Asymm => o.iter().map(|&q| f32::from(q)).collect(),
            _ => o.iter().map(|&q| f32::from(q as i8)).collect(),
        };
        Ok((v, d))
    }

    fn bytes(&self, x: &[f32], rois: &[f32]) -> (Vec<u8>, Vec<u8>) {
        let quant = |v: f32| (v / self.in_q.0).round() as i32 + self.in_q.1;
        let xb = match self.ty {
            T::TensorFloat32 => fb(x),
            T::TensorFloat16 => hb(x),
            T::TensorQuant8Asymm => u8b(&x.iter().map(|&v| quant(v)).collect::<Vec<_>>()),
            _ => i8b(&x.iter().map(|&v| quant(v)).collect::<Vec<_>>()),
        };
        let rb = match self.ty {
            T::TensorFloat32 => fb(rois),
            T::TensorFloat16 => hb(rois),
            _ => u16b(&rois.iter().map(|&v| (v * 8.0) as u16).collect::<Vec<_>>()),
        };
        (xb, rb)
    }

    fn err(&self, x: &[f32], rois: &[f32], batch: &[i32]) -> String {
        let (xb, rb) = self.bytes(x, rois);
        exec_err(self.graph(), &[xb, rb, i32b(batch)])
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
    let bi = i32b(&[0, 0]);
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
