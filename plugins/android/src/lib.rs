//! aab provider plugin for the adb + Android SDK (native, Flutter, H5).
//!
//! Layout: [`adb`] (the adb server port-protocol transport: host services, device
//! services, device selection), [`sdk`] (the SDK connection sequence: endpoint
//! descriptor, verified forward, one-request HTTP), [`foreground`] (foreground
//! identity), [`manifest`] (specs), [`commands`] (typed commands), [`executor`]
//! (the instrumentation sessions of `android-executor` / `flutter-executor`). Only commands
//! that work end to end are advertised (the list is `commands::list`).

// `ProviderError` is the SDK's error type; the transport returns it by value.
#![allow(clippy::result_large_err)]

// Parts of the transport library serve the commands of issue 12 still to come;
// until a command uses a function, the compiler would call it dead.
#[allow(dead_code)]
mod adb;
mod action_record;
mod commands;
#[cfg(test)]
mod device_tests;
mod executor;
#[cfg(test)]
mod executor_tests;
#[allow(dead_code)]
mod flutter;
mod flutter_h5;
mod foreground;
mod h5;
mod install;
mod manifest;
mod native_exec;
mod native_target;
mod reconcile;
mod shell_exec;
#[cfg(test)]
mod shell_tests;
#[cfg(test)]
mod sim_tests;
#[allow(dead_code)]
mod sdk;
#[cfg(test)]
mod test_support;
mod uia;

use aab_plugin_api::{Commands, Context, Manifest, Provider, ProviderError};

pub struct AndroidProvider;

impl Provider for AndroidProvider {
    fn manifest(&self) -> Manifest {
        manifest::manifest()
    }

    fn commands(&self) -> Commands<Self> {
        commands::list()
    }

    async fn hook(&self, ctx: &Context<'_>, method: &str, request: serde_json::Value) -> Result<serde_json::Value, ProviderError> {
        match method {
            "reconcile" => reconcile::reconcile(ctx, request).await,
            "cancel-install" => commands::install_apk::cancel_install(ctx, request).await,
            other => Err(ProviderError::new(aab_plugin_api::codes::UNSUPPORTED_PLUGIN_METHOD, format!("the android plugin does not implement `{other}`")).not_dispatched()),
        }
    }
}

aab_plugin_api::export_provider!(AndroidProvider, || AndroidProvider);
