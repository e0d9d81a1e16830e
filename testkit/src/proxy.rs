//! A TCP proxy with faults on demand, in front of a real server: a test
//! points a client at the proxy's free loopback port and tells it to cut
//! the connections, stall (hold every byte and every new connection) and
//! resume, or delay each chunk of bytes. It records what the clients sent
//! through it, so that a test can see which commands reached the server
//! and in what order. Threads of its own (no runtime needed); stopped when
//! dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// What the proxy's threads share.
#[derive(Default)]
struct State {
    /// While set, no byte moves and no new connection reaches the server.
    stalled: bool,
    /// Extra wait before each chunk of bytes is passed on.
    delay: Duration,
    /// Bumped by each cut: a connection from before it is closed.
    generation: u64,
    /// Set when the proxy is dropped.
    stopping: bool,
    /// Sockets of the open connections (both ends), by generation.
    sockets: Vec<(u64, TcpStream)>,
    /// Client connections accepted so far.
    accepted: usize,
    /// Everything the clients sent that was passed on to the server, in
    /// the order it was passed on.
    sent: Vec<u8>,
    /// Reads from the clients that were passed on (about one per write a
    /// client made, when the proxy keeps up).
    reads: usize,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits while stalled; false if the connection of `generation` was cut
    /// (or the proxy stops) meanwhile.
    fn pass(&self, generation: u64) -> Option<(MutexGuard<'_, State>, Duration)> {
        let mut state = self.lock();
        loop {
            if state.stopping || state.generation != generation {
                return None;
            }
            if !state.stalled {
                let delay = state.delay;
                return Some((state, delay));
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// A fault-injecting TCP proxy on a free loopback port.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on a free loopback port and passes each connection on to
    /// `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("proxy: bind a loopback port");
        let port = listener
            .local_addr()
            .expect("proxy: the listener's address")
            .port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(listener, upstream, accepting));
        FaultProxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:port` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Closes every open connection, both ends, dropping the bytes held.
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.generation += 1;
        for (_, socket) in state.sockets.drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        self.shared.changed.notify_all();
    }

    /// Holds every byte in both directions, and every new connection
    /// (accepted, not passed on), until [`FaultProxy::resume`].
    pub fn stall(&self) {
        self.shared.lock().stalled = true;
    }

    /// Passes on what was held, and everything after it.
    pub fn resume(&self) {
        self.shared.lock().stalled = false;
        self.shared.changed.notify_all();
    }

    /// Waits `delay` before passing on each chunk of bytes (zero: none).
    pub fn delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// Client connections accepted so far (reconnections included).
    pub fn accepted(&self) -> usize {
        self.shared.lock().accepted
    }

    /// Everything clients sent that reached the server, in order.
    pub fn sent(&self) -> Vec<u8> {
        self.shared.lock().sent.clone()
    }

    /// Reads from the clients passed on to the server so far: about the
    /// number of writes the clients made (several writes that arrive
    /// between two reads count once).
    pub fn reads(&self) -> usize {
        self.shared.lock().reads
    }

    /// How many times `needle` occurs in what reached the server.
    pub fn sent_count(&self, needle: &str) -> usize {
        let sent = self.sent();
        let needle = needle.as_bytes();
        if needle.is_empty() {
            return 0;
        }
        sent.windows(needle.len()).filter(|w| *w == needle).count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopping = true;
            for (_, socket) in state.sockets.drain(..) {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
        self.shared.changed.notify_all();
        // Wake the accepting thread so it sees `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn accept(listener: TcpListener, upstream: u16, shared: Arc<Shared>) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let generation = {
            let mut state = shared.lock();
            if state.stopping {
                return;
            }
            state.accepted += 1;
            state.generation
        };
        let shared = Arc::clone(&shared);
        thread::spawn(move || connect(client, upstream, generation, shared));
    }
}

/// One client connection: reaches the server once not stalled, then passes
/// bytes both ways.
fn connect(client: TcpStream, upstream: u16, generation: u64, shared: Arc<Shared>) {
    {
        let mut state = shared.lock();
        match client.try_clone() {
            Ok(socket) => state.sockets.push((generation, socket)),
            Err(_) => return,
        }
    }
    // A stalled proxy holds new connections too (their handshake waits).
    if shared.pass(generation).is_none() {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    {
        let mut state = shared.lock();
        if state.generation != generation || state.stopping {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        match server.try_clone() {
            Ok(socket) => state.sockets.push((generation, socket)),
            Err(_) => return,
        }
    }
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let upward = Arc::clone(&shared);
    thread::spawn(move || pump(client_in, server, generation, upward, true));
    pump(server_in, client, generation, shared, false);
}

/// Passes bytes from `from` to `to` until either closes or the connection
/// is cut; `record`: the client's side (what reaches the server is kept).
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    generation: u64,
    shared: Arc<Shared>,
    record: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Some((mut state, delay)) = shared.pass(generation) else {
            break;
        };
        if !delay.is_zero() {
            drop(state);
            thread::sleep(delay);
            // Passed on and recorded under the lock: a cut or a stall
            // after this point sees the bytes delivered or not, never both.
            match shared.pass(generation) {
                Some((again, _)) => state = again,
                None => break,
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if record {
            state.sent.extend_from_slice(&buf[..n]);
            state.reads += 1;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::FaultProxy;
    use crate::{wait_until, RedisServer, ServerOptions};

    fn key_exists(server: &RedisServer, key: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query::<i64>(&mut server.conn())
            .unwrap_or(0)
            == 1
    }

    #[test]
    fn stalls_resumes_delays_and_cuts() {
        let server = RedisServer::start_with(ServerOptions::default().without_module());
        let proxy = FaultProxy::start(server.port());
        let client = redis::Client::open(proxy.url()).expect("the proxy's URL");
        let mut conn = client
            .get_connection()
            .expect("a connection through the proxy");
        let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
        assert_eq!(pong, "PONG");
        assert_eq!(proxy.accepted(), 1);

        // Stalled: the command is held, and passed on once resumed.
        proxy.stall();
        let writer = std::thread::spawn(move || {
            let reply: redis::RedisResult<String> =
                redis::cmd("SET").arg("held").arg("1").query(&mut conn);
            (reply, conn)
        });
        assert!(
            !wait_until(Duration::from_millis(300), || key_exists(&server, "held")),
            "a stalled proxy passed a command on"
        );
        assert_eq!(proxy.sent_count("held"), 0);
        proxy.resume();
        let (reply, mut conn) = writer.join().expect("the writer thread");
        assert_eq!(reply.expect("SET after the resume"), "OK");
        assert!(key_exists(&server, "held"));
        assert_eq!(proxy.sent_count("held"), 1);
        // PING and SET, each sent after the reply before it: a read each.
        assert!(proxy.reads() >= 2, "{} reads", proxy.reads());

        // Delayed: each direction waits at least the delay.
        proxy.delay(Duration::from_millis(100));
        let start = Instant::now();
        let _: String = redis::cmd("PING").query(&mut conn).expect("a delayed PING");
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
        proxy.delay(Duration::ZERO);

        // Cut: the connection is closed; a new one goes through.
        proxy.cut();
        assert!(redis::cmd("PING").query::<String>(&mut conn).is_err());
        let mut again = client.get_connection().expect("a new connection");
        let pong: String = redis::cmd("PING").query(&mut again).expect("PING again");
        assert_eq!(pong, "PONG");
        assert_eq!(proxy.accepted(), 2);
    }
}
