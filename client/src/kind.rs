//! What kind of lock a handle takes: exclusive (one holder), shared (a read
//! lock: any number of holders), or a permit of a semaphore (a shared lock
//! with a limit on its holders).

use std::num::NonZeroU32;

/// How a handle holds its resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kind {
    /// One holder at a time (`LOCK.ACQUIRE`).
    #[default]
    Exclusive,
    /// Held together with other shared holders (`LOCK.ACQUIRE … SHARED`);
    /// with `permits`, at most that many at once (`… SHARED LIMIT n`).
    Shared { permits: Option<NonZeroU32> },
}

impl Kind {
    /// A read lock.
    pub const SHARED: Kind = Kind::Shared { permits: None };

    /// One of `permits` permits of a semaphore.
    pub fn permit_of(permits: NonZeroU32) -> Kind {
        Kind::Shared {
            permits: Some(permits),
        }
    }

    /// Held together with others.
    pub fn is_shared(self) -> bool {
        matches!(self, Kind::Shared { .. })
    }
}
