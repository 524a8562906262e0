//! nnaccel's external TFLite delegate (`libnnaccel_tflite_delegate.so`) loaded by the TFLite
//! runtimes it serves: `tests/tflite_delegate.py` runs the interpreter with and without
//! `load_delegate` on the generated models (`scripts/models/gen.py`) and on small graphs it
//! builds (one node the delegate cannot claim in the middle; a folding DEQUANTIZE and DENSIFY);
//! outputs agree (float32 within 1e-5 of the range, int8 within 1 quantum of the reference
//! kernels), the delegate's counters say how many nodes it claimed, how many partitions and
//! executions ran through nnaccel, and that the interpreter alone moves none. It runs twice,
//! one test per runtime: under `ai-edge-litert` 2.3.0 (TFLite 2.22) and under `tflite-runtime`
//! 2.14.0, each in its own venv (`scripts/litert-venv.sh` and `scripts/litert-venv.sh
//! tflite-runtime`, cached in `target/`). Under LiteRT no case may skip; under tflite_runtime
//! a case whose model needs a kernel 2.14 lacks skips with the reason (printed), and at most
//! [`TFLITE_RUNTIME_MAX_SKIPS`] may.
//!
//! The service test is the negative control from outside the process: the delegate with
//! `service=` on an `nnaccel-hald` over the simulated device, and the device's completed-job
//! counter (the service's `info`) moves with the delegate's invokes and not with LiteRT's.
//!
//! The test makes the venvs, the models (`target/models/`), the small graphs (written with the
//! LiteRT wheel's schema module, which tflite_runtime lacks, into `target/models/delegate/`)
//! and the delegate library (`cargo build -p nnaccel-tflite-delegate` in this profile). When
//! a venv cannot be made it prints `SKIPPED` and passes, except under `CI=true`, where that
//! fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use nnaccel_tests::models;
use nnaccel_tests::service::Hald;
use nnaccel_tests::{Sim, require_privileges, scaled, with_timeout};

/// The models the Python test uses.
const MODELS: &[&str] = &[
    "mlp_b1_float32",
    "mlp_b1_int8",
    "mobilenet_v1_small_float32",
    "mobilenet_v1_small_int8",
    "mobilenet_v2_small_float32",
    "mobilenet_v2_small_int8",
];

/// The cases of `tests/tflite_delegate.py`; every one must run (or, under tflite_runtime,
/// run or skip).
const CASES: u32 = 19;

/// The most cases that may skip under tflite_runtime 2.14 (a model needing an operator or
/// an operator version its kernels do not register): none does today, so a case that starts
/// to skip fails the test, printing the interpreter's reason, until this says it may.
const TFLITE_RUNTIME_MAX_SKIPS: u32 = 0;

/// Invokes through the service in the negative control.
const SERVICE_INVOKES: u64 = 5;

/// A TFLite runtime the Python test runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    /// `ai-edge-litert` 2.3.0 (TFLite 2.22): also makes the models and the graphs.
    Litert,
    /// `tflite-runtime` 2.14.0.
    TfliteRuntime,
}

impl Runtime {
    /// `scripts/litert-venv.sh`'s flavour.
    fn flavour(self) -> &'static str {
        match self {
            Runtime::Litert => "litert",
            Runtime::TfliteRuntime => "tflite-runtime",
        }
    }

    /// `NNACCEL_TFLITE_RUNTIME` for the Python test.
    fn module(self) -> &'static str {
        match self {
            Runtime::Litert => "litert",
            Runtime::TfliteRuntime => "tflite_runtime",
        }
    }

    /// How many cases may skip.
    fn max_skips(self) -> u32 {
        match self {
            Runtime::Litert => 0,
            Runtime::TfliteRuntime => TFLITE_RUNTIME_MAX_SKIPS,
        }
    }
}

/// The delegate library of this test's profile (`target/<profile>/`), built now with the
/// cargo that runs the test (`$CARGO`): cargo builds no cdylib of another package for this
/// package's tests.
fn delegate_library() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let deps = exe.parent().ok_or("the test binary has no directory")?;
    let profile_dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().ok_or("deps has no parent")?
    } else {
        deps
    };
    let so = profile_dir.join("libnnaccel_tflite_delegate.so");
    if let (Some(cargo), Some(target_dir)) = (std::env::var_os("CARGO"), profile_dir.parent()) {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "nnaccel-tflite-delegate", "--lib"])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run cargo to build the delegate: {e}"))?;
        if !status.success() {
            return Err(format!("building the delegate failed ({status})"));
        }
    }
    if so.is_file() {
        Ok(so)
    } else {
        Err(format!(
            "{} is missing: `cargo build -p nnaccel-tflite-delegate` first",
            so.display()
        ))
    }
}

/// The Python test's script.
fn script() -> PathBuf {
    models::repo_root().join("tests/tflite_delegate.py")
}

/// Writes the Python test's small graphs into `dir` with the LiteRT venv's `python`.
fn write_graphs(python: &Path, dir: &Path) -> Result<(), String> {
    let mut cmd = Command::new(python);
    cmd.arg(script())
        .arg("graphs")
        .arg(dir)
        .env("NNACCEL_TFLITE_RUNTIME", Runtime::Litert.module())
        .stderr(Stdio::piped());
    models::output_of(&mut cmd, "tests/tflite_delegate.py graphs").map(drop)
}

/// What every run shares: the LiteRT venv's python, the models' and the graphs' directories
/// and the delegate.
struct Shared {
    litert: PathBuf,
    models: PathBuf,
    graphs: PathBuf,
    so: PathBuf,
}

/// Fails the test under `CI=true`, else prints `SKIPPED` and returns None.
fn skip_unless_ci<'a, T>(made: &'a Result<T, String>, what: &str) -> Option<&'a T> {
    match made {
        Ok(s) => Some(s),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("tflite delegate: cannot make {what} under CI=true: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: the tflite delegate test needs {what}: {why}");
            None
        }
    }
}

/// The shared setup, made once per test binary.
fn setup() -> Option<&'static Shared> {
    static SETUP: OnceLock<Result<Shared, String>> = OnceLock::new();
    let made = SETUP.get_or_init(|| {
        let litert = models::litert_venv()?;
        let dir = models::models_dir();
        models::generate(&litert, &dir, MODELS, false)?;
        let graphs = dir.join("delegate");
        write_graphs(&litert, &graphs)?;
        let so = delegate_library()?;
        Ok(Shared {
            litert,
            models: dir,
            graphs,
            so,
        })
    });
    skip_unless_ci(made, "the LiteRT venv, the models and the library")
}

/// The python of `runtime`'s venv, made once per test binary.
fn runtime_python(runtime: Runtime) -> Option<&'static PathBuf> {
    static TFLITE_RUNTIME: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match runtime {
        Runtime::Litert => setup().map(|s| &s.litert),
        Runtime::TfliteRuntime => skip_unless_ci(
            TFLITE_RUNTIME.get_or_init(|| models::tflite_venv(runtime.flavour())),
            "the tflite-runtime 2.14 venv",
        ),
    }
}

/// Runs `tests/tflite_delegate.py ARGS` under `runtime` and returns its output; fails the
/// test with the output when the script fails.
fn python(runtime: Runtime, args: &[&str]) -> Option<String> {
    let shared = setup()?;
    let python = runtime_python(runtime)?;
    let out = Command::new(python)
        .arg(script())
        .args(args)
        .env("NNACCEL_TFLITE_RUNTIME", runtime.module())
        .env("NNACCEL_DELEGATE_SO", &shared.so)
        .env("NNACCEL_MODELS_DIR", &shared.models)
        .env("NNACCEL_GRAPHS_DIR", &shared.graphs)
        // The panic probe's message stays one line.
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "tests/tflite_delegate.py {args:?} under {} failed ({}):\n{text}",
        runtime.module(),
        out.status
    );
    Some(text)
}

/// unittest's summary of a `-v` run: how many cases ran and how many of them skipped, with
/// the skipped cases' lines (`test_x (Class.test_x) ... skipped 'why'`).
fn summary(text: &str) -> (u32, u32, Vec<&str>) {
    let ran = text
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    let skipped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" ... skipped "))
        .collect();
    let counted = text
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("OK (skipped=")?;
            rest.strip_suffix(')')?.parse().ok()
        })
        .unwrap_or(0);
    (ran, counted.max(skipped.len() as u32), skipped)
}

/// The Python suite under `runtime`: every case ran, at most the runtime's few skipped.
fn suite_agrees_under(runtime: Runtime) {
    let Some(text) = python(runtime, &["-v"]) else {
        return;
    };
    assert!(
        text.contains(&format!("runtime: {}", runtime.module())),
        "the suite did not run under {}:\n{text}",
        runtime.module()
    );
    assert!(
        text.lines()
            .any(|l| l == "OK" || l.starts_with("OK (skipped=")),
        "{text}"
    );
    let (ran, skipped, lines) = summary(&text);
    assert!(ran >= CASES, "only {ran} cases ran:\n{text}");
    for l in &lines {
        eprintln!("under {}: {l}", runtime.module());
    }
    assert!(
        skipped <= runtime.max_skips(),
        "{skipped} cases skipped under {} (at most {} may):\n{}",
        runtime.module(),
        runtime.max_skips(),
        lines.join("\n")
    );
}

#[test]
fn ai_edge_litert_2_3_with_the_delegate_matches_it_alone_and_the_nodes_run_on_nnaccel() {
    suite_agrees_under(Runtime::Litert);
}

#[test]
fn tflite_runtime_2_14_with_the_delegate_matches_it_alone_and_the_nodes_run_on_nnaccel() {
    suite_agrees_under(Runtime::TfliteRuntime);
}

#[test]
fn unittest_summaries_count_ran_and_skipped_cases() {
    let text = "test_a (A.test_a) ... ok\ntest_b (B.test_b) ... skipped 'no kernel'\n\
                ----\nRan 2 tests in 0.1s\n\nOK (skipped=1)\n";
    let (ran, skipped, lines) = summary(text);
    assert_eq!((ran, skipped), (2, 1));
    assert_eq!(lines, vec!["test_b (B.test_b) ... skipped 'no kernel'"]);
    assert_eq!(summary("Ran 19 tests in 3s\n\nOK\n").1, 0);
}

/// The simulated device's completed jobs, as the service reports them.
fn device_jobs(hald: &Hald) -> u64 {
    hald.client()
        .info()
        .expect("service info")
        .device_jobs_completed
        .expect("the service has a device")
}

#[test]
fn through_the_service_the_device_job_counter_moves_with_the_delegate_only() {
    if setup().is_none() || !require_privileges() {
        return;
    }
    with_timeout(
        scaled(Duration::from_secs(300)),
        "tflite delegate service test",
        || {
            let sim = Sim::start(&[]);
            let hald = Hald::with_device(&sim);
            let socket: &Path = hald.socket();
            let before = device_jobs(&hald);
            let invokes = SERVICE_INVOKES.to_string();
            python(Runtime::Litert, &["plain", &invokes]);
            let after_plain = device_jobs(&hald);
            assert_eq!(
                after_plain, before,
                "LiteRT alone moved the device's job counter"
            );
            let socket = socket.to_str().expect("a UTF-8 socket path");
            python(Runtime::Litert, &["service", socket, &invokes]);
            let after = device_jobs(&hald);
            assert!(
                after - after_plain >= SERVICE_INVOKES,
                "{SERVICE_INVOKES} invokes through the delegate completed {} device jobs",
                after - after_plain
            );
            drop(hald);
            drop(sim);
        },
    );
}
