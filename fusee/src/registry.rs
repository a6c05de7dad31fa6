//! The workflow types an engine knows: each a name and a type-erased
//! function from a [`Ctx`] and the run's input bytes to the run's future.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ctx::Ctx;
use crate::error::Error;
use crate::workflow::{Failure, Workflow, decode, encode};

/// A run's code, started: its result encoded, or its failure.
pub(crate) type RunFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, Failure>>>>;

/// A workflow's code, type-erased: called once per run (and again, in
/// replay, after each restart), on the run's shard thread.
pub(crate) type Handler = Arc<dyn Fn(Ctx, &[u8]) -> RunFuture + Send + Sync>;

/// A step mock (feature `testing`): given the step's real function,
/// the function to run instead (which may call the real one).
#[cfg(feature = "testing")]
pub(crate) type StepWrap = Arc<dyn Fn(crate::ctx::StepFn) -> crate::ctx::StepFn + Send + Sync>;

/// Whether bytes decode as a workflow's input type, type-erased: what a
/// start is checked by before anything is recorded.
pub(crate) type InputCheck = fn(&[u8]) -> Result<(), serde_json::Error>;

/// One registered workflow type: its code, and its input type's check.
#[derive(Clone)]
struct Entry {
    handler: Handler,
    check_input: InputCheck,
}

/// `check_input` of a workflow whose input type is `I`.
fn decodes_as<I: DeserializeOwned>(input: &[u8]) -> Result<(), serde_json::Error> {
    decode::<I>(input).map(drop)
}

/// The registered workflow types, shared by the engine and its shards.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    handlers: Arc<RwLock<BTreeMap<String, Entry>>>,
    /// Step mocks by step name (the test kit's; `Ctx::step` asks).
    #[cfg(feature = "testing")]
    mocks: Arc<RwLock<BTreeMap<String, StepWrap>>>,
}

impl Registry {
    /// Registers `f` as the code of `workflow`; a name registered before is
    /// [`Error::AlreadyRegistered`] and changes nothing.
    pub(crate) fn register<I, O, F, Fut>(&self, workflow: Workflow<I, O>, f: F) -> Result<(), Error>
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, Failure>> + 'static,
    {
        let handler: Handler = Arc::new(move |ctx: Ctx, input: &[u8]| -> RunFuture {
            match decode::<I>(input) {
                Ok(input) => {
                    let fut = f(ctx, input);
                    Box::pin(async move {
                        let out = fut.await?;
                        encode(&out).map_err(|e| {
                            Failure::with_kind("codec", format!("result does not encode: {e}"))
                        })
                    })
                }
                Err(e) => {
                    let failure = Failure::with_kind(
                        "codec",
                        format!("input does not decode as the workflow's input type: {e}"),
                    );
                    Box::pin(async move { Err(failure) })
                }
            }
        });
        let mut handlers = self.handlers.write().unwrap_or_else(|e| e.into_inner());
        match handlers.entry(workflow.name().to_string()) {
            std::collections::btree_map::Entry::Occupied(e) => Err(Error::AlreadyRegistered {
                wtype: e.key().clone(),
            }),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(Entry {
                    handler,
                    check_input: decodes_as::<I>,
                });
                Ok(())
            }
        }
    }

    /// The code of `wtype`, if registered.
    pub(crate) fn get(&self, wtype: &str) -> Option<Handler> {
        self.handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(wtype)
            .map(|e| Arc::clone(&e.handler))
    }

    /// Whether `input` decodes as the input type of `wtype`; `None` when
    /// `wtype` is not registered here (nothing to check against).
    pub(crate) fn check_input(
        &self,
        wtype: &str,
        input: &[u8],
    ) -> Option<Result<(), serde_json::Error>> {
        let check = self
            .handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(wtype)?
            .check_input;
        Some(check(input))
    }

    /// Whether `wtype` is registered.
    pub(crate) fn contains(&self, wtype: &str) -> bool {
        self.handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(wtype)
    }

    /// Every registered name, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        self.handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}

/// Step mocks (feature `testing`): the test kit replaces a step's function
/// by name; `Ctx::step` looks here when the code calls a step.
#[cfg(feature = "testing")]
impl Registry {
    /// Steps named `name` run `wrap`'s function from now on (replacing an
    /// earlier mock of that name).
    pub(crate) fn set_step_mock(&self, name: &str, wrap: StepWrap) {
        self.mocks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), wrap);
    }

    /// Steps named `name` run their own function again.
    pub(crate) fn clear_step_mock(&self, name: &str) {
        self.mocks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    /// The mock of steps named `name`, if any.
    pub(crate) fn step_mock(&self, name: &str) -> Option<StepWrap> {
        self.mocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// What `crate::flow` needs: the registry's identity, shared by an engine
/// and every run of it (its clones point at the same table).
impl Registry {
    /// The same for every clone of this registry, different from every
    /// other registry alive.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.handlers) as *const () as usize
    }
}
