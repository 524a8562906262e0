//! The model benchmark (issue 18, docs/performance.md): MobileNetV1-1.0-224 and
//! MobileNetV2-1.0-224 in float32 and int8 (deterministic random weights) and an MLP
//! (784→1024→1024→10, batch 1 and 64), on the CPU executor in this process at 1 and 2 threads,
//! and on LiteRT's default CPU path (XNNPACK) at 1 and 2 threads, in the same run. Where the
//! CPU computes in float16 (aarch64 FEAT_FP16), a last table times the float32 models made
//! relaxed (`relaxComputationFloat32toFloat16`) next to themselves; elsewhere it says why not.
//!
//! ```text
//! cargo bench -p nnaccel-tests --bench models
//! ```
//!
//! The networks come from `scripts/models/gen.py` (into `target/models/`, made when missing or
//! older than the script), each as an nnaccel JSON model and a `.tflite` with the same
//! weights. LiteRT runs in the venv of `scripts/litert-venv.sh` (made on first use); without
//! it (no network) the bench makes the JSON models with the system's python3 and numpy if it
//! can, measures nnaccel alone and says LiteRT was not measured.
//!
//! Each timing: warm-up executions, then the median of as many as fill
//! `NNACCEL_BENCH_SECONDS` (default 2) at the warm-up's pace, at least 3, at most 200.
//! Before and after the tables: the load average and the time a cache line takes between two
//! threads and back, which tells a run whose two vCPUs the host placed apart.
//! `NNACCEL_BENCH_MODELS` (comma-separated names, see `gen.py --list`) picks other models.
//! Nothing here asserts a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

use std::path::PathBuf;
use std::time::Instant;

use nnaccel_hal::{Backend, Driver};
use nnaccel_tests::models::{self, Files, Meta, Prepared};

const DEFAULT_MODELS: &[&str] = &[
    "mobilenet_v1_float32",
    "mobilenet_v1_int8",
    "mobilenet_v2_float32",
    "mobilenet_v2_int8",
    "mlp_b1_float32",
    "mlp_b1_int8",
    "mlp_b64_float32",
    "mlp_b64_int8",
];

/// Untimed executions before the timed ones.
const WARMUP: u32 = 2;

/// One model's figures (milliseconds; None where not measured).
struct Row {
    name: String,
    network: String,
    dtype: String,
    gflop: f64,
    ours: Result<[f64; 2], String>,
    litert: Option<[f64; 2]>,
    /// A float32 model made relaxed, where this CPU computes it in float16.
    relaxed: Option<Result<[f64; 2], String>>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The CPU's model name (with its family and model numbers: a virtual machine's "AMD EPYC"
/// says neither the generation nor the core), its flags, and the load average now.
fn machine() -> (String, String, String) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_string(), |(_, v)| v.trim().to_string())
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let name = format!(
        "{} (family {}, model {})",
        field("model name"),
        field("cpu family"),
        field("model")
    );
    (name, field("flags"), load)
}

/// Nanoseconds for a cache line to go from one thread to another and back: two threads pass
/// a counter back and forth, the mean of [`ROUND_TRIPS`] passes each way. About 50 where the
/// two CPUs share a last-level cache, several hundred where the host runs them far apart,
/// which slows every two-thread figure that hands data from one thread to the other
/// (docs/performance.md, "what the slow hours are"). None with fewer than 2 CPUs.
fn cross_core_round_trip() -> Option<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let flag = std::sync::Arc::new(AtomicU64::new(0));
    let theirs = std::sync::Arc::clone(&flag);
    // Busy-waiting without `pause`: its own latency (tens of ns on some CPUs) would be measured.
    let other = std::thread::spawn(move || {
        for i in 0..ROUND_TRIPS {
            while theirs.load(Ordering::Acquire) != 2 * i + 1 {}
            theirs.store(2 * i + 2, Ordering::Release);
        }
    });
    let start = Instant::now();
    for i in 0..ROUND_TRIPS {
        flag.store(2 * i + 1, Ordering::Release);
        while flag.load(Ordering::Acquire) != 2 * i + 2 {}
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / ROUND_TRIPS as f64;
    other.join().ok()?;
    Some(ns)
}

/// Passes back and forth in [`cross_core_round_trip`]: 20–100 ms.
const ROUND_TRIPS: u64 = 200_000;

/// The line that says [`cross_core_round_trip`]'s figure.
fn round_trip_line() -> String {
    cross_core_round_trip().map_or_else(
        || "not measured (one CPU)".to_string(),
        |ns| format!("{ns:.0} ns"),
    )
}

/// Median milliseconds of `p`'s executions with the CPU executor limited to `threads`.
fn time(p: &Prepared, threads: usize, seconds: f64) -> Result<f64, String> {
    nnaccel_cpu::set_max_threads(threads);
    let start = Instant::now();
    for _ in 0..WARMUP {
        p.execute()?;
    }
    let pace = start.elapsed().as_secs_f64() / f64::from(WARMUP);
    let runs = (seconds / pace.max(1e-6)).clamp(3.0, 200.0) as usize;
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        p.execute()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

/// Makes the models; returns LiteRT's python, or why LiteRT will not be measured.
fn make_models(dir: &std::path::Path, names: &[&str]) -> Result<Result<PathBuf, String>, String> {
    match models::litert_venv() {
        Ok(python) => {
            models::generate(&python, dir, names, false)?;
            Ok(Ok(python))
        }
        Err(why) => {
            // No venv: the JSON models alone, with the system's python3 (numpy needed).
            models::generate(&PathBuf::from("python3"), dir, names, true)
                .map_err(|e| format!("no LiteRT venv ({why}), and {e}"))?;
            Ok(Err(why))
        }
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_string(),
    }
}

fn main() {
    let (cpu, flags, load) = machine();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("cpu: {cpu} ({cpus} CPUs available)");
    println!("flags: {flags}");
    println!("load average at the start: {load}");
    println!("cross-core round trip at the start: {}", round_trip_line());
    let names: Vec<String> = match std::env::var("NNACCEL_BENCH_MODELS") {
        Ok(v) => v.split(',').map(|s| s.trim().to_string()).collect(),
        Err(_) => DEFAULT_MODELS.iter().map(|s| s.to_string()).collect(),
    };
    let seconds: f64 = env_or("NNACCEL_BENCH_SECONDS", 2.0);
    let dir = models::models_dir();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let litert = match make_models(&dir, &name_refs) {
        Ok(l) => l,
        Err(e) => {
            println!("models: cannot make them, nothing measured: {e}");
            return;
        }
    };
    match &litert {
        Ok(python) => println!(
            "LiteRT: ai-edge-litert {} ({}), default CPU path (XNNPACK delegate)",
            models::litert_version(python).unwrap_or_else(|e| format!("version unknown: {e}")),
            python.display()
        ),
        Err(why) => println!("LiteRT: not measured ({why})"),
    }
    let driver = Driver::new(Backend::CpuOnly);
    let mut rows = Vec::new();
    for name in &names {
        let files = Files::new(&dir, name);
        let meta = match Meta::read(&files) {
            Ok(m) => m,
            Err(e) => {
                println!("{name}: {e}");
                continue;
            }
        };
        let ours = Prepared::load(&driver, &files).and_then(|p| {
            let macs = models::macs(&p.model);
            if macs != meta.macs {
                return Err(format!("MACs {macs} here, {} by gen.py", meta.macs));
            }
            Ok([time(&p, 1, seconds)?, time(&p, 2, seconds)?])
        });
        let litert = match &litert {
            Ok(python) if meta.tflite => {
                match models::litert_bench(python, &files, &[1, 2], seconds, 3) {
                    Ok(v) => Some([v[0], v[1]]),
                    Err(e) => {
                        println!("{name}: LiteRT failed: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
        let relaxed =
            (meta.dtype == "float32" && nnaccel_cpu::relaxed_runs_in_float16()).then(|| {
                let p = Prepared::load_relaxed(&driver, &files)?;
                Ok([time(&p, 1, seconds)?, time(&p, 2, seconds)?])
            });
        nnaccel_cpu::set_max_threads(0);
        let row = Row {
            name: name.clone(),
            network: meta.network,
            dtype: meta.dtype,
            gflop: 2.0 * meta.macs as f64 / 1e9,
            ours,
            litert,
            relaxed,
        };
        if let Err(e) = &row.ours {
            println!("{name}: nnaccel failed: {e}");
        }
        rows.push(row);
    }
    print_tables(&rows);
    let (_, _, load) = machine();
    println!("load average at the end: {load}");
    println!("cross-core round trip at the end: {}", round_trip_line());
}

fn print_tables(rows: &[Row]) {
    println!();
    println!(
        "{:<22} {:>6} | {:>9} {:>9} {:>7} {:>7} {:>6} | {:>9} {:>9} | {:>7} {:>7}",
        "model",
        "GFLOP",
        "ours 1T",
        "ours 2T",
        "GF/s 1T",
        "GF/s 2T",
        "2T/1T",
        "LiteRT 1T",
        "LiteRT 2T",
        "vs L 1T",
        "vs L 2T"
    );
    for r in rows {
        let ours = r.ours.as_ref().ok();
        let o1 = ours.map(|o| o[0]);
        let o2 = ours.map(|o| o[1]);
        let l1 = r.litert.map(|l| l[0]);
        let l2 = r.litert.map(|l| l[1]);
        let gflops =
            |t: Option<f64>| t.map_or_else(|| "-".into(), |t| format!("{:.1}", r.gflop / t * 1e3));
        println!(
            "{:<22} {:>6.3} | {:>9} {:>9} {:>7} {:>7} {:>6} | {:>9} {:>9} | {:>7} {:>7}",
            r.name,
            r.gflop,
            ms(o1),
            ms(o2),
            gflops(o1),
            gflops(o2),
            ratio(o1, o2),
            ms(l1),
            ms(l2),
            ratio(o1, l1),
            ratio(o2, l2),
        );
    }
    println!(
        "(times: median ms per execution; 2T/1T: speed-up of 2 threads over 1; vs L: our time \
         / LiteRT's at the same threads, > 1 = slower)"
    );
    println!();
    println!(
        "{:<22} | {:>11} {:>11} | {:>14} {:>14}",
        "network", "ours f32 1T", "ours i8 1T", "ours f32/i8", "LiteRT f32/i8"
    );
    let mut networks: Vec<&str> = rows.iter().map(|r| r.network.as_str()).collect();
    networks.dedup();
    for n in networks {
        let of = |dtype: &str| rows.iter().find(|r| r.network == n && r.dtype == dtype);
        let (Some(f), Some(i)) = (of("float32"), of("int8")) else {
            continue;
        };
        let ours = |r: &Row| r.ours.as_ref().ok().map(|o| o[0]);
        let lite = |r: &Row| r.litert.map(|l| l[0]);
        println!(
            "{:<22} | {:>11} {:>11} | {:>14} {:>14}",
            n,
            ms(ours(f)),
            ms(ours(i)),
            ratio(ours(f), ours(i)),
            ratio(lite(f), lite(i)),
        );
    }
    println!(
        "(f32/i8: the float32 network's 1-thread time / the int8 one's: the int8 speed-up, \
         > 1 = int8 faster)"
    );
    print_relaxed(rows);
}

/// The float32 models made relaxed, next to themselves, where the CPU computes in float16.
fn print_relaxed(rows: &[Row]) {
    println!();
    if !nnaccel_cpu::relaxed_runs_in_float16() {
        println!(
            "relaxed float32 (float16 GEMMs): not measured, this CPU has no float16 arithmetic \
             (aarch64 FEAT_FP16); relaxed models run in float32 here"
        );
        return;
    }
    println!(
        "{:<22} | {:>9} {:>11} {:>8} | {:>9} {:>11} {:>8}",
        "relaxed model", "f32 1T", "relaxed 1T", "f32/rel", "f32 2T", "relaxed 2T", "f32/rel"
    );
    for r in rows {
        let Some(relaxed) = &r.relaxed else { continue };
        let ours = r.ours.as_ref().ok();
        let rel = match relaxed {
            Ok(v) => Some(*v),
            Err(e) => {
                println!("{}: relaxed failed: {e}", r.name);
                None
            }
        };
        let (o1, o2) = (ours.map(|o| o[0]), ours.map(|o| o[1]));
        let (r1, r2) = (rel.map(|v| v[0]), rel.map(|v| v[1]));
        println!(
            "{:<22} | {:>9} {:>11} {:>8} | {:>9} {:>11} {:>8}",
            r.name,
            ms(o1),
            ms(r1),
            ratio(o1, r1),
            ms(o2),
            ms(r2),
            ratio(o2, r2),
        );
    }
    println!("(f32/rel: the float32 time / the relaxed one's, > 1 = float16 faster)");
}
