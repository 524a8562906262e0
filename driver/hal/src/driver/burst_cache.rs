//! What a burst keeps across its executions, and the burst entry point of a prepared model.

use super::*;

/// What a burst keeps across its executions (REFERENCE.md §5): per pool slot the device BO
/// (imported once, not per execution) and the CPU mapping, and its own device queue, created
/// with `QUEUE_FLAG_HIGH_PERFORMANCE` — the burst's lifetime is the device's hint to stay in
/// its high-performance state. Dropping it (the burst ends) or [`BurstCache::forget`]
/// (freeMemory) releases them.
#[derive(Debug, Default)]
pub struct BurstCache {
    pub(super) bos: HashMap<i32, (Arc<DeviceHandle>, BufferObject)>,
    pub(super) maps: HashMap<i32, MappedPool>,
    pub(super) queue: Option<(Arc<DeviceHandle>, Mutex<DeviceQueue>)>,
}

impl BurstCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops what is cached for `slot` (freeMemory).
    pub fn forget(&mut self, slot: i32) {
        if let Some((device, mut bo)) = self.bos.remove(&slot) {
            // A dead device is not called (it may hang): the BO goes with the device file.
            if !device.alive() {
                bo.disown();
            }
            drop(bo);
        }
        self.maps.remove(&slot);
    }

    /// Slots with a BO or a mapping.
    pub fn len(&self) -> usize {
        let mut slots: Vec<&i32> = self.bos.keys().chain(self.maps.keys()).collect();
        slots.sort_unstable();
        slots.dedup();
        slots.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the burst has its own high-performance device queue.
    pub fn has_device_queue(&self) -> bool {
        self.queue.is_some()
    }

    pub(super) fn bo(&self, slot: Option<&i32>) -> Option<u32> {
        slot.and_then(|s| self.bos.get(s))
            .map(|(_, bo)| bo.handle())
    }

    /// Keeps `bo` for `slot`; a BO the slot had before is closed (dropped) after the swap.
    /// Without a slot the BO is given back, for the caller to close after the execution.
    pub(super) fn keep_bo(
        &mut self,
        device: &Arc<DeviceHandle>,
        slot: Option<&i32>,
        bo: BufferObject,
    ) -> Option<BufferObject> {
        match slot {
            Some(s) => {
                drop(self.bos.insert(*s, (device.clone(), bo)));
                None
            }
            None => Some(bo),
        }
    }

    /// The burst's own queue (created on first use with `QUEUE_FLAG_HIGH_PERFORMANCE`); the
    /// model's queue if that fails.
    pub(super) fn queue<'a>(&'a mut self, plan: &'a DevicePlan) -> &'a Mutex<DeviceQueue> {
        if self.queue.is_none() {
            match RingQueue::create(
                plan.device.dev.clone(),
                QUEUE_ENTRIES,
                nnaccel_uapi::abi::QUEUE_FLAG_HIGH_PERFORMANCE,
            ) {
                Ok(ring) => {
                    let q = DeviceQueue {
                        ring,
                        abandoned: None,
                    };
                    self.queue = Some((plan.device.clone(), Mutex::new(q)));
                }
                Err(e) => {
                    tracing::debug!("burst queue: {e}; using the model's queue");
                    return &plan.queue;
                }
            }
        }
        match &self.queue {
            Some((_, q)) => q,
            None => &plan.queue,
        }
    }

    /// Maps the slots not mapped yet, but for pools `skip` names (memory-domain buffers,
    /// which have their own mapping and may be reallocated between executions).
    pub(super) fn map_slots(
        &mut self,
        pools: &[MemoryPool],
        slots: &[i32],
        skip: impl Fn(usize) -> bool,
    ) -> Result<(), ErrorStatus> {
        if pools.len() != slots.len() {
            return Err(ErrorStatus::GeneralFailure);
        }
        for (i, (pool, slot)) in pools.iter().zip(slots).enumerate() {
            if skip(i) || self.maps.contains_key(slot) {
                continue;
            }
            let MemoryPool::Memory(mem) = pool else {
                return Err(ErrorStatus::InvalidArgument);
            };
            self.maps.insert(*slot, MappedPool::map(mem)?);
        }
        Ok(())
    }

    pub(super) fn mapped(&self, slot: Option<&i32>) -> Option<&MappedPool> {
        slot.and_then(|s| self.maps.get(s))
    }
}

impl Drop for BurstCache {
    fn drop(&mut self) {
        let slots: Vec<i32> = self.bos.keys().copied().collect();
        for s in slots {
            self.forget(s);
        }
    }
}

impl PreparedModel {
    /// The execution preference it was prepared with (bursts derive their polling from it).
    pub fn preference(&self) -> ExecutionPreference {
        self.inner.preference
    }

    /// An execution of a burst: like [`PreparedModel::execute_for`] (same validation, same
    /// paths), with the pools' BOs and mappings taken from (and added to) `cache`, `slots[i]`
    /// naming request pool `i`, on the burst's own device queue. `owner` is the burst's
    /// client: tokens in the request must be its own.
    pub fn execute_in_burst(
        &self,
        owner: OwnerId,
        request: &Request,
        measure: MeasureTiming,
        cache: &mut BurstCache,
        slots: &[i32],
    ) -> ExecutionResult {
        self.execute_with(owner, request, measure, None, Some((cache, slots)))
    }
}

/// A burst's cache and the slot of each request pool.
pub(super) type BurstSlots<'c, 's> = (&'c mut BurstCache, &'s [i32]);

/// Lends the burst's cache again (for an execution that may run twice).
pub(super) fn reborrow<'a>(
    burst: &'a mut Option<BurstSlots<'_, '_>>,
) -> Option<BurstSlots<'a, 'a>> {
    burst.as_mut().map(|(c, slots)| (&mut **c, *slots))
}
