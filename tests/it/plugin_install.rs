//! `aab plugins install BUNDLE` / `remove NAME` (issue 11, bundles for packagers):
//! install verifies the whole bundle before the plugin directory changes and
//! refuses with one stable code per cause; a refusal leaves the directory exactly
//! as it was (no file, no record, no staging leftovers). Ground truth is the plugin
//! directory's listing and what `plugins list` loads.

use std::path::{Path, PathBuf};

use aab_e2e::{TestEnv, all_files, built_cdylib, error_code, error_field, plugin_file_name, sha256_hex};
use serde_json::{Value, json};

use crate::private_provider::bundle_example;

/// Every path under the plugin directory with its sha256 (hidden files included).
fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = all_files(dir).into_iter().map(|p| (p.clone(), sha256_hex(&std::fs::read(&p).unwrap_or_default()))).collect();
    files.sort();
    let dirs = std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.path().is_dir()).count();
    assert_eq!(dirs, 0, "no staging directory may be left in {}", dir.display());
    files
}

/// A bundle written by hand (as a packager's broken or foreign tooling would):
/// `(source cdylib, file name in the bundle, plugin name)`.
fn handmade_bundle(env: &TestEnv, name: &str, files: &[(PathBuf, String, &str)]) -> PathBuf {
    let dir = env.root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut plugins = Vec::new();
    for (src, file, plugin) in files {
        let bytes = std::fs::read(src).unwrap();
        std::fs::write(dir.join(file), &bytes).unwrap();
        plugins.push(json!({"file": file, "name": plugin, "version": "0.1.0", "sha256": sha256_hex(&bytes), "size": bytes.len()}));
    }
    let manifest = json!({"schema": "aab.plugin-bundle/v1", "id": name, "version": "1.0.0", "hostVersion": "0.1.0", "plugins": plugins});
    std::fs::write(dir.join("aab-bundle.json"), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    dir
}

/// Install `bundle` with `extra_env`; it must fail with `code`, leaving the plugin
/// directory untouched. Returns the reply body.
fn refused(env: &TestEnv, bundle: &Path, extra_env: &[(&str, &str)], code: &str) -> Value {
    let before = snapshot(&env.plugins);
    let run = env.aab_with_env(&["plugins", "install", &bundle.display().to_string()], extra_env);
    let body = env.json_of(&run);
    env.check(run.exit() == 1 && error_code(&body) == Some(code), &run, &format!("install must be refused with {code}"));
    env.check(body["execution"]["ok"] == json!(false) && body["command"] == json!("plugins"), &run, "the refusal is a contract envelope");
    env.check(snapshot(&env.plugins) == before, &run, "a refused install must leave the plugin directory as it was");
    body
}

fn plugin_names(env: &TestEnv) -> Vec<(String, String)> {
    let run = env.aab(&["plugins", "list"]);
    let body = env.expect_ok(&run, "plugins list");
    let mut names: Vec<(String, String)> = body.pointer("/value/plugins").and_then(Value::as_array).into_iter().flatten()
        .map(|p| (p["name"].as_str().unwrap_or("?").to_string(), p["status"].as_str().unwrap_or("?").to_string()))
        .collect();
    names.sort();
    names
}

#[test]
fn install_refuses_a_tampered_bundle() {
    let env = TestEnv::new();
    env.install_plugin("aab_fixture_fixture", "fixture");
    let bundle = bundle_example(&env, "tampered");
    let file = bundle.join(plugin_file_name("acme"));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.push(0);
    std::fs::write(&file, bytes).unwrap();
    let body = refused(&env, &bundle, &[], "plugin_hash_mismatch");
    assert!(body.to_string().contains("hash_mismatch"), "the details name the file's status: {body}");
    // An unlisted plugin file is tampering too.
    let bundle = bundle_example(&env, "extra-file");
    std::fs::copy(built_cdylib("aab_fixture_fixture"), bundle.join(plugin_file_name("stowaway"))).unwrap();
    refused(&env, &bundle, &[], "plugin_hash_mismatch");
}

#[test]
fn install_refuses_a_plugin_of_another_abi_major() {
    let env = TestEnv::new();
    let bundle = handmade_bundle(&env, "future-abi", &[(built_cdylib("aab_fixture_wrong_abi"), plugin_file_name("future"), "future")]);
    refused(&env, &bundle, &[], "plugin_abi_incompatible");
}

#[test]
fn install_refuses_a_plugin_api_range_this_host_does_not_meet() {
    let env = TestEnv::new();
    let bundle = handmade_bundle(&env, "api-range", &[(built_cdylib("aab_fixture_misbehaving"), plugin_file_name("misbehaving"), "misbehaving")]);
    refused(&env, &bundle, &[("AAB_MISBEHAVE_PLUGIN_API", ">=9.0.0")], "plugin_api_incompatible");
}

/// A plugin that segfaults while it is loaded is verified in a child process: the
/// install answers `plugin_crashed` in the contract envelope (the CLI does not die
/// with the plugin), leaves no staging directory and changes nothing.
#[test]
fn install_survives_a_plugin_that_crashes_while_loading() {
    let env = TestEnv::new();
    env.install_plugin("aab_fixture_fixture", "fixture");
    let bundle = handmade_bundle(&env, "crash-on-load", &[(built_cdylib("aab_fixture_crashing"), plugin_file_name("crashing"), "crashing")]);
    let body = refused(&env, &bundle, &[("AAB_FIXTURE_CRASH_IN_MANIFEST", "1")], "plugin_crashed");
    assert!(body.to_string().contains("signal"), "the error says how the plugin host ended: {body}");
    assert_eq!(plugin_names(&env), [("fixture".to_string(), "loaded".to_string())]);
}

#[test]
fn install_refuses_what_is_not_a_bundle() {
    let env = TestEnv::new();
    let plain = env.root.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::copy(built_cdylib("aab_fixture_fixture"), plain.join(plugin_file_name("fixture"))).unwrap();
    let body = refused(&env, &plain, &[], "plugin_bundle_invalid");
    assert_eq!(error_field(&body), Some("bundle"), "{body}");
    std::fs::write(plain.join("aab-bundle.json"), b"{\"schema\": \"something/else\", \"plugins\": []}").unwrap();
    refused(&env, &plain, &[], "plugin_bundle_invalid");
    // A listed name that is not what the file says it is.
    let bundle = handmade_bundle(&env, "misnamed", &[(built_cdylib("aab_fixture_fixture"), plugin_file_name("fixture"), "someone-else")]);
    refused(&env, &bundle, &[], "plugin_bundle_invalid");
    // A plugin directory whose own bundle manifest cannot be rewritten: refused before
    // anything is copied.
    std::fs::write(env.plugins.join("aab-bundle.json"), b"not json").unwrap();
    let good = bundle_example(&env, "good");
    let body = refused(&env, &good, &[], "plugin_bundle_invalid");
    assert_eq!(error_field(&body), Some("pluginDir"), "{body}");
}

#[test]
fn install_and_remove_keep_a_bundle_plugin_directory_loadable() {
    let env = TestEnv::new();
    // The host's own plugins as a release ships them: a bundle used as the plugin dir.
    let staging = env.root.join("host-plugins-src");
    std::fs::create_dir_all(&staging).unwrap();
    env.install_plugin_into(&staging, "aab_fixture_fixture", "fixture");
    let release = env.root.join("release-plugins");
    let run = env.aab(&["plugins", "bundle", "--from", &staging.display().to_string(), "--out", &release.display().to_string()]);
    env.expect_ok(&run, "plugins bundle of the host's plugins");
    env.set_env(aab_e2e::ENV_PLUGIN_DIR, release.display().to_string());

    let acme = bundle_example(&env, "acme-bundle");
    let run = env.aab(&["plugins", "install", &acme.display().to_string()]);
    let body = env.expect_ok(&run, "install into a bundle plugin directory");
    env.check(body.pointer("/value/pluginDirBundleUpdated") == Some(&json!(true)), &run, "the directory's own bundle manifest must list the new plugin");
    assert_eq!(plugin_names(&env), [("acme".to_string(), "loaded".to_string()), ("fixture".to_string(), "loaded".to_string())], "{}", env.report(None));
    env.expect_ok(&env.aab(&["plugins", "verify", &release.display().to_string()]), "the updated plugin directory still verifies");
    // Installing the same bundle again replaces the file in place.
    let run = env.aab(&["plugins", "install", &acme.display().to_string()]);
    let body = env.expect_ok(&run, "reinstall");
    env.check(body.pointer("/value/installed/0/replaced") == Some(&json!(true)), &run, "a reinstall replaces the file");

    let run = env.aab(&["plugins", "remove", "acme"]);
    let body = env.expect_ok(&run, "plugins remove acme");
    env.check(body.pointer("/value/removed") == Some(&json!([plugin_file_name("acme")])), &run, "remove deletes the acme file");
    assert_eq!(plugin_names(&env), [("fixture".to_string(), "loaded".to_string())], "{}", env.report(None));
    assert!(!release.join("aab-installed.json").exists(), "no install record is left once nothing installed remains");
    env.expect_ok(&env.aab(&["plugins", "verify", &release.display().to_string()]), "the plugin directory verifies after remove");

    let run = env.aab(&["plugins", "remove", "acme"]);
    let body = env.json_of(&run);
    env.check(run.exit() == 1 && error_code(&body) == Some("plugin_not_installed") && error_field(&body) == Some("name"), &run, "removing it again is plugin_not_installed");
    let run = env.aab(&["plugins", "remove", "../etc"]);
    env.check(error_code(&env.json_of(&run)) == Some("invalid_argument"), &run, "a path is not a plugin name");
}
