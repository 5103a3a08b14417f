//! The device-side scripts of `aab.android-shell-execution/v1` (§2.4). Each one is
//! sent as `sh -c '<script>'` and prints exactly one JSON object on stdout; every
//! value a script prints is either a constant, a boot id, a number or base64, so the
//! JSON is valid without escaping on the phone.
//!
//! Round trips: `prepare` also probes (setsid/nohup, boot id, uptime) and `start`
//! waits briefly for the receipt and prints it with the output, so a quick action
//! costs three adb shells (prepare, start, acknowledge).

use super::{Job, ROOT};
use crate::adb::device::quote;

/// Uptime in ms from `/proc/uptime` (`12345.67 …`): integer seconds × 1000 plus the
/// first three fraction digits (padded), without `bc` or floating point.
const UPTIME_FN: &str = r#"ms() { read u _ < /proc/uptime; s=${u%%.*}; f=${u#*.}000; f=${f%"${f#???}"}; echo $((s*1000 + 1$f - 1000)); }"#;

/// Prints the job's state: the receipt with the output once it exists, else what
/// the host needs to decide (boot id, uptime, launched/admitted markers).
const REPORT_FN: &str = r#"report() {
if [ -f "$j/receipt.json" ]; then
  o=; e=
  [ -f "$j/stdout" ] && o=$(base64 -w 0 < "$j/stdout")
  [ -f "$j/stderr" ] && e=$(base64 -w 0 < "$j/stderr")
  printf '{"ok":true,"settled":true,"runtimeEpoch":"%s","receipt":"%s","stdout":"%s","stderr":"%s"}\n' "$b" "$(base64 -w 0 < "$j/receipt.json")" "$o" "$e"
else
  x=false; l=false; a=false
  [ -d "$j" ] && x=true; [ -d "$j/launched" ] && l=true; [ -d "$j/admission" ] && a=true
  printf '{"ok":true,"settled":false,"runtimeEpoch":"%s","uptimeMs":%s,"exists":%s,"launched":%s,"admitted":%s}\n' "$b" "$(ms)" "$x" "$l" "$a"
fi
}"#;

/// The worker (`worker.sh`) after its four assignments `j e h d` (job dir, boot id,
/// command hash, deadline in phone uptime ms). Admission by `mkdir` makes it run at
/// most once against any cancel; the receipt is written to a temp file and renamed.
const WORKER_BODY: &str = r#"cd "$j" || exit 1
mkdir admission 2>/dev/null || exit 0
id=$(cat identity.json); id=${id%?}
receipt() { printf '%s,%s}' "$id" "$1" > receipt.tmp && mv -f receipt.tmp receipt.json; }
nd='"ok":false,"settled":true,"dispatched":false,"ambiguous":false,"exitCode":null,"error":'
[ "$(cat /proc/sys/kernel/random/boot_id)" = "$e" ] || { receipt "$nd\"shell_runtime_changed\""; exit 0; }
s=$(sha256sum command.sh); [ "${s%% *}" = "$h" ] || { receipt "$nd\"shell_command_mismatch\""; exit 0; }
[ "$(ms)" -lt "$d" ] || { receipt "$nd\"shell_action_timeout\""; exit 0; }
ulimit -f 128
sh command.sh > stdout 2> stderr
c=$?
receipt "\"ok\":true,\"settled\":true,\"dispatched\":true,\"ambiguous\":false,\"exitCode\":$c"
"#;

/// `sh -c '<script>'`, the form every step is sent in.
pub fn wrap(script: &str) -> String {
    format!("sh -c {}", quote(script))
}

fn job_vars(job: &Job) -> String {
    format!("r={ROOT}; j={ROOT}/{}; b=$(cat /proc/sys/kernel/random/boot_id)\n{UPTIME_FN}\n", job.job_id)
}

/// Probe + prepare: checks `setsid`/`nohup`, reads boot id and uptime, then under
/// `flock -x` on the store lock (fd 0) deletes acknowledged jobs, enforces the cap,
/// creates the job directory (failure = the id was used) and writes its files.
pub fn prepare(job: &Job, budget_ms: u64) -> String {
    let action_json = serde_json::to_string(&job.action_id).unwrap_or_default();
    format!(
        r#"umask 077
{vars}command -v setsid >/dev/null 2>&1 && command -v nohup >/dev/null 2>&1 || {{ echo '{{"ok":false,"error":"shell_worker_unavailable"}}'; exit 0; }}
mkdir -p "$r" && : >> "$r/prepare.lock" || {{ echo '{{"ok":false,"error":"shell_store_unavailable"}}'; exit 0; }}
(
flock -x 0 || {{ echo '{{"ok":false,"error":"shell_store_unavailable"}}'; exit 0; }}
n=0
for x in "$r"/*; do
  [ -d "$x" ] || continue
  if [ -f "$x/acknowledged" ]; then rm -rf "$x"; else n=$((n+1)); fi
done
[ "$n" -lt {cap} ] || {{ printf '{{"ok":false,"error":"shell_execution_store_full","unacknowledged":%s}}\n' "$n"; exit 0; }}
mkdir "$j" 2>/dev/null || {{ echo '{{"ok":false,"error":"shell_action_id_reused"}}'; exit 0; }}
u=$(ms); dl=$((u + {budget_ms}))
printf '%s' {command} > "$j/command.sh"
printf '{{"schemaVersion":"{schema}","actionId":%s,"jobId":"%s","runtimeEpoch":"%s","commandSha256":"%s","deadlineUptimeMs":%s}}' {action} '{job_id}' "$b" '{sha}' "$dl" > "$j/identity.json"
{{ printf "j='%s'\ne='%s'\nh='%s'\nd=%s\n%s\n" "$j" "$b" '{sha}' "$dl" {uptime_fn}; cat <<'AAB_WORKER_END'
{worker}AAB_WORKER_END
}} > "$j/worker.sh"
printf '{{"ok":true,"prepared":true,"runtimeEpoch":"%s","uptimeMs":%s,"deadlineUptimeMs":%s}}\n' "$b" "$u" "$dl"
) < "$r/prepare.lock"
"#,
        vars = job_vars(job),
        cap = super::MAX_JOBS,
        command = quote(&job.command),
        schema = super::SCHEMA,
        action = quote(&action_json),
        job_id = job.job_id,
        sha = job.command_sha256,
        uptime_fn = quote(UPTIME_FN),
        worker = WORKER_BODY,
    )
}

/// The bytes `prepare` writes to `identity.json` (the start guard compares them).
pub fn identity_text(job: &Job, runtime_epoch: &str, deadline_uptime_ms: u64) -> String {
    let action_json = serde_json::to_string(&job.action_id).unwrap_or_default();
    format!(
        r#"{{"schemaVersion":"{}","actionId":{action_json},"jobId":"{}","runtimeEpoch":"{runtime_epoch}","commandSha256":"{}","deadlineUptimeMs":{deadline_uptime_ms}}}"#,
        super::SCHEMA,
        job.job_id,
        job.command_sha256
    )
}

/// Start: boot-id guard, identity guard, `mkdir launched` (once), the detached
/// worker; then waits up to `wait_ms` on the phone for the receipt and reports.
pub fn start(job: &Job, runtime_epoch: &str, identity: &str, wait_ms: u64) -> String {
    format!(
        r#"{vars}{report}
[ "$b" = {epoch} ] || {{ printf '{{"ok":false,"error":"shell_runtime_changed","runtimeEpoch":"%s"}}\n' "$b"; exit 0; }}
[ "$(cat "$j/identity.json" 2>/dev/null)" = {identity} ] || {{ echo '{{"ok":false,"error":"shell_execution_not_found"}}'; exit 0; }}
mkdir "$j/launched" 2>/dev/null || {{ echo '{{"ok":false,"error":"shell_already_launched"}}'; exit 0; }}
setsid nohup sh "$j/worker.sh" </dev/null >"$j/worker.log" 2>&1 &
i=0
while [ ! -f "$j/receipt.json" ] && [ $i -lt {polls} ]; do sleep 0.01; i=$((i+1)); done
report
"#,
        vars = job_vars(job),
        report = REPORT_FN,
        epoch = quote(runtime_epoch),
        identity = quote(identity),
        polls = wait_ms / 10,
    )
}

/// Query: the job's state (read-only).
pub fn query(job: &Job) -> String {
    format!("{}{REPORT_FN}\nreport\n", job_vars(job))
}

/// Cancel: takes admission if the worker has not; then writes the cancelled
/// (non-dispatch) receipt. Reports either way.
pub fn cancel(job: &Job) -> String {
    format!(
        r#"{vars}{report}
if [ -f "$j/identity.json" ] && mkdir "$j/admission" 2>/dev/null; then
  id=$(cat "$j/identity.json"); id=${{id%?}}
  printf '%s,"ok":false,"settled":true,"dispatched":false,"ambiguous":false,"exitCode":null,"error":"shell_action_cancelled"}}' "$id" > "$j/receipt.tmp" && mv -f "$j/receipt.tmp" "$j/receipt.json"
fi
report
"#,
        vars = job_vars(job),
        report = REPORT_FN,
    )
}

/// Acknowledge: the receipt's SHA-256 must equal what the host read; then
/// `acknowledged` holds it (the next prepare may delete the job).
pub fn acknowledge(job: &Job, receipt_sha256: &str) -> String {
    format!(
        r#"{vars}[ -f "$j/receipt.json" ] || {{ echo '{{"ok":false,"error":"shell_execution_not_found"}}'; exit 0; }}
s=$(sha256sum "$j/receipt.json"); s=${{s%% *}}
[ "$s" = '{sha}' ] || {{ echo '{{"ok":false,"error":"shell_receipt_mismatch"}}'; exit 0; }}
printf '%s' "$s" > "$j/acknowledged.tmp" && mv -f "$j/acknowledged.tmp" "$j/acknowledged" && echo '{{"ok":true,"acknowledged":true}}'
"#,
        vars = job_vars(job),
        sha = receipt_sha256,
    )
}
