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
    kart::pipeline::process::reap_if_asked();
    kart::pipeline::process::enable_reaper();
    cli::complete::answer_if_asked(<cli::Cli as clap::CommandFactory>::command);
    let args = cli::Cli::parse();
    match cli::run(&args) {
        Ok(code) => code,
        Err(e) => {
            cli::print_error(&e);
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
