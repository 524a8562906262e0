//! One interface for every way of reaching the HAL: the driver in this process (over a device
//! node, the in-process device, or the CPU only) and the `nnaccel-hald` service.

use std::fmt::Debug;
use std::sync::Arc;

use super::driver::{Driver, Placement, PreparedModel};
use super::types::*;
use crate::cache::{CacheHandle, Token};

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
    #[allow(clippy::too_many_arguments)]
    fn prepare_model_with_cache(
        &self,
        model: &Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        model_cache: &[CacheHandle<'_>],
        data_cache: &[CacheHandle<'_>],
        token: &Token,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus>;
    /// `prepareModelFromCache`.
    fn prepare_model_from_cache(
        &self,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        model_cache: &[CacheHandle<'_>],
        data_cache: &[CacheHandle<'_>],
        token: &Token,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus>;
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
        model_cache: &[CacheHandle<'_>],
        data_cache: &[CacheHandle<'_>],
        token: &Token,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        Ok(Arc::new(Driver::prepare_model_with_cache(
            self,
            model,
            preference,
            priority,
            deadline,
            model_cache,
            data_cache,
            token,
        )?))
    }
    fn prepare_model_from_cache(
        &self,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: Option<Deadline>,
        model_cache: &[CacheHandle<'_>],
        data_cache: &[CacheHandle<'_>],
        token: &Token,
    ) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
        Ok(Arc::new(Driver::prepare_model_from_cache(
            self,
            preference,
            priority,
            deadline,
            model_cache,
            data_cache,
            token,
        )?))
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
}
