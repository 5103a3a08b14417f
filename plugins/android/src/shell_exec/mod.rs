//! The managed shell execution worker `aab.android-shell-execution/v1` (§2.4): one
//! argv runs at most once on the phone, detached from the adb connection, and its
//! outcome is the phone's own receipt. Layout: [`scripts`] (the device-side shell
//! scripts), [`client`] (sending them and reading their JSON), this module (the
//! action sequence [`run_argv`] and [`reconcile`]).
//!
//! Never re-run: a job is started once (`mkdir launched`); after start the host only
//! queries, cancels (which can only win admission before the worker) and reads.

pub mod client;
pub mod scripts;

use std::time::{Duration, Instant};

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::adb::Deadline;
use crate::adb::device::Device;
use client::Reply;

pub const SCHEMA: &str = "aab.android-shell-execution/v1";
pub const ROOT: &str = "/data/local/tmp/ai-app-bridge-shell/v1";
/// Largest `command.sh`.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Most unacknowledged jobs the store keeps.
pub const MAX_JOBS: usize = 512;
/// The host polls a running job this often.
const POLL: Duration = Duration::from_millis(60);
/// How long `start` waits on the phone for the receipt before replying.
const START_WAIT_MS: u64 = 1500;
/// Time kept back from the host deadline for the final cancel attempt.
const CANCEL_RESERVE: Duration = Duration::from_millis(1200);
/// The fact stream of device action records (shared with the SDK actions).
pub const RECORD_STREAM: &str = "android.actions";
pub const RECORD_SCHEMA: &str = "aab.android-action-record/v1";

#[allow(dead_code)] // every code the phone can answer, named for callers and tests
pub mod codes {
    /// The phone rebooted (boot id changed) around the action.
    pub const SHELL_RUNTIME_CHANGED: &str = "shell_runtime_changed";
    /// The job directory or its identity is not what was prepared.
    pub const SHELL_EXECUTION_NOT_FOUND: &str = "shell_execution_not_found";
    /// `mkdir <job>` failed: a job with this action id exists.
    pub const SHELL_ACTION_ID_REUSED: &str = "shell_action_id_reused";
    /// 512 unacknowledged jobs are on the phone.
    pub const SHELL_EXECUTION_STORE_FULL: &str = "shell_execution_store_full";
    /// The worker found its phone-uptime deadline passed and did not run.
    pub const SHELL_ACTION_TIMEOUT: &str = "shell_action_timeout";
    /// A cancel won admission; the command did not run.
    pub const SHELL_ACTION_CANCELLED: &str = "shell_action_cancelled";
    /// The phone's shell lacks `setsid` or `nohup`.
    pub const SHELL_WORKER_UNAVAILABLE: &str = "shell_worker_unavailable";
    /// No receipt before the host deadline and the cancel did not win: unknown.
    pub const SHELL_ACTION_UNRESOLVED: &str = "shell_action_unresolved";
    /// A script's reply was not the JSON it prints.
    pub const SHELL_PROTOCOL_ERROR: &str = "shell_protocol_error";
    /// `command.sh` would exceed 64 KiB.
    pub const SHELL_COMMAND_TOO_LARGE: &str = "shell_command_too_large";
}

/// One job: the device-side action id, its job id and `command.sh`.
#[derive(Clone, Debug)]
pub struct Job {
    pub action_id: String,
    pub job_id: String,
    pub command: String,
    pub command_sha256: String,
}

impl Job {
    /// The job of `argv` under `action_id`. The job id is the action id when that is a
    /// UUID (host action ids are), else a UUID derived from it: the same action id
    /// always names the same directory, so a second use is `shell_action_id_reused`.
    pub fn new(action_id: &str, argv: &[&str]) -> Result<Job, ProviderError> {
        let command = format!("exec {}\n", argv.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect::<Vec<_>>().join(" "));
        if command.len() > MAX_COMMAND_BYTES {
            return Err(ProviderError::new(codes::SHELL_COMMAND_TOO_LARGE, format!("command.sh would be {} bytes (at most {MAX_COMMAND_BYTES})", command.len())).not_dispatched());
        }
        Ok(Job { action_id: action_id.to_string(), job_id: job_id(action_id), command_sha256: hex(&Sha256::digest(command.as_bytes())), command })
    }

    /// A job known only by its ids (reconcile: the record names them).
    #[allow(dead_code)] // reconcile's; wired into the reconcile hook by lane NATIVE/the lead
    pub fn known(action_id: &str, job_id: &str, command_sha256: &str) -> Job {
        Job { action_id: action_id.to_string(), job_id: job_id.to_string(), command: String::new(), command_sha256: command_sha256.to_string() }
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && s.bytes().enumerate().all(|(i, b)| if [8, 13, 18, 23].contains(&i) { b == b'-' } else { b.is_ascii_digit() || (b'a'..=b'f').contains(&b) })
}

pub fn job_id(action_id: &str) -> String {
    if is_uuid(action_id) {
        return action_id.to_string();
    }
    let h = hex(&Sha256::digest(format!("{SCHEMA}\0{action_id}").as_bytes()));
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What one action through the worker produced.
#[derive(Clone, Debug)]
pub struct ShellRun {
    /// The phone's receipt as it parsed (identity fields + outcome).
    pub receipt: Value,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i64,
    pub acknowledged: bool,
    /// `[{step, ms}]`: every adb shell round trip of this action.
    pub round_trips: Vec<Value>,
}

impl ShellRun {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    /// The part of the reply every shell-worker command carries.
    pub fn execution(&self) -> Value {
        json!({"schema": SCHEMA, "jobId": self.receipt["jobId"], "actionId": self.receipt["actionId"], "runtimeEpoch": self.receipt["runtimeEpoch"], "exitCode": self.exit_code, "acknowledged": self.acknowledged, "roundTrips": self.round_trips})
    }
}

/// Who asks: the command name and package the action record names.
pub struct Action<'a> {
    /// The device-side action id (the host action id, or `<host id>:<n>` for the
    /// n-th job of one host action).
    pub action_id: &'a str,
    /// The host action id: the key of the action record.
    pub host_action_id: &'a str,
    pub command: &'a str,
    pub package: Option<&'a str>,
}

/// Run one argv through the worker: probe+prepare → action record → mark → start
/// (+ first wait) → query until the deadline → output → acknowledge. The error of
/// a step before the mark is not dispatched; after it only the phone's receipt
/// decides, and without one the error is ambiguous (the host leaves the device
/// unresolved for `device-ownership reconcile`).
pub async fn run_argv(ctx: &Context<'_>, device: &Device, deadline: Deadline, step: Duration, action: &Action<'_>, argv: &[&str]) -> Result<ShellRun, ProviderError> {
    let job = Job::new(action.action_id, argv)?;
    run_job(device, deadline, step, &job, |epoch| {
        append_record(ctx, action, &device.serial, &job, epoch)?;
        ctx.mark_dispatched();
        Ok(())
    })
    .await
}

/// The sequence of [`run_argv`]; `dispatch` runs between prepare and start (record
/// the action, mark the dispatch) and may refuse.
pub async fn run_job(device: &Device, deadline: Deadline, step: Duration, job: &Job, dispatch: impl FnOnce(&str) -> Result<(), ProviderError>) -> Result<ShellRun, ProviderError> {
    let job = job.clone();
    let (epoch, mut trips, mut last) = start_job(device, deadline, step, &job, dispatch).await?;
    loop {
        if let Some(r) = &last {
            if r.0["settled"] == json!(true) {
                return finish(device, deadline, step, &job, r, trips).await;
            }
            if r.str("runtimeEpoch") != epoch && !r.str("runtimeEpoch").is_empty() {
                return runtime_changed(device, deadline, step, &job, &epoch, r, trips).await;
            }
        }
        if deadline.remaining() <= CANCEL_RESERVE {
            break;
        }
        tokio::time::sleep(POLL).await;
        last = timed(&mut trips, "query", client::run(device, &scripts::query(&job), deadline.capped(step).capped(deadline.remaining().saturating_sub(CANCEL_RESERVE)))).await.ok();
    }
    // The deadline ends without a receipt: a cancel can still prove the command never ran.
    if let Ok(r) = timed(&mut trips, "cancel", client::run(device, &scripts::cancel(&job), deadline)).await
        && r.0["settled"] == json!(true)
    {
        return finish(device, deadline, step, &job, &r, trips).await;
    }
    Err(ProviderError::new(codes::SHELL_ACTION_UNRESOLVED, format!("no receipt of shell job {} before the deadline; the action may or may not have run", job.job_id)).with_details(json!({"jobId": job.job_id, "runtimeEpoch": epoch, "roundTrips": trips})))
}

/// A job handed to the worker without waiting for its end (install-apk: the
/// commit may wait for the installer's confirmation, which the Intent answers).
pub struct Submitted {
    pub runtime_epoch: String,
    pub round_trips: Vec<Value>,
    /// The start reply, when it already carried the receipt.
    pub settled: bool,
}

/// prepare → `dispatch` (record + mark) → start with a short wait. A lost start
/// reply is still submitted (the job may run): only the phone's receipt says.
pub async fn submit_job(device: &Device, deadline: Deadline, step: Duration, job: &Job, dispatch: impl FnOnce(&str) -> Result<(), ProviderError>) -> Result<Submitted, ProviderError> {
    let (epoch, trips, started) = start_job(device, deadline, step, job, dispatch).await?;
    let settled = started.is_some_and(|r| r.0["settled"] == json!(true));
    Ok(Submitted { runtime_epoch: epoch, round_trips: trips, settled })
}

/// The start of every job: prepare (a refusal is not dispatched) → `dispatch` →
/// start with a short wait for the receipt. Returns the boot id, the round trips
/// and the start reply (`None`: lost, the job may run; only queries from here on).
async fn start_job(device: &Device, deadline: Deadline, step: Duration, job: &Job, dispatch: impl FnOnce(&str) -> Result<(), ProviderError>) -> Result<(String, Vec<Value>, Option<Reply>), ProviderError> {
    let mut trips = Vec::new();
    let budget_ms = deadline.remaining().saturating_sub(CANCEL_RESERVE).as_millis() as u64;
    let prepared = timed(&mut trips, "prepare", client::run(device, &scripts::prepare(job, budget_ms), deadline.capped(step))).await.map_err(|e| e.not_dispatched())?;
    refuse_unless_ok(&prepared)?;
    let epoch = prepared.str("runtimeEpoch").to_string();
    let phone_deadline = prepared.0["deadlineUptimeMs"].as_u64().unwrap_or(0);
    let identity = scripts::identity_text(job, &epoch, phone_deadline);
    dispatch(&epoch)?;
    let wait = START_WAIT_MS.min(deadline.remaining().saturating_sub(CANCEL_RESERVE).as_millis() as u64);
    let started = timed(&mut trips, "start", client::run(device, &scripts::start(job, &epoch, &identity, wait), deadline.capped(step))).await;
    match started {
        // A start guard refused: the worker was not launched by this call.
        Ok(r) if r.0["ok"] == json!(false) => {
            Err(ProviderError::new(r.str("error"), format!("the shell worker refused to start job {}", job.job_id)).with_details(json!({"reply": r.0, "jobId": job.job_id})).not_dispatched())
        }
        Ok(r) => Ok((epoch, trips, Some(r))),
        Err(_) => Ok((epoch, trips, None)),
    }
}

/// What the phone says of a job now, without acknowledging anything.
pub enum JobState {
    /// The receipt (checked to be this job's) with the job's output.
    Settled { reply: Reply, receipt: Value, stdout: Vec<u8> },
    /// No receipt yet: the query reply (exists / launched / admitted, boot id).
    Pending(Reply),
}

pub async fn query_job(device: &Device, deadline: Deadline, job: &Job) -> Result<JobState, ProviderError> {
    let r = client::run(device, &scripts::query(job), deadline).await?;
    if r.0["settled"] != json!(true) {
        return Ok(JobState::Pending(r));
    }
    let receipt = job_receipt(&r, job)?;
    let stdout = r.b64("stdout")?;
    Ok(JobState::Settled { reply: r, receipt, stdout })
}

/// Cancel a job the worker has not admitted (the cancelled receipt proves it never ran).
pub async fn cancel_job(device: &Device, deadline: Deadline, job: &Job) -> Result<Reply, ProviderError> {
    client::run(device, &scripts::cancel(job), deadline).await
}

/// Acknowledge a settled job's receipt (after the host stored what it proves).
pub async fn acknowledge_job(device: &Device, deadline: Deadline, job: &Job, reply: &Reply) -> Result<(), ProviderError> {
    let mut trips = Vec::new();
    acknowledge(device, deadline, job, reply, &mut trips).await
}

/// A reply whose boot id differs from the job's: the phone rebooted. A job the
/// worker never admitted is cancelled (it provably did not run); an admitted one
/// stays unknown (ambiguous).
async fn runtime_changed(device: &Device, deadline: Deadline, step: Duration, job: &Job, epoch: &str, r: &Reply, mut trips: Vec<Value>) -> Result<ShellRun, ProviderError> {
    let details = json!({"jobId": job.job_id, "runtimeEpoch": epoch, "currentRuntimeEpoch": r.str("runtimeEpoch"), "admitted": r.0["admitted"]});
    let e = ProviderError::new(codes::SHELL_RUNTIME_CHANGED, format!("the phone rebooted during shell job {} (boot id {epoch} → {})", job.job_id, r.str("runtimeEpoch"))).with_details(details);
    if r.0["admitted"] == json!(false)
        && let Ok(c) = timed(&mut trips, "cancel", client::run(device, &scripts::cancel(job), deadline.capped(step))).await
        && c.0["receipt"].is_string()
        && let Ok(receipt) = decode_receipt(&c)
        && receipt["error"] == json!(codes::SHELL_ACTION_CANCELLED)
    {
        let _ = acknowledge(device, deadline.capped(step), job, &c, &mut trips).await;
        return Err(e.not_dispatched());
    }
    Err(e)
}

/// The settled reply's receipt, which must be this job's (ids and command hash).
fn job_receipt(r: &Reply, job: &Job) -> Result<Value, ProviderError> {
    let receipt = decode_receipt(r)?;
    if receipt["jobId"] != json!(job.job_id) || receipt["actionId"] != json!(job.action_id) || receipt["commandSha256"] != json!(job.command_sha256) {
        return Err(ProviderError::new(codes::SHELL_PROTOCOL_ERROR, "the shell receipt belongs to another job").with_details(json!({"receipt": receipt, "jobId": job.job_id})));
    }
    Ok(receipt)
}

fn decode_receipt(r: &Reply) -> Result<Value, ProviderError> {
    let bytes = r.b64("receipt")?;
    serde_json::from_slice(&bytes).map_err(|e| ProviderError::new(codes::SHELL_PROTOCOL_ERROR, format!("the shell receipt is not JSON: {e}")))
}

/// A settled reply: check the receipt is this job's, acknowledge it, and turn a
/// non-dispatch receipt into its error.
async fn finish(device: &Device, deadline: Deadline, step: Duration, job: &Job, r: &Reply, mut trips: Vec<Value>) -> Result<ShellRun, ProviderError> {
    let receipt = job_receipt(r, job)?;
    let acknowledged = acknowledge(device, deadline.capped(step), job, r, &mut trips).await.is_ok();
    if receipt["dispatched"] != json!(true) {
        let code = receipt["error"].as_str().unwrap_or(codes::SHELL_PROTOCOL_ERROR).to_string();
        return Err(ProviderError::new(code, format!("shell job {} settled without running", job.job_id)).with_details(json!({"receipt": receipt})).not_dispatched());
    }
    Ok(ShellRun { exit_code: receipt["exitCode"].as_i64().unwrap_or(-1), stdout: r.b64("stdout")?, stderr: r.b64("stderr")?, receipt, acknowledged, round_trips: trips })
}

async fn acknowledge(device: &Device, deadline: Deadline, job: &Job, r: &Reply, trips: &mut Vec<Value>) -> Result<(), ProviderError> {
    let sha = hex(&Sha256::digest(r.b64("receipt")?));
    let a = timed(trips, "acknowledge", client::run(device, &scripts::acknowledge(job, &sha), deadline)).await?;
    refuse_unless_ok(&a)
}

fn refuse_unless_ok(r: &Reply) -> Result<(), ProviderError> {
    if r.0["ok"] == json!(true) {
        return Ok(());
    }
    let code = r.str("error");
    let code = if code.is_empty() { codes::SHELL_PROTOCOL_ERROR } else { code };
    Err(ProviderError::new(code, format!("the shell worker refused: {code}")).with_details(r.0.clone()).not_dispatched())
}

async fn timed<T>(trips: &mut Vec<Value>, step: &str, f: impl Future<Output = Result<T, ProviderError>>) -> Result<T, ProviderError> {
    let t = Instant::now();
    let r = f.await;
    trips.push(json!({"step": step, "ms": (t.elapsed().as_micros() as f64 / 1000.0), "ok": r.is_ok()}));
    r
}

/// The action record (`android.actions`, keyed by the host action id), written
/// before the dispatch mark so `reconcile` can find the job after a crash.
pub fn record(action: &Action<'_>, serial: &str, job: &Job, runtime_epoch: &str) -> Value {
    let mut r = json!({"schemaVersion": RECORD_SCHEMA, "kind": "shell", "command": action.command, "serial": serial,
        "device": {"actionId": job.action_id, "jobId": job.job_id, "runtimeEpoch": runtime_epoch, "commandSha256": job.command_sha256}});
    if let Some(p) = action.package {
        r["packageName"] = json!(p);
    }
    r
}

fn append_record(ctx: &Context<'_>, action: &Action<'_>, serial: &str, job: &Job, runtime_epoch: &str) -> Result<(), ProviderError> {
    let rec = record(action, serial, job, runtime_epoch);
    ctx.facts().append(RECORD_STREAM, action.host_action_id, &rec, Durability::Sync).map(|_| ()).map_err(|e| e.not_dispatched())
}

/// Settle a shell action from the phone (the `device-ownership reconcile` branch
/// for `kind:"shell"` records). Answers `{status:"settled", receipt}` from the
/// phone's receipt (acknowledging it), cancels a job the worker never admitted
/// (the cancelled receipt settles it as not dispatched), and otherwise stays
/// `{status:"unsettled", reason}` — `shell_runtime_changed` after a reboot of an
/// admitted job, `shell_action_running`, `shell_execution_not_found`.
#[allow(dead_code)] // the shell branch of the reconcile hook (reconcile.rs, lane NATIVE)
pub async fn reconcile(ctx: &Context<'_>, record: &Value) -> Result<Value, ProviderError> {
    let d = &record["device"];
    let (Some(action_id), Some(job_id), Some(epoch), Some(sha), Some(serial)) = (d["actionId"].as_str(), d["jobId"].as_str(), d["runtimeEpoch"].as_str(), d["commandSha256"].as_str(), record["serial"].as_str()) else {
        return Err(ProviderError::new("invalid_action_record", "the shell action record lacks actionId/jobId/runtimeEpoch/commandSha256/serial").not_dispatched());
    };
    let deadline = Deadline::after(ctx.remaining());
    let step = Duration::from_millis(crate::manifest::DEFAULT_ADB_TIMEOUT_MS);
    let server = crate::adb::server::AdbServer::from_process_env(None)?;
    let device = Device::new(server, serial);
    let job = Job::known(action_id, job_id, sha);
    reconcile_job(&device, deadline, step, &job, epoch).await
}

#[allow(dead_code)]
pub async fn reconcile_job(device: &Device, deadline: Deadline, step: Duration, job: &Job, epoch: &str) -> Result<Value, ProviderError> {
    let mut trips = Vec::new();
    let q = timed(&mut trips, "query", client::run(device, &scripts::query(job), deadline.capped(step))).await?;
    let settled = |r: &Reply, receipt: Value| json!({"status": "settled", "receipt": {"actionId": job.action_id, "ok": receipt["ok"], "dispatched": receipt["dispatched"], "exitCode": receipt["exitCode"], "error": receipt["error"], "source": "shell-receipt", "shell": receipt, "runtimeEpochNow": r.str("runtimeEpoch")}});
    if q.0["settled"] == json!(true) {
        let receipt = decode_receipt(&q)?;
        let _ = acknowledge(device, deadline.capped(step), job, &q, &mut trips).await;
        return Ok(settled(&q, receipt));
    }
    if q.0["exists"] != json!(true) {
        return Ok(json!({"status": "unsettled", "reason": codes::SHELL_EXECUTION_NOT_FOUND, "jobId": job.job_id}));
    }
    if q.0["admitted"] == json!(false) {
        let c = timed(&mut trips, "cancel", client::run(device, &scripts::cancel(job), deadline.capped(step))).await?;
        if c.0["settled"] == json!(true) {
            let receipt = decode_receipt(&c)?;
            let _ = acknowledge(device, deadline.capped(step), job, &c, &mut trips).await;
            return Ok(settled(&c, receipt));
        }
    }
    if q.str("runtimeEpoch") != epoch {
        return Ok(json!({"status": "unsettled", "reason": codes::SHELL_RUNTIME_CHANGED, "jobId": job.job_id, "runtimeEpoch": epoch, "currentRuntimeEpoch": q.str("runtimeEpoch")}));
    }
    Ok(json!({"status": "unsettled", "reason": "shell_action_running", "jobId": job.job_id}))
}

/// A command's one shell action: [`run_argv`] under the invocation's action id; a
/// nonzero exit of the Android tool is `shell_command_failed` (the tool refused and
/// changed nothing: Android's `input`/`pm`/`appops`/`am` fail before acting).
pub(crate) async fn command_action(ctx: &Context<'_>, action_id: &str, device: &Device, budget: &crate::commands::Budget, command: &str, package: Option<&str>, argv: &[&str]) -> Result<ShellRun, ProviderError> {
    let (deadline, step) = (budget.deadline, budget.adb_step);
    // `<host id>:<n>` names the n-th job of one host action; its record is the host id's.
    let host_action_id = match action_id.rsplit_once(':') {
        Some((host, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => action_id,
    };
    let action = Action { action_id, host_action_id, command, package };
    let run = run_argv(ctx, device, deadline, step, &action, argv).await?;
    exited_zero(argv, &run)?;
    Ok(run)
}

/// A tool the worker ran must have exited 0; otherwise `shell_command_failed`, a
/// known outcome (the tool ran and its receipt says how it ended).
pub(crate) fn exited_zero(argv: &[&str], run: &ShellRun) -> Result<(), ProviderError> {
    if run.exit_code == 0 {
        return Ok(());
    }
    Err(ProviderError::new(SHELL_COMMAND_FAILED, format!("`{}` exited with {}: {}", argv.join(" "), run.exit_code, run.stderr_text().trim()))
        .with_details(json!({"exitCode": run.exit_code, "stdout": run.stdout_text(), "stderr": run.stderr_text(), "execution": run.execution()}))
        .settled_after_dispatch())
}

/// The Android tool the worker ran exited nonzero.
pub const SHELL_COMMAND_FAILED: &str = "shell_command_failed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_sh_quotes_every_argument_and_is_capped() {
        let job = Job::new("00000000-0000-4000-8000-000000000001", &["input", "text", "it's $HOME"]).unwrap();
        assert_eq!(job.command, "exec 'input' 'text' 'it'\\''s $HOME'\n");
        assert_eq!(job.job_id, "00000000-0000-4000-8000-000000000001", "a UUID action id is the job id");
        assert_eq!(job.command_sha256, hex(&Sha256::digest(job.command.as_bytes())));
        let big = "x".repeat(MAX_COMMAND_BYTES);
        let e = Job::new("a", &["echo", &big]).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::SHELL_COMMAND_TOO_LARGE, Some(false)));
    }

    #[test]
    fn other_action_ids_map_to_a_stable_uuid() {
        let a = job_id("op-1:action-2");
        assert!(is_uuid(&a), "{a}");
        assert_eq!(a, job_id("op-1:action-2"));
        assert_ne!(a, job_id("op-1:action-3"));
        assert!(!is_uuid("00000000-0000-4000-8000-00000000000G"));
    }

    #[test]
    fn the_record_names_the_job() {
        let job = Job::new("00000000-0000-4000-8000-000000000001", &["input", "keyevent", "4"]).unwrap();
        let action = Action { action_id: &job.action_id, host_action_id: &job.action_id, command: "keyevent", package: None };
        let r = record(&action, "emulator-5554", &job, "boot-1");
        assert_eq!(r["device"], json!({"actionId": job.action_id, "jobId": job.job_id, "runtimeEpoch": "boot-1", "commandSha256": job.command_sha256}));
        assert_eq!((r["kind"].clone(), r["schemaVersion"].clone(), r.get("packageName")), (json!("shell"), json!(RECORD_SCHEMA), None));
    }
}
