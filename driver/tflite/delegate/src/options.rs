//! The options `load_delegate(path, options)` passes as key/value strings.

use std::path::PathBuf;

/// What the delegate was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `service=PATH`: the nnaccel-hald socket.
    pub service: Option<PathBuf>,
    /// `device=PATH`: a device node, driven in this process.
    pub device: Option<PathBuf>,
    /// `cache_dir=DIR`: compilation cache directory.
    pub cache_dir: Option<PathBuf>,
    /// `burst=1|0`: execute through a burst from the second invoke on (default 1).
    pub burst: bool,
    /// `cpu_fallback=1|0`: claim nodes the HAL would run on its CPU executor (default 1).
    pub cpu_fallback: bool,
    /// `log=1`: what is claimed and where it runs, on stderr.
    pub log: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            service: None,
            device: None,
            cache_dir: None,
            burst: true,
            cpu_fallback: true,
            log: false,
        }
    }
}

/// The keys [`parse`] knows, for the message about an unknown one.
pub const KEYS: &str = "service, device, cache_dir, burst, cpu_fallback, log";

fn flag(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!(
            "nnaccel delegate: option {key}={value:?}: expected 1 or 0"
        )),
    }
}

fn path(key: &str, value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err(format!("nnaccel delegate: option {key} needs a path"));
    }
    Ok(PathBuf::from(value))
}

/// Parses the key/value pairs; an unknown key, a repeated key, a bad value, or both `service`
/// and `device` is an error naming it.
pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Options, String> {
    let mut o = Options::default();
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in pairs {
        if seen.contains(&key) {
            return Err(format!("nnaccel delegate: option {key} given twice"));
        }
        match key {
            "service" => o.service = Some(path(key, value)?),
            "device" => o.device = Some(path(key, value)?),
            "cache_dir" => o.cache_dir = Some(path(key, value)?),
            "burst" => o.burst = flag(key, value)?,
            "cpu_fallback" => o.cpu_fallback = flag(key, value)?,
            "log" => o.log = flag(key, value)?,
            _ => {
                return Err(format!(
                    "nnaccel delegate: unknown option {key:?} (known: {KEYS})"
                ));
            }
        }
        seen.push(key);
    }
    if o.service.is_some() && o.device.is_some() {
        return Err(
            "nnaccel delegate: options service and device exclude each other (the service \
             owns its device)"
                .to_string(),
        );
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_options_mean_burst_and_cpu_fallback_on_and_no_log() {
        let o = parse([]).unwrap_or_default();
        assert!(o.burst && o.cpu_fallback && !o.log);
        assert_eq!(o.service, None);
    }

    #[test]
    fn every_known_option_is_taken() {
        let o = parse([
            ("service", "/tmp/s.sock"),
            ("cache_dir", "/tmp/c"),
            ("burst", "0"),
            ("cpu_fallback", "0"),
            ("log", "1"),
        ]);
        let o = o.unwrap_or_default();
        assert_eq!(o.service, Some(PathBuf::from("/tmp/s.sock")));
        assert_eq!(o.cache_dir, Some(PathBuf::from("/tmp/c")));
        assert!(!o.burst && !o.cpu_fallback && o.log);
    }

    #[test]
    fn unknown_option_is_refused_with_its_name() {
        let err = parse([("bogus", "1")]).err().unwrap_or_default();
        assert!(err.contains("unknown option \"bogus\""), "{err}");
        assert!(err.contains("cpu_fallback"), "{err}");
    }

    #[test]
    fn bad_flag_value_is_refused_with_key_and_value() {
        let err = parse([("burst", "yes")]).err().unwrap_or_default();
        assert!(err.contains("burst=\"yes\""), "{err}");
    }

    #[test]
    fn empty_path_repeated_key_and_service_with_device_are_refused() {
        assert!(parse([("service", "")]).is_err());
        assert!(parse([("log", "1"), ("log", "0")]).is_err());
        let err = parse([("service", "/s"), ("device", "/d")])
            .err()
            .unwrap_or_default();
        assert!(err.contains("exclude"), "{err}");
    }
}
