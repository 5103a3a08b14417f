//! The out-of-tree example provider (`examples/private-provider`, plugin `acme`) as a
//! team would ship it (issue 11): built with its own lockfile, bundled with
//! `aab plugins bundle`, verified, installed into a plugin directory next to the
//! host's own plugins, and driven through the CLI and MCP. Ground truth is the
//! panel directory the plugin writes and the host's ownership journal.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use aab_e2e::{TestEnv, error_code, error_field, find_key, target_profile_dir};
use serde_json::{Value, json};

/// Repository root (`tests/..`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_path_buf()
}

/// Build the example once per test process (debug, `--locked`) into
/// `target/private-provider` — its own target directory, so the nested cargo never
/// waits for the outer build's lock and the host's default plugin directory
/// (`target/debug`) never picks the example up. Returns the cdylib.
pub fn example_cdylib() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target_dir = target_profile_dir().parent().expect("target directory").join("private-provider");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let manifest = repo_root().join("examples/private-provider/Cargo.toml");
            let out = Command::new(cargo)
                .args(["build", "--locked", "--manifest-path"])
                .arg(&manifest)
                .env("CARGO_TARGET_DIR", &target_dir)
                .output()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cargo build --locked of {} failed (after a dependency change of plugin-api, refresh its lockfile: \
                     cargo update --workspace --manifest-path examples/private-provider/Cargo.toml):\n{}",
                    manifest.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let lib = target_dir.join("debug").join(aab_e2e::plugin_file_name("acme"));
            if lib.is_file() { Ok(lib) } else { Err(format!("cargo built no {}", lib.display())) }
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `aab plugins bundle --from <dir with the example> --out <root>/<name>`: the bundle dir.
pub fn bundle_example(env: &TestEnv, name: &str) -> PathBuf {
    let src = env.root.join(format!("{name}-src"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy(example_cdylib(), src.join(aab_e2e::plugin_file_name("acme"))).unwrap();
    let out = env.root.join(name);
    let run = env.aab(&["plugins", "bundle", "--from", &src.display().to_string(), "--out", &out.display().to_string(), "--id", "acme-panels", "--version", "0.3.0"]);
    let body = env.expect_ok(&run, "plugins bundle --from");
    let entry = body.pointer("/value/plugins/0").cloned().unwrap_or(Value::Null);
    env.check(
        entry["name"] == json!("acme") && entry["pluginApi"].is_string() && entry["abiMajor"] == json!(1) && body.pointer("/value/plugins/1").is_none(),
        &run,
        "the bundle must hold exactly the acme plugin, with its plugin-API range and ABI major",
    );
    out
}

/// The device ownership journal of `panel` (`null` when the host wrote none).
fn journal(env: &TestEnv, panel: &str) -> Value {
    std::fs::read(env.journal_path(panel)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null)
}

#[test]
fn private_provider_from_a_verified_bundle_runs_next_to_the_hosts_plugins() {
    let env = TestEnv::new();
    env.install_plugin("aab_fixture_fixture", "fixture");
    let bundle = bundle_example(&env, "acme-bundle");
    let bundle_arg = bundle.display().to_string();
    env.expect_ok(&env.aab(&["plugins", "verify", &bundle_arg]), "plugins verify of the example bundle");
    let run = env.aab(&["plugins", "install", &bundle_arg]);
    let body = env.expect_ok(&run, "plugins install");
    env.check(body.pointer("/value/installed/0/name") == Some(&json!("acme")), &run, "install must report the acme plugin");

    // Both plugins load from the one plugin directory; list says where each came from.
    let run = env.aab(&["plugins", "list"]);
    let body = env.expect_ok(&run, "plugins list");
    let plugins = body.pointer("/value/plugins").and_then(Value::as_array).cloned().unwrap_or_default();
    let by_name = |n: &str| plugins.iter().find(|p| p["name"] == json!(n)).cloned().unwrap_or(Value::Null);
    let (acme, fixture) = (by_name("acme"), by_name("fixture"));
    env.check(acme["status"] == json!("loaded") && fixture["status"] == json!("loaded"), &run, "acme and fixture must both load");
    env.check(
        acme["source"] == json!({"kind": "bundle", "bundleId": "acme-panels", "bundleVersion": "0.3.0", "installedAtMs": acme["source"]["installedAtMs"]})
            && acme["source"]["installedAtMs"].is_u64()
            && fixture["source"] == json!({"kind": "file"}),
        &run,
        "acme comes from bundle acme-panels 0.3.0, fixture is a loose file",
    );

    // The runtime takes ACME_PANEL_ROOT from the client that starts it.
    let panels = env.root.join("panels");
    std::fs::create_dir_all(panels.join("p1")).unwrap();
    env.set_env("ACME_PANEL_ROOT", panels.display().to_string());

    // CLI mutation: the panel shows the text, its receipt names the action, the
    // device journal settled that very action.
    let run = env.aab(&["acme-panel-write", "--panel", "p1", "--text", "hello from the CLI"]);
    let body = env.expect_ok(&run, "acme-panel-write over the CLI");
    let action = body.pointer("/value/actionId").and_then(Value::as_str).unwrap_or_default().to_string();
    env.check(std::fs::read_to_string(panels.join("p1/display.txt")).ok().as_deref() == Some("hello from the CLI"), &run, "display.txt must hold the written text");
    env.check(panels.join(format!("p1/receipts/{action}.json")).is_file(), &run, "the write must leave its receipt");
    let j = journal(&env, "p1");
    env.check(j["phase"] == json!("idle") && j["pending"].is_null() && find_key(&j["lastSettlement"], "actionId") == Some(&json!(action)), &run, &format!("the journal must settle {action}: {j}"));

    // A write to a panel that is not connected fails before dispatch: not ambiguous,
    // and the device is not left unresolved.
    let run = env.aab(&["acme-panel-write", "--panel", "p2", "--text", "x"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 1 && error_code(&body) == Some("device_not_found") && error_field(&body) == Some("panel"), &run, "an unknown panel is device_not_found on field panel");
    env.check(
        body.pointer("/execution/dispatched") == Some(&json!(false)) && body.pointer("/execution/ambiguous") == Some(&json!(false)),
        &run,
        "a refusal before the dispatch mark is dispatched:false, ambiguous:false",
    );
    env.check(!panels.join("p2").exists() && journal(&env, "p2")["phase"] != json!("unresolved"), &run, "the unknown panel stays untouched and not unresolved");

    // MCP: the same runtime serves the query and a second mutation.
    {
        let mut mcp = env.mcp();
        // The plugin's own domain is a heading of its own, holding both commands.
        let (body, is_error) = mcp.call_tool("capabilities", json!({"domain": "acme"}));
        let text = body.to_string();
        if is_error || body.pointer("/commandDomains/acme").is_none() || !text.contains("acme-panel-read") || !text.contains("acme-panel-write") {
            mcp.fail(&format!("capabilities {{domain: acme}} must list the private domain with both commands; got isError {is_error}, body {body}"));
        }
        let (body, is_error) = mcp.call_tool("run", json!({"command": "acme-panel-read", "arguments": {"panel": "p1"}, "extract": null}));
        if is_error || body.pointer("/value/text") != Some(&json!("hello from the CLI")) || body.pointer("/value/writes") != Some(&json!(1)) {
            mcp.fail(&format!("acme-panel-read over MCP must see the CLI's write; got isError {is_error}, body {body}"));
        }
        let (body, is_error) = mcp.call_tool("run", json!({"command": "acme-panel-write", "arguments": {"panel": "p1", "text": "hello from MCP"}, "extract": null}));
        if is_error || body.pointer("/value/previous") != Some(&json!("hello from the CLI")) {
            mcp.fail(&format!("acme-panel-write over MCP must succeed; got isError {is_error}, body {body}"));
        }
        let (body, _) = mcp.call_tool("run", json!({"command": "fixture-echo", "arguments": {"message": "still here"}, "extract": null}));
        if body.pointer("/value/echo") != Some(&json!("still here")) {
            mcp.fail(&format!("the host's own plugin keeps serving next to acme; got {body}"));
        }
    }
    assert_eq!(std::fs::read_to_string(panels.join("p1/display.txt")).ok().as_deref(), Some("hello from MCP"), "{}", env.report(None));
    let run = env.aab(&["acme-panel-read", "--panel", "p1"]);
    let body = env.expect_ok(&run, "acme-panel-read over the CLI");
    env.check(body.pointer("/value/writes") == Some(&json!(2)), &run, "two completed writes, two receipts");
}
