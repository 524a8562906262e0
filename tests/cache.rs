//! Compilation caching end to end (`docs/caching.md`): the VTS CompilationCachingTests cases
//! through `nnaccel-hald` on the simulated device (FUSE), the token records across service
//! restarts and driver builds, the driver-managed cache, and the in-process driver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nnaccel_hal::cache::{CacheHandle, Token};
use nnaccel_hal::{
    Backend, Driver, ErrorStatus, ExecutionPreference, HalDevice, HalPreparedModel, Memory, Model,
    OperationType, Priority,
};
use nnaccel_protocol::pools::{self, MappedClientPool};
use nnaccel_tests::service::*;
use nnaccel_tests::{Sim, require_privileges, scaled, with_timeout};

const N: u32 = 64;

/// The test body's time limit.
fn limit() -> Duration {
    scaled(Duration::from_secs(120))
}

/// Runs `body` with a simulator and a service over it (root and FUSE needed; a visible skip
/// without them, a failure under CI=true).
fn with_service(body: impl FnOnce(&Sim, &Hald) + Send + 'static) {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "cache test", move || {
        let sim = Sim::start(&[]);
        let hald = Hald::with_device(&sim);
        body(&sim, &hald);
        drop(hald);
        drop(sim);
    });
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn token(&mut self) -> Token {
        let mut t = [0u8; 32];
        for b in &mut t {
            *b = self.next() as u8;
        }
        t
    }
}

/// `out = (x + c1) * c2` over `[N]`: c1 a CONSTANT_COPY, c2 a CONSTANT_REFERENCE in an ashmem
/// pool — both constant lifetimes end up in the data cache. `k` changes the constants (another
/// model).
fn test_model(k: f32) -> (Model, Vec<f32>, Vec<f32>) {
    let c1: Vec<f32> = (0..N).map(|i| i as f32 * 0.5 + k).collect();
    let c2: Vec<f32> = (0..N).map(|i| 1.0 + (i % 7) as f32 + k).collect();
    let pool = pools::ashmem(u64::from(N) * 4).unwrap();
    MappedClientPool::new(&pool)
        .unwrap()
        .write(0, &f32_le(&c2))
        .unwrap();
    let mut b = ModelBuilder::new();
    let x = b.input(&[N]);
    let k1 = b.constant_copy(&[N], &c1);
    let p = b.pool(pool);
    let k2 = b.constant_reference(&[N], loc(p, 0, N * 4));
    let act = b.int32(0);
    let t = b.temporary(&[N]);
    let out = b.output(&[N]);
    b.operation(OperationType::Add, &[x, k1, act], &[t]);
    b.operation(OperationType::Mul, &[t, k2, act], &[out]);
    (b.build(), c1, c2)
}

/// Runs `pm` on a fresh input and checks the result against `(x + c1) * c2`.
fn check_results(pm: &dyn HalPreparedModel, c1: &[f32], c2: &[f32], what: &str) {
    let bytes = N * 4;
    let io: Memory = pools::ashmem(u64::from(bytes) * 2).unwrap();
    let x: Vec<f32> = (0..N).map(|i| i as f32 - 3.0).collect();
    let m = MappedClientPool::new(&io).unwrap();
    m.write(0, &f32_le(&x)).unwrap();
    let r = execute(
        pm,
        &request(vec![arg(0, 0, bytes)], vec![arg(0, bytes, bytes)], &[&io]),
    );
    assert_eq!(r.status, ErrorStatus::None, "{what}: {r:?}");
    let out = m.read(bytes as usize, bytes as usize).unwrap();
    let want: Vec<f32> = (0..N as usize).map(|i| (x[i] + c1[i]) * c2[i]).collect();
    assert_eq!(f32_from_le(&out), want, "{what}: wrong results");
}

/// A model's cache files: `model` and `data` in a temp dir, opened read-write (0600).
struct CacheFiles {
    _dir: tempfile::TempDir,
    model: PathBuf,
    data: PathBuf,
    extra: PathBuf,
}

fn open_rw(p: &Path) -> File {
    nnaccel_protocol::cache_dir::open_cache_file(p).unwrap()
}

impl CacheFiles {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        let data = dir.path().join("data");
        let extra = dir.path().join("extra");
        for p in [&model, &data, &extra] {
            drop(open_rw(p));
        }
        Self {
            _dir: dir,
            model,
            data,
            extra,
        }
    }

    /// Fresh read-write fds: (model, data, spare).
    fn open(&self) -> (File, File, File) {
        (
            open_rw(&self.model),
            open_rw(&self.data),
            open_rw(&self.extra),
        )
    }

    fn copy_from(&self, other: &CacheFiles) {
        std::fs::write(&self.model, std::fs::read(&other.model).unwrap()).unwrap();
        std::fs::write(&self.data, std::fs::read(&other.data).unwrap()).unwrap();
    }
}

fn one<'a>(f: &'a File) -> Vec<CacheHandle<'a>> {
    vec![vec![f.as_fd()]]
}

fn save(
    dev: &dyn HalDevice,
    model: &Model,
    mc: &[CacheHandle<'_>],
    dc: &[CacheHandle<'_>],
    token: &Token,
) -> Arc<dyn HalPreparedModel> {
    let files = nnaccel_hal::cache::CacheFiles {
        model: mc,
        data: dc,
        token,
    };
    dev.prepare_model_with_cache(
        model,
        ExecutionPreference::FastSingleAnswer,
        Priority::Medium,
        None,
        files,
    )
    .expect("prepareModel with cache handles succeeds whatever happens to the cache")
}

fn load(
    dev: &dyn HalDevice,
    mc: &[CacheHandle<'_>],
    dc: &[CacheHandle<'_>],
    token: &Token,
) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
    let files = nnaccel_hal::cache::CacheFiles {
        model: mc,
        data: dc,
        token,
    };
    dev.prepare_model_from_cache(
        ExecutionPreference::FastSingleAnswer,
        Priority::Medium,
        None,
        files,
    )
}

/// Saves `model` into `files` under `token` with valid handles.
fn save_files(dev: &dyn HalDevice, model: &Model, files: &CacheFiles, token: &Token) {
    let (m, d, _) = files.open();
    drop(save(dev, model, &one(&m), &one(&d), token));
}

fn load_files(
    dev: &dyn HalDevice,
    files: &CacheFiles,
    token: &Token,
) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
    let (m, d, _) = files.open();
    load(dev, &one(&m), &one(&d), token)
}

fn assert_general_failure(r: Result<Arc<dyn HalPreparedModel>, ErrorStatus>, what: &str) {
    match r {
        Ok(_) => panic!("{what}: prepared from the cache"),
        Err(s) => assert_eq!(s, ErrorStatus::GeneralFailure, "{what}"),
    }
}

#[test]
fn the_service_asks_for_one_model_and_one_data_cache_file() {
    with_service(|_, hald| {
        let (m, d) = hald.client().get_number_of_cache_files_needed().unwrap();
        assert!((1..=32).contains(&m) && (1..=32).contains(&d), "({m}, {d})");
        assert_eq!((m, d), (1, 1));
    });
}

#[test]
fn a_saved_cache_prepares_the_model_with_correct_results_on_the_device() {
    with_service(|_, hald| {
        let c = hald.client();
        let (model, c1, c2) = test_model(0.0);
        let files = CacheFiles::new();
        let token = Rng::new(1).token();
        let (m, d, _) = files.open();
        let pm = save(&c, &model, &one(&m), &one(&d), &token);
        assert!(pm.runs_on_device());
        check_results(&*pm, &c1, &c2, "prepared with cache handles");
        assert!(std::fs::metadata(&files.model).unwrap().len() > 0);
        assert!(std::fs::metadata(&files.data).unwrap().len() >= u64::from(N) * 8);
        let pm = load_files(&c, &files, &token).expect("prepared from the cache");
        assert!(pm.runs_on_device(), "the cached placement is kept");
        check_results(&*pm, &c1, &c2, "prepared from the cache");
    });
}

#[test]
fn non_zero_fd_offsets_and_junk_in_the_files_do_not_matter() {
    with_service(|_, hald| {
        let c = hald.client();
        let (model, c1, c2) = test_model(0.0);
        let files = CacheFiles::new();
        let token = Rng::new(2).token();
        {
            let (mut m, mut d, _) = files.open();
            // Old content longer than the cache, and the offset past it.
            m.write_all(&[0xAB; 100_000]).unwrap();
            d.write_all(&[0xCD; 100_000]).unwrap();
            drop(save(&c, &model, &one(&m), &one(&d), &token));
        }
        let (mut m, mut d, _) = files.open();
        let mut byte = [0u8; 1];
        m.read_exact(&mut byte).unwrap();
        d.read_exact(&mut byte).unwrap();
        assert_eq!(m.stream_position().unwrap(), 1);
        let pm = load(&c, &one(&m), &one(&d), &token).expect("prepared from the cache");
        check_results(&*pm, &c1, &c2, "non-zero offsets");
    });
}

type Handles<'a> = (Vec<CacheHandle<'a>>, Vec<CacheHandle<'a>>);

/// One handle too many or too few, for each kind (`x` is a spare file).
fn wrong_handle_counts<'a>(m: &'a File, d: &'a File, x: &'a File) -> Vec<Handles<'a>> {
    vec![
        (vec![vec![m.as_fd()], vec![x.as_fd()]], one(d)),
        (vec![], one(d)),
        (one(m), vec![vec![d.as_fd()], vec![x.as_fd()]]),
        (one(m), vec![]),
    ]
}

/// Two fds in one handle, or none, for each kind.
fn wrong_fd_counts<'a>(m: &'a File, d: &'a File, x: &'a File) -> Vec<Handles<'a>> {
    vec![
        (vec![vec![m.as_fd(), x.as_fd()]], one(d)),
        (vec![vec![]], one(d)),
        (one(m), vec![vec![d.as_fd(), x.as_fd()]]),
        (one(m), vec![vec![]]),
    ]
}

/// Saving through each of `cases` prepares (correct results) and records nothing; loading a
/// good cache through each of them is GENERAL_FAILURE, and through good handles works.
fn bad_handles_are_never_saved_or_loaded(
    dev: &dyn HalDevice,
    seed: u64,
    cases: for<'a> fn(&'a File, &'a File, &'a File) -> Vec<Handles<'a>>,
) {
    let (model, c1, c2) = test_model(0.0);
    let mut rng = Rng::new(seed);
    for case in 0..4 {
        let files = CacheFiles::new();
        let token = rng.token();
        let (m, d, x) = files.open();
        let (mc, dc) = &cases(&m, &d, &x)[case];
        let pm = save(dev, &model, mc, dc, &token);
        check_results(&*pm, &c1, &c2, &format!("save case {case}"));
        assert_general_failure(load(dev, mc, dc, &token), "the same bad handles");
        assert_general_failure(load_files(dev, &files, &token), "nothing was recorded");
    }
    let files = CacheFiles::new();
    let token = rng.token();
    save_files(dev, &model, &files, &token);
    let (m, d, x) = files.open();
    for (i, (mc, dc)) in cases(&m, &d, &x).iter().enumerate() {
        assert_general_failure(load(dev, mc, dc, &token), &format!("load case {i}"));
    }
    assert!(load(dev, &one(&m), &one(&d), &token).is_ok());
}

#[test]
fn one_handle_too_many_or_too_few_saves_nothing_and_loads_nothing() {
    with_service(|_, hald| {
        bad_handles_are_never_saved_or_loaded(&hald.client(), 3, wrong_handle_counts)
    });
}

#[test]
fn a_handle_with_two_fds_or_none_is_never_saved_or_loaded() {
    with_service(|_, hald| {
        bad_handles_are_never_saved_or_loaded(&hald.client(), 5, wrong_fd_counts)
    });
}

#[test]
fn a_read_only_fd_saves_nothing_and_a_write_only_fd_loads_nothing() {
    with_service(|_, hald| {
        let c = hald.client();
        let (model, c1, c2) = test_model(0.0);
        let mut rng = Rng::new(6);
        for which in 0..2 {
            let files = CacheFiles::new();
            let token = rng.token();
            let ro_m = File::open(&files.model).unwrap();
            let ro_d = File::open(&files.data).unwrap();
            let (m, d, _) = files.open();
            let (mc, dc) = if which == 0 {
                (one(&ro_m), one(&d))
            } else {
                (one(&m), one(&ro_d))
            };
            let pm = save(&c, &model, &mc, &dc, &token);
            check_results(&*pm, &c1, &c2, "read-only cache fd");
            assert_general_failure(load_files(&c, &files, &token), "nothing was recorded");
        }
        let files = CacheFiles::new();
        let token = rng.token();
        save_files(&c, &model, &files, &token);
        let wo = |p: &Path| OpenOptions::new().write(true).open(p).unwrap();
        let (m, d, _) = files.open();
        let (wo_m, wo_d) = (wo(&files.model), wo(&files.data));
        assert_general_failure(load(&c, &one(&wo_m), &one(&d), &token), "write-only model");
        assert_general_failure(load(&c, &one(&m), &one(&wo_d), &token), "write-only data");
        assert!(load(&c, &one(&m), &one(&d), &token).is_ok());
    });
}

/// Copies `from`'s cache over `to`'s files again and again until `stop`.
fn copy_over_until(to: &CacheFiles, from: &CacheFiles, stop: &AtomicBool) {
    let (m, d) = (
        std::fs::read(&from.model).unwrap(),
        std::fs::read(&from.data).unwrap(),
    );
    loop {
        std::fs::write(&to.model, &m).unwrap();
        std::fs::write(&to.data, &d).unwrap();
        if stop.load(Ordering::SeqCst) {
            break;
        }
        std::thread::yield_now();
    }
}

#[test]
fn another_models_cache_copied_over_during_saves_and_loads_never_gives_wrong_results() {
    with_service(|_, hald| {
        let c = hald.client();
        let (model_a, c1, c2) = test_model(0.0);
        let (model_b, _, _) = test_model(100.0);
        let files_b = CacheFiles::new();
        let mut rng = Rng::new(7);
        save_files(&c, &model_b, &files_b, &rng.token());
        let (mut ok, mut failed) = (0, 0);
        for i in 0..100 {
            let files_a = CacheFiles::new();
            let token = rng.token();
            // Odd iterations race the save, even ones race the load of a clean save.
            if i % 2 == 0 {
                save_files(&c, &model_a, &files_a, &token);
            }
            let stop = AtomicBool::new(false);
            let result = std::thread::scope(|s| {
                s.spawn(|| copy_over_until(&files_a, &files_b, &stop));
                if i % 2 == 1 {
                    save_files(&c, &model_a, &files_a, &token);
                }
                let r = load_files(&c, &files_a, &token);
                stop.store(true, Ordering::SeqCst);
                r
            });
            match result {
                Ok(pm) => {
                    ok += 1;
                    check_results(&*pm, &c1, &c2, &format!("iteration {i}"));
                }
                Err(s) => {
                    failed += 1;
                    assert_eq!(s, ErrorStatus::GeneralFailure, "iteration {i}");
                }
            }
        }
        eprintln!("TOCTOU: {ok} loads succeeded (correct results), {failed} failed");
        // The service is alive and well.
        let pm = prepare(&c, &model_a).unwrap();
        check_results(&*pm, &c1, &c2, "after the races");
    });
}

#[test]
fn a_cache_replaced_by_another_models_cache_fails() {
    with_service(|_, hald| {
        let c = hald.client();
        let (model_a, _, _) = test_model(0.0);
        let (model_b, c1b, c2b) = test_model(100.0);
        let (files_a, files_b) = (CacheFiles::new(), CacheFiles::new());
        let mut rng = Rng::new(8);
        let (token_a, token_b) = (rng.token(), rng.token());
        save_files(&c, &model_a, &files_a, &token_a);
        save_files(&c, &model_b, &files_b, &token_b);
        files_a.copy_from(&files_b);
        assert_general_failure(
            load_files(&c, &files_a, &token_a),
            "B's cache under A's token",
        );
        // B's own token still loads B.
        let pm = load_files(&c, &files_a, &token_b).unwrap();
        check_results(&*pm, &c1b, &c2b, "B from the copied files");
    });
}

fn flip_bit(path: &Path, rng: &mut Rng) {
    let mut bytes = std::fs::read(path).unwrap();
    assert!(!bytes.is_empty());
    let at = rng.below(bytes.len() as u64) as usize;
    bytes[at] ^= 1 << rng.below(8);
    std::fs::write(path, bytes).unwrap();
}

fn append_bytes(path: &Path, rng: &mut Rng) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    let n = 1 + rng.below(256) as usize;
    let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
    f.write_all(&junk).unwrap();
}

#[test]
fn damaged_caches_and_wrong_tokens_fail_over_ten_seeds() {
    with_service(|_, hald| {
        let c = hald.client();
        let (model, c1, c2) = test_model(0.0);
        for seed in 0..10u64 {
            let mut rng = Rng::new(100 + seed);
            for damage in 0..5 {
                let files = CacheFiles::new();
                let mut token = rng.token();
                save_files(&c, &model, &files, &token);
                let what = match damage {
                    0 => {
                        flip_bit(&files.model, &mut rng);
                        "a flipped model-cache bit"
                    }
                    1 => {
                        append_bytes(&files.model, &mut rng);
                        "bytes appended to the model cache"
                    }
                    2 => {
                        token[rng.below(32) as usize] ^= 1 << rng.below(8);
                        "a flipped token bit"
                    }
                    3 => {
                        flip_bit(&files.data, &mut rng);
                        "a flipped data-cache bit"
                    }
                    _ => {
                        append_bytes(&files.data, &mut rng);
                        "bytes appended to the data cache"
                    }
                };
                // The data cache is hashed too: its damage fails the same way (never a crash).
                assert_general_failure(
                    load_files(&c, &files, &token),
                    &format!("seed {seed}: {what}"),
                );
            }
        }
        let pm = prepare(&c, &model).unwrap();
        check_results(&*pm, &c1, &c2, "the service is unharmed");
    });
}

#[test]
fn records_and_managed_entries_survive_a_restart_and_a_new_driver_build_invalidates_them() {
    if !require_privileges() {
        return;
    }
    with_timeout(limit(), "cache restart test", || {
        let sim = Sim::start(&[]);
        let state = tempfile::tempdir().unwrap();
        let start = |build: &str| {
            Hald::start_with_env(
                &[
                    "--device".as_ref(),
                    sim.path().as_os_str(),
                    "--state-dir".as_ref(),
                    state.path().as_os_str(),
                ],
                &[(nnaccel_hal::cache::BUILD_ID_ENV, build)],
            )
        };
        let (model, c1, c2) = test_model(0.0);
        let files = CacheFiles::new();
        let token = Rng::new(9).token();
        let managed_hit = |h: &Hald| {
            let pm = prepare(&h.client(), &model).unwrap();
            check_results(&*pm, &c1, &c2, "prepared without cache files");
            h.log().contains("driver-managed cache hit")
        };
        let hald = start("build-1");
        save_files(&hald.client(), &model, &files, &token);
        assert!(!managed_hit(&hald), "a first preparation compiles");
        drop(hald);
        let hald = start("build-1");
        let pm = load_files(&hald.client(), &files, &token).expect("the record survived");
        check_results(&*pm, &c1, &c2, "after a restart");
        drop(pm);
        assert!(
            managed_hit(&hald),
            "the driver-managed cache survived the restart"
        );
        drop(hald);
        let hald = start("build-2");
        assert_general_failure(
            load_files(&hald.client(), &files, &token),
            "a cache of another driver build",
        );
        assert!(
            !managed_hit(&hald),
            "entries of another build are never used"
        );
        drop(hald);
        // The reset is for good: the old build's records are gone too.
        let hald = start("build-1");
        assert_general_failure(
            load_files(&hald.client(), &files, &token),
            "records reset by the other build",
        );
    });
}

#[test]
fn the_driver_managed_cache_serves_later_preparations_with_their_own_constants_and_clears() {
    with_service(|_, hald| {
        let c = hald.client();
        c.cache_clear().unwrap();
        let (model, c1, c2) = test_model(0.0);
        let pm = prepare(&c, &model).unwrap();
        check_results(&*pm, &c1, &c2, "first preparation");
        let (enabled, entries) = c.cache_list().unwrap();
        assert!(enabled);
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].key.len(), 64);
        let pm2 = prepare(&c, &model).unwrap();
        assert!(pm2.runs_on_device());
        check_results(&*pm2, &c1, &c2, "from the driver-managed cache");
        assert!(
            hald.log().contains("driver-managed cache hit"),
            "the second preparation was a hit"
        );
        // Entries hold the compiled structure and placement, not the weights: the same
        // structure with other constants is a hit, and computes with the new constants.
        let hits = |h: &Hald| h.log().matches("driver-managed cache hit").count();
        let before = hits(hald);
        let (other, d1, d2) = test_model(5.0);
        check_results(&*prepare(&c, &other).unwrap(), &d1, &d2, "other constants");
        assert_eq!(hits(hald), before + 1);
        assert_eq!(c.cache_list().unwrap().1.len(), 1);
        // Another structure is another entry.
        let add = binary_model(OperationType::Add, 8);
        drop(prepare(&c, &add).unwrap());
        assert_eq!(c.cache_list().unwrap().1.len(), 2);
        assert_eq!(c.cache_clear().unwrap(), 2);
        assert!(c.cache_list().unwrap().1.is_empty());
    });
}

#[test]
fn the_in_process_driver_saves_and_loads_caches_too() {
    let driver = Driver::new(Backend::CpuOnly);
    let (model, c1, c2) = test_model(0.0);
    let files = CacheFiles::new();
    let mut rng = Rng::new(10);
    let token = rng.token();
    save_files(&driver, &model, &files, &token);
    let pm = load_files(&driver, &files, &token).expect("prepared from the cache");
    check_results(&*pm, &c1, &c2, "in-process, from the cache");
    flip_bit(&files.model, &mut rng);
    assert_general_failure(
        load_files(&driver, &files, &token),
        "flipped bit in-process",
    );
}

fn nnaccelctl(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let bin = nnaccel_tests::workspace_binary("NNACCEL_CTL_BIN", "nnaccelctl", "nnaccelctl");
    let out = std::process::Command::new(bin).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `nnaccelctl run examples/<name>.json --inputs examples/<name>.inputs.json --cache-dir
/// <dir> <backend...>`.
fn run_example(name: &str, dir: &Path, backend: &[&std::ffi::OsStr]) -> (bool, String) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let (model, inputs) = (
        examples.join(format!("{name}.json")),
        examples.join(format!("{name}.inputs.json")),
    );
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        inputs.as_os_str(),
        "--cache-dir".as_ref(),
        dir.as_os_str(),
    ];
    args.extend_from_slice(backend);
    nnaccelctl(&args)
}

/// The output lines of `nnaccelctl run` (everything after the `status:` line).
fn outputs(text: &str) -> String {
    text.lines()
        .skip_while(|l| !l.starts_with("status:"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn nnaccelctl_run_with_a_cache_dir_loads_the_second_time_and_recompiles_a_damaged_cache() {
    with_service(|_, hald| {
        let dir = tempfile::tempdir().unwrap();
        let run = || {
            run_example(
                "mlp",
                dir.path(),
                &["--service".as_ref(), hald.socket().as_os_str()],
            )
        };
        let (ok, first) = run();
        assert!(ok && first.contains("cache saved"), "{first}");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[0].len(), 66);
        assert!(
            names[0].ends_with("10") && names[1].ends_with("20"),
            "{names:?}"
        );
        assert_eq!(names[0][..64], names[1][..64]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(&names[0]))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (ok, second) = run();
        assert!(ok && second.contains("prepared from the cache"), "{second}");
        assert_eq!(outputs(&first), outputs(&second));
        flip_bit(&dir.path().join(&names[0]), &mut Rng::new(11));
        let (ok, third) = run();
        assert!(ok && third.contains("cache saved"), "{third}");
        assert_eq!(outputs(&first), outputs(&third));
        let (ok, fourth) = run();
        assert!(ok && fourth.contains("prepared from the cache"), "{fourth}");
    });
}

#[test]
fn nnaccelctl_cache_lists_and_clears_the_services_cache() {
    with_service(|_, hald| {
        let c = hald.client();
        c.cache_clear().unwrap();
        let (model, _, _) = test_model(1.0);
        drop(prepare(&c, &model).unwrap());
        let sock = hald.socket().as_os_str();
        let (ok, list) = nnaccelctl(&[
            "cache".as_ref(),
            "list".as_ref(),
            "--service".as_ref(),
            sock,
        ]);
        assert!(ok && list.contains("1 entry"), "{list}");
        let key = &c.cache_list().unwrap().1[0].key;
        assert!(list.contains(key.as_str()), "{list}");
        let (ok, cleared) = nnaccelctl(&[
            "cache".as_ref(),
            "clear".as_ref(),
            "--service".as_ref(),
            sock,
        ]);
        assert!(ok && cleared.contains("removed 1 entries"), "{cleared}");
        assert!(c.cache_list().unwrap().1.is_empty());
    });
}

#[test]
fn an_o_append_fd_saves_nothing_rather_than_a_cache_that_never_loads() {
    let driver = Driver::new(Backend::CpuOnly);
    let (model, c1, c2) = test_model(0.0);
    let files = CacheFiles::new();
    let token = Rng::new(12).token();
    let append = OpenOptions::new()
        .read(true)
        .append(true)
        .open(&files.model)
        .unwrap();
    let (_, d, _) = files.open();
    let pm = save(&driver, &model, &one(&append), &one(&d), &token);
    check_results(&*pm, &c1, &c2, "prepared with an O_APPEND cache fd");
    assert_eq!(std::fs::metadata(&files.model).unwrap().len(), 0);
    assert_general_failure(load_files(&driver, &files, &token), "nothing was recorded");
}

#[test]
fn nnaccelctl_run_with_a_cache_dir_caches_across_runs_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let run = || run_example("add", dir.path(), &["--cpu".as_ref()]);
    let (ok, first) = run();
    assert!(ok && first.contains("cache saved"), "{first}");
    let (ok, second) = run();
    assert!(ok && second.contains("prepared from the cache"), "{second}");
    assert_eq!(outputs(&first), outputs(&second));
    assert!(dir.path().join(".nnaccel-state/cache-records").is_file());
}

#[test]
fn a_client_holding_the_files_lock_keeps_the_driver_from_reading_or_writing_them() {
    use rustix::fs::{FlockOperation, flock};
    let driver = Driver::new(Backend::CpuOnly);
    let (model, c1, c2) = test_model(0.0);
    let files = CacheFiles::new();
    let token = Rng::new(13).token();
    save_files(&driver, &model, &files, &token);
    let saved = std::fs::read(&files.model).unwrap();
    // Another open of the model cache (its own open file description) holds the lock, as a
    // client updating the file would.
    let holder = File::open(&files.model).unwrap();
    flock(&holder, FlockOperation::LockExclusive).unwrap();
    assert_general_failure(
        load_files(&driver, &files, &token),
        "a load while a client holds the lock",
    );
    // A save while the lock is held prepares but leaves the file alone (and drops the record).
    let (m, d, _) = files.open();
    let pm = save(&driver, &model, &one(&m), &one(&d), &token);
    check_results(&*pm, &c1, &c2, "prepared while the cache is locked");
    assert_eq!(std::fs::read(&files.model).unwrap(), saved);
    flock(&holder, FlockOperation::Unlock).unwrap();
    assert_general_failure(
        load_files(&driver, &files, &token),
        "the record went with the skipped save",
    );
    save_files(&driver, &model, &files, &token);
    assert!(load_files(&driver, &files, &token).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Packed weights: at every preparation, a cache hit included; never by an execution

/// CONV_2D (SAME, 16 filters 3×3 over 3 channels) → RESHAPE to `[50, 16]` → FULLY_CONNECTED
/// (10 outputs), batch 2 of 5×5 images: float32, or 8-bit (QUANT8_ASYMM, the convolution's
/// filters per channel). The filters (1728 bytes float) are CONSTANT_COPY, so a cache load
/// moves them into the data pool; the FULLY_CONNECTED weights are CONSTANT_REFERENCE in a
/// pool. Both are GEMM weights the CPU executor packs.
fn gemm_model(quant: bool) -> Model {
    let mut rng = Rng::new(if quant { 77 } else { 78 });
    let mut vals = |n: usize, lo: i64, hi: i64, scale: f64| -> Vec<serde_json::Value> {
        (0..n)
            .map(|_| {
                let v = lo + rng.below((hi - lo + 1) as u64) as i64;
                if scale == 0.0 {
                    serde_json::json!(v)
                } else {
                    serde_json::json!(v as f64 * scale)
                }
            })
            .collect()
    };
    let (ty, int_scale) = if quant {
        ("TENSOR_QUANT8_ASYMM", 0.0)
    } else {
        ("TENSOR_FLOAT32", 1.0 / 64.0)
    };
    let filter = if quant {
        serde_json::json!({"type": "TENSOR_QUANT8_SYMM_PER_CHANNEL", "dimensions": [16, 3, 3, 3],
            "lifetime": "CONSTANT_COPY", "value": vals(432, -127, 127, 0.0),
            "channelQuant": {"channelDim": 0,
                "scales": (0..16).map(|i| 0.01 + 0.001 * f64::from(i)).collect::<Vec<_>>()}})
    } else {
        serde_json::json!({"type": ty, "dimensions": [16, 3, 3, 3], "lifetime": "CONSTANT_COPY",
            "value": vals(432, -64, 64, int_scale)})
    };
    let q = |scale: f64, zp: i64| {
        if quant {
            serde_json::json!({"scale": scale, "zeroPoint": zp})
        } else {
            serde_json::json!({})
        }
    };
    let with = |mut base: serde_json::Value, extra: serde_json::Value| {
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        base
    };
    let bias_ty = if quant { "TENSOR_INT32" } else { ty };
    let scalar = |v: i64| serde_json::json!({"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [v]});
    let operands = vec![
        with(
            serde_json::json!({"type": ty, "dimensions": [2, 5, 5, 3], "lifetime": "MODEL_INPUT"}),
            q(0.5, 10),
        ),
        filter,
        // Per-channel bias: scale 0 (the input scale times each filter scale is implied).
        serde_json::json!({"type": bias_ty, "dimensions": [16], "lifetime": "CONSTANT_COPY",
            "value": vals(16, -50, 50, int_scale)}),
        scalar(1),
        scalar(1),
        scalar(1),
        scalar(0),
        with(
            serde_json::json!({"type": ty, "dimensions": [2, 5, 5, 16], "lifetime": "TEMPORARY_VARIABLE"}),
            q(0.25, 128),
        ),
        serde_json::json!({"type": "TENSOR_INT32", "dimensions": [2], "lifetime": "CONSTANT_COPY", "value": [50, 16]}),
        with(
            serde_json::json!({"type": ty, "dimensions": [50, 16], "lifetime": "TEMPORARY_VARIABLE"}),
            q(0.25, 128),
        ),
        with(
            serde_json::json!({"type": ty, "dimensions": [10, 16], "lifetime": "CONSTANT_REFERENCE",
            "value": if quant { vals(160, 0, 255, 0.0) } else { vals(160, -64, 64, int_scale) }}),
            q(0.02, 120),
        ),
        with(
            serde_json::json!({"type": bias_ty, "dimensions": [10], "lifetime": "CONSTANT_COPY",
            "value": vals(10, -100, 100, int_scale)}),
            if quant {
                serde_json::json!({"scale": 0.005, "zeroPoint": 0})
            } else {
                serde_json::json!({})
            },
        ),
        with(
            serde_json::json!({"type": ty, "dimensions": [50, 10], "lifetime": "MODEL_OUTPUT"}),
            q(0.5, 100),
        ),
    ];
    let doc = serde_json::json!({
        "version": 1,
        "operands": operands,
        "operations": [
            {"type": "CONV_2D", "inputs": [0, 1, 2, 3, 4, 5, 6], "outputs": [7]},
            {"type": "RESHAPE", "inputs": [7, 8], "outputs": [9]},
            {"type": "FULLY_CONNECTED", "inputs": [9, 10, 11, 6], "outputs": [12]},
        ],
        "inputIndexes": [0],
        "outputIndexes": [12],
    });
    nnaccel_protocol::modelfile::parse_model(&doc.to_string())
        .unwrap()
        .model
}

/// The output bytes of `pm` (a [`gemm_model`]) on a fixed input.
fn run_gemm_model(pm: &dyn HalPreparedModel, quant: bool) -> Vec<u8> {
    let elem = if quant { 1 } else { 4 };
    let (in_len, out_len) = (2 * 5 * 5 * 3 * elem, 50 * 10 * elem);
    let input: Vec<u8> = if quant {
        (0..in_len).map(|i| (i * 37 % 256) as u8).collect()
    } else {
        f32_le(
            &(0..in_len / 4)
                .map(|i| (i % 11) as f32 * 0.25 - 1.0)
                .collect::<Vec<_>>(),
        )
    };
    let io: Memory = pools::ashmem((in_len + out_len) as u64).unwrap();
    let m = MappedClientPool::new(&io).unwrap();
    m.write(0, &input).unwrap();
    let r = execute(
        pm,
        &request(
            vec![arg(0, 0, in_len as u32)],
            vec![arg(0, in_len as u32, out_len as u32)],
            &[&io],
        ),
    );
    assert_eq!(r.status, ErrorStatus::None, "{r:?}");
    m.read(in_len, out_len).unwrap()
}

/// `f()` and how many weights it packed on this thread.
fn counting_packings<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = nnaccel_cpu::packings_on_this_thread();
    let r = f();
    (r, nnaccel_cpu::packings_on_this_thread() - before)
}

/// The cache stores constants, not packed weights (docs/caching.md, "Packed weights are not
/// stored"): a hit packs the model's two GEMM weights at preparation, from the data pool, as a
/// fresh preparation does from the client's pool, and no execution after either packs.
#[test]
fn a_cache_hit_packs_its_weights_at_preparation_and_no_execution_packs() {
    for quant in [false, true] {
        let driver = Driver::new(Backend::CpuOnly);
        let model = gemm_model(quant);
        let (fresh, packed) = counting_packings(|| prepare(&driver, &model).unwrap());
        // The filters (CONSTANT_COPY) and the FULLY_CONNECTED weights (CONSTANT_REFERENCE).
        assert_eq!(packed, 2, "quant {quant}");
        let (want, packed) = counting_packings(|| run_gemm_model(&*fresh, quant));
        assert_eq!(packed, 0, "quant {quant}: an execution packed weights");
        let files = CacheFiles::new();
        let token = Rng::new(11).token();
        save_files(&driver, &model, &files, &token);
        let (pm, packed) = counting_packings(|| load_files(&driver, &files, &token).unwrap());
        // Loaded, constants of 1024 bytes or more are CONSTANT_REFERENCE into the data pool
        // (the float filters), smaller ones values of the model: packed at preparation both.
        assert_eq!(
            packed, 2,
            "quant {quant}: a cache hit did not pack at preparation"
        );
        for _ in 0..2 {
            let (got, packed) = counting_packings(|| run_gemm_model(&*pm, quant));
            assert_eq!(
                packed, 0,
                "quant {quant}: an execution after a hit packed weights"
            );
            assert_eq!(got, want, "quant {quant}");
        }
    }
}
