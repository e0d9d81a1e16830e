//! A TCP proxy with faults on demand, in front of a real server: a test
//! points a client at the proxy's free loopback port and tells it to cut
//! the connections, stall (hold every byte and every new connection) and
//! resume, delay each chunk of bytes, hold what clients send (all of it,
//! or a connection's from the first chunk that contains a given text) and
//! deliver it later, in order or reordered across connections. It records
//! what the clients sent through it, so that a test can see which commands
//! reached the server and in what order. Threads of its own (no runtime
//! needed); stopped when dropped.
//!
//! Each direction of a connection is a reader thread that queues what it
//! reads (at most [`QUEUED_MAX`] bytes, then it stops reading: the sender
//! feels the back-pressure as it would from a slow peer) and a writer
//! thread that passes the queue on. No thread writes to a socket while it
//! holds the proxy's state lock, so a peer that stops reading (a server
//! stopped with SIGSTOP whose socket buffer is full) blocks the one
//! writer that writes to it, never the others nor the proxy's methods. A
//! connection's sockets are let go once both of its directions are done.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// The most bytes queued in one direction of a connection before its
/// reader stops reading.
pub const QUEUED_MAX: usize = 4 << 20;

/// How long [`FaultProxy::deliver_reordered`] waits for the server's
/// answer to one connection's bytes before it delivers the next
/// connection's (a command that blocks on the server answers later).
const REPLY_WAIT: Duration = Duration::from_secs(2);

/// One direction of a connection: the bytes read and not passed on yet.
#[derive(Default)]
struct Link {
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
    /// The reader saw the end of its stream.
    eof: bool,
    /// Passed on: chunks written.
    chunks: u64,
}

/// One client connection (and its connection to the server, once made).
struct Conn {
    /// Both ends' sockets, to shut down on a cut.
    sockets: Vec<TcpStream>,
    /// Client to server.
    up: Link,
    /// Server to client.
    down: Link,
    /// Held: the client's bytes wait in `up` until delivered.
    holding: bool,
    /// When the first of the bytes it holds arrived (for reordering).
    first_held: Option<u64>,
    /// Writer threads ended (the entry goes when both have).
    writers_done: u8,
}

/// What the proxy's threads share.
#[derive(Default)]
struct State {
    /// The server's port on loopback, for connections accepted from now on.
    upstream: u16,
    /// While set, no byte moves and no new connection reaches the server.
    stalled: bool,
    /// Extra wait before each chunk of bytes is passed on.
    delay: Duration,
    /// Bumped by each cut: a connection from before it is closed.
    generation: u64,
    /// Set when the proxy is dropped.
    stopping: bool,
    /// Open connections, by number (accept order).
    conns: BTreeMap<u64, Conn>,
    /// While set, every connection's client bytes are held.
    hold_all: bool,
    /// A connection's client bytes are held from the first chunk that
    /// contains this.
    hold_from: Option<Vec<u8>>,
    /// Counts the connections' first held chunks as they arrive.
    holds: u64,
    /// Client connections accepted so far.
    accepted: usize,
    /// Everything the clients sent that was passed on to the server, in
    /// the order it was passed on.
    sent: Vec<u8>,
    /// Reads from the clients that were passed on (about one per write a
    /// client made, when the proxy keeps up).
    reads: usize,
}

impl State {
    /// The live connection `id` of `generation`, if it is still open.
    fn live(&mut self, id: u64, generation: u64) -> Option<&mut Conn> {
        if self.stopping || self.generation != generation {
            return None;
        }
        self.conns.get_mut(&id)
    }
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

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Which way a thread moves bytes.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// Client to server (recorded; can be held).
    Up,
    /// Server to client.
    Down,
}

impl Conn {
    fn link(&mut self, way: Way) -> &mut Link {
        match way {
            Way::Up => &mut self.up,
            Way::Down => &mut self.down,
        }
    }

    fn shut_down(&self) {
        for socket in &self.sockets {
            let _ = socket.shutdown(Shutdown::Both);
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
            state: Mutex::new(State {
                upstream,
                ..State::default()
            }),
            changed: Condvar::new(),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(listener, accepting));
        FaultProxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:port` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Passes the connections accepted from now on to
    /// `127.0.0.1:upstream`; those open now stay with the server they have.
    /// Another server on the proxy's address, as a restarted one is to its
    /// clients, while an old connection of theirs still reaches the old one.
    pub fn retarget(&self, upstream: u16) {
        self.shared.lock().upstream = upstream;
    }

    /// Closes every open connection, both ends, dropping the bytes held.
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.generation += 1;
        for (_, conn) in std::mem::take(&mut state.conns) {
            conn.shut_down();
        }
        self.shared.changed.notify_all();
    }

    /// Holds every byte in both directions, and every new connection
    /// (accepted, not passed on), until [`FaultProxy::resume`].
    pub fn stall(&self) {
        self.shared.lock().stalled = true;
    }

    /// Passes on what was held by [`FaultProxy::stall`], and everything
    /// after it.
    pub fn resume(&self) {
        self.shared.lock().stalled = false;
        self.shared.changed.notify_all();
    }

    /// Waits `delay` before passing on each chunk of bytes (zero: none).
    pub fn delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// Holds what every client sends (its connections stay open and the
    /// server's replies still flow) until [`FaultProxy::deliver`] or
    /// [`FaultProxy::deliver_reordered`].
    pub fn hold(&self) {
        let mut state = self.shared.lock();
        state.hold_all = true;
        for conn in state.conns.values_mut() {
            conn.holding = true;
        }
    }

    /// Holds what a connection sends from the first chunk (one read of
    /// the proxy's) that contains `needle` on, until delivered: the
    /// connection's earlier bytes went through, its later ones wait behind
    /// that chunk, and other connections are not touched. A needle split
    /// across two reads is not seen; a client's command is one read unless
    /// it is large.
    pub fn hold_from(&self, needle: &str) {
        self.shared.lock().hold_from = Some(needle.as_bytes().to_vec());
    }

    /// Connections with client bytes held now.
    pub fn held(&self) -> usize {
        let state = self.shared.lock();
        state
            .conns
            .values()
            .filter(|c| c.holding && c.first_held.is_some())
            .count()
    }

    /// Ends holding: every held connection's bytes go on, each
    /// connection's in order (the connections in no order of their own,
    /// as on a network).
    pub fn deliver(&self) {
        let mut state = self.shared.lock();
        state.hold_all = false;
        state.hold_from = None;
        for conn in state.conns.values_mut() {
            conn.holding = false;
            conn.first_held = None;
        }
        self.shared.changed.notify_all();
    }

    /// Ends holding, delivering the held connections one by one, the one
    /// whose first held bytes arrived last first: later segments reach the server
    /// before earlier ones of another connection (each connection's own
    /// bytes stay in order, as TCP keeps them). Before the next connection
    /// it waits until the server answered the bytes just delivered (at
    /// most two seconds: a blocked command answers later), so the server
    /// has read them first. Returns how many connections it delivered.
    pub fn deliver_reordered(&self) -> usize {
        let mut state = self.shared.lock();
        state.hold_all = false;
        state.hold_from = None;
        let mut order: Vec<(u64, u64)> = state
            .conns
            .iter()
            .filter_map(|(id, conn)| conn.first_held.map(|since| (since, *id)))
            .collect();
        // Held connections with nothing held just go on.
        for conn in state.conns.values_mut() {
            if conn.first_held.is_none() {
                conn.holding = false;
            }
        }
        order.sort_unstable_by(|a, b| b.cmp(a));
        let mut delivered = 0;
        for (_, id) in order {
            let Some(conn) = state.conns.get_mut(&id) else {
                continue;
            };
            conn.holding = false;
            conn.first_held = None;
            let replies = conn.down.chunks;
            let queued = !conn.up.queue.is_empty();
            self.shared.changed.notify_all();
            delivered += 1;
            if !queued {
                continue;
            }
            let until = Instant::now() + REPLY_WAIT;
            loop {
                let answered = match state.conns.get(&id) {
                    Some(conn) => conn.up.queue.is_empty() && conn.down.chunks > replies,
                    None => true,
                };
                let now = Instant::now();
                if answered || now >= until || state.stopping {
                    break;
                }
                state = self
                    .shared
                    .changed
                    .wait_timeout(state, until - now)
                    .map(|(state, _)| state)
                    .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            }
        }
        delivered
    }

    /// Client connections accepted so far (reconnections included).
    pub fn accepted(&self) -> usize {
        self.shared.lock().accepted
    }

    /// Connections open now (a connection is let go, sockets and all,
    /// once both its directions are closed or it is cut).
    pub fn open(&self) -> usize {
        self.shared.lock().conns.len()
    }

    /// Everything clients sent that was passed on to the server, in order.
    pub fn sent(&self) -> Vec<u8> {
        self.shared.lock().sent.clone()
    }

    /// Reads from the clients passed on to the server so far: about the
    /// number of writes the clients made (several writes that arrive
    /// between two reads count once).
    pub fn reads(&self) -> usize {
        self.shared.lock().reads
    }

    /// How many times `needle` occurs in what was passed on to the server.
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
            for (_, conn) in std::mem::take(&mut state.conns) {
                conn.shut_down();
            }
        }
        self.shared.changed.notify_all();
        // Wake the accepting thread so it sees `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    for (id, client) in (0u64..).zip(listener.incoming()) {
        let Ok(client) = client else { continue };
        let (generation, upstream) = {
            let mut state = shared.lock();
            if state.stopping {
                return;
            }
            state.accepted += 1;
            let Ok(socket) = client.try_clone() else {
                continue;
            };
            let holding = state.hold_all;
            let generation = state.generation;
            let upstream = state.upstream;
            state.conns.insert(
                id,
                Conn {
                    sockets: vec![socket],
                    up: Link::default(),
                    down: Link::default(),
                    holding,
                    first_held: None,
                    writers_done: 0,
                },
            );
            (generation, upstream)
        };
        let shared = Arc::clone(&shared);
        thread::spawn(move || connect(client, upstream, id, generation, shared));
    }
}

/// Forgets connection `id`, shutting its sockets down.
fn close(shared: &Shared, id: u64) {
    let mut state = shared.lock();
    if let Some(conn) = state.conns.remove(&id) {
        conn.shut_down();
    }
    shared.changed.notify_all();
}

/// One client connection: reaches the server once not stalled, then passes
/// bytes both ways.
fn connect(client: TcpStream, upstream: u16, id: u64, generation: u64, shared: Arc<Shared>) {
    // A stalled proxy holds new connections too (their handshake waits).
    {
        let mut state = shared.lock();
        loop {
            if state.live(id, generation).is_none() {
                drop(state);
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
            if !state.stalled {
                break;
            }
            state = shared.wait(state);
        }
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        close(&shared, id);
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let ends = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    );
    let (Ok(client_in), Ok(server_in), Ok(client_out), Ok(server_out)) = ends else {
        let _ = server.shutdown(Shutdown::Both);
        close(&shared, id);
        return;
    };
    {
        let mut state = shared.lock();
        let Some(conn) = state.live(id, generation) else {
            drop(state);
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        };
        conn.sockets.push(server);
    }
    for (way, from, to) in [
        (Way::Up, client_in, server_out),
        (Way::Down, server_in, client_out),
    ] {
        let reading = Arc::clone(&shared);
        thread::spawn(move || read(from, way, id, generation, reading));
        let writing = Arc::clone(&shared);
        thread::spawn(move || write(to, way, id, generation, writing));
    }
}

/// Reads `from` into the connection's queue for `way` until it ends.
fn read(mut from: TcpStream, way: Way, id: u64, generation: u64, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).unwrap_or(0);
        let mut state = shared.lock();
        loop {
            let Some(conn) = state.live(id, generation) else {
                return;
            };
            if n == 0 {
                conn.link(way).eof = true;
                shared.changed.notify_all();
                return;
            }
            if conn.link(way).bytes < QUEUED_MAX {
                break;
            }
            state = shared.wait(state);
        }
        let chunk = &buf[..n];
        let starts_hold = way == Way::Up
            && state
                .hold_from
                .as_deref()
                .is_some_and(|needle| contains(chunk, needle));
        let mut holds = state.holds;
        let Some(conn) = state.live(id, generation) else {
            return;
        };
        if starts_hold {
            conn.holding = true;
        }
        if way == Way::Up && conn.holding && conn.first_held.is_none() {
            holds += 1;
            conn.first_held = Some(holds);
        }
        let link = conn.link(way);
        link.bytes += n;
        link.queue.push_back(chunk.to_vec());
        state.holds = holds;
        shared.changed.notify_all();
    }
}

/// Passes the connection's queue for `way` on to `to`, as the faults
/// allow, without holding the state lock while it writes.
fn write(mut to: TcpStream, way: Way, id: u64, generation: u64, shared: Arc<Shared>) {
    loop {
        let mut state = shared.lock();
        let next = loop {
            let stalled = state.stalled;
            let delay = state.delay;
            let Some(conn) = state.live(id, generation) else {
                return;
            };
            let held = way == Way::Up && conn.holding;
            let link = conn.link(way);
            if !stalled && !held {
                if let Some(chunk) = link.queue.pop_front() {
                    link.bytes -= chunk.len();
                    break Some((chunk, delay));
                }
                if link.eof {
                    break None;
                }
            }
            state = shared.wait(state);
        };
        // Room in the queue again: wake its reader.
        shared.changed.notify_all();
        drop(state);
        let Some((chunk, delay)) = next else {
            // The sender closed its side and everything it sent is on:
            // close ours towards the peer, and leave the other way open.
            let _ = to.shutdown(Shutdown::Write);
            finished(&shared, id, generation);
            return;
        };
        if !delay.is_zero() {
            thread::sleep(delay);
            let mut state = shared.lock();
            let stalled = state.stalled;
            let mut holds = state.holds;
            let Some(conn) = state.live(id, generation) else {
                return;
            };
            // A stall or hold that began meanwhile keeps the chunk (first
            // in line).
            let held = way == Way::Up && conn.holding;
            if stalled || held {
                if held && conn.first_held.is_none() {
                    holds += 1;
                    conn.first_held = Some(holds);
                }
                let link = conn.link(way);
                link.bytes += chunk.len();
                link.queue.push_front(chunk);
                state.holds = holds;
                continue;
            }
        }
        if to.write_all(&chunk).is_err() {
            close(&shared, id);
            return;
        }
        let mut state = shared.lock();
        if way == Way::Up {
            state.sent.extend_from_slice(&chunk);
            state.reads += 1;
        }
        if let Some(conn) = state.live(id, generation) {
            conn.link(way).chunks += 1;
        }
        shared.changed.notify_all();
    }
}

/// One direction of connection `id` is done; the connection goes when
/// both are.
fn finished(shared: &Shared, id: u64, generation: u64) {
    let mut state = shared.lock();
    let Some(conn) = state.live(id, generation) else {
        return;
    };
    conn.writers_done += 1;
    if conn.writers_done >= 2 {
        if let Some(conn) = state.conns.remove(&id) {
            conn.shut_down();
        }
    }
    shared.changed.notify_all();
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;
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

    fn plain_server() -> RedisServer {
        RedisServer::start_with(ServerOptions::default().without_module())
    }

    fn connection(proxy: &FaultProxy) -> redis::Connection {
        redis::Client::open(proxy.url())
            .expect("the proxy's URL")
            .get_connection()
            .expect("a connection through the proxy")
    }

    /// `cmd` on `conn` in a thread of its own (it may wait for the proxy).
    fn in_thread(
        mut conn: redis::Connection,
        cmd: redis::Cmd,
    ) -> std::thread::JoinHandle<(redis::RedisResult<redis::Value>, redis::Connection)> {
        std::thread::spawn(move || (cmd.query(&mut conn), conn))
    }

    #[test]
    fn stalls_resumes_delays_and_cuts() {
        let server = plain_server();
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
        assert_eq!(proxy.open(), 0);
        assert!(redis::cmd("PING").query::<String>(&mut conn).is_err());
        let mut again = client.get_connection().expect("a new connection");
        let pong: String = redis::cmd("PING").query(&mut again).expect("PING again");
        assert_eq!(pong, "PONG");
        assert_eq!(proxy.accepted(), 2);
        assert_eq!(proxy.open(), 1);

        // A connection the client closes is let go (its sockets with it).
        drop(again);
        drop(conn);
        assert!(
            wait_until(Duration::from_secs(10), || proxy.open() == 0),
            "{} connections still open after their clients closed them",
            proxy.open()
        );
    }

    /// A connection's bytes are held from the chunk that has the needle on
    /// (its earlier ones and other connections go through), and delivered.
    #[test]
    fn holds_a_connection_from_a_needle_and_delivers_it() {
        let server = plain_server();
        let proxy = FaultProxy::start(server.port());
        let mut other = connection(&proxy);
        let mut conn = connection(&proxy);
        proxy.hold_from("needle");
        let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
        assert_eq!(pong, "PONG");
        let set = in_thread(conn, redis::Cmd::set("needle", "1").clone());
        assert!(wait_until(Duration::from_secs(10), || proxy.held() == 1));
        // The other connection is not held.
        let _: () = redis::cmd("SET")
            .arg("free")
            .arg("1")
            .query(&mut other)
            .expect("SET on the other connection");
        assert!(key_exists(&server, "free"));
        assert!(!key_exists(&server, "needle"));
        assert_eq!(proxy.sent_count("needle"), 0);
        proxy.deliver();
        let (reply, _conn) = set.join().expect("the SET thread");
        assert_eq!(reply.expect("SET once delivered"), redis::Value::Okay);
        assert!(key_exists(&server, "needle"));
        assert_eq!(proxy.held(), 0);
    }

    /// Held bytes of two connections reach the server in the reverse of
    /// the order they were sent in: the write sent first wins.
    #[test]
    fn reorders_held_traffic_across_connections() {
        let server = plain_server();
        let proxy = FaultProxy::start(server.port());
        let first = connection(&proxy);
        let second = connection(&proxy);
        proxy.hold();
        let a = in_thread(first, redis::Cmd::set("key", "first").clone());
        assert!(wait_until(Duration::from_secs(10), || proxy.held() == 1));
        let b = in_thread(second, redis::Cmd::set("key", "second").clone());
        assert!(wait_until(Duration::from_secs(10), || proxy.held() == 2));
        assert!(!key_exists(&server, "key"));
        assert_eq!(proxy.deliver_reordered(), 2);
        for writer in [a, b] {
            let (reply, _conn) = writer.join().expect("a writer thread");
            assert_eq!(reply.expect("SET once delivered"), redis::Value::Okay);
        }
        let value: String = redis::cmd("GET")
            .arg("key")
            .query(&mut server.conn())
            .expect("GET");
        assert_eq!(
            value, "first",
            "the later SET was not delivered before the earlier one"
        );
    }

    /// After a retarget, new connections reach the new server and an
    /// old one still reaches the old server.
    #[test]
    fn a_retarget_moves_new_connections_only() {
        let (old, new) = (plain_server(), plain_server());
        let proxy = FaultProxy::start(old.port());
        let mut before = connection(&proxy);
        proxy.retarget(new.port());
        let mut after = connection(&proxy);
        let set = |conn: &mut redis::Connection, key: &str| {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(1)
                .query(conn)
                .expect("SET through the proxy");
        };
        set(&mut before, "before");
        set(&mut after, "after");
        assert!(key_exists(&old, "before") && !key_exists(&new, "before"));
        assert!(key_exists(&new, "after") && !key_exists(&old, "after"));
    }

    /// A peer that stops reading (a server stopped with SIGSTOP, its
    /// socket buffer full) blocks neither the proxy's methods nor a cut.
    #[test]
    fn a_peer_that_stops_reading_blocks_nothing_else() {
        // A server that accepts and never reads.
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let upstream = listener.local_addr().expect("address").port();
        let (keep, kept) = mpsc::channel();
        std::thread::spawn(move || {
            for socket in listener.incoming().flatten() {
                if keep.send(socket).is_err() {
                    break;
                }
            }
        });
        let proxy = FaultProxy::start(upstream);
        let mut client = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
        let writer = std::thread::spawn(move || {
            // Far more than every buffer on the way holds.
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..64 {
                if client.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        assert!(
            wait_until(Duration::from_secs(10), || proxy.reads() > 0),
            "nothing was passed on"
        );
        let (done, finished) = mpsc::channel();
        let asking = std::thread::spawn(move || {
            // Until the writer is blocked (or done), then once more.
            let start = Instant::now();
            while !writer.is_finished() && start.elapsed() < Duration::from_secs(5) {
                let _ = proxy.reads();
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = proxy.accepted();
            proxy.cut();
            let _ = done.send(());
            let _ = writer.join();
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(60)).is_ok(),
            "the proxy's methods hung while a peer did not read"
        );
        let _ = asking.join();
        drop(kept);
    }
}
