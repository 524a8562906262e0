//! 8-bit CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED against our float32 kernels on the same
//! shapes: MobileNetV1/V2 layers at a 224×224 input, through the public API (a one-operation
//! [`PreparedGraph`], so byte decoding and encoding are included).
//!
//! `cargo bench -p nnaccel-cpu --bench qconv [-- NAME...]` (NAME: substring of the layers to
//! run, e.g. `dw`). Each layer runs on 1 thread, then on 2 (`NNACCEL_BENCH_THREADS=1,2`
//! chooses); the int8 operands are
//! TENSOR_QUANT8_ASYMM_SIGNED with per-channel filters and, for FULLY_CONNECTED, per-tensor
//! symmetric weights (what LiteRT's int8 models use). Prints
//! ms, GOP/s (2 operations a multiply-add) and float32 ms / int8 ms.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::time::{Duration, Instant};

use nnaccel_cpu::{
    ChannelQuant, Graph, InputArg, Lifetime, OperandType as T, OperationType as O, PreparedGraph,
    set_max_threads,
};

#[path = "common/builder.rs"]
mod builder;
use builder::Builder;

/// One layer: an operation on an NHWC input.
#[derive(Clone, Copy)]
enum Layer {
    /// CONV_2D: input (h, w, c), filter (fh, fw), output channels, stride, SAME padding.
    Conv {
        hwc: (u32, u32, u32),
        f: u32,
        oc: u32,
        stride: u32,
    },
    /// DEPTHWISE_CONV_2D 3×3 (multiplier 1), SAME padding.
    Dw { hwc: (u32, u32, u32), stride: u32 },
    /// FULLY_CONNECTED, batch 1.
    Fc { isz: u32, units: u32 },
}

const fn conv(h: u32, c: u32, f: u32, oc: u32, stride: u32) -> Layer {
    Layer::Conv {
        hwc: (h, h, c),
        f,
        oc,
        stride,
    }
}

const fn dw(h: u32, c: u32, stride: u32) -> Layer {
    Layer::Dw {
        hwc: (h, h, c),
        stride,
    }
}

const LAYERS: &[(&str, Layer)] = &[
    ("conv 3x3 s2 224x224 3->32", conv(224, 3, 3, 32, 2)),
    ("dw 3x3 s1 112x112x32", dw(112, 32, 1)),
    ("dw 3x3 s2 112x112x96", dw(112, 96, 2)),
    ("dw 3x3 s1 56x56x144", dw(56, 144, 1)),
    ("dw 3x3 s2 56x56x144", dw(56, 144, 2)),
    ("dw 3x3 s1 28x28x192", dw(28, 192, 1)),
    ("dw 3x3 s1 14x14x384", dw(14, 384, 1)),
    ("dw 3x3 s2 14x14x512", dw(14, 512, 2)),
    ("dw 3x3 s1 7x7x960", dw(7, 960, 1)),
    ("1x1 112x112 32->64", conv(112, 32, 1, 64, 1)),
    ("1x1 112x112 32->16", conv(112, 32, 1, 16, 1)),
    ("1x1 56x56 96->24", conv(56, 96, 1, 24, 1)),
    ("1x1 56x56 24->144", conv(56, 24, 1, 144, 1)),
    ("1x1 56x56 144->24", conv(56, 144, 1, 24, 1)),
    ("1x1 28x28 192->32", conv(28, 192, 1, 32, 1)),
    ("1x1 14x14 384->64", conv(14, 384, 1, 64, 1)),
    ("1x1 7x7 576->160", conv(7, 576, 1, 160, 1)),
    ("1x1 7x7 320->1280", conv(7, 320, 1, 1280, 1)),
    ("1x1 7x7 1024->1024", conv(7, 1024, 1, 1024, 1)),
    (
        "fc 1280->1000",
        Layer::Fc {
            isz: 1280,
            units: 1000,
        },
    ),
    (
        "fc 1024->1000",
        Layer::Fc {
            isz: 1024,
            units: 1000,
        },
    ),
    // The batch-1 MLP of the model bench (784 -> 1024 -> 1024 -> 10).
    (
        "fc 784->1024",
        Layer::Fc {
            isz: 784,
            units: 1024,
        },
    ),
    (
        "fc 1024->1024",
        Layer::Fc {
            isz: 1024,
            units: 1024,
        },
    ),
];

/// Deterministic pseudo-random bytes (xorshift32).
fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 12) as u8
        })
        .collect()
}

fn floats(n: usize, seed: u32) -> Vec<u8> {
    bytes(n, seed)
        .into_iter()
        .flat_map(|b| ((f32::from(b) - 128.0) / 256.0).to_le_bytes())
        .collect()
}

/// The layer as a one-operation graph in float32 or int8, with its input bytes and multiply-adds.
fn graph(layer: Layer, int8: bool) -> (Graph, Vec<u8>, f64) {
    let mut b = Builder(Graph::default());
    let (in_dims, f_dims, oc, out_dims, macs) = match layer {
        Layer::Conv { hwc, f, oc, stride } => {
            let (h, w, c) = hwc;
            let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
            let macs = f64::from(oh * ow * oc) * f64::from(f * f * c);
            (
                vec![1, h, w, c],
                vec![oc, f, f, c],
                oc,
                vec![1, oh, ow, oc],
                macs,
            )
        }
        Layer::Dw { hwc, stride } => {
            let (h, w, c) = hwc;
            let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
            let macs = f64::from(oh * ow * c) * 9.0;
            (
                vec![1, h, w, c],
                vec![1, 3, 3, c],
                c,
                vec![1, oh, ow, c],
                macs,
            )
        }
        Layer::Fc { isz, units } => (
            vec![1, isz],
            vec![units, isz],
            units,
            vec![1, units],
            f64::from(isz * units),
        ),
    };
    let n_in: u32 = in_dims.iter().product();
    let n_f: u32 = f_dims.iter().product();
    let k = n_f / oc;
    let (x, f, bias, out, input) = if int8 {
        let ty = T::TensorQuant8AsymmSigned;
        let x = b.add(ty, &in_dims, Lifetime::SubgraphInput);
        b.quant(x, 0.02, -5);
        let per_channel = !matches!(layer, Layer::Fc { .. });
        let f = if per_channel {
            let f = b.konst(
                T::TensorQuant8SymmPerChannel,
                &f_dims,
                bytes(n_f as usize, 2),
            );
            let dim = if matches!(layer, Layer::Dw { .. }) {
                3
            } else {
                0
            };
            b.0.operands[f as usize].channel_quant = Some(ChannelQuant {
                channel_dim: dim,
                scales: (0..oc).map(|j| 0.004 + 0.0001 * (j % 7) as f32).collect(),
            });
            f
        } else {
            // Per-tensor symmetric, as LiteRT's int8 FULLY_CONNECTED weights are.
            let f = b.konst(ty, &f_dims, bytes(n_f as usize, 2));
            b.quant(f, 0.004, 0);
            f
        };
        let bias_v: Vec<u8> = bytes(oc as usize, 3)
            .into_iter()
            .flat_map(|v| (i32::from(v) * 40 - 5000).to_le_bytes())
            .collect();
        let bias = b.konst(T::TensorInt32, &[oc], bias_v);
        let out = b.add(ty, &out_dims, Lifetime::SubgraphOutput);
        // Outputs spread over the range: scale ≈ 0.02 · 0.004 · 64 · sqrt(k).
        b.quant(out, 0.02 * 0.004 * 64.0 * (k as f32).sqrt(), 2);
        (x, f, bias, out, bytes(n_in as usize, 1))
    } else {
        let x = b.add(T::TensorFloat32, &in_dims, Lifetime::SubgraphInput);
        let f = b.konst(T::TensorFloat32, &f_dims, floats(n_f as usize, 2));
        let bias = b.konst(T::TensorFloat32, &[oc], floats(oc as usize, 3));
        let out = b.add(T::TensorFloat32, &out_dims, Lifetime::SubgraphOutput);
        (x, f, bias, out, floats(n_in as usize, 1))
    };
    let mut inputs = vec![x, f, bias];
    let op = match layer {
        Layer::Conv { stride, .. } => {
            inputs.extend([
                b.int(1),
                b.int(stride as i32),
                b.int(stride as i32),
                b.int(3),
            ]);
            O::Conv2d
        }
        Layer::Dw { stride, .. } => {
            let args = [
                b.int(1),
                b.int(stride as i32),
                b.int(stride as i32),
                b.int(1),
            ];
            inputs.extend(args);
            inputs.push(b.int(3));
            O::DepthwiseConv2d
        }
        Layer::Fc { .. } => {
            inputs.push(b.int(0));
            O::FullyConnected
        }
    };
    b.0.operations.push(nnaccel_cpu::Operation {
        op,
        inputs,
        outputs: vec![out],
    });
    b.0.input_indexes = vec![x];
    b.0.output_indexes = vec![out];
    (b.0, input, macs)
}

/// Median time of one execution (at least 5 runs and 0.3 s after a warm-up run).
fn time(p: &PreparedGraph, input: &[u8], out: &mut [u8]) -> Duration {
    let args = [InputArg::Value {
        data: input,
        dimensions: vec![],
    }];
    let mut run = || {
        let t = Instant::now();
        p.execute(&[], &args, &mut [&mut out[..]]).unwrap();
        t.elapsed()
    };
    run();
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < 5 || (start.elapsed() < Duration::from_millis(300) && times.len() < 1000) {
        times.push(run());
    }
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let layers: Vec<_> = LAYERS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!(
        "{:<28} {:>3} {:>9} {:>9} {:>8} {:>8} {:>10}",
        "layer", "thr", "f32 ms", "int8 ms", "f32 GOP/s", "i8 GOP/s", "f32/int8"
    );
    let threads_list: Vec<usize> = match std::env::var("NNACCEL_BENCH_THREADS") {
        Ok(v) => v.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
        Err(_) => vec![1, 2],
    };
    for threads in threads_list {
        set_max_threads(threads);
        let (mut f_total, mut q_total) = (0.0, 0.0);
        for (name, layer) in &layers {
            let mut ms = [0.0; 2];
            let mut ops = 0.0;
            for (i, int8) in [false, true].into_iter().enumerate() {
                let (g, input, macs) = graph(*layer, int8);
                let p = PreparedGraph::new(g).unwrap();
                let mut out = vec![0u8; 64 << 20];
                ms[i] = time(&p, &input, &mut out).as_secs_f64() * 1e3;
                ops = 2.0 * macs;
            }
            f_total += ms[0];
            q_total += ms[1];
            println!(
                "{:<28} {:>3} {:>9.3} {:>9.3} {:>8.1} {:>8.1} {:>9.2}x",
                name,
                threads,
                ms[0],
                ms[1],
                ops / ms[0] / 1e6,
                ops / ms[1] / 1e6,
                ms[0] / ms[1]
            );
        }
        println!(
            "{:<28} {:>3} {:>9.3} {:>9.3} {:>8} {:>8} {:>9.2}x",
            "total",
            threads,
            f_total,
            q_total,
            "",
            "",
            f_total / q_total
        );
    }
}
