//! Hostile and careless input through the public surfaces (issue 10): arguments
//! that are not UTF-8, flags without a command, foreign per-operation fields,
//! integers beyond 64 bits, configuration that cannot work, a hostile digest
//! cache, and malformed MCP lines. Every case expects exactly one contract reply
//! (CLI) or exactly one JSON-RPC reply per id (MCP), never a panic or a hang. The
//! regression corpus under `tests/corpus/` is replayed here end to end.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use aab_e2e::{Run, TestEnv, error_code, error_facts, error_field};
use serde_json::{Value, json};

fn corpus(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus").join(kind)
}

/// `expected.json` of a corpus directory: case name → expectation.
fn expectations(kind: &str) -> BTreeMap<String, Value> {
    let path = corpus(kind).join("expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

fn corpus_file(kind: &str, name: &str, extension: &str) -> Vec<u8> {
    let path = corpus(kind).join(format!("{name}.{extension}"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// One compact JSON reply on stdout, exit 1, no panic on stderr.
#[track_caller]
fn one_rejection(env: &TestEnv, run: &Run) -> Value {
    let body = env.json_of(run);
    env.check(run.exit() == 1, run, "expected exit code 1");
    env.check(!run.stderr.contains("panicked"), run, "the CLI panicked");
    env.check(error_facts(&body).get("dispatched") == Some(&json!(false)), run, "a rejection is dispatched:false");
    body
}

#[track_caller]
fn expect_error(env: &TestEnv, run: &Run, code: &str, field: Option<&str>) -> Value {
    let body = one_rejection(env, run);
    env.check(error_code(&body) == Some(code), run, &format!("expected error `{code}`"));
    if let Some(field) = field {
        env.check(error_field(&body) == Some(field), run, &format!("expected field `{field}`"));
    }
    body
}

#[test]
fn argv_corpus_replays_through_the_binary() {
    let env = TestEnv::new();
    for (name, expected) in expectations("argv") {
        let bytes = corpus_file("argv", &name, "argv");
        let args: Vec<OsString> = bytes.split(|b| *b == 0).map(|a| OsString::from_vec(a.to_vec())).collect();
        let run = env.aab_os(&args);
        let code = expected["error"].as_str().expect("expected.error");
        expect_error(&env, &run, code, expected["field"].as_str());
    }
    // None of them may have started a runtime.
    assert!(env.endpoint().is_none(), "a rejected argument started the runtime\n{}", env.report(None));
}

#[test]
fn flags_without_a_command_do_not_invent_one() {
    let env = TestEnv::new();
    let run = env.aab(&["--operation", "status"]);
    let body = expect_error(&env, &run, "missing_argument", Some("command"));
    let message = error_facts(&body)["message"].as_str().unwrap_or_default();
    env.check(!message.contains("unknown command"), &run, "the message must not speak of an unknown command");
}

#[test]
fn each_builtin_operation_accepts_only_its_own_fields() {
    let env = TestEnv::new();
    let run = env.aab(&["runtime", "--operation", "status", "--cancel-request-id", "x"]);
    expect_error(&env, &run, "unsupported_argument", Some("cancelRequestId"));
    let run = env.aab(&["device-ownership", "--operation", "status", "--serial", "s", "--action-id", "a"]);
    expect_error(&env, &run, "unsupported_argument", Some("actionId"));
    let sha = "0".repeat(64);
    let run = env.aab(&["evidence", "--operation", "verify", "--archive-dir", "a", "--manifest-sha256", &sha, "--namespace", "intent"]);
    expect_error(&env, &run, "unsupported_argument", Some("namespace"));
    assert!(env.endpoint().is_none(), "a rejected request started the runtime\n{}", env.report(None));
    // The operations' own fields still work, and help narrows by operation.
    let run = env.aab(&["runtime", "--operation", "status"]);
    env.expect_ok(&run, "runtime status");
    let run = env.aab(&["--help", "runtime", "--operation", "cancel"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 0 && body.to_string().contains("cancelRequestId"), &run, "help for runtime cancel names cancelRequestId");
}

#[test]
fn runtime_home_that_cannot_be_a_directory_is_a_configuration_error() {
    let env = TestEnv::new();
    let file = env.root.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    for home in [file.clone(), file.join("below")] {
        let home = home.display().to_string();
        for args in [&["runtime", "--operation", "status"][..], &["web-provider-status"][..]] {
            let run = env.aab_with_env(args, &[("AI_APP_BRIDGE_RUNTIME_HOME", &home)]);
            expect_error(&env, &run, "invalid_configuration", Some("AI_APP_BRIDGE_RUNTIME_HOME"));
        }
    }
}

#[test]
fn unreadable_plugin_dir_is_named_instead_of_unknown_command() {
    let env = TestEnv::new();
    let missing = env.root.join("no-such-plugins").display().to_string();
    let with = [("AI_APP_BRIDGE_PLUGIN_DIR", missing.as_str())];
    let run = env.aab_with_env(&["web-provider-status"], &with);
    let body = expect_error(&env, &run, "plugin_dir_unavailable", Some("AI_APP_BRIDGE_PLUGIN_DIR"));
    let details = &error_facts(&body)["details"];
    env.check(details["pluginDir"] == json!(missing) && details["command"] == json!("web-provider-status"), &run, "details name the directory and the command");
    // Discovery says the same.
    let run = env.aab_with_env(&["--help", "web-status"], &with);
    env.check(env.json_of(&run).to_string().contains("plugin_dir_unavailable"), &run, "help names the plugin directory problem");
    // Host built-ins keep working.
    let run = env.aab_with_env(&["runtime", "--operation", "status"], &with);
    env.expect_ok(&run, "runtime status without a plugin directory");
    // `plugins list` reports it.
    let run = env.aab_with_env(&["plugins", "list"], &with);
    let body = env.json_of(&run);
    env.check(
        body.pointer("/value/pluginDirError/error") == Some(&json!("plugin_dir_unavailable")),
        &run,
        "plugins list reports pluginDirError",
    );
}

#[test]
fn fact_cache_switch_accepts_only_on_and_off() {
    let env = TestEnv::new();
    let run = env.aab_with_env(&["runtime", "--operation", "status"], &[("AI_APP_BRIDGE_FACT_CACHE", "bogus")]);
    expect_error(&env, &run, "invalid_configuration", Some("AI_APP_BRIDGE_FACT_CACHE"));
    for good in ["off", "OFF", "on"] {
        let run = env.aab_with_env(&["runtime", "--operation", "status"], &[("AI_APP_BRIDGE_FACT_CACHE", good)]);
        env.expect_ok(&run, &format!("AI_APP_BRIDGE_FACT_CACHE={good}"));
    }
}

#[test]
fn integers_beyond_64_bits_are_rejected_not_clamped() {
    let env = TestEnv::new();
    for command in ["script", "intent"] {
        let run = env.aab(&[command, "--operation", "status", "--operation-id", "op-1", "--after-sequence", "99999999999999999999999"]);
        expect_error(&env, &run, "invalid_argument", Some("afterSequence"));
    }
    // Through MCP the same value arrives as a JSON number: the schema bounds it.
    let mut mcp = env.mcp();
    mcp.send_raw(br#"{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"run","arguments":{"command":"script","arguments":{"operation":"status","operationId":"op-1","afterSequence":99999999999999999999999},"extract":null}}}"#);
    let frames = mcp.frames_until(&json!("big"));
    let text = frames.last().and_then(|f| f.pointer("/result/content/0/text")).and_then(Value::as_str).unwrap_or_default();
    let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if error_code(&body) != Some("invalid_argument") || error_field(&body) != Some("afterSequence") {
        mcp.fail(&format!("expected invalid_argument on afterSequence, got {body}"));
    }
}

#[test]
fn digest_cache_is_private_and_a_fifo_in_its_place_does_not_hang() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    env.install_fixtures();
    let cache = env.home.join("digest-cache.json");
    // A FIFO nobody writes to where the cache belongs: reading it used to block.
    let c = std::ffi::CString::new(cache.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain syscall with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let run = env.aab(&["--help", "fixture-echo"]);
    env.check(run.exit() == 0 && run.notes.is_empty(), &run, "help must answer with a FIFO as the digest cache");
    let run = env.aab(&["plugins", "list"]);
    env.json_of(&run);
    let meta = std::fs::symlink_metadata(&cache).expect("digest cache written");
    assert!(meta.is_file(), "the digest cache replaced the FIFO with a regular file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "digest-cache.json must be 0600\n{}", env.report(None));
}

#[test]
fn invalid_utf8_arguments_never_panic() {
    let env = TestEnv::new();
    let bad = || OsString::from_vec(vec![0xff]);
    let run = env.aab_os(&["runtime".into(), "--operation".into(), bad()]);
    expect_error(&env, &run, "invalid_argument", Some("operation"));
    let run = env.aab_os(&[bad()]);
    expect_error(&env, &run, "invalid_argument", Some("argv[0]"));
    let run = env.aab_os(&["runtime".into(), OsString::from_vec(b"--\xff".to_vec()), "status".into()]);
    expect_error(&env, &run, "invalid_argument", Some("argv[1]"));
}

// ---------------------------------------------------------------------------
// MCP

/// Error responses among `frames` (those with an `error` member), by id.
fn errors_by_id(frames: &[Value]) -> Vec<(Value, i64)> {
    frames
        .iter()
        .filter(|f| f.get("error").is_some())
        .map(|f| (f.get("id").cloned().unwrap_or(json!("<no id member>")), f["error"]["code"].as_i64().unwrap_or(0)))
        .collect()
}

#[test]
fn mcp_corpus_each_line_gets_exactly_its_reply_and_the_server_keeps_serving() {
    let env = TestEnv::new();
    let mut mcp = env.mcp();
    for (n, (name, expected)) in expectations("mcp").into_iter().enumerate() {
        let line = corpus_file("mcp", &name, "line");
        mcp.send_raw(&line);
        // A sentinel request after each line: everything before its reply belongs
        // to the line (rmcp and the filter answer in order of reading).
        let sentinel = json!(format!("sentinel-{n}"));
        mcp.send_raw(json!({"jsonrpc": "2.0", "id": sentinel, "method": "ping"}).to_string().as_bytes());
        let frames = mcp.frames_until(&sentinel);
        let before = &frames[..frames.len() - 1];
        let errors = errors_by_id(before);
        let responses = before.iter().filter(|f| f.get("result").is_some() || f.get("error").is_some()).count();
        if expected.get("reply") == Some(&json!(false)) {
            if responses != 0 {
                mcp.fail(&format!("corpus `{name}`: a notification was answered: {before:?}"));
            }
            continue;
        }
        let want = (expected["id"].clone(), expected["code"].as_i64().unwrap());
        if errors != vec![want.clone()] || responses != 1 {
            mcp.fail(&format!("corpus `{name}`: expected exactly one error reply {want:?}, got {before:?}"));
        }
        for frame in before {
            if frame.get("id").is_none() {
                mcp.fail(&format!("corpus `{name}`: a reply without an `id` member: {frame}"));
            }
        }
    }
    // Still serving: a real call works after all of that.
    let (body, is_error) = mcp.call_tool("run", json!({"command": "runtime", "arguments": {"operation": "status"}, "extract": null}));
    if is_error || body.pointer("/execution/ok") != Some(&json!(true)) {
        mcp.fail(&format!("runtime status after the corpus failed: {body}"));
    }
}

#[test]
fn mcp_line_over_16_mib_is_answered_with_its_id() {
    let env = TestEnv::new();
    let mut mcp = env.mcp();
    let mut line = br#"{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"run","arguments":{"command":""#.to_vec();
    line.extend(std::iter::repeat_n(b'a', 16 * 1024 * 1024 + 1));
    line.extend_from_slice(br#"","extract":null}}}"#);
    mcp.send_raw(&line);
    let frames = mcp.frames_until(&json!("huge"));
    let errors = errors_by_id(&frames);
    if errors != vec![(json!("huge"), -32700)] {
        mcp.fail(&format!("expected one -32700 reply with id \"huge\", got {errors:?}"));
    }
    // Serving continues.
    let reply = mcp.request("tools/list", json!({}));
    if reply.get("result").is_none() || !mcp.alive() {
        mcp.fail("tools/list after an oversized line failed");
    }
}

#[test]
fn mcp_run_replays_the_request_corpus() {
    let env = TestEnv::new();
    let mut mcp = env.mcp();
    for (name, expected) in expectations("request") {
        let text = String::from_utf8(corpus_file("request", &name, "json")).expect("request corpus is UTF-8");
        let request: Value = serde_json::from_str(&text).expect("request corpus is JSON");
        let arguments = json!({"command": request["command"], "arguments": request["arguments"], "extract": null});
        let (body, is_error) = mcp.call_tool("run", arguments);
        let code = expected["error"].as_str();
        if !is_error || error_code(&body) != code || (expected.get("field").is_some() && error_field(&body) != expected["field"].as_str()) {
            mcp.fail(&format!("request corpus `{name}`: expected {expected}, got {body}"));
        }
    }
    assert!(env.endpoint().is_none(), "a rejected request started the runtime");
}
