//! The `kart` command: parses the arguments, runs the command (`cli/`, one module
//! each, over the library) and maps errors to exit codes.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kart ls | head`), as Unix tools do, instead of
    // panicking in println!.
    // SAFETY: sets a signal disposition at start, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = cli::Cli::parse();
    match cli::run(&args) {
        Ok(code) => code,
        Err(e) => {
            // Errors quote files, remotes and nvcc: nothing of theirs may drive the terminal.
            let shown = |s: String| kart::untrusted::for_terminal(&s).into_owned();
            eprintln!("error: {}", shown(e.to_string()));
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {}", shown(s.to_string()));
                source = s.source();
            }
            if let Some(hint) = e.hint() {
                eprintln!("hint: {}", shown(hint.to_string()));
            }
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
