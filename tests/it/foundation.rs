//! Foundation e2e: plugin discovery and trust, the shared runtime daemon, its
//! authentication and code fingerprint, argument validation and the MCP adapter —
//! all through real `aab` processes and the fixture plugins.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use aab_e2e::{
    Run, TestEnv, error_code, error_facts, error_field, files_named, find_key, plugin_file_name, process_alive, sha256_hex, wait_for_exit,
};
use serde_json::{Value, json};

// ------------------------------------------------------------------ helpers

/// `aab plugins list` → (the plugin entries, the run).
#[track_caller]
fn plugins_list(env: &TestEnv) -> (Vec<Value>, Run) {
    let run = env.aab(&["plugins", "list"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 0, &run, "`aab plugins list` must exit 0 even when some plugins are refused");
    let Some(list) = find_key(&body, "plugins").and_then(Value::as_array) else {
        env.fail(&run, "`aab plugins list` reply has no `plugins` array")
    };
    (list.clone(), run)
}

/// The entry of the plugin installed as `libaab_plugin_<name>.so`.
#[track_caller]
fn entry<'l>(env: &TestEnv, list: &'l [Value], run: &Run, name: &str) -> &'l Value {
    let file = plugin_file_name(name);
    list.iter()
        .find(|e| e.get("file").and_then(Value::as_str).is_some_and(|f| Path::new(f).file_name().is_some_and(|n| n == file.as_str())))
        .unwrap_or_else(|| env.fail(run, &format!("`aab plugins list` has no entry whose `file` is {file}")))
}

/// (error code, message) of a refused plugin entry; `None` when it looks healthy.
/// Accepts `{status:"<word>", error:"<code>", message}` and `{status:{error|code, message}}`.
fn entry_error(e: &Value) -> Option<(String, String)> {
    let status = e.get("status");
    let nested = |k: &str| status.and_then(|s| s.get(k)).and_then(Value::as_str);
    let error_obj = e.get("error").filter(|v| v.is_object());
    let code = e
        .get("error")
        .and_then(Value::as_str)
        .or_else(|| error_obj.and_then(|o| o.get("error").or_else(|| o.get("code"))).and_then(Value::as_str))
        .or_else(|| nested("error"))
        .or_else(|| nested("code"))
        .or_else(|| e.get("code").and_then(Value::as_str))
        .or_else(|| status.and_then(Value::as_str).filter(|s| s.contains('_')))?;
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error_obj.and_then(|o| o.get("message")).and_then(Value::as_str))
        .or_else(|| nested("message"))
        .unwrap_or("");
    Some((code.to_string(), message.to_string()))
}

#[track_caller]
fn assert_healthy(env: &TestEnv, run: &Run, e: &Value, commands: u64) {
    if let Some((code, message)) = entry_error(e) {
        env.fail(run, &format!("plugin entry should be healthy but reports {code}: {message}\nentry: {e}"));
    }
    let status = e.get("status").and_then(Value::as_str).unwrap_or("");
    env.check(
        !matches!(status, "error" | "failed" | "refused" | "invalid" | "rejected" | ""),
        run,
        &format!("healthy plugin entry has status {status:?}: {e}"),
    );
    env.check(e.get("commandCount").and_then(Value::as_u64) == Some(commands), run, &format!("expected commandCount {commands}: {e}"));
}

/// Assert the entry is refused with `code` and a message naming its file.
#[track_caller]
fn assert_refused(env: &TestEnv, run: &Run, e: &Value, name: &str, code: &str) -> String {
    let Some((got, message)) = entry_error(e) else { env.fail(run, &format!("plugin `{name}` should be refused with {code}; entry: {e}")) };
    env.check(got == code, run, &format!("plugin `{name}` should be refused with {code}, got {got}; entry: {e}"));
    let file = plugin_file_name(name);
    env.check(message.contains(&file), run, &format!("the refusal message must name the file {file}: {message:?}"));
    message
}

/// `aab fixture-echo --message MESSAGE` must succeed through the runtime.
#[track_caller]
fn echo_ok(env: &TestEnv, message: &str) -> Value {
    let run = env.aab(&["fixture-echo", "--message", message]);
    let body = env.json_of(&run);
    env.check(run.exit() == 0, &run, "fixture-echo must exit 0");
    env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "fixture-echo must report execution.ok:true");
    env.check(body.pointer("/value/echo") == Some(&json!(message)), &run, &format!("value.echo must be {message:?}"));
    body
}

/// Expect a rejection/failure with `code` (and `field`) and exit code `exit`.
#[track_caller]
fn expect_error(env: &TestEnv, args: &[&str], exit: i32, code: &str, field: Option<&str>) -> (Value, Run) {
    let run = env.aab(args);
    let body = env.json_of(&run);
    env.check(error_code(&body) == Some(code), &run, &format!("expected error `{code}`"));
    if let Some(field) = field {
        env.check(error_field(&body) == Some(field), &run, &format!("expected field `{field}`"));
    }
    env.check(run.exit() == exit, &run, &format!("expected exit code {exit}"));
    (body, run)
}

#[track_caller]
fn runtime_status(env: &TestEnv) -> (Value, Run) {
    let run = env.aab(&["runtime", "--operation", "status"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 0, &run, "`aab runtime --operation status` must exit 0");
    (body, run)
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.write_all(bytes).unwrap();
}

// ------------------------------------------------------------------ plugins

#[test]
fn plugins_list_reports_each_plugin() {
    let env = TestEnv::new();
    env.install_fixtures();
    let (list, run) = plugins_list(&env);
    for (name, commands) in [("fixture", 8), ("misbehaving", 1)] {
        let e = entry(&env, &list, &run, name);
        assert_healthy(&env, &run, e, commands);
        env.check(e.get("name") == Some(&json!(name)), &run, &format!("entry name must be {name}: {e}"));
        env.check(e.get("version").and_then(Value::as_str).is_some_and(|v| !v.is_empty()), &run, &format!("entry needs a version: {e}"));
        let bytes = std::fs::read(env.plugins.join(plugin_file_name(name))).unwrap();
        env.check(e.get("sha256") == Some(&json!(sha256_hex(&bytes))), &run, &format!("entry sha256 must be the file's sha256: {e}"));
    }
}

#[test]
fn panicking_manifest_is_refused_and_others_keep_working() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AAB_MISBEHAVE_MANIFEST_PANIC", "1");
    let (list, run) = plugins_list(&env);
    assert_healthy(&env, &run, entry(&env, &list, &run, "fixture"), 8);
    let e = entry(&env, &list, &run, "misbehaving");
    let code = entry_error(e).map(|(c, _)| c).unwrap_or_default();
    env.check(
        code == "plugin_manifest_invalid" || code == "plugin_panic",
        &run,
        &format!("a panicking manifest should be refused as plugin_manifest_invalid (or plugin_panic): {e}"),
    );
    assert_refused(&env, &run, e, "misbehaving", &code);
    echo_ok(&env, "still here");
}

#[test]
fn wrong_abi_plugin_is_refused_and_others_keep_working() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.install_plugin("aab_fixture_wrong_abi", "wrongabi");
    let (list, run) = plugins_list(&env);
    assert_healthy(&env, &run, entry(&env, &list, &run, "fixture"), 8);
    assert_healthy(&env, &run, entry(&env, &list, &run, "misbehaving"), 1);
    let message = assert_refused(&env, &run, entry(&env, &list, &run, "wrongabi"), "wrongabi", "plugin_abi_incompatible");
    env.check(message.contains("ABI 2"), &run, &format!("the refusal must name ABI 2: {message:?}"));
    env.check(!message.contains('\n'), &run, "the refusal must be one line");
    echo_ok(&env, "still here");
}

#[test]
fn plugin_claiming_a_taken_command_is_refused_and_others_keep_working() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AAB_MISBEHAVE_CLAIM", "fixture-echo");
    let (list, run) = plugins_list(&env);
    assert_healthy(&env, &run, entry(&env, &list, &run, "fixture"), 8);
    let e = entry(&env, &list, &run, "misbehaving");
    let Some((code, message)) = entry_error(e) else { env.fail(&run, &format!("the claiming plugin must be refused: {e}")) };
    assert_refused(&env, &run, e, "misbehaving", &code);
    env.check(message.contains("fixture-echo"), &run, &format!("the refusal must name the contested command: {message:?}"));
    // The first owner keeps the command (plugins load in file-name order) ...
    let body = echo_ok(&env, "owner");
    assert_eq!(body.pointer("/value/count"), Some(&json!(1)), "{body}");
    // ... and the refused plugin registers none of its commands.
    expect_error(&env, &["misbehave", "--mode", "slow"], 1, "unknown_command", None);
}

#[test]
fn plugin_requiring_another_plugin_api_is_refused_and_others_keep_working() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AAB_MISBEHAVE_PLUGIN_API", "^2.0");
    let (list, run) = plugins_list(&env);
    assert_healthy(&env, &run, entry(&env, &list, &run, "fixture"), 8);
    let message = assert_refused(&env, &run, entry(&env, &list, &run, "misbehaving"), "misbehaving", "plugin_api_incompatible");
    env.check(message.contains("^2.0"), &run, &format!("the refusal should name the requirement ^2.0: {message:?}"));
    echo_ok(&env, "still here");
}

#[test]
fn private_domain_is_listed_after_the_builtin_ones() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AAB_MISBEHAVE_PRIVATE_DOMAIN", "chaos");
    let (list, run) = plugins_list(&env);
    assert_healthy(&env, &run, entry(&env, &list, &run, "misbehaving"), 1);
    let run = env.aab(&["--help"]);
    let help = run.stdout.clone();
    let (diagnostics, chaos) = (help.find("\ndiagnostics — "), help.find("\nchaos — Misbehaviour on purpose"));
    env.check(diagnostics.is_some() && chaos.is_some() && diagnostics < chaos, &run, "`--help` lists the private domain after the built-in ones");

    let mut mcp = env.mcp();
    let (all, _) = mcp.call_tool("capabilities", json!({}));
    let domains: Vec<&str> = all["domains"].as_object().map(|d| d.keys().map(String::as_str).collect()).unwrap_or_default();
    let described: Vec<&str> = all["commandDomains"].as_object().map(|d| d.keys().map(String::as_str).collect()).unwrap_or_default();
    if domains.last() != Some(&"chaos") || described.last() != Some(&"chaos") || !all["commandDomains"]["chaos"].as_str().is_some_and(|d| d.starts_with("Misbehaviour")) {
        mcp.fail(&format!("capabilities must list the private domain `chaos` last, with its description: {all}"));
    }
    let (one, is_error) = mcp.call_tool("capabilities", json!({"domain": "chaos"}));
    if is_error || one["domains"]["chaos"][0]["command"] != json!("misbehave") {
        mcp.fail(&format!("capabilities {{domain: chaos}} must list `misbehave`: {one}"));
    }
    let (detail, _) = mcp.call_tool("capabilities", json!({"command": "misbehave"}));
    if detail["domain"] != json!("chaos") {
        mcp.fail(&format!("misbehave's domain must be chaos: {detail}"));
    }
    let tools = mcp.request("tools/list", json!({}));
    let enumerated = tools.pointer("/result/tools/0/inputSchema/properties/domain/enum").and_then(Value::as_array).cloned().unwrap_or_default();
    if enumerated.last() != Some(&json!("chaos")) {
        mcp.fail(&format!("the capabilities tool's domain enum must include the private domain: {tools}"));
    }
}

#[test]
fn plugin_declaring_a_builtin_domain_is_refused_and_others_keep_working() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AAB_MISBEHAVE_PRIVATE_DOMAIN", "core");
    let (list, run) = plugins_list(&env);
    assert_healthy(&env, &run, entry(&env, &list, &run, "fixture"), 8);
    let message = assert_refused(&env, &run, entry(&env, &list, &run, "misbehaving"), "misbehaving", "plugin_manifest_invalid");
    env.check(message.contains("declared domain `core`"), &run, &format!("the refusal must name the domain: {message:?}"));
    echo_ok(&env, "still here");
}

#[test]
fn bundle_verify_and_hash_mismatch() {
    let env = TestEnv::new();
    env.install_fixtures();
    let bundle = env.root.join("bundle");
    let bundle_arg = bundle.display().to_string();

    let run = env.aab(&["plugins", "bundle", "--out", &bundle_arg]);
    env.json_of(&run);
    env.check(run.exit() == 0, &run, "`aab plugins bundle --out DIR` must exit 0");
    let fixture_name = plugin_file_name("fixture");
    let copies = files_named(&bundle, &fixture_name);
    env.check(copies.len() == 1, &run, &format!("the bundle must hold exactly one {fixture_name}, found {copies:?}"));
    let fixture_in_bundle = &copies[0];
    let digest = sha256_hex(&std::fs::read(fixture_in_bundle).unwrap());
    let manifest_names_digest = aab_e2e::all_files(&bundle)
        .iter()
        .filter(|p| p.extension().is_none_or(|e| e != "so"))
        .any(|p| std::fs::read(p).is_ok_and(|b| String::from_utf8_lossy(&b).contains(&digest)));
    env.check(manifest_names_digest, &run, "the bundle must carry a manifest with the sha256 of each plugin file");

    let run = env.aab(&["plugins", "verify", &bundle_arg]);
    env.json_of(&run);
    env.check(run.exit() == 0, &run, "`aab plugins verify` of a fresh bundle must pass");

    append(fixture_in_bundle, b"\0");
    let run = env.aab(&["plugins", "verify", &bundle_arg]);
    env.json_of(&run);
    env.check(run.exit() != 0, &run, "`aab plugins verify` must fail after a plugin file changed");
    env.check(run.stdout.contains(&fixture_name), &run, "the verify failure must name the changed file");

    // A runtime using the bundle as its plugin directory refuses the changed plugin.
    env.set_env(aab_e2e::ENV_PLUGIN_DIR, bundle_arg.clone());
    let (list, run) = plugins_list(&env);
    assert_refused(&env, &run, entry(&env, &list, &run, "fixture"), "fixture", "plugin_hash_mismatch");
    assert_healthy(&env, &run, entry(&env, &list, &run, "misbehaving"), 1);

    let run = env.aab(&["misbehave", "--mode", "slow", "--duration-ms", "1"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, "the intact plugin must keep working");
    let (status, run) = runtime_status(&env);
    let Some(loaded) = find_key(&status, "plugins").and_then(Value::as_array) else {
        env.fail(&run, "runtime status must list the runtime's plugins")
    };
    // The status summary names the file in `file`; the message is `plugins list`'s job.
    let e = entry(&env, loaded, &run, "fixture");
    let code = entry_error(e).map(|(c, _)| c);
    env.check(code.as_deref() == Some("plugin_hash_mismatch"), &run, &format!("the runtime must refuse the changed plugin: {e}"));
    let run = env.aab(&["fixture-echo", "--message", "hi"]);
    let body = env.json_of(&run);
    let code = error_code(&body);
    env.check(
        run.exit() == 1 && matches!(code, Some("unknown_command" | "plugin_hash_mismatch")),
        &run,
        "a command of the refused plugin must not run (unknown_command or plugin_hash_mismatch)",
    );
}

// ------------------------------------------------------------------ runtime

#[test]
fn echo_through_the_runtime() {
    let env = TestEnv::new();
    env.install_fixtures();
    let run = env.aab(&["fixture-echo", "--message", "hi", "--count", "5"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 0, &run, "fixture-echo must exit 0");
    env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "execution.ok must be true");
    env.check(body.get("command") == Some(&json!("fixture-echo")), &run, "reply.command must be fixture-echo");
    env.check(body.get("kind") == Some(&json!("json")), &run, "reply.kind must be json");
    let v = &body["value"];
    env.check(v["echo"] == "hi" && v["count"] == 5, &run, "value must echo message and count");
    env.check(v["cwd"] == json!(env.work.display().to_string()), &run, "the plugin must see the caller's cwd");
    env.check(v["actionId"].as_str().is_some_and(|s| !s.is_empty()), &run, "the host must issue an action id");
    env.check(v["timeoutMs"] == 5000, &run, "the default timeout is the command's defaultTimeoutMs");
    let ep = env.endpoint();
    env.check(ep.is_some(), &run, "a runtime must be running after a command");
    let ep = ep.unwrap();
    env.check(v["runtimeEpoch"] == ep["runtimeId"], &run, "runtimeEpoch must be the runtime id of endpoint.json");
    let pid = env.runtime_pid().unwrap();
    env.check(process_alive(pid), &run, "the runtime pid of endpoint.json must be alive");
    env.check(pid != std::process::id() as i32, &run, "the runtime must be its own process");
}

#[test]
fn plugin_panic_is_an_error_and_the_runtime_lives_on() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo_ok(&env, "before");
    let pid = env.runtime_pid().expect("runtime pid after a command");

    let (body, run) = expect_error(&env, &["misbehave", "--mode", "panic"], 1, "plugin_panic", None);
    env.check(env.runtime_pid() == Some(pid) && process_alive(pid), &run, "the runtime must survive a plugin panic");
    env.check(error_facts(&body).get("message").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), &run, "the error needs a message");

    echo_ok(&env, "after");
    assert_eq!(env.runtime_pid(), Some(pid), "same runtime after the panic\n{}", env.report(None));
}

#[test]
fn concurrent_starts_elect_one_owner_and_kill_9_recovers() {
    let env = TestEnv::new();
    env.install_fixtures();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| env.aab(&["runtime", "--operation", "start"]));
        let b = s.spawn(|| env.aab(&["runtime", "--operation", "start"]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (va, vb) = (env.json_of(&a), env.json_of(&b));
    env.check(a.exit() == 0, &a, "first concurrent start must exit 0");
    env.check(b.exit() == 0, &b, "second concurrent start must exit 0");
    let id = |v: &Value| (find_key(v, "runtimeId").cloned(), find_key(v, "pid").and_then(Value::as_i64));
    let (ida, idb) = (id(&va), id(&vb));
    env.check(ida.0.is_some() && ida.1.is_some(), &a, "start reply must name runtimeId and pid");
    env.check(ida == idb, &b, &format!("both clients must see the same owner: {ida:?} vs {idb:?}"));
    let pid = i32::try_from(ida.1.unwrap()).unwrap();
    env.check(env.runtime_pid() == Some(pid), &a, "endpoint.json must name the owner");

    // Exactly one daemon: a candidate that lost the election must exit.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let live = env.live_processes();
        if live == [pid] {
            break;
        }
        if std::time::Instant::now() > deadline {
            env.fail(&b, &format!("expected exactly one live runtime process ({pid}), found {live:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // SIGKILL the owner: its lock dies with it; the next command starts a new runtime.
    // SAFETY: plain syscall on the runtime pid of this test's own endpoint.json.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_for_exit(pid, Duration::from_secs(10)), "runtime {pid} survived SIGKILL\n{}", env.report(None));
    let body = echo_ok(&env, "after kill -9");
    let new_pid = env.runtime_pid().expect("a new runtime after kill -9");
    assert_ne!(new_pid, pid, "a new runtime must have started\n{}", env.report(None));
    assert!(process_alive(new_pid), "the new runtime must be alive\n{}", env.report(None));
    assert_ne!(body.pointer("/value/runtimeEpoch"), ida.0.as_ref(), "a new runtime has a new runtime id: {body}");
}

#[test]
fn changed_plugin_file_gives_runtime_code_mismatch_until_restart() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo_ok(&env, "before");
    let pid = env.runtime_pid().expect("runtime pid");

    // A rebuild: write a new file next to the plugin, then rename it over the plugin
    // (the running runtime keeps its mapping of the old inode).
    let installed = env.plugins.join(plugin_file_name("fixture"));
    let staged = env.plugins.join(".fixture.rebuild.tmp");
    std::fs::copy(&installed, &staged).unwrap();
    append(&staged, b"rebuilt");
    std::fs::rename(&staged, &installed).unwrap();

    let (_, run) = expect_error(&env, &["fixture-echo", "--message", "stale"], 1, "runtime_code_mismatch", None);
    env.check(process_alive(pid), &run, "a code mismatch must not kill the running runtime");

    let stop = env.aab(&["runtime", "--operation", "stop"]);
    env.json_of(&stop);
    env.check(stop.exit() == 0, &stop, "`aab runtime --operation stop` must exit 0");
    env.check(wait_for_exit(pid, Duration::from_secs(15)), &stop, "the runtime must exit after stop");

    echo_ok(&env, "after restart");
    let new_pid = env.runtime_pid().expect("a new runtime");
    assert_ne!(new_pid, pid, "the call after stop must start a new runtime\n{}", env.report(None));
}

#[test]
fn runtime_stop_asks_plugins_with_the_stop_hook_before_exiting() {
    let env = TestEnv::new();
    env.install_fixtures();
    let marker = env.root.join("stop-marker");
    env.set_env("AAB_FIXTURE_STOP_MARKER", marker.display().to_string());
    echo_ok(&env, "start");
    let pid = env.runtime_pid().expect("a runtime");
    env.check(!marker.exists(), &env.aab(&["runtime", "--operation", "status"]), "no stop hook runs while the runtime lives");
    let stop = env.aab(&["runtime", "--operation", "stop"]);
    env.check(wait_for_exit(pid, Duration::from_secs(15)), &stop, "the runtime must exit after stop");
    let lines = std::fs::read_to_string(&marker).unwrap_or_default();
    env.check(lines.lines().count() == 1 && lines.contains("runtime-stop"), &stop, &format!("the fixture's runtime-stop hook ran exactly once before exit: {lines:?}"));
}

// The runtime RPC access tests (handshake, refusals, impostors) live in `trust.rs`.

// ------------------------------------------------------------------ validation

#[test]
fn missing_argument_is_rejected_before_dispatch() {
    let env = TestEnv::new();
    env.install_fixtures();
    let (body, run) = expect_error(&env, &["fixture-echo"], 1, "missing_argument", Some("message"));
    env.check(error_facts(&body).get("dispatched") == Some(&json!(false)), &run, "a rejection is dispatched:false");
    env.check(error_facts(&body).get("ambiguous") == Some(&json!(false)), &run, "a rejection is ambiguous:false");
    env.check(body.get("failureStage") == Some(&json!("validation")), &run, "failureStage must be validation");
}

#[test]
fn non_integer_count_is_invalid() {
    let env = TestEnv::new();
    env.install_fixtures();
    let (body, run) = expect_error(&env, &["fixture-echo", "--message", "hi", "--count", "five"], 1, "invalid_argument", Some("count"));
    env.check(error_facts(&body).get("dispatched") == Some(&json!(false)), &run, "a rejection is dispatched:false");
}

#[test]
fn unknown_flag_is_unsupported() {
    let env = TestEnv::new();
    env.install_fixtures();
    let (body, run) = expect_error(&env, &["fixture-echo", "--message", "hi", "--bogus", "x"], 1, "unsupported_argument", Some("bogus"));
    env.check(error_facts(&body).get("dispatched") == Some(&json!(false)), &run, "a rejection is dispatched:false");
}

#[test]
fn repeated_flag_is_a_duplicate() {
    let env = TestEnv::new();
    env.install_fixtures();
    let (body, run) = expect_error(&env, &["fixture-echo", "--message", "a", "--message", "b"], 1, "duplicate_argument", Some("message"));
    env.check(error_facts(&body).get("dispatched") == Some(&json!(false)), &run, "a rejection is dispatched:false");
}

// ------------------------------------------------------------------ MCP

#[test]
fn mcp_lists_exactly_two_tools() {
    let env = TestEnv::new();
    env.install_fixtures();
    let mut mcp = env.mcp();
    let response = mcp.request("tools/list", json!({}));
    let mut names: Vec<String> = response
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string)).collect())
        .unwrap_or_default();
    names.sort();
    if names != ["capabilities", "run"] {
        mcp.fail(&format!("tools/list must return exactly capabilities and run, got {names:?}"));
    }
}

#[test]
fn mcp_run_executes_through_the_runtime() {
    let env = TestEnv::new();
    env.install_fixtures();
    {
        let mut mcp = env.mcp();
        let (body, is_error) = mcp.call_tool("run", json!({"command": "fixture-echo", "arguments": {"message": "hi"}, "extract": null}));
        if is_error || body.pointer("/value/echo") != Some(&json!("hi")) || body.pointer("/execution/ok") != Some(&json!(true)) {
            mcp.fail(&format!("run fixture-echo must succeed with isError:false; got isError {is_error}, body {body}"));
        }
    }
    // MCP EOF closes only that client; the shared runtime lives on.
    let pid = env.runtime_pid().unwrap_or_else(|| panic!("a runtime must run after MCP run\n{}", env.report(None)));
    std::thread::sleep(Duration::from_millis(200));
    assert!(process_alive(pid), "MCP EOF must not stop the runtime\n{}", env.report(None));
    echo_ok(&env, "cli after mcp");
    assert_eq!(env.runtime_pid(), Some(pid), "CLI and MCP share one runtime\n{}", env.report(None));
}

#[test]
fn mcp_run_requires_extract() {
    let env = TestEnv::new();
    env.install_fixtures();
    let mut mcp = env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "fixture-echo", "arguments": {"message": "hi"}}));
    if !is_error || error_code(&body) != Some("missing_argument") || error_field(&body) != Some("extract") {
        mcp.fail(&format!(
            "run without extract must be missing_argument field extract with isError:true; got isError {is_error}, body {body}"
        ));
    }
}

/// A live owner that does not answer (stopped with SIGSTOP) is reported as
/// `runtime_unresponsive` and never replaced; a dead owner's stale record is not
/// (`concurrent_starts_elect_one_owner_and_kill_9_recovers`).
#[test]
fn a_stopped_owner_is_unresponsive_and_never_replaced() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo_ok(&env, "before");
    let pid = env.runtime_pid().expect("a runtime");
    // SAFETY: plain syscalls on the runtime pid of this test's own endpoint.json.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let run = env.aab(&["fixture-echo", "--message", "while stopped"]);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let body = env.json_of(&run);
    env.check(run.exit() == 1 && body.pointer("/execution/error") == Some(&json!("runtime_unresponsive")) && body.pointer("/execution/dispatched") == Some(&json!(false)), &run, "a stopped owner is unresponsive");
    assert_eq!(env.runtime_pid(), Some(pid), "ground truth: the owner was not replaced\n{}", env.report(None));
    echo_ok(&env, "after SIGCONT");
    assert_eq!(env.runtime_pid(), Some(pid));
}
