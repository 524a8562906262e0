//! The one ioctl dispatch function every frontend (FUSE, CUSE, in-process) calls.
//!
//! Arguments arrive as the exact bytes of the command's struct (`_IOC_SIZE`), are parsed with
//! `zerocopy` (no trust, no alignment assumptions), checked field by field, and the updated
//! struct goes back as the reply for commands that return data. WAIT may answer later: every
//! command replies through a [`Reply`] the frontend supplies.
//!
//! The top of the device model: it imports the device, its objects and the engine, and none of
//! them imports it.

use std::os::fd::AsFd;
use std::sync::Arc;

use nnaccel_uapi::abi::*;
use nnaccel_uapi::ioctl::*;
use nnaccel_uapi::ring::RingView;
use nnaccel_uapi::sys::{self, Mapping};
use rustix::io::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::bo::Bo;
use crate::caller::Caller;
use crate::device::{FileCtx, SimDevice};
use crate::engine::Queue;
use crate::program::LoadedProgram;
use crate::reply::Reply;

fn parse<T: FromBytes + KnownLayout + Immutable>(arg: &[u8]) -> Result<T, Errno> {
    T::read_from_bytes(arg).map_err(|_| Errno::INVAL)
}

fn out<T: IntoBytes + Immutable>(v: &T) -> Result<Vec<u8>, Errno> {
    Ok(v.as_bytes().to_vec())
}

fn zero(cond: bool) -> Result<(), Errno> {
    if cond { Ok(()) } else { Err(Errno::INVAL) }
}

impl SimDevice {
    /// Handles one ioctl on open file `file` for `caller`.
    pub fn ioctl(&self, file: u64, caller: &Caller, cmd: u32, arg: &[u8], reply: Box<dyn Reply>) {
        let Some(ctx) = self.file(file) else {
            return reply.send(Err(Errno::BADF));
        };
        let name = ioctl_name(cmd);
        if name.is_none() || arg.len() != ioc_size(cmd) {
            return reply.send(Err(Errno::NOTTY));
        }
        if let Some(e) = self.core().ioctl_fault() {
            tracing::warn!("fault injection: failing ioctl {name:?} with {e}");
            return reply.send(Err(e));
        }
        if cmd == NNACCEL_IOCTL_WAIT {
            return match parse::<Wait>(arg).and_then(|w| {
                zero(w.flags == 0 && w.pad == 0)?;
                Ok((ctx.queue(w.queue_id)?, w))
            }) {
                Ok((q, w)) => q.wait(w, reply),
                Err(e) => reply.send(Err(e)),
            };
        }
        let result = self.dispatch_sync(&ctx, caller, cmd, arg);
        if let Err(e) = &result {
            tracing::debug!(
                "ioctl {} from pid {} -> {e}",
                name.unwrap_or("?"),
                caller.pid()
            );
        }
        reply.send(result);
    }

    fn dispatch_sync(
        &self,
        ctx: &Arc<FileCtx>,
        caller: &Caller,
        cmd: u32,
        arg: &[u8],
    ) -> Result<Vec<u8>, Errno> {
        let cfg = &self.core().config;
        let stats = &self.core().stats;
        match cmd {
            NNACCEL_IOCTL_GET_PARAM => {
                let mut a: GetParam = parse(arg)?;
                zero(a.pad == 0)?;
                a.value = self.param(a.param).ok_or(Errno::INVAL)?;
                out(&a)
            }
            NNACCEL_IOCTL_BO_CREATE => {
                let mut a: BoCreate = parse(arg)?;
                zero(a.flags & !BO_CREATE_FLAGS_MASK == 0 && a.flags == 0 && a.size != 0)?;
                if a.size > cfg.max_bo_size {
                    return Err(Errno::TOOBIG);
                }
                ctx.bo_room()?;
                a.handle = ctx.add_bo(Bo::create(stats, a.size, cfg.device_memory)?)?;
                out(&a)
            }
            NNACCEL_IOCTL_BO_IMPORT => {
                let mut a: BoImport = parse(arg)?;
                zero(
                    a.pad == 0 && a.access != 0 && a.access & !BO_ACCESS_MASK == 0 && a.size != 0,
                )?;
                if a.size > cfg.max_bo_size {
                    return Err(Errno::TOOBIG);
                }
                let fd = caller.take_fd(a.fd)?;
                zero(a.offset % BO_IMPORT_ALIGN == 0)?;
                ctx.bo_room()?;
                a.handle = ctx.add_bo(Bo::import(stats, fd, a.offset, a.size, a.access)?)?;
                out(&a)
            }
            NNACCEL_IOCTL_BO_EXPORT => {
                let a: BoExport = parse(arg)?;
                zero(a.flags == 0 && a.pad == 0)?;
                let bo = ctx.bo(a.handle)?;
                let sock = caller.take_fd(a.socket_fd)?;
                match rustix::net::sockopt::socket_type(&sock) {
                    Ok(_) => {}
                    Err(Errno::NOTSOCK) => return Err(Errno::NOTSOCK),
                    Err(e) => return Err(e),
                }
                sys::send_fd(sock.as_fd(), bo.fd().as_fd())
                    .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
                out(&a)
            }
            NNACCEL_IOCTL_BO_INFO => {
                let mut a: BoInfo = parse(arg)?;
                zero(a.pad == 0 && a.reserved == 0)?;
                let bo = ctx.bo(a.handle)?;
                a.kind = bo.kind;
                a.size = bo.size;
                a.access = bo.access;
                out(&a)
            }
            NNACCEL_IOCTL_BO_CLOSE => {
                let a: BoClose = parse(arg)?;
                zero(a.pad == 0)?;
                ctx.close_bo(a.handle)?;
                Ok(Vec::new())
            }
            NNACCEL_IOCTL_PROGRAM_CREATE => {
                let mut a: ProgramCreate = parse(arg)?;
                zero(a.flags == 0 && a.data_len != 0)?;
                if a.data_len > cfg.max_program_size {
                    return Err(Errno::TOOBIG);
                }
                let len = usize::try_from(a.data_len).map_err(|_| Errno::TOOBIG)?;
                let bytes = caller.read(a.data_ptr, len)?;
                let program =
                    LoadedProgram::load_without(stats, &bytes, &cfg.without_ops, |h| ctx.bo(h))?;
                a.handle = ctx.add_program(program)?;
                out(&a)
            }
            NNACCEL_IOCTL_PROGRAM_DESTROY => {
                let a: ProgramDestroy = parse(arg)?;
                zero(a.pad == 0)?;
                ctx.destroy_program(a.handle)?;
                Ok(Vec::new())
            }
            NNACCEL_IOCTL_QUEUE_CREATE => {
                let mut a: QueueCreate = parse(arg)?;
                zero(a.flags & !QUEUE_FLAGS_MASK == 0 && a.reserved == 0)?;
                let memfd = caller.take_fd(a.memfd)?;
                // Futex words must live in shmem: a dma-buf (VM_PFNMAP) or a regular file on
                // disk cannot back them.
                zero(sys::is_shmem(memfd.as_fd()))?;
                // Sealed against shrinking so the engine never faults on vanished pages.
                let seals = sys::seals(memfd.as_fd());
                zero(
                    seals.contains(rustix::fs::SealFlags::SHRINK)
                        || rustix::fs::fcntl_add_seals(&memfd, rustix::fs::SealFlags::SHRINK)
                            .is_ok(),
                )?;
                zero(
                    a.entries != 0
                        && a.entries.is_power_of_two()
                        && a.entries <= cfg.max_queue_depth,
                )?;
                let need = ring_size(a.entries).ok_or(Errno::INVAL)? as u64;
                zero(a.size >= need && a.offset % BO_IMPORT_ALIGN == 0)?;
                let file_size = sys::file_size(memfd.as_fd()).map_err(|_| Errno::INVAL)?;
                zero(
                    a.offset
                        .checked_add(a.size)
                        .is_some_and(|end| end <= file_size),
                )?;
                let map = Mapping::map_shared(memfd.as_fd(), a.offset, need as usize, true)
                    .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::INVAL))?;
                let view = RingView::new(Arc::new(map), 0, a.entries).map_err(|_| Errno::INVAL)?;
                view.init().map_err(|_| Errno::FAULT)?;
                a.queue_id = ctx.add_queue(|id| Queue::new_ring(ctx, id, view, memfd, a.flags))?;
                out(&a)
            }
            NNACCEL_IOCTL_QUEUE_DESTROY => {
                let a: QueueDestroy = parse(arg)?;
                zero(a.pad == 0)?;
                ctx.destroy_queue(a.queue_id)?;
                Ok(Vec::new())
            }
            NNACCEL_IOCTL_JOB_CANCEL => {
                let a: JobCancel = parse(arg)?;
                zero(a.flags == 0)?;
                ctx.queue(a.queue_id)?.cancel(a.seq)?;
                Ok(Vec::new())
            }
            NNACCEL_IOCTL_SUBMIT => {
                let mut a: Submit = parse(arg)?;
                zero(a.flags == 0 && a.pad == 0)?;
                let job = ctx.resolve_job(&a.job)?;
                a.seq = ctx.queue(0)?.push(job)?;
                out(&a)
            }
            _ => Err(Errno::NOTTY),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};
    use std::time::{Duration, Instant};

    use nnaccel_uapi::DeviceExt;
    use nnaccel_uapi::program::Location;

    use super::*;
    use crate::test_support::{add_program, client_memory, client_read, client_write, f32_bytes};
    use crate::{Config, Faults, InprocFile};

    /// An in-process device whose every job takes `delay_ms` longer (fault injection).
    fn device(delay_ms: u64) -> InprocFile {
        let config = Config {
            faults: Faults {
                delay_job_ms: delay_ms,
                ..Faults::default()
            },
            ..Config::default()
        };
        InprocFile::open(&SimDevice::new(config).unwrap())
    }

    /// `out = a + b` over 4 floats on `f`: the job and the memory of a, b and out (out filled
    /// with 0xab).
    fn add_job(f: &InprocFile) -> (Job, [OwnedFd; 3]) {
        let program = f
            .program_create(&add_program(Location::Input, Location::Input, vec![]))
            .unwrap();
        let mem = [(); 3].map(|()| client_memory(4096, true));
        client_write(&mem[0], 0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
        client_write(&mem[1], 0, &f32_bytes(&[10.0; 4]));
        client_write(&mem[2], 0, &[0xab; 16]);
        let mut job = Job {
            program,
            num_bindings: 3,
            ..Job::default()
        };
        for (b, m) in job.bindings.iter_mut().zip(&mem) {
            let bo = f.bo_import(m.as_fd(), 0, 4096, BO_ACCESS_MASK).unwrap();
            *b = Binding {
                bo,
                flags: 0,
                offset: 0,
                length: 16,
            };
        }
        (job, mem)
    }

    fn wait(f: &InprocFile, seq: u64) -> Wait {
        f.wait(0, seq, sys::deadline_after(Duration::from_secs(10)))
            .unwrap()
    }

    #[test]
    fn a_cancelled_running_job_ends_at_once_with_ecanceled_and_never_writes_its_output() {
        let f = device(5_000);
        let (job, mem) = add_job(&f);
        let seq = f.submit(&job).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        assert!(f.job_cancel(0, seq).unwrap(), "the job was running");
        assert_eq!(wait(&f, seq).status, -libc::ECANCELED);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the delay was cut short"
        );
        assert_eq!(client_read(&mem[2], 0, 16), [0xab; 16]);
        assert!(!f.job_cancel(0, seq).unwrap(), "ended: EALREADY");
    }

    #[test]
    fn a_cancelled_queued_job_never_runs_and_the_queue_goes_on() {
        let f = device(300);
        let (job, mem) = add_job(&f);
        let first = f.submit(&job).unwrap();
        let second = f.submit(&job).unwrap();
        assert!(f.job_cancel(0, second).unwrap());
        assert_eq!(wait(&f, first).status, 0);
        assert_eq!(wait(&f, second).status, -libc::ECANCELED);
        client_write(&mem[2], 0, &[0xab; 16]);
        let third = f.submit(&job).unwrap();
        assert_eq!(wait(&f, third).status, 0);
        assert_eq!(
            client_read(&mem[2], 0, 16),
            f32_bytes(&[11.0, 12.0, 13.0, 14.0])
        );
    }

    #[test]
    fn a_job_past_its_timeout_ends_with_etimedout_writes_nothing_and_the_next_job_runs() {
        let f = device(1_000);
        let (job, mem) = add_job(&f);
        let slow = Job {
            timeout_ns: sys::deadline_after(Duration::from_millis(100)),
            ..job
        };
        let start = Instant::now();
        let seq = f.submit(&slow).unwrap();
        assert_eq!(wait(&f, seq).status, -libc::ETIMEDOUT);
        assert!(
            start.elapsed() < Duration::from_millis(900),
            "ended at its timeout"
        );
        assert_eq!(client_read(&mem[2], 0, 16), [0xab; 16]);
        let next = f.submit(&job).unwrap();
        assert_eq!(wait(&f, next).status, 0);
        assert_eq!(
            client_read(&mem[2], 0, 16),
            f32_bytes(&[11.0, 12.0, 13.0, 14.0])
        );
    }

    #[test]
    fn cancel_of_an_ended_job_is_ealready_and_of_a_never_submitted_one_einval() {
        let f = device(0);
        let (job, mem) = add_job(&f);
        let seq = f.submit(&job).unwrap();
        assert_eq!(wait(&f, seq).status, 0);
        assert!(!f.job_cancel(0, seq).unwrap());
        assert_eq!(
            client_read(&mem[2], 0, 16),
            f32_bytes(&[11.0, 12.0, 13.0, 14.0])
        );
        let errno = |r: std::io::Result<bool>| r.unwrap_err().raw_os_error();
        assert_eq!(errno(f.job_cancel(0, 0)), Some(libc::EINVAL));
        assert_eq!(errno(f.job_cancel(0, seq + 1)), Some(libc::EINVAL));
        assert_eq!(errno(f.job_cancel(7, seq)), Some(libc::ENOENT));
        let mut a = JobCancel {
            queue_id: 0,
            flags: 1,
            seq,
        };
        let r = f.call(NNACCEL_IOCTL_JOB_CANCEL, &mut a);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINVAL));
    }
}
