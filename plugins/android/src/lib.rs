//! aab provider plugin for the adb + Android SDK (native, Flutter, H5).
//!
//! The provider is not implemented yet, so the plugin advertises **no commands**:
//! aab never lists a command that cannot execute. It still loads, reports its name
//! and platform, and takes part in bundles and fingerprints, so packaging is proven
//! before the provider lands.

// `ProviderError` is the SDK's error type; the transport returns it by value.
#![allow(clippy::result_large_err)]

// The transport library is ready for the commands of issue 12; until a command
// uses a function, the compiler would call it dead.
#[allow(dead_code)]
mod adb;
#[allow(dead_code)]
mod sdk;
#[allow(dead_code)]
mod foreground;
#[cfg(test)]
mod device_tests;
#[cfg(test)]
mod fake_adbd;
#[cfg(test)]
mod test_support;

use aab_plugin_api::{Context, Invocation, Manifest, Provider, ProviderError, Reply};

pub struct PendingProvider;

impl Provider for PendingProvider {
    fn manifest(&self) -> Manifest {
        let mut m = Manifest::new("android", env!("CARGO_PKG_VERSION"));
        m.platforms = vec!["android".to_string()];
        m
    }

    async fn invoke(&self, _ctx: &Context<'_>, invocation: Invocation) -> Result<Reply, ProviderError> {
        // Unreachable through the host (no command is advertised); answer honestly anyway.
        Err(ProviderError::new("unknown_command", format!("plugin `android` implements no command `{}` yet", invocation.command)).not_dispatched())
    }
}

aab_plugin_api::export_provider!(PendingProvider, || PendingProvider);
