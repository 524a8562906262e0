//! Fuzz target 1 (docs/testing.md, tier 4): ioctl arguments. Random and mutated-valid argument
//! bytes for every command into the in-process device: every answer is success or an errno
//! (never a panic, never a reply of the wrong size), successful answers describe live objects,
//! and afterwards the device still answers GET_PARAM and every object the fuzzed files made is
//! gone once they are closed.
//!
//! The in-process device resolves fds and user pointers in this process, where other tests run
//! concurrently: fd fields therefore name only this test's own fds or numbers no process has
//! open (a random fd could be another test's socket or memfd). Pointers stay random (they are
//! only read, through process_vm_readv). Queues the fuzzer creates live in its own memfd, and
//! some cases scribble into that ring as a hostile client would (jobs, tails, doorbells): the
//! engine must refuse the damage without disturbing the ioctls.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use nnaccel_uapi::abi::*;
use nnaccel_uapi::fuzz::{self, Rng};
use nnaccel_uapi::ioctl::*;
use nnaccel_uapi::program::{Location, Operand, Operation, Program};
use nnaccel_uapi::ring::RingView;
use nnaccel_uapi::sys::{self, Mapping};
use nnaccel_uapi::{Device, DeviceExt};
use zerocopy::{FromBytes, IntoBytes};

use crate::{Config, InprocFile, SimDevice};

/// Cases per run (each one ioctl).
const CASES: usize = 20_000;
/// Cases between reopening the file (closing it releases everything it made).
const REOPEN_EVERY: usize = 500;

/// out = relu(a) over 4 floats: the seed program of PROGRAM_CREATE and SUBMIT.
fn relu_program() -> Vec<u8> {
    let tensor = |location| Operand {
        operand_type: 3, // TENSOR_FLOAT32
        dims: vec![4],
        scale: 0.0,
        zero_point: 0,
        location,
        channel_quant: None,
    };
    let program = Program {
        operands: vec![tensor(Location::Input), tensor(Location::Output)],
        operations: vec![Operation {
            operation_type: 19, // RELU
            inputs: vec![0],
            outputs: vec![1],
        }],
        inputs: vec![0],
        outputs: vec![1],
        ..Program::default()
    };
    match program.encode() {
        Ok(bytes) => bytes,
        Err(e) => panic!("the seed program does not encode: {e}"),
    }
}

/// What the fuzzer owns and what it saw the device create.
struct State {
    memfd: OwnedFd,
    /// The fuzzer's view of the ring(s) QUEUE_CREATE placed at the start of `memfd`.
    ring: RingView,
    socket: (OwnedFd, OwnedFd),
    program: Vec<u8>,
    bos: Vec<u32>,
    programs: Vec<u32>,
    queues: Vec<u32>,
    seqs: Vec<u64>,
}

impl State {
    fn own_fds(&self) -> [i32; 3] {
        [
            self.memfd.as_raw_fd(),
            self.socket.0.as_raw_fd(),
            self.socket.1.as_raw_fd(),
        ]
    }

    fn fd(&self, rng: &mut Rng) -> i32 {
        match rng.below(5) {
            0 => -1 - rng.below(4) as i32,
            1 => (1 << 30) | (rng.u32() as i32 & 0xffff),
            _ => *rng.pick(&self.own_fds()),
        }
    }

    /// Keeps an fd field to our own fds or to numbers nobody has open.
    fn tame_fd(&self, fd: i32) -> i32 {
        if !(0..1 << 30).contains(&fd) || self.own_fds().contains(&fd) {
            fd
        } else {
            (1 << 30) | (fd & 0xffff)
        }
    }

    fn handle(&self, rng: &mut Rng, live: &[u32]) -> u32 {
        if !live.is_empty() && rng.chance(3, 4) {
            *rng.pick(live)
        } else {
            rng.edgy_u32()
        }
    }

    fn binding(&self, rng: &mut Rng) -> Binding {
        Binding {
            bo: self.handle(rng, &self.bos),
            flags: 0,
            offset: *rng.pick(&[0, 16, 32, 4096]),
            length: *rng.pick(&[16, 32, 4096]),
        }
    }

    /// A well-formed argument for `cmd` from the live objects (before any mutation).
    fn valid(&self, rng: &mut Rng, cmd: u32) -> Vec<u8> {
        match cmd {
            NNACCEL_IOCTL_GET_PARAM => GetParam {
                param: rng.below(PARAM_COUNT as usize + 2) as u32,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_BO_CREATE => BoCreate {
                size: *rng.pick(&[1, 64, 4096, 1 << 20]),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_BO_IMPORT => BoImport {
                fd: self.fd(rng),
                access: 1 + rng.below(3) as u32,
                offset: 4096 * rng.below(2) as u64,
                size: *rng.pick(&[64, 4096, 8192]),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_BO_EXPORT => BoExport {
                handle: self.handle(rng, &self.bos),
                socket_fd: self.fd(rng),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_BO_INFO => BoInfo {
                handle: self.handle(rng, &self.bos),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_BO_CLOSE => BoClose {
                handle: self.handle(rng, &self.bos),
                pad: 0,
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_PROGRAM_CREATE => ProgramCreate {
                data_ptr: self.program.as_ptr() as u64,
                data_len: self.program.len() as u64,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_PROGRAM_DESTROY => ProgramDestroy {
                handle: self.handle(rng, &self.programs),
                pad: 0,
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_QUEUE_CREATE => {
                let entries = 1u32 << rng.below(4);
                QueueCreate {
                    memfd: self.fd(rng),
                    flags: rng.below(2) as u32,
                    offset: 0,
                    size: ring_size(entries).map_or(0, |s| s as u64),
                    entries,
                    ..Default::default()
                }
                .as_bytes()
                .to_vec()
            }
            NNACCEL_IOCTL_QUEUE_DESTROY => QueueDestroy {
                queue_id: self.handle(rng, &self.queues),
                pad: 0,
            }
            .as_bytes()
            .to_vec(),
            NNACCEL_IOCTL_SUBMIT => {
                let mut job = Job {
                    program: self.handle(rng, &self.programs),
                    num_bindings: 2,
                    user_data: rng.u64(),
                    ..Default::default()
                };
                for b in job.bindings.iter_mut().take(2) {
                    *b = self.binding(rng);
                }
                Submit {
                    job,
                    ..Default::default()
                }
                .as_bytes()
                .to_vec()
            }
            NNACCEL_IOCTL_JOB_CANCEL => JobCancel {
                queue_id: 0,
                flags: 0,
                // The latest job: the likeliest still to be running.
                seq: self.seqs.last().copied().unwrap_or_else(|| rng.edgy_u64()),
            }
            .as_bytes()
            .to_vec(),
            _ => Wait {
                queue_id: 0,
                seq: if self.seqs.is_empty() {
                    rng.edgy_u64()
                } else {
                    *rng.pick(&self.seqs)
                },
                // Jobs of this fuzzer finish in microseconds: a minute is never reached.
                deadline_ns: sys::monotonic_ns() + 60_000_000_000,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
        }
    }

    /// The bytes of one case for `cmd`: structurally random, or a valid struct mutated by
    /// bytes or by one field.
    fn argument(&self, rng: &mut Rng, cmd: u32) -> Vec<u8> {
        let size = ioc_size(cmd);
        let mut arg = match rng.below(4) {
            0 => rng.bytes(size),
            1 => self.valid(rng, cmd),
            2 => {
                let mut a = self.valid(rng, cmd);
                fuzz::mutate(rng, &mut a);
                a.resize(size, 0);
                a
            }
            _ => {
                let mut a = self.valid(rng, cmd);
                if a.len() >= 8 {
                    let at = 4 * rng.below(a.len() / 4 - 1);
                    let v = rng.edgy_u64().to_le_bytes();
                    a[at..at + 8].copy_from_slice(&v);
                }
                a
            }
        };
        // Rarely, a wrong size for the command (ENOTTY).
        if rng.chance(1, 50) {
            fuzz::mutate(rng, &mut arg);
        }
        self.tame_fds(cmd, &mut arg);
        arg
    }

    /// Applies [`State::tame_fd`] to the fd fields of `arg`.
    fn tame_fds(&self, cmd: u32, arg: &mut [u8]) {
        let at = match cmd {
            NNACCEL_IOCTL_BO_IMPORT | NNACCEL_IOCTL_QUEUE_CREATE => 0,
            NNACCEL_IOCTL_BO_EXPORT => 8,
            _ => return,
        };
        if let Some(field) = arg.get_mut(at..at + 4) {
            let fd = i32::from_le_bytes([field[0], field[1], field[2], field[3]]);
            field.copy_from_slice(&self.tame_fd(fd).to_le_bytes());
        }
    }

    /// Records what a successful answer created or removed, and checks it.
    fn observe(&mut self, cmd: u32, arg: &[u8]) {
        match cmd {
            NNACCEL_IOCTL_GET_PARAM => {
                let a = GetParam::read_from_bytes(arg).ok();
                assert!(a.is_some_and(|a| a.param < PARAM_COUNT), "{a:?}");
            }
            NNACCEL_IOCTL_BO_CREATE | NNACCEL_IOCTL_BO_IMPORT => {
                let handle = if cmd == NNACCEL_IOCTL_BO_CREATE {
                    BoCreate::read_from_bytes(arg).map_or(0, |a| a.handle)
                } else {
                    BoImport::read_from_bytes(arg).map_or(0, |a| a.handle)
                };
                assert_ne!(handle, 0, "a new BO has a non-zero handle");
                self.bos.push(handle);
            }
            NNACCEL_IOCTL_BO_INFO => {
                let a = BoInfo::read_from_bytes(arg).ok();
                assert!(
                    a.is_some_and(|a| a.size > 0
                        && (BO_KIND_DEVICE..=BO_KIND_FILE).contains(&a.kind)
                        && a.access != 0
                        && self.bos.contains(&a.handle)),
                    "{a:?}"
                );
            }
            NNACCEL_IOCTL_BO_CLOSE
            | NNACCEL_IOCTL_PROGRAM_DESTROY
            | NNACCEL_IOCTL_QUEUE_DESTROY => {
                // { handle or queue id: u32, pad: u32 }: that object is gone.
                let gone = u32::from_le_bytes([arg[0], arg[1], arg[2], arg[3]]);
                let list = match cmd {
                    NNACCEL_IOCTL_BO_CLOSE => &mut self.bos,
                    NNACCEL_IOCTL_PROGRAM_DESTROY => &mut self.programs,
                    _ => &mut self.queues,
                };
                list.retain(|h| *h != gone);
            }
            NNACCEL_IOCTL_PROGRAM_CREATE => {
                let a = ProgramCreate::read_from_bytes(arg).ok();
                let handle = a.map_or(0, |a| a.handle);
                assert_ne!(handle, 0);
                self.programs.push(handle);
            }
            NNACCEL_IOCTL_QUEUE_CREATE => {
                let a = QueueCreate::read_from_bytes(arg).ok();
                let id = a.map_or(0, |a| a.queue_id);
                assert_ne!(id, 0, "queue 0 is the default queue");
                self.queues.push(id);
            }
            NNACCEL_IOCTL_SUBMIT => {
                let a = Submit::read_from_bytes(arg).ok();
                let seq = a.map_or(0, |a| a.seq);
                assert_ne!(seq, 0, "sequence numbers start at 1");
                self.seqs.push(seq);
            }
            NNACCEL_IOCTL_WAIT => {
                let a = Wait::read_from_bytes(arg).ok();
                assert!(
                    a.is_some_and(|a| a.status <= 0 && self.seqs.contains(&a.seq)),
                    "{a:?}"
                );
            }
            _ => {}
        }
    }

    /// Writes a random or mutated job into the ring, moves its tail (sanely or not) and rings
    /// the doorbell.
    fn scribble(&self, rng: &mut Rng) {
        let mut bytes = self.valid(rng, NNACCEL_IOCTL_SUBMIT);
        fuzz::mutate(rng, &mut bytes);
        bytes.resize(size_of::<Submit>(), 0);
        if let Ok(submit) = Submit::read_from_bytes(&bytes) {
            let _ = self.ring.write_job(rng.below(4) as u64, &submit.job);
        }
        let head = self.ring.sq_head().load(Ordering::Acquire);
        let tail = match rng.below(3) {
            0 => head + 1,
            1 => rng.edgy_u64(),
            _ => head.wrapping_add(rng.below(20) as u64),
        };
        self.ring.sq_tail().store(tail, Ordering::Release);
        self.ring.sq_doorbell().fetch_add(1, Ordering::SeqCst);
        let _ = sys::futex_wake(self.ring.sq_doorbell(), i32::MAX);
    }

    fn forget_objects(&mut self) {
        self.bos.clear();
        self.programs.clear();
        self.queues.clear();
        self.seqs.clear();
    }
}

fn live(dev: &InprocFile) -> [u64; 4] {
    [
        PARAM_LIVE_BOS,
        PARAM_LIVE_PROGRAMS,
        PARAM_LIVE_QUEUES,
        PARAM_DEVICE_MEMORY_USED,
    ]
    .map(|p| match dev.get_param(p) {
        Ok(v) => v,
        Err(e) => panic!("GET_PARAM {p} after fuzzing: {e}"),
    })
}

#[test]
fn random_and_mutated_ioctl_arguments_get_an_errno_or_success_and_leak_nothing() {
    let config = Config {
        max_bo_size: 16 << 20,
        max_program_size: 1 << 20,
        ..Config::default()
    };
    let sim = match SimDevice::new(config) {
        Ok(s) => s,
        Err(e) => panic!("in-process device: {e}"),
    };
    let probe = InprocFile::open(&sim);
    let before = live(&probe);
    let (Ok(memfd), Ok(socket)) = (
        sys::memfd_create(c"fuzz-ioctl", 3 * 4096),
        rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        ),
    ) else {
        panic!("memfd or socketpair");
    };
    let map = match Mapping::map_shared(memfd.as_fd(), 0, 3 * 4096, true) {
        Ok(m) => Arc::new(m),
        Err(e) => panic!("mapping the ring memfd: {e}"),
    };
    let Ok(ring) = RingView::new(map, 0, 1) else {
        panic!("a one-entry ring fits 12 KiB");
    };
    let mut state = State {
        memfd,
        ring,
        socket,
        program: relu_program(),
        bos: Vec::new(),
        programs: Vec::new(),
        queues: Vec::new(),
        seqs: Vec::new(),
    };
    let mut file = Arc::new(InprocFile::open(&sim));
    let mut n = 0usize;
    let mut answered_ok = 0usize;
    let mut ok_by_command = vec![0usize; ALL_IOCTLS.len()];
    fuzz::run("ioctl", CASES, |rng| {
        n += 1;
        if n % REOPEN_EVERY == 0 {
            file = Arc::new(InprocFile::open(&sim));
            state.forget_objects();
        }
        if !state.queues.is_empty() && rng.chance(1, 20) {
            state.scribble(rng);
            return;
        }
        let cmd = match rng.below(40) {
            0 => rng.u32(),
            // A known number with another size or direction.
            1 => rng.pick(ALL_IOCTLS).1 ^ (1 << (16 + rng.below(16))),
            _ => rng.pick(ALL_IOCTLS).1,
        };
        let mut arg = state.argument(rng, cmd);
        let sent = arg.clone();
        match file.ioctl(cmd, &mut arg) {
            Ok(()) => {
                answered_ok += 1;
                if let Some(i) = ALL_IOCTLS.iter().position(|(_, c)| *c == cmd) {
                    ok_by_command[i] += 1;
                }
                assert!(
                    ioctl_name(cmd).is_some() && sent.len() == ioc_size(cmd),
                    "{cmd:#x} with {} bytes succeeded",
                    sent.len()
                );
                state.observe(cmd, &arg);
            }
            Err(e) => {
                let errno = e.raw_os_error();
                assert!(
                    errno.is_some_and(|e| e > 0 && e < 4096 && e != libc::EIO),
                    "{cmd:#x}: {e} is not an errno of the device"
                );
                assert_eq!(arg, sent, "a failed ioctl wrote its argument");
                // A job that ended before JOB_CANCEL came (jobs here take microseconds): the
                // call got through every check.
                if cmd == NNACCEL_IOCTL_JOB_CANCEL && errno == Some(libc::EALREADY) {
                    if let Some(i) = ALL_IOCTLS.iter().position(|(_, c)| *c == cmd) {
                        ok_by_command[i] += 1;
                    }
                }
                if ioctl_name(cmd).is_none() || sent.len() != ioc_size(cmd) {
                    assert_eq!(errno, Some(libc::ENOTTY), "{cmd:#x}");
                }
            }
        }
    });
    println!("{answered_ok} of {n} ioctls succeeded; by command: {ok_by_command:?}");
    // Every command must get through validation sometimes, or its success path goes unfuzzed.
    assert!(
        n < CASES || ok_by_command.iter().all(|&k| k > 0),
        "successes by command: {ok_by_command:?}"
    );
    assert_eq!(
        file.get_param(PARAM_API_VERSION).ok(),
        Some(NNACCEL_API_VERSION)
    );
    drop(file);
    drop(state);
    assert_eq!(
        live(&probe),
        before,
        "live BOs, programs, queues and device memory return to their values"
    );
    assert_eq!(probe.get_param(PARAM_LIVE_FILES).ok(), Some(1));
}

/// Found by the ioctl target: BO_EXPORT into a socket nobody reads parked the ioctl (and, on
/// FUSE or CUSE, the device worker thread serving it) forever once the socket's buffer was
/// full; a few such clients stopped the device for everyone. The send no longer waits.
#[test]
fn bo_export_into_a_full_socket_is_eagain_not_a_hang() {
    use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};
    let sim = SimDevice::new(Config::default()).unwrap_or_else(|e| panic!("device: {e}"));
    let file = Arc::new(InprocFile::open(&sim));
    let bo = file
        .bo_create(4096)
        .unwrap_or_else(|e| panic!("BO_CREATE: {e}"));
    let (full, _unread) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap_or_else(|e| panic!("socketpair: {e}"));
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(&full, 4096);
    loop {
        match rustix::net::send(&full, &[0u8; 1024], SendFlags::DONTWAIT) {
            Ok(_) => {}
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => panic!("filling the socket: {e}"),
        }
    }
    let export = BoExport {
        handle: bo,
        socket_fd: full.as_raw_fd(),
        ..Default::default()
    };
    // A watchdog, not a timing: a regression hangs, and the test should fail rather than stall.
    let (tx, rx) = std::sync::mpsc::channel();
    let f = file.clone();
    std::thread::spawn(move || {
        let mut arg = export.as_bytes().to_vec();
        let _ = tx.send(f.ioctl(NNACCEL_IOCTL_BO_EXPORT, &mut arg));
    });
    let result = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("BO_EXPORT still blocked on a full socket after a minute"));
    assert_eq!(
        result.err().and_then(|e| e.raw_os_error()),
        Some(libc::EAGAIN)
    );
    // The device and the BO are unaffected.
    assert!(file.get_param(PARAM_API_VERSION).is_ok());
    assert!(file.bo_export(bo).is_ok());
}
