//! One interface for every way of reaching the HAL: the driver in this process (over a device
//! node, the in-process device, or the CPU only) and the `nnaccel-hald` service.

use std::fmt::Debug;
use std::sync::Arc;

use super::domain::{BufferDesc, BufferRole, DeviceBuffer, LOCAL_OWNER};
use super::driver::{Driver, Placement, PreparedModel};
use super::types::*;
use crate::cache::CacheFiles;

/// The NN HAL `IDevice`.
pub trait HalDevice: Send + Sync + Debug {
    /// One line saying what executes models.
    fn description(&self) -> String;
    /// `getCapabilities`.
    fn get_capabilities(&self) -> Result<Capabilities, ErrorStatus>;
    /// `getSupportedOperations`.
    fn get_supported_operations(&self, model: &Model) -> Result<Vec<bool>, ErrorStatus>;
    /// Where each operation runs.
    fn operation_placement(&self, model: &Model) -> Result<Vec<Placement>, ErrorStatus>;
    /// `prepareModel`.
    fn prepare_model(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus>;
    /// `getNumberOfCacheFilesNeeded`: (model cache files, data cache files).
    fn get_number_of_cache_files_needed(&self) -> Result<(u32, u32), ErrorStatus>;
    /// `prepareModel` with cache handles and a token (`docs/caching.md`).
    fn prepare_model_with_cache(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus>;
    /// `prepareModelFromCache`.
    fn prepare_model_from_cache(
        &self,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus>;
    /// `allocate` (1.3): a memory-domain buffer for roles of `models` (prepared by this
    /// device), and its token. Dropping the buffer frees it.
    fn allocate(
        &self,
        desc: &BufferDesc,
        models: &[Arc<dyn HalPreparedModel>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<Arc<dyn HalBuffer>, ErrorStatus>;
}

/// The NN HAL `IBuffer`: a memory-domain buffer, named in requests by its token.
pub trait HalBuffer: Send + Sync + Debug {
    /// The token (> 0).
    fn token(&self) -> u32;
    /// `copyTo`: the buffer's contents into `dst`.
    fn copy_to(&self, dst: &Memory) -> Result<(), ErrorStatus>;
    /// `copyFrom`: `src` into the buffer, with `dimensions` (empty: the buffer's own).
    fn copy_from(&self, src: &Memory, dimensions: &[u32]) -> Result<(), ErrorStatus>;
}

/// The NN HAL `IPreparedModel`.
pub trait HalPreparedModel: Send + Sync + Debug {
    /// `executeSynchronously`.
    fn execute_synchronously(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
    ) -> ExecutionResult;
    /// Whether executions run on the device.
    fn runs_on_device(&self) -> bool;
    /// The concrete type, for `allocate` to recognise its own prepared models.
    fn as_any(&self) -> &dyn std::any::Any;
    /// configureExecutionBurst (`docs/burst.md`).
    fn configure_execution_burst(
        &self,
        config: crate::burst::BurstConfig,
    ) -> Result<crate::burst::ExecutionBurstController, ErrorStatus>;
}

/// `execute`: the asynchronous form, for every prepared model.
pub fn execute_async(
    model: Arc<dyn HalPreparedModel>,
    request: Request,
    measure: MeasureTiming,
    deadline: Option<Deadline>,
) -> super::driver::ExecutionHandle {
    super::driver::ExecutionHandle::spawn(move || {
        model.execute_synchronously(&request, measure, deadline)
    })
}

impl HalDevice for Driver {
    fn description(&self) -> String {
        Driver::description(self)
    }
    fn get_capabilities(&self) -> Result<Capabilities, ErrorStatus> {
        Ok(Driver::get_capabilities(self))
    }
    fn get_supported_operations(&self, model: &Model) -> Result<Vec<bool>, ErrorStatus> {
        Driver::get_supported_operations(self, model)
    }
    fn operation_placement(&self, model: &Model) -> Result<Vec<Placement>, ErrorStatus> {
        Driver::operation_placement(self, model)
    }
    fn prepare_model(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        Ok(Arc::new(Driver::prepare_model(
            self, model, preference, priority, deadline,
        )?))
    }
    fn get_number_of_cache_files_needed(&self) -> Result<(u32, u32), ErrorStatus> {
        Ok(Driver::get_number_of_cache_files_needed(self))
    }
    fn prepare_model_with_cache(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        Ok(Arc::new(Driver::prepare_model_with_cache(
            self, model, preference, priority, deadline, cache,
        )?))
    }
    fn prepare_model_from_cache(
        &self,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        cache: CacheFiles<'_>,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        Ok(Arc::new(Driver::prepare_model_from_cache(
            self, preference, priority, deadline, cache,
        )?))
    }
    fn allocate(
        &self,
        desc: &BufferDesc,
        models: &[Arc<dyn HalPreparedModel>],
        input_roles: &[BufferRole],
        output_roles: &[BufferRole],
    ) -> Result<Arc<dyn HalBuffer>, ErrorStatus> {
        let mut ours = Vec::with_capacity(models.len());
        for m in models {
            match m.as_any().downcast_ref::<PreparedModel>() {
                Some(pm) => ours.push(pm),
                None => {
                    tracing::debug!("allocate: a prepared model of another device");
                    return Err(ErrorStatus::InvalidArgument);
                }
            }
        }
        Ok(Driver::allocate(
            self,
            LOCAL_OWNER,
            desc,
            &ours,
            input_roles,
            output_roles,
        )?)
    }
}

impl HalBuffer for DeviceBuffer {
    fn token(&self) -> u32 {
        DeviceBuffer::token(self)
    }
    fn copy_to(&self, dst: &Memory) -> Result<(), ErrorStatus> {
        DeviceBuffer::copy_to(self, dst)
    }
    fn copy_from(&self, src: &Memory, dimensions: &[u32]) -> Result<(), ErrorStatus> {
        DeviceBuffer::copy_from(self, src, dimensions)
    }
}

impl HalPreparedModel for PreparedModel {
    fn execute_synchronously(
        &self,
        request: &Request,
        measure: MeasureTiming,
        deadline: Option<Deadline>,
    ) -> ExecutionResult {
        PreparedModel::execute_synchronously(self, request, measure, deadline)
    }
    fn runs_on_device(&self) -> bool {
        PreparedModel::runs_on_device(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn configure_execution_burst(
        &self,
        config: crate::burst::BurstConfig,
    ) -> Result<crate::burst::ExecutionBurstController, ErrorStatus> {
        crate::burst::configure_in_process(self, config)
    }
}
