//! The two execution engines that run on top of the pipeline: Intent (observe →
//! decide → act against a committed revision) and Script (repeatable JavaScript /
//! Python programs with `ctx.call`). Both reach devices only through
//! [`crate::pipeline::ExecutionHost::call`], so they share the registry,
//! validation, admission, ownership journals and history of direct calls.

pub mod catalog;
pub mod intent;
pub mod script;
