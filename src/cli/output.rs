//! What every command prints the same way: errors on stderr, JSON on stdout.

/// Prints an error as `error:`, its causes and its `hint:` on stderr. Errors quote
/// files, remotes and nvcc: nothing of theirs may drive the terminal.
pub fn print_error(e: &kart::Error) {
    let shown = |s: String| kart::untrusted::for_terminal(&s).into_owned();
    eprintln!("error: {}", shown(e.to_string()));
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        eprintln!("  caused by: {}", shown(s.to_string()));
        source = s.source();
    }
    if let Some(hint) = e.hint() {
        eprintln!("hint: {}", shown(hint));
    }
}

/// Prints `value` as pretty JSON on stdout.
pub(super) fn print_json(value: &impl serde::Serialize) {
    // The reports are plain structs of strings and numbers: they always serialize.
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Writes `value` as pretty JSON on stdout through a buffer (the same bytes as
/// [`print_json`]), for reports of many thousand rows.
pub(super) fn write_json(value: &impl serde::Serialize) -> kart::error::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let io = |source: std::io::Error| kart::Error::Io {
        action: "write to",
        path: "standard output".into(),
        source,
    };
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| io(e.into()))?;
    out.write_all(b"\n").map_err(io)?;
    out.flush().map_err(io)
}
