//! `nnaccel-tflite-delegate`: the external delegate LiteRT loads with
//! `load_delegate("libnnaccel_tflite_delegate.so", options)` (docs/tflite.md, "The external delegate").
//!
//! It exports the two functions of TFLite's external delegate plugin interface,
//! [`tflite_plugin_create_delegate`] and [`tflite_plugin_destroy_delegate`], and
//! [`nnaccel_tflite_delegate_stats`] for tests. At the interpreter's Prepare it reads the graph
//! from the `TfLiteContext` ([`context`], which also checks the runtime's ABI against the
//! mirrors of [`abi`]), asks the lowering of `nnaccel-tflite` and the HAL's
//! `getSupportedOperations` which nodes it can run, and hands those to
//! `ReplaceNodeSubsetsWithDelegateKernels`, so TFLite forms the partitions by its own rules;
//! each partition is lowered to one NN HAL model, prepared once and executed at every Invoke
//! ([`kernel`]). What it does not claim runs on LiteRT's own kernels.
//!
//! Every exported and callback function catches panics: an unwinding panic must never cross
//! into the interpreter (it would abort the user's process).
//!
//! It may import the TFLite import (`nnaccel-tflite`), the client library, the HAL's types and
//! the simulated device (the embedded default); nothing imports it.

/// Tensors and packed weights on cache lines (nnaccel_cpu::CacheAligned says why).
#[global_allocator]
static ALLOCATOR: nnaccel_cpu::CacheAligned = nnaccel_cpu::CacheAligned;

pub mod abi;
pub mod backend;
pub mod context;
#[cfg(test)]
mod fake;
pub mod kernel;
pub mod options;
pub mod stats;

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use stats::NnaccelDelegateStats;

/// `report_error` as the plugin interface passes it.
pub type ReportError = Option<unsafe extern "C" fn(*const c_char)>;

/// Runs `f`, catching a panic: the message goes to stderr (`what` names the function) and
/// `on_panic` is returned instead. Every exported and callback function runs through it.
pub(crate) fn guard<T>(what: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        eprintln!("nnaccel delegate: internal error (a panic) in {what}; nothing crossed into the interpreter");
        on_panic
    })
}

fn report(report_error: ReportError, msg: &str) {
    let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
    match report_error {
        // SAFETY: the loader's callback, valid during tflite_plugin_create_delegate (this
        // call), with a NUL-terminated string.
        Some(f) => unsafe { f(text.as_ptr()) },
        None => eprintln!("{msg}"),
    }
}

/// The option pairs as strings.
///
/// # Safety
/// `keys` and `values` are null (with `n` 0) or hold `n` NUL-terminated strings each.
unsafe fn pairs(
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> Result<Vec<(String, String)>, String> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if keys.is_null() || values.is_null() {
        return Err("nnaccel delegate: options given without keys or values".to_string());
    }
    (0..n)
        .map(|i| {
            // SAFETY: `i < n` entries, per the caller.
            let k = unsafe { *keys.wrapping_add(i) };
            // SAFETY: as above.
            let v = unsafe { *values.wrapping_add(i) };
            if k.is_null() || v.is_null() {
                return Err(format!("nnaccel delegate: option {i} is NULL"));
            }
            // SAFETY: NUL-terminated per the caller.
            let k = unsafe { CStr::from_ptr(k) };
            // SAFETY: as above.
            let v = unsafe { CStr::from_ptr(v) };
            Ok((
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            ))
        })
        .collect()
}

fn create(
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> Result<*mut abi::TfLiteDelegate, String> {
    // SAFETY: the loader passes `n` keys and values (the plugin interface's contract).
    let pairs = unsafe { pairs(keys, values, n) }?;
    let options = options::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    kernel::Plugin::create(options)
}

/// Creates the delegate from `n` option pairs; on an error (an unknown option, a bad value, an
/// unreachable service) reports it through `report_error` and returns NULL, which makes
/// `load_delegate` fail with that message.
///
/// # Safety
/// `keys` and `values` hold `n` NUL-terminated strings each (or are null with `n` 0);
/// `report_error` is null or callable during this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tflite_plugin_create_delegate(
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
    report_error: ReportError,
) -> *mut abi::TfLiteDelegate {
    let panicked = || {
        Err("nnaccel delegate: internal error (a panic) while creating the delegate".to_string())
    };
    match guard("tflite_plugin_create_delegate", panicked(), || {
        create(keys, values, n)
    }) {
        Ok(d) => d,
        Err(msg) => {
            report(report_error, &msg);
            std::ptr::null_mut()
        }
    }
}

/// Destroys a delegate made by [`tflite_plugin_create_delegate`].
///
/// # Safety
/// `delegate` is null or a pointer [`tflite_plugin_create_delegate`] returned, not yet
/// destroyed, and no interpreter uses it any more.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tflite_plugin_destroy_delegate(delegate: *mut abi::TfLiteDelegate) {
    // SAFETY: per the caller.
    guard("tflite_plugin_destroy_delegate", (), || unsafe {
        kernel::Plugin::destroy(delegate)
    });
}

/// Copies this process's delegate counters into `*out`; returns 0, or -1 when `out` is null.
///
/// # Safety
/// `out` is null or points to writable memory for one [`NnaccelDelegateStats`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnaccel_tflite_delegate_stats(out: *mut NnaccelDelegateStats) -> i32 {
    guard("nnaccel_tflite_delegate_stats", -1, || {
        if out.is_null() {
            return -1;
        }
        let snapshot = stats::snapshot();
        // SAFETY: non-null and writable per the caller.
        unsafe { out.write_unaligned(snapshot) };
        0
    })
}

/// Panics on purpose inside the same guard the exported functions use, and returns 1 when
/// the guard caught it: the Python test calls it to show a panic never crosses the ABI.
#[unsafe(no_mangle)]
pub extern "C" fn nnaccel_tflite_delegate_panic_probe() -> i32 {
    guard("nnaccel_tflite_delegate_panic_probe", 1, || {
        let v: Vec<i32> = Vec::new();
        // An index past the end: a real panic, as a bug in the delegate would raise.
        std::hint::black_box(&v)[usize::from(std::hint::black_box(3u8))]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static REPORTED: Mutex<String> = Mutex::new(String::new());

    unsafe extern "C" fn record(msg: *const c_char) {
        // SAFETY: the delegate passes a NUL-terminated string.
        let s = unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned();
        if let Ok(mut r) = REPORTED.lock() {
            *r = s;
        }
    }

    #[test]
    fn unknown_option_returns_null_and_reports_through_report_error() {
        let keys = [c"bogus".as_ptr()];
        let values = [c"1".as_ptr()];
        // SAFETY: one key and one value, NUL-terminated.
        let d = unsafe {
            tflite_plugin_create_delegate(keys.as_ptr(), values.as_ptr(), 1, Some(record))
        };
        assert!(d.is_null());
        let msg = REPORTED.lock().map(|r| r.clone()).unwrap_or_default();
        assert!(msg.contains("unknown option \"bogus\""), "{msg}");
    }

    #[test]
    fn null_option_strings_are_refused_not_dereferenced() {
        let keys = [std::ptr::null::<c_char>()];
        let values = [c"1".as_ptr()];
        // SAFETY: null entries are what is being tested; nothing else is read.
        let d = unsafe { tflite_plugin_create_delegate(keys.as_ptr(), values.as_ptr(), 1, None) };
        assert!(d.is_null());
    }

    #[test]
    fn the_panic_probe_reports_a_caught_panic() {
        assert_eq!(nnaccel_tflite_delegate_panic_probe(), 1);
    }

    #[test]
    fn stats_refuse_a_null_pointer() {
        // SAFETY: null is allowed and checked.
        let status = unsafe { nnaccel_tflite_delegate_stats(std::ptr::null_mut()) };
        assert_eq!(status, -1);
    }
}
