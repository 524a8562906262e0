//! A MobileNetV1-1.0-224-shaped float32 network (deterministic random weights) through the
//! public API: milliseconds per inference at 1 and 2 threads, GFLOP/s, the 2-thread speed-up,
//! the minor page faults per inference (fresh pages the allocator maps for activations), the
//! cost of allocating the activations alone, each layer timed alone, summed by kind, and the
//! 3×3 depthwise kernel on chains of MobileNet's depthwise shapes.
//!
//! `cargo bench -p nnaccel-cpu --bench mobilenet [-- REPS]` (default 20 timed inferences per
//! thread count, after 3 warm-ups; the median is printed). Figures: `docs/dependencies.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::time::Instant;

use nnaccel_cpu::{
    Graph, InputArg, Lifetime, Operand, OperandType as T, Operation, OperationType as O,
    PreparedGraph,
};

const RELU6: i32 = 3;
const SAME: i32 = 1;
const VALID: i32 = 2;

/// Builds a chain of layers, each reading the previous one's output.
struct Net {
    g: Graph,
    /// The current activation: operand index and NHWC extents.
    cur: u32,
    shape: [u32; 4],
    flops: f64,
    seed: u32,
    /// Floats of each layer's output, in order.
    sizes: Vec<usize>,
}

impl Net {
    fn new(shape: [u32; 4]) -> Self {
        let mut g = Graph::default();
        g.operands.push(Operand::new(
            T::TensorFloat32,
            shape.to_vec(),
            Lifetime::SubgraphInput,
        ));
        g.input_indexes = vec![0];
        Net {
            g,
            cur: 0,
            shape,
            flops: 0.0,
            seed: 1,
            sizes: Vec::new(),
        }
    }

    fn operand(&mut self, ty: T, dims: &[u32], lifetime: Lifetime) -> u32 {
        self.g
            .operands
            .push(Operand::new(ty, dims.to_vec(), lifetime));
        u32::try_from(self.g.operands.len() - 1).unwrap()
    }

    fn constant(&mut self, ty: T, dims: &[u32], bytes: Vec<u8>) -> u32 {
        let (offset, length) = (self.g.operand_values.len(), bytes.len());
        self.g.operand_values.extend(bytes);
        self.operand(ty, dims, Lifetime::ConstantCopy { offset, length })
    }

    /// Random floats in ±`scale`/2 (xorshift, so runs are comparable).
    fn weights(&mut self, dims: &[u32], scale: f32) -> u32 {
        let n: u32 = dims.iter().product();
        self.seed = self.seed.wrapping_add(0x9e37_79b9);
        let mut s = self.seed | 1;
        let bytes = (0..n)
            .flat_map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * scale).to_le_bytes()
            })
            .collect();
        self.constant(T::TensorFloat32, dims, bytes)
    }

    fn ints(&mut self, vs: &[i32]) -> Vec<u32> {
        vs.iter()
            .map(|v| self.constant(T::Int32, &[], v.to_le_bytes().to_vec()))
            .collect()
    }

    /// Appends `op` on the current activation with `extra` inputs, producing `shape`.
    fn layer(&mut self, op: O, extra: Vec<u32>, shape: [u32; 4], flops: f64) {
        let out = self.operand(T::TensorFloat32, &shape, Lifetime::TemporaryVariable);
        let mut inputs = vec![self.cur];
        inputs.extend(extra);
        self.g.operations.push(Operation {
            op,
            inputs,
            outputs: vec![out],
        });
        self.cur = out;
        self.shape = shape;
        self.flops += flops;
        self.sizes.push(shape.iter().map(|&d| d as usize).product());
    }

    /// CONV_2D f×f, SAME padding, RELU6.
    fn conv(&mut self, f: u32, stride: u32, oc: u32) {
        let [n, h, w, c] = self.shape;
        let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
        let scale = 2.0 / (f * f * c) as f32;
        let mut extra = vec![
            self.weights(&[oc, f, f, c], scale.sqrt()),
            self.weights(&[oc], 0.1),
        ];
        extra.extend(self.ints(&[SAME, stride as i32, stride as i32, RELU6]));
        let flops = 2.0 * f64::from(n * oh * ow * oc) * f64::from(f * f * c);
        self.layer(O::Conv2d, extra, [n, oh, ow, oc], flops);
    }

    /// DEPTHWISE_CONV_2D 3×3, multiplier 1, SAME padding, RELU6.
    fn depthwise(&mut self, stride: u32) {
        let [n, h, w, c] = self.shape;
        let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
        let mut extra = vec![self.weights(&[1, 3, 3, c], 0.6), self.weights(&[c], 0.1)];
        extra.extend(self.ints(&[SAME, stride as i32, stride as i32, 1, RELU6]));
        let flops = 2.0 * 9.0 * f64::from(n * oh * ow * c);
        self.layer(O::DepthwiseConv2d, extra, [n, oh, ow, c], flops);
    }

    /// AVERAGE_POOL_2D over the whole image, then FULLY_CONNECTED to `units`.
    /// Makes the current activation the graph's output (for a network cut short).
    fn finish(&mut self) {
        if let Some(o) = self.g.operands.get_mut(self.cur as usize) {
            o.lifetime = Lifetime::SubgraphOutput;
        }
        self.g.output_indexes = vec![self.cur];
    }

    fn head(&mut self, units: u32) {
        let [n, h, w, c] = self.shape;
        let extra = self.ints(&[VALID, 1, 1, w as i32, h as i32, 0]);
        self.layer(
            O::AveragePool2d,
            extra,
            [n, 1, 1, c],
            f64::from(n * h * w * c),
        );
        let mut extra = vec![
            self.weights(&[units, c], (2.0 / c as f32).sqrt()),
            self.weights(&[units], 0.1),
        ];
        extra.extend(self.ints(&[0]));
        let out = self.operand(T::TensorFloat32, &[n, units], Lifetime::SubgraphOutput);
        self.g.operations.push(Operation {
            op: O::FullyConnected,
            inputs: std::iter::once(self.cur).chain(extra).collect(),
            outputs: vec![out],
        });
        self.g.output_indexes = vec![out];
        self.flops += 2.0 * f64::from(n * units * c);
    }
}

/// One layer of the network, as [`Net`] builds it.
#[derive(Clone, Copy)]
enum Layer {
    /// CONV_2D: filter size, stride, output depth.
    Conv(u32, u32, u32),
    /// DEPTHWISE_CONV_2D 3×3: stride.
    Depthwise(u32),
    /// AVERAGE_POOL_2D and FULLY_CONNECTED: classes.
    Head(u32),
}

impl Layer {
    fn add_to(self, net: &mut Net) {
        match self {
            Layer::Conv(f, stride, oc) => net.conv(f, stride, oc),
            Layer::Depthwise(stride) => net.depthwise(stride),
            Layer::Head(units) => net.head(units),
        }
    }

    /// The row of the per-kind table this layer counts in.
    fn kind(self) -> &'static str {
        match self {
            Layer::Conv(1, ..) => "CONV_2D 1x1",
            Layer::Conv(..) => "CONV_2D 3x3/2 (first, 3 channels)",
            Layer::Depthwise(_) => "DEPTHWISE_CONV_2D 3x3",
            Layer::Head(_) => "AVERAGE_POOL + FULLY_CONNECTED",
        }
    }
}

/// MobileNetV1 1.0 at 224×224: 27 convolutions, a pooling and a classifier.
fn mobilenet_v1() -> Vec<Layer> {
    let mut layers = vec![Layer::Conv(3, 2, 32)];
    let blocks: [(u32, u32); 13] = [
        (1, 64),
        (2, 128),
        (1, 128),
        (2, 256),
        (1, 256),
        (2, 512),
        (1, 512),
        (1, 512),
        (1, 512),
        (1, 512),
        (1, 512),
        (2, 1024),
        (1, 1024),
    ];
    for (stride, oc) in blocks {
        layers.push(Layer::Depthwise(stride));
        layers.push(Layer::Conv(1, 1, oc));
    }
    layers.push(Layer::Head(1000));
    layers
}

/// Each layer alone (its own one-layer graph, byte decoding and encoding included), at 1 and 2
/// threads, summed by kind: where the time goes and which layers gain from the second thread.
fn per_kind(layers: &[Layer], reps: usize) {
    let mut kinds: Vec<(&str, usize, [f64; 2])> = Vec::new();
    let mut shape = [1, 224, 224, 3];
    for &layer in layers {
        let mut one = Net::new(shape);
        layer.add_to(&mut one);
        if !matches!(layer, Layer::Head(_)) {
            one.finish();
        }
        let next = one.shape;
        let out_len = match layer {
            Layer::Head(units) => units as usize * 4,
            _ => next.iter().map(|&d| d as usize).product::<usize>() * 4,
        };
        let in_floats: usize = shape.iter().map(|&d| d as usize).product();
        let input = ramp(in_floats);
        let p = PreparedGraph::new(one.g).expect("the layer is valid");
        let mut t = [0.0; 2];
        for (slot, threads) in t.iter_mut().zip([1, 2]) {
            nnaccel_cpu::set_max_threads(threads);
            *slot = time_graph(&p, &input, out_len, reps).0;
        }
        match kinds.iter_mut().find(|k| k.0 == layer.kind()) {
            Some(k) => {
                k.1 += 1;
                k.2[0] += t[0];
                k.2[1] += t[1];
            }
            None => kinds.push((layer.kind(), 1, t)),
        }
        shape = next;
    }
    println!("each layer alone, summed by kind (ms):");
    println!(
        "{:<36} {:>6} {:>9} {:>9} {:>8}",
        "kind", "layers", "1 thread", "2 threads", "2T/1T"
    );
    for (kind, n, [one, two]) in kinds {
        println!(
            "{kind:<36} {n:>6} {:>9.3} {:>9.3} {:>7.2}x",
            one * 1e3,
            two * 1e3,
            one / two
        );
    }
}

/// `floats` input values in [0, 1) as little-endian bytes (the same in every run).
fn ramp(floats: usize) -> Vec<u8> {
    (0..floats)
        .flat_map(|i| ((i % 251) as f32 / 251.0).to_le_bytes())
        .collect()
}

/// Median seconds of `reps` executions of `p` on `input` (after 3 warm-ups), with the minor
/// page faults per execution.
fn time_graph(
    p: &PreparedGraph,
    input: &[u8],
    out_len: usize,
    reps: usize,
) -> (f64, f64, Option<f64>) {
    let mut out = vec![0u8; out_len];
    let mut run = || {
        let inputs = [InputArg::Value {
            data: input,
            dimensions: vec![],
        }];
        p.execute(&[], &inputs, &mut [&mut out[..]])
            .expect("execution");
    };
    for _ in 0..3 {
        run();
    }
    let faults0 = minor_faults();
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64()
        })
        .collect();
    let faults = faults0
        .zip(minor_faults())
        .map(|(a, b)| (b - a) as f64 / reps as f64);
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0], faults)
}

/// Median ms of allocating each layer's output as the kernels do (`vec![0f32; n]`, so
/// zeroed) with the executor's lifetimes (freed once the next layer has read it), and nothing
/// else: what a memory plan that reuses buffers without zeroing could save at most.
fn alloc_only_ms(sizes: &[usize], reps: usize) -> f64 {
    let mut times: Vec<f64> = (0..reps + 3)
        .map(|_| {
            let t = Instant::now();
            let mut prev: Option<Vec<f32>> = None;
            for &n in sizes {
                let v = std::hint::black_box(vec![0f32; n]);
                prev = Some(v);
            }
            drop(std::hint::black_box(prev));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Minor page faults of this process so far (field 10 of /proc/self/stat).
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(7)?.parse().ok()
}

fn main() {
    let reps: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let layers = mobilenet_v1();
    let mut net = Net::new([1, 224, 224, 3]);
    for &layer in &layers {
        layer.add_to(&mut net);
    }
    let flops = net.flops;
    let sizes = net.sizes.clone();
    let input = ramp(224 * 224 * 3);
    let p = PreparedGraph::new(net.g).expect("the network is valid");
    let mut out = vec![0u8; 1000 * 4];
    println!(
        "MobileNetV1-1.0-224 float32, {:.2} GFLOP per inference, median of {reps}",
        flops / 1e9
    );
    let inputs = [InputArg::Value {
        data: &input,
        dimensions: vec![],
    }];
    let faults0 = minor_faults();
    let t = Instant::now();
    p.execute(&[], &inputs, &mut [&mut out[..]])
        .expect("execution");
    let faults = faults0.zip(minor_faults()).map(|(a, b)| b - a);
    println!(
        "first inference: {:.2} ms, {} page faults",
        t.elapsed().as_secs_f64() * 1e3,
        faults.map_or("n/a".into(), |f| f.to_string())
    );
    let mut per_thread = Vec::new();
    for threads in [1, 2] {
        nnaccel_cpu::set_max_threads(threads);
        let (med, min, faults) = time_graph(&p, &input, out.len(), reps);
        per_thread.push(med);
        println!(
            "{threads} thread(s): {:8.2} ms  {:6.1} GFLOP/s  min {:.2} ms  page faults/inference {}",
            med * 1e3,
            flops / med / 1e9,
            min * 1e3,
            faults.map_or("n/a".into(), |f| format!("{f:.0}")),
        );
    }
    if let [one, two] = per_thread[..] {
        println!("2 threads / 1 thread speed-up: {:.2}x", one / two);
    }
    let total: usize = sizes.iter().sum();
    println!(
        "allocating and zeroing the {} activations alone ({:.1} MB): {:.2} ms",
        sizes.len(),
        total as f64 * 4.0 / 1e6,
        alloc_only_ms(&sizes, reps)
    );
    per_kind(&layers, reps);
    depthwise_chains(reps);
}

/// MobileNet's 3×3 depthwise shapes alone: a graph of ten such layers in a row (so the input's
/// decoding and the output's encoding weigh a tenth), best of `reps` × 5 executions, at 1 and 2
/// threads.
fn depthwise_chains(reps: usize) {
    const CHAIN: u32 = 10;
    println!(
        "3x3 depthwise, chains of {CHAIN} layers of one shape (GFLOP/s, best of {}):",
        reps * 5
    );
    println!(
        "{:<18} {:>9} {:>9}",
        "shape (stride 1)", "1 thread", "2 threads"
    );
    for (hw, c) in [
        (112u32, 32u32),
        (56, 128),
        (28, 256),
        (14, 512),
        (7, 1024),
        (56, 144),
    ] {
        let mut net = Net::new([1, hw, hw, c]);
        for _ in 0..CHAIN {
            net.depthwise(1);
        }
        net.finish();
        let flops = net.flops;
        let floats = (hw * hw * c) as usize;
        let input = ramp(floats);
        let p = PreparedGraph::new(net.g).expect("the chain is valid");
        let rates = [1, 2].map(|threads| {
            nnaccel_cpu::set_max_threads(threads);
            let (_, best, _) = time_graph(&p, &input, floats * 4, reps * 5);
            flops / best / 1e9
        });
        println!(
            "{:<18} {:>9.1} {:>9.1}",
            format!("{hw}x{hw}x{c}"),
            rates[0],
            rates[1]
        );
    }
}
