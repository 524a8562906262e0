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
//!
//! `cargo bench -p nnaccel-tests --bench cache -- models` measures instead, in process on the
//! CPU executor (no privileges), the MobileNets of `target/models/` (`scripts/models/gen.py`):
//! prepareModel, prepareModelFromCache (and how many weights it packs), and the first and later
//! executions after each: a hit packs its weights at preparation, as a fresh preparation does,
//! so executions after either should take the same time. `NNACCEL_BENCH_MODELS` (comma-separated names) picks other models.
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

/// The in-process, CPU-only figures of one generated model.
mod models {
    use std::os::fd::AsFd;
    use std::time::{Duration, Instant};

    use nnaccel_hal::cache::CacheFiles;
    use nnaccel_hal::{
        Backend, Driver, ErrorStatus, ExecutionPreference, HalPreparedModel, Memory, Model,
        Priority, Request,
    };
    use nnaccel_protocol::modelfile;
    use nnaccel_protocol::pools::{self, MappedClientPool};
    use nnaccel_tests::bench::{median, ms};
    use nnaccel_tests::service::{arg, execute, request};

    pub const DEFAULT: &[&str] = &[
        "mobilenet_v1_float32",
        "mobilenet_v2_float32",
        "mobilenet_v1_int8",
        "mobilenet_v2_int8",
    ];

    /// A request for `model`: the inputs of its inputs file, then room for every output, in
    /// one ashmem pool.
    fn make_request(model: &Model, inputs: &[modelfile::InputValue]) -> (Request, Memory) {
        let mut at = 0u32;
        let mut place = |len: usize| {
            let offset = at.next_multiple_of(64);
            at = offset + u32::try_from(len).unwrap();
            arg(0, offset, u32::try_from(len).unwrap())
        };
        let in_args: Vec<_> = inputs.iter().map(|i| place(i.bytes.len())).collect();
        let out_args: Vec<_> = model
            .output_indexes
            .iter()
            .map(|&o| {
                let o = &model.operands[o as usize];
                let n: usize = o.dimensions.iter().map(|&d| d as usize).product();
                place(n * o.operand_type.element_size())
            })
            .collect();
        let pool = pools::ashmem(u64::from(at)).unwrap();
        let map = MappedClientPool::new(&pool).unwrap();
        for (a, i) in in_args.iter().zip(inputs) {
            map.write(a.location.offset as usize, &i.bytes).unwrap();
        }
        (request(in_args, out_args, &[&pool]), pool)
    }

    /// Runs `f` `iters` times; the median and the last result.
    fn timed<T>(iters: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
        let mut last = f();
        let mut times = Vec::new();
        for _ in 0..iters {
            drop(last);
            let start = Instant::now();
            last = f();
            times.push(start.elapsed());
        }
        (median(times), last)
    }

    /// The first execution of `pm` and the median of `iters` more.
    fn executions(pm: &dyn HalPreparedModel, req: &Request, iters: usize) -> (Duration, Duration) {
        let start = Instant::now();
        assert_eq!(execute(pm, req).status, ErrorStatus::None);
        let first = start.elapsed();
        let (steady, r) = timed(iters, || execute(pm, req));
        assert_eq!(r.status, ErrorStatus::None);
        (first, steady)
    }

    /// Prints prepareModel, prepareModelFromCache and executions of model `name`.
    pub fn measure(name: &str, iters: usize) {
        let files = nnaccel_tests::models::Files::new(&nnaccel_tests::models::models_dir(), name);
        let Ok(loaded) = modelfile::load_model(&files.json) else {
            println!(
                "{name}: {} not found or not readable, skipped (scripts/models/gen.py makes it)",
                files.json.display()
            );
            return;
        };
        let model = loaded.model;
        let inputs = modelfile::load_inputs(&files.inputs, &model).unwrap();
        let (req, _pool) = make_request(&model, &inputs);
        let driver = Driver::new(Backend::CpuOnly);
        let pref = ExecutionPreference::FastSingleAnswer;
        let (fresh, pm) = timed(iters, || {
            driver
                .prepare_model(&model, pref, Priority::Medium, None)
                .unwrap()
        });
        let (fresh_first, fresh_steady) = executions(&pm, &req, iters);
        drop(pm);

        let dir = tempfile::tempdir().unwrap();
        let open =
            |n: &str| nnaccel_protocol::cache_dir::open_cache_file(&dir.path().join(n)).unwrap();
        let (mf, df) = (open("model"), open("data"));
        let token = [9u8; 32];
        let (model_cache, data_cache) = ([vec![mf.as_fd()]], [vec![df.as_fd()]]);
        let cache = CacheFiles {
            model: &model_cache,
            data: &data_cache,
            token: &token,
        };
        let (saving, pm) = timed(1, || {
            driver
                .prepare_model_with_cache(&model, pref, Priority::Medium, None, cache)
                .unwrap()
        });
        drop(pm);
        let (loading, (pm, packed_on_load)) = timed(iters, || {
            let before = nnaccel_cpu::packings_on_this_thread();
            let pm = driver
                .prepare_model_from_cache(pref, Priority::Medium, None, cache)
                .unwrap();
            (pm, nnaccel_cpu::packings_on_this_thread() - before)
        });
        let (cached_first, cached_steady) = executions(&pm, &req, iters);
        drop(pm);

        let size = |n: &str| std::fs::metadata(dir.path().join(n)).map_or(0, |m| m.len());
        println!(
            "\n{name}: cache files model {} bytes, data {:.2} MiB",
            size("model"),
            size("data") as f64 / f64::from(1u32 << 20)
        );
        println!("  prepareModel                         {}", ms(fresh));
        println!("    then first execution               {}", ms(fresh_first));
        println!(
            "    then execution (median)            {}",
            ms(fresh_steady)
        );
        println!("  prepareModel saving the cache        {}", ms(saving));
        println!(
            "  prepareModelFromCache                {} ({packed_on_load} weights packed)",
            ms(loading)
        );
        println!(
            "    then first execution               {}",
            ms(cached_first)
        );
        println!(
            "    then execution (median)            {}",
            ms(cached_steady)
        );
        println!(
            "  prepareModelFromCache + first execution {}",
            ms(loading + cached_first)
        );
        println!(
            "  ratio prepareModel / prepareModelFromCache: {:.2}x",
            fresh.as_secs_f64() / loading.as_secs_f64()
        );
    }
}

fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "models") {
        let iters = iterations(5);
        let names: Vec<String> = match std::env::var("NNACCEL_BENCH_MODELS") {
            Ok(v) => v.split(',').map(str::to_string).collect(),
            Err(_) => models::DEFAULT.iter().map(|s| s.to_string()).collect(),
        };
        println!("in process, CPU executor; median of {iters} runs");
        for name in &names {
            models::measure(name, iters);
        }
        return ExitCode::SUCCESS;
    }
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
