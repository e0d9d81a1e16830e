//! A lab of real kernel networking for the network phase: each lock node in
//! a network namespace of its own, the clients in two or more client
//! namespaces, and one link per (client group, node) pair, so that a fault
//! can cut, delay or thin out what one group of clients sees of one node
//! while the other group sees it whole.
//!
//! Each link is a wire: a TUN device in the node's namespace and one in the
//! group's, joined by the suite's packet forwarder ([`crate::wire`]), which
//! drops, delays and thins out IP packets per direction. Both ends are the
//! kernel's own TCP stacks in their own namespaces; only the wire between
//! them is ours. (`tc netem` would do the wire's job, but this machine's
//! kernel is built without `sch_netem` and loads no modules.)
//!
//! Addresses are in 10.213.0.0/16, on the lab's links only: group `g`
//! reaches node `i` at 10.213.g.(4i+1) (its own end is .4i+2), and the
//! suite's own connections (readiness, restarts, `settle`) reach node `i`
//! through an admin veth at 10.213.B.(4i+2), B a block from 100 up that no
//! interface uses, whose other end (.4i+1) is the only thing the lab adds
//! to the namespace the suite runs in. Dropping the lab
//! stops the wires and deletes its namespaces, and every device with them.
//!
//! It needs root and `ip` (iproute2); where a namespace cannot be made the
//! lab says why and the phase fails: a network phase never passes by not
//! running.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::wire::{Impairment, Wire};
use crate::Error;

/// What a fault does to one direction of a link.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// Every packet dropped.
    Cut,
    /// `delay_ms` ± `jitter_ms`.
    Delay { delay_ms: u64, jitter_ms: u64 },
    /// Each packet dropped with this probability, percent.
    Loss { percent: u32 },
}

impl Shape {
    fn impairment(&self) -> Impairment {
        match *self {
            Shape::Cut => Impairment {
                loss_percent: 100,
                ..Impairment::default()
            },
            Shape::Delay {
                delay_ms,
                jitter_ms,
            } => Impairment {
                delay_ms,
                jitter_ms,
                ..Impairment::default()
            },
            Shape::Loss { percent } => Impairment {
                loss_percent: percent.min(100),
                ..Impairment::default()
            },
        }
    }
}

/// Which way of a (group, node) link a shape applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the clients to the node.
    Requests,
    /// From the node back to the clients.
    Replies,
}

/// Labs made by this process so far: each one's names are its own, also
/// when two run at once (tests in parallel).
static LABS: AtomicU32 = AtomicU32::new(0);
/// Labs are built one at a time, so that each sees the others' admin
/// addresses when it picks its own.
static BUILDING: Mutex<()> = Mutex::new(());

/// The namespaces and links of one phase.
pub struct Lab {
    prefix: String,
    /// A short stem for the admin links' outer ends (15 bytes at most).
    short: String,
    nodes: usize,
    groups: usize,
    /// Namespaces made so far (deleted on drop, also after a failed set-up).
    made: Vec<String>,
    /// The links, `group * nodes + node`.
    wires: Vec<Wire>,
    /// The third byte of the admin links' addresses: a /24 that no
    /// interface of the suite's namespace uses (a lab that just ended may
    /// still hold its own for a moment: the kernel deletes namespaces in
    /// the background).
    admin_block: u8,
}

impl Lab {
    /// Makes `nodes` node namespaces and `groups` client namespaces and
    /// links every group to every node.
    pub fn new(nodes: usize, groups: usize) -> Result<Lab, Error> {
        if nodes > 60 || !(1..=50).contains(&groups) {
            return Err(Error::Setup(format!(
                "a lab of {nodes} nodes and {groups} client groups does not fit its address plan"
            )));
        }
        let pid = std::process::id();
        let seq = LABS.fetch_add(1, Ordering::Relaxed);
        let mut lab = Lab {
            prefix: format!("rlock{pid}-{seq}"),
            short: format!("rl{}x{}", pid % 100_000, seq % 100),
            nodes,
            groups,
            made: Vec::new(),
            wires: Vec::new(),
            admin_block: 0,
        };
        let building = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
        let built = lab.build();
        drop(building);
        built.map_err(|e| {
            Error::Setup(format!(
                "the network phase needs network namespaces and TUN devices (root, iproute2's ip, /dev/net/tun): {e}"
            ))
        })?;
        Ok(lab)
    }

    fn build(&mut self) -> Result<(), Error> {
        let used = Command::new("ip")
            .args(["-4", "-br", "addr"])
            .output()
            .map_err(|e| Error::Setup(format!("ip: {e}")))?;
        let used = String::from_utf8_lossy(&used.stdout).into_owned();
        self.admin_block = (100..=250u8)
            .find(|block| !used.contains(&format!("10.213.{block}.")))
            .ok_or_else(|| Error::Setup("no free 10.213.x.0/24 for the admin links".into()))?;
        for i in 0..self.nodes {
            let ns = self.node_ns(i);
            ip(&["netns", "add", &ns])?;
            self.made.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            // The admin link: its outer end is the only thing the lab adds
            // to the suite's own namespace.
            let outer = format!("{}a{i}", self.short);
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "admin", "netns", &ns,
            ])?;
            ip(&[
                "addr",
                "add",
                &format!("10.213.{}.{}/30", self.admin_block, 4 * i + 1),
                "dev",
                &outer,
            ])?;
            ip(&["link", "set", &outer, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/30", self.admin_address(i)),
                "dev",
                "admin",
            ])?;
            ip(&["-n", &ns, "link", "set", "admin", "up"])?;
        }
        for g in 0..self.groups {
            let ns = self.group_ns(g);
            ip(&["netns", "add", &ns])?;
            self.made.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        for g in 0..self.groups {
            for i in 0..self.nodes {
                let (node_ns, group_ns) = (self.node_ns(i), self.group_ns(g));
                let (node_end, group_end) = (format!("g{g}"), format!("n{i}"));
                let node_tun = open_in(&node_ns, &node_end)?;
                let group_tun = open_in(&group_ns, &group_end)?;
                let (node_addr, group_addr) = (self.node_address(g, i), self.group_address(g, i));
                for (ns, dev, local, peer) in [
                    (&node_ns, &node_end, &node_addr, &group_addr),
                    (&group_ns, &group_end, &group_addr, &node_addr),
                ] {
                    ip(&["-n", ns, "addr", "add", local, "peer", peer, "dev", dev])?;
                    ip(&["-n", ns, "link", "set", dev, "up"])?;
                }
                self.wires
                    .push(Wire::start(format!("g{g}n{i}"), group_tun, node_tun)?);
            }
        }
        Ok(())
    }

    pub fn node_ns(&self, node: usize) -> String {
        format!("{}-n{node}", self.prefix)
    }

    pub fn group_ns(&self, group: usize) -> String {
        format!("{}-c{group}", self.prefix)
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Where the suite's own connections reach node `node`.
    pub fn admin_address(&self, node: usize) -> String {
        format!("10.213.{}.{}", self.admin_block, 4 * node + 2)
    }

    /// Where the clients of `group` reach node `node`.
    pub fn node_address(&self, group: usize, node: usize) -> String {
        format!("10.213.{group}.{}", 4 * node + 1)
    }

    /// The group's own end of its link to `node`.
    fn group_address(&self, group: usize, node: usize) -> String {
        format!("10.213.{group}.{}", 4 * node + 2)
    }

    fn wire(&self, group: usize, node: usize) -> Result<&Wire, Error> {
        self.wires
            .get(group * self.nodes + node)
            .ok_or_else(|| Error::Fault(format!("no link between group {group} and node {node}")))
    }

    /// Shapes one way of the (group, node) link (replacing what was there).
    pub fn shape(&self, group: usize, node: usize, way: Way, shape: &Shape) -> Result<(), Error> {
        self.wire(group, node)?
            .set(way == Way::Requests, shape.impairment());
        Ok(())
    }

    /// Heals one way of the (group, node) link.
    pub fn heal(&self, group: usize, node: usize, way: Way) -> Result<(), Error> {
        self.wire(group, node)?
            .set(way == Way::Requests, Impairment::default());
        Ok(())
    }

    /// Packets the wires carried and dropped so far, all links together.
    pub fn packets(&self) -> (u64, u64) {
        self.wires.iter().fold((0, 0), |(sent, dropped), wire| {
            let (s, d) = wire.packets();
            (sent + s, dropped + d)
        })
    }

    /// Opens the namespace of `group` for [`enter`].
    pub fn group_handle(&self, group: usize) -> Result<NetnsHandle, Error> {
        let path = format!("/run/netns/{}", self.group_ns(group));
        let file = File::open(&path).map_err(|e| Error::Setup(format!("{path}: {e}")))?;
        Ok(NetnsHandle {
            file: Arc::new(file),
            failed: Arc::new(AtomicBool::new(false)),
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Stops the wires (their TUN devices go with their descriptors);
        // deleting a namespace deletes its devices.
        self.wires.clear();
        for ns in self.made.drain(..) {
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}

/// An open network namespace that threads can move into.
#[derive(Clone)]
pub struct NetnsHandle {
    file: Arc<File>,
    failed: Arc<AtomicBool>,
}

impl NetnsHandle {
    /// Moves the calling thread into the namespace (for a runtime's
    /// `on_thread_start`: every socket the thread opens is then opened
    /// there). A failure is remembered for [`NetnsHandle::check`].
    pub fn enter(&self) {
        if nix::sched::setns(self.file.as_raw_fd(), nix::sched::CloneFlags::CLONE_NEWNET).is_err() {
            self.failed.store(true, Ordering::SeqCst);
        }
    }

    /// Whether every thread that tried got in.
    pub fn check(&self) -> Result<(), Error> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(Error::Setup(
                "a client thread could not enter its network namespace (setns)".into(),
            ));
        }
        Ok(())
    }
}

/// Opens a TUN device named `name` inside namespace `ns`: a thread of its
/// own enters the namespace (a device belongs to the namespace it is made
/// in) and hands the descriptor back.
fn open_in(ns: &str, name: &str) -> Result<File, Error> {
    let path = format!("/run/netns/{ns}");
    let netns = File::open(&path).map_err(|e| Error::Setup(format!("{path}: {e}")))?;
    let name = name.to_string();
    std::thread::spawn(move || {
        nix::sched::setns(netns.as_raw_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| Error::Setup(format!("setns: {e}")))?;
        crate::wire::open_tun(&name)
    })
    .join()
    .map_err(|_| Error::Setup("the TUN opener panicked".into()))?
}

fn ip(args: &[&str]) -> Result<(), Error> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Setup(format!("ip: {e}")))?;
    if !output.status.success() {
        return Err(Error::Setup(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_plan_gives_every_link_its_own_subnet() {
        let lab = Lab {
            prefix: "x".into(),
            short: "y".into(),
            nodes: 5,
            groups: 2,
            made: Vec::new(),
            wires: Vec::new(),
            admin_block: 100,
        };
        let mut seen = std::collections::HashSet::new();
        for g in 0..2 {
            for i in 0..5 {
                assert!(seen.insert(lab.node_address(g, i)));
            }
        }
        for i in 0..5 {
            assert!(seen.insert(lab.admin_address(i)));
        }
        assert_eq!(lab.node_address(1, 4), "10.213.1.17");
        assert_eq!(lab.group_address(1, 4), "10.213.1.18");
        assert_eq!(Shape::Cut.impairment().loss_percent, 100);
        assert_eq!(Shape::Loss { percent: 250 }.impairment().loss_percent, 100);
    }
}
