//! FactStore e2e: ordinary command history (`control.history`), response snapshots
//! behind a ref and `response --operation read`, regex/script extraction (pre-dispatch
//! syntax check, timeout, type errors, no worker left behind), offline evidence
//! verification and export, and secrets never reaching the store's raw bytes.
//! Everything goes through real `aab` processes, a real runtime and the `fixture` plugin.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use aab_e2e::{Run, TestEnv, all_files, error_code, error_facts};
use serde_json::{Value, json};

// ------------------------------------------------------------------ helpers

fn fixture_env() -> TestEnv {
    let env = TestEnv::new();
    env.install_fixtures();
    env
}

/// The run must fail with `code`, not dispatched; returns the body.
#[track_caller]
fn expect_failure(env: &TestEnv, run: &Run, code: &str, what: &str) -> Value {
    let body = env.json_of(run);
    env.check(error_code(&body) == Some(code), run, &format!("{what}: expected error `{code}`"));
    env.check(error_facts(&body).get("ok") == Some(&json!(false)), run, &format!("{what}: a failure is ok:false"));
    env.check(run.exit() != 0, run, &format!("{what}: a failure must not exit 0"));
    body
}

#[track_caller]
fn global_seq(env: &TestEnv, run: &Run) -> u64 {
    let body = env.expect_ok(run, "command with history");
    env.check(body.pointer("/control/history/status") == Some(&json!("stored")), run, "control.history.status must be `stored`");
    env.check(body.pointer("/control/history/replayed") == Some(&json!(false)), run, "control.history.replayed must be false");
    match body.pointer("/control/history/action/globalSeq").and_then(Value::as_u64) {
        Some(n) => n,
        None => env.fail(run, "control.history.action.globalSeq must be a number"),
    }
}

fn echo_with_extract(env: &TestEnv, message: &str, extract: &Value) -> Run {
    env.aab(&["fixture-echo", "--message", message, "--extract", &extract.to_string()])
}

/// Processes (other than the runtime) that look like an extraction worker of this env.
fn extraction_workers(env: &TestEnv) -> Vec<(i32, String)> {
    let root = env.root.display().to_string();
    let runtime = env.runtime_pid();
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if Some(pid) == runtime {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        let ppid = std::fs::read_to_string(entry.path().join("status"))
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("PPid:").map(|v| v.trim().parse::<i32>().unwrap_or(0))));
        let child_of_runtime = runtime.is_some() && ppid == runtime;
        let looks_like_worker = cmdline.contains("aab-extract") || cmdline.contains("extract-worker") || cmdline.contains("node");
        if cmdline.contains(&root) && !cmdline.contains("aab ") && looks_like_worker || child_of_runtime && looks_like_worker {
            found.push((pid, cmdline));
        }
    }
    found
}

fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ------------------------------------------------------------------ 1. history

#[test]
fn history_is_stored_with_an_increasing_global_sequence_across_restarts() {
    let env = fixture_env();
    let first = global_seq(&env, &env.aab(&["fixture-echo", "--message", "hi"]));
    let second = global_seq(&env, &env.aab(&["fixture-echo", "--message", "hi again"]));
    assert!(second > first, "globalSeq must increase: {first} then {second}\n{}", env.report(None));

    let stop = env.aab(&["runtime", "--operation", "stop"]);
    env.expect_ok(&stop, "runtime stop");
    let third = global_seq(&env, &env.aab(&["fixture-echo", "--message", "after restart"]));
    assert!(third > second, "globalSeq must continue after a restart: {second} then {third}\n{}", env.report(None));
}

#[test]
fn history_is_disabled_when_the_runtime_started_with_fact_cache_off() {
    let env = fixture_env();
    let off = [("AI_APP_BRIDGE_FACT_CACHE", "off")];
    // The call that starts the runtime carries the setting (it is part of the
    // runtime's configuration, so later calls carry it too).
    let run = env.aab_with_env(&["fixture-echo", "--message", "hi"], &off);
    let body = env.expect_ok(&run, "echo starting a runtime without FactStore");
    env.check(body.pointer("/control/history/status") == Some(&json!("disabled")), &run, "control.history.status must be `disabled`");
    let run = env.aab_with_env(&["fixture-echo", "--message", "hi again"], &off);
    let body = env.expect_ok(&run, "second echo on a runtime without FactStore");
    env.check(body.pointer("/control/history/status") == Some(&json!("disabled")), &run, "control.history.status must be `disabled`");
}

// ------------------------------------------------------------------ 2. snapshots

#[test]
fn over_budget_reply_is_delivered_as_a_ref_and_read_back_byte_identical() {
    let env = fixture_env();
    let text: String = (0..20_000).map(|i| if i % 97 == 0 { 'Z' } else { (b'a' + (i % 26) as u8) as char }).collect();
    let run = env.aab(&["fixture-text", "--text", &text, "--output", r#"{"maxBytes":16384}"#, "--extract", "null"]);
    let body = env.json_of(&run);
    env.check(run.stdout.trim_end().len() <= 16384, &run, "stdout must fit the 16384-byte budget");
    env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "the command itself succeeded");
    env.check(body.pointer("/delivery/status") == Some(&json!("reference")), &run, "delivery.status must be `reference`");
    env.check(body.pointer("/delivery/reason") == Some(&json!("output_budget_exceeded")), &run, "delivery.reason");
    env.check(body.get("value").is_none(), &run, "an over-budget reply carries no value");
    env.check(body.pointer("/control/source/persisted") == Some(&json!(true)), &run, "control.source.persisted must be true");
    let Some(reference) = body.pointer("/control/source/ref").cloned() else { env.fail(&run, "control.source.ref missing") };

    // Read back: byte-identical, not dispatched, the original identity.
    let read = env.aab(&["response", "--operation", "read", "--ref", &reference.to_string(), "--extract", "null", "--output", r#"{"maxBytes":262144}"#]);
    let back = env.expect_ok(&read, "response read");
    env.check(back.get("value") == Some(&Value::String(text.clone())), &read, "the read value must be byte-identical to the original text");
    env.check(
        back.pointer("/execution/dispatched") == Some(&json!(false)) && back.pointer("/execution/ambiguous") == Some(&json!(false)),
        &read,
        "a read is dispatched:false, ambiguous:false",
    );
    env.check(back.pointer("/control/origin/identity/command") == Some(&json!("fixture-text")), &read, "control.origin.identity.command");

    // A regex extraction over the stored snapshot.
    let extract = json!({"mode": "regex", "pattern": "Z([a-z])", "inputPath": ""});
    let read = env.aab(&["response", "--operation", "read", "--ref", &reference.to_string(), "--extract", &extract.to_string()]);
    let back = env.expect_ok(&read, "response read with regex");
    let expected = text.matches('Z').count() - usize::from(text.ends_with('Z'));
    let n = back.get("value").and_then(Value::as_array).map(Vec::len);
    env.check(n == Some(expected), &read, &format!("the regex over the snapshot must yield {expected} matches"));

    // A changed checksum.
    let mut bad = reference.clone();
    let sum = bad["checksum"].as_str().unwrap().to_string();
    let flipped = match sum.strip_prefix('0') {
        Some(rest) => format!("1{rest}"),
        None => format!("0{}", &sum[1..]),
    };
    bad["checksum"] = json!(flipped);
    let run = env.aab(&["response", "--operation", "read", "--ref", &bad.to_string(), "--extract", "null"]);
    expect_failure(&env, &run, "response_checksum_mismatch", "changed checksum");

    // An unknown evidence id.
    let mut unknown = reference.clone();
    unknown["evidenceId"] = json!("response:response:00000000-0000-4000-8000-000000000000:1:4");
    let run = env.aab(&["response", "--operation", "read", "--ref", &unknown.to_string(), "--extract", "null"]);
    expect_failure(&env, &run, "response_not_found", "unknown evidenceId");
}

#[test]
fn echo_with_extract_null_within_budget_is_inline() {
    let env = fixture_env();
    let message = "x".repeat(3000);
    let run = env.aab(&["fixture-echo", "--message", &message, "--count", "3", "--output", r#"{"maxBytes":16384}"#, "--extract", "null"]);
    let body = env.expect_ok(&run, "echo within budget");
    env.check(body.pointer("/delivery/status") == Some(&json!("inline")), &run, "inline delivery");
    env.check(body.pointer("/value/echo") == Some(&json!(message)), &run, "the echo is the message");
}

// ------------------------------------------------------------------ 3. extraction

#[test]
fn regex_extraction_returns_all_matches_with_groups() {
    let env = fixture_env();
    let run = echo_with_extract(&env, "id=1 id=22 id=333", &json!({"mode": "regex", "pattern": "id=(\\d+)", "inputPath": "/echo"}));
    let body = env.expect_ok(&run, "regex extraction");
    env.check(body.pointer("/extraction/status") == Some(&json!("succeeded")), &run, "extraction.status succeeded");
    let text = body.get("value").map(Value::to_string).unwrap_or_default();
    let matches = body.get("value").and_then(Value::as_array).cloned().unwrap_or_default();
    env.check(matches.len() == 3, &run, "three matches");
    for g in ["\"1\"", "\"22\"", "\"333\""] {
        env.check(text.contains(g), &run, &format!("group {g} must be reported"));
    }
}

#[test]
fn javascript_and_python_script_extraction() {
    let env = fixture_env();
    let js = json!({"mode": "script", "language": "javascript", "source": "function main(ctx){return ctx.inputs.response.echo.length}"});
    let run = echo_with_extract(&env, "hello", &js);
    let body = env.expect_ok(&run, "javascript extraction");
    env.check(body.get("value") == Some(&json!(5)), &run, "the JS extraction returns the length");

    let py = json!({"mode": "script", "language": "python", "source": "def main(ctx):\n    return len(ctx.inputs[\"response\"][\"echo\"])\n"});
    let run = echo_with_extract(&env, "hello!", &py);
    let body = env.expect_ok(&run, "python extraction");
    env.check(body.get("value") == Some(&json!(6)), &run, "the Python extraction returns the length");
}

#[test]
fn script_syntax_error_is_rejected_before_dispatch() {
    let env = fixture_env();
    let warm = env.aab(&["fixture-echo", "--message", "warm"]);
    env.expect_ok(&warm, "warm-up");
    let before = env.runtime_counter("executed");
    let bad = json!({"mode": "script", "language": "javascript", "source": "function main(ctx){ return ( }"});
    let run = echo_with_extract(&env, "hi", &bad);
    let body = expect_failure(&env, &run, "extraction_syntax_error", "JS syntax error");
    env.check(body.get("failureStage") == Some(&json!("validation")), &run, "failureStage must be `validation`");
    let after = env.runtime_counter("executed");
    env.check(after == before, &run, &format!("the command must not be executed (executed {before} -> {after})"));

    let bad_py = json!({"mode": "script", "language": "python", "source": "def main(ctx):\n  return (\n"});
    let run = echo_with_extract(&env, "hi", &bad_py);
    let body = expect_failure(&env, &run, "extraction_syntax_error", "Python syntax error");
    env.check(body.get("failureStage") == Some(&json!("validation")), &run, "failureStage must be `validation` (Python)");
}

#[test]
fn script_timeout_kills_the_worker() {
    let env = fixture_env();
    let looping = json!({"mode": "script", "language": "javascript", "source": "function main(ctx){ for(;;){} }", "timeoutMs": 300});
    let run = echo_with_extract(&env, "hi", &looping);
    let body = env.json_of(&run);
    env.check(body.pointer("/extraction/error") == Some(&json!("extraction_timeout")), &run, "extraction.error must be `extraction_timeout`");
    env.check(run.exit() == 2, &run, "an extraction failure exits 2");
    env.check(body.get("failureStage") == Some(&json!("extraction")), &run, "failureStage must be `extraction`");
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = extraction_workers(&env);
    while !left.is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        left = extraction_workers(&env);
    }
    env.check(left.is_empty(), &run, &format!("no extraction worker may be left running: {left:?}"));
}

#[test]
fn script_returning_nan_or_bigint_is_a_type_error() {
    let env = fixture_env();
    for source in ["function main(ctx){ return NaN }", "function main(ctx){ return 10n }", "function main(ctx){ return {a: [1, Infinity]} }"] {
        let run = echo_with_extract(&env, "hi", &json!({"mode": "script", "language": "javascript", "source": source}));
        let body = env.json_of(&run);
        env.check(
            body.pointer("/extraction/error") == Some(&json!("extraction_type_error")),
            &run,
            &format!("`{source}` must fail with extraction_type_error"),
        );
        env.check(body.get("failureStage") == Some(&json!("extraction")) && run.exit() == 2, &run, "extraction failure, exit 2");
        env.check(body.get("value").is_none(), &run, "no value on an extraction failure");
    }
    let run = echo_with_extract(&env, "hi", &json!({"mode": "script", "language": "python", "source": "def main(ctx):\n    return float('nan')\n"}));
    let body = env.json_of(&run);
    env.check(body.pointer("/extraction/error") == Some(&json!("extraction_type_error")), &run, "Python NaN must be extraction_type_error");
}

// ------------------------------------------------------------------ 4. evidence

#[test]
fn evidence_verify_of_an_empty_dir_fails_offline_without_a_runtime() {
    let env = fixture_env();
    let empty = env.work.join("empty-archive");
    std::fs::create_dir_all(&empty).unwrap();
    let run = env.aab(&["evidence", "--operation", "verify", "--archive-dir", "empty-archive", "--manifest-sha256", &"0".repeat(64)]);
    let body = env.json_of(&run);
    let code = error_code(&body).unwrap_or_default().to_string();
    env.check(!code.is_empty() && run.exit() != 0, &run, "verify of an empty dir must fail with an error code");
    eprintln!("verify(empty) error code: {code}");
    env.check(env.endpoint_files().is_empty(), &run, "an offline verify must not start a runtime (endpoint.json appeared)");
    env.check(env.runtime_pid().is_none(), &run, "no runtime pid after an offline verify");
}

#[test]
fn evidence_export_of_a_snapshot_verifies_and_detects_tampering() {
    let env = fixture_env();
    let text = "q".repeat(20_000);
    let run = env.aab(&["fixture-text", "--text", &text, "--output", r#"{"maxBytes":16384}"#, "--extract", "null"]);
    let body = env.json_of(&run);
    let Some(op) = body.pointer("/control/source/ref/operationId").and_then(Value::as_str).map(str::to_string) else {
        env.fail(&run, "a persisted snapshot must carry control.source.ref.operationId")
    };
    let run = env.aab(&["evidence", "--operation", "export", "--namespace", "response", "--operation-id", &op, "--output-dir", "out"]);
    let body = env.expect_ok(&run, "evidence export");
    let Some(sha) = body.pointer("/value/manifestSha256").and_then(Value::as_str).map(str::to_string) else {
        env.fail(&run, "export must report value.manifestSha256")
    };
    let out = env.work.join("out");
    env.check(out.join("records.json").is_file() && out.join("manifest.json").is_file(), &run, "archive files");

    let run = env.aab(&["evidence", "--operation", "verify", "--archive-dir", "out", "--manifest-sha256", &sha]);
    let verified = env.json_of(&run);
    env.check(run.exit() == 0 && verified.pointer("/execution/ok") == Some(&json!(true)), &run, "verify of an intact archive is ok");

    // Flip one byte of records.json.
    let path = out.join("records.json");
    let mut bytes = std::fs::read(&path).unwrap();
    let i = bytes.iter().position(|&b| b == b'q').expect("records.json holds the text");
    bytes[i] = b'r';
    std::fs::write(&path, &bytes).unwrap();
    let run = env.aab(&["evidence", "--operation", "verify", "--archive-dir", "out", "--manifest-sha256", &sha]);
    let body = env.json_of(&run);
    let code = error_code(&body).unwrap_or_default().to_string();
    env.check(!code.is_empty() && run.exit() != 0, &run, "a tampered records.json must fail verification");
    eprintln!("verify(tampered) error code: {code}");
}

// ------------------------------------------------------------------ 5. secrets

#[test]
fn secrets_never_reach_the_fact_store_bytes() {
    let env = fixture_env();
    let run = env.aab(&["fixture-echo", "--message", "Authorization: Bearer abc.def.ghi password=hunter2"]);
    env.expect_ok(&run, "echo with secrets");
    // Also a persisted snapshot (regex extraction forces one).
    let run = echo_with_extract(
        &env,
        "Authorization: Bearer abc.def.ghi password=hunter2",
        &json!({"mode": "regex", "pattern": "Bearer", "inputPath": "/echo"}),
    );
    env.expect_ok(&run, "echo with secrets and extraction");
    // Raw bytes while the runtime is live (WAL and shm present), then after a stop
    // (checkpointed into facts.sqlite).
    let mut leaks = Vec::new();
    for phase in ["live", "stopped"] {
        if phase == "stopped" {
            let _ = env.aab(&["runtime", "--operation", "stop"]);
        }
        let files = all_files(&env.facts);
        assert!(!files.is_empty(), "the FactStore directory is empty\n{}", env.report(None));
        for f in &files {
            let bytes = std::fs::read(f).unwrap_or_default();
            for secret in ["abc.def.ghi", "hunter2"] {
                if contains_bytes(&bytes, secret.as_bytes()) {
                    leaks.push(format!("{phase}: {} contains `{secret}`", f.strip_prefix(Path::new(&env.root)).unwrap_or(f).display()));
                }
            }
        }
    }
    assert!(leaks.is_empty(), "secrets in the FactStore: {leaks:?}\n{}", env.report(None));
}
