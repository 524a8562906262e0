//! The device model: the device, its open files and their handle tables.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nnaccel_uapi::abi::*;
use rustix::io::Errno;

use crate::bo::Bo;
use crate::config::{Config, WaitMode};
use crate::engine::{self, Queue, QueueOwner, ResolvedJob};
use crate::program::LoadedProgram;
use crate::shared::DeviceCore;

/// The simulated device.
#[derive(Debug)]
pub struct SimDevice {
    core: Arc<DeviceCore>,
    files: Mutex<HashMap<u64, Arc<FileCtx>>>,
    next_file: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SimDevice {
    /// Creates a device. Fails if `WaitMode::IoUring` is asked for and the kernel lacks
    /// io_uring `FUTEX_WAIT`.
    pub fn new(config: Config) -> std::io::Result<Arc<Self>> {
        let wait_mode = engine::resolve_wait_mode(config.wait_mode)?;
        let core = Arc::new(DeviceCore::new(config, wait_mode)?);
        Ok(Arc::new(Self {
            core,
            files: Mutex::default(),
            next_file: AtomicU64::new(1),
        }))
    }

    /// The shared core.
    pub fn core(&self) -> &Arc<DeviceCore> {
        &self.core
    }

    /// `open()`: a new file context. Returns its id.
    pub fn open(&self) -> u64 {
        let id = self.next_file.fetch_add(1, Ordering::Relaxed);
        let file = Arc::new(FileCtx {
            id,
            core: self.core.clone(),
            tables: Mutex::default(),
        });
        lock(&self.files).insert(id, file);
        self.core.stats.live_files.fetch_add(1, Ordering::SeqCst);
        id
    }

    /// The file context of an open file.
    pub fn file(&self, id: u64) -> Option<Arc<FileCtx>> {
        lock(&self.files).get(&id).cloned()
    }

    /// `release()`: the last reference to the file went away (closed, or its process died).
    /// Stops its queues and drops every object it owned.
    pub fn release(&self, id: u64) {
        let Some(file) = lock(&self.files).remove(&id) else {
            return;
        };
        let tables = std::mem::take(&mut *lock(&file.tables));
        for q in tables.queues.values().chain(tables.default_queue.iter()) {
            q.shutdown();
        }
        drop(tables);
        self.core.stats.live_files.fetch_sub(1, Ordering::SeqCst);
    }

    /// Releases every open file (device shutdown).
    pub fn release_all(&self) {
        let ids: Vec<u64> = lock(&self.files).keys().copied().collect();
        for id in ids {
            self.release(id);
        }
    }

    /// GET_PARAM values.
    pub fn param(&self, param: u32) -> Option<u64> {
        let c = &self.core.config;
        let s = &self.core.stats;
        let caps = CAP_BO_CREATE
            | CAP_BO_IMPORT
            | CAP_BO_IMPORT_DMABUF
            | CAP_BO_EXPORT
            | CAP_QUEUE_RING
            | CAP_JOB_CANCEL
            | if crate::config::FAULT_INJECTION {
                CAP_FAULT_INJECTION
            } else {
                0
            };
        Some(match param {
            PARAM_API_VERSION => NNACCEL_API_VERSION,
            PARAM_CAPABILITIES => caps,
            PARAM_MAX_BOS => u64::from(c.max_bos),
            PARAM_MAX_BO_SIZE => c.max_bo_size,
            PARAM_DEVICE_MEMORY_SIZE => c.device_memory,
            PARAM_DEVICE_MEMORY_USED => s.memory_used.load(Ordering::SeqCst),
            PARAM_MAX_PROGRAM_SIZE => c.max_program_size,
            PARAM_MAX_QUEUE_DEPTH => u64::from(c.max_queue_depth),
            PARAM_MAX_BINDINGS => MAX_BINDINGS as u64,
            PARAM_LIVE_FILES => s.live_files.load(Ordering::SeqCst),
            PARAM_LIVE_BOS => s.live_bos.load(Ordering::SeqCst),
            PARAM_LIVE_PROGRAMS => s.live_programs.load(Ordering::SeqCst),
            PARAM_LIVE_QUEUES => s.live_queues.load(Ordering::SeqCst),
            PARAM_JOBS_COMPLETED => s.jobs_completed.load(Ordering::SeqCst),
            PARAM_ENGINE_WAIT_MODE => match self.core.wait_mode {
                WaitMode::IoUring => WAIT_MODE_IO_URING,
                _ => WAIT_MODE_FUTEX,
            },
            PARAM_MAX_PROGRAMS => u64::from(c.max_programs),
            PARAM_MAX_QUEUES => u64::from(c.max_queues),
            _ => return None,
        })
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// Per-file handle namespace. Handles are never 0 and are not reused while live.
#[derive(Debug)]
struct HandleTable<T> {
    items: HashMap<u32, T>,
    next: u32,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self {
            items: HashMap::new(),
            next: 1,
        }
    }
}

impl<T> HandleTable<T> {
    fn insert(&mut self, item: T) -> u32 {
        loop {
            let h = self.next;
            self.next = self.next.checked_add(1).unwrap_or(1);
            if h != 0 && !self.items.contains_key(&h) {
                self.items.insert(h, item);
                return h;
            }
        }
    }
}

/// What one open file owns.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    bos: HandleTable<Arc<Bo>>,
    programs: HandleTable<Arc<LoadedProgram>>,
    queues: HashMap<u32, Arc<Queue>>,
    next_queue: u32,
    default_queue: Option<Arc<Queue>>,
}

/// One open file of the device.
#[derive(Debug)]
pub struct FileCtx {
    /// File id (the FUSE file handle).
    pub id: u64,
    /// The device.
    pub core: Arc<DeviceCore>,
    tables: Mutex<Tables>,
}

impl QueueOwner for FileCtx {
    fn file_id(&self) -> u64 {
        self.id
    }

    fn core(&self) -> &Arc<DeviceCore> {
        &self.core
    }

    fn resolve_job(&self, job: &Job) -> Result<ResolvedJob, Errno> {
        FileCtx::resolve_job(self, job)
    }
}

impl FileCtx {
    fn tables(&self) -> MutexGuard<'_, Tables> {
        lock(&self.tables)
    }

    /// Adds a BO; `ENOSPC` at the per-file limit.
    pub fn add_bo(&self, bo: Bo) -> Result<u32, Errno> {
        let mut t = self.tables();
        if t.bos.items.len() >= self.core.config.max_bos as usize {
            return Err(Errno::NOSPC);
        }
        Ok(t.bos.insert(Arc::new(bo)))
    }

    /// Whether the file may add another BO (checked before expensive work).
    pub fn bo_room(&self) -> Result<(), Errno> {
        if self.tables().bos.items.len() >= self.core.config.max_bos as usize {
            Err(Errno::NOSPC)
        } else {
            Ok(())
        }
    }

    /// Looks a BO up.
    pub fn bo(&self, handle: u32) -> Result<Arc<Bo>, Errno> {
        self.tables()
            .bos
            .items
            .get(&handle)
            .cloned()
            .ok_or(Errno::NOENT)
    }

    /// Drops a BO handle.
    pub fn close_bo(&self, handle: u32) -> Result<(), Errno> {
        let bo = self
            .tables()
            .bos
            .items
            .remove(&handle)
            .ok_or(Errno::NOENT)?;
        drop(bo);
        Ok(())
    }

    /// Adds a program; `ENOSPC` at the per-file limit.
    pub fn add_program(&self, p: LoadedProgram) -> Result<u32, Errno> {
        let mut t = self.tables();
        if t.programs.items.len() >= self.core.config.max_programs as usize {
            return Err(Errno::NOSPC);
        }
        Ok(t.programs.insert(Arc::new(p)))
    }

    /// Drops a program handle.
    pub fn destroy_program(&self, handle: u32) -> Result<(), Errno> {
        let p = self
            .tables()
            .programs
            .items
            .remove(&handle)
            .ok_or(Errno::NOENT)?;
        drop(p);
        Ok(())
    }

    /// Registers a queue built by `make(id)`; `ENOSPC` at the per-file limit.
    pub fn add_queue(
        &self,
        make: impl FnOnce(u32) -> Result<Arc<Queue>, Errno>,
    ) -> Result<u32, Errno> {
        let mut t = self.tables();
        if t.queues.len() >= self.core.config.max_queues as usize {
            return Err(Errno::NOSPC);
        }
        let id = loop {
            t.next_queue = t.next_queue.checked_add(1).unwrap_or(1);
            if t.next_queue != 0 && !t.queues.contains_key(&t.next_queue) {
                break t.next_queue;
            }
        };
        let q = make(id)?;
        t.queues.insert(id, q);
        Ok(id)
    }

    /// Unregisters and stops a queue.
    pub fn destroy_queue(&self, id: u32) -> Result<(), Errno> {
        let q = self.tables().queues.remove(&id).ok_or(Errno::NOENT)?;
        q.shutdown();
        Ok(())
    }

    /// A queue by id (0 = the default queue, created on first use).
    pub fn queue(self: &Arc<Self>, id: u32) -> Result<Arc<Queue>, Errno> {
        let mut t = self.tables();
        if id != 0 {
            return t.queues.get(&id).cloned().ok_or(Errno::NOENT);
        }
        if let Some(q) = &t.default_queue {
            return Ok(q.clone());
        }
        let q = Queue::new_default(self)?;
        t.default_queue = Some(q.clone());
        Ok(q)
    }

    /// Resolves and checks a job against this file's handles (SUBMIT and ring jobs alike).
    pub fn resolve_job(&self, job: &Job) -> Result<ResolvedJob, Errno> {
        if job.flags & !JOB_FLAGS_MASK != 0 || job.pad != 0 {
            return Err(Errno::INVAL);
        }
        let n = job.num_bindings as usize;
        if n > MAX_BINDINGS {
            return Err(Errno::INVAL);
        }
        if job.bindings[n..].iter().any(|b| *b != Binding::default()) {
            return Err(Errno::INVAL);
        }
        if job.bindings[..n].iter().any(|b| b.flags != 0) {
            return Err(Errno::INVAL);
        }
        let t = self.tables();
        let program = t
            .programs
            .items
            .get(&job.program)
            .cloned()
            .ok_or(Errno::NOENT)?;
        if n != program.num_args() {
            return Err(Errno::INVAL);
        }
        let mut bindings = Vec::with_capacity(n);
        for b in &job.bindings[..n] {
            bindings.push((
                t.bos.items.get(&b.bo).cloned().ok_or(Errno::NOENT)?,
                b.offset,
                b.length,
            ));
        }
        drop(t);
        let specs = program
            .inputs
            .iter()
            .map(|s| (s, BO_ACCESS_READ))
            .chain(program.outputs.iter().map(|s| (s, BO_ACCESS_WRITE)));
        for ((bo, offset, length), (spec, need)) in bindings.iter().zip(specs) {
            if offset.checked_add(*length).is_none_or(|end| end > bo.size) {
                return Err(Errno::INVAL);
            }
            if *length < spec.bytes || offset % spec.align != 0 {
                return Err(Errno::INVAL);
            }
            if bo.access & need == 0 {
                return Err(Errno::ACCESS);
            }
        }
        // An output must not overlap any other binding: what the job leaves there would depend
        // on the order in which the engine copies inputs out and outputs back.
        let n_in = program.inputs.len();
        for (i, (bo, off, len)) in bindings.iter().enumerate().skip(n_in) {
            for (j, (other, ooff, olen)) in bindings.iter().enumerate() {
                if i != j && Arc::ptr_eq(bo, other) && *off < ooff + olen && *ooff < off + len {
                    return Err(Errno::INVAL);
                }
            }
        }
        Ok(ResolvedJob {
            user_data: job.user_data,
            timeout_ns: job.timeout_ns,
            program,
            bindings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_start_at_one_and_skip_zero_on_wrap() {
        let mut t = HandleTable::<u8>::default();
        assert_eq!(t.insert(0), 1);
        t.next = u32::MAX;
        assert_eq!(t.insert(0), u32::MAX);
        assert_eq!(t.insert(0), 2, "0 is skipped and 1 is still live");
    }
}
