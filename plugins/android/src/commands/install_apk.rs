//! `install-apk` (the begin call of its managed Intent: inspect, stage, submit the
//! install job once) and `install-apk-status` (its read-only settle call, also the
//! operator's way back to an install after a crash), plus the `cancel-install`
//! hook of `device-ownership`. The device work lives in [`crate::install`].

use std::time::Duration;

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::adb::device::{Device, quote};
use crate::install::{self, Commit, codes};
use crate::manifest::{device_mutation, object, package_name, props};
use crate::shell_exec::{self, Job, JobState};

fn path_schema(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": what})
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstallArgs {
    pub serial: String,
    pub apk_path: String,
    pub package_name: Option<String>,
    pub allow_downgrade: Option<bool>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub aapt_path: Option<String>,
    pub apksigner_path: Option<String>,
    #[allow(dead_code)] // refused by the host before the begin call (no Intent recording in this build)
    pub recording_dir: Option<String>,
    #[allow(dead_code)] // the Intent's lifetime; the host passes it on
    pub operation_id: Option<String>,
}

pub struct InstallApk;
impl Command for InstallApk {
    type Provider = AndroidProvider;
    type Args = InstallArgs;
    fn spec() -> CommandSpec {
        device_mutation(
            "install-apk",
            "app",
            "android-device",
            "Install an APK as a managed Intent (provider uia): the host inspects the frozen APK with aapt and apksigner, stages those bytes under /data/local/tmp/ai-app-bridge-install/v1, and the phone's shell worker runs pm install-create/write/commit once. Returns command intent with an operationId and `installation`; installer screens are answered through intent observe/decide; completion needs the exact Success plus pm path + sha256sum of the installed bytes.",
        )
        .role("execution")
        .target_kind("android-device")
        .timeouts(180_000, 600_000)
        .input_schema(object(
            props(json!({
                "apkPath": path_schema("The APK to install (relative to the caller's directory); split APKs are not supported"),
                "packageName": package_name(),
                "allowDowngrade": {"type": "boolean", "description": "Allow a lower versionCode than the installed one (pm install-create -d); default false"},
                "aaptPath": path_schema("aapt executable (default: $ANDROID_SDK_ROOT/build-tools/<newest>/aapt, then aapt on PATH)"),
                "apksignerPath": path_schema("apksigner executable (default: $ANDROID_SDK_ROOT/build-tools/<newest>/apksigner, then apksigner on PATH)"),
                "recordingDir": path_schema("Not available in this build (recording_unavailable)"),
                "operationId": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Id of the Intent (default: generated; never reused)"}
            })),
            &["apkPath", "serial"],
        ))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: InstallArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let path = std::path::Path::new(&inv.cwd).join(&a.apk_path);
            let bytes = install::read_apk(&path)?;
            let aapt = install::tool(a.aapt_path.as_deref(), "aapt");
            let apksigner = install::tool(a.apksigner_path.as_deref(), "apksigner");
            let apk = install::inspect(bytes, &aapt, &apksigner, Duration::from_secs(60).min(budget.deadline.remaining())).await?;
            if let Some(p) = &a.package_name
                && *p != apk.package
            {
                return Err(ProviderError::new(codes::APK_PACKAGE_MISMATCH, format!("the APK is package {}, not {p}", apk.package)).with_field("packageName").with_details(json!({"apkPackage": apk.package})).not_dispatched());
            }
            let dev = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            if install::retained(&dev, budget.adb()).await? >= install::MAX_RETAINED {
                return Err(ProviderError::new(codes::STORE_FULL, format!("{} installs are staged on {}; settle or cancel one first", install::MAX_RETAINED, dev.serial)).not_dispatched());
            }
            let before = install::installed(&dev, &apk.package, budget.adb()).await?;
            let install_id = inv.action_id.clone();
            let staged = install::stage(&dev, &install_id, &apk, budget.adb()).await?;
            let script = install::script(&install_id, &apk, &staged, a.allow_downgrade == Some(true));
            let job = Job::new(&inv.action_id, &["sh", "-c", &script])?;
            let identity = json!({
                "installId": install_id, "apkSha256": apk.sha256, "packageName": apk.package, "versionCode": apk.version_code, "versionName": apk.version_name,
                "signers": apk.signers, "signatureSchemes": apk.scheme_versions, "bytes": apk.bytes.len(), "stageDir": install::stage_dir(&install_id), "allowDowngrade": a.allow_downgrade == Some(true),
                "before": before.as_ref().map(|(p, s)| json!({"path": p, "sha256": s})),
            });
            let submitted = shell_exec::submit_job(&dev, budget.deadline, budget.adb_step, &job, |epoch| {
                let rec = crate::action_record::record(
                    "install",
                    "install-apk",
                    &dev.serial,
                    Some(&apk.package),
                    json!({"actionId": job.action_id, "jobId": job.job_id, "runtimeEpoch": epoch, "commandSha256": job.command_sha256, "install": identity}),
                );
                crate::action_record::append(ctx, &inv.action_id, &rec)?;
                ctx.mark_dispatched();
                Ok(())
            })
            .await;
            let submitted = match submitted {
                Ok(s) => s,
                Err(e) => {
                    if e.dispatched == Some(false) {
                        let _ = dev.shell(&format!("rm -rf {}", quote(&install::stage_dir(&install_id))), None, budget.adb()).await;
                    }
                    return Err(e);
                }
            };
            Ok(Reply::Json(json!({
                "ok": true, "serial": dev.serial,
                "installation": {"status": if submitted.settled { "returned" } else { "submitted" }, "actionId": inv.action_id, "jobId": job.job_id, "runtimeEpoch": submitted.runtime_epoch, "apk": identity, "roundTrips": submitted.round_trips},
            })))
        })
        .await
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusArgs {
    pub serial: String,
    pub action_id: String,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

pub struct InstallApkStatus;
impl Command for InstallApkStatus {
    type Provider = AndroidProvider;
    type Args = StatusArgs;
    fn spec() -> CommandSpec {
        CommandSpec::query("install-apk-status")
            .platform("android")
            .domain("app")
            .target_kind("android-device")
            .summary("Where one install-apk stands, from the phone: the install job's receipt and PackageManager output (Success, a final INSTALL_FAILED_/INSTALL_PARSE_FAILED_ code, or unresolved), verified by pm path + sha256sum of the installed bytes. Settled outcomes are stored, the job acknowledged and the staging removed. The settle call of the install-apk Intent; also how to come back to an install after a crash.")
            .permission("app.read")
            .target_key("serial")
            .timeouts(15_000, 60_000)
            .input_schema(object(props(json!({"actionId": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "installation.actionId of the install-apk Intent"}})), &["serial", "actionId"]))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, a: StatusArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let record = record_of(ctx, &a.action_id, &a.serial)?;
            if let Some(stored) = stored_outcome(ctx, &a.action_id)? {
                return Ok(Reply::Json(stored));
            }
            let dev = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            settle(ctx, &dev, &a.action_id, &record, budget.deadline, budget.adb_step).await.map(Reply::Json)
        })
        .await
    }
}

fn record_of(ctx: &Context<'_>, action_id: &str, serial: &str) -> Result<Value, ProviderError> {
    match crate::action_record::lookup(ctx, action_id)? {
        Some(r) if r["kind"] == "install" && r["serial"] == serial => Ok(r),
        _ => Err(ProviderError::new(codes::NOT_FOUND, format!("no install-apk action {action_id} on {serial}")).with_field("actionId").not_dispatched()),
    }
}

fn stored_outcome(ctx: &Context<'_>, action_id: &str) -> Result<Option<Value>, ProviderError> {
    let page = ctx.facts().read(install::OUTCOME_STREAM, action_id, 0, 100)?;
    Ok(page.records.iter().rev().find(|r| r.key == action_id).map(|r| r.record.clone()))
}

fn job_of(record: &Value) -> Job {
    let d = &record["device"];
    Job::known(d["actionId"].as_str().unwrap_or_default(), d["jobId"].as_str().unwrap_or_default(), d["commandSha256"].as_str().unwrap_or_default())
}

/// Ask the phone where the install stands; a settled outcome is stored durably
/// before the job is acknowledged and the staging removed.
pub(crate) async fn settle(ctx: &Context<'_>, dev: &Device, action_id: &str, record: &Value, deadline: Deadline, step: Duration) -> Result<Value, ProviderError> {
    let job = job_of(record);
    let identity = &record["device"]["install"];
    let package = identity["packageName"].as_str().unwrap_or_default();
    let want = identity["apkSha256"].as_str().unwrap_or_default();
    let base = json!({"actionId": action_id, "installId": identity["installId"], "packageName": package, "apkSha256": want, "jobId": job.job_id});
    let with = |v: Value| super::with_defaults(v, &base);
    let (reply, receipt, stdout) = match shell_exec::query_job(dev, deadline.capped(step), &job).await? {
        JobState::Pending(q) => {
            let status = if q.0["exists"] != json!(true) { "job_not_found" } else if q.0["admitted"] == json!(true) { "running" } else { "queued" };
            return Ok(with(json!({"ok": true, "settled": false, "status": status, "job": q.0})));
        }
        // The script captures pm's stderr into its document; the job's stdout is it.
        JobState::Settled { reply, receipt, stdout } => (reply, receipt, stdout),
    };
    let outcome = if receipt["dispatched"] != json!(true) {
        with(json!({"ok": true, "succeeded": false, "settled": true, "status": "not_admitted", "error": codes::NOT_ADMITTED, "dispatched": false, "receipt": receipt}))
    } else {
        let doc: Value = serde_json::from_slice(&stdout).unwrap_or(Value::Null);
        if doc["schemaVersion"] != install::EXECUTION_SCHEMA || doc["installId"] != identity["installId"] || doc["apkSha256"] != want {
            return Ok(with(json!({"ok": true, "settled": false, "status": "unresolved", "reason": "install_output_unrecognised", "receipt": receipt, "stdout": String::from_utf8_lossy(&stdout)})));
        }
        let b64 = |k: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(doc[k].as_str().unwrap_or_default()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
        };
        let (out, err) = (b64("stdout"), b64("stderr"));
        let session = doc["sessionId"].clone();
        let pm = json!({"phase": doc["phase"], "exitCode": doc["code"], "stdout": out, "stderr": err, "sessionId": session});
        match doc["phase"].as_str().unwrap_or_default() {
            "artifact-mismatch" => with(json!({"ok": true, "succeeded": false, "settled": true, "status": "failed", "error": codes::ARTIFACT_MISMATCH, "message": format!("the staged APK hashed to {out} on the phone, not {want}: nothing was installed"), "packageManager": pm})),
            "create-failed" | "create-invalid" => with(json!({"ok": true, "succeeded": false, "settled": true, "status": "failed", "error": codes::CREATE_FAILED, "packageManager": pm})),
            "write-failed" => {
                let abandoned = match session.as_u64() {
                    Some(n) => dev.shell(&format!("pm install-abandon {n}"), None, deadline.capped(step)).await.map(|o| o.stdout_text().trim().to_string()).ok(),
                    None => None,
                };
                with(json!({"ok": true, "succeeded": false, "settled": true, "status": "failed", "error": codes::WRITE_FAILED, "packageManager": pm, "abandon": abandoned}))
            }
            _ => match install::classify_commit(doc["code"].as_i64().unwrap_or(-1), &out) {
                Commit::Success => {
                    let now = install::installed(dev, package, deadline.capped(step)).await?;
                    match &now {
                        Some((path, sha)) if sha == want => with(json!({"ok": true, "succeeded": true, "settled": true, "status": "installed", "proof": {"source": "package-manager", "commit": "Success", "path": path, "sha256": sha}, "packageManager": pm})),
                        _ => with(json!({"ok": true, "succeeded": false, "settled": true, "ambiguous": true, "status": "unverified", "error": codes::VERIFICATION_FAILED,
                                         "message": "PackageManager answered Success but the installed bytes are not the APK's", "installed": now.map(|(p, s)| json!({"path": p, "sha256": s})), "packageManager": pm})),
                    }
                }
                Commit::Failure(code) => with(json!({"ok": true, "succeeded": false, "settled": true, "status": "failed", "error": codes::FAILED, "code": code, "message": out, "packageManager": pm})),
                Commit::Unrecognised => {
                    // Pending user action, an OEM text, a truncated reply: only the
                    // installed bytes can prove the install, and only new ones.
                    let now = install::installed(dev, package, deadline.capped(step)).await?;
                    let before = identity["before"]["path"].as_str();
                    match &now {
                        Some((path, sha)) if sha == want && Some(path.as_str()) != before => {
                            with(json!({"ok": true, "succeeded": true, "settled": true, "status": "installed", "proof": {"source": "installed-bytes", "commit": out, "path": path, "sha256": sha, "previousPath": before}, "packageManager": pm}))
                        }
                        _ => return Ok(with(json!({"ok": true, "settled": false, "status": "unresolved", "reason": "install_commit_unrecognised", "packageManager": pm, "installed": now.map(|(p, s)| json!({"path": p, "sha256": s}))}))),
                    }
                }
            },
        }
    };
    // Durable first, then the phone's acknowledgement and the cleanup (a failure
    // of either is reported and never erases the known outcome).
    ctx.facts().append(install::OUTCOME_STREAM, action_id, &outcome, Durability::Sync)?;
    let ack = shell_exec::acknowledge_job(dev, deadline.capped(step), &job, &reply).await.err().map(|e| e.error);
    let dir = install::stage_dir(identity["installId"].as_str().unwrap_or("-"));
    let cleanup = dev.shell(&format!("rm -rf {}", quote(&dir)), None, deadline.capped(step)).await.err().map(|e| e.error);
    let mut outcome = outcome;
    outcome["cleanup"] = json!({"acknowledgeError": ack, "stagingError": cleanup});
    Ok(outcome)
}

/// `device-ownership cancel-install {serial, actionId}`: a job the worker has not
/// admitted is cancelled (it never runs); a commit left pending (an installer
/// confirmation, an unrecognised answer) has its PackageInstaller session
/// abandoned; a settled install is reported as it is. Never installs.
pub(crate) async fn cancel_install(ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
    let (Some(serial), Some(action_id)) = (request["serial"].as_str(), request["actionId"].as_str()) else {
        return Err(ProviderError::new("invalid_argument", "cancel-install needs serial and actionId").with_field("actionId").not_dispatched());
    };
    let record = record_of(ctx, action_id, serial)?;
    if let Some(stored) = stored_outcome(ctx, action_id)? {
        return Ok(json!({"ok": true, "cancelled": false, "reason": "already_settled", "installation": stored}));
    }
    let budget = Budget::new(ctx, None);
    let dev = device(None, Some(serial), &budget).await?;
    let job = job_of(&record);
    if let JobState::Pending(q) = shell_exec::query_job(&dev, budget.adb(), &job).await? {
        if q.0["admitted"] == json!(true) {
            return Err(ProviderError::new(codes::RUNNING, "the install job is running on the phone; it cannot be stopped, only awaited (install-apk-status)").with_details(json!({"job": q.0})).not_dispatched());
        }
        let c = shell_exec::cancel_job(&dev, budget.adb(), &job).await?;
        let settled = settle(ctx, &dev, action_id, &record, budget.deadline, budget.adb_step).await?;
        return Ok(json!({"ok": true, "cancelled": c.0["settled"] == json!(true), "installation": settled}));
    }
    let current = settle(ctx, &dev, action_id, &record, budget.deadline, budget.adb_step).await?;
    if current["settled"] == json!(true) {
        return Ok(json!({"ok": true, "cancelled": false, "reason": "already_settled", "installation": current}));
    }
    let Some(n) = current["packageManager"]["sessionId"].as_u64() else {
        return Ok(json!({"ok": true, "cancelled": false, "reason": "no_session", "installation": current}));
    };
    ctx.mark_dispatched();
    let out = dev.shell(&format!("pm install-abandon {n}"), None, budget.adb()).await?;
    let text = out.stdout_text().trim().to_string();
    let abandoned = text == "Success";
    // The session may have committed meanwhile: the installed bytes decide.
    let now = install::installed(&dev, record["packageName"].as_str().unwrap_or_default(), budget.adb()).await?;
    let identity = &record["device"]["install"];
    let installed = now.as_ref().is_some_and(|(p, s)| Some(s.as_str()) == identity["apkSha256"].as_str() && Some(p.as_str()) != identity["before"]["path"].as_str());
    let outcome = if installed {
        json!({"ok": true, "succeeded": true, "settled": true, "status": "installed", "actionId": action_id, "proof": {"source": "installed-bytes", "path": now.as_ref().map(|x| &x.0), "sha256": now.as_ref().map(|x| &x.1)}})
    } else if abandoned {
        json!({"ok": true, "succeeded": false, "settled": true, "status": "abandoned", "error": codes::ABANDONED, "actionId": action_id, "sessionId": n, "abandon": text})
    } else {
        return Ok(json!({"ok": true, "cancelled": false, "reason": "abandon_refused", "abandon": text, "stderr": out.stderr_text(), "installation": current}));
    };
    ctx.facts().append(install::OUTCOME_STREAM, action_id, &outcome, Durability::Sync)?;
    let _ = dev.shell(&format!("rm -rf {}", quote(&install::stage_dir(identity["installId"].as_str().unwrap_or("-")))), None, budget.adb()).await;
    Ok(json!({"ok": true, "cancelled": abandoned && !installed, "installation": outcome}))
}
