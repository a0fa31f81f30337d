//! `switchyard fuzz`: every input surface under structure-aware mutation.

use std::path::PathBuf;
use std::process::ExitCode;

use super::OutputFormat;

#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// Surfaces to fuzz (default: all of them). Repeatable.
    #[arg(long, value_enum)]
    surface: Vec<switchyard::fuzz::Surface>,
    /// Inputs per surface.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    inputs: u64,
    /// Seconds per surface at most.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    seconds: f64,
    #[arg(long, default_value_t = 0x5eed, value_name = "N")]
    seed: u64,
    /// Where findings are written, one folder per surface (move them into
    /// tests/fuzz-corpus/ to keep them as regression tests).
    #[arg(long, default_value = "target/fuzz-findings", value_name = "DIR")]
    findings_dir: PathBuf,
    /// Print each panic's message and location to stderr as it happens (they are
    /// reported in the table and kept in --findings-dir either way).
    #[arg(long)]
    show_panics: bool,
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    output_format: OutputFormat,
}

pub fn fuzz(args: FuzzArgs) -> anyhow::Result<ExitCode> {
    use switchyard::fuzz;
    let manifest_root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = if manifest_root.join("examples").is_dir() {
        manifest_root
    } else {
        PathBuf::from(".")
    };
    let opts = fuzz::FuzzOptions {
        surfaces: if args.surface.is_empty() {
            fuzz::Surface::ALL.to_vec()
        } else {
            args.surface
        },
        inputs: args.inputs,
        seconds: args.seconds,
        seed: args.seed,
        root,
        crash_dir: Some(args.findings_dir),
        show_panics: args.show_panics,
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let reports = fuzz::run(&opts, &mut |r| {
        if tty {
            eprint!(
                "\r\x1b[2Kfuzzing {:?}: {} inputs, {:.0}/s, {} panics, {} hangs, {} violations",
                r.surface, r.inputs, r.execs_per_second, r.panics, r.hangs, r.invariant_violations
            );
        }
    });
    if tty {
        eprint!("\r\x1b[2K");
    }
    match args.output_format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
        OutputFormat::Table => print!("{}", fuzz::table(&reports)),
    }
    let found = fuzz::findings(&reports);
    Ok(if found > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
