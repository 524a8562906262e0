//! `nnaccelctl cache` and `nnaccelctl run --cache-dir`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nnaccel_hal::cache::{CacheState, Entry, ManagedCache};
use nnaccel_hal::{ErrorStatus, ExecutionPreference, HalDevice, HalPreparedModel, Model, Priority};
use nnaccel_protocol::cache_dir::{CacheOutcome, prepare_with_cache_dir};
use nnaccel_protocol::client::{DEFAULT_SOCKET, ServiceClient};

use crate::backend::Selected;
use crate::{CliError, Outcome};

pub const AFTER_HELP: &str = "\
The driver-managed cache holds the compiled models nnaccel-hald keeps for clients that pass
no cache files (keyed by model content, bounded in size, least recently used evicted first),
under its state directory (/var/lib/nnaccel/programs). Without --state-dir the command asks
the service. The in-process driver (--device, --cpu, the embedded default) keeps no
driver-managed cache: each nnaccelctl process would be its only user; use
`nnaccelctl run --cache-dir DIR` for caching across runs there.";

/// What `nnaccelctl cache` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// List the entries (key, size, last use).
    List,
    /// Remove every entry.
    Clear,
}

/// Where the in-process driver keeps its token records under a cache directory: the driver
/// runs inside nnaccelctl, so the client's directory is as trusted as anything it could use.
const LOCAL_STATE: &str = ".nnaccel-state";

/// Prepares through the cache directory `dir`; says whether the cache was used unless `quiet`.
pub fn prepare_in(
    selected: &Selected,
    model: &Model,
    dir: &Path,
    quiet: bool,
) -> Result<Arc<dyn HalPreparedModel>, ErrorStatus> {
    let local: Option<Arc<dyn HalDevice>> = match &selected.local {
        Some(driver) => match CacheState::open(&dir.join(LOCAL_STATE), 0) {
            Ok(state) => Some(Arc::new(driver.clone().with_cache(state))),
            Err(e) => {
                eprintln!("nnaccelctl: cache records kept in memory only: {e}");
                None
            }
        },
        None => None,
    };
    let dev = local.as_ref().unwrap_or(&selected.driver);
    let (pm, outcome) = prepare_with_cache_dir(
        &**dev,
        model,
        ExecutionPreference::FastSingleAnswer,
        Priority::Medium,
        None,
        dir,
    )?;
    if !quiet {
        match outcome {
            CacheOutcome::Hit => println!("cache: prepared from the cache in {}", dir.display()),
            CacheOutcome::Saved => println!("cache: compiled; cache saved in {}", dir.display()),
        }
    }
    Ok(pm)
}

fn print_entries(entries: &[Entry]) {
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    println!(
        "{} entr{}, {total} bytes",
        entries.len(),
        if entries.len() == 1 { "y" } else { "ies" }
    );
    for e in entries {
        println!(
            "{}  {:>12} bytes  last used {}",
            e.key, e.bytes, e.last_used
        );
    }
}

/// `nnaccelctl cache [list|clear]`.
pub fn cache(
    action: Action,
    service: Option<PathBuf>,
    state_dir: Option<PathBuf>,
) -> Result<Outcome, CliError> {
    if let Some(dir) = state_dir {
        let m = ManagedCache::open(&dir, u64::MAX)?;
        match action {
            Action::List => print_entries(&m.list()?),
            Action::Clear => println!("removed {} entries", m.clear()?),
        }
        return Ok(Outcome::Ok);
    }
    let path = service.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
    let client = ServiceClient::connect(&path).map_err(|e| {
        CliError(format!(
            "cannot reach the service at {}: {e} (the in-process driver keeps no driver-managed cache; --state-dir DIR works on a state directory directly)",
            path.display()
        ))
    })?;
    let failed = |s: ErrorStatus| {
        eprintln!("nnaccelctl: the service answered {}", s.name());
        Outcome::Failed
    };
    match action {
        Action::List => match client.cache_list() {
            Ok((false, _)) => println!("the service keeps no driver-managed cache"),
            Ok((true, entries)) => print_entries(&entries),
            Err(s) => return Ok(failed(s)),
        },
        Action::Clear => match client.cache_clear() {
            Ok(n) => println!("removed {n} entries"),
            Err(s) => return Ok(failed(s)),
        },
    }
    Ok(Outcome::Ok)
}
