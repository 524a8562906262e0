//! Logging in a journald-friendly form: no timestamps (the journal adds them), no colours, and
//! under systemd (JOURNAL_STREAM set) a `<N>` syslog priority prefix on every line, which
//! journald turns into the entry's priority.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

struct JournalFormat {
    prefix: bool,
}

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        if self.prefix {
            let prio = match level {
                Level::ERROR => 3,
                Level::WARN => 4,
                Level::INFO => 6,
                Level::DEBUG | Level::TRACE => 7,
            };
            write!(w, "<{prio}>")?;
        } else {
            write!(w, "{level:>5} ")?;
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Installs the subscriber; `NNACCEL_LOG` filters (default `info`).
pub fn init() {
    let prefix = std::env::var_os("JOURNAL_STREAM").is_some();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NNACCEL_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(JournalFormat { prefix })
        .init();
}
