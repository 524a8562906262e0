//! Compilation caching: prepareModel against prepareModelFromCache (and a driver-managed cache
//! hit) for a model of 100 chained ADD operations, each adding a `[16384]` f32 constant from a
//! CONSTANT_REFERENCE pool (6.25 MiB of weights), through `nnaccel-hald` on the simulated
//! device. prepareModel runs with the driver-managed cache off, so every run compiles.
//!
//! Needs root and `/dev/fuse` (the simulator serves a FUSE file); exits 1 otherwise.
//!
//! ```text
//! cargo bench -p nnaccel-tests --bench cache
//! ```
//!
//! `NNACCEL_BENCH_ITERS` sets the number of timed runs (default 10).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nnaccel_hal::cache::CacheFiles;
use nnaccel_hal::{
    ExecutionPreference, HalDevice, HalPreparedModel, Model, OperationType, Priority,
};
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tests::Sim;
use nnaccel_tests::bench::{iterations, median, ms};
use nnaccel_tests::service::*;

const OPS: u32 = 100;
const ELEMENTS: u32 = 16384;

/// `t_{i+1} = t_i + w_i` for 100 operations; the weights in one ashmem pool
/// (CONSTANT_REFERENCE) or in the model's operand values (CONSTANT_COPY).
fn chained_model(in_pool: bool) -> Model {
    let bytes = ELEMENTS * 4;
    let weights =
        |i: u32| -> Vec<f32> { (0..ELEMENTS).map(|k| (k % 13) as f32 + i as f32).collect() };
    let mut b = ModelBuilder::new();
    let pool = in_pool.then(|| {
        let pool = pools::ashmem(u64::from(bytes * OPS)).unwrap();
        let map = MappedClientPool::new(&pool).unwrap();
        for i in 0..OPS {
            map.write_f32((i * bytes) as usize, &weights(i)).unwrap();
        }
        b.pool(pool)
    });
    let x = b.input(&[ELEMENTS]);
    let act = b.int32(0);
    let mut t = x;
    for i in 0..OPS {
        let w = match pool {
            Some(p) => b.constant_reference(&[ELEMENTS], loc(p, i * bytes, bytes)),
            None => b.constant_copy(&[ELEMENTS], &weights(i)),
        };
        let next = if i + 1 == OPS {
            b.output(&[ELEMENTS])
        } else {
            b.temporary(&[ELEMENTS])
        };
        b.operation(OperationType::Add, &[t, w, act], &[next]);
        t = next;
    }
    b.build()
}

fn time(iters: usize, mut f: impl FnMut() -> Box<dyn std::any::Any>) -> Duration {
    drop(f()); // warm-up
    median(
        (0..iters)
            .map(|_| {
                let start = Instant::now();
                let kept = f();
                let d = start.elapsed();
                drop(kept);
                d
            })
            .collect(),
    )
}

struct Figures {
    cold: Duration,
    full: Duration,
    from_cache: Duration,
    managed: Duration,
    on_device: bool,
    model_file: u64,
    data_file: u64,
}

fn measure(sim: &Sim, model: &Model, iters: usize) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let open =
        |name: &str| nnaccel_protocol::cache_dir::open_cache_file(&dir.path().join(name)).unwrap();
    let (mf, df) = (open("model"), open("data"));
    let token = [7u8; 32];
    let pref = ExecutionPreference::FastSingleAnswer;

    // prepareModel, compiling every time (no driver-managed cache).
    let hald = Hald::start(&[
        OsStr::new("--device"),
        sim.path().as_os_str(),
        OsStr::new("--managed-cache-max-bytes"),
        OsStr::new("0"),
    ]);
    let c = hald.client();
    let start = Instant::now();
    let first = prepare(&c, model).expect("prepare");
    let cold = start.elapsed();
    let on_device = first.runs_on_device();
    drop(first);
    let full = time(iters, || Box::new(prepare(&c, model).unwrap()));
    let (model_cache, data_cache) = ([vec![mf.as_fd()]], [vec![df.as_fd()]]);
    let files = CacheFiles {
        model: &model_cache,
        data: &data_cache,
        token: &token,
    };
    let pm = c
        .prepare_model_with_cache(model, pref, Priority::Medium, None, files)
        .unwrap();
    drop(pm);
    let from_cache = time(iters, || {
        let pm: std::sync::Arc<dyn HalPreparedModel> = c
            .prepare_model_from_cache(pref, Priority::Medium, None, files)
            .unwrap();
        assert_eq!(pm.runs_on_device(), on_device);
        Box::new(pm)
    });
    drop(c);
    drop(hald);

    // The driver-managed cache: the first preparation fills it, later ones hit.
    let hald = Hald::with_device(sim);
    let c = hald.client();
    drop(prepare(&c, model).unwrap());
    let managed = time(iters, || Box::new(prepare(&c, model).unwrap()));
    drop(c);
    drop(hald);
    let size = |n: &str| std::fs::metadata(dir.path().join(n)).map_or(0, |m| m.len());
    Figures {
        cold,
        full,
        from_cache,
        managed,
        on_device,
        model_file: size("model"),
        data_file: size("data"),
    }
}

fn main() -> ExitCode {
    if !nnaccel_tests::require_privileges() {
        eprintln!("cache bench: needs root and /dev/fuse");
        return ExitCode::FAILURE;
    }
    let iters = iterations(10);
    let sim = Sim::start(&[]);
    println!(
        "model: {OPS} chained ADD operations over [{ELEMENTS}] f32, {:.2} MiB of weights; median of {iters} runs",
        f64::from(OPS * ELEMENTS * 4) / f64::from(1u32 << 20),
    );
    for (in_pool, label) in [
        (true, "weights in an ashmem pool (CONSTANT_REFERENCE)"),
        (false, "weights in the model (CONSTANT_COPY)"),
    ] {
        let f = measure(&sim, &chained_model(in_pool), iters);
        println!(
            "\n{label}, on the {}; cache files: model {} bytes, data {} bytes",
            if f.on_device {
                "device"
            } else {
                "CPU executor"
            },
            f.model_file,
            f.data_file
        );
        println!("  prepareModel, first on a fresh service  {}", ms(f.cold));
        println!("  prepareModel (full compilation)         {}", ms(f.full));
        println!(
            "  prepareModelFromCache                   {}",
            ms(f.from_cache)
        );
        println!(
            "  prepareModel, driver-managed cache hit  {}",
            ms(f.managed)
        );
        println!(
            "  ratio prepareModel / prepareModelFromCache: {:.2}x (first on a fresh service: {:.2}x)",
            f.full.as_secs_f64() / f.from_cache.as_secs_f64(),
            f.cold.as_secs_f64() / f.from_cache.as_secs_f64()
        );
        println!(
            "  ratio prepareModel / driver-managed hit:    {:.2}x",
            f.full.as_secs_f64() / f.managed.as_secs_f64()
        );
    }
    ExitCode::SUCCESS
}
