//! The workflow types an engine knows: each a name and, for each version
//! registered, a type-erased function from a run's context and its input
//! bytes to the run's future.
//!
//! Versions: a run records in its `Start` the version of the code it began
//! with, and its code is that version's on every replay; a new run takes
//! the newest version registered, unless its start names one. Version 0 is
//! what [`Registry::register`] registers (every run started before
//! versions existed recorded 0).
//!
//! The table is generic over the context its code is called with
//! ([`Code`]): the workflow API (`ctx.rs`) holds a registry, so the
//! registry must not name `Ctx` (that was an import circle). `engine.rs`
//! says what `Ctx`'s host and step mocks are: the one module that knows
//! both the engine and the context.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::workflow::{Failure, Workflow, decode, encode};

/// A run's code, started: its result encoded, or its failure.
pub(crate) type RunFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, Failure>>>>;

/// A workflow's code, type-erased: called once per run (and again, in
/// replay, after each restart), on the run's shard thread, with the run's
/// context `C`.
pub(crate) type Handler<C> = Arc<dyn Fn(C, &[u8]) -> RunFuture + Send + Sync>;

/// The context workflow code is called with, and what a registry of such
/// code keeps beside it.
pub(crate) trait Code: 'static {
    /// The engine the code runs in, as flow control's code reaches it
    /// (set once, by `Engine::register_flow_control`).
    type Host: Clone + Send + Sync + 'static;
    /// A step mock (feature `testing`): given the step's real function,
    /// the function to run instead.
    #[cfg(feature = "testing")]
    type StepMock: Clone + Send + Sync + 'static;
}

/// Whether bytes decode as a workflow's input type, type-erased: what a
/// start is checked by before anything is recorded.
pub(crate) type InputCheck = fn(&[u8]) -> Result<(), serde_json::Error>;

/// One registered workflow type: its code, and its input type's check.
struct Entry<C> {
    handler: Handler<C>,
    check_input: InputCheck,
}

/// `check_input` of a workflow whose input type is `I`.
fn decodes_as<I: DeserializeOwned>(input: &[u8]) -> Result<(), serde_json::Error> {
    decode::<I>(input).map(drop)
}

/// Each registered version of one workflow type's code.
type Versions<C> = BTreeMap<u32, Entry<C>>;

/// The registered workflow types, shared by the engine and its shards:
/// by name, then by version.
pub(crate) struct Registry<C: Code> {
    handlers: Arc<RwLock<BTreeMap<String, Versions<C>>>>,
    /// The engine the code runs in, once flow control is registered.
    host: Arc<OnceLock<C::Host>>,
    /// No run's code starts while set: the engine was opened with
    /// `Config::replay_check` and its check has not run yet.
    held_back: Arc<AtomicBool>,
    /// Step mocks by step name (the test kit's; `Ctx::step` asks).
    #[cfg(feature = "testing")]
    mocks: Arc<RwLock<BTreeMap<String, C::StepMock>>>,
    /// Where the simulator takes its runs' stream requests (it has no
    /// engine to send them through); set once by its world.
    #[cfg(feature = "testing")]
    sim_post: Arc<OnceLock<crate::stream::SimPost>>,
}

// By hand: a derive would ask `C: Clone`/`C: Default`, and a clone is the
// same table (every field an `Arc`).
impl<C: Code> Clone for Registry<C> {
    fn clone(&self) -> Self {
        Self {
            handlers: Arc::clone(&self.handlers),
            host: Arc::clone(&self.host),
            held_back: Arc::clone(&self.held_back),
            #[cfg(feature = "testing")]
            mocks: Arc::clone(&self.mocks),
            #[cfg(feature = "testing")]
            sim_post: Arc::clone(&self.sim_post),
        }
    }
}

impl<C: Code> Default for Registry<C> {
    fn default() -> Self {
        Self {
            handlers: Arc::default(),
            host: Arc::default(),
            held_back: Arc::default(),
            #[cfg(feature = "testing")]
            mocks: Arc::default(),
            #[cfg(feature = "testing")]
            sim_post: Arc::default(),
        }
    }
}

impl<C: Code> Registry<C> {
    /// Registers `f` as version 0 of the code of `workflow` (see
    /// [`register_version`](Self::register_version)); the simulator's and
    /// the runtime's unit tests register through it.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn register<I, O, F, Fut>(&self, workflow: Workflow<I, O>, f: F) -> Result<(), Error>
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(C, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, Failure>> + 'static,
    {
        self.register_version(workflow, 0, f)
    }

    /// Registers `f` as version `version` of the code of `workflow`; a
    /// version registered before is [`Error::AlreadyRegistered`] and
    /// changes nothing.
    pub(crate) fn register_version<I, O, F, Fut>(
        &self,
        workflow: Workflow<I, O>,
        version: u32,
        f: F,
    ) -> Result<(), Error>
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(C, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, Failure>> + 'static,
    {
        let handler: Handler<C> = Arc::new(move |ctx: C, input: &[u8]| -> RunFuture {
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
        let versions = handlers.entry(workflow.name().to_string()).or_default();
        match versions.entry(version) {
            std::collections::btree_map::Entry::Occupied(_) => Err(Error::AlreadyRegistered {
                wtype: workflow.name().to_string(),
                version,
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

    /// Version `version` of the code of `wtype`, if registered (see
    /// [`code`](Self::code)).
    pub(crate) fn get(&self, wtype: &str, version: u32) -> Option<Handler<C>> {
        // No error built for a miss: recovered runs ask before the
        // embedder registers, thousands at a time.
        let handlers = self.handlers.read().unwrap_or_else(|e| e.into_inner());
        let entry = handlers.get(wtype)?.get(&version)?;
        Some(Arc::clone(&entry.handler))
    }

    /// Version `version` of the code of `wtype`, or why there is none: the
    /// type is not registered ([`Error::UnknownWorkflow`]), or not at that
    /// version ([`Error::UnknownVersion`]). One look at the table.
    pub(crate) fn code(&self, wtype: &str, version: u32) -> Result<Handler<C>, Error> {
        let handlers = self.handlers.read().unwrap_or_else(|e| e.into_inner());
        let Some(versions) = handlers.get(wtype) else {
            return Err(Error::UnknownWorkflow {
                wtype: wtype.to_string(),
                registered: handlers.keys().cloned().collect(),
            });
        };
        match versions.get(&version) {
            Some(e) => Ok(Arc::clone(&e.handler)),
            None => Err(Error::UnknownVersion {
                wtype: wtype.to_string(),
                version,
                registered: versions.keys().copied().collect(),
            }),
        }
    }

    /// The code of `wtype` at `version` for a run's code to start with:
    /// `None` while starts are held back ([`hold_back`](Self::hold_back)),
    /// as if not registered yet, so the run waits for its code. A replay
    /// reads [`get`](Self::get).
    pub(crate) fn to_start(&self, wtype: &str, version: u32) -> Option<Handler<C>> {
        if self.held_back.load(Ordering::Acquire) {
            return None;
        }
        self.get(wtype, version)
    }

    /// The version a new run of `wtype` takes: `asked` if registered, else
    /// the newest registered; [`Error::UnknownWorkflow`] for a type not
    /// registered, [`Error::UnknownVersion`] for a version not registered.
    pub(crate) fn version_to_start(&self, wtype: &str, asked: Option<u32>) -> Result<u32, Error> {
        // A type with no version registered has no newest: `code` then
        // says the type is unknown.
        let version = asked.or_else(|| self.newest(wtype)).unwrap_or(0);
        self.code(wtype, version).map(|_| version)
    }

    /// The newest version of `wtype` registered here, if any.
    pub(crate) fn newest(&self, wtype: &str) -> Option<u32> {
        self.handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(wtype)?
            .keys()
            .next_back()
            .copied()
    }

    /// Holds back (`true`) or lets go (`false`) every run's code start
    /// (see [`to_start`](Self::to_start)).
    pub(crate) fn hold_back(&self, held: bool) {
        self.held_back.store(held, Ordering::Release);
    }

    /// Whether runs' code starts are held back.
    pub(crate) fn is_held_back(&self) -> bool {
        self.held_back.load(Ordering::Acquire)
    }

    /// Whether `input` decodes as the input type of `wtype` at `version`
    /// (the newest when `None`); `None` when that is not registered here
    /// (nothing to check against).
    pub(crate) fn check_input(
        &self,
        wtype: &str,
        version: Option<u32>,
        input: &[u8],
    ) -> Option<Result<(), serde_json::Error>> {
        let handlers = self.handlers.read().unwrap_or_else(|e| e.into_inner());
        let versions = handlers.get(wtype)?;
        let entry = match version {
            Some(v) => versions.get(&v)?,
            None => versions.values().next_back()?,
        };
        let check = entry.check_input;
        drop(handlers);
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
impl<C: Code> Registry<C> {
    /// Steps named `name` run `wrap`'s function from now on (replacing an
    /// earlier mock of that name).
    pub(crate) fn set_step_mock(&self, name: &str, wrap: C::StepMock) {
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
    pub(crate) fn step_mock(&self, name: &str) -> Option<C::StepMock> {
        self.mocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// What flow control needs: the engine the code runs in, reached from a
/// run's context (no map of engines: each registry holds its own).
impl<C: Code> Registry<C> {
    /// Sets the engine this registry's code runs in; a second call keeps
    /// the first (one registry belongs to one engine).
    pub(crate) fn set_host(&self, host: C::Host) {
        let _ = self.host.set(host);
    }

    /// The engine this registry's code runs in, once set.
    pub(crate) fn host(&self) -> Option<C::Host> {
        self.host.get().cloned()
    }

    /// Sets where the simulator takes this registry's runs' stream
    /// requests (a second call keeps the first).
    #[cfg(feature = "testing")]
    pub(crate) fn set_sim_post(&self, post: crate::stream::SimPost) {
        let _ = self.sim_post.set(post);
    }

    /// Where the simulator takes stream requests, if it runs this code.
    #[cfg(feature = "testing")]
    pub(crate) fn sim_post(&self) -> Option<crate::stream::SimPost> {
        self.sim_post.get().cloned()
    }
}
