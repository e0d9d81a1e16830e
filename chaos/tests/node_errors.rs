//! The run's own health checks against real servers: a node error the
//! faults did not provoke is counted in every round (here a node without
//! the module answers every command with an error, while the two others
//! grant: the acquisitions still succeed, so the workload's results alone
//! would not show it), a panic line in a server's log and a server that
//! died without a fault are reported.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use chaos::cluster::Cluster;
use chaos::node_errors::Watch;
use chaos::plan::Plan;
use redis_lock_client::Redlock;
use testkit::{RedisServer, ServerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reply_from_one_node_is_counted_though_the_lock_is_granted() {
    let nodes: Vec<RedisServer> = tokio::task::spawn_blocking(|| {
        vec![
            RedisServer::start(),
            RedisServer::start(),
            RedisServer::start_with(ServerOptions::default().without_module()),
        ]
    })
    .await
    .unwrap();
    let watch = Watch::start(nodes.iter().map(RedisServer::port).collect());
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let redlock = Redlock::with_config(urls, chaos::client_config()).unwrap();
    let lock = redlock.lock("r", Duration::from_secs(30)).unwrap();
    lock.acquire().await.unwrap();
    lock.fencing_token().await.unwrap();
    lock.release().await.unwrap();
    let figures = watch.errors.figures();
    assert!(figures.unprovoked >= 3, "{figures:?}");
    assert!(
        figures
            .first_unprovoked
            .as_deref()
            .is_some_and(|e| e.contains(&nodes[2].port().to_string())),
        "{figures:?}"
    );
    // The same calls on module-loaded nodes only: nothing unprovoked.
    let healthy = Watch::start(nodes[..2].iter().map(RedisServer::port).collect());
    drop(watch);
    let urls: Vec<String> = nodes[..2].iter().map(RedisServer::url).collect();
    let redlock = Redlock::with_config(urls, chaos::client_config()).unwrap();
    let lock = redlock.lock("s", Duration::from_secs(30)).unwrap();
    lock.acquire().await.unwrap();
    lock.fencing_token().await.unwrap();
    lock.release().await.unwrap();
    assert_eq!(healthy.errors.figures().unprovoked, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_log_and_a_server_that_died_by_itself_are_reported() {
    let profile = Plan::safe().phases[0].nodes[0].clone();
    let cluster = Cluster::start(&[profile], None).await.unwrap();
    cluster.check_servers().await;
    assert!(cluster.troubles().is_empty(), "{:?}", cluster.troubles());
    // A caught module panic is logged as this line.
    let log = redis::cmd("DEBUG")
        .arg("LOG")
        .arg("redis-lock: LOCK.FENCE panicked: injected")
        .to_owned();
    chaos::cluster::command(&cluster.nodes[0].url, &log, Duration::from_secs(5))
        .await
        .unwrap();
    cluster.check_servers().await;
    let troubles = cluster.troubles();
    assert!(
        troubles.len() == 1 && troubles[0].contains("LOCK.FENCE panicked: injected"),
        "{troubles:?}"
    );
    // Read once: the same line is not reported again.
    cluster.check_servers().await;
    assert_eq!(cluster.troubles().len(), 1);
    // The server dies by itself (no fault killed it).
    let mut claim = cluster.nodes[0].claim().await;
    let pid = libc::pid_t::try_from(claim.pid()).unwrap();
    // SAFETY: kill(2) on our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while claim.is_running() {
        assert!(Instant::now() < deadline, "the server did not die");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(claim);
    cluster.check_servers().await;
    let troubles = cluster.troubles();
    assert!(
        troubles
            .last()
            .is_some_and(|t| t.contains("node 0 was not running at the end of the phase")),
        "{troubles:?}"
    );
}
