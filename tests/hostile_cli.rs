//! Hostile inputs to `nnaccelctl` and a cache write that runs out of space (issue 16, item 6):
//! every hostile file ends with exit status 2 and one line on stderr, never an abort, a panic,
//! a signal or a hang; a cache save that hits ENOSPC leaves no partial or temporary file and
//! the cache still loads what it had. Afterwards the service and the device still serve a
//! well-behaved client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nnaccel_hal::cache::{CacheFiles, Token};
use nnaccel_hal::{
    ErrorStatus, ExecutionPreference, HalDevice, HalPreparedModel, Memory, Model, Priority,
};
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tests::service::*;
use nnaccel_tests::{Sim, require_privileges, scaled, with_timeout};

/// No single nnaccelctl invocation may take longer (a FIFO or /dev/zero used to hang it).
fn run_timeout() -> Duration {
    scaled(Duration::from_secs(30))
}

fn ctl_binary() -> PathBuf {
    nnaccel_tests::workspace_binary("NNACCEL_CTL_BIN", "nnaccelctl", "nnaccelctl")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .display()
        .to_string()
}

/// (exit code or None for a signal/timeout, stdout, stderr).
fn ctl(args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = Command::new(ctl_binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + run_timeout();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let (stdout, stderr) = (o.join().unwrap(), e.join().unwrap());
    let code = match status {
        None => None,
        Some(s) => s.code(),
    };
    (code, stdout, stderr)
}

/// A model whose every tensor is `dims` (TENSOR_FLOAT32): ADD of two inputs.
fn model_with_dims(dims: &str) -> String {
    format!(
        r#"{{"version": 1,
 "operands": [
  {{"type": "TENSOR_FLOAT32", "dimensions": {dims}, "lifetime": "MODEL_INPUT"}},
  {{"type": "TENSOR_FLOAT32", "dimensions": {dims}, "lifetime": "MODEL_INPUT"}},
  {{"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [0]}},
  {{"type": "TENSOR_FLOAT32", "dimensions": {dims}, "lifetime": "MODEL_OUTPUT"}}
 ],
 "operations": [{{"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]}}],
 "inputIndexes": [0, 1], "outputIndexes": [3]}}"#
    )
}

#[test]
fn hostile_files_and_a_non_nnaccel_device_end_with_exit_2_and_one_line_never_an_abort() {
    if !require_privileges() {
        return;
    }
    with_timeout(
        scaled(Duration::from_secs(300)),
        "hostile nnaccelctl",
        || {
            let sim = Sim::start(&[]);
            let hald = Hald::with_device(&sim);
            let dev = sim.path().display().to_string();
            let sock = hald.socket().display().to_string();
            let dir = tempfile::tempdir().unwrap();
            let file = |name: &str, text: &str| {
                let p = dir.path().join(name);
                std::fs::write(&p, text).unwrap();
                p.display().to_string()
            };
            let add = example("add.json");
            let add_inputs = example("add.inputs.json");
            let huge = file("huge.json", &model_with_dims("[65536, 65536, 16]"));
            let huge_max = file(
                "huge-max.json",
                &model_with_dims("[4294967295, 4294967295, 4294967295]"),
            );
            let inputs4 = file("in4.json", r#"{"inputs": [[1, 2, 3, 4], [1, 2, 3, 4]]}"#);
            let negative = file("neg.json", &model_with_dims("[-1, 4]"));
            let overflow = file("overflow.json", &model_with_dims("[18446744073709551616]"));
            let out_of_f64 = file("big-number.json", &model_with_dims("[1e999]"));
            let nested = file(
                "nested.json",
                &format!("{}{}", "[".repeat(50_000), "]".repeat(50_000)),
            );
            let add_text = std::fs::read_to_string(&add).unwrap();
            let dup_model = file(
                "dup.json",
                &add_text.replace("\"version\": 1,", "\"version\": 1, \"version\": 1,"),
            );
            let dup_op = file(
                "dup-op.json",
                &add_text.replace(
                    "{\"type\": \"ADD\",",
                    "{\"type\": \"MUL\", \"type\": \"ADD\",",
                ),
            );
            let dup_inputs = file(
                "dup-inputs.json",
                r#"{"inputs": [[1, 2, 3, 4]], "inputs": [[5, 6, 7, 8]]}"#,
            );
            let fifo = dir.path().join("fifo");
            let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: `c` is a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let fifo = fifo.display().to_string();
            let big = dir.path().join("big.json");
            File::create(&big).unwrap().set_len(65 << 20).unwrap();
            let big = big.display().to_string();
            let dirname = dir.path().display().to_string();
            let on_dev = ["--device", dev.as_str()];
            let run = |m: &str, i: &str| {
                let mut v = vec![
                    "run".to_string(),
                    m.to_string(),
                    "--inputs".into(),
                    i.into(),
                ];
                v.extend(on_dev.iter().map(|s| s.to_string()));
                v
            };
            let bench = |m: &str, backend: &[&str]| {
                let mut v = vec!["bench".to_string(), m.to_string(), "-n".into(), "1".into()];
                v.extend(backend.iter().map(|s| s.to_string()));
                v
            };
            let cases: Vec<(Vec<String>, &str)> = vec![
                (bench(&huge, &on_dev), "limit of"),
                (bench(&huge, &["--service", &sock]), "limit of"),
                (bench(&huge_max, &["--cpu"]), "more than 2^64 bytes"),
                (run(&huge, &inputs4), "limit of"),
                (run(&negative, &inputs4), "out of range"),
                (run(&overflow, &inputs4), "out of range"),
                (run(&out_of_f64, &inputs4), "malformed JSON"),
                (run(&nested, &inputs4), "recursion limit"),
                (run("/dev/zero", &add_inputs), "character device"),
                (run(&add, "/dev/zero"), "character device"),
                (run(&fifo, &add_inputs), "a FIFO"),
                (run(&add, &fifo), "a FIFO"),
                (run(&dirname, &add_inputs), "a directory"),
                (run(&big, &add_inputs), "more than the limit"),
                (
                    run(&dup_model, &add_inputs),
                    "version: duplicate key \"version\"",
                ),
                (
                    run(&dup_op, &add_inputs),
                    "operations[0].type: duplicate key",
                ),
                (run(&add, &dup_inputs), "inputs: duplicate key \"inputs\""),
                (
                    vec![
                        "run".into(),
                        add.clone(),
                        "--inputs".into(),
                        add_inputs.clone(),
                        "--device".into(),
                        "/dev/null".into(),
                    ],
                    "/dev/null is not an nnaccel device",
                ),
                (
                    bench(&add, &["--device", "/dev/null"]),
                    "not an nnaccel device",
                ),
                (
                    vec!["info".into(), "--device".into(), big.clone()],
                    "not an nnaccel device",
                ),
            ];
            let mut wrong = Vec::new();
            for (args, want) in &cases {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                let (code, _, stderr) = ctl(&a);
                let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
                let ok = code == Some(2)
                    && lines.len() == 1
                    && lines[0].starts_with("nnaccelctl: ")
                    && lines[0].contains(want);
                if !ok {
                    wrong.push(format!(
                        "{a:?}: exit {code:?} (want 2, {want:?} on one line), stderr:\n{stderr}"
                    ));
                }
            }
            assert!(wrong.is_empty(), "{}", wrong.join("\n---\n"));
            // The device and the service still serve a well-behaved client, on the device.
            for backend in [["--device", dev.as_str()], ["--service", sock.as_str()]] {
                let (code, stdout, stderr) =
                    ctl(&["run", &add, "--inputs", &add_inputs, backend[0], backend[1]]);
                assert_eq!(code, Some(0), "{backend:?}: {stdout}\n{stderr}");
                assert!(
                    stdout.contains("runs on the device"),
                    "{backend:?}: {stdout}"
                );
                assert!(stdout.contains("2.0"), "{backend:?}: {stdout}");
            }
            assert!(!hald.has_exited(), "the service died:\n{}", hald.log());
            assert!(!sim.has_exited(), "the simulator died:\n{}", sim.log());
        },
    );
}

/// A small tmpfs mounted on a temp dir, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(bytes: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs failed");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system, then frees `free` bytes (so the next write fits only partly).
    fn fill_leaving(&self, free: u64) -> PathBuf {
        use std::io::Write;
        let p = self.path().join("filler");
        let mut f = File::create(&p).unwrap();
        let chunk = vec![0x5au8; 4096];
        let mut len = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => len += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        f.set_len(len.saturating_sub(free)).unwrap();
        p
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn constant_model(n: u32, k: f32) -> (Model, Vec<f32>) {
    let c: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 + k).collect();
    (add_constant_model(n, ConstantIn::Copy(c.clone())), c)
}

fn check(pm: &dyn HalPreparedModel, n: u32, c: &[f32], what: &str) {
    let bytes = n * 4;
    let io: Memory = pools::ashmem(u64::from(bytes) * 2).unwrap();
    let m = MappedClientPool::new(&io).unwrap();
    let x: Vec<f32> = (0..n).map(|i| i as f32 - 1.0).collect();
    m.write(0, &f32_le(&x)).unwrap();
    let r = execute(
        pm,
        &request(vec![arg(0, 0, bytes)], vec![arg(0, bytes, bytes)], &[&io]),
    );
    assert_eq!(r.status, ErrorStatus::None, "{what}: {r:?}");
    let want: Vec<f32> = x.iter().zip(c).map(|(a, b)| a + b).collect();
    let out = f32_from_le(&m.read(bytes as usize, bytes as usize).unwrap());
    assert_eq!(out, want, "{what}");
}

fn files_in(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    (e.file_name().to_string_lossy().into_owned(), len)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Calls `f` with the cache handles of one model file and one data file.
fn with_files<R>(m: &File, d: &File, token: &Token, f: impl FnOnce(CacheFiles<'_>) -> R) -> R {
    let (model, data) = (vec![vec![m.as_fd()]], vec![vec![d.as_fd()]]);
    f(CacheFiles {
        model: &model,
        data: &data,
        token,
    })
}

#[test]
fn a_cache_save_that_hits_enospc_leaves_nothing_partial_and_the_cache_still_loads() {
    if !require_privileges() {
        return;
    }
    with_timeout(scaled(Duration::from_secs(120)), "cache ENOSPC", || {
        let fs = SmallFs::mount(1 << 20);
        let state = fs.path().join("state");
        let files = fs.path().join("files");
        std::fs::create_dir_all(&files).unwrap();
        let sim = Sim::start(&[]);
        let hald = Hald::start(&[
            "--device".as_ref(),
            sim.path().as_os_str(),
            "--state-dir".as_ref(),
            state.as_os_str(),
        ]);
        let client = hald.client();
        let open =
            |name: &str| nnaccel_protocol::cache_dir::open_cache_file(&files.join(name)).unwrap();
        let (fast, medium) = (ExecutionPreference::FastSingleAnswer, Priority::Medium);
        let prepare_with = |model: &Model, m: &File, d: &File, t: &Token| {
            with_files(m, d, t, |c| {
                client.prepare_model_with_cache(model, fast, medium, None, c)
            })
        };
        let load = |m: &File, d: &File, t: &Token| {
            with_files(m, d, t, |c| {
                client.prepare_model_from_cache(fast, medium, None, c)
            })
        };
        // A small model, cached with room to spare: client files and a managed entry.
        let (small, c_small) = constant_model(64, 1.0);
        let (ta, tb) = ([1u8; 32], [2u8; 32]);
        let (ma, da) = (open("a-model"), open("a-data"));
        drop(prepare_with(&small, &ma, &da, &ta).unwrap());
        drop(prepare(&client, &small).unwrap());
        let managed = state.join("programs");
        let entries_before = files_in(&managed);
        assert_eq!(entries_before.len(), 1, "{entries_before:?}");
        let records_before = std::fs::read(state.join("cache-records")).unwrap();
        // Fill the file system but two pages: a large model's data cache (64 KiB of constants)
        // starts to go in, then hits ENOSPC.
        let _filler = fs.fill_leaving(8192);
        let n = 16 << 10;
        let (large, c_large) = constant_model(n, 2.0);
        let (mb, db) = (open("b-model"), open("b-data"));
        let pm = prepare_with(&large, &mb, &db, &tb).expect("a failed save never fails prepare");
        check(
            &*pm,
            n,
            &c_large,
            "the model whose cache could not be saved",
        );
        drop(pm);
        for f in ["b-model", "b-data"] {
            let len = std::fs::metadata(files.join(f)).unwrap().len();
            assert_eq!(len, 0, "{f}: {len} bytes of a partial cache left behind");
        }
        assert_eq!(
            load(&mb, &db, &tb).err(),
            Some(ErrorStatus::GeneralFailure),
            "a cache that was not saved never loads"
        );
        // The driver-managed cache on a file system with no room at all: its entry cannot be
        // written, and neither a temporary nor a partial file is left; the records either.
        let _filler = fs.fill_leaving(0);
        drop(prepare(&client, &large).unwrap());
        for (name, len) in files_in(&managed).iter().chain(&files_in(&state)) {
            assert!(
                !name.starts_with('.') && !name.contains(".tmp"),
                "a temporary file is left: {name} ({len} bytes)"
            );
        }
        for (name, len) in files_in(&managed) {
            assert!(
                entries_before.contains(&(name.clone(), len)),
                "a new entry written on a full file system: {name} ({len} bytes)"
            );
        }
        assert_eq!(
            std::fs::read(state.join("cache-records")).unwrap(),
            records_before,
            "the records file changed"
        );
        // What was cached before still loads, on the device.
        let pm = load(&ma, &da, &ta).expect("the earlier cache still loads");
        assert!(pm.runs_on_device());
        check(&*pm, 64, &c_small, "prepared from the earlier cache");
        drop(pm);
        let hits = |h: &Hald| h.log().matches("driver-managed cache hit").count();
        let before = hits(&hald);
        let pm = prepare(&client, &small).unwrap();
        check(&*pm, 64, &c_small, "prepared from the managed cache");
        assert_eq!(hits(&hald), before + 1, "the managed entry still loads");
        drop(pm);
        assert!(!hald.has_exited(), "the service died:\n{}", hald.log());
        drop(client);
        drop(hald);
        drop(sim);
    });
}
