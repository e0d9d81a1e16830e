//! The `metrics` feature: the client records through the `metrics` facade,
//! `metrics-exporter-prometheus` serves it on `/metrics`, and a scrape over
//! HTTP after a known sequence of lock operations finds every series with
//! the right count. One test: the recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{test_config, Cluster};
use metrics_exporter_prometheus::PrometheusBuilder;
use redis_lock_client::{Config, Error, LockStatus};

/// `GET /metrics` on the exporter.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The sum of the samples of `name` whose labels include all of `labels`
/// (0 when there is none).
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, sample) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let all = labels.iter().all(|(k, v)| {
                series_labels
                    .split(',')
                    .any(|l| l == format!("{k}=\"{v}\""))
            });
            all.then(|| sample.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Scrapes until `name{labels}` reads `expected` (the exporter renders
/// what was recorded; a gauge change from a background task may lag).
fn eventually_reads(port: u16, name: &str, labels: &[(&str, &str)], expected: f64) -> String {
    let mut text = String::new();
    for _ in 0..200 {
        text = scrape(port);
        if value(&text, name, labels) == expected {
            return text;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{name}{labels:?} is not {expected}:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scrape_shows_every_series_with_its_count() {
    let port = testkit::free_port();
    PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], port))
        .install()
        .unwrap();
    let mut cluster = Cluster::start(3);
    let config = Config {
        node_timeout: Duration::from_millis(150),
        retry_count: 0,
        ..test_config()
    };
    let redlock = cluster.client_with(config);
    let ttl = Duration::from_millis(2_000);

    // Five locks taken and released.
    for i in 0..5 {
        let lock = redlock.acquire(format!("metrics:{i}"), ttl).await.unwrap();
        lock.release().await.unwrap();
    }
    let acquired = [("outcome", "acquired")];
    let text = eventually_reads(
        port,
        "redis_lock_client_acquire_duration_seconds_count",
        &acquired,
        5.0,
    );
    assert_eq!(
        value(
            &text,
            "redis_lock_client_releases_total",
            &[("result", "released")]
        ),
        5.0
    );
    assert_eq!(value(&text, "redis_lock_client_held", &[]), 0.0);
    assert_eq!(
        value(&text, "redis_lock_client_node_errors_total", &[]),
        0.0
    );

    // One held: the gauge shows it; a rival is refused (contended, and it
    // did not wait: no retries); two extensions.
    let held = redlock.acquire("metrics:held", ttl).await.unwrap();
    let rival = redlock.lock("metrics:held", ttl).unwrap();
    assert!(matches!(
        rival.try_acquire().await,
        Err(Error::NotAcquired { .. })
    ));
    held.extend().await.unwrap();
    held.extend().await.unwrap();
    let text = eventually_reads(port, "redis_lock_client_held", &[], 1.0);
    assert_eq!(
        value(
            &text,
            "redis_lock_client_acquire_duration_seconds_count",
            &[("outcome", "contended")]
        ),
        1.0
    );
    assert_eq!(
        value(&text, "redis_lock_client_wait_duration_seconds_count", &[]),
        0.0
    );
    assert_eq!(
        value(
            &text,
            "redis_lock_client_extensions_total",
            &[("result", "ok")]
        ),
        2.0
    );
    held.release().await.unwrap();
    eventually_reads(port, "redis_lock_client_held", &[], 0.0);

    // A node down: its connection errors are counted under its name.
    let down = cluster.servers[2].port();
    cluster.servers[2].kill9();
    let lock = redlock.acquire("metrics:degraded", ttl).await.unwrap();
    let node = format!("127.0.0.1:{down}");
    let text = scrape(port);
    assert!(
        value(
            &text,
            "redis_lock_client_node_errors_total",
            &[("node", &node)]
        ) >= 1.0,
        "no error counted for {node}:\n{text}"
    );

    // A watchdog that loses its lock: a second node goes, no majority is
    // left to renew it.
    let guard = lock.watchdog().unwrap();
    cluster.servers[1].kill9();
    let status = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .unwrap();
    assert!(matches!(status, LockStatus::Lost { .. }), "{status:?}");
    let text = eventually_reads(port, "redis_lock_client_lost_total", &[], 1.0);
    assert!(
        value(
            &text,
            "redis_lock_client_extensions_total",
            &[("result", "failed")]
        ) >= 1.0
    );
    let _ = guard.release().await;
    let text = eventually_reads(port, "redis_lock_client_held", &[], 0.0);
    assert_eq!(
        value(
            &text,
            "redis_lock_client_acquire_duration_seconds_count",
            &acquired
        ),
        7.0
    );
    // Every series of the client carries the prefix.
    assert!(text
        .lines()
        .filter(|l| l.contains("redis_lock"))
        .all(|l| l.starts_with("redis_lock_client_") || l.starts_with('#')));
}
