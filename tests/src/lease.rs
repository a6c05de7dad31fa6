//! The lease harness (`tests/lease_takeover.rs`) and its child
//! (`lease-child`): engine processes sharing one PostgreSQL store under
//! [`fusee::Ownership::Lease`]. What the parent tells a child on its stdin
//! ([`Command`]), what the child reports on its stdout ([`Report`], a line
//! each), the result its workflow computes ([`RunValue`]) and the lines its
//! steps write to the outside service's ledger ([`LedgerLine`]).

use std::fmt;

/// Shards of the store: every child opens it so.
pub const SHARDS: u32 = 4;

/// Workflows a child drives at once.
pub const IN_FLIGHT: usize = 32;

/// The workflow ID of run number `n`.
pub fn workflow_id(n: u64) -> String {
    format!("lease-{n}")
}

/// A line the parent writes to a child's stdin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Drive runs `first` to `end` (exclusive): start each (attaching to
    /// one that exists), send it `go`, wait for its result; a call for a
    /// shard another process owns is tried again until this child owns it
    /// (or closes).
    Drive {
        /// The first run.
        first: u64,
        /// One past the last run.
        end: u64,
    },
    /// Close the engine and exit.
    Close,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Drive { first, end } => write!(f, "drive {first} {end}"),
            Command::Close => f.write_str("close"),
        }
    }
}

impl Command {
    /// Parses a line [`fmt::Display`] wrote.
    pub fn parse(line: &str) -> Option<Command> {
        let mut words = line.split_whitespace();
        let command = match words.next()? {
            "drive" => Command::Drive {
                first: words.next()?.parse().ok()?,
                end: words.next()?.parse().ok()?,
            },
            "close" => Command::Close,
            _ => return None,
        };
        words.next().is_none().then_some(command)
    }
}

/// A line of a child's stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The engine opened.
    Opened,
    /// The shards the child's engine owns now (reported at each change).
    Owns(Vec<u32>),
    /// The engine acknowledged the start of run `n`: a new run, or one
    /// that existed (`attached`).
    Started {
        /// The run's number.
        n: u64,
        /// Whether the start attached to an existing run.
        attached: bool,
    },
    /// The engine acknowledged this child's `go` signal to run `n`.
    Signalled(u64),
    /// Run `n`'s result, as [`RunValue`] formats it.
    Result {
        /// The run's number.
        n: u64,
        /// The result.
        value: String,
    },
    /// A call about run `n` failed in a way the harness never expects.
    Error {
        /// The run's number.
        n: u64,
        /// The error.
        message: String,
    },
    /// The engine closed; the child exits.
    Closed,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Opened => f.write_str("opened"),
            Report::Owns(shards) => {
                f.write_str("owns")?;
                for s in shards {
                    write!(f, " {s}")?;
                }
                Ok(())
            }
            Report::Started { n, attached } => {
                write!(
                    f,
                    "started {n} {}",
                    if *attached { "attached" } else { "new" }
                )
            }
            Report::Signalled(n) => write!(f, "signalled {n}"),
            Report::Result { n, value } => write!(f, "result {n} {value}"),
            Report::Error { n, message } => {
                write!(f, "error {n} {}", message.replace('\n', " "))
            }
            Report::Closed => f.write_str("closed"),
        }
    }
}

impl Report {
    /// Parses a line [`fmt::Display`] wrote.
    pub fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let number = |s: &str| s.parse::<u64>().ok();
        Some(match word {
            "opened" if rest.is_empty() => Report::Opened,
            "closed" if rest.is_empty() => Report::Closed,
            "owns" => Report::Owns(
                rest.split_whitespace()
                    .map(|s| s.parse().ok())
                    .collect::<Option<Vec<u32>>>()?,
            ),
            "started" => {
                let (n, how) = rest.split_once(' ')?;
                Report::Started {
                    n: number(n)?,
                    attached: match how {
                        "attached" => true,
                        "new" => false,
                        _ => return None,
                    },
                }
            }
            "signalled" => Report::Signalled(number(rest)?),
            "result" => {
                let (n, value) = rest.split_once(' ')?;
                Report::Result {
                    n: number(n)?,
                    value: value.to_owned(),
                }
            }
            "error" => {
                let (n, message) = rest.split_once(' ').unwrap_or((rest, ""));
                Report::Error {
                    n: number(n)?,
                    message: message.to_owned(),
                }
            }
            _ => return None,
        })
    }
}

/// What run `n`'s workflow returns: its number, the random token it
/// recorded first, the tag of the child whose `go` signal it took, and the
/// tags of the children whose steps `charge` and `ship` ran to the results
/// it recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunValue {
    /// The run's number.
    pub n: u64,
    /// The recorded random number (`ctx.random()`), the input of both steps.
    pub token: u64,
    /// The tag of the child whose `go` the run took.
    pub go: u64,
    /// The tag of the child whose `charge` step's result was recorded.
    pub charged: u64,
    /// The tag of the child whose `ship` step's result was recorded.
    pub shipped: u64,
}

impl fmt::Display for RunValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}:{}",
            self.n, self.token, self.go, self.charged, self.shipped
        )
    }
}

impl RunValue {
    /// Parses a value [`fmt::Display`] wrote.
    pub fn parse(s: &str) -> Option<RunValue> {
        let mut parts = s.split(':').map(|p| p.parse::<u64>().ok());
        let value = RunValue {
            n: parts.next()??,
            token: parts.next()??,
            go: parts.next()??,
            charged: parts.next()??,
            shipped: parts.next()??,
        };
        parts.next().is_none().then_some(value)
    }
}

/// One call of the outside service a step makes: the step's idempotency
/// key and what it asked for. The service (a file per child) logs every
/// call, so the parent can check that no key ever came with two inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerLine {
    /// The step's idempotency key.
    pub key: String,
    /// The run whose step it is.
    pub n: u64,
    /// What the step asked for: `charge TOKEN` or `ship TOKEN GO`.
    pub input: String,
}

impl fmt::Display for LedgerLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\t{}\t{}", self.key, self.n, self.input)
    }
}

impl LedgerLine {
    /// Parses a line [`fmt::Display`] wrote.
    pub fn parse(line: &str) -> Option<LedgerLine> {
        let mut parts = line.split('\t');
        let line = LedgerLine {
            key: parts.next()?.to_owned(),
            n: parts.next()?.parse().ok()?,
            input: parts.next()?.to_owned(),
        };
        parts.next().is_none().then_some(line)
    }

    /// The token the step's input names.
    pub fn token(&self) -> Option<u64> {
        self.input.split(' ').nth(1)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        for c in [Command::Drive { first: 3, end: 9 }, Command::Close] {
            assert_eq!(Command::parse(&c.to_string()), Some(c));
        }
        for r in [
            Report::Opened,
            Report::Owns(vec![]),
            Report::Owns(vec![0, 3]),
            Report::Started {
                n: 7,
                attached: true,
            },
            Report::Started {
                n: 8,
                attached: false,
            },
            Report::Signalled(9),
            Report::Result {
                n: 1,
                value: "1:2:3:4:5".into(),
            },
            Report::Error {
                n: 2,
                message: "it broke".into(),
            },
            Report::Closed,
        ] {
            assert_eq!(Report::parse(&r.to_string()), Some(r));
        }
        let v = RunValue {
            n: 1,
            token: u64::MAX,
            go: 2,
            charged: 3,
            shipped: 4,
        };
        assert_eq!(RunValue::parse(&v.to_string()), Some(v));
        let l = LedgerLine {
            key: "lease-1/1/1".into(),
            n: 1,
            input: "ship 77 2".into(),
        };
        assert_eq!(LedgerLine::parse(&l.to_string()), Some(l.clone()));
        assert_eq!(l.token(), Some(77));
        assert_eq!(Report::parse("owns x"), None);
        assert_eq!(Command::parse("drive 1"), None);
    }
}
