//! Section 11: the native anchors (issue #35). The module's commands
//! against the server's own commands for the same job, in the server's
//! instructions per operation under callgrind, with time beside them
//! (`bench/callgrind-ops.sh --set anchors`, on every server found):
//! `LOCK.RELEASE` vs `DELEX key IFEQ v` (Redis 8.4+) and `DELIFEQ` (Valkey
//! 9), `LOCK.ACQUIRE` vs `SET NX PX`, re-entry and `LOCK.EXTEND` vs
//! `SET key v IFEQ v PX ttl` (Redis 8.4+, Valkey 8.1+); target ≤ 1.0×. The
//! Lua compare-and-delete row is a figure (every server has it).

use crate::callgrind;
use crate::fenced::ops_rows;
use crate::report::Report;
use crate::{Plan, Result};

pub fn run(plan: &Plan, report: &mut Report) -> Result<()> {
    println!("11. native anchors: instructions per operation against the server's own commands");
    let out = callgrind::run("callgrind-ops.sh", &["--set", "anchors"], plan)?;
    ops_rows(11, &out, report);
    report.detail(
        11,
        format!(
            "Instructions and time per operation (`bench/callgrind-ops.sh --set anchors`): \
             each round a fresh server with the module under callgrind, the two commands of \
             a row measured one after the other on it (which goes first alternates), the \
             command path's instructions (`processInputBuffer` and all it calls; the \
             module's lease timer and the server's cron are outside it) over the pipelined \
             commands; the time per operation through `redis-cli --pipe` on a server without \
             valgrind, and its inverse ratio as throughput:\n\n{}",
            out.table
        ),
    );
    Ok(())
}
