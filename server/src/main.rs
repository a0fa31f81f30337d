//! The `switchyard` command (see [`cli`]).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
