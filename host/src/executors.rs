//! `executor-prepare`: the host-side preparation of what an executor needs before
//! its `open` (an instrumentation APK for `android-executor` / `flutter-executor`,
//! a local browser for `web-executor`). It runs on the host, never on a device.
//!
//! Two rules shape it. First, a missing toolchain is named, not guessed: every tool
//! the chosen path needs is looked up before anything runs, and the refusal lists
//! each missing one with what to install (`executor_toolchain_missing`). Second, it
//! never half-prepares: a preparation is built in a private staging directory and
//! becomes visible by one `rename`, so a failed build, a refused package or a
//! killed runtime leaves no preparation behind (staging leftovers are swept on the
//! next call). The same artifact prepared twice is the same preparation
//! (`reused:true`), keyed by its sha256.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::error::CommandError;

/// The preparation record inside a prepared directory.
pub const RECORD: &str = "preparation.json";
pub const SCHEMA: &str = "aab.executor-preparation/v1";
/// Largest instrumentation package accepted (real test APKs are a few MiB).
const MAX_PACKAGE: u64 = 512 * 1024 * 1024;
/// Output kept from a tool (the tail of a build log, aapt's manifest dump).
const MAX_OUTPUT: usize = 4 * 1024 * 1024;
const LOG_TAIL: usize = 4096;

/// The `executor-prepare` input schema.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "platform": {"type": "string", "enum": ["android", "flutter", "web"], "description": "android/flutter: an instrumentation package for android-executor/flutter-executor; web: the local browser of web-executor's cdp engine"},
            "projectDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "android/flutter: the project to build the instrumentation package from (Gradle, or Flutter + Gradle, and an Android SDK); relative to the caller's cwd"},
            "testPackagePath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "android/flutter: an already-built instrumentation APK (instead of projectDir); relative to the caller's cwd"},
            "gradlePath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the Gradle executable (default: <projectDir>/gradlew, else `gradle` on PATH)"},
            "flutterPath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the Flutter executable (default: `flutter` on PATH)"},
            "aaptPath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "the aapt executable that reads the package's manifest (default: `aapt` on PATH)"},
            "browser": {"type": "string", "enum": ["chromium", "firefox", "webkit"], "description": "web: the browser to prepare (locally only chromium; firefox and webkit need a WebDriver endpoint that offers them)"}
        },
        "required": ["platform"]
    })
}

/// One missing tool: what it is for and how to get it.
fn missing(tool: &str, why: &str, install: &str) -> Value {
    json!({"tool": tool, "neededFor": why, "install": install})
}

fn refuse_missing(platform: &str, missing: Vec<Value>) -> CommandError {
    let names: Vec<&str> = missing.iter().filter_map(|m| m["tool"].as_str()).collect();
    CommandError::new("executor_toolchain_missing", format!("executor-prepare for {platform} needs {} on this host; nothing was prepared", names.join(", ")))
        .with_details(json!({"platform": platform, "missing": missing}))
}

/// Where preparations live: `AI_APP_BRIDGE_EXECUTOR_HOME`, else `<runtime dir>/executors`.
pub fn executor_home(runtime_dir: &Path) -> PathBuf {
    match std::env::var_os("AI_APP_BRIDGE_EXECUTOR_HOME") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => runtime_dir.join("executors"),
    }
}

/// `PATH` lookup of an executable file.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| is_executable(p)))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

fn resolve(cwd: &str, value: &str) -> PathBuf {
    let p = Path::new(value);
    if p.is_absolute() { p.to_path_buf() } else { Path::new(cwd).join(p) }
}

/// An explicit executable argument, or a default lookup. `Err` = the caller named
/// one that is not executable (their mistake, reported on that field).
fn tool(cwd: &str, explicit: Option<&str>, field: &str, default: impl FnOnce() -> Option<PathBuf>) -> Result<Option<PathBuf>, CommandError> {
    match explicit {
        Some(v) => {
            let p = resolve(cwd, v);
            if is_executable(&p) { Ok(Some(p)) } else { Err(CommandError::invalid(field, format!("{} is not an executable file", p.display()))) }
        }
        None => Ok(default()),
    }
}

/// The Android SDK named by `ANDROID_HOME` / `ANDROID_SDK_ROOT` (one with `platforms/`).
fn android_sdk() -> Option<PathBuf> {
    ["ANDROID_HOME", "ANDROID_SDK_ROOT"].iter().filter_map(std::env::var_os).map(PathBuf::from).find(|d| d.join("platforms").is_dir())
}

struct Args<'a> {
    platform: &'a str,
    project_dir: Option<&'a str>,
    test_package: Option<&'a str>,
    gradle: Option<&'a str>,
    flutter: Option<&'a str>,
    aapt: Option<&'a str>,
    browser: Option<&'a str>,
}

fn args(a: &Value) -> Result<Args<'_>, CommandError> {
    let s = |k: &str| a.get(k).and_then(Value::as_str);
    let args = Args {
        platform: s("platform").unwrap_or_default(),
        project_dir: s("projectDir"),
        test_package: s("testPackagePath"),
        gradle: s("gradlePath"),
        flutter: s("flutterPath"),
        aapt: s("aaptPath"),
        browser: s("browser"),
    };
    let web = args.platform == "web";
    for (field, set) in [("projectDir", args.project_dir.is_some()), ("testPackagePath", args.test_package.is_some()), ("gradlePath", args.gradle.is_some()), ("flutterPath", args.flutter.is_some()), ("aaptPath", args.aapt.is_some())] {
        if web && set {
            return Err(CommandError::unsupported(field).with_details(json!({"platform": "web"})));
        }
    }
    if !web {
        if args.browser.is_some() {
            return Err(CommandError::unsupported("browser").with_details(json!({"platform": args.platform})));
        }
        if args.flutter.is_some() && args.platform != "flutter" {
            return Err(CommandError::unsupported("flutterPath").with_details(json!({"platform": args.platform})));
        }
        match (args.project_dir, args.test_package) {
            (Some(_), Some(_)) => return Err(CommandError::invalid("testPackagePath", "give either projectDir (build) or testPackagePath (prebuilt), not both")),
            (None, None) => return Err(CommandError::invalid("projectDir", format!("executor-prepare for {} needs projectDir (to build the instrumentation package) or testPackagePath (a built one)", args.platform))),
            _ => {}
        }
        if args.test_package.is_some() && (args.gradle.is_some() || args.flutter.is_some()) {
            return Err(CommandError::invalid(if args.gradle.is_some() { "gradlePath" } else { "flutterPath" }, "a prebuilt testPackagePath is not built: drop the build tool"));
        }
    }
    Ok(args)
}

/// A child run to completion within `deadline`, its own process group (killed
/// whole when the deadline passes), output capped.
async fn run(program: &Path, argv: &[&str], dir: Option<&Path>, deadline: Instant) -> Result<(i32, String), CommandError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(argv).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let mut child = cmd.spawn().map_err(|e| CommandError::new("executor_tool_failed", format!("cannot start {}: {e}", program.display())))?;
    let pid = child.id();
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let work = async {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let read_out = async { (&mut out).take(MAX_OUTPUT as u64).read_to_end(&mut a).await };
        let read_err = async { (&mut err).take(MAX_OUTPUT as u64).read_to_end(&mut b).await };
        let _ = tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (status, a, b)
    };
    match tokio::time::timeout_at(deadline.into(), work).await {
        Ok((status, a, b)) => {
            let code = status.map(|s| s.code().unwrap_or(-1)).unwrap_or(-1);
            let mut text = String::from_utf8_lossy(&a).into_owned();
            text.push_str(&String::from_utf8_lossy(&b));
            Ok((code, text))
        }
        Err(_) => {
            if let Some(pid) = pid {
                // The whole group: a build tool's daemons and workers too.
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            }
            Err(CommandError::new(aab_plugin_api::codes::DEADLINE_EXCEEDED, format!("{} did not finish within the deadline; nothing was prepared", program.display())))
        }
    }
}

fn tail(text: &str) -> String {
    let start = text.len().saturating_sub(LOG_TAIL);
    let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    text[start..].to_string()
}

/// The instrumentation a package declares, read from `aapt dump xmltree`.
#[derive(Debug, PartialEq)]
pub struct Instrumentation {
    pub package: String,
    pub runner: String,
    pub target_package: String,
}

/// Parses aapt's manifest tree: `E: manifest` carries `package`, `E: instrumentation`
/// carries `android:name` and `android:targetPackage`. Runner names given relative
/// (`.Runner`) are expanded against the package, as Android does.
pub fn parse_instrumentation(tree: &str) -> Option<Instrumentation> {
    let value = |line: &str| -> Option<String> {
        let start = line.find("=\"")? + 2;
        let end = line[start..].find('"')? + start;
        Some(line[start..end].to_string())
    };
    let (mut package, mut runner, mut target, mut in_instr) = (None, None, None, false);
    for line in tree.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("E: ") {
            in_instr = rest.starts_with("instrumentation");
            continue;
        }
        if line.starts_with("A: package=") && package.is_none() {
            package = value(line);
        } else if in_instr && line.starts_with("A: android:name(") && runner.is_none() {
            runner = value(line);
        } else if in_instr && line.starts_with("A: android:targetPackage(") && target.is_none() {
            target = value(line);
        }
    }
    let package = package?;
    let mut runner = runner?;
    if runner.starts_with('.') {
        runner = format!("{package}{runner}");
    }
    Some(Instrumentation { package, runner, target_package: target? })
}

/// Reads the package with a bounded read (regular file, no symlink, ≤ 512 MiB).
fn read_package(path: &Path) -> Result<Vec<u8>, CommandError> {
    match crate::fsread::read_regular_bounded(path, MAX_PACKAGE) {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(CommandError::invalid("testPackagePath", format!("{} does not exist", path.display()))),
        Err(e) => Err(CommandError::invalid("testPackagePath", format!("{}: {e}", path.display()))),
    }
}

/// Removes staging directories a crashed or killed preparation left behind.
fn sweep_staging(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".staging-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// Publishes `files` + the record as `<home>/<platform>/<id>` by one rename.
fn publish(home: &Path, platform: &str, id: &str, files: &[(&str, &[u8])], record: &Value) -> Result<(PathBuf, bool), CommandError> {
    use std::io::Write;
    let io = |what: &str, e: std::io::Error| CommandError::new("executor_prepare_io", format!("{what}: {e}; nothing was prepared"));
    let parent = home.join(platform);
    std::fs::create_dir_all(&parent).map_err(|e| io("cannot create the executor home", e))?;
    sweep_staging(&parent);
    let final_dir = parent.join(id);
    if final_dir.join(RECORD).is_file() {
        return Ok((final_dir, true));
    }
    let staging = parent.join(format!(".staging-{}", crate::ids::uuid_v4()));
    std::fs::create_dir(&staging).map_err(|e| io("cannot create a staging directory", e))?;
    let result = (|| {
        for (name, bytes) in files.iter().copied().chain([(RECORD, serde_json::to_vec_pretty(record).expect("json").as_slice())]) {
            let mut f = std::fs::File::create(staging.join(name))?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        std::fs::File::open(&staging)?.sync_all()?;
        std::fs::rename(&staging, &final_dir)?;
        std::fs::File::open(&parent)?.sync_all()
    })();
    match result {
        Ok(()) => Ok((final_dir, false)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            // Another preparation of the same artifact may have won the rename.
            if final_dir.join(RECORD).is_file() { Ok((final_dir, true)) } else { Err(io("cannot write the preparation", e)) }
        }
    }
}

/// Runs `executor-prepare`.
pub async fn prepare(arguments: &Value, cwd: &str, runtime_dir: &Path, deadline: Instant) -> Result<Value, CommandError> {
    let a = args(arguments)?;
    let home = executor_home(runtime_dir);
    if a.platform == "web" {
        return prepare_web(&a, &home, deadline).await;
    }
    // Every tool this path needs, looked up before anything runs.
    let aapt = tool(cwd, a.aapt, "aaptPath", || on_path("aapt"))?;
    let mut gaps = Vec::new();
    if aapt.is_none() {
        gaps.push(missing("aapt", "reading the instrumentation package's manifest", "apt-get install aapt (or pass aaptPath)"));
    }
    let mut build = None;
    if let Some(dir) = a.project_dir {
        let dir = resolve(cwd, dir);
        if !dir.is_dir() {
            return Err(CommandError::invalid("projectDir", format!("{} is not a directory", dir.display())));
        }
        let gradle = tool(cwd, a.gradle, "gradlePath", || Some(dir.join("gradlew")).filter(|p| is_executable(p)).or_else(|| on_path("gradle")))?;
        let flutter = if a.platform == "flutter" { tool(cwd, a.flutter, "flutterPath", || on_path("flutter"))? } else { None };
        if a.platform == "flutter" && flutter.is_none() {
            gaps.push(missing("flutter", "building the Flutter app and its integration-test package", "install the Flutter SDK (https://docs.flutter.dev/get-started/install) and put `flutter` on PATH, or pass flutterPath"));
        }
        if gradle.is_none() {
            gaps.push(missing("gradle", "assembling the instrumentation package (assembleDebugAndroidTest)", "add a Gradle wrapper (gradlew) to the project, install Gradle, or pass gradlePath"));
        }
        if android_sdk().is_none() {
            gaps.push(missing("android-sdk", "compiling against the Android platform", "install the Android SDK command-line tools with a platform (sdkmanager \"platforms;android-34\" \"build-tools;34.0.0\") and set ANDROID_HOME"));
        }
        build = Some((dir, gradle, flutter));
    }
    if !gaps.is_empty() {
        return Err(refuse_missing(a.platform, gaps));
    }
    let aapt = aapt.expect("checked");
    let (package_path, built) = match build {
        None => (resolve(cwd, a.test_package.expect("checked by args")), None),
        Some((dir, gradle, flutter)) => {
            let gradle = gradle.expect("checked");
            if let Some(flutter) = &flutter {
                let (code, log) = run(flutter, &["build", "apk", "--debug"], Some(&dir), deadline).await?;
                if code != 0 {
                    return Err(CommandError::new("executor_build_failed", format!("`flutter build apk --debug` exited {code}; nothing was prepared")).with_details(json!({"tool": flutter, "exitCode": code, "logTail": tail(&log)})));
                }
            }
            let gradle_dir = if flutter.is_some() && dir.join("android").is_dir() { dir.join("android") } else { dir.clone() };
            let (code, log) = run(&gradle, &["assembleDebugAndroidTest"], Some(&gradle_dir), deadline).await?;
            if code != 0 {
                return Err(CommandError::new("executor_build_failed", format!("`gradle assembleDebugAndroidTest` exited {code}; nothing was prepared")).with_details(json!({"tool": gradle, "exitCode": code, "logTail": tail(&log)})));
            }
            let found = find_test_apk(&dir);
            match found.as_slice() {
                [one] => (one.clone(), Some(json!({"tool": gradle, "projectDir": dir, "logTail": tail(&log)}))),
                [] => return Err(CommandError::new("executor_build_failed", "the build succeeded but produced no androidTest APK (build/outputs/apk/androidTest/debug/*.apk); nothing was prepared").with_details(json!({"logTail": tail(&log)}))),
                many => return Err(CommandError::new("executor_build_failed", "the build produced several androidTest APKs; prepare one with testPackagePath").with_details(json!({"packages": many}))),
            }
        }
    };
    let bytes = read_package(&package_path)?;
    let (code, tree) = run(&aapt, &["dump", "xmltree", &package_path.to_string_lossy(), "AndroidManifest.xml"], None, deadline).await?;
    let Some(instr) = (code == 0).then(|| parse_instrumentation(&tree)).flatten() else {
        return Err(CommandError::new("executor_package_invalid", format!("{} is not an instrumentation package (no <instrumentation> with android:name and android:targetPackage in its manifest); nothing was prepared", package_path.display()))
            .with_field(if built.is_some() { "projectDir" } else { "testPackagePath" })
            .with_details(json!({"aaptExitCode": code, "aaptOutput": tail(&tree)})));
    };
    let sha = crate::digest::sha256_hex(&bytes);
    let id = format!("{}-{}", a.platform, &sha[..16]);
    let component = format!("{}/{}", instr.package, instr.runner);
    let record = json!({
        "schemaVersion": SCHEMA, "preparationId": id, "platform": a.platform,
        "package": {"file": "test.apk", "sha256": sha, "bytes": bytes.len(), "source": package_path},
        "instrumentation": {"package": instr.package, "runner": instr.runner, "component": component, "targetPackage": instr.target_package},
        "build": built, "preparedAtMs": crate::ids::now_ms(),
    });
    let (dir, reused) = publish(&home, a.platform, &id, &[("test.apk", &bytes)], &record)?;
    let apk = dir.join("test.apk");
    let executor = if a.platform == "flutter" { "flutter-executor" } else { "android-executor" };
    Ok(json!({
        "ok": true, "command": "executor-prepare", "platform": a.platform, "preparationId": id, "reused": reused,
        "directory": dir, "package": {"path": apk, "sha256": sha, "bytes": bytes.len()},
        "instrumentation": record["instrumentation"],
        "next": [
            format!("aab install-apk --serial <serial> --apk-path {}", apk.display()),
            format!("aab {executor} --operation open --serial <serial> --package-name {} --instrumentation {component}", instr.target_package),
        ],
    }))
}

fn find_test_apk(dir: &Path) -> Vec<PathBuf> {
    let roots = [dir.join("build/outputs/apk/androidTest/debug"), dir.join("app/build/outputs/apk/androidTest/debug"), dir.join("build/app/outputs/apk/androidTest/debug")];
    let mut out: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| std::fs::read_dir(r).ok())
        .flat_map(|rd| rd.flatten().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "apk"))
        .collect();
    out.sort();
    out
}

async fn prepare_web(a: &Args<'_>, home: &Path, deadline: Instant) -> Result<Value, CommandError> {
    let browser = a.browser.unwrap_or("chromium");
    if browser != "chromium" {
        return Err(CommandError::new("executor_browser_unsupported", format!("{browser} cannot run locally here: web-executor's cdp engine drives Chromium only; open a webdriver session on an endpoint that offers {browser} (web-executor --operation open --engine webdriver --endpoint URL)"))
            .with_field("browser"));
    }
    let chromium = ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|n| on_path(n));
    let driver = on_path("chromedriver");
    let mut gaps = Vec::new();
    if chromium.is_none() {
        gaps.push(missing("chromium", "web-executor's cdp engine (a local headless browser)", "apt-get install chromium"));
    }
    if driver.is_none() {
        gaps.push(missing("chromedriver", "web-executor's webdriver engine against a local endpoint", "apt-get install chromium-driver"));
    }
    if !gaps.is_empty() {
        return Err(refuse_missing("web", gaps));
    }
    let (chromium, driver) = (chromium.expect("checked"), driver.expect("checked"));
    let (c1, browser_version) = run(&chromium, &["--version"], None, deadline).await?;
    let (c2, driver_version) = run(&driver, &["--version"], None, deadline).await?;
    if c1 != 0 || c2 != 0 {
        return Err(CommandError::new("executor_tool_failed", "the browser or its driver does not run (`--version` failed); nothing was prepared")
            .with_details(json!({"chromium": tail(&browser_version), "chromedriver": tail(&driver_version)})));
    }
    // The version line itself (Debian's chromium wrapper may add shell noise on stderr).
    let line = |out: &str, word: &str| out.lines().map(str::trim).find(|l| l.contains(word)).unwrap_or(out.trim()).to_string();
    let (bv, dv) = (line(&browser_version, "Chrom"), line(&driver_version, "ChromeDriver"));
    let major = |s: &str| s.split_whitespace().find_map(|w| w.split('.').next().filter(|m| m.len() >= 2 && m.chars().all(|c| c.is_ascii_digit())).map(str::to_string));
    if major(&bv) != major(&dv) {
        return Err(CommandError::new("executor_browser_mismatch", format!("chromedriver ({dv}) does not match Chromium ({bv}): install matching versions (apt-get install chromium chromium-driver)")));
    }
    let id = format!("web-{}", &crate::digest::sha256_hex(format!("{}\n{bv}\n{}\n{dv}", chromium.display(), driver.display()).as_bytes())[..16]);
    let record = json!({"schemaVersion": SCHEMA, "preparationId": id, "platform": "web", "browser": {"name": "chromium", "path": chromium, "version": bv}, "driver": {"path": driver, "version": dv}, "preparedAtMs": crate::ids::now_ms()});
    let (dir, reused) = publish(home, "web", &id, &[], &record)?;
    Ok(json!({"ok": true, "command": "executor-prepare", "platform": "web", "preparationId": id, "reused": reused, "directory": dir, "browser": record["browser"], "driver": record["driver"],
        "next": ["aab web-executor --operation open --engine cdp --url <url>", "aab web-executor --operation open --engine webdriver --endpoint <url>"]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &str = "N: android=http://schemas.android.com/apk/res/android\n  E: manifest (line=2)\n    A: package=\"com.example.app.test\" (Raw: \"com.example.app.test\")\n    E: uses-sdk (line=3)\n    E: instrumentation (line=4)\n      A: android:name(0x01010003)=\".Runner\" (Raw: \".Runner\")\n      A: android:targetPackage(0x01010021)=\"com.example.app\" (Raw: \"com.example.app\")\n    E: application (line=5)\n      A: android:name(0x01010003)=\"ignored\" (Raw: \"ignored\")\n";

    #[test]
    fn instrumentation_is_read_from_the_manifest_tree() {
        let i = parse_instrumentation(TREE).unwrap();
        assert_eq!(i, Instrumentation { package: "com.example.app.test".into(), runner: "com.example.app.test.Runner".into(), target_package: "com.example.app".into() });
        // An application's android:name is not a runner; no instrumentation → none.
        assert_eq!(parse_instrumentation(&TREE.replace("E: instrumentation", "E: activity")), None);
    }

    #[test]
    fn conflicting_inputs_are_refused_on_their_field() {
        let field = |v: Value| args(&v).err().and_then(|e| e.field).unwrap_or_default();
        assert_eq!(field(json!({"platform": "android"})), "projectDir");
        assert_eq!(field(json!({"platform": "android", "projectDir": "a", "testPackagePath": "b"})), "testPackagePath");
        assert_eq!(field(json!({"platform": "web", "projectDir": "a"})), "projectDir");
        assert_eq!(field(json!({"platform": "android", "testPackagePath": "b", "browser": "chromium"})), "browser");
        assert_eq!(field(json!({"platform": "android", "projectDir": "a", "flutterPath": "f"})), "flutterPath");
        assert!(args(&json!({"platform": "flutter", "projectDir": "a", "flutterPath": "f"})).is_ok());
    }
}
