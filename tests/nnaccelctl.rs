//! End-to-end runs of the `nnaccelctl` binary: every example in-process (the embedded default),
//! on the CPU executor, and through the FUSE-backed simulated device; the `--json` object
//! checked against independently computed outputs; malformed files (exit 2, a message, no
//! panic) and failing models (exit 1 with the status).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nnaccel_tests::{Sim, require_privileges};
use serde_json::Value;

/// No single nnaccelctl invocation may take longer.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Where `nnaccelctl` is (`$NNACCEL_CTL_BIN` overrides).
fn ctl_binary() -> PathBuf {
    nnaccel_tests::workspace_binary("NNACCEL_CTL_BIN", "nnaccelctl", "nnaccelctl")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn example(name: &str) -> String {
    examples().join(name).display().to_string()
}

/// What one invocation did.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    #[track_caller]
    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit status {} (wanted {code})\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        );
        assert!(
            !self.stderr.contains("panicked"),
            "nnaccelctl panicked:\n{}",
            self.stderr
        );
        self
    }
}

/// Runs nnaccelctl with `args`; fails the test if it runs longer than [`RUN_TIMEOUT`] or dies
/// of a signal.
fn ctl(args: &[&str]) -> Out {
    let bin = ctl_binary();
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nnaccelctl {args:?} did not finish within {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out_reader.join().unwrap().unwrap();
    let stderr = err_reader.join().unwrap().unwrap();
    let code = status
        .code()
        .unwrap_or_else(|| panic!("nnaccelctl {args:?} died of a signal ({status}):\n{stderr}"));
    Out {
        code,
        stdout,
        stderr,
    }
}

/// An example, its expected output (computed independently with numpy, see
/// examples/README.md) and the tolerance.
struct Case {
    name: &'static str,
    /// Each output's dimensions and values, in order.
    outputs: &'static [(&'static [u64], &'static [f64])],
    tolerance: f64,
}

const CASES: &[Case] = &[
    Case {
        name: "add",
        outputs: &[(&[1, 2, 2, 1], &[2.0, 4.0, 6.0, 8.0])],
        tolerance: 0.0,
    },
    Case {
        name: "mlp",
        outputs: &[(&[1, 4], &[0.24435444, 0.3044832, 0.11780773, 0.33335462])],
        tolerance: 1e-5,
    },
    Case {
        name: "cnn",
        outputs: &[(&[1, 3], &[0.17782596, 0.239202, -0.42347595])],
        tolerance: 1e-4,
    },
    Case {
        name: "quant",
        outputs: &[(&[1, 4], &[146.0, 128.0, 128.0, 147.0])],
        tolerance: 0.0,
    },
    Case {
        name: "if_select",
        outputs: &[(&[4], &[11.0, 22.0, 33.0, 44.0])],
        tolerance: 0.0,
    },
    Case {
        name: "while_loop",
        outputs: &[(&[1], &[5.0]), (&[1], &[17.0])],
        tolerance: 0.0,
    },
    Case {
        name: "slice_int8",
        outputs: &[(&[1, 2], &[5.0, 8.0])],
        tolerance: 0.0,
    },
];

/// Checks a `run --json` object against `case`.
#[track_caller]
fn check_json(case: &Case, v: &Value) {
    let name = case.name;
    let obj = v.as_object().expect("an object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["outputs", "status", "timing"], "{name}: {v}");
    assert_eq!(v["status"], "NONE", "{name}: {v}");
    let outputs = v["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), case.outputs.len(), "{name}: {v}");
    for (out, (want_dims, want_data)) in outputs.iter().zip(case.outputs) {
        let mut keys: Vec<&str> = out
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(keys, ["data", "dimensions", "isSufficient"], "{name}: {v}");
        let dims: Vec<u64> = out["dimensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(dims, *want_dims, "{name}: {v}");
        assert_eq!(out["isSufficient"], true, "{name}: {v}");
        let data: Vec<f64> = out["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_f64().unwrap())
            .collect();
        assert_eq!(data.len(), want_data.len(), "{name}: {v}");
        for (i, (got, want)) in data.iter().zip(*want_data).enumerate() {
            assert!(
                (got - want).abs() <= case.tolerance,
                "{name}: data[{i}] = {got}, expected {want} (±{})",
                case.tolerance
            );
        }
    }
    let timing = v["timing"].as_object().unwrap();
    let mut keys: Vec<&str> = timing.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["timeInDriverUs", "timeOnDeviceUs"], "{name}: {v}");
    let in_driver = timing["timeInDriverUs"].as_u64().unwrap();
    let on_device = timing["timeOnDeviceUs"].as_u64().unwrap();
    assert!(in_driver < u64::MAX, "{name}: timing not measured: {v}");
    assert!(on_device <= in_driver, "{name}: {v}");
}

fn run_json(case: &Case, extra: &[&str]) -> Value {
    let model = example(&format!("{}.json", case.name));
    let inputs = example(&format!("{}.inputs.json", case.name));
    let mut args = vec!["run", model.as_str(), "--inputs", inputs.as_str(), "--json"];
    args.extend_from_slice(extra);
    let out = ctl(&args);
    out.expect_code(0);
    out.json()
}

fn default_node_exists() -> bool {
    Path::new("/dev/nnaccel").exists()
}

#[test]
fn every_example_runs_in_process_by_default() {
    for case in CASES {
        check_json(case, &run_json(case, &[]));
    }
    // The human output says which backend ran.
    let out = ctl(&[
        "run",
        &example("mlp.json"),
        "--inputs",
        &example("mlp.inputs.json"),
    ]);
    out.expect_code(0);
    if !default_node_exists() {
        assert!(
            out.stdout
                .contains("backend: embedded simulated device, in-process"),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("runs on the device"), "{}", out.stdout);
    }
    assert!(out.stdout.contains("status: NONE"), "{}", out.stdout);
    assert!(
        out.stdout.contains("output 0: TENSOR_FLOAT32 [1, 4]"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("timing:"), "{}", out.stdout);
}

#[test]
fn every_example_runs_on_the_cpu_executor() {
    for case in CASES {
        check_json(case, &run_json(case, &["--cpu"]));
    }
    let out = ctl(&[
        "run",
        &example("quant.json"),
        "--inputs",
        &example("quant.inputs.json"),
        "--cpu",
        "--measure",
    ]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("backend: CPU executor (--cpu)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("runs on the CPU executor"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("TENSOR_QUANT8_ASYMM [1, 4] scale 0.1 zeroPoint 128"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("146  128  128  147"), "{}", out.stdout);
    assert!(out.stdout.contains("timing: on device"), "{}", out.stdout);
}

#[test]
fn every_example_runs_through_the_fuse_device() {
    if !require_privileges() {
        return;
    }
    let sim = Sim::new();
    let path = sim.path().display().to_string();
    for case in CASES {
        check_json(case, &run_json(case, &["--device", &path]));
    }
    let out = ctl(&[
        "run",
        &example("cnn.json"),
        "--inputs",
        &example("cnn.inputs.json"),
        "--device",
        &path,
    ]);
    out.expect_code(0);
    assert!(
        out.stdout
            .contains(&format!("backend: {path} (nnaccel device")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("runs on the device"), "{}", out.stdout);
    let out = ctl(&["info", "--device", &path, &example("cnn.json")]);
    out.expect_code(0);
    assert!(
        out.stdout.contains(&format!("device: {path}")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("API version:"), "{}", out.stdout);
    for op in ["CONV_2D", "MAX_POOL_2D", "RESHAPE", "FULLY_CONNECTED"] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.contains(op) && l.trim_end().ends_with("device")),
            "{op} not placed on the device:\n{}",
            out.stdout
        );
    }
    let out = ctl(&["bench", &example("mlp.json"), "-n", "50", "--device", &path]);
    out.expect_code(0);
    assert!(out.stdout.contains("executions/s"), "{}", out.stdout);
    assert!(
        !sim.has_exited(),
        "the simulator died; its log:\n{}",
        sim.log()
    );
}

/// Writes `text` to a temp file and returns (dir guard, path).
fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p.display().to_string())
}

fn add_model_text() -> String {
    std::fs::read_to_string(examples().join("add.json")).unwrap()
}

#[test]
fn malformed_model_files_exit_2_with_a_message() {
    let add = add_model_text();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "truncated JSON",
            "{\"version\": 1,".to_string(),
            "malformed JSON at line",
        ),
        (
            "not JSON",
            "version = 1".to_string(),
            "malformed JSON at line 1",
        ),
        ("empty", String::new(), "malformed JSON"),
        (
            "bad version",
            add.replace("\"version\": 1", "\"version\": 3"),
            "version: unsupported model format version 3",
        ),
        (
            "unknown field",
            add.replace("\"version\": 1,", "\"version\": 1, \"name\": \"add\","),
            "name: unknown field \"name\"",
        ),
        (
            "unknown operand type",
            add.replace("\"INT32\"", "\"INT64\""),
            "operands[2].type: unknown operand type \"INT64\"",
        ),
        (
            "unknown operation type",
            add.replace("\"ADD\"", "\"PLUS\""),
            "operations[0].type: unknown operation type \"PLUS\"",
        ),
        (
            "value count",
            add.replace("[1.0, 2.0, 3.0, 4.0]", "[1.0, 2.0]"),
            "operands[1].value: 2 values given",
        ),
        (
            "out of range",
            add.replace("\"value\": [0]", "\"value\": [4294967296]"),
            "operands[2].value[0]: 4294967296 is out of range",
        ),
        (
            "wrong JSON type",
            add.replace("\"inputIndexes\": [0]", "\"inputIndexes\": \"0\""),
            "inputIndexes: expected an array, found a string",
        ),
    ];
    let inputs = example("add.inputs.json");
    for (what, text, message) in &cases {
        let (_dir, path) = temp_file("model.json", text);
        for json in [false, true] {
            let mut args = vec!["run", path.as_str(), "--inputs", inputs.as_str()];
            if json {
                args.push("--json");
            }
            let out = ctl(&args);
            out.expect_code(2);
            assert!(
                out.stderr.contains(&path) && out.stderr.contains(message),
                "{what}: stderr does not name the file and say {message:?}:\n{}",
                out.stderr
            );
            assert!(out.stdout.is_empty(), "{what}: stdout: {}", out.stdout);
        }
        let out = ctl(&["info", "--cpu", &path]);
        out.expect_code(2);
        assert!(out.stderr.contains(message), "{what}: {}", out.stderr);
        let out = ctl(&["bench", &path, "--cpu", "-n", "1"]);
        out.expect_code(2);
        assert!(out.stderr.contains(message), "{what}: {}", out.stderr);
    }
    // A missing model file.
    let out = ctl(&["run", "/nonexistent/model.json", "--inputs", &inputs]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("/nonexistent/model.json: cannot read"),
        "{}",
        out.stderr
    );
}

#[test]
fn malformed_inputs_files_exit_2_with_a_message() {
    let model = example("quant.json");
    for (text, message) in [
        ("{\"inputs\": [[1, 2]", "malformed JSON"),
        ("{\"input\": [[1]]}", "input: unknown field \"input\""),
        ("{}", "missing required field \"inputs\""),
        (
            "{\"inputs\": [[1, 2, 3, 4, 5, 6, 7, 256]]}",
            "inputs[0][7]: 256 is out of range",
        ),
        (
            "{\"inputs\": [[\"a\"]]}",
            "inputs[0][0]: expected an integer",
        ),
        (
            "{\"inputs\": [[1]], \"inputDimensions\": [[1], [2]]}",
            "inputDimensions: 2 entries, but there are 1 inputs",
        ),
    ] {
        let (_dir, path) = temp_file("inputs.json", text);
        let out = ctl(&["run", &model, "--inputs", &path, "--json"]);
        out.expect_code(2);
        assert!(
            out.stderr.contains(&path) && out.stderr.contains(message),
            "{text}: stderr does not say {message:?}:\n{}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{text}: {}", out.stdout);
    }
}

#[test]
fn failing_models_and_requests_exit_1_with_the_status() {
    let model = example("add.json");
    // Two inputs for a one-input model: the request is invalid.
    let (_d1, two) = temp_file("two.json", "{\"inputs\": [[1, 2, 3, 4], [5]]}");
    // Three values for a [1, 2, 2, 1] input.
    let (_d2, short) = temp_file("short.json", "{\"inputs\": [[1, 2, 3]]}");
    // No input at all.
    let (_d3, none) = temp_file("none.json", "{\"inputs\": []}");
    for inputs in [&two, &short, &none] {
        for backend in [&[][..], &["--cpu"][..]] {
            let mut args = vec!["run", model.as_str(), "--inputs", inputs.as_str(), "--json"];
            args.extend_from_slice(backend);
            let out = ctl(&args);
            out.expect_code(1);
            let v = out.json();
            assert_eq!(v["status"], "INVALID_ARGUMENT", "{v}");
            assert!(v["timing"]["timeInDriverUs"].is_u64(), "{v}");
            for o in v["outputs"].as_array().unwrap() {
                assert!(o.get("data").is_none(), "{v}");
            }
            assert!(
                out.stderr
                    .contains("the execution failed with INVALID_ARGUMENT"),
                "{}",
                out.stderr
            );
        }
    }
    let out = ctl(&["run", &model, "--inputs", &two]);
    out.expect_code(1);
    assert!(
        out.stdout.contains("status: INVALID_ARGUMENT (executing)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr
            .contains("request has 2 inputs but the model has 1"),
        "{}",
        out.stderr
    );

    // The format's own example, verbatim: operand 3 is a temporary nothing writes, which the
    // HAL's validation rejects when the model is prepared.
    let issue_example = add_model_text()
        .replace(
            "{\"type\": \"TENSOR_FLOAT32\", \"dimensions\": [1, 2, 2, 1], \"lifetime\": \"MODEL_OUTPUT\"}",
            "{\"type\": \"TENSOR_QUANT8_ASYMM\", \"dimensions\": [4], \"scale\": 0.5, \"zeroPoint\": 128, \
             \"lifetime\": \"TEMPORARY_VARIABLE\"},\n    \
             {\"type\": \"TENSOR_FLOAT32\", \"dimensions\": [1, 2, 2, 1], \"lifetime\": \"MODEL_OUTPUT\"}",
        )
        .replace("\"outputs\": [3]", "\"outputs\": [4]")
        .replace("\"outputIndexes\": [3]", "\"outputIndexes\": [4]");
    let (_d4, path) = temp_file("issue.json", &issue_example);
    let out = ctl(&[
        "run",
        &path,
        "--inputs",
        &example("add.inputs.json"),
        "--json",
    ]);
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["status"], "INVALID_ARGUMENT", "{v}");
    assert_eq!(v["outputs"], serde_json::json!([]), "{v}");
    assert!(
        out.stderr
            .contains("preparing the model failed with INVALID_ARGUMENT")
            && out.stderr.contains("operand 3"),
        "{}",
        out.stderr
    );
    // `info` says the same about it.
    let out = ctl(&["info", "--cpu", &path]);
    out.expect_code(1);
    assert!(out.stdout.contains("INVALID_ARGUMENT"), "{}", out.stdout);
}

#[test]
fn info_shows_the_device_capabilities_and_placement() {
    let out = ctl(&["info"]);
    out.expect_code(0);
    if !default_node_exists() {
        assert!(
            out.stdout
                .contains("device: embedded (the simulated device, in-process)"),
            "{}",
            out.stdout
        );
    }
    for want in [
        "API version:",
        "capabilities:",
        "TENSOR_FLOAT32",
        "operations the driver runs",
        "CONV_2D",
    ] {
        assert!(out.stdout.contains(want), "no {want:?}:\n{}", out.stdout);
    }
    let out = ctl(&["info", "--cpu", &example("mlp.json")]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("device: none (--cpu)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("driver: CPU executor"),
        "{}",
        out.stdout
    );
    let placed: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.trim_end().ends_with("cpu fallback"))
        .collect();
    assert_eq!(placed.len(), 4, "{}", out.stdout);
    let out = ctl(&["info", &example("quant.json")]);
    out.expect_code(0);
    assert!(out.stdout.contains("placement of"), "{}", out.stdout);
}

#[test]
fn bench_reports_throughput_and_percentiles() {
    for backend in [&[][..], &["--cpu"][..]] {
        let model = example("cnn.json");
        let inputs = example("cnn.inputs.json");
        let mut args = vec![
            "bench",
            model.as_str(),
            "--inputs",
            inputs.as_str(),
            "-n",
            "100",
        ];
        args.extend_from_slice(backend);
        let out = ctl(&args);
        out.expect_code(0);
        assert!(out.stdout.contains("100 iterations"), "{}", out.stdout);
        assert!(out.stdout.contains("executions/s"), "{}", out.stdout);
        assert!(
            out.stdout.contains("latency: p50 ") && out.stdout.contains("p99 "),
            "{}",
            out.stdout
        );
        // No progress bar off a terminal.
        assert!(!out.stderr.contains("executions ("), "{}", out.stderr);
    }
    // Zero-filled inputs when none are given.
    let out = ctl(&["bench", &example("quant.json"), "--iterations", "10"]);
    out.expect_code(0);
}

#[test]
fn usage_errors_exit_2() {
    let out = ctl(&["--help"]);
    out.expect_code(0);
    for want in ["run", "info", "bench", "Exit status"] {
        assert!(out.stdout.contains(want), "{}", out.stdout);
    }
    let out = ctl(&["run", "--help"]);
    out.expect_code(0);
    assert!(out.stdout.contains("--inputs"), "{}", out.stdout);
    assert!(out.stdout.contains("--json"), "{}", out.stdout);
    let model = example("add.json");
    let inputs = example("add.inputs.json");
    ctl(&["run", &model]).expect_code(2);
    ctl(&["frobnicate"]).expect_code(2);
    ctl(&[
        "run",
        &model,
        "--inputs",
        &inputs,
        "--cpu",
        "--device",
        "/dev/null",
    ])
    .expect_code(2);
    let out = ctl(&[
        "run",
        &model,
        "--inputs",
        &inputs,
        "--device",
        "/nonexistent/nnaccel",
    ]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("cannot open the device /nonexistent/nnaccel"),
        "{}",
        out.stderr
    );
    ctl(&["bench", &model, "--iterations", "0"]).expect_code(2);
}

/// `nnaccelctl bench --burst`: without a model, the tiny and medium models; three series each
/// with their ratios to the regular p50; with a model file, that model.
#[test]
fn bench_burst_compares_bursts_with_regular_executions() {
    let out = ctl(&["bench", "--burst", "--cpu", "-n", "50"]);
    out.expect_code(0);
    for want in [
        "tiny: ADD of 4 floats",
        "medium: FULLY_CONNECTED 256x256",
        "regular execution",
        "burst, polling window 0 ",
        "burst, polling window 50.0 us",
        "p50 ratio to regular",
        "worker waits with",
    ] {
        assert!(out.stdout.contains(want), "{want}:\n{}", out.stdout);
    }
    assert_eq!(out.stdout.matches("p99 ").count(), 6, "{}", out.stdout);
    let out = ctl(&[
        "bench",
        "--burst",
        &example("add.json"),
        "--cpu",
        "-n",
        "20",
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("add.json"), "{}", out.stdout);
    assert_eq!(out.stdout.matches("p50 ratio").count(), 3, "{}", out.stdout);
    // A model is still required without --burst.
    ctl(&["bench", "--cpu"]).expect_code(2);
}

/// The pids of live `nnaccelctl busy-loop` processes (the load of `bench --burst --load N`).
fn busy_loops() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        // A zombie has an empty cmdline: only running (or unreaped-but-named) loops count.
        (args.get(1) == Some(&&b"busy-loop"[..])).then_some(pid)
    })
    .collect()
}

/// `bench --burst --load 1`: the comparison idle, then beside one busy-looping process, whose
/// pid the output names; after the command no busy loop it started is left.
#[test]
fn bench_burst_with_load_prints_loaded_rows_and_leaves_no_busy_process() {
    let before = busy_loops();
    let out = ctl(&[
        "bench",
        "--burst",
        "--load",
        "1",
        "--cpu",
        "-n",
        "200",
        &example("add.json"),
    ]);
    out.expect_code(0);
    let idle = out.stdout.find("=== idle\n").expect("an idle section");
    let loaded = out
        .stdout
        .find("=== loaded: 1 busy-looping process beside the bench (pid ")
        .unwrap_or_else(|| panic!("a loaded section:\n{}", out.stdout));
    assert!(idle < loaded, "{}", out.stdout);
    // Three rows with their ratio to regular in each section, and the window's ratio.
    for section in [&out.stdout[idle..loaded], &out.stdout[loaded..]] {
        assert_eq!(
            section.matches("p50 ratio to regular").count(),
            3,
            "{section}"
        );
        assert_eq!(
            section.matches("against window 0, p50").count(),
            1,
            "{section}"
        );
    }
    let pid: u32 = out.stdout[loaded..]
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the load's pid:\n{}", out.stdout));
    assert!(
        out.stdout
            .contains("load stopped: 1 busy-looping process killed and reaped"),
        "{}",
        out.stdout
    );
    let after = busy_loops();
    assert!(!after.contains(&pid), "busy loop {pid} survived the bench");
    assert!(
        after.iter().all(|p| before.contains(p)),
        "busy loops before {before:?}, after {after:?}"
    );
    // Without --burst, --load is a usage error; so is a load beyond the limit.
    ctl(&["bench", "--load", "1", "--cpu", &example("add.json")]).expect_code(2);
    ctl(&["bench", "--burst", "--load", "65", "--cpu"]).expect_code(2);
}

/// `info --ops` prints the coverage table of docs/operations.md without opening a device: a
/// row for every one of the 102 NNAPI operation types, and the counts.
#[test]
fn info_ops_prints_a_row_for_every_operation_type_and_the_counts() {
    let out = ctl(&["info", "--ops"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let rows = out
        .stdout
        .lines()
        .filter(|l| {
            let mut w = l.split_whitespace();
            w.next().is_some_and(|c| c.parse::<u32>().is_ok())
                && w.next().is_some_and(|n| {
                    n.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                })
        })
        .count();
    assert_eq!(rows, 102, "{}", out.stdout);
    assert!(out.stdout.contains("  101 RANK") || out.stdout.contains(" 101 RANK"));
    assert!(
        out.stdout
            .contains("of 102 operation types have a CPU kernel")
    );
    let md = ctl(&["info", "--ops", "--markdown"]);
    assert_eq!(md.code, 0, "{}", md.stderr);
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )
    .unwrap();
    assert!(
        docs.contains(md.stdout.trim()),
        "docs/operations.md is not what `nnaccelctl info --ops --markdown` prints: run \
         scripts/gen-operations.sh"
    );
    let both = ctl(&["info", "--ops", "some-model.json"]);
    assert_eq!(both.code, 2, "--ops with a model is a usage error");
}

/// A model the driver refuses: the message names the operation, its operand type and the
/// rule (issue 17), not only the status.
#[test]
fn a_refused_model_is_reported_with_the_operation_that_caused_it() {
    let text = add_model_text().replace("\"ADD\"", "\"WHILE\"");
    let (_dir, model) = temp_file("while.json", &text);
    let out = ctl(&[
        "run",
        &model,
        "--inputs",
        &example("add.inputs.json"),
        "--cpu",
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("INVALID_ARGUMENT: operation 0 (WHILE, TENSOR_FLOAT32): input 0 (condition)"),
        "{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// .tflite models and .npz inputs and outputs. The models are tests/data/tflite/cli_*.tflite and
// their inputs driver/cli/testdata/cli_*.npz (written by driver/cli/testdata/gen_tflite.py and
// gen_npz.py); the expected values below are worked out by hand from the models' definitions
// there (and agree with LiteRT on the same files).

/// A file of the repository, by its path from the root.
fn repo_file(path: &str) -> String {
    format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn cli_tflite(name: &str) -> String {
    repo_file(&format!("tests/data/tflite/{name}"))
}

fn cli_testdata(name: &str) -> String {
    repo_file(&format!("driver/cli/testdata/{name}"))
}

/// cli_add_mul.tflite on x = [1, -2, 3, 4], y = [0.5, 0.5, -5, 1]: its outputs in order,
/// 'scaled' = x * [0.5, 1, 2, -1] and 'sum' = relu(x + y).
const ADD_MUL_OUTPUTS: [(&str, [f32; 4]); 2] = [
    ("scaled", [0.5, -2.0, 6.0, -4.0]),
    ("sum", [1.5, 0.0, 0.0, 5.0]),
];

/// The arrays of an .npz: name → (shape, float32 values), read with npyz's typed reader.
fn read_npz_f32(path: &Path) -> Vec<(String, Vec<u64>, Vec<f32>)> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut archive = zip::ZipArchive::new(file).unwrap();
    let mut arrays = Vec::new();
    for k in 0..archive.len() {
        let mut member = archive.by_index(k).unwrap();
        let name = member.name().strip_suffix(".npy").unwrap().to_string();
        let mut bytes = Vec::new();
        member.read_to_end(&mut bytes).unwrap();
        let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
        let shape = npy.shape().to_vec();
        arrays.push((name, shape, npy.into_vec::<f32>().unwrap()));
    }
    arrays
}

/// The `data` of each output of a `run --json` object, as f32.
fn json_outputs(v: &Value) -> Vec<(Option<String>, Vec<f32>)> {
    v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let data = o["data"].as_array().unwrap();
            (
                o["name"].as_str().map(str::to_string),
                data.iter().map(|x| x.as_f64().unwrap() as f32).collect(),
            )
        })
        .collect()
}

#[test]
fn a_tflite_model_runs_on_npz_inputs_and_writes_npz_outputs_named_by_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.npz");
    let model = cli_tflite("cli_add_mul.tflite");
    for inputs in ["cli_add_mul.inputs.npz", "cli_add_mul.positional.npz"] {
        let out = ctl(&[
            "run",
            &model,
            "--inputs",
            &cli_testdata(inputs),
            "--outputs",
            out_path.to_str().unwrap(),
            "--cpu",
        ]);
        out.expect_code(0);
        assert!(out.stdout.contains("TFLite, 2 nodes"), "{}", out.stdout);
        assert!(out.stdout.contains("output 1 'sum'"), "{}", out.stdout);
        let arrays = read_npz_f32(&out_path);
        assert_eq!(arrays.len(), 2, "{inputs}: {arrays:?}");
        for ((name, values), (got_name, shape, got)) in ADD_MUL_OUTPUTS.iter().zip(&arrays) {
            assert_eq!(got_name, name, "{inputs}");
            assert_eq!(shape, &[1, 2, 2, 1], "{inputs}: {name}");
            assert_eq!(got, values, "{inputs}: {name}");
        }
    }
    // --json names the outputs and carries the same values; the default backend too.
    let out = ctl(&[
        "run",
        &model,
        "--inputs",
        &cli_testdata("cli_add_mul.inputs.npz"),
        "--json",
    ]);
    out.expect_code(0);
    let outputs = json_outputs(&out.json());
    let expected: Vec<(Option<String>, Vec<f32>)> = ADD_MUL_OUTPUTS
        .iter()
        .map(|(n, v)| (Some(n.to_string()), v.to_vec()))
        .collect();
    assert_eq!(outputs, expected);
}

#[test]
fn import_writes_a_json_model_that_runs_to_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("add_mul.json");
    let json = json.to_str().unwrap();
    let model = cli_tflite("cli_add_mul.tflite");
    let out = ctl(&["import", &model, "-o", json]);
    out.expect_code(0);
    assert!(out.stdout.contains("input 0: 'x'"), "{}", out.stdout);
    assert!(out.stdout.contains("output 0: 'scaled'"), "{}", out.stdout);
    // The JSON model has no names: its inputs are arr_0 and arr_1.
    let inputs = cli_testdata("cli_add_mul.positional.npz");
    let from_json = ctl(&["run", json, "--inputs", &inputs, "--json", "--cpu"]);
    from_json.expect_code(0);
    let from_tflite = ctl(&["run", &model, "--inputs", &inputs, "--json", "--cpu"]);
    from_tflite.expect_code(0);
    let values = |v: Vec<(Option<String>, Vec<f32>)>| -> Vec<Vec<f32>> {
        v.into_iter().map(|(_, d)| d).collect()
    };
    let json_values = values(json_outputs(&from_json.json()));
    assert_eq!(json_values, values(json_outputs(&from_tflite.json())));
    assert_eq!(json_values[1], ADD_MUL_OUTPUTS[1].1);
    // An existing file is kept unless --force.
    let before = std::fs::read(json).unwrap();
    std::fs::write(json, "keep me").unwrap();
    let again = ctl(&["import", &model, "-o", json]);
    again.expect_code(2);
    assert!(again.stderr.contains("--force"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(json).unwrap(), "keep me");
    ctl(&["import", &model, "-o", json, "--force"]).expect_code(0);
    assert_eq!(std::fs::read(json).unwrap(), before);
    // A JSON model is not something to import.
    let not = ctl(&["import", &example("add.json"), "-o", json, "--force"]);
    not.expect_code(2);
    assert!(
        not.stderr.contains("not a TFLite flatbuffer"),
        "{}",
        not.stderr
    );
}

#[test]
fn info_maps_each_tflite_node_and_names_every_unsupported_one() {
    let out = ctl(&["info", &cli_tflite("cli_add_mul.tflite"), "--cpu"]);
    out.expect_code(0);
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(['0', '1']))
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("ADD") && l.contains("cpu")),
        "{}",
        out.stdout
    );
    assert!(
        lines.iter().any(|l| l.contains("MUL") && l.contains("cpu")),
        "{}",
        out.stdout
    );
    let bad = ctl(&["info", &cli_tflite("cli_unsupported.tflite"), "--cpu"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("node 1 (CUSTOM"), "{}", bad.stderr);
    assert!(bad.stderr.contains("NnaccelNoSuchOp"), "{}", bad.stderr);
    assert!(bad.stderr.contains("node 2 (RFFT2D)"), "{}", bad.stderr);
    assert!(!bad.stderr.contains("node 0"), "{}", bad.stderr);
    assert!(bad.stdout.is_empty(), "{}", bad.stdout);
    // run and import refuse it the same way, before anything runs.
    let run = ctl(&[
        "run",
        &cli_tflite("cli_unsupported.tflite"),
        "--inputs",
        &cli_testdata("single.npy"),
    ]);
    run.expect_code(2);
    assert!(run.stderr.contains("node 2 (RFFT2D)"), "{}", run.stderr);
}

#[test]
fn a_tflite_state_variable_starts_from_its_initial_value() {
    // y = x + acc with acc initialised to [1, 2, 3, 4], x = ones.
    let model = cli_tflite("cli_state.tflite");
    let inputs = cli_testdata("cli_state.inputs.npz");
    let out = ctl(&["run", &model, "--inputs", &inputs, "--json", "--cpu"]);
    out.expect_code(0);
    assert_eq!(
        json_outputs(&out.json()),
        vec![(Some("y".to_string()), vec![2.0, 3.0, 4.0, 5.0])]
    );
    // bench carries the state from one execution to the next, with and without inputs.
    for extra in [&["--inputs", inputs.as_str()][..], &[]] {
        let mut args = vec!["bench", model.as_str(), "-n", "5", "--cpu"];
        args.extend_from_slice(extra);
        let bench = ctl(&args);
        bench.expect_code(0);
        assert!(
            bench.stdout.contains("1 state variable"),
            "{}",
            bench.stdout
        );
        assert!(bench.stdout.contains("throughput"), "{}", bench.stdout);
    }
}

#[test]
fn bad_npz_inputs_exit_2_naming_the_file_and_the_array() {
    let model = cli_tflite("cli_add_mul.tflite");
    for (file, message) in [
        ("wrong_dtype.npz", "dtype <f8 does not match"),
        ("unknown.npz", "unknown array 'z'"),
        ("missing.npz", "no array for input 1: expected 'y'"),
    ] {
        let path = cli_testdata(file);
        let out = ctl(&["run", &model, "--inputs", &path, "--cpu"]);
        out.expect_code(2);
        assert!(
            out.stderr.contains(&path) && out.stderr.contains(message),
            "{file}: {}",
            out.stderr
        );
    }
    // A file that starts like a zip archive but is not one.
    let (_dir, path) = temp_file("in.npz", "PK\u{3}\u{4} and then nothing of a zip");
    let out = ctl(&["run", &model, "--inputs", &path, "--cpu"]);
    out.expect_code(2);
    assert!(out.stderr.contains("not a readable .npz"), "{}", out.stderr);
}

#[test]
fn a_json_model_takes_npz_inputs_by_position_and_writes_arr_k_outputs() {
    // examples/add.json: out = in + [1, 2, 3, 4]; in = [1, 2, 3, 4].
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.npz");
    let out = ctl(&[
        "run",
        &example("add.json"),
        "--inputs",
        &cli_testdata("add.inputs.npz"),
        "--outputs",
        out_path.to_str().unwrap(),
        "--cpu",
    ]);
    out.expect_code(0);
    assert_eq!(
        read_npz_f32(&out_path),
        vec![(
            "arr_0".to_string(),
            vec![1, 2, 2, 1],
            vec![2.0, 4.0, 6.0, 8.0]
        )]
    );
}
