//! The names a workflow author and a caller share: typed references to
//! workflows ([`Workflow`]) and signals ([`Signal`]), how a workflow fails
//! ([`Failure`]), and the payload codec (JSON).
//!
//! A [`Workflow<I, O>`] is a name with the input and output types attached,
//! declared once as a `const` and used by both sides, so a caller cannot
//! start a workflow with the wrong input type or read its result as the
//! wrong type, as long as both sides share that one constant. The types
//! are the constant's, not the name's: two constants of one name with
//! other types compile. An engine in which the workflow is registered
//! checks a start's input against the registered type and refuses one
//! that does not decode ([`crate::Error::Codec`], recording nothing); a
//! result read as the wrong type is a codec error when read:
//!
//! ```
//! use fusee::{Signal, Workflow};
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Order;
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Receipt;
//! const CHECKOUT: Workflow<Order, Receipt> = Workflow::new("checkout");
//! const APPROVED: Signal<bool> = Signal::new("approved");
//! ```

use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The `codec` byte of a run's `Start` record: payloads are JSON.
pub(crate) const CODEC_JSON: u8 = 1;

/// A workflow type: its name, and its input and output types.
pub struct Workflow<I, O> {
    name: &'static str,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Workflow<I, O> {
    /// A workflow named `name` (the `wtype` its runs record: never rename a
    /// workflow that has runs).
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            _types: PhantomData,
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<I, O> Clone for Workflow<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I, O> Copy for Workflow<I, O> {}

impl<I, O> fmt::Debug for Workflow<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Workflow({:?})", self.name)
    }
}

/// A signal: its name and its payload type.
pub struct Signal<T> {
    name: &'static str,
    _type: PhantomData<fn(T)>,
}

impl<T> Signal<T> {
    /// A signal named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            _type: PhantomData,
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for Signal<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Signal<T> {}

impl<T> fmt::Debug for Signal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signal({:?})", self.name)
    }
}

/// An update: a named handler a workflow registers ([`crate::Ctx::on_update`]),
/// its argument and result types. An update is recorded, and its handler
/// runs as part of the run's code at the update's place in the journal.
pub struct Update<I, O> {
    name: &'static str,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Update<I, O> {
    /// An update named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            _types: PhantomData,
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<I, O> Clone for Update<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I, O> Copy for Update<I, O> {}

impl<I, O> fmt::Debug for Update<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Update({:?})", self.name)
    }
}

/// A query: a named read-only handler a workflow registers
/// ([`crate::Ctx::on_query`]) over its current state, answered without
/// recording anything.
pub struct Query<I, O> {
    name: &'static str,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Query<I, O> {
    /// A query named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            _types: PhantomData,
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<I, O> Clone for Query<I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I, O> Copy for Query<I, O> {}

impl<I, O> fmt::Debug for Query<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Query({:?})", self.name)
    }
}

/// Why a workflow run (or a step, as seen by its workflow) failed: a
/// message for people, and an optional kind for code to match on. Any
/// error converts into it with `?`, so workflow code reads like ordinary
/// fallible code.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    /// What went wrong.
    pub message: String,
    /// A short machine-readable kind (an error type's name, "timeout",
    /// "cancelled", ...), if the code gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl Failure {
    /// A failure with `message` and no kind.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: None,
        }
    }

    /// A failure with `message` and `kind`.
    pub fn with_kind(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: Some(kind.into()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Some(k) => write!(f, "{k}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(e: E) -> Self {
        Self::new(e.to_string())
    }
}

/// Payloads cross the journal as JSON.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(value)
}

/// Reads a JSON payload back.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(bytes)
}
