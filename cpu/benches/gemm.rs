//! GFLOP/s of FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D through the public API (a
//! one-operation [`PreparedGraph`], taking its input and output as bytes: read and written in
//! place, as aligned little-endian float32 bytes are, or copied otherwise), next to numpy's
//! matmul (OpenBLAS) on the GEMM-equivalent shapes.
//!
//! `cargo bench -p nnaccel-cpu --bench gemm [-- NAME...]` (NAME: substring of the layers to
//! run, e.g. `1x1`). `NNACCEL_BENCH_THREADS=N` caps our kernels (and
//! OpenBLAS, through OPENBLAS_NUM_THREADS) at N threads; the default is every CPU.
//!
//! A second table times the GEMM kernels themselves (matrixmultiply, the gemm crate, and our packed
//! kernel `fgemm` with the weights packed once beforehand) on the GEMM-equivalent shapes, on 1
//! thread and on all of them, each next to numpy with as many threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::collections::HashMap;
use std::process::Command;
use std::time::Instant;

use nnaccel_cpu::{
    Graph, InputArg, Lifetime, OperandType as T, Operation, OperationType as O, PreparedGraph,
};

#[path = "common/builder.rs"]
mod builder;
use builder::Builder;

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
        ins.push(b.konst(
            T::TensorFloat32,
            d,
            f32_bytes(d.iter().product::<u32>() as usize, 7 + i as u32),
        ));
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
    median_secs(|| {
        let inputs = [InputArg::Value {
            data: &case.input,
            dimensions: vec![],
        }];
        let mut outs: Vec<&mut [u8]> = vec![&mut out[..]];
        p.execute(&[], &inputs, &mut outs)
            .expect("execution failed");
    })
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
    println!(
        "(ours = PreparedGraph::execute on byte buffers, read and written in place; {threads} thread(s) max)"
    );
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
    let shapes: Vec<(usize, usize, usize)> = cases
        .iter()
        .filter_map(|c| match c.numpy {
            Numpy::Gemm(m, k, n) => Some((m, k, n)),
            Numpy::Depthwise(..) => None,
        })
        .collect();
    let crates: Vec<[f64; 8]> = shapes
        .iter()
        .map(|&(m, k, n)| crate_row(m, k, n, threads))
        .collect();
    let numpy = run_numpy(&specs, threads);
    let numpy_1t = if threads > 1 {
        run_numpy(&specs, 1)
    } else {
        numpy.clone()
    };
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
    print_crates(&shapes, &crates, numpy_1t.as_ref(), numpy.as_ref(), threads);
}

/// The GEMM crates alone: `c[m×n] = a[m×k] · B`, all row-major, in GFLOP/s:
/// `[mm 1T, gemm 1T, gemm 1T with B as [n][k], mm nT, gemm nT (our split), gemm nT (Rayon),
/// ours 1T, ours nT]` (ours: [`nnaccel_cpu::PackedGemm`], B packed once before timing).
fn crate_row(m: usize, k: usize, n: usize, threads: usize) -> [f64; 8] {
    let a: Vec<f32> = f32_bytes(m * k, 4)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let b: Vec<f32> = f32_bytes(k * n, 5)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let mut c = vec![0f32; m * n];
    let flops = 2.0 * (m * k * n) as f64;
    let mut gflops = |lib: Lib, kn: bool, split: usize, rayon: usize| {
        let (rsb, csb) = if kn { (n, 1) } else { (1, k) };
        flops
            / median_secs(|| {
                run_split(lib, m, k, n, &a, &b, rsb, csb, &mut c, split, rayon);
            })
            / 1e9
    };
    let crates = [
        gflops(Lib::Mm, true, 1, 1),
        gflops(Lib::Gemm, true, 1, 1),
        gflops(Lib::Gemm, false, 1, 1),
        gflops(Lib::Mm, true, threads, 1),
        gflops(Lib::Gemm, true, threads, 1),
        gflops(Lib::Gemm, true, 1, threads),
    ];
    // Ours takes the weights as declared, [n][k]: b read as [k][n] transposed.
    let w: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
    let ours = nnaccel_cpu::PackedGemm::new(n, k, &w).expect("pack");
    let mut ours_gflops =
        |t: usize| flops / median_secs(|| ours.run(m, &a, &mut c, t).expect("packed gemm")) / 1e9;
    let (o1, on) = (ours_gflops(1), ours_gflops(threads));
    [
        crates[0], crates[1], crates[2], crates[3], crates[4], crates[5], o1, on,
    ]
}

#[derive(Clone, Copy)]
enum Lib {
    Mm,
    Gemm,
}

/// Median seconds of `f` after 3 warm-up calls, over about 400 ms.
fn median_secs(mut f: impl FnMut()) -> f64 {
    let warm = Instant::now();
    for _ in 0..3 {
        f();
    }
    let per = warm.elapsed().as_secs_f64() / 3.0;
    let reps = (0.4 / per.max(1e-6)).clamp(7.0, 101.0) as usize;
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A pointer into `c` handed to a scoped thread that writes a disjoint part of it.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: each thread writes only its own rows or columns of `c` (see `run_split`), and `c`
// outlives the scope.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}
impl Out {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// The product on `split` scoped threads (row blocks when m >= n, else column blocks), each
/// calling `lib` single-threaded, or on one call with gemm's Rayon(`rayon`) when split is 1.
#[allow(clippy::too_many_arguments)]
fn run_split(
    lib: Lib,
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    b: &[f32],
    rsb: usize,
    csb: usize,
    c: &mut [f32],
    split: usize,
    rayon: usize,
) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    let cp = Out(c.as_mut_ptr());
    // (row0, rows, col0, cols) of each part.
    let parts: Vec<(usize, usize, usize, usize)> = if m >= n {
        let per = m.div_ceil(split);
        (0..m)
            .step_by(per)
            .map(|i| (i, per.min(m - i), 0, n))
            .collect()
    } else {
        let per = n.div_ceil(split).div_ceil(16) * 16;
        (0..n)
            .step_by(per)
            .map(|j| (0, m, j, per.min(n - j)))
            .collect()
    };
    let work = |&(i0, rows, j0, cols): &(usize, usize, usize, usize)| {
        let (a, b, c) = (
            a.as_ptr().wrapping_add(i0 * k),
            b.as_ptr().wrapping_add(j0 * csb),
            cp.get().wrapping_add(i0 * n + j0),
        );
        let par = if rayon > 1 {
            gemm::Parallelism::Rayon(rayon)
        } else {
            gemm::Parallelism::None
        };
        // The asserts above bound every element read from `a` (rows i0..i0+rows of k) and `b`
        // (B[kk][j] = b[kk*rsb + j*csb] for j < n, both layouts hold k*n floats); the part
        // writes c[i*n + j] for its own rows or columns only, disjoint from the others'.
        match lib {
            // SAFETY: as said above the match.
            Lib::Mm => unsafe {
                matrixmultiply::sgemm(
                    rows,
                    k,
                    cols,
                    1.0,
                    a,
                    k as isize,
                    1,
                    b,
                    rsb as isize,
                    csb as isize,
                    0.0,
                    c,
                    n as isize,
                    1,
                )
            },
            // SAFETY: as said above the match.
            Lib::Gemm => unsafe {
                gemm::gemm(
                    rows,
                    cols,
                    k,
                    c,
                    1,
                    n as isize,
                    false,
                    a,
                    1,
                    k as isize,
                    b,
                    csb as isize,
                    rsb as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    par,
                )
            },
        }
    };
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = parts[1..]
            .iter()
            .map(|p| s.spawn(move || work(p)))
            .collect();
        work(&parts[0]);
        for h in handles {
            h.join().unwrap();
        }
    });
}

fn print_crates(
    shapes: &[(usize, usize, usize)],
    rows: &[[f64; 8]],
    np1: Option<&HashMap<String, f64>>,
    npn: Option<&HashMap<String, f64>>,
    threads: usize,
) {
    println!();
    println!("GEMM kernels alone, GFLOP/s (c = a·B, row-major; B as [k][n] unless marked [n][k];");
    println!("'ours' = nnaccel's packed kernel, B packed once before timing, A read in place);");
    println!("r = ratio to numpy with the same thread count. {threads}T: 'split' = our row/column");
    println!("split over scoped threads, each calling the crate single-threaded; 'rayon' = gemm's");
    println!("own Parallelism::Rayon({threads}); 'ours' = its split over the executor's pool.");
    println!(
        "{:>18} | {:>6} {:>6} {:>10} {:>6} {:>6} {:>5} {:>5} {:>6} | {:>9} {:>9} {:>9} {:>6} {:>6} {:>5} {:>5} {:>5} {:>6}",
        "shape m,k,n",
        "mm 1T",
        "gemm",
        "gemm[n][k]",
        "ours",
        "np 1T",
        "r mm",
        "r ge",
        "r ours",
        "mm split",
        "ge split",
        "ge rayon",
        "ours",
        "np",
        "r mm",
        "r ges",
        "r ger",
        "r ours"
    );
    for (&(m, k, n), r) in shapes.iter().zip(rows) {
        let spec = numpy_spec(Numpy::Gemm(m, k, n));
        let g1 = np1.and_then(|h| h.get(&spec)).copied().unwrap_or(f64::NAN);
        let gn = npn.and_then(|h| h.get(&spec)).copied().unwrap_or(f64::NAN);
        println!(
            "{:>18} | {:>6.1} {:>6.1} {:>10.1} {:>6.1} {:>6.1} {:>5.2} {:>5.2} {:>6.2} | {:>9.1} {:>9.1} {:>9.1} {:>6.1} {:>6.1} {:>5.2} {:>5.2} {:>5.2} {:>6.2}",
            format!("{m},{k},{n}"),
            r[0],
            r[1],
            r[2],
            r[6],
            g1,
            r[0] / g1,
            r[1] / g1,
            r[6] / g1,
            r[3],
            r[4],
            r[5],
            r[7],
            gn,
            r[3] / gn,
            r[4] / gn,
            r[5] / gn,
            r[7] / gn
        );
    }
}
