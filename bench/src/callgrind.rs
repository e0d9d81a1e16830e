//! The callgrind scripts (`bench/callgrind-host.sh`, `bench/callgrind-ops.sh`):
//! run one, print its Markdown table and return it with the lines of its
//! TSV, split into fields.

use std::path::Path;
use std::process::Command;

use crate::{Plan, Result};

/// What a script printed (its table) and wrote (one row per line).
pub struct Output {
    pub table: String,
    pub rows: Vec<Vec<String>>,
}

/// Runs `bench/SCRIPT ARGS… --servers NAME --tsv FILE` on the selected
/// server, quick (and shorter than the script's own `QUICK=1`) when the
/// plan is.
pub fn run(script: &str, args: &[&str], plan: &Plan) -> Result<Output> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tsv = std::env::temp_dir().join(format!(
        "{}-{}.tsv",
        script.trim_end_matches(".sh"),
        std::process::id()
    ));
    let mut cmd = Command::new(root.join("bench").join(script));
    cmd.args(args)
        .arg("--servers")
        .arg(crate::server::current().name)
        .arg("--tsv")
        .arg(&tsv)
        .current_dir(&root);
    if plan.quick {
        // One round; and half the scripts' own quick phases (1,000 calls
        // measured, 10,000 timed): a phase's fixed cost (callgrind's
        // zeroing and dump, the dump's reading) is most of its time, and
        // the run must stay under five minutes on four servers.
        cmd.env("QUICK", "1")
            .args(["--ops", "1000", "--time-ops", "10000"]);
    } else {
        cmd.env_remove("QUICK");
    }
    let output = cmd.output()?;
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{table}");
    if !output.status.success() {
        let _ = std::fs::remove_file(&tsv);
        return Err(format!(
            "bench/{script} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let lines = std::fs::read_to_string(&tsv)?;
    let _ = std::fs::remove_file(&tsv);
    let rows = lines
        .lines()
        .map(|line| line.split('\t').map(str::to_owned).collect())
        .collect();
    Ok(Output { table, rows })
}

/// Field `i` of a row as a number.
pub fn number(row: &[String], i: usize) -> Option<f64> {
    row.get(i).and_then(|f| f.parse::<f64>().ok())
}

/// Field `i` of a row as text ("" when missing).
pub fn text(row: &[String], i: usize) -> &str {
    row.get(i).map(String::as_str).unwrap_or("")
}
