//! `permission-grant` / `permission-revoke`: `pm grant|revoke --user <u> <pkg>
//! <perm>` through the managed shell worker, then the permission's state is read
//! again from `dumpsys package`. `java.lang.SecurityException:` (e.g. an
//! install-time permission) is `permission_change_denied` and changed nothing.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::permission_state::{current_user, read};
use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, permission_name, props, device_mutation, user_id};

/// The platform refused the change (SecurityException).
pub const PERMISSION_CHANGE_DENIED: &str = "permission_change_denied";

fn spec(command: &str, what: &str) -> CommandSpec {
    device_mutation(command, "app", "android-app", what)
        .role("expert")
        .permission("app.permissions")
        .input_schema(object(
            props(json!({
                "packageName": package_name(),
                "permission": permission_name(),
                "userId": user_id(),
            })),
            &["packageName", "permission", "serial"],
        ))
}

/// The same arguments as `permission-state` (one permission of one app and user).
pub type PermissionChangeArgs = super::permission_state::PermissionArgs;

async fn change(ctx: &Context<'_>, inv: &Invocation, command: &str, verb: &str, a: PermissionChangeArgs) -> Result<Value, ProviderError> {
    let budget = Budget::new(ctx, a.adb_timeout_ms);
    let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
    let user = match a.user_id {
        Some(u) => u,
        None => current_user(&device, &budget).await?,
    };
    let u = user.to_string();
    let argv = ["pm", verb, "--user", &u, &a.package_name, &a.permission];
    let action = crate::shell_exec::Action { action_id: &inv.action_id, host_action_id: &inv.action_id, command, package: Some(&a.package_name) };
    let run = crate::shell_exec::run_argv(ctx, &device, budget.deadline, budget.adb_step, &action, &argv).await?;
    let text = format!("{}{}", run.stdout_text(), run.stderr_text());
    if let Some(i) = text.find("java.lang.SecurityException:") {
        let reason = text[i..].lines().next().unwrap_or("").to_string();
        return Err(ProviderError::new(PERMISSION_CHANGE_DENIED, format!("the platform refused to {verb} {} for {}: {reason}", a.permission, a.package_name)).with_field("permission").with_details(json!({"reason": reason, "exitCode": run.exit_code, "execution": run.execution()})).not_dispatched());
    }
    crate::shell_exec::exited_zero(&argv, &run)?;
    let state = read(&device, &a.package_name, &a.permission, user, &budget).await?;
    Ok(json!({"ok": true, "serial": device.serial, "packageName": a.package_name, "permission": a.permission, "userId": user, "granted": state["granted"], "state": state, "execution": run.execution()}))
}

pub struct PermissionGrant;
impl Command for PermissionGrant {
    type Provider = AndroidProvider;
    type Args = PermissionChangeArgs;
    fn spec() -> CommandSpec {
        spec("permission-grant", "Grant a runtime permission (pm grant) through the managed shell worker, then read its state back.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: PermissionChangeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, change(ctx, inv, "permission-grant", "grant", a)).await.map(Reply::Json)
    }
}

pub struct PermissionRevoke;
impl Command for PermissionRevoke {
    type Provider = AndroidProvider;
    type Args = PermissionChangeArgs;
    fn spec() -> CommandSpec {
        spec("permission-revoke", "Revoke a runtime permission (pm revoke) through the managed shell worker, then read its state back.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: PermissionChangeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, change(ctx, inv, "permission-revoke", "revoke", a)).await.map(Reply::Json)
    }
}
