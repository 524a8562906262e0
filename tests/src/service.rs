//! Support for the end-to-end tests of the HAL service (`tests/service.rs`) and its bench:
//!
//! - [`Hald`]: spawns `nnaccel-hald` on a socket in its own temp dir, over a simulator's device
//!   file (`--device`) or on the CPU executor only (`--cpu`), waits until it accepts clients,
//!   and stops it (SIGTERM on drop, [`Hald::kill_hard`] for SIGKILL);
//! - models built in code ([`ModelBuilder`], [`binary_model`], [`add_constant_model`],
//!   [`fully_connected_model`]) and requests ([`arg`], [`request`]) over the HAL types of the
//!   `nnaccel` crate;
//! - small helpers: [`execute`], f32 bytes.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nnaccel_hal::{
    DataLocation, ExecutionPreference, ExecutionResult, HalDevice, HalPreparedModel, MeasureTiming,
    Memory, MemoryPool, Model, Operand, OperandLifetime, OperandType, Operation, OperationType,
    Priority, Request, RequestArgument, Subgraph,
};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools::MappedClientPool;
pub use {nnaccel_hal, nnaccel_protocol, nnaccel_service};

use crate::{Sim, scaled};

/// How long `nnaccel-hald` may take to accept its first client (times the timeout scale).
pub const HALD_START_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `nnaccel-hald` is (`$NNACCEL_HALD_BIN` overrides); see [`crate::workspace_binary`].
pub fn hald_binary() -> PathBuf {
    crate::workspace_binary("NNACCEL_HALD_BIN", "nnaccel-hald", "nnaccel-service")
}

/// A running `nnaccel-hald` on `<tempdir>/hal.sock`, its log in the same temp dir.
///
/// Dropping it sends SIGTERM and waits (SIGKILL after 5 s); if the thread is panicking, the
/// service's log is printed.
#[derive(Debug)]
pub struct Hald {
    child: Mutex<Option<Child>>,
    pid: u32,
    socket: PathBuf,
    log_path: PathBuf,
    dir: tempfile::TempDir,
}

impl Hald {
    /// The service over the simulator's device.
    pub fn with_device(sim: &Sim) -> Self {
        Self::start(&[OsStr::new("--device"), sim.path().as_os_str()])
    }

    /// The service on the CPU executor only.
    pub fn cpu_only() -> Self {
        Self::start(&[OsStr::new("--cpu")])
    }

    /// Starts `nnaccel-hald --socket <tempdir>/hal.sock --config <empty file> <extra>` and waits
    /// until a client can shake hands with it. `NNACCEL_LOG` defaults to `debug` (the log
    /// goes to a file, printed when a test fails).
    pub fn start(extra: &[&OsStr]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// [`Hald::start`] with extra environment variables. Unless `extra` names a
    /// `--state-dir`, the service keeps its state in `<tempdir>/state`.
    pub fn start_with_env(extra: &[&OsStr], env: &[(&str, &str)]) -> Self {
        Self::start_configured(extra, env, "")
    }

    /// [`Hald::start_with_env`] with `config` (TOML) as its configuration file.
    pub fn start_configured(extra: &[&OsStr], env: &[(&str, &str)], config: &str) -> Self {
        let bin = hald_binary();
        let dir = tempfile::Builder::new()
            .prefix("nnaccel-hald-")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("hal.sock");
        let text = config;
        let config = dir.path().join("hald.toml");
        std::fs::write(&config, text).expect("write the config");
        let log_path = dir.path().join("hald.log");
        let log = File::create(&log_path).expect("create hald log");
        let log2 = log.try_clone().expect("dup hald log");
        let level = std::env::var("NNACCEL_LOG").unwrap_or_else(|_| "debug".into());
        let mut cmd = Command::new(&bin);
        die_with_parent(&mut cmd);
        if !extra.iter().any(|a| *a == "--state-dir") {
            cmd.arg("--state-dir").arg(dir.path().join("state"));
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd
            .arg("--socket")
            .arg(&socket)
            .arg("--config")
            .arg(&config)
            .args(extra)
            .env("NNACCEL_LOG", level)
            // Not under systemd here, whatever the test runner's environment says.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin.display()));
        let pid = child.id();
        let limit = scaled(HALD_START_TIMEOUT);
        let deadline = Instant::now() + limit;
        loop {
            if socket.exists() && ServiceClient::connect(&socket).is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nnaccel-hald {extra:?} exited before serving ({status}); its log:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nnaccel-hald {extra:?} did not serve {} within {limit:?}; its log:\n{}",
                    socket.display(),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Self {
            child: Mutex::new(Some(child)),
            pid,
            socket,
            log_path,
            dir,
        }
    }

    /// The service's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The temp dir holding the socket and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The service's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the service logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// A new client connection (handshake done).
    pub fn client(&self) -> ServiceClient {
        ServiceClient::connect(&self.socket).unwrap_or_else(|e| {
            panic!(
                "connect to {}: {e}; hald log:\n{}",
                self.socket.display(),
                self.log()
            )
        })
    }

    /// A client that is the service's only connection: waits for earlier ones (the start-up
    /// probe's, whose end the service notices asynchronously) to be gone, for tests that count
    /// the service's connections or fds.
    pub fn only_client(&self) -> ServiceClient {
        let c = self.client();
        crate::poll_until(
            crate::scaled(Duration::from_secs(5)),
            "earlier clients to go",
            || c.info().is_ok_and(|i| i.connections == 1),
        );
        c
    }

    /// Whether the service process has exited (reaps it if so).
    pub fn has_exited(&self) -> bool {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            None => true,
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
        }
    }

    /// How the service process ended, if it did (reaps it).
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL, and reap.
    pub fn kill_hard(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = guard.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn terminate(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = guard.take() {
            crate::terminate_child(c, "nnaccel-hald");
        }
    }
}

impl Drop for Hald {
    fn drop(&mut self) {
        self.terminate();
        if std::thread::panicking() {
            eprintln!(
                "---- nnaccel-hald log ({}) ----\n{}---- end of log ----",
                self.pid,
                self.log()
            );
        }
    }
}

/// Makes the process `cmd` starts get SIGKILL when the thread that started it ends (the test
/// process exiting after a hung test included), so no service or child client outlives its
/// test.
pub fn die_with_parent(cmd: &mut Command) {
    let hook = || {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes two integers and touches no memory.
        let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec and makes one async-signal-safe
    // system call, touching no memory of the parent.
    unsafe { cmd.pre_exec(hook) };
}

// ---------------------------------------------------------------------------------------------
// Models and requests

/// Little-endian bytes of f32 values.
pub fn f32_le(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32 values from little-endian bytes.
pub fn f32_from_le(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A location in pool `pool` (or in `operand_values` for CONSTANT_COPY).
pub fn loc(pool: u32, offset: u32, length: u32) -> DataLocation {
    DataLocation {
        pool_index: pool,
        offset,
        length,
        padding: 0,
    }
}

/// Builds a [`Model`] operand by operand.
#[derive(Debug, Default)]
pub struct ModelBuilder {
    model: Model,
}

impl ModelBuilder {
    /// An empty model.
    pub fn new() -> Self {
        Self::default()
    }

    fn operand(
        &mut self,
        ty: OperandType,
        dims: &[u32],
        lifetime: OperandLifetime,
        location: DataLocation,
    ) -> u32 {
        self.model.operands.push(Operand {
            operand_type: ty,
            dimensions: dims.to_vec(),
            scale: 0.0,
            zero_point: 0,
            lifetime,
            location,
            extra_params: None,
        });
        (self.model.operands.len() - 1) as u32
    }

    /// A TENSOR_FLOAT32 model input.
    pub fn input(&mut self, dims: &[u32]) -> u32 {
        let k = self.operand(
            OperandType::TensorFloat32,
            dims,
            OperandLifetime::SubgraphInput,
            DataLocation::default(),
        );
        self.model.input_indexes.push(k);
        k
    }

    /// A TENSOR_FLOAT32 model output.
    pub fn output(&mut self, dims: &[u32]) -> u32 {
        let k = self.operand(
            OperandType::TensorFloat32,
            dims,
            OperandLifetime::SubgraphOutput,
            DataLocation::default(),
        );
        self.model.output_indexes.push(k);
        k
    }

    /// A TENSOR_FLOAT32 temporary.
    pub fn temporary(&mut self, dims: &[u32]) -> u32 {
        self.operand(
            OperandType::TensorFloat32,
            dims,
            OperandLifetime::TemporaryVariable,
            DataLocation::default(),
        )
    }

    fn copy_bytes(&mut self, bytes: &[u8]) -> DataLocation {
        while self.model.operand_values.len() % 4 != 0 {
            self.model.operand_values.push(0);
        }
        let offset = self.model.operand_values.len() as u32;
        self.model.operand_values.extend_from_slice(bytes);
        loc(0, offset, bytes.len() as u32)
    }

    /// A TENSOR_FLOAT32 CONSTANT_COPY.
    pub fn constant_copy(&mut self, dims: &[u32], values: &[f32]) -> u32 {
        let l = self.copy_bytes(&f32_le(values));
        self.operand(
            OperandType::TensorFloat32,
            dims,
            OperandLifetime::ConstantCopy,
            l,
        )
    }

    /// A TENSOR_FLOAT32 CONSTANT_REFERENCE at `location` (in a pool added with [`Self::pool`]).
    pub fn constant_reference(&mut self, dims: &[u32], location: DataLocation) -> u32 {
        self.operand(
            OperandType::TensorFloat32,
            dims,
            OperandLifetime::ConstantReference,
            location,
        )
    }

    /// An INT32 scalar CONSTANT_COPY (e.g. a fused activation).
    pub fn int32(&mut self, v: i32) -> u32 {
        let l = self.copy_bytes(&v.to_le_bytes());
        self.operand(OperandType::Int32, &[], OperandLifetime::ConstantCopy, l)
    }

    /// Adds a constant pool; returns its index.
    pub fn pool(&mut self, memory: Memory) -> u32 {
        self.model.pools.push(memory);
        (self.model.pools.len() - 1) as u32
    }

    /// Adds an operation.
    pub fn operation(&mut self, op: OperationType, inputs: &[u32], outputs: &[u32]) {
        self.model.operations.push(Operation {
            operation_type: op,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
        });
    }

    /// A model input of any type (e.g. the TENSOR_BOOL8 `[1]` condition of an IF).
    pub fn input_of(&mut self, ty: OperandType, dims: &[u32]) -> u32 {
        let k = self.operand(
            ty,
            dims,
            OperandLifetime::SubgraphInput,
            DataLocation::default(),
        );
        self.model.input_indexes.push(k);
        k
    }

    /// A model output of any type.
    pub fn output_of(&mut self, ty: OperandType, dims: &[u32]) -> u32 {
        let k = self.operand(
            ty,
            dims,
            OperandLifetime::SubgraphOutput,
            DataLocation::default(),
        );
        self.model.output_indexes.push(k);
        k
    }

    /// A temporary of any type.
    pub fn temporary_of(&mut self, ty: OperandType, dims: &[u32]) -> u32 {
        self.operand(
            ty,
            dims,
            OperandLifetime::TemporaryVariable,
            DataLocation::default(),
        )
    }

    /// Adds the model `sub` builds as a referenced subgraph (an IF branch, a WHILE condition
    /// or body; its inputs and outputs are the subgraph's) and returns its index. Its
    /// constants move into this model's `operand_values` and pools, and its own referenced
    /// subgraphs into this model's list, every location and SUBGRAPH index rebased.
    pub fn add_referenced(&mut self, sub: ModelBuilder) -> u32 {
        let sub = sub.model;
        while self.model.operand_values.len() % 8 != 0 {
            self.model.operand_values.push(0);
        }
        let values = self.model.operand_values.len() as u32;
        let pools = self.model.pools.len() as u32;
        let subgraphs = self.model.referenced.len() as u32;
        let rebase = |o: &mut Operand| match o.lifetime {
            OperandLifetime::ConstantCopy => o.location.offset += values,
            OperandLifetime::ConstantReference => o.location.pool_index += pools,
            OperandLifetime::Subgraph => o.location.offset += subgraphs,
            _ => {}
        };
        let mut main = Subgraph {
            operands: sub.operands,
            operations: sub.operations,
            input_indexes: sub.input_indexes,
            output_indexes: sub.output_indexes,
        };
        main.operands.iter_mut().for_each(rebase);
        let mut nested = sub.referenced;
        nested
            .iter_mut()
            .flat_map(|s| s.operands.iter_mut())
            .for_each(rebase);
        self.model
            .operand_values
            .extend_from_slice(&sub.operand_values);
        self.model.pools.extend(sub.pools);
        self.model.referenced.extend(nested);
        self.model.referenced.push(main);
        (self.model.referenced.len() - 1) as u32
    }

    /// A SUBGRAPH operand naming referenced subgraph `index`.
    pub fn subgraph_operand(&mut self, index: u32) -> u32 {
        self.model.operands.push(Operand::subgraph(index));
        (self.model.operands.len() - 1) as u32
    }

    /// [`Self::add_referenced`] and a SUBGRAPH operand naming it.
    pub fn subgraph(&mut self, sub: ModelBuilder) -> u32 {
        let index = self.add_referenced(sub);
        self.subgraph_operand(index)
    }

    /// The model.
    pub fn build(self) -> Model {
        self.model
    }
}

/// `out = a <op> b` over `[n]` f32 (ADD, MUL, SUB, DIV), no activation. Inputs a, b; output out.
pub fn binary_model(op: OperationType, n: u32) -> Model {
    let mut b = ModelBuilder::new();
    let x = b.input(&[n]);
    let y = b.input(&[n]);
    let act = b.int32(0);
    let out = b.output(&[n]);
    b.operation(op, &[x, y, act], &[out]);
    b.build()
}

/// A model planning eight 1 GiB temporaries (a chain of ADDs over `[2^28]` f32): refused with
/// RESOURCE_EXHAUSTED_PERSISTENT by the service's model-memory budget before anything is
/// allocated (tests/hostile_limits.rs, the soak's `huge-model` attack).
pub fn huge_temporaries_model() -> Model {
    let n = 1u32 << 28; // 1 GiB of f32
    let mut b = ModelBuilder::new();
    let x = b.input(&[n]);
    let act = b.int32(0);
    let mut prev = x;
    for _ in 0..8 {
        let t = b.temporary(&[n]);
        b.operation(OperationType::Add, &[prev, prev, act], &[t]);
        prev = t;
    }
    let out = b.output(&[n]);
    b.operation(OperationType::Add, &[prev, prev, act], &[out]);
    b.build()
}

/// `out = (a + b) * b` over `[n]` f32: two operations through a temporary.
pub fn add_mul_model(n: u32) -> Model {
    let mut b = ModelBuilder::new();
    let x = b.input(&[n]);
    let y = b.input(&[n]);
    let act = b.int32(0);
    let t = b.temporary(&[n]);
    let out = b.output(&[n]);
    b.operation(OperationType::Add, &[x, y, act], &[t]);
    b.operation(OperationType::Mul, &[t, y, act], &[out]);
    b.build()
}

/// Where [`add_constant_model`]'s constant lives.
#[derive(Debug, Clone)]
pub enum ConstantIn {
    /// CONSTANT_COPY in `operand_values`.
    Copy(Vec<f32>),
    /// CONSTANT_REFERENCE: `length` bytes at `offset` of this pool.
    Reference(Memory, u32),
}

/// `out = a + c` over `[n]` f32 with the constant `c` ([n] values) where `constant` says.
pub fn add_constant_model(n: u32, constant: ConstantIn) -> Model {
    let mut b = ModelBuilder::new();
    let x = b.input(&[n]);
    let c = match constant {
        ConstantIn::Copy(v) => {
            assert_eq!(v.len(), n as usize);
            b.constant_copy(&[n], &v)
        }
        ConstantIn::Reference(memory, offset) => {
            let pool = b.pool(memory);
            b.constant_reference(&[n], loc(pool, offset, n * 4))
        }
    };
    let act = b.int32(0);
    let out = b.output(&[n]);
    b.operation(OperationType::Add, &[x, c, act], &[out]);
    b.build()
}

/// `out = x · Wᵀ + bias` (FULLY_CONNECTED, no activation): x `[batch, inputs]`, W `[units,
/// inputs]` and bias `[units]` CONSTANT_COPY; out `[batch, units]`.
pub fn fully_connected_model(batch: u32, inputs: u32, weights: &[f32], bias: &[f32]) -> Model {
    let units = bias.len() as u32;
    assert_eq!(weights.len(), (units * inputs) as usize);
    let mut b = ModelBuilder::new();
    let x = b.input(&[batch, inputs]);
    let w = b.constant_copy(&[units, inputs], weights);
    let bi = b.constant_copy(&[units], bias);
    let act = b.int32(0);
    let out = b.output(&[batch, units]);
    b.operation(OperationType::FullyConnected, &[x, w, bi, act], &[out]);
    b.build()
}

/// The reference result of [`fully_connected_model`].
pub fn fully_connected_reference(
    batch: usize,
    inputs: usize,
    x: &[f32],
    weights: &[f32],
    bias: &[f32],
) -> Vec<f32> {
    let units = bias.len();
    let mut out = vec![0.0f32; batch * units];
    for i in 0..batch {
        for u in 0..units {
            let mut acc = bias[u];
            for k in 0..inputs {
                acc += x[i * inputs + k] * weights[u * inputs + k];
            }
            out[i * units + u] = acc;
        }
    }
    out
}

/// A request argument: `length` bytes at `offset` of request pool `pool`.
pub fn arg(pool: u32, offset: u32, length: u32) -> RequestArgument {
    RequestArgument {
        has_no_value: false,
        location: loc(pool, offset, length),
        dimensions: vec![],
    }
}

/// A request over `pools`.
pub fn request(
    inputs: Vec<RequestArgument>,
    outputs: Vec<RequestArgument>,
    pools: &[&Memory],
) -> Request {
    Request {
        inputs,
        outputs,
        pools: pools
            .iter()
            .map(|m| MemoryPool::Memory((*m).clone()))
            .collect(),
    }
}

/// Prepares `model` (FAST_SINGLE_ANSWER, MEDIUM, no deadline).
pub fn prepare(
    dev: &dyn HalDevice,
    model: &Model,
) -> Result<Arc<dyn HalPreparedModel>, nnaccel_hal::ErrorStatus> {
    dev.prepare_model(
        model,
        ExecutionPreference::FastSingleAnswer,
        Priority::Medium,
        None,
    )
}

/// Executes synchronously without timing and deadline.
pub fn execute(pm: &dyn HalPreparedModel, request: &Request) -> ExecutionResult {
    pm.execute_synchronously(request, MeasureTiming::No, None)
}

/// Whether `fd`'s file is mapped in process `pid` (by its `/proc/<pid>/maps` name, e.g.
/// `/memfd:NAME`), for zero-copy checks.
pub fn maps_contain(pid: u32, needle: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(needle))
}

/// The path a file descriptor of this process refers to (`/proc/self/fd/N`).
pub fn fd_path(fd: impl AsFd) -> String {
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd.as_fd());
    std::fs::read_link(format!("/proc/self/fd/{raw}"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Starts this test binary again to run only the test `test` — a child-process body that does
/// its work when `env_var` is set (to `value`) and prints `ready` (see [`say_ready`]) — with
/// [`spawn_test_child`]. Returns the child and a thread that says whether `ready` came.
pub fn spawn_child_test(
    test: &str,
    env_var: &str,
    value: &OsStr,
) -> (Child, std::thread::JoinHandle<bool>) {
    use std::io::BufRead;
    let mut child = spawn_test_child(test, env_var, value);
    let stdout = child.stdout.take().expect("piped stdout");
    let ready = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // libtest prints "test NAME ... " before the child's line.
            .any(|l| l.trim().ends_with("ready"))
    });
    (child, ready)
}

/// Re-executes this test binary as a child process that runs only the test `name` (a child
/// body that does nothing unless `env` is set), with `env` = `value`, stdout piped, stdin
/// closed, killed when the calling thread ends ([`die_with_parent`]).
pub fn spawn_test_child(name: &str, env: &str, value: impl AsRef<OsStr>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    die_with_parent(&mut cmd);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot re-execute the test binary for {name}: {e}"))
}

/// `a`, `b` and `out` of an n-element binary operation laid out in one pool: a at 0, b and out
/// after it at 64-byte boundaries.
#[derive(Debug)]
pub struct Io3 {
    /// Elements per argument.
    pub n: u32,
    /// The pool.
    pub pool: Memory,
    map: MappedClientPool,
}

impl Io3 {
    /// Bytes the pool needs for `n` elements.
    pub fn bytes_needed(n: u32) -> u64 {
        u64::from((n * 4).next_multiple_of(64)) * 3
    }

    /// Lays the arguments out in `pool` (at least [`Io3::bytes_needed`] bytes).
    pub fn new(pool: Memory, n: u32) -> Self {
        let map = MappedClientPool::new(&pool).expect("Io3");
        assert!(map.len() as u64 >= Self::bytes_needed(n));
        Self { n, pool, map }
    }

    /// Offset of argument `i` (0 a, 1 b, 2 out).
    pub fn off(&self, i: u32) -> u32 {
        (self.n * 4).next_multiple_of(64) * i
    }

    /// Writes `a` and `b`, and NaN into `out`.
    pub fn set(&self, a: &[f32], b: &[f32]) {
        self.map.write_f32(self.off(0) as usize, a).expect("Io3");
        self.map.write_f32(self.off(1) as usize, b).expect("Io3");
        self.map
            .write_f32(self.off(2) as usize, &vec![f32::NAN; self.n as usize])
            .expect("Io3");
    }

    /// Reads `out`.
    pub fn out(&self) -> Vec<f32> {
        self.map
            .read_f32(self.off(2) as usize, self.n as usize)
            .expect("Io3")
    }

    /// The request: inputs a and b, output out, one pool.
    pub fn request(&self) -> Request {
        let len = self.n * 4;
        request(
            vec![arg(0, self.off(0), len), arg(0, self.off(1), len)],
            vec![arg(0, self.off(2), len)],
            &[&self.pool],
        )
    }
}

/// Inputs `a` and `b` of n elements derived from `seed`.
pub fn inputs(n: u32, seed: f32) -> (Vec<f32>, Vec<f32>) {
    let a = (0..n).map(|i| seed + i as f32 * 0.5).collect();
    let b = (0..n).map(|i| 100.0 - seed * 2.0 - i as f32).collect();
    (a, b)
}

/// `a + b` element-wise.
pub fn sum(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// In a child made by [`spawn_test_child`]: a connection to the service whose socket `env`
/// names; None when this process is not that child (the variable is unset).
pub fn child_client(env: &str) -> Option<ServiceClient> {
    let socket = std::env::var_os(env)?;
    Some(ServiceClient::connect(Path::new(&socket)).expect("the child connects to the service"))
}

/// Tells the parent of a [`spawn_test_child`] child that it is ready (a `ready` line on stdout).
pub fn say_ready() {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").expect("stdout");
    out.flush().expect("stdout");
}

/// Runs `call` (an execution) on its own thread, kills the service with SIGKILL 300 ms later
/// (mid-call, with the device's jobs delayed), and returns the call's result and how long after
/// the kill it came (the wait is bounded: 2 s, scaled).
pub fn result_after_killing<R: Send + 'static>(
    hald: &Hald,
    call: impl FnOnce() -> R + Send + 'static,
) -> (R, Duration) {
    let call = std::thread::spawn(move || (call(), Instant::now()));
    std::thread::sleep(Duration::from_millis(300));
    hald.kill_hard();
    let killed = Instant::now();
    let (r, answered) = crate::with_timeout(scaled(Duration::from_secs(2)), "in-flight call", {
        move || call.join().expect("the call panicked")
    });
    (r, answered.saturating_duration_since(killed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `out = a + b` over `[4]`, with its own INT32 activation constant; optionally naming a
    /// subgraph of its own.
    fn add_branch(nested: Option<ModelBuilder>) -> ModelBuilder {
        let mut b = ModelBuilder::new();
        let x = b.input(&[4]);
        let y = b.input(&[4]);
        let act = b.int32(0);
        let out = b.output(&[4]);
        b.operation(OperationType::Add, &[x, y, act], &[out]);
        if let Some(n) = nested {
            b.subgraph(n);
        }
        b
    }

    #[test]
    fn referenced_subgraphs_are_merged_with_their_constants_rebased() {
        let mut main = ModelBuilder::new();
        let c = main.input_of(OperandType::TensorBool8, &[1]);
        let a = main.input(&[4]);
        let ones = main.constant_copy(&[4], &[1.0; 4]); // bytes 0..16
        let pool = |size| Memory {
            kind: nnaccel_hal::MemoryKind::Ashmem,
            fd: Arc::new(nnaccel_uapi::sys::memfd_create(c"t", size).unwrap()),
            size,
        };
        main.pool(pool(64));
        let mut inner = add_branch(None);
        let big = inner.pool(pool(64));
        inner.constant_reference(&[4], loc(big, 16, 16));
        let then = main.subgraph(add_branch(Some(inner)));
        let otherwise = main.subgraph(add_branch(None));
        let out = main.output(&[4]);
        main.operation(OperationType::If, &[c, then, otherwise, a, ones], &[out]);
        let m = main.build();
        // add_branch(inner) went in as 1 after its nested subgraph 0; the else branch is 2.
        assert_eq!(m.referenced.len(), 3);
        assert_eq!(m.operands[then as usize].location.offset, 1);
        assert_eq!(m.operands[otherwise as usize].location.offset, 2);
        assert_eq!(m.referenced[1].operands[4].location.offset, 0);
        // Constants: main's 16 bytes; the then-branch's values (its activation, then the
        // nested one's at its next 8-byte boundary, 8) come in at 16, so the then-branch's
        // activation is at 16 and the nested one's at 24; the else-branch's at 32.
        let act_offsets: Vec<u32> = m
            .referenced
            .iter()
            .map(|s| s.operands[2].location.offset)
            .collect();
        assert_eq!(act_offsets, [24, 16, 32]);
        assert_eq!(m.operand_values.len(), 36);
        // The nested subgraph's pool 0 is the model's pool 1, after main's.
        assert_eq!(m.referenced[0].operands[4].location.pool_index, 1);
        assert_eq!(m.pools.len(), 2);
        nnaccel_hal::validate::validate_model_structure(&m).unwrap();
    }
}
