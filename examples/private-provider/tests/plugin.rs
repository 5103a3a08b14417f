//! The provider's own tests: the built cdylib loaded through the host's loader with
//! the host's manifest rules and in-memory host services (`TestPlugin`). Ground
//! truth is the panel directory the commands read and write.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use aab_plugin_api::test_support::{TestPlugin, cdylib_path};
use serde_json::{Value, json};

/// A panel root private to this test process (under `target/tmp`), set before any plugin is loaded
/// (the plugin reads `ACME_PANEL_ROOT` per call, with its own copy of std).
fn panel_root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("acme-panels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("create the panel root");
        // SAFETY: runs once, inside this OnceLock, before any test loads the plugin,
        // so no other thread reads the environment concurrently.
        unsafe { std::env::set_var(aab_plugin_acme::ENV_PANEL_ROOT, &root) };
        root
    })
}

/// A connected panel: a fresh directory under the panel root.
fn connect(panel: &str) -> PathBuf {
    let dir = panel_root().join(panel);
    std::fs::create_dir_all(&dir).expect("create the panel");
    dir
}

/// The cdylib of this crate: `cargo test` leaves it in `target/<profile>/deps`
/// (next to the test binary); `cargo build` puts it in `target/<profile>`.
fn cdylib() -> PathBuf {
    let file = format!("{}aab_plugin_acme{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().map(|deps| deps.join(&file)).filter(|p| p.is_file()).unwrap_or_else(|| cdylib_path("aab_plugin_acme"))
}

fn plugin() -> TestPlugin {
    panel_root();
    TestPlugin::load(&cdylib()).unwrap_or_else(|e| panic!("the host's loader refuses the plugin: {} {}", e.code, e.message))
}

#[test]
fn manifest_passes_the_host_rules_and_lists_both_commands() {
    let p = plugin();
    assert_eq!(p.manifest.name, "acme");
    let names: Vec<&str> = p.manifest.commands.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(names, ["acme-panel-read", "acme-panel-write"]);
    assert_eq!(p.manifest.domains.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["acme"], "the plugin declares its own domain");
    assert!(p.manifest.commands.iter().all(|c| c.domain == "acme"));
    let write = &p.manifest.commands[1];
    assert_eq!((write.device_key.clone(), write.target_key.clone()), (vec!["panel".to_string()], vec!["panel".to_string()]));
}

#[test]
fn write_marks_dispatch_changes_the_panel_and_leaves_a_receipt() {
    let p = plugin();
    let dir = connect("w1");
    let out = p.invoke("acme-panel-write", json!({"panel": "w1", "text": "hello"}));
    assert!(out.ok, "{out:?}");
    assert!(out.dispatch_marked, "a write must mark dispatch before it changes the panel");
    assert_eq!(std::fs::read_to_string(dir.join("display.txt")).unwrap(), "hello");
    let receipt: Value = serde_json::from_slice(&std::fs::read(dir.join("receipts/test-action.json")).unwrap()).unwrap();
    assert_eq!(receipt["actionId"], "test-action");
    assert!(out.value.as_ref().unwrap()["factSequence"].is_u64(), "the write appends a fact when the host offers facts.append: {out:?}");

    let read = p.invoke("acme-panel-read", json!({"panel": "w1"}));
    assert!(read.ok && !read.dispatch_marked, "a query never marks dispatch: {read:?}");
    let value = read.value.unwrap();
    assert_eq!((value["text"].clone(), value["writes"].clone()), (json!("hello"), json!(1)));
}

#[test]
fn an_unknown_panel_is_device_not_found_and_never_dispatched() {
    let p = plugin();
    for (command, args) in [("acme-panel-read", json!({"panel": "absent"})), ("acme-panel-write", json!({"panel": "absent", "text": "x"}))] {
        let out = p.invoke(command, args);
        let error = out.error.as_ref().unwrap_or_else(|| panic!("{command} must fail: {out:?}"));
        assert_eq!((error.error.as_str(), error.field.as_deref(), error.dispatched), ("device_not_found", Some("panel"), Some(false)), "{command}");
        assert!(!out.dispatch_marked);
    }
    assert!(!panel_root().join("absent").exists(), "a failed write must not create the panel");
}

#[test]
fn arguments_outside_the_schema_are_refused_before_dispatch() {
    let p = plugin();
    connect("a1");
    // The host's validation (TestPlugin applies the same validator): unknown field,
    // pattern, maxLength.
    for (args, code, field) in [
        (json!({"panel": "a1", "text": "x", "colour": "red"}), "unsupported_argument", "colour"),
        (json!({"panel": "a1"}), "missing_argument", "text"),
        (json!({"panel": "../a1", "text": "x"}), "invalid_argument", "panel"),
        (json!({"panel": "a1", "text": "x".repeat(aab_plugin_acme::MAX_TEXT + 1)}), "invalid_argument", "text"),
    ] {
        let out = p.invoke("acme-panel-write", args);
        let error = out.error.as_ref().unwrap_or_else(|| panic!("{out:?}"));
        assert_eq!((error.error.as_str(), error.field.as_deref()), (code, Some(field)), "{out:?}");
        assert!(!out.dispatch_marked);
    }
    // Past a host that did not validate, the typed arguments still refuse it.
    let out = p.invoke_unvalidated("acme-panel-write", json!({"panel": "a1", "text": "x", "colour": "red"}), Duration::from_secs(5), Default::default());
    assert_eq!(out.error.map(|e| e.error).as_deref(), Some("plugin_arguments_mismatch"));
    assert!(!out.dispatch_marked && !panel_root().join("a1/display.txt").exists());
}

#[test]
fn reconcile_settles_only_from_the_actions_own_receipt() {
    let p = plugin();
    connect("r1");
    assert!(p.invoke("acme-panel-write", json!({"panel": "r1", "text": "t"})).ok);
    let settled = p.hook("reconcile", json!({"serial": "r1", "pending": {"actionId": "test-action", "runtimeEpoch": "test-epoch"}}));
    let answer = settled.value.unwrap_or_else(|| panic!("{:?}", settled.error));
    assert_eq!((answer["status"].clone(), answer["receipt"]["actionId"].clone()), (json!("settled"), json!("test-action")));
    let unknown = p.hook("reconcile", json!({"serial": "r1", "pending": {"actionId": "another-action"}}));
    assert_eq!(unknown.value.unwrap()["status"], "unknown");
    let other = p.hook("frobnicate", json!({}));
    assert_eq!(other.error.map(|e| e.error).as_deref(), Some("unsupported_plugin_method"));
}
