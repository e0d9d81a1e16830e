//! Where the examples find their nodes: command-line arguments, else the
//! comma-separated `REDIS_LOCK_NODES`, else the five masters that
//! `scripts/cluster.sh start` (`make cluster`) runs on ports 7101–7105; and
//! how an example exits. Each example uses some of these.
#![allow(dead_code)]

/// The node URLs to use. Bare `host:port` entries get a `redis://` prefix.
pub fn node_urls() -> Vec<String> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let listed = if args.is_empty() {
        std::env::var("REDIS_LOCK_NODES")
            .map(|nodes| {
                nodes
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    } else {
        args
    };
    if listed.is_empty() {
        return (7101..=7105)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect();
    }
    listed
        .into_iter()
        .map(|node| {
            if node.contains("://") {
                node
            } else {
                format!("redis://{node}")
            }
        })
        .collect()
}

/// The process's exit status for an example's outcome; an error is printed.
pub fn exit_code(outcome: Result<(), Box<dyn std::error::Error>>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
