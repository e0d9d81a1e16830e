//! `chaos`: runs the chaos suite and prints its summary.
//!
//! ```text
//! chaos [--seconds N] [--seed N] [--clients N] [--resources N]
//!       [--read-write N] [--semaphores N] [--permits N]
//!       [--negative-control | --mix NAME [--with-mechanism]] [--verbose]
//! ```
//!
//! Defaults: `CHAOS_SECONDS` or 180 s, `CHAOS_SEED` or a random seed
//! (printed), 32 clients, 4 mutexes, 1 read-write lock, 1 semaphore of 2
//! permits. Exit status: 0 when the safe mix saw
//! no violation (the negative control: when it saw some), 1 otherwise, 2 on
//! a usage or setup error.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chaos::plan::Mix;
use chaos::Settings;

const USAGE: &str = "usage: chaos [--seconds N] [--seed N] [--clients N] [--resources N]
             [--read-write N] [--semaphores N] [--permits N]
             [--negative-control | --mix NAME [--with-mechanism]] [--verbose]

Runs Redlock over five module-loaded redis-server processes while faults are
injected, checks every holder with a fenced store, and prints a summary.

  --seconds N          run length (default: $CHAOS_SECONDS or 180)
  --seed N             fault schedule seed (default: $CHAOS_SEED or random)
  --clients N          concurrent client tasks (default 32)
  --resources N        mutexes they contend for (default 4)
  --read-write N       read-write locks: a third of the holds write, the rest read (default 1)
  --semaphores N       semaphores (default 1)
  --permits N          permits of each semaphore (default 2)
  --negative-control   no persistence and no recovery window: must report violations
  --mix NAME           safe (default), negative-control, clock-step (AOF always
                       without a recovery window, clocks stepped back: breaks rule 2),
                       network-control (a client quorum of 2 of 5 under network
                       faults alone), no-window (the first safe phase with
                       lock.recovery-ms 0 and nothing else changed),
                       fast-clocks (lease clocks 2-4% fast on every node:
                       beyond the drift allowance), no-drift (lease clocks
                       0.8-1% fast on every node, within the default
                       allowance, and a client with no allowance), or
                       held-ignores-validity (holders whose is_held() ignores
                       the validity: the checker's held-after-validity check),
                       clock-lead (no persistence, clocks set 2.5 s ahead
                       before each restart of every node, a recovery window
                       of the largest TTL but not of the lead: breaks rule
                       3) or single-node-forgets (the
                       single-node phase without persistence)
  --with-mechanism     a single-mechanism control (no-window, clock-step,
                       network-control, fast-clocks, no-drift, clock-lead,
                       single-node-forgets) with the mechanism it removes put
                       back, nothing else changed: must see no violation
  --verbose            print each fault as it is injected

Exit status: 0 if the safe mix saw no violation (a mix that breaks the rules:
if it saw some), 1 otherwise, 2 on a usage or setup error.";

fn parse_number<T: std::str::FromStr>(name: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{name} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{name}: not a valid number: {value:?}"))
}

fn env_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}: not a valid number: {value:?}")),
        _ => Ok(None),
    }
}

fn parse_args() -> Result<Option<Settings>, String> {
    let mut settings = Settings::default();
    let mut seconds: f64 = env_number("CHAOS_SECONDS")?.unwrap_or(180.0);
    let mut seed: Option<u64> = env_number("CHAOS_SEED")?;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = parse_number("--seconds", args.next())?,
            "--seed" => seed = Some(parse_number("--seed", args.next())?),
            "--clients" => settings.clients = parse_number("--clients", args.next())?,
            "--resources" => settings.resources = parse_number("--resources", args.next())?,
            "--read-write" => settings.read_write = parse_number("--read-write", args.next())?,
            "--semaphores" => settings.semaphores = parse_number("--semaphores", args.next())?,
            "--permits" => settings.permits = parse_number("--permits", args.next())?,
            "--negative-control" => settings.mix = Mix::NegativeControl,
            "--with-mechanism" => settings.with_mechanism = true,
            "--mix" => {
                let name = args.next().ok_or("--mix needs a value")?;
                settings.mix = Mix::parse(&name).ok_or_else(|| format!("unknown mix {name:?}"))?;
            }
            "--verbose" => settings.verbose = true,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err("--seconds must be positive".into());
    }
    if settings.clients == 0 || settings.resources + settings.read_write + settings.semaphores == 0
    {
        return Err("--clients and the number of resources must be positive".into());
    }
    if settings.permits == 0 {
        return Err("--permits must be positive".into());
    }
    if settings.with_mechanism && settings.mix.mechanism().is_none() {
        return Err(format!(
            "--with-mechanism needs a single-mechanism control, not the {} mix",
            settings.mix.name()
        ));
    }
    settings.duration = Duration::from_secs_f64(seconds);
    settings.seed = seed.unwrap_or_else(rand::random);
    Ok(Some(settings))
}

/// SIGINT, SIGTERM or SIGHUP: the run ends early but still stops every
/// server it started (they are killed when their handles drop).
async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
        _ = hangup.recv() => {}
    }
    Ok(())
}

fn main() -> ExitCode {
    let settings = match parse_args() {
        Ok(Some(settings)) => settings,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("chaos: {why}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "chaos: seed {} ({}), {:.0} s, {} clients on {}; reproduce the fault schedule with --seed {}",
        settings.seed,
        settings.mix.name(),
        settings.duration.as_secs_f64(),
        settings.clients,
        settings.describe_resources(),
        settings.seed
    );
    let result = runtime.block_on(async {
        let interrupt = settings.interrupt.clone();
        tokio::spawn(async move {
            match wait_for_signal().await {
                Ok(()) => {
                    eprintln!("chaos: interrupted, ending the run early (servers are stopped)");
                    interrupt.store(true, Ordering::Relaxed);
                }
                Err(e) => eprintln!("chaos: cannot watch for signals: {e}"),
            }
        });
        chaos::run(&settings).await
    });
    match result {
        Ok(summary) => {
            println!("{summary}");
            if summary.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("chaos: {error}");
            ExitCode::from(2)
        }
    }
}
