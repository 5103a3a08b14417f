//! `executor-prepare` through the public CLI: a missing toolchain is named tool by
//! tool, a package is prepared once (by its sha256) and reused, and a failed build,
//! a refused package or a hostile path prepares nothing. Ground truth is the
//! executor home on disk (`AI_APP_BRIDGE_EXECUTOR_HOME`), never the reply alone.
//! Packages are real APKs written by Debian's `aapt`; build tools that this machine
//! lacks (Gradle, an Android SDK) are stand-in executables at their real interface
//! (`gradlew assembleDebugAndroidTest` writing `build/outputs/apk/androidTest/…`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use aab_e2e::{Run, TestEnv, error_code, error_facts, flags};
use serde_json::{Value, json};

fn framework() -> String {
    std::env::var("AAB_TEST_FRAMEWORK_RES").unwrap_or_else(|_| "/usr/share/android-framework-res/framework-res.apk".into())
}

/// A real APK of `package`; with `target`, an instrumentation package for it.
fn apk(dir: &Path, package: &str, target: Option<&str>) -> PathBuf {
    let work = dir.join(format!("apk-{package}"));
    std::fs::create_dir_all(&work).unwrap();
    let instrumentation = target.map(|t| format!("  <instrumentation android:name=\".Runner\" android:targetPackage=\"{t}\"/>\n")).unwrap_or_default();
    std::fs::write(
        work.join("AndroidManifest.xml"),
        format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<manifest xmlns:android=\"http://schemas.android.com/apk/res/android\" package=\"{package}\" android:versionCode=\"1\">\n  <uses-sdk android:minSdkVersion=\"24\"/>\n{instrumentation}  <application android:label=\"T\"/>\n</manifest>\n"),
    )
    .unwrap();
    let out = work.join("out.apk");
    let run = Command::new("aapt").args(["package", "-f", "-M"]).arg(work.join("AndroidManifest.xml")).args(["-I", &framework(), "-F"]).arg(&out).output().expect("aapt (apt-get install aapt android-framework-res)");
    assert!(run.status.success(), "aapt: {}", String::from_utf8_lossy(&run.stderr));
    out
}

struct Prep {
    env: TestEnv,
    home: PathBuf,
}

impl Prep {
    fn new() -> Prep {
        let env = TestEnv::new();
        let home = env.root.join("executors");
        env.set_env("AI_APP_BRIDGE_EXECUTOR_HOME", home.display().to_string());
        env.remove_env("ANDROID_HOME");
        env.remove_env("ANDROID_SDK_ROOT");
        Prep { env, home }
    }

    fn run(&self, args: Value) -> (Value, Run) {
        let mut argv = vec!["executor-prepare".to_string()];
        argv.extend(flags(&args));
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = self.env.aab(&refs);
        (self.env.json_of(&run), run)
    }

    #[track_caller]
    fn ok(&self, args: Value) -> Value {
        let (body, run) = self.run(args);
        self.env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, "executor-prepare should succeed");
        body["value"].clone()
    }

    #[track_caller]
    fn fails(&self, args: Value, code: &str) -> Value {
        let (body, run) = self.run(args);
        self.env.check(error_code(&body) == Some(code), &run, &format!("expected `{code}`"));
        self.env.check(error_facts(&body)["dispatched"] == json!(false), &run, "a refused preparation is dispatched:false");
        self.env.check(run.exit() != 0, &run, "a failure must not exit 0");
        error_facts(&body).clone()
    }

    /// Every entry under the executor home (preparations and leftovers).
    fn entries(&self, platform: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.home.join(platform)).map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        v.sort();
        v
    }
}

fn executable(path: &Path, script: &str) {
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn sha(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_missing_toolchain_is_named_tool_by_tool_and_nothing_is_prepared() {
    let p = Prep::new();
    let project = p.env.root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let e = p.fails(json!({"platform": "android", "projectDir": "../project"}), "executor_toolchain_missing");
    let tools: Vec<&str> = e["details"]["missing"].as_array().map(|m| m.iter().filter_map(|t| t["tool"].as_str()).collect()).unwrap_or_default();
    assert_eq!(tools, ["gradle", "android-sdk"], "{e}");
    assert!(e["details"]["missing"][1]["install"].as_str().unwrap().contains("ANDROID_HOME"), "{e}");
    // Flutter adds its own SDK to the list; every gap is named in one answer.
    let e = p.fails(json!({"platform": "flutter", "projectDir": project}), "executor_toolchain_missing");
    assert_eq!(e["details"]["missing"].as_array().unwrap().len(), 3, "{e}");
    assert!(p.entries("android").is_empty() && p.entries("flutter").is_empty(), "nothing prepared: {:?}", p.entries("android"));
}

#[test]
fn a_prebuilt_instrumentation_package_is_prepared_once_and_reused() {
    let p = Prep::new();
    let package = apk(&p.env.root, "com.example.app.test", Some("com.example.app"));
    let first = p.ok(json!({"platform": "android", "testPackagePath": package}));
    assert_eq!(first["instrumentation"]["component"], json!("com.example.app.test/com.example.app.test.Runner"), "{first}");
    assert_eq!(first["instrumentation"]["targetPackage"], json!("com.example.app"));
    assert_eq!(first["reused"], json!(false));
    let id = first["preparationId"].as_str().unwrap().to_string();
    // Ground truth: the prepared copy is byte-identical and its record names it.
    let dir = p.home.join("android").join(&id);
    let source = std::fs::read(&package).unwrap();
    assert_eq!(std::fs::read(dir.join("test.apk")).unwrap(), source);
    let record: Value = serde_json::from_slice(&std::fs::read(dir.join("preparation.json")).unwrap()).unwrap();
    assert_eq!(record["package"]["sha256"], json!(sha(&source)));
    assert_eq!(record["schemaVersion"], json!("aab.executor-preparation/v1"));
    let again = p.ok(json!({"platform": "android", "testPackagePath": package}));
    assert_eq!((again["reused"].clone(), again["preparationId"].clone()), (json!(true), json!(id)));
    // An app that is not an instrumentation package is refused on its field.
    let plain = apk(&p.env.root, "com.example.plain", None);
    let e = p.fails(json!({"platform": "android", "testPackagePath": plain}), "executor_package_invalid");
    assert_eq!(e["field"], json!("testPackagePath"));
    assert_eq!(p.entries("android"), [id], "only the one preparation exists");
}

#[test]
fn a_failed_build_prepares_nothing_and_a_good_one_publishes_its_package() {
    let p = Prep::new();
    let sdk = p.env.root.join("sdk");
    std::fs::create_dir_all(sdk.join("platforms/android-34")).unwrap();
    p.env.set_env("ANDROID_HOME", sdk.display().to_string());
    let project = p.env.root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    executable(&project.join("gradlew"), "#!/bin/sh\necho \"task $1 started\"\nmkdir -p build/outputs/apk/androidTest/debug\necho half > build/outputs/apk/androidTest/debug/partial.apk\necho 'compilation failed: Runner.java' >&2\nexit 1\n");
    let e = p.fails(json!({"platform": "android", "projectDir": project}), "executor_build_failed");
    assert!(e["details"]["logTail"].as_str().unwrap().contains("compilation failed"), "{e}");
    assert_eq!(e["details"]["exitCode"], json!(1));
    assert!(p.entries("android").is_empty(), "a failed build prepares nothing: {:?}", p.entries("android"));
    // A build that succeeds: its androidTest package is what gets prepared.
    std::fs::remove_dir_all(project.join("build")).unwrap();
    let built = apk(&p.env.root, "com.example.built.test", Some("com.example.built"));
    executable(&project.join("gradlew"), &format!("#!/bin/sh\n[ \"$1\" = assembleDebugAndroidTest ] || exit 9\nmkdir -p build/outputs/apk/androidTest/debug\ncp '{}' build/outputs/apk/androidTest/debug/app-debug-androidTest.apk\n", built.display()));
    let ok = p.ok(json!({"platform": "android", "projectDir": project}));
    assert_eq!(ok["instrumentation"]["targetPackage"], json!("com.example.built"), "{ok}");
    let id = ok["preparationId"].as_str().unwrap();
    assert_eq!(std::fs::read(p.home.join("android").join(id).join("test.apk")).unwrap(), std::fs::read(&built).unwrap());
    assert_eq!(p.entries("android"), [id.to_string()], "no staging directory is left behind");
}

#[test]
fn hostile_or_conflicting_inputs_are_refused_before_any_file_access() {
    let p = Prep::new();
    p.fails(json!({"platform": "ios"}), "invalid_argument");
    let e = p.fails(json!({"platform": "android", "projectDir": "a", "testPackagePath": "b"}), "invalid_argument");
    assert_eq!(e["field"], json!("testPackagePath"));
    let e = p.fails(json!({"platform": "web", "projectDir": "a"}), "unsupported_argument");
    assert_eq!(e["field"], json!("projectDir"));
    // A FIFO where a package belongs: refused at once by the bounded read (no hang).
    let fifo = p.env.root.join("pipe.apk");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = p.fails(json!({"platform": "android", "testPackagePath": fifo}), "invalid_argument");
    assert_eq!(e["field"], json!("testPackagePath"), "{e}");
    let e = p.fails(json!({"platform": "android", "testPackagePath": "missing.apk", "aaptPath": "/nonexistent/aapt"}), "invalid_argument");
    assert_eq!(e["field"], json!("aaptPath"));
    assert!(!p.home.exists() || p.entries("android").is_empty());
}

#[test]
fn web_preparation_checks_the_local_browser_and_its_driver() {
    let p = Prep::new();
    let ok = p.ok(json!({"platform": "web"}));
    let (browser, driver) = (ok["browser"]["version"].as_str().unwrap(), ok["driver"]["version"].as_str().unwrap());
    assert!(browser.contains("Chromium") && driver.contains("ChromeDriver"), "{ok}");
    assert_eq!(p.ok(json!({"platform": "web"}))["reused"], json!(true));
    let e = p.fails(json!({"platform": "web", "browser": "firefox"}), "executor_browser_unsupported");
    assert!(e["message"].as_str().unwrap().contains("webdriver"), "{e}");
}
