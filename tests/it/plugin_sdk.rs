//! The fixture cdylibs under the SDK's own test support (the host's real loader,
//! a minimal host context): manifests, replies, panics, cancellation, deadlines and
//! the loader's refusals. No runtime, no `aab` process.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use aab_plugin_api::protocol::{Mutation, Outcome};
use aab_plugin_api::test_support::{TestPlugin, cdylib_path};
use serde_json::{Value, json};

/// The misbehaving plugin reads `AAB_MISBEHAVE_*` from the process environment when
/// its manifest is built; every load of it holds this lock so parallel tests never
/// see each other's variables.
static MISBEHAVE_ENV: Mutex<()> = Mutex::new(());

const MISBEHAVE_VARS: [&str; 5] = ["AAB_MISBEHAVE_CLAIM", "AAB_MISBEHAVE_MANIFEST_PANIC", "AAB_MISBEHAVE_PLUGIN_API", "AAB_MISBEHAVE_PRIVATE_DOMAIN", "AAB_MISBEHAVE_BAD_SCHEMA"];

fn env_lock() -> MutexGuard<'static, ()> {
    MISBEHAVE_ENV.lock().unwrap_or_else(|e| e.into_inner())
}

fn built(crate_underscored: &str) -> PathBuf {
    let path = cdylib_path(crate_underscored);
    assert!(path.is_file(), "{} is missing; run `cargo build --workspace --all-targets` first", path.display());
    path
}

fn load(crate_underscored: &str) -> TestPlugin {
    let path = built(crate_underscored);
    match TestPlugin::load(&path) {
        Ok(p) => p,
        Err(e) => panic!("loading {} failed: {e}", path.display()),
    }
}

/// Load the misbehaving plugin with the given manifest-mode variables set. With any
/// variable set, the library is loaded from a fresh copy under a new file name so it
/// is a separate library instance with its own statics.
fn load_misbehaving(vars: &[(&str, &str)]) -> (Result<TestPlugin, aab_plugin_api::loader::LoadError>, Option<tempfile::TempDir>) {
    let original = built("aab_fixture_misbehaving");
    let _guard = env_lock();
    let (path, copy_dir) = if vars.is_empty() {
        (original, None)
    } else {
        let dir = tempfile::Builder::new().prefix("aab-sdk-copy-").tempdir().expect("temp dir");
        let tag: String =
            vars.iter().map(|(k, v)| format!("{k}{v}")).collect::<String>().chars().filter(char::is_ascii_alphanumeric).collect();
        let copy = dir.path().join(format!("libaab_fixture_misbehaving_{}.so", tag.to_lowercase()));
        std::fs::copy(&original, &copy).expect("copy misbehaving cdylib");
        (copy, Some(dir))
    };
    for name in MISBEHAVE_VARS {
        // SAFETY: every reader of these variables in this process (the misbehaving
        // plugin's manifest) runs under `MISBEHAVE_ENV`, which we hold.
        unsafe { std::env::remove_var(name) };
    }
    for (k, v) in vars {
        // SAFETY: as above.
        unsafe { std::env::set_var(k, v) };
    }
    let result = TestPlugin::load(&path);
    for (k, _) in vars {
        // SAFETY: as above.
        unsafe { std::env::remove_var(k) };
    }
    (result, copy_dir)
}

fn misbehaving() -> TestPlugin {
    match load_misbehaving(&[]).0 {
        Ok(p) => p,
        Err(e) => panic!("loading the misbehaving plugin failed: {e}"),
    }
}

fn expect_ok(outcome: &Outcome, what: &str) -> Value {
    assert!(outcome.ok, "{what}: expected ok, got {outcome:?}");
    outcome.value.clone().unwrap_or(Value::Null)
}

fn expect_err<'o>(outcome: &'o Outcome, code: &str, what: &str) -> &'o aab_plugin_api::ProviderError {
    assert!(!outcome.ok, "{what}: expected error `{code}`, got {outcome:?}");
    let error = outcome.error.as_ref().unwrap_or_else(|| panic!("{what}: failed outcome without error: {outcome:?}"));
    assert_eq!(error.error, code, "{what}: {outcome:?}");
    error
}

fn no_cancel() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

fn refused(result: Result<TestPlugin, aab_plugin_api::loader::LoadError>, path_hint: &Path) -> aab_plugin_api::loader::LoadError {
    match result {
        Ok(p) => panic!("{} was loaded but must be refused; manifest: {:?}", path_hint.display(), p.manifest),
        Err(e) => e,
    }
}

#[test]
fn fixture_manifest_describes_every_command() {
    let plugin = load("aab_fixture_fixture");
    let m = &plugin.manifest;
    assert_eq!(m.schema, "aab.plugin-manifest/v1");
    assert_eq!(m.name, "fixture");
    assert_eq!(m.platforms, vec!["fixture".to_string()]);
    let names: Vec<&str> = m.commands.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(names, ["fixture-echo", "fixture-host", "fixture-sleep", "fixture-text", "fixture-bytes", "fixture-fail", "fixture-screen", "fixture-press"]);
    // Its Intent provider and execution target are declared over those commands.
    let provider = &m.intent_providers[0];
    assert_eq!((provider.platform.as_str(), provider.provider.as_str(), provider.observe.command.as_str()), ("fixture", "fixture", "fixture-screen"));
    assert!(provider.observation_target_schema.is_some());
    assert_eq!((m.targets[0].platform.as_str(), m.targets[0].identity.as_slice()), ("fixture", &["screen".to_string()][..]));
    for c in &m.commands {
        assert_eq!(c.domain, "diagnostics", "{}", c.command);
        assert_eq!(c.platform, "fixture", "{}", c.command);
        assert_eq!(c.role, "capability", "{}", c.command);
        assert_eq!(c.target_kind, "host", "{}", c.command);
        assert_eq!((c.default_timeout_ms, c.max_timeout_ms), (5_000, 60_000), "{}", c.command);
        assert_eq!(c.input_schema["type"], "object", "{}", c.command);
        assert_eq!(c.input_schema["additionalProperties"], false, "{}", c.command);
        assert!(c.input_schema["properties"].is_object(), "{}", c.command);
    }
    let by_name = |n: &str| m.commands.iter().find(|c| c.command == n).expect("command");
    let echo = by_name("fixture-echo");
    assert_eq!(echo.mutation, Mutation::None);
    assert_eq!(echo.input_schema["required"], json!(["message"]));
    assert_eq!(echo.input_schema["properties"]["message"]["maxLength"], 4096);
    let count = &echo.input_schema["properties"]["count"];
    assert_eq!((&count["type"], &count["minimum"], &count["maximum"]), (&json!("integer"), &json!(1), &json!(100)));
    let sleep = by_name("fixture-sleep");
    assert_eq!(sleep.mutation, Mutation::Always);
    assert_eq!(sleep.target_key, vec!["lane".to_string()]);
    assert_eq!(sleep.device_key, vec!["device".to_string()]);
    assert_eq!(sleep.input_schema["properties"]["durationMs"]["maximum"], 600000);
    assert_eq!(by_name("fixture-host").mutation, Mutation::None);
    assert_eq!(by_name("fixture-fail").input_schema["properties"]["code"]["pattern"], "^[a-z_]+$");
    assert_eq!(by_name("fixture-bytes").input_schema["properties"]["size"]["maximum"], 65536);
}

#[test]
fn misbehaving_manifest_has_one_command() {
    let plugin = misbehaving();
    assert_eq!(plugin.manifest.name, "misbehaving");
    let names: Vec<&str> = plugin.manifest.commands.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(names, ["misbehave"]);
    let schema = &plugin.manifest.commands[0].input_schema;
    assert_eq!(schema["properties"]["mode"]["enum"], json!(["panic", "slow", "huge", "ignore-cancel"]));
    assert_eq!(schema["properties"]["bytes"]["maximum"], 64 * 1024 * 1024);
    assert_eq!(schema["additionalProperties"], false);
}

#[test]
fn echo_round_trip_carries_the_invocation_facts() {
    let plugin = load("aab_fixture_fixture");
    let outcome = plugin.invoke("fixture-echo", json!({"message": "hi", "count": 3}));
    let v = expect_ok(&outcome, "fixture-echo");
    assert_eq!(outcome.kind.as_deref(), Some("json"));
    assert_eq!(v["echo"], "hi");
    assert_eq!(v["count"], 3);
    assert_eq!(v["actionId"], "test-action");
    assert_eq!(v["runtimeEpoch"], "test-epoch");
    assert_eq!(v["timeoutMs"], 10_000);
    assert_eq!(v["cwd"], std::env::current_dir().unwrap().display().to_string());
    let remaining = v["remainingMs"].as_u64().expect("remainingMs");
    assert!(remaining > 0 && remaining <= 10_000, "remainingMs {remaining}");
    assert!(!outcome.dispatch_marked, "echo must not mark dispatch");

    let default_count = plugin.invoke("fixture-echo", json!({"message": ""}));
    assert_eq!(expect_ok(&default_count, "echo default count")["count"], 1);
}

#[test]
fn text_and_bytes_replies() {
    let plugin = load("aab_fixture_fixture");
    let text = plugin.invoke("fixture-text", json!({"text": "plain text"}));
    assert_eq!(expect_ok(&text, "fixture-text"), json!("plain text"));
    assert_eq!(text.kind.as_deref(), Some("text"));

    let bytes = plugin.invoke("fixture-bytes", json!({"size": 258}));
    let v = expect_ok(&bytes, "fixture-bytes");
    assert_eq!(bytes.kind.as_deref(), Some("bytes"));
    let arr = v.as_array().expect("bytes travel as an array of numbers");
    assert_eq!(arr.len(), 258);
    assert_eq!((arr[0].as_u64(), arr[255].as_u64(), arr[257].as_u64()), (Some(0), Some(255), Some(1)));

    let empty = plugin.invoke("fixture-bytes", json!({"size": 0}));
    assert_eq!(expect_ok(&empty, "zero bytes"), json!([]));
}

#[test]
fn host_call_reaches_the_host_service() {
    let plugin = load("aab_fixture_fixture");
    // The test host offers no services: the plugin must surface the host's error.
    let outcome = plugin.invoke("fixture-host", json!({"method": "fixture.ping", "params": {"x": 1}}));
    let error = expect_err(&outcome, "unsupported_host_service", "fixture-host");
    assert!(error.message.contains("fixture.ping"), "{error:?}");
}

#[test]
fn fail_reports_the_code_and_the_dispatch_facts() {
    let plugin = load("aab_fixture_fixture");
    let before = plugin.invoke("fixture-fail", json!({"code": "device_refused", "dispatched": false}));
    let e = expect_err(&before, "device_refused", "fail before dispatch");
    assert_eq!(e.dispatched, Some(false));
    assert!(!before.dispatch_marked);

    let after = plugin.invoke("fixture-fail", json!({"code": "connection_lost", "afterDispatch": true}));
    let e = expect_err(&after, "connection_lost", "fail after dispatch");
    assert_eq!(e.dispatched, None, "the host derives dispatch from the mark");
    assert!(after.dispatch_marked, "afterDispatch must mark dispatch: {after:?}");
}

#[test]
fn sleep_completes_and_marks_dispatch_when_asked() {
    let plugin = load("aab_fixture_fixture");
    let outcome = plugin.invoke("fixture-sleep", json!({"durationMs": 20, "dispatchFirst": true, "lane": "a", "device": "d1"}));
    let v = expect_ok(&outcome, "fixture-sleep");
    assert!(v["sleptMs"].as_u64().unwrap() >= 20, "{v}");
    assert_eq!((v["lane"].as_str(), v["device"].as_str()), (Some("a"), Some("d1")));
    assert!(outcome.dispatch_marked);

    let quiet = plugin.invoke("fixture-sleep", json!({"durationMs": 0}));
    expect_ok(&quiet, "zero sleep");
    assert!(!quiet.dispatch_marked);
}

#[test]
fn cancellation_flag_stops_sleep_promptly() {
    let plugin = load("aab_fixture_fixture");
    let cancel = no_cancel();
    let setter = {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            cancel.store(true, Ordering::SeqCst);
        })
    };
    let started = Instant::now();
    let outcome =
        plugin.invoke_with("fixture-sleep", json!({"durationMs": 600_000, "dispatchFirst": true}), Duration::from_secs(600), cancel);
    let elapsed = started.elapsed();
    setter.join().unwrap();
    let e = expect_err(&outcome, "cancelled", "cancelled sleep");
    assert!(e.message.contains("cancelled"), "{e:?}");
    assert!(outcome.dispatch_marked, "the mark made before cancellation must be reported");
    // Functional bound (a 10-minute sleep that ends at all was cancelled), not a timing figure.
    assert!(elapsed < Duration::from_secs(60), "cancellation took {elapsed:?}");
}

#[test]
fn deadline_stops_sleep() {
    let plugin = load("aab_fixture_fixture");
    let outcome = plugin.invoke_with("fixture-sleep", json!({"durationMs": 600_000}), Duration::from_millis(100), no_cancel());
    let e = expect_err(&outcome, "cancelled", "sleep past the deadline");
    assert!(e.message.contains("deadline"), "{e:?}");
    assert!(!outcome.dispatch_marked);
}

#[test]
fn sleep_can_ignore_cancellation() {
    let plugin = load("aab_fixture_fixture");
    let cancel = Arc::new(AtomicBool::new(true));
    let outcome =
        plugin.invoke_with("fixture-sleep", json!({"durationMs": 30, "honourCancel": false}), Duration::from_secs(10), cancel.clone());
    expect_ok(&outcome, "sleep ignoring cancellation");
    let honoured = plugin.invoke_with("fixture-sleep", json!({"durationMs": 600_000}), Duration::from_secs(600), cancel);
    expect_err(&honoured, "cancelled", "pre-cancelled sleep");
}

#[test]
fn panic_becomes_plugin_panic_and_the_next_call_works() {
    let plugin = misbehaving();
    let outcome = plugin.invoke("misbehave", json!({"mode": "panic"}));
    let e = expect_err(&outcome, "plugin_panic", "misbehave panic");
    assert!(e.message.contains("panic requested"), "the panic message should reach the envelope: {e:?}");

    let next = plugin.invoke("misbehave", json!({"mode": "slow", "durationMs": 1}));
    assert_eq!(expect_ok(&next, "call after a panic")["mode"], "slow");
    let again = plugin.invoke("misbehave", json!({"mode": "panic"}));
    expect_err(&again, "plugin_panic", "second panic");
}

#[test]
fn misbehaving_slow_ignore_cancel_and_huge() {
    let plugin = misbehaving();
    let cancel = Arc::new(AtomicBool::new(true));
    let slow = plugin.invoke_with("misbehave", json!({"mode": "slow", "durationMs": 600_000}), Duration::from_secs(600), cancel.clone());
    expect_err(&slow, "cancelled", "slow honours cancellation");

    let stubborn = plugin.invoke_with("misbehave", json!({"mode": "ignore-cancel", "durationMs": 30}), Duration::from_secs(10), cancel);
    let v = expect_ok(&stubborn, "ignore-cancel");
    assert_eq!(v["sawCancel"], true);
    assert!(v["sleptMs"].as_u64().unwrap() >= 30, "{v}");

    let huge = plugin.invoke("misbehave", json!({"mode": "huge", "bytes": 3 * 1024 * 1024}));
    let v = expect_ok(&huge, "huge");
    assert_eq!(v.as_str().map(str::len), Some(3 * 1024 * 1024));
}

#[test]
fn wrong_abi_library_is_refused_with_one_line() {
    let path = built("aab_fixture_wrong_abi");
    let e = refused(TestPlugin::load(&path), &path);
    assert_eq!(e.code, "plugin_abi_incompatible", "{e}");
    assert!(!e.message.contains('\n'), "the refusal must be one line: {:?}", e.message);
    assert!(e.message.contains("ABI 2"), "the refusal must name ABI 2: {:?}", e.message);
}

#[test]
fn incompatible_plugin_api_requirement_is_refused() {
    let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_PLUGIN_API", "^2.0")]);
    let e = refused(result, Path::new("misbehaving copy with AAB_MISBEHAVE_PLUGIN_API=^2.0"));
    assert_eq!(e.code, "plugin_api_incompatible", "{e}");
    assert!(e.message.contains("^2.0"), "{e}");
    // The unmodified library still loads afterwards.
    misbehaving();
}

#[test]
fn manifest_panic_is_contained() {
    let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_MANIFEST_PANIC", "1")]);
    let e = refused(result, Path::new("misbehaving copy with AAB_MISBEHAVE_MANIFEST_PANIC=1"));
    assert_eq!(e.code, "plugin_manifest_invalid", "{e}");
    assert!(e.message.contains("plugin_panic"), "{e}");
}

#[test]
fn claim_mode_advertises_the_claimed_command() {
    let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_CLAIM", "fixture-echo")]);
    let plugin = result.unwrap_or_else(|e| panic!("claim mode must still load: {e}"));
    let names: Vec<&str> = plugin.manifest.commands.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(names, ["misbehave", "fixture-echo"]);
}

#[test]
fn private_domain_mode_loads_and_a_builtin_name_is_refused() {
    let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_PRIVATE_DOMAIN", "chaos")]);
    let plugin = result.unwrap_or_else(|e| panic!("a declared private domain must load: {e}"));
    assert_eq!(plugin.manifest.domains.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["chaos"]);
    assert_eq!(plugin.manifest.commands[0].domain, "chaos");
    let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_PRIVATE_DOMAIN", "core")]);
    let e = refused(result, Path::new("misbehaving copy with AAB_MISBEHAVE_PRIVATE_DOMAIN=core"));
    assert_eq!(e.code, "plugin_manifest_invalid", "{e}");
    assert!(e.message.contains("declared domain `core`") && e.message.contains("built-in"), "{e}");
}

#[test]
fn test_plugin_offers_in_memory_host_services() {
    let plugin = load("aab_fixture_fixture");
    let info = expect_ok(&plugin.invoke("fixture-host", json!({"method": "host.info"})), "host.info")["result"].clone();
    assert!(info["services"].as_array().is_some_and(|s| s.contains(&json!("facts.append"))), "{info}");
    assert!(info["dataDir"].as_str().is_some_and(|d| Path::new(d).is_dir()), "{info}");
    let append = |n: u64| plugin.invoke("fixture-host", json!({"method": "facts.append", "params": {"stream": "s", "key": "k", "record": {"n": n}}}));
    let first = expect_ok(&append(1), "facts.append")["result"].clone();
    expect_ok(&append(2), "facts.append");
    assert_eq!(first["sequence"], json!(1), "{first}");
    let page = expect_ok(&plugin.invoke("fixture-host", json!({"method": "facts.read", "params": {"stream": "s", "key": "k", "afterSequence": 1, "limit": 10}})), "facts.read")["result"].clone();
    assert_eq!(page["records"].as_array().map(|r| r.iter().map(|x| x["record"]["n"].clone()).collect::<Vec<_>>()), Some(vec![json!(2)]), "{page}");
    assert!(plugin.host().logs.lock().unwrap().iter().any(|(level, m)| *level == aab_plugin_api::abi::level::INFO && m.contains("facts.read")), "the plugin's log lines reach the test host");
}

#[test]
fn test_plugin_calls_hooks() {
    let plugin = load("aab_fixture_fixture");
    let answer = expect_ok(&plugin.hook("reconcile", json!({"serial": "dev", "pending": {"actionId": "a1", "runtimeEpoch": "e"}})), "reconcile");
    assert_eq!(answer["status"], json!("unknown"), "{answer}");
    let outcome = plugin.hook("no-such-hook", json!({}));
    expect_err(&outcome, aab_plugin_api::codes::UNSUPPORTED_PLUGIN_METHOD, "unknown hook");
}

#[test]
fn test_plugin_refuses_what_the_host_refuses() {
    for claim in ["misbehave", "Not-Kebab"] {
        let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_CLAIM", claim)]);
        let e = refused(result, Path::new(claim));
        assert_eq!(e.code, "plugin_manifest_invalid", "{claim}: {e}");
    }
}

#[test]
fn test_plugin_refuses_a_schema_the_host_cannot_compile() {
    let (result, _copy) = load_misbehaving(&[("AAB_MISBEHAVE_BAD_SCHEMA", "1")]);
    let e = refused(result, Path::new("misbehaving copy with AAB_MISBEHAVE_BAD_SCHEMA=1"));
    assert_eq!(e.code, "plugin_manifest_invalid", "{e}");
    assert!(e.message.contains("command `misbehave` is invalid: its inputSchema does not compile"), "{e}");
}

#[test]
fn test_plugin_validates_arguments_before_the_plugin_sees_them() {
    let plugin = load("aab_fixture_fixture");
    // `fixture-sleep` would sleep (and mark dispatch) if it were called.
    let outcome = plugin.invoke("fixture-sleep", json!({"durationMs": -1, "dispatchFirst": true}));
    let e = expect_err(&outcome, "invalid_argument", "negative duration");
    assert_eq!((e.field.as_deref(), e.dispatched), (Some("durationMs"), Some(false)), "{e:?}");
    assert!(!outcome.dispatch_marked, "the plugin never ran");
    assert_eq!(plugin.validate("fixture-sleep", &json!({"durationMs": 1})), Ok(()));
    let e = plugin.validate("fixture-nope", &json!({})).unwrap_err();
    assert_eq!((e.error.as_str(), e.field.as_deref()), ("unknown_command", Some("command")));
}

#[test]
fn typed_arguments_refuse_unknown_fields_and_host_options_are_invocation_fields() {
    let plugin = load("aab_fixture_fixture");
    // What an older host sent: the execution options inside `arguments`.
    let v = expect_ok(&plugin.invoke("fixture-echo", json!({"message": "hi", "requestId": "r-1", "feedback": "off", "timeoutMs": 1234})), "echo");
    assert_eq!((v["requestId"].clone(), v["feedback"].clone(), v["echo"].clone()), (json!("r-1"), json!("off"), json!("hi")), "{v}");
    // An argument the type does not know: the host's schema refuses it first (as
    // TestPlugin does) ...
    let outcome = plugin.invoke("fixture-echo", json!({"message": "hi", "colour": "red"}));
    let e = expect_err(&outcome, "unsupported_argument", "unknown field, validated");
    assert_eq!((e.field.as_deref(), e.dispatched), (Some("colour"), Some(false)), "{e:?}");
    // ... and the typed arguments refuse it too when a host would not have.
    let outcome = plugin.invoke_unvalidated("fixture-echo", json!({"message": "hi", "colour": "red"}), Duration::from_secs(10), no_cancel());
    let e = expect_err(&outcome, aab_plugin_api::codes::PLUGIN_ARGUMENTS_MISMATCH, "unknown field");
    assert!(e.message.contains("colour") && e.dispatched == Some(false), "{e:?}");
}

/// Each in-tree plugin's manifest JSON is pinned in tests/snapshots/, so a change of a
/// public command contract shows up in review. `AAB_UPDATE_SNAPSHOTS=1` rewrites them.
#[test]
fn manifests_match_their_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots");
    let update = std::env::var("AAB_UPDATE_SNAPSHOTS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for (krate, name) in [("aab_plugin_android", "android"), ("aab_plugin_ios", "ios"), ("aab_plugin_wda", "wda"), ("aab_plugin_web", "web"), ("aab_fixture_fixture", "fixture"), ("aab_fixture_misbehaving", "misbehaving")] {
        let plugin = if name == "misbehaving" { misbehaving() } else { load(krate) };
        let mut actual = serde_json::to_string_pretty(&plugin.manifest).expect("manifest JSON");
        actual.push('\n');
        let path = dir.join(format!("{name}.manifest.json"));
        if update {
            std::fs::create_dir_all(&dir).expect("snapshot dir");
            std::fs::write(&path, &actual).expect("write snapshot");
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            stale.push(path.display().to_string());
        }
    }
    assert!(stale.is_empty(), "manifests changed: {stale:?}; review the diff and rerun with AAB_UPDATE_SNAPSHOTS=1");
}
