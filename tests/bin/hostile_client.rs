//! A hostile client of `nnaccel-hald` for the mixed-load soak (tests/soak.rs; issue 16, "How it
//! is shown"): repeats one attack against the service's socket until the time is up, counts
//! the attempts and how the service answered, and prints a one-line summary. It never panics on
//! the service's refusals: each refusal, close or error is counted.
//!
//! Usage: `nnaccel-hostile-client --socket PATH --attack NAME --seconds N`

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use nnaccel_hal::{ErrorStatus, HalPreparedModel, Memory, MemoryKind, OperationType};
use nnaccel_protocol::client::ServiceClient;
use nnaccel_protocol::pools;
use nnaccel_protocol::{self as protocol, ClientMessage, FdList};
use nnaccel_tests::service::{
    arg, binary_model, execute, huge_temporaries_model, prepare, request,
};

/// Elements of the ADD model the pool attacks execute.
const N: u32 = 64;

/// Repeats one attack on nnaccel-hald until --seconds pass, then prints one summary line:
/// `attack=NAME attempts=A refused=R accepted=X errors=E`. "refused" counts the answers the
/// service should give (an error status, an error frame, a close); "accepted" counts attacks
/// the service let through (a hole); "errors" counts anything else (e.g. a failed connect).
#[derive(Debug, Parser)]
#[command(name = "nnaccel-hostile-client", version)]
struct Args {
    /// The service's socket.
    #[arg(long)]
    socket: PathBuf,
    /// The attack to repeat.
    #[arg(long, value_enum)]
    attack: Attack,
    /// How long to keep attacking.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// idle-connections: how many connections to open and hold at once.
    #[arg(long, default_value_t = 32)]
    connections: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Attack {
    /// A memfd sealed with F_SEAL_WRITE as an execution's output pool (expects INVALID_ARGUMENT).
    SealedOutput,
    /// A pipe's read end as an execution's input pool (expects INVALID_ARGUMENT).
    PipePool,
    /// A frame header announcing a 64 MiB body, 100 bytes of it, then silence (expects an
    /// error frame and a close after the service's frame_timeout_ms).
    StalledFrame,
    /// Opens --connections connections, shakes hands, holds them idle until the service closes
    /// them (idle_timeout_ms), and again.
    IdleConnections,
    /// Random bytes, some behind a valid frame magic, on fresh connections (expects a close).
    JunkFrames,
    /// A model planning eight 1 GiB temporaries (expects RESOURCE_EXHAUSTED_PERSISTENT).
    HugeModel,
}

#[derive(Debug, Default)]
struct Counts {
    attempts: u64,
    refused: u64,
    accepted: u64,
    errors: u64,
}

impl Counts {
    fn status(&mut self, status: ErrorStatus, expected: ErrorStatus) {
        self.attempts += 1;
        if status == expected {
            self.refused += 1;
        } else if status == ErrorStatus::None {
            self.accepted += 1;
        } else {
            self.errors += 1;
        }
    }
}

fn main() {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut counts = Counts::default();
    let mut rng = Rng::seeded();
    match args.attack {
        Attack::SealedOutput | Attack::PipePool => pool_attack(&args, deadline, &mut counts),
        Attack::HugeModel => huge_model(&args.socket, deadline, &mut counts),
        _ => {
            while Instant::now() < deadline {
                match args.attack {
                    Attack::StalledFrame => stalled_frame(&args.socket, &mut counts),
                    Attack::IdleConnections => {
                        idle_connections(&args.socket, args.connections, deadline, &mut counts)
                    }
                    _ => junk_frame(&args.socket, &mut rng, &mut counts),
                }
            }
        }
    }
    let name = args
        .attack
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    println!(
        "nnaccel-hostile-client: attack={name} attempts={} refused={} accepted={} errors={}",
        counts.attempts, counts.refused, counts.accepted, counts.errors
    );
}

/// A connection with the ADD model prepared on it, or None (counted as an error, after a pause).
fn connect_prepared(socket: &Path, counts: &mut Counts) -> Option<Arc<dyn HalPreparedModel>> {
    let prepared = ServiceClient::connect(socket)
        .ok()
        .and_then(|c| prepare(&c, &binary_model(OperationType::Add, N)).ok());
    if prepared.is_none() {
        counts.errors += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    prepared
}

fn memfd(size: u64) -> Option<OwnedFd> {
    let fd = rustix::fs::memfd_create(
        c"nnaccel-hostile",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .ok()?;
    rustix::fs::ftruncate(&fd, size).ok()?;
    Some(fd)
}

fn raw_pool(fd: OwnedFd, size: u64) -> Memory {
    Memory {
        kind: MemoryKind::Ashmem,
        fd: Arc::new(fd),
        size,
    }
}

/// The hostile pool for one attempt: a write-sealed memfd (output) or a pipe (input).
fn hostile_pool(attack: Attack) -> Option<Memory> {
    let size = u64::from(N) * 4;
    let fd = if attack == Attack::SealedOutput {
        let fd = memfd(size)?;
        rustix::fs::fcntl_add_seals(&fd, rustix::fs::SealFlags::WRITE).ok()?;
        fd
    } else {
        rustix::pipe::pipe().ok()?.0
    };
    Some(raw_pool(fd, size))
}

fn pool_attack(args: &Args, deadline: Instant, counts: &mut Counts) {
    let len = N * 4;
    let Ok(good) = pools::ashmem(u64::from(len) * 2) else {
        counts.errors += 1;
        return;
    };
    let mut model = None;
    while Instant::now() < deadline {
        let Some(pm) = model
            .take()
            .or_else(|| connect_prepared(&args.socket, counts))
        else {
            continue;
        };
        let Some(bad) = hostile_pool(args.attack) else {
            counts.errors += 1;
            continue;
        };
        let req = if args.attack == Attack::SealedOutput {
            // Inputs from the good pool 0, the output into the sealed pool 1.
            request(
                vec![arg(0, 0, len), arg(0, len, len)],
                vec![arg(1, 0, len)],
                &[&good, &bad],
            )
        } else {
            // Inputs from the pipe (pool 1), the output into the good pool 0.
            request(
                vec![arg(1, 0, len), arg(1, 0, len)],
                vec![arg(0, 0, len)],
                &[&good, &bad],
            )
        };
        let status = execute(&*pm, &req).status;
        counts.status(status, ErrorStatus::InvalidArgument);
        if status != ErrorStatus::InvalidArgument && status != ErrorStatus::None {
            // The connection may be gone: start again on a new one.
            continue;
        }
        model = Some(pm);
    }
}

fn huge_model(socket: &Path, deadline: Instant, counts: &mut Counts) {
    let model = huge_temporaries_model();
    let mut client = None;
    while Instant::now() < deadline {
        let Some(c) = client
            .take()
            .or_else(|| ServiceClient::connect(socket).ok())
        else {
            counts.errors += 1;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let status = match prepare(&c, &model) {
            Ok(_) => ErrorStatus::None,
            Err(e) => e,
        };
        counts.status(status, ErrorStatus::ResourceExhaustedPersistent);
        if status == ErrorStatus::ResourceExhaustedPersistent {
            client = Some(c);
        }
    }
}

/// A raw connection that has shaken hands.
fn hello(socket: &Path) -> Option<UnixStream> {
    let sock = UnixStream::connect(socket).ok()?;
    let hello = ClientMessage::Hello {
        version: protocol::PROTOCOL_VERSION,
        client: "nnaccel-hostile-client".into(),
    };
    let body = protocol::encode(&hello).ok()?;
    protocol::send_frame(&sock, &body, FdList::default().fds()).ok()?;
    protocol::recv_frame(&sock, 1 << 20).ok()?;
    Some(sock)
}

/// Reads until the service closes `sock` (or `within` passes); whether it closed.
fn closed_within(sock: &UnixStream, within: Duration) -> bool {
    if sock.set_read_timeout(Some(within)).is_err() {
        return false;
    }
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while started.elapsed() < within {
        match (&*sock).read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            // A reset is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
    false
}

fn stalled_frame(socket: &Path, counts: &mut Counts) {
    counts.attempts += 1;
    let Some(sock) = hello(socket) else {
        counts.errors += 1;
        std::thread::sleep(Duration::from_millis(100));
        return;
    };
    let mut header = [0u8; 16];
    header[..4].copy_from_slice(&protocol::FRAME_MAGIC);
    header[4..8].copy_from_slice(&((64u32 << 20) - 1).to_le_bytes());
    let sent = (&sock).write_all(&header).is_ok() && (&sock).write_all(&[0u8; 100]).is_ok();
    if sent && closed_within(&sock, Duration::from_secs(30)) {
        counts.refused += 1;
    } else {
        counts.errors += 1;
    }
}

fn idle_connections(socket: &Path, many: usize, deadline: Instant, counts: &mut Counts) {
    let mut held = Vec::with_capacity(many);
    for _ in 0..many {
        counts.attempts += 1;
        match hello(socket) {
            Some(s) => held.push(s),
            // Refused by a budget (an error frame instead of the hello): counted, not fatal.
            None => counts.refused += 1,
        }
    }
    // Hold them until the service closes them (or the time is up).
    for sock in &held {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if closed_within(sock, left) {
            counts.refused += 1;
        }
    }
    if held.is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn junk_frame(socket: &Path, rng: &mut Rng, counts: &mut Counts) {
    counts.attempts += 1;
    let Ok(sock) = UnixStream::connect(socket) else {
        counts.errors += 1;
        std::thread::sleep(Duration::from_millis(100));
        return;
    };
    let len = 16 + (rng.next() % 512) as usize;
    let mut junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    if rng.next() % 2 == 0 {
        // Past the magic check: a random header behind a valid magic.
        junk[..4].copy_from_slice(&protocol::FRAME_MAGIC);
    }
    // The service may close before everything is written: that is a refusal too.
    let _ = (&sock).write_all(&junk);
    let _ = sock.shutdown(std::net::Shutdown::Write);
    if closed_within(&sock, Duration::from_secs(30)) {
        counts.refused += 1;
    } else {
        counts.errors += 1;
    }
}

/// xorshift64*: junk bytes without a dependency.
struct Rng(u64);

impl Rng {
    fn seeded() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self((t ^ u64::from(std::process::id()) << 32) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
