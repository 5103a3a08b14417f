//! aab provider plugin for the Web SDK: serves the `aab.web/v2` WebSocket endpoint
//! that pages embedding `sdk/ai-app-bridge-web.js` connect to, and executes the
//! `web-*` commands against them (observation, managed actions with completion
//! receipts, capture windows over the FactStore, execution reconcile).
//!
//! Layout: [`manifest`] (command specs and schemas), [`command_list`] (each
//! spec paired with its handler and typed arguments), [`wire`] (protocol shapes),
//! [`server`] + [`socket`] (HTTP/WebSocket endpoint), [`state`] (sessions and
//! request routing), [`execution`] (the pending-action table), [`capture`] +
//! [`facts`] (capture ingress, barriers, FactStore access), [`dom`] (snapshot
//! checks), [`commands`] (the command implementations), [`sample`] (the bundled
//! sample app), [`executor`] (`web-executor`: pages without an SDK, driven over
//! CDP or WebDriver, in its own modules). The endpoint lives on the plugin's own
//! tokio runtime, so it keeps serving between commands.

// `ProviderError` is the SDK's error type; the provider trait returns it by value.
#![allow(clippy::result_large_err)]

mod capture;
mod command_list;
mod commands;
mod dom;
mod execution;
mod executor;
mod facts;
#[cfg(test)]
mod hostile_tests;
mod ids;
mod manifest;
mod origin;
mod sample;
mod server;
mod socket;
mod state;
mod wire;

use std::sync::Arc;

use aab_plugin_api::{Commands, Context, Manifest, Provider, ProviderError};
use serde_json::Value;

pub struct WebProvider {
    shared: Arc<state::Shared>,
    executor: Arc<executor::Executor>,
}

impl WebProvider {
    fn new() -> Self {
        WebProvider { shared: Arc::new(state::Shared::default()), executor: executor::Executor::new() }
    }
}

impl Provider for WebProvider {
    fn manifest(&self) -> Manifest {
        manifest::manifest()
    }

    fn commands(&self) -> Commands<Self> {
        command_list::list()
    }

    /// `reconcile` (web-executor actions are the only device-keyed mutations of
    /// this plugin) and `runtime-stop` (close every executor session).
    async fn hook(&self, ctx: &Context<'_>, method: &str, request: Value) -> Result<Value, ProviderError> {
        match method {
            "reconcile" => self.executor.reconcile(ctx, request).await,
            "runtime-stop" => self.executor.runtime_stop(ctx).await,
            other => Err(ProviderError::new(aab_plugin_api::codes::UNSUPPORTED_PLUGIN_METHOD, format!("the web plugin does not implement `{other}`")).not_dispatched()),
        }
    }
}

aab_plugin_api::export_provider!(WebProvider, WebProvider::new);
