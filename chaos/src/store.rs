//! The store the holders write to: a real server with the module, on which
//! every write is `LOCK.FENCED fence:<resource> <token> SET data:<resource>
//! <token>`, so that the store itself refuses a stale token (issue #31).
//! Beside it, each write also goes to the same store without a fence (`SET
//! plain:<resource> <token>`): the negative control, which takes whatever
//! arrives. The checker's own record of tokens is the oracle both are
//! compared with (`checker`).
//!
//! The store is not a node of the lock service and gets no faults: it
//! stands for the database the locks protect.

use std::sync::{Mutex, MutexGuard};

use testkit::RedisServer;

/// What the fenced store did with a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreWrite {
    Accepted,
    /// `STALE …`: the fence has accepted a higher token.
    RefusedStale,
}

/// A resource's values at the end: what the fenced store and the
/// unfenced control hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoredValues {
    pub fenced: Option<u64>,
    pub unfenced: Option<u64>,
}

pub struct Store {
    server: RedisServer,
    conn: Mutex<redis::Connection>,
    /// A hidden switch for the checker's own test: the "fenced" write goes
    /// through without its fence, as a store that does not check tokens.
    bypass_fence: bool,
}

fn data_key(resource: &str) -> String {
    format!("data:{resource}")
}

fn plain_key(resource: &str) -> String {
    format!("plain:{resource}")
}

fn fence_key(resource: &str) -> String {
    format!("fence:{resource}")
}

impl Store {
    /// Starts a store: a fresh server with the module.
    pub fn start() -> Store {
        Self::start_with(false)
    }

    /// A store whose fenced writes skip the fence (for the checker's test:
    /// the check must catch it).
    pub fn start_without_fence() -> Store {
        Self::start_with(true)
    }

    fn start_with(bypass_fence: bool) -> Store {
        let server = RedisServer::start();
        let conn = Mutex::new(server.conn());
        Store {
            server,
            conn,
            bypass_fence,
        }
    }

    fn conn(&self) -> MutexGuard<'_, redis::Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `token` for `resource`, fenced and (the control) unfenced.
    pub fn write(&self, resource: &str, token: u64) -> Result<StoreWrite, String> {
        let mut conn = self.conn();
        let data = data_key(resource);
        let fenced = if self.bypass_fence {
            redis::cmd("SET")
                .arg(&data)
                .arg(token)
                .query::<redis::Value>(&mut *conn)
        } else {
            redis::cmd("LOCK.FENCED")
                .arg(fence_key(resource))
                .arg(token)
                .arg("SET")
                .arg(&data)
                .arg(token)
                .query::<redis::Value>(&mut *conn)
        };
        let outcome = match fenced {
            Ok(_) => StoreWrite::Accepted,
            Err(e) if e.code() == Some("STALE") => StoreWrite::RefusedStale,
            Err(e) => return Err(format!("the store refused a fenced write: {e}")),
        };
        redis::cmd("SET")
            .arg(plain_key(resource))
            .arg(token)
            .query::<redis::Value>(&mut *conn)
            .map_err(|e| format!("the store refused an unfenced write: {e}"))?;
        Ok(outcome)
    }

    /// What the store holds for `resource` now.
    pub fn values(&self, resource: &str) -> Result<StoredValues, String> {
        let mut conn = self.conn();
        let mut get = |key: String| {
            redis::cmd("GET")
                .arg(key)
                .query::<Option<u64>>(&mut *conn)
                .map_err(|e| format!("the store's value of {resource}: {e}"))
        };
        Ok(StoredValues {
            fenced: get(data_key(resource))?,
            unfenced: get(plain_key(resource))?,
        })
    }

    /// The store's server log (for a failure report).
    pub fn log(&self) -> String {
        self.server.log()
    }
}
