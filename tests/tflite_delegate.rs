//! nnaccel's external TFLite delegate (`libnnaccel_tflite_delegate.so`) loaded by LiteRT:
//! `tests/tflite_delegate.py` runs LiteRT with and without `load_delegate` on the generated
//! models (`scripts/models/gen.py`) and on a graph it builds with one node the delegate cannot
//! claim in the middle; outputs agree (float32 within 1e-5 of the range, int8 within 1
//! quantum of the reference kernels), the delegate's counters say how many nodes it claimed,
//! how many partitions and executions ran through nnaccel, and that LiteRT alone moves none.
//!
//! The service test is the negative control from outside the process: the delegate with
//! `service=` on an `nnaccel-hald` over the simulated device, and the device's completed-job
//! counter (the service's `info`) moves with the delegate's invokes and not with LiteRT's.
//!
//! The test makes the LiteRT venv (`scripts/litert-venv.sh`, cached in `target/litert-venv`),
//! the models (`target/models/`) and the delegate library (`cargo build -p
//! nnaccel-tflite-delegate` in this profile). When the venv cannot be made it prints
//! `SKIPPED` and passes, except under `CI=true`, where that fails.
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

/// Invokes through the service in the negative control.
const SERVICE_INVOKES: u64 = 5;

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

/// The venv's python, the models' directory and the delegate, made once per test binary.
fn setup() -> Option<&'static (PathBuf, PathBuf, PathBuf)> {
    static SETUP: OnceLock<Result<(PathBuf, PathBuf, PathBuf), String>> = OnceLock::new();
    let made = SETUP.get_or_init(|| {
        let python = models::litert_venv()?;
        let dir = models::models_dir();
        models::generate(&python, &dir, MODELS, false)?;
        let so = delegate_library()?;
        Ok((python, dir, so))
    });
    match made {
        Ok(s) => Some(s),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "tflite delegate: cannot make the venv, the models or the library under CI=true: {why}"
            )
        }
        Err(why) => {
            eprintln!(
                "SKIPPED: the tflite delegate test needs the LiteRT venv and the models: {why}"
            );
            None
        }
    }
}

/// Runs `tests/tflite_delegate.py ARGS` and returns its output; fails the test with the
/// output when the script fails.
fn python(args: &[&str]) -> Option<String> {
    let (python, dir, so) = setup()?;
    let script = models::repo_root().join("tests/tflite_delegate.py");
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .env("NNACCEL_DELEGATE_SO", so)
        .env("NNACCEL_MODELS_DIR", dir)
        // The panic probe's message stays one line.
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "tests/tflite_delegate.py {args:?} failed ({}):\n{text}",
        out.status
    );
    Some(text)
}

#[test]
fn litert_with_the_delegate_matches_litert_alone_and_the_nodes_run_on_nnaccel() {
    let Some(text) = python(&["-v"]) else {
        return;
    };
    // unittest's summary: every case ran and none was skipped.
    assert!(text.contains("\nOK"), "{text}");
    assert!(!text.contains("skipped"), "{text}");
    let ran = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(ran >= 19, "only {ran} cases ran:\n{text}");
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
            python(&["plain", &invokes]);
            let after_plain = device_jobs(&hald);
            assert_eq!(
                after_plain, before,
                "LiteRT alone moved the device's job counter"
            );
            let socket = socket.to_str().expect("a UTF-8 socket path");
            python(&["service", socket, &invokes]);
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
