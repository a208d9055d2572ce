//! Progress drawing: a bar on a terminal, plain lines otherwise, nothing with `-q`.
//! indicatif hides its bars when stderr is not a terminal; kart draws no color.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use kart::pipeline::BuildReporter;
use kart::pipeline::compile::CompileFailure;

/// Draws build progress: a bar on a terminal, plain lines otherwise, nothing with -q.
pub struct CliReporter {
    pub bar: Option<ProgressBar>,
    quiet: bool,
    lines: Mutex<()>,
    /// nvcc's output already shown in full (without its command line, which differs
    /// per config), with the artifact it was shown for.
    shown: Mutex<std::collections::HashMap<String, String>>,
    /// For plain-line output: compiles planned, done so far, and when the first began.
    progress: Mutex<(usize, usize, Option<std::time::Instant>)>,
}

impl CliReporter {
    pub fn new(quiet: bool) -> CliReporter {
        CliReporter {
            bar: None,
            quiet,
            lines: Mutex::new(()),
            shown: Mutex::new(std::collections::HashMap::new()),
            progress: Mutex::new((0, 0, None)),
        }
    }

    /// `[n/N, ~M s left]` for plain-line output: the compiles done over those planned,
    /// and the time left at the rate so far.
    fn count(&self) -> String {
        let Ok(mut p) = self.progress.lock() else {
            return String::new();
        };
        p.1 += 1;
        let (total, done) = (p.0, p.1);
        let left = match p.2 {
            Some(start) if done < total => {
                let per = start.elapsed().as_secs_f64() / done as f64;
                format!(", ~{:.0} s left", per * (total - done) as f64)
            }
            _ => String::new(),
        };
        format!("[{done}/{total}{left}] ")
    }

    /// The artifact this failure's output was already shown for, if it was (the same
    /// syntax error hits every config of a grid: show it once).
    fn shown_before(&self, artifact: &str, failure: &CompileFailure) -> Option<String> {
        // The framed command line (first line) names the config's -D values.
        let body: String = failure
            .details
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n");
        let key = if !failure.group.is_empty() {
            failure.group.clone()
        } else if body.trim().is_empty() {
            return None;
        } else {
            format!("{}\n{body}", failure.summary)
        };
        let mut shown = self.shown.lock().ok()?;
        match shown.get(&key) {
            Some(first) => Some(first.clone()),
            None => {
                shown.insert(key, artifact.to_string());
                None
            }
        }
    }

    fn say(&self, line: &str) {
        if self.quiet {
            return;
        }
        let line = kart::untrusted::for_terminal(line);
        let line = line.as_ref();
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                let _guard = self.lines.lock();
                eprintln!("{line}");
            }
        }
    }
}

impl BuildReporter for CliReporter {
    fn planned(&self, selected: usize, to_compile: usize) {
        if to_compile > 0 {
            if let Ok(mut p) = self.progress.lock() {
                *p = (to_compile, 0, Some(std::time::Instant::now()));
            }
            self.say(&format!(
                "{selected} artifacts selected, {to_compile} to compile"
            ));
        }
    }

    fn compiled(&self, artifact: &str, result: std::result::Result<Duration, &CompileFailure>) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        match result {
            Ok(elapsed) => {
                if self.bar.is_none() {
                    let count = self.count();
                    self.say(&format!(
                        "  {count}compiled {artifact} ({:.1} s)",
                        elapsed.as_secs_f64()
                    ));
                }
            }
            Err(failure) => {
                // Failures are shown in full as they happen, even with --quiet; output
                // already shown for another config is named, not repeated.
                let count = if self.bar.is_none() {
                    self.count()
                } else {
                    String::new()
                };
                let msg = match self.shown_before(artifact, failure) {
                    Some(first) if !failure.group.is_empty() => {
                        format!("{count}error: {artifact}: the same error as {first}, above")
                    }
                    Some(first) => format!(
                        "{count}error: {artifact}: {} (the same nvcc output as {first}, above)",
                        failure.summary
                    ),
                    None => format!("{count}error: {artifact}: {failure}"),
                };
                let msg = kart::untrusted::for_terminal(&msg).into_owned();
                match &self.bar {
                    Some(bar) => bar.println(msg),
                    None => eprintln!("{msg}"),
                }
            }
        }
    }

    fn note(&self, message: &str) {
        self.say(message);
    }
}

/// A byte progress bar on a terminal, nothing otherwise.
pub struct TransferBar(Option<ProgressBar>);

impl TransferBar {
    pub fn new(quiet: bool, verb: &str) -> TransferBar {
        if quiet || !std::io::stderr().is_terminal() {
            return TransferBar(None);
        }
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} {verb} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}), {{msg}} items, eta {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        TransferBar(Some(bar))
    }
}

impl kart::remote::transfer::TransferReporter for TransferBar {
    fn start(&self, items: usize, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(bytes);
            bar.set_message(format!("0/{items}"));
        }
    }
    fn moved(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }
}

impl Drop for TransferBar {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// A bar for a build on a terminal (unless quiet, or only checking the lock).
pub fn build_bar(quiet: bool, locked: bool) -> Option<ProgressBar> {
    if quiet || locked || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} compiled, eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(bar)
}
