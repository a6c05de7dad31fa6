//! `fusee compare`: the cross-backend comparison of `fusee-benches`, as the
//! `fusee-compare` binary runs it (same flags, same table, same files
//! written), with `--json` for scripts: the report's CSV rows as objects.
//! It measures the backends this build has (the comparison's own
//! features follow the command's), and is left out of a build without the
//! `compare` feature, which also leaves out the SQLite and duroxide peers.

use std::process::ExitCode;

use crate::CliError;

/// `fusee compare`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The report as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// The comparison's own flags (`fusee compare -- --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    flags: Vec<String>,
}

/// `fusee compare [flags]` in a build without the comparison.
#[cfg(not(feature = "compare"))]
pub(crate) fn run(_: Args) -> Result<ExitCode, CliError> {
    Err(CliError::NotBuilt {
        what: "`fusee compare` runs the cross-backend comparison".into(),
        feature: "compare",
    })
}

/// The CSV's rows (`metric,unit,subject,role,value,ratio_to_floor,
/// ratio_to_best_backend`, documented in `fusee_benches::report`) as
/// objects; empty cells are `null`, numbers are numbers.
#[cfg(feature = "compare")]
fn csv_json(csv: &str) -> serde_json::Value {
    use serde_json::Value;
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let rows = lines
        .filter(|l| !l.is_empty())
        .map(|line| {
            let obj = header
                .iter()
                .zip(line.split(','))
                .map(|(k, v)| {
                    let v = if v.is_empty() {
                        Value::Null
                    } else {
                        v.parse::<f64>().map_or(Value::from(v), Value::from)
                    };
                    (k.to_string(), v)
                })
                .collect();
            Value::Object(obj)
        })
        .collect();
    Value::Array(rows)
}

/// `fusee compare [flags]`.
#[cfg(feature = "compare")]
pub(crate) fn run(args: Args) -> Result<ExitCode, CliError> {
    use fusee_benches::compare::{USAGE, parse_args, run as run_comparison};
    use serde_json::json;

    use crate::output::{emit, emit_json, say};

    let mut flags = args.flags;
    // `--json` given among the comparison's flags is ours too.
    let json = args.json || flags.iter().any(|f| f == "--json");
    flags.retain(|f| f != "--json");
    let opts = parse_args("fusee compare", flags)
        .map_err(|e| CliError::Usage(format!("{e}\n\n{USAGE}")))?;
    if opts.help {
        emit(USAGE)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = run_comparison(&opts).map_err(|e| CliError::Other(e.to_string()))?;
    let written = report
        .write(&opts.out)
        .map_err(|e| CliError::Other(e.to_string()))?;
    if json {
        emit_json(&json!({
            "command": report.command,
            "seconds": report.seconds,
            "verdict": report.verdict(),
            "rows": csv_json(&report.csv()),
            "written": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }))?;
    } else {
        emit(&report.text())?;
        for p in written {
            say(&format!("wrote {}", p.display()));
        }
    }
    Ok(ExitCode::SUCCESS)
}
