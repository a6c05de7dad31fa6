//! `fusee-compare`: which backend to pick for this disk. Measures every
//! backend compiled in against the floor and SQLite on a fixed workload,
//! prints a table, and writes CSV, markdown and an SVG chart (see
//! `fusee_benches::compare::USAGE`).

use std::process::ExitCode;

use fusee_benches::compare::{USAGE, parse_args, run};

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().collect();
    // The engine's recovery and parked workloads start this binary again
    // as their child process.
    if let Some(code) = fusee_benches::engine::child::serve(all.get(1..).unwrap_or_default()) {
        return code;
    }
    let mut args = all.into_iter();
    let program = args.next().unwrap_or_else(|| "fusee-compare".into());
    let program = std::path::Path::new(&program)
        .file_name()
        .map_or(program.clone(), |n| n.to_string_lossy().into_owned());
    let opts = match parse_args(&program, args.collect()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if opts.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let report = match run(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fusee-compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report.text());
    match report.write(&opts.out) {
        Ok(paths) => {
            for p in paths {
                eprintln!("wrote {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fusee-compare: {e}");
            ExitCode::FAILURE
        }
    }
}
