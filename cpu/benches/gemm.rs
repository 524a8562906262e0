//! GFLOP/s of FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D through the public API (a
//! one-operation [`PreparedGraph`], so byte decoding and encoding are included), next to numpy's
//! matmul (OpenBLAS) on the GEMM-equivalent shapes.
//!
//! `cargo bench -p nnaccel-cpu --bench gemm [-- NAME...]` (NAME: substring of the layers to
//! run, e.g. `1x1`). `NNACCEL_BENCH_THREADS=N` caps our kernels (and
//! OpenBLAS, through OPENBLAS_NUM_THREADS) at N threads; the default is every CPU.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use nnaccel_cpu::{
    Graph, InputArg, Lifetime, Operand, OperandType as T, Operation, OperationType as O,
    PreparedGraph,
};

/// One benchmarked layer.
struct Case {
    name: &'static str,
    /// What numpy runs for comparison: a GEMM (m, k, n) or a depthwise (h, w, c).
    numpy: Numpy,
    flops: f64,
    graph: Graph,
    input: Vec<u8>,
    out_len: usize,
}

#[derive(Clone, Copy)]
enum Numpy {
    Gemm(usize, usize, usize),
    Depthwise(usize, usize, usize),
}

struct Builder(Graph);

impl Builder {
    fn add(&mut self, ty: T, dims: &[u32], lifetime: Lifetime) -> u32 {
        self.0
            .operands
            .push(Operand::new(ty, dims.to_vec(), lifetime));
        (self.0.operands.len() - 1) as u32
    }
    fn konst(&mut self, ty: T, dims: &[u32], bytes: Vec<u8>) -> u32 {
        let offset = self.0.operand_values.len();
        let length = bytes.len();
        self.0.operand_values.extend(bytes);
        self.add(ty, dims, Lifetime::ConstantCopy { offset, length })
    }
    fn floats(&mut self, dims: &[u32], seed: u32) -> u32 {
        let n: u32 = dims.iter().product();
        self.konst(T::TensorFloat32, dims, f32_bytes(n as usize, seed))
    }
    fn int(&mut self, v: i32) -> u32 {
        self.konst(T::Int32, &[], v.to_le_bytes().to_vec())
    }
}

fn f32_bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .flat_map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5).to_le_bytes()
        })
        .collect()
}

/// A graph with one operation: input 0 is the graph input, the rest are constants.
fn one_op(op: O, in_dims: &[u32], consts: &[&[u32]], ints: &[i32], out_dims: &[u32]) -> Graph {
    let mut b = Builder(Graph::default());
    let x = b.add(T::TensorFloat32, in_dims, Lifetime::SubgraphInput);
    let mut ins = vec![x];
    for (i, d) in consts.iter().enumerate() {
        ins.push(b.floats(d, 7 + i as u32));
    }
    for &v in ints {
        ins.push(b.int(v));
    }
    let o = b.add(T::TensorFloat32, out_dims, Lifetime::SubgraphOutput);
    b.0.operations.push(Operation {
        op,
        inputs: ins,
        outputs: vec![o],
    });
    b.0.input_indexes = vec![x];
    b.0.output_indexes = vec![o];
    b.0
}

/// FULLY_CONNECTED with 1024x1024 weights.
fn fc_case(name: &'static str, batch: u32) -> Case {
    let (isz, units) = (1024u32, 1024u32);
    Case {
        name,
        numpy: Numpy::Gemm(batch as usize, 1024, 1024),
        flops: 2.0 * f64::from(batch) * 1024.0 * 1024.0,
        graph: one_op(
            O::FullyConnected,
            &[batch, isz],
            &[&[units, isz], &[units]],
            &[0],
            &[batch, units],
        ),
        input: f32_bytes((batch * isz) as usize, 1),
        out_len: (batch * units) as usize * 4,
    }
}

/// CONV_2D, stride 1, SAME padding, no activation.
fn conv_case(name: &'static str, hw: u32, c: u32, oc: u32, f: u32) -> Case {
    let (m, k, n) = ((hw * hw) as usize, (f * f * c) as usize, oc as usize);
    Case {
        name,
        numpy: Numpy::Gemm(m, k, n),
        flops: 2.0 * (m * k * n) as f64,
        graph: one_op(
            O::Conv2d,
            &[1, hw, hw, c],
            &[&[oc, f, f, c], &[oc]],
            &[1, 1, 1, 0],
            &[1, hw, hw, oc],
        ),
        input: f32_bytes((hw * hw * c) as usize, 2),
        out_len: (hw * hw * oc) as usize * 4,
    }
}

/// DEPTHWISE_CONV_2D 3x3, stride 1, SAME padding, multiplier 1.
fn dw_case(name: &'static str, hw: u32, c: u32) -> Case {
    Case {
        name,
        numpy: Numpy::Depthwise(hw as usize, hw as usize, c as usize),
        flops: 2.0 * 9.0 * (hw * hw * c) as f64,
        graph: one_op(
            O::DepthwiseConv2d,
            &[1, hw, hw, c],
            &[&[1, 3, 3, c], &[c]],
            &[1, 1, 1, 1, 0],
            &[1, hw, hw, c],
        ),
        input: f32_bytes((hw * hw * c) as usize, 3),
        out_len: (hw * hw * c) as usize * 4,
    }
}

/// Median seconds per execution after warm-up.
fn time_case(p: &PreparedGraph, case: &Case) -> f64 {
    let mut out = vec![0u8; case.out_len];
    let mut run = || {
        let inputs = [InputArg::Value {
            data: &case.input,
            dimensions: vec![],
        }];
        let mut outs: Vec<&mut [u8]> = vec![&mut out[..]];
        p.execute(&[], &inputs, &mut outs)
            .expect("execution failed");
    };
    let warm = Instant::now();
    for _ in 0..3 {
        run();
    }
    let per = warm.elapsed() / 3;
    let reps = (Duration::from_millis(400).as_secs_f64() / per.as_secs_f64().max(1e-6))
        .clamp(7.0, 101.0) as usize;
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

const NUMPY_SCRIPT: &str = r#"
import sys, time
try:
    import numpy as np
except ImportError:
    sys.exit(3)
def med(f, rep):
    for _ in range(3):
        f()
    ts = []
    for _ in range(rep):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]
rng = np.random.default_rng(0)
print("version", np.__version__, flush=True)
for spec in sys.argv[1:]:
    kind, a, b, c = spec.split(":")
    a, b, c = int(a), int(b), int(c)
    if kind == "gemm":
        x = rng.random((a, b), dtype=np.float32); w = rng.random((b, c), dtype=np.float32)
        t = med(lambda: np.matmul(x, w), 15)
        print(spec, 2.0 * a * b * c / t / 1e9, flush=True)
    else:
        x = rng.random((a, b, c), dtype=np.float32); f = rng.random((3, 3, c), dtype=np.float32)
        bias = rng.random(c, dtype=np.float32)
        def dw():
            xp = np.pad(x, ((1, 1), (1, 1), (0, 0)))
            out = np.broadcast_to(bias, x.shape).copy()
            for ky in range(3):
                for kx in range(3):
                    out += xp[ky:ky + a, kx:kx + b, :] * f[ky, kx]
            return out
        t = med(dw, 15)
        print(spec, 2.0 * 9 * a * b * c / t / 1e9, flush=True)
"#;

fn numpy_spec(n: Numpy) -> String {
    match n {
        Numpy::Gemm(m, k, n) => format!("gemm:{m}:{k}:{n}"),
        Numpy::Depthwise(h, w, c) => format!("dw:{h}:{w}:{c}"),
    }
}

/// numpy's GFLOP/s per spec, or None (with a message printed) when numpy cannot run.
fn run_numpy(specs: &[String], threads: usize) -> Option<HashMap<String, f64>> {
    let attempt = || {
        Command::new("python3")
            .arg("-c")
            .arg(NUMPY_SCRIPT)
            .args(specs)
            .env("OPENBLAS_NUM_THREADS", threads.to_string())
            .output()
    };
    let mut out = match attempt() {
        Ok(o) => o,
        Err(e) => {
            println!("numpy column omitted: cannot run python3 ({e})");
            return None;
        }
    };
    if out.status.code() == Some(3) {
        println!("numpy is not installed; running: python3 -m pip install --quiet numpy");
        let pip = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "numpy"])
            .status();
        match pip {
            Ok(s) if s.success() => println!("pip installed numpy"),
            Ok(s) => println!("pip failed ({s})"),
            Err(e) => println!("pip could not run ({e})"),
        }
        out = attempt().ok()?;
    }
    if !out.status.success() {
        println!(
            "numpy column omitted: python3 failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    let mut res = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = line.split_whitespace();
        if let (Some(k), Some(v)) = (it.next(), it.next()) {
            if k == "version" {
                println!("numpy {v}, OPENBLAS_NUM_THREADS={threads}");
            } else if let Ok(g) = v.parse::<f64>() {
                res.insert(k.to_string(), g);
            }
        }
    }
    Some(res)
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument selects layers by name substring.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let Some(n) = std::env::var("NNACCEL_BENCH_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        nnaccel_cpu::set_max_threads(n);
    }
    let threads = nnaccel_cpu::max_threads();
    let cases = vec![
        fc_case("FULLY_CONNECTED 64x1024 * 1024x1024", 64),
        fc_case("FULLY_CONNECTED 1x1024 * 1024x1024", 1),
        conv_case("CONV_2D 3x3 112x112x32->32", 112, 32, 32, 3),
        conv_case("CONV_2D 1x1 112x112x32->64", 112, 32, 64, 1),
        dw_case("DEPTHWISE 3x3 112x112x32", 112, 32),
        conv_case("CONV_2D 3x3 14x14x512->512", 14, 512, 512, 3),
        conv_case("CONV_2D 1x1 14x14x512->512", 14, 512, 512, 1),
        dw_case("DEPTHWISE 3x3 14x14x512", 14, 512),
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .collect();
    println!("nnaccel-cpu bench: median of repeated executions after 3 warm-up runs");
    println!("(ours = PreparedGraph::execute incl. byte decode/encode; {threads} thread(s) max)");
    let mut ours = Vec::new();
    for case in &cases {
        let p = PreparedGraph::new(case.graph.clone()).expect("graph rejected");
        let mut row = Vec::new();
        for t in [1, threads] {
            nnaccel_cpu::set_max_threads(t);
            row.push(case.flops / time_case(&p, case) / 1e9);
            if threads == 1 {
                row.push(row[0]);
                break;
            }
        }
        nnaccel_cpu::set_max_threads(threads);
        ours.push(row);
    }
    let specs: Vec<String> = cases.iter().map(|c| numpy_spec(c.numpy)).collect();
    let numpy = run_numpy(&specs, threads);
    println!();
    println!(
        "{:<36} {:>20} {:>9} {:>9} {:>9} {:>9}",
        "layer", "numpy shape", "ours 1T", "ours", "numpy", "ours/np"
    );
    for ((case, row), spec) in cases.iter().zip(&ours).zip(&specs) {
        let np = numpy.as_ref().and_then(|m| m.get(spec)).copied();
        let shape = match case.numpy {
            Numpy::Gemm(m, k, n) => format!("{m}x{k}@{k}x{n}"),
            Numpy::Depthwise(..) => "elementwise MAC".to_string(),
        };
        let (np_s, ratio) = match np {
            Some(g) => (format!("{g:.1}"), format!("{:.2}", row[1] / g)),
            None => ("n/a".to_string(), "n/a".to_string()),
        };
        println!(
            "{:<36} {:>20} {:>9.1} {:>9.1} {:>9} {:>9}",
            case.name, shape, row[0], row[1], np_s, ratio
        );
    }
    println!();
    println!("GFLOP/s; GEMM-shaped work counts 2*M*N*K, depthwise 2*9*H*W*C.");
    println!("numpy: matmul on the GEMM-equivalent shape (conv 3x3 = the im2col GEMM, im2col");
    println!("itself not timed); depthwise = 9 shifted multiply-adds on a padded array.");
}
