//! What every command of both iOS plugins does around its work: one deadline from
//! the host's remaining budget (queueing already spent its share), and the work
//! dropped — its child processes killed, its requests abandoned — the moment the
//! host cancels, so no iOS command outlives its caller.

use std::future::Future;

use aab_plugin_api::{Context, ProviderError};

use crate::Deadline;

/// The command's deadline: what the host has left for it.
pub fn deadline(ctx: &Context<'_>) -> Deadline {
    Deadline::after(ctx.remaining())
}

/// Run `work` unless the host cancels first (then the work is dropped).
pub async fn cancellable<T>(ctx: &Context<'_>, work: impl Future<Output = Result<T, ProviderError>>) -> Result<T, ProviderError> {
    tokio::select! {
        r = work => r,
        _ = ctx.cancelled() => Err(ProviderError::new(aab_plugin_api::codes::CANCELLED, "the command was cancelled or its deadline passed")),
    }
}
