//! The CPU executor's thread count from the command line and the service's configuration:
//! `nnaccelctl run|bench --threads N` (results independent of N, the count in bench's header,
//! usage errors for bad counts and for the service, whose executor is the daemon's) and
//! nnaccel-hald's `threads` setting (applied at start-up and reported in the handshake; a bad
//! value stops the daemon with a message).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use nnaccel_tests::service::{Hald, die_with_parent, hald_binary};
use serde_json::Value;

/// `examples/NAME` of the repository.
fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// What one invocation of a binary did.
#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    #[track_caller]
    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "wanted exit status {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        self
    }

    /// The `outputs` of a `run --json` object.
    fn json_outputs(&self) -> Value {
        let v: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr));
        assert_eq!(v["status"], "NONE", "{v}");
        v["outputs"].clone()
    }
}

fn output(mut cmd: Command) -> Out {
    die_with_parent(&mut cmd);
    let Output {
        status,
        stdout,
        stderr,
    } = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    Out {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// `nnaccelctl <args>`, never through a service found at the default socket unless asked.
fn ctl<S: AsRef<OsStr>>(args: &[S]) -> Out {
    let mut cmd = Command::new(nnaccel_tests::workspace_binary(
        "NNACCEL_CTL_BIN",
        "nnaccelctl",
        "nnaccelctl",
    ));
    cmd.args(args);
    output(cmd)
}

fn run_cnn(extra: &[&str]) -> Out {
    let (model, inputs) = (example("cnn.json"), example("cnn.inputs.json"));
    let mut args = vec!["run", &model, "--inputs", &inputs, "--json"];
    args.extend_from_slice(extra);
    ctl(&args)
}

/// The in-process backends: the CPU executor, and the embedded simulated device (the default
/// unless the host has a device node or a service at the default paths, where `--threads`
/// would not or could not apply).
fn backends() -> Vec<&'static [&'static str]> {
    let mut b: Vec<&[&str]> = vec![&["--cpu"]];
    if !Path::new("/dev/nnaccel").exists() && !Path::new("/run/nnaccel/hal.sock").exists() {
        b.push(&[]);
    }
    b
}

#[test]
fn cnn_outputs_are_the_same_with_one_and_two_threads() {
    for backend in backends() {
        let one = run_cnn(&[&["--threads", "1"], backend].concat());
        let two = run_cnn(&[&["--threads", "2"], backend].concat());
        let (one, two) = (
            one.expect_code(0).json_outputs(),
            two.expect_code(0).json_outputs(),
        );
        assert_eq!(one, two, "{backend:?}");
        // examples/README.md: numpy's result for cnn.json.
        let data = one[0]["data"].as_array().unwrap();
        for (got, want) in data.iter().zip([0.17782596, 0.239202, -0.42347595]) {
            assert!((got.as_f64().unwrap() - want).abs() < 1e-4, "{one}");
        }
    }
}

/// FULLY_CONNECTED [16, 512] x [512, 512]: 8.4 Mflop, enough for the CPU executor to split the
/// layer across two threads (its threshold is 2^22 flop) when it may.
const BATCH: usize = 16;
const WIDTH: usize = 512;

fn weight(o: usize, i: usize) -> f64 {
    ((o * 7 + i * 13) % 17) as f64 / 16.0 - 0.5
}

fn input(b: usize, i: usize) -> f64 {
    ((b * 5 + i * 3) % 11) as f64 / 8.0 - 0.625
}

fn bias(o: usize) -> f64 {
    (o % 5) as f64 / 4.0
}

/// Writes the model and inputs files into `dir`.
fn write_wide_fc(dir: &Path) -> (String, String) {
    let weights: Vec<f64> = (0..WIDTH * WIDTH)
        .map(|n| weight(n / WIDTH, n % WIDTH))
        .collect();
    let biases: Vec<f64> = (0..WIDTH).map(bias).collect();
    let model = serde_json::json!({
        "version": 1,
        "operands": [
            {"type": "TENSOR_FLOAT32", "dimensions": [BATCH, WIDTH], "lifetime": "MODEL_INPUT"},
            {"type": "TENSOR_FLOAT32", "dimensions": [WIDTH, WIDTH],
             "lifetime": "CONSTANT_REFERENCE", "value": weights},
            {"type": "TENSOR_FLOAT32", "dimensions": [WIDTH], "lifetime": "CONSTANT_COPY",
             "value": biases},
            {"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [0]},
            {"type": "TENSOR_FLOAT32", "dimensions": [BATCH, WIDTH], "lifetime": "MODEL_OUTPUT"},
        ],
        "operations": [{"type": "FULLY_CONNECTED", "inputs": [0, 1, 2, 3], "outputs": [4]}],
        "inputIndexes": [0],
        "outputIndexes": [4],
    });
    let x: Vec<f64> = (0..BATCH * WIDTH)
        .map(|n| input(n / WIDTH, n % WIDTH))
        .collect();
    let inputs = serde_json::json!({ "inputs": [x] });
    let (m, i) = (dir.join("wide_fc.json"), dir.join("wide_fc.inputs.json"));
    std::fs::write(&m, model.to_string()).unwrap();
    std::fs::write(&i, inputs.to_string()).unwrap();
    (m.display().to_string(), i.display().to_string())
}

#[test]
fn a_layer_split_across_threads_gives_the_single_thread_result() {
    let dir = tempfile::tempdir().unwrap();
    let (model, inputs) = write_wide_fc(dir.path());
    // The reference, in f64 here.
    let want: Vec<f64> = (0..BATCH * WIDTH)
        .map(|n| {
            let (b, o) = (n / WIDTH, n % WIDTH);
            bias(o) + (0..WIDTH).map(|i| input(b, i) * weight(o, i)).sum::<f64>()
        })
        .collect();
    for backend in backends() {
        let run = |threads: &str| {
            let args = [&model, "--inputs", &inputs, "--json", "--threads", threads];
            ctl(&[&["run"], &args[..], backend].concat())
                .expect_code(0)
                .json_outputs()
        };
        let one = run("1");
        let two = run("2");
        assert_eq!(one, two, "{backend:?}: one thread and two differ");
        let got = one[0]["data"].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let g = g.as_f64().unwrap();
            assert!(
                (g - w).abs() <= 1e-3 * w.abs().max(1.0),
                "[{k}]: {g} vs {w}"
            );
        }
    }
}

#[test]
fn zero_or_junk_threads_is_a_usage_error() {
    for bad in ["0", "65", "many"] {
        let out = run_cnn(&["--cpu", "--threads", bad]);
        out.expect_code(2);
        assert!(out.stderr.contains("--threads"), "{bad}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{bad}: {}", out.stdout);
    }
    let bench = ctl(&["bench", &example("add.json"), "--cpu", "--threads", "0"]);
    bench.expect_code(2);
    assert!(bench.stderr.contains("1..=64"), "{}", bench.stderr);
}

#[test]
fn bench_prints_the_thread_count_it_ran_with() {
    for n in ["1", "2"] {
        let out = ctl(&[
            "bench",
            &example("cnn.json"),
            "--inputs",
            &example("cnn.inputs.json"),
            "-n",
            "5",
            "--cpu",
            "--threads",
            n,
        ]);
        out.expect_code(0);
        assert!(
            out.stdout
                .lines()
                .any(|l| l == format!("threads: {n} (--threads)")),
            "{}",
            out.stdout
        );
    }
    let burst = ctl(&["bench", "--burst", "-n", "5", "--cpu", "--threads", "1"]);
    burst.expect_code(0);
    assert!(
        burst.stdout.lines().any(|l| l == "threads: 1 (--threads)"),
        "{}",
        burst.stdout
    );
}

#[test]
fn service_with_threads_set_runs_a_model_and_reports_the_count() {
    let hald = Hald::start_configured(&[OsStr::new("--cpu")], &[], "threads = 2\n");
    let socket = hald.socket().display().to_string();
    let out = run_cnn(&["--service", &socket]);
    let data = out.expect_code(0).json_outputs()[0]["data"].clone();
    let local = run_cnn(&["--cpu", "--threads", "1"]);
    assert_eq!(data, local.expect_code(0).json_outputs()[0]["data"]);
    assert!(
        hald.client()
            .server()
            .ends_with("; CPU executor threads: 2"),
        "{}",
        hald.client().server()
    );
    let info = ctl(&["info", "--service", &socket]);
    info.expect_code(0);
    assert!(
        info.stdout
            .lines()
            .any(|l| l.starts_with("service: ") && l.ends_with("CPU executor threads: 2")),
        "{}",
        info.stdout
    );
    assert!(
        hald.log().contains("up to 2 threads per operation"),
        "{}",
        hald.log()
    );
    // The flag overrides the file.
    let flagged = Hald::start_configured(
        &[
            OsStr::new("--cpu"),
            OsStr::new("--threads"),
            OsStr::new("1"),
        ],
        &[],
        "threads = 2\n",
    );
    assert!(
        flagged
            .client()
            .server()
            .ends_with("; CPU executor threads: 1")
    );
}

#[test]
fn threads_is_refused_for_a_model_run_in_the_service() {
    let hald = Hald::cpu_only();
    let socket = hald.socket().display().to_string();
    let out = run_cnn(&["--service", &socket, "--threads", "2"]);
    out.expect_code(2);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.contains("`threads`") && out.stderr.contains(&socket),
        "{}",
        out.stderr
    );
}

/// Starts nnaccel-hald with `config` and `extra` in a temp dir, expecting it to refuse.
fn hald_refusing(config: &str, extra: &[&str]) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hald.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(hald_binary());
    cmd.arg("--socket")
        .arg(dir.path().join("hal.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--config")
        .arg(&path)
        .arg("--cpu")
        .args(extra)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID");
    let out = output(cmd);
    assert!(
        !dir.path().join("hal.sock").exists(),
        "the service listened before refusing"
    );
    out
}

#[test]
fn service_refuses_to_start_with_a_bad_threads_value() {
    for (config, words) in [
        ("threads = 0\n", &["threads = 0", "must be 1 to 64"][..]),
        ("threads = 65\n", &["threads = 65", "must be 1 to 64"][..]),
        ("threads = -1\n", &["threads", "-1"][..]),
        ("threads = \"four\"\n", &["threads", "string"][..]),
    ] {
        let out = hald_refusing(config, &[]);
        out.expect_code(2);
        assert!(
            out.stderr.contains("nnaccel-hald: bad configuration: "),
            "{config}: {}",
            out.stderr
        );
        for w in words {
            assert!(out.stderr.contains(w), "{config}: {w:?} in {}", out.stderr);
        }
    }
    let flag = hald_refusing("", &["--threads", "0"]);
    flag.expect_code(2);
    assert!(flag.stderr.contains("--threads"), "{}", flag.stderr);
}
