//! Shard state (skeleton: the types other modules need first).

/// Location of a frame in the run store: `offset` uses at most 48 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BlobRef {
    /// Where the frame starts (backend-defined address, at most 48 bits).
    pub offset: u64,
    /// The frame's length in bytes.
    pub len: u32,
}

/// What an armed timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TimerKind {
    /// A durable sleep.
    Sleep = 0,
    /// A step's next attempt.
    Retry = 1,
    /// A wait's deadline.
    WaitTimeout = 2,
    /// The workflow's deadline.
    Deadline = 3,
}

impl TimerKind {
    /// The kind with this tag.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Sleep,
            1 => Self::Retry,
            2 => Self::WaitTimeout,
            3 => Self::Deadline,
            _ => return None,
        })
    }
}
