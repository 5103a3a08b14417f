//! aab provider plugin for the prepared WebDriverAgent Runner on iOS devices
//! (protocols §5): the Runner's status and sessions, its JSON accessibility tree,
//! coordinate and native-element actions, orientation, and `ios-setup` (the
//! prepared project and its `xcodebuild` runs).
//!
//! Layout: [`manifest`] (the shared schema pieces and the `native` Intent provider
//! of the `ios` platform), [`runner`] (opening a verified Runner, the session
//! check and managed actions), [`native_target`] (the source tree, selectors and
//! `aab.ios-native-target/v1`), [`commands`] (typed commands), [`reconcile`] (the
//! `device-ownership reconcile` hook). The wire protocol itself (descriptor,
//! headers, bindings, execution shapes, action records) is the shared transport's
//! `aab_ios_transport::wda`, because the `ios` plugin reconciles WDA actions too.

// `ProviderError` is the SDK's error type; the transport returns it by value.
#![allow(clippy::result_large_err)]

mod commands;
mod manifest;
mod native_target;
mod prepared;
mod reconcile;
mod runner;
mod xcodebuild;

use aab_plugin_api::{Commands, Context, Manifest, Provider, ProviderError};

pub struct WdaProvider;

impl Provider for WdaProvider {
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
            other => Err(ProviderError::new(aab_plugin_api::codes::UNSUPPORTED_PLUGIN_METHOD, format!("the wda plugin does not implement `{other}`")).not_dispatched()),
        }
    }
}

aab_plugin_api::export_provider!(WdaProvider, || WdaProvider);
