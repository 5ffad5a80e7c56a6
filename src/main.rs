//! The `toolstub` binary: parse the command line, run, print the error chain.

use std::process::ExitCode;

fn main() -> ExitCode {
    toolstub::cli::main()
}
