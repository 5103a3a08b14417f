//! `ios-install-app` (devicectl `device install app --device <id> <path>`) and
//! `ios-launch-app` (`device process launch --device <id> [--terminate-existing]
//! <bundleId>`): device mutations through devicectl, journaled per `deviceId`.
//! The device is selected and its tunnel checked before the dispatch mark; a
//! devicectl that could not be started was not dispatched; a devicectl failure
//! document is the device's own answer (settled); a devicectl that timed out or
//! vanished leaves the outcome unknown (ambiguous: devicectl has no durable
//! receipt to reconcile from).

use std::path::{Path, PathBuf};

use aab_ios_transport::devicectl::mutation_failure;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{cancellable, deadline};
use crate::IosProvider;
use crate::manifest::{INSTALL_TIMEOUTS, bundle_id, device_mutation, object, props};

super::ios_args!(
    InstallArgs(device_id: String, bundle_id: Option<String>) {
        app_path: String,
    }
);

/// The app bundle to install: an existing `.app` directory or `.ipa` file
/// (relative to the caller's working directory).
fn app_path(cwd: &Path, p: &str) -> Result<PathBuf, ProviderError> {
    let path = if Path::new(p).is_absolute() { PathBuf::from(p) } else { cwd.join(p) };
    let bad = |why: &str| ProviderError::new("invalid_argument", format!("appPath {}: {why}", path.display())).with_field("appPath").not_dispatched();
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match (ext.as_deref(), std::fs::metadata(&path)) {
        (_, Err(_)) => Err(bad("does not exist")),
        (Some("app"), Ok(m)) if m.is_dir() => Ok(path),
        (Some("ipa"), Ok(m)) if m.is_file() => Ok(path),
        _ => Err(bad("is not an .app directory or an .ipa file")),
    }
}

pub struct InstallApp;
impl Command for InstallApp {
    type Provider = IosProvider;
    type Args = InstallArgs;
    fn spec() -> CommandSpec {
        device_mutation("ios-install-app", "ios-device", "Install an .app bundle or .ipa on the device with devicectl (device install app); the device must be selected and its developer tunnel connected. Not callable from a Script.")
            .timeouts(INSTALL_TIMEOUTS.0, INSTALL_TIMEOUTS.1)
            .input_schema(object(
                props(json!({"appPath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "The .app directory or .ipa file to install (relative to the caller's working directory)"}})),
                &["appPath", "deviceId"],
            ))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: InstallArgs) -> Result<Reply, ProviderError> {
        let path = app_path(Path::new(&inv.cwd), &args.app_path)?;
        let deadline = deadline(ctx);
        cancellable(ctx, async {
            let device = crate::runtime::device(&args.device_id, args.devicectl.as_deref(), deadline).await?;
            ctx.mark_dispatched();
            let result = device.devicectl.install_app(&device.record.identifier, &path, deadline).await.map_err(mutation_failure)?;
            Ok(Reply::Json(json!({"ok": true, "deviceId": device.record.identifier, "udid": device.record.udid, "appPath": path, "installed": installed(&result), "devicectl": result})))
        })
        .await
    }
}

/// What devicectl says it installed (`installedApplications[0]`), if anything.
fn installed(result: &Value) -> Value {
    result.pointer("/installedApplications/0").cloned().unwrap_or(Value::Null)
}

super::app_args!(
    LaunchArgs {
        terminate_existing: Option<bool>,
    }
);

pub struct LaunchApp;
impl Command for LaunchApp {
    type Provider = IosProvider;
    type Args = LaunchArgs;
    fn spec() -> CommandSpec {
        device_mutation("ios-launch-app", "ios-app", "Launch an app on the device with devicectl (device process launch; terminateExisting relaunches it: a new process and SDK runtime epoch).")
            .permission("app.interact")
            .input_schema(object(
                props(json!({"bundleId": bundle_id(), "terminateExisting": {"type": "boolean", "description": "Terminate a running instance first (--terminate-existing)"}})),
                &["bundleId", "deviceId"],
            ))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: LaunchArgs) -> Result<Reply, ProviderError> {
        let deadline = deadline(ctx);
        cancellable(ctx, async {
            let device = crate::runtime::device(&args.device_id, args.devicectl.as_deref(), deadline).await?;
            ctx.mark_dispatched();
            let terminate = args.terminate_existing.unwrap_or(false);
            let result = device.devicectl.launch(&device.record.identifier, &args.bundle_id, terminate, deadline).await.map_err(mutation_failure)?;
            let pid = result.pointer("/process/processIdentifier").cloned().unwrap_or(Value::Null);
            Ok(Reply::Json(json!({"ok": true, "deviceId": device.record.identifier, "udid": device.record.udid, "bundleId": args.bundle_id, "terminateExisting": terminate, "processId": pid, "devicectl": result})))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_app_path_is_checked_before_the_device() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("Shop.app")).unwrap();
        std::fs::write(dir.path().join("Shop.ipa"), b"PK").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("Fake.ipa")).unwrap();
        assert_eq!(app_path(dir.path(), "Shop.app").unwrap(), dir.path().join("Shop.app"));
        assert!(app_path(dir.path(), &dir.path().join("Shop.ipa").display().to_string()).is_ok());
        for bad in ["missing.app", "notes.txt", "Fake.ipa"] {
            let e = app_path(dir.path(), bad).unwrap_err();
            assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("invalid_argument", Some("appPath"), Some(false)), "{bad}");
        }
    }
}
