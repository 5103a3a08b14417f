//! aab provider plugin for the iOS app SDK (devicectl + SDK HTTP).
//!
//! Layout: [`runtime`] (a call's target turned into a verified connection through
//! `aab_ios_transport::sdk`: devicectl, device selection, tunnel checks,
//! descriptor copy and validation, identity headers, `runtimeBinding` checks),
//! [`managed`] (the managed H5/Flutter write: preflight, action record, dispatch
//! mark, one POST, recovery only from the original completion), [`h5`] and
//! [`flutter`] (binding a caller's selector to a fresh observation),
//! [`reconcile`] (the hook), [`manifest`] (specs, Intent providers) and
//! [`commands`] (typed commands; the list is `commands::list`).

// `ProviderError` is the SDK's error type; the transport returns it by value.
#![allow(clippy::result_large_err)]

mod commands;
mod flutter;
mod h5;
mod managed;
mod manifest;
mod reconcile;
mod runtime;

use aab_plugin_api::{Commands, Context, Manifest, Provider, ProviderError};

pub struct IosProvider;

impl Provider for IosProvider {
    fn manifest(&self) -> Manifest {
        manifest::manifest()
    }

    fn commands(&self) -> Commands<Self> {
        commands::list()
    }

    async fn hook(&self, ctx: &Context<'_>, method: &str, request: serde_json::Value) -> Result<serde_json::Value, ProviderError> {
        match method {
            "reconcile" => reconcile::reconcile(ctx, request).await,
            "device-key" => aab_ios_transport::ownership::hook(ctx, &request).await,
            other => Err(ProviderError::new(aab_plugin_api::codes::UNSUPPORTED_PLUGIN_METHOD, format!("the ios plugin does not implement `{other}`")).not_dispatched()),
        }
    }
}

aab_plugin_api::export_provider!(IosProvider, || IosProvider);
