//! `nnaccelctl run MODEL.tflite` against LiteRT on the generated TFLite models
//! (`tests/data/tflite/`, written by `scripts/tflite/gen_test_models.py`; its `manifest.json`
//! lists them with their scheme, operators and what is expected of each).
//!
//! For every model expected to agree, LiteRT runs it (`scripts/tflite/litert_run.py` in the
//! venv of `scripts/litert-venv.sh`, on TFLite's reference kernels; on LiteRT's default path
//! for CEIL and ELU, which the reference resolver lacks, and LOCAL_RESPONSE_NORMALIZATION,
//! whose reference kernel leaves the window's last channel out) and `nnaccelctl run
//! MODEL.tflite --cpu --inputs IN.npz --outputs OUT.npz` runs it on nnaccel's CPU executor;
//! each output (by its tensor name) must have the same element type and shape, float values
//! within 1e-5 of the LiteRT output's range (max − min), quantized values within 1 quantum,
//! INT32 and BOOL values exactly
//! (the manifest may give a model a wider float tolerance, or a function nnaccel applies on top
//! of LiteRT's result, each with its reason).
//! The test prints one row per model (the largest difference, in quanta for quantized
//! outputs) and fails naming every model that does not agree. The models that use an
//! operator with no NNAPI equivalent must make `nnaccelctl run` exit 2 with a message naming
//! the operator and its node index.
//!
//! When the LiteRT venv cannot be made (no network) the LiteRT tests print `SKIPPED` and
//! pass, except under `CI=true`, where that fails; a missing `nnaccelctl` fails everywhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nnaccel_tests::models::{litert_venv, repo_root};
use serde_json::Value;

/// Float outputs may differ from LiteRT's by this fraction of the output's range.
const FLOAT_TOLERANCE: f64 = 1e-5;
/// Quantized outputs may differ by this many quanta (steps of the integer value).
const QUANTUM_TOLERANCE: f64 = 1.0;
/// No single nnaccelctl or LiteRT run may take longer.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn data_dir() -> PathBuf {
    repo_root().join("tests/data/tflite")
}

/// Where `nnaccelctl` is (`$NNACCEL_CTL_BIN` overrides); built on demand, a failure when
/// missing.
fn ctl_binary() -> PathBuf {
    nnaccel_tests::workspace_binary("NNACCEL_CTL_BIN", "nnaccelctl", "nnaccelctl")
}

/// The venv's python, made once per test binary; None (after printing `SKIPPED`) when it
/// cannot be made outside CI.
fn python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(litert_venv) {
        Ok(p) => Some(p),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("TFLite agreement: cannot make the LiteRT venv under CI=true: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: TFLite agreement needs the LiteRT venv: {why}");
            None
        }
    }
}

/// One model of the manifest.
#[derive(Debug)]
struct Entry {
    name: String,
    scheme: String,
    operators: Vec<String>,
    /// LiteRT's resolver for it: "ref" (TFLite's reference kernels) or "default" (for the
    /// few operators the reference resolver lacks).
    resolver: String,
    /// The fraction of a float output's range it may differ by (the manifest's
    /// `float_tolerance`, given with a reason for the hybrid models; else [`FLOAT_TOLERANCE`]).
    float_tolerance: f64,
    /// A function nnaccel deliberately applies on top of what LiteRT computes (the manifest's
    /// `litert_then`: "tanh" for a fused TANH, which TFLite's kernels leave out).
    litert_then: Option<String>,
    /// None: agrees with LiteRT; Some(mentions): nnaccelctl refuses it (exit 2) with a
    /// message naming each of these (the operator and its node, or the tensor type).
    error: Option<Vec<String>>,
}

impl Entry {
    fn tflite(&self) -> PathBuf {
        data_dir().join(format!("{}.tflite", self.name))
    }

    fn inputs(&self) -> PathBuf {
        data_dir().join(format!("{}.inputs.npz", self.name))
    }
}

fn manifest() -> Vec<Entry> {
    let path = data_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run the generator)", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Entry {
            name: m["name"].as_str().unwrap().to_string(),
            scheme: m["scheme"].as_str().unwrap().to_string(),
            operators: strings(&m["operators"]),
            resolver: m["resolver"].as_str().unwrap().to_string(),
            float_tolerance: m
                .get("float_tolerance")
                .map_or(FLOAT_TOLERANCE, |t| t.as_f64().unwrap()),
            litert_then: m
                .get("litert_then")
                .map(|f| f.as_str().unwrap().to_string()),
            error: match m["expect"].as_str().unwrap() {
                "agree" => None,
                "error" => Some(strings(&m["mentions"])),
                other => panic!("{}: unknown expectation {other:?}", m["name"]),
            },
        })
        .collect()
}

/// What one command did.
struct Ran {
    code: Option<i32>,
    stderr: String,
}

/// Runs `cmd` with its stdout and stderr in files of `dir` (no pipe to fill up), killing it
/// after [`RUN_TIMEOUT`].
fn run(cmd: &mut Command, dir: &Path, tag: &str) -> Ran {
    let out_path = dir.join(format!("{tag}.stdout"));
    let err_path = dir.join(format!("{tag}.stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{tag}: cannot start {cmd:?}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{tag}: {cmd:?} ran longer than {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        !stderr.contains("panicked"),
        "{tag}: {cmd:?} panicked:\n{stderr}"
    );
    Ran {
        code: status.code(),
        stderr,
    }
}

/// A command's stderr on one line, for the table: its non-empty lines joined, cut at 300
/// characters.
fn one_line(stderr: &str) -> String {
    let joined = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    match joined.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}

/// One array of an .npz: its numpy type string (`<f4`, `|i1`, ...), shape and values.
#[derive(Debug)]
struct Array {
    dtype: String,
    shape: Vec<u64>,
    values: Vec<f64>,
}

impl Array {
    fn is_float(&self) -> bool {
        self.dtype.contains('f')
    }

    /// 8- and 16-bit integers are quantized values in these models; INT32, INT64 and BOOL
    /// outputs (indices, comparisons, integer arithmetic) are exact.
    fn is_quantized(&self) -> bool {
        matches!(self.dtype.as_str(), "|i1" | "|u1" | "<i2")
    }
}

/// The values of an array of element type `T`, as f64.
fn to_f64<T: npyz::Deserialize>(
    npy: npyz::NpyFile<&[u8]>,
    to: impl Fn(T) -> f64,
) -> std::io::Result<Vec<f64>> {
    Ok(npy.into_vec::<T>()?.into_iter().map(to).collect())
}

/// Every array of the .npz at `path`, by name.
fn read_npz(path: &Path) -> Result<Vec<(String, Array)>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut arrays = Vec::new();
    for k in 0..archive.len() {
        let mut member = archive
            .by_index(k)
            .map_err(|e| format!("{}: member {k}: {e}", path.display()))?;
        let name = member.name().trim_end_matches(".npy").to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut member, &mut bytes)
            .map_err(|e| format!("{}: array {name}: {e}", path.display()))?;
        let npy = npyz::NpyFile::new(&bytes[..])
            .map_err(|e| format!("{}: array {name}: {e}", path.display()))?;
        let dtype = match npy.dtype() {
            npyz::DType::Plain(ty) => ty.to_string(),
            other => return Err(format!("{}: array {name}: type {other:?}", path.display())),
        };
        let shape = npy.shape().to_vec();
        let bad = |e: std::io::Error| format!("{}: array {name} ({dtype}): {e}", path.display());
        let values: Vec<f64> = match dtype.as_str() {
            "<f4" => to_f64::<f32>(npy, f64::from),
            "<f8" => to_f64::<f64>(npy, f64::from),
            "|i1" => to_f64::<i8>(npy, f64::from),
            "|u1" => to_f64::<u8>(npy, f64::from),
            "<i2" => to_f64::<i16>(npy, f64::from),
            "<i4" => to_f64::<i32>(npy, f64::from),
            // Values of the generated models' int64 tensors fit an f64 exactly.
            "<i8" => to_f64::<i64>(npy, |v| v as f64),
            "|b1" => to_f64::<bool>(npy, |b| if b { 1.0 } else { 0.0 }),
            other => return Err(format!("{}: array {name}: type {other}", path.display())),
        }
        .map_err(bad)?;
        arrays.push((
            name,
            Array {
                dtype,
                shape,
                values,
            },
        ));
    }
    Ok(arrays)
}

/// How one model compared.
struct Row {
    name: String,
    scheme: String,
    outputs: usize,
    /// The largest difference (absolute for float outputs, in quanta for quantized ones).
    worst: f64,
    /// For float outputs: the largest difference over the output's range.
    relative: Option<f64>,
    /// Whether an output is quantized (its difference is in quanta).
    quantized: bool,
    /// Why it does not agree, if it does not.
    failure: Option<String>,
}

/// Compares nnaccel's outputs with LiteRT's, output by output (LiteRT's names).
fn compare(entry: &Entry, ours: &[(String, Array)], theirs: &[(String, Array)]) -> Row {
    let mut row = Row {
        name: entry.name.clone(),
        scheme: entry.scheme.clone(),
        outputs: theirs.len(),
        worst: 0.0,
        relative: None,
        quantized: false,
        failure: None,
    };
    for (out, want) in theirs {
        let Some((_, got)) = ours.iter().find(|(n, _)| n == out) else {
            row.failure = Some(format!(
                "no output {out:?} in nnaccelctl's --outputs (it has {:?})",
                ours.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>()
            ));
            return row;
        };
        if got.dtype != want.dtype || got.shape != want.shape {
            row.failure = Some(format!(
                "output {out}: {} {:?} here, {} {:?} on LiteRT",
                got.dtype, got.shape, want.dtype, want.shape
            ));
            return row;
        }
        let (worst, at) = got
            .values
            .iter()
            .zip(&want.values)
            .map(|(a, b)| (a - b).abs())
            .enumerate()
            .fold((0.0f64, 0usize), |(w, at), (i, d)| {
                // A NaN on either side is a disagreement.
                if d > w || d.is_nan() { (d, i) } else { (w, at) }
            });
        let tolerance = if want.is_float() {
            let (lo, hi) = want
                .values
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
            let range = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
            let relative = worst / range;
            row.relative = Some(row.relative.map_or(relative, |r: f64| r.max(relative)));
            entry.float_tolerance * range
        } else if want.is_quantized() {
            row.quantized = true;
            QUANTUM_TOLERANCE
        } else {
            0.0
        };
        row.worst = row.worst.max(worst);
        if worst.is_nan() || worst > tolerance {
            row.failure = Some(format!(
                "output {out}[{at}] is {} here and {} on LiteRT ({worst:e} apart, tolerance \
                 {tolerance:e})",
                got.values.get(at).copied().unwrap_or(f64::NAN),
                want.values.get(at).copied().unwrap_or(f64::NAN)
            ));
            return row;
        }
    }
    row
}

/// `nnaccelctl run MODEL.tflite --cpu --inputs IN.npz --outputs OUT.npz` for `entry`.
fn run_ctl(entry: &Entry, outputs: &Path, dir: &Path, tag: &str) -> Ran {
    run(
        Command::new(ctl_binary())
            .arg("run")
            .arg(entry.tflite())
            .arg("--cpu")
            .arg("--inputs")
            .arg(entry.inputs())
            .arg("--outputs")
            .arg(outputs),
        dir,
        tag,
    )
}

/// Runs one model on LiteRT and on nnaccelctl in `dir`.
fn agree(python: &Path, entry: &Entry, dir: &Path) -> Row {
    let theirs_path = dir.join(format!("{}.litert.npz", entry.name));
    let ours_path = dir.join(format!("{}.nnaccel.npz", entry.name));
    let fail = |why: String| Row {
        name: entry.name.clone(),
        scheme: entry.scheme.clone(),
        outputs: 0,
        worst: f64::NAN,
        relative: None,
        quantized: false,
        failure: Some(why),
    };
    let litert = run(
        Command::new(python)
            .arg(repo_root().join("scripts/tflite/litert_run.py"))
            .arg(entry.tflite())
            .arg(entry.inputs())
            .arg(&theirs_path)
            .args(["--resolver", &entry.resolver]),
        dir,
        &format!("{}.litert", entry.name),
    );
    if litert.code != Some(0) {
        return fail(format!("LiteRT failed: {}", one_line(&litert.stderr)));
    }
    let ctl = run_ctl(entry, &ours_path, dir, &format!("{}.nnaccel", entry.name));
    if ctl.code != Some(0) {
        return fail(format!(
            "nnaccelctl exit {:?}: {}",
            ctl.code,
            one_line(&ctl.stderr)
        ));
    }
    let mut theirs = match read_npz(&theirs_path) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    match entry.litert_then.as_deref() {
        None => {}
        Some("tanh") => {
            for (_, a) in &mut theirs {
                a.values.iter_mut().for_each(|v| *v = v.tanh());
            }
        }
        Some(other) => return fail(format!("unknown litert_then {other:?} in the manifest")),
    }
    let ours = match read_npz(&ours_path) {
        Ok(a) => a,
        Err(e) => return fail(format!("nnaccelctl's --outputs: {e}")),
    };
    compare(entry, &ours, &theirs)
}

fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<40} {:<6} {:>4} {:>12} {:>10}  result\n",
        "model", "scheme", "outs", "max |diff|", "/range"
    );
    for r in rows {
        let worst = if r.worst.is_nan() {
            "-".to_string()
        } else if r.quantized {
            format!("{} quanta", r.worst)
        } else {
            format!("{:.3e}", r.worst)
        };
        let relative = r.relative.map_or("-".to_string(), |x| format!("{x:.2e}"));
        let _ = writeln!(
            s,
            "{:<40} {:<6} {:>4} {:>12} {:>10}  {}",
            r.name,
            r.scheme,
            r.outputs,
            worst,
            relative,
            r.failure.as_deref().unwrap_or("agrees")
        );
    }
    s
}

#[test]
fn every_generated_model_agrees_with_litert() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // NNACCEL_TFLITE_MODELS=conv,depthwise runs the models whose names contain one of these.
    let only: Vec<String> = std::env::var("NNACCEL_TFLITE_MODELS")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let entries: Vec<Entry> = manifest()
        .into_iter()
        .filter(|e| e.error.is_none())
        .filter(|e| only.is_empty() || only.iter().any(|o| e.name.contains(o.as_str())))
        .collect();
    assert!(
        entries.len() >= 50 || !only.is_empty(),
        "only {} models",
        entries.len()
    );
    let rows: Vec<Row> = entries
        .iter()
        .map(|e| agree(python, e, dir.path()))
        .collect();
    eprintln!("{}", table(&rows));
    let failed: Vec<&Row> = rows.iter().filter(|r| r.failure.is_some()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} models do not agree with LiteRT:\n{}",
        failed.len(),
        rows.len(),
        failed
            .iter()
            .map(|r| format!("  {}: {}", r.name, r.failure.as_deref().unwrap_or("")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The refused models: an operator with no NNAPI equivalent (CUMSUM, a custom operator),
/// NNAPI limits (SELECT without broadcasting, no int64 bias for 16x8): exit 2 and a message
/// naming the operator and its node index (or the tensor type), no outputs file.
#[test]
fn refused_models_exit_2_naming_the_operator_and_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let refused: Vec<Entry> = manifest()
        .into_iter()
        .filter(|e| e.error.is_some())
        .collect();
    assert!(
        refused.iter().any(|e| e.name == "unsupported_cumsum"),
        "the manifest lists no unsupported model"
    );
    for entry in &refused {
        let Some(mentions) = &entry.error else {
            continue;
        };
        let out = dir.path().join(format!("{}.npz", entry.name));
        let ran = run_ctl(entry, &out, dir.path(), &entry.name);
        assert_eq!(
            ran.code,
            Some(2),
            "{}: exit {:?}, wanted 2; stderr:\n{}",
            entry.name,
            ran.code,
            ran.stderr
        );
        for m in mentions {
            assert!(
                ran.stderr.contains(m.as_str()),
                "{}: the message does not name {m:?}:\n{}",
                entry.name,
                ran.stderr
            );
        }
        assert!(!out.exists(), "{}: an outputs file was written", entry.name);
    }
}

#[test]
fn the_checked_in_models_are_what_the_generator_writes() {
    let Some(python) = python() else {
        return;
    };
    let out = Command::new(python)
        .arg(repo_root().join("scripts/tflite/gen_test_models.py"))
        .arg("--check")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gen_test_models.py --check: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The manifest and the directory agree, and the models cover what issue 19 asks for.
#[test]
fn the_manifest_lists_every_model_file_and_covers_the_mapped_operators() {
    let entries = manifest();
    let mut listed: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    listed.sort();
    let mut on_disk: Vec<String> = std::fs::read_dir(data_dir())
        .unwrap()
        .filter_map(|f| {
            let name = f.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".tflite")?.to_string();
            (!stem.starts_with("cli_")).then_some(stem)
        })
        .collect();
    on_disk.sort();
    assert_eq!(listed, on_disk, "manifest.json against the .tflite files");
    for e in &entries {
        assert!(e.inputs().is_file(), "{}: no inputs file", e.name);
        // The inputs archive names its arrays as the generator's manifest says.
        let arrays = read_npz(&e.inputs()).unwrap();
        assert!(!arrays.is_empty(), "{}: inputs archive is empty", e.name);
    }
    let used: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter(|e| e.error.is_none())
        .flat_map(|e| e.operators.iter().map(String::as_str))
        .collect();
    // Every TFLite builtin the import maps (driver/tflite/src/lower/mod.rs).
    for op in [
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "TRANSPOSE_CONV",
        "FULLY_CONNECTED",
        "AVERAGE_POOL_2D",
        "MAX_POOL_2D",
        "L2_POOL_2D",
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "CONCATENATION",
        "RESHAPE",
        "EXPAND_DIMS",
        "SQUEEZE",
        "SOFTMAX",
        "LOG_SOFTMAX",
        "LOGISTIC",
        "TANH",
        "RELU",
        "RELU_N1_TO_1",
        "RELU6",
        "HARD_SWISH",
        "ELU",
        "ABS",
        "EXP",
        "LOG",
        "SQRT",
        "RSQRT",
        "SIN",
        "NEG",
        "FLOOR",
        "LOGICAL_NOT",
        "MAXIMUM",
        "MINIMUM",
        "POW",
        "PRELU",
        "EQUAL",
        "NOT_EQUAL",
        "LESS",
        "LESS_EQUAL",
        "GREATER",
        "GREATER_EQUAL",
        "LOGICAL_AND",
        "LOGICAL_OR",
        "SQUARED_DIFFERENCE",
        "LEAKY_RELU",
        "RESIZE_BILINEAR",
        "RESIZE_NEAREST_NEIGHBOR",
        "PAD",
        "PADV2",
        "MEAN",
        "SUM",
        "REDUCE_MAX",
        "REDUCE_MIN",
        "REDUCE_PROD",
        "REDUCE_ANY",
        "REDUCE_ALL",
        "QUANTIZE",
        "DEQUANTIZE",
        "SPLIT",
        "SPLIT_V",
        "PACK",
        "UNPACK",
        "STRIDED_SLICE",
        "SLICE",
        "TRANSPOSE",
        "TILE",
        "SPACE_TO_BATCH_ND",
        "BATCH_TO_SPACE_ND",
        "SPACE_TO_DEPTH",
        "DEPTH_TO_SPACE",
        "L2_NORMALIZATION",
        "LOCAL_RESPONSE_NORMALIZATION",
        "ARG_MAX",
        "ARG_MIN",
        "GATHER",
        "SELECT",
        "SELECT_V2",
        "TOPK_V2",
        "FILL",
        "EMBEDDING_LOOKUP",
        "SQUARE",
        "ADD_N",
        "CEIL",
        "RELU_0_TO_1",
        "CAST",
        "DENSIFY",
        "VAR_HANDLE",
        "READ_VARIABLE",
        "ASSIGN_VARIABLE",
        "CALL_ONCE",
        "MIRROR_PAD",
        "REVERSE_V2",
        "BATCH_MATMUL",
        "HASHTABLE_LOOKUP",
        "FLOOR_DIV",
        "FLOOR_MOD",
        "COS",
        "GELU",
        "IF",
        "WHILE",
        "RNN",
        "SVDF",
        "UNIDIRECTIONAL_SEQUENCE_RNN",
        "BIDIRECTIONAL_SEQUENCE_RNN",
        "LSTM",
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        "BIDIRECTIONAL_SEQUENCE_LSTM",
    ] {
        assert!(used.contains(op), "no generated model uses {op}");
    }
    let schemes: std::collections::BTreeSet<&str> =
        entries.iter().map(|e| e.scheme.as_str()).collect();
    for s in ["f32", "u8", "i8", "i8t", "i16", "mixed"] {
        assert!(schemes.contains(s), "no generated model in scheme {s}");
    }
}
