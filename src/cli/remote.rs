//! The remote cache the command line, the environment or kart.toml names, opened with
//! the command line's options over kart.toml's.

use kart::error::Result;
use kart::workspace::Workspace;

use super::args::Cli;

/// Opens the remote the command line, environment or kart.toml names, if any, with the
/// command line's clocks over kart.toml's.
pub(super) fn open_remote(
    cli: &Cli,
    ws: &Workspace,
    jobs: usize,
) -> Result<Option<kart::remote::Remote>> {
    open_remote_within(cli, ws, jobs, None)
}

/// [`open_remote`], with the remote's whole budget of time for the run cut to `budget`
/// if given (a probe that must not wait for long).
pub(super) fn open_remote_within(
    cli: &Cli,
    ws: &Workspace,
    jobs: usize,
    budget: Option<std::time::Duration>,
) -> Result<Option<kart::remote::Remote>> {
    let Some(mut settings) =
        kart::remote::transfer::remote_settings(&ws.project, cli.remote.url.as_deref())
    else {
        return Ok(None);
    };
    settings.read_only |= cli.remote.read_only;
    if let Some(anonymous) = kart::remote::anonymous_from_env(
        std::env::var(kart::remote::ANONYMOUS_ENV).ok().as_deref(),
    )? {
        settings.anonymous = anonymous;
    }
    settings.jobs = jobs.max(1);
    let t = &mut settings.timeouts;
    t.connect = cli.remote.connect_timeout.unwrap_or(t.connect);
    t.first_byte = cli.remote.first_byte_timeout.unwrap_or(t.first_byte);
    t.stall = cli.remote.stall_timeout.unwrap_or(t.stall);
    if let Some(budget) = budget {
        settings.budget = settings.budget.min(budget);
    }
    let token = bearer_token(&settings.url, cli.remote.url.as_deref(), cli.quiet);
    kart::remote::Remote::open(&settings, token).map(Some)
}

/// KART_REMOTE_TOKEN, for `url` only where the remote cache's rules let it go: to a URL
/// given with it (`given`: the flag or variable that named the URL) or named by
/// KART_REMOTE_TOKEN_URL; otherwise none, with a warning unless `quiet`.
pub(super) fn bearer_token(url: &str, given: Option<&str>, quiet: bool) -> Option<String> {
    std::env::var(kart::remote::TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
        .filter(|_| {
            let token_url = std::env::var(kart::remote::TOKEN_URL_ENV).ok();
            match kart::remote::token_allowed(url, given, token_url.as_deref()) {
                Ok(()) => true,
                Err(why) => {
                    if !quiet {
                        eprintln!("warning: {why}");
                    }
                    false
                }
            }
        })
}
