//! The two execution engines that run on top of the pipeline: Intent (observe →
//! decide → act against a committed revision) and Script (repeatable JavaScript /
//! Python programs with `ctx.call`). Both reach the pipeline only through the
//! narrow [`Pipeline`] trait (run a command, look up specs, the catalog's engine
//! data, the FactStore, their own state), so they share the registry, validation,
//! admission, ownership journals and history of direct calls and cannot reach
//! anything else of the `ExecutionHost`.

pub mod catalog;
pub mod intent;
pub mod script;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use aab_plugin_api::protocol::IntentProvider;

use crate::error::CommandError;
use crate::facts::Facts;
use crate::pipeline::{CallResult, InternalCall};
use crate::registry::Registry;

/// What the engines use of the pipeline, and nothing more.
pub trait Pipeline: Send + Sync {
    /// Run one command through the whole pipeline (validation, idempotency,
    /// admission, ownership, dispatch, history). Takes the `Arc` because a call may
    /// re-enter an engine, which needs the host again.
    fn call<'a>(self: Arc<Self>, call: InternalCall<'a>) -> Pin<Box<dyn Future<Output = Result<CallResult, CommandError>> + Send + 'a>>;
    /// The registered commands (spec lookup, validation, authorisation).
    fn registry(&self) -> &Registry;
    /// The Intent providers of the loaded plugins, with the declaring plugin's name.
    fn intent_providers(&self) -> Vec<(String, IntentProvider)>;
    /// What the engine schemas took from the loaded catalog.
    fn engine_catalog(&self) -> &catalog::EngineCatalog;
    fn facts(&self) -> &Facts;
    /// The engines' own per-runtime state.
    fn intents(&self) -> &intent::IntentEngine;
    fn scripts(&self) -> &script::ScriptEngine;
}

/// How an engine holds the pipeline.
pub type Host = Arc<dyn Pipeline>;
