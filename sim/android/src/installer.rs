//! The package installer (`pm install-create / install-write / install-commit /
//! install-abandon`, `pm install`, `adb install`): sessions with ids, real APK
//! verification with Debian's `aapt dump badging` and `apksigner verify
//! --print-certs` (run by the simulator on the host, against a copy of the
//! staged bytes), the update rules (version downgrade, signing certificate),
//! installer faults and an installer confirmation dialog. A success installs
//! or updates the app in the phone model and writes the APK's bytes to
//! `/data/app/~~…==/<pkg>-…==/base.apk` in the device root (`pm path`).
//! Truth: `package-install {package, versionCode, versionName, sha256,
//! sessionId, outcome}` for every commit outcome; `install` on success.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::device::Device;
use crate::phone::Phone;
use crate::tools::{Ctx, Res};

#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub replace: bool,
    pub downgrade: bool,
    pub grant: bool,
}

#[derive(Clone, Debug)]
pub struct Session {
    pub id: u32,
    pub flags: Flags,
    /// `-S` of install-create.
    pub size: Option<u64>,
    /// Splits written: (name, bytes).
    pub splits: Vec<(String, Vec<u8>)>,
    /// `open`, `committed`, `failed`, `pending-user-action`, `pending` (an odd commit text), `abandoned`, `cancelled`.
    /// A session still pending (not finalised) can be abandoned, like PackageInstaller's.
    pub state: String,
    /// `success`, the failure code, `pending-user-action`, `pending`, `simulator-error`, `abandoned`.
    pub outcome: Option<String>,
    /// What `pm install-commit` printed.
    pub output: Option<String>,
    pub package: Option<String>,
    pub version_code: Option<u64>,
    pub version_name: Option<String>,
    pub sha256: Option<String>,
    pub created_at_ms: u64,
    /// The verified APK waiting for the installer confirmation.
    pub pending: Option<(ApkInfo, Vec<u8>)>,
}

#[derive(Clone, Debug)]
pub struct ApkInfo {
    pub package: String,
    pub version_code: u64,
    pub version_name: String,
    pub label: Option<String>,
    pub permissions: Vec<String>,
    pub launchable: Option<String>,
    /// SHA-256 digests of the signer certificates (apksigner).
    pub certs: Vec<String>,
    pub sha256: String,
    /// `<instrumentation>` elements of the manifest (`aapt dump xmltree`).
    pub instrumentations: Vec<crate::executor::Instrumentation>,
}

/// Runtime ("dangerous") permissions; any other requested permission is an install-time one.
pub const DANGEROUS: &[&str] = &[
    "android.permission.CAMERA", "android.permission.RECORD_AUDIO", "android.permission.ACCESS_FINE_LOCATION", "android.permission.ACCESS_COARSE_LOCATION",
    "android.permission.ACCESS_BACKGROUND_LOCATION", "android.permission.READ_CONTACTS", "android.permission.WRITE_CONTACTS", "android.permission.GET_ACCOUNTS",
    "android.permission.READ_CALENDAR", "android.permission.WRITE_CALENDAR", "android.permission.READ_EXTERNAL_STORAGE", "android.permission.WRITE_EXTERNAL_STORAGE",
    "android.permission.READ_MEDIA_IMAGES", "android.permission.READ_MEDIA_VIDEO", "android.permission.READ_MEDIA_AUDIO", "android.permission.POST_NOTIFICATIONS",
    "android.permission.READ_PHONE_STATE", "android.permission.CALL_PHONE", "android.permission.READ_CALL_LOG", "android.permission.WRITE_CALL_LOG",
    "android.permission.SEND_SMS", "android.permission.RECEIVE_SMS", "android.permission.READ_SMS", "android.permission.BODY_SENSORS",
    "android.permission.ACTIVITY_RECOGNITION", "android.permission.BLUETOOTH_CONNECT", "android.permission.BLUETOOTH_SCAN", "android.permission.NEARBY_WIFI_DEVICES",
];

pub const INSTALLER_PKG: &str = "com.google.android.packageinstaller";
pub const INSTALLER_ACTIVITY: &str = "com.android.packageinstaller.PackageInstallerActivity";

use crate::device::sha256_hex;

/// PackageInstaller's public status for a legacy install code: the exit code of `pm install-commit`.
pub fn status_of(code: &str) -> i32 {
    match code {
        c if c.starts_with("INSTALL_PARSE_FAILED_") => 4,
        "INSTALL_FAILED_ALREADY_EXISTS" | "INSTALL_FAILED_DUPLICATE_PACKAGE" | "INSTALL_FAILED_UPDATE_INCOMPATIBLE" | "INSTALL_FAILED_SHARED_USER_INCOMPATIBLE"
        | "INSTALL_FAILED_REPLACE_COULDNT_DELETE" | "INSTALL_FAILED_CONFLICTING_PROVIDER" | "INSTALL_FAILED_DUPLICATE_PERMISSION" => 5,
        "INSTALL_FAILED_INVALID_APK" | "INSTALL_FAILED_INVALID_URI" | "INSTALL_FAILED_DEXOPT" | "INSTALL_FAILED_TEST_ONLY" | "INSTALL_FAILED_PACKAGE_CHANGED"
        | "INSTALL_FAILED_UID_CHANGED" | "INSTALL_FAILED_VERSION_DOWNGRADE" | "INSTALL_FAILED_PERMISSION_MODEL_DOWNGRADE" => 4,
        "INSTALL_FAILED_INSUFFICIENT_STORAGE" | "INSTALL_FAILED_CONTAINER_ERROR" | "INSTALL_FAILED_INVALID_INSTALL_LOCATION" | "INSTALL_FAILED_MEDIA_UNAVAILABLE" => 6,
        "INSTALL_FAILED_NO_SHARED_USER" | "INSTALL_FAILED_MISSING_SHARED_LIBRARY" | "INSTALL_FAILED_OLDER_SDK" | "INSTALL_FAILED_NEWER_SDK" | "INSTALL_FAILED_CPU_ABI_INCOMPATIBLE"
        | "INSTALL_FAILED_MISSING_FEATURE" | "INSTALL_FAILED_USER_RESTRICTED" | "INSTALL_FAILED_NO_MATCHING_ABIS" => 7,
        "INSTALL_FAILED_VERIFICATION_TIMEOUT" | "INSTALL_FAILED_VERIFICATION_FAILURE" | "INSTALL_FAILED_ABORTED" => 3,
        _ => 1,
    }
}

/// A commit's failure: `Failure [CODE: message]` on stdout, exit = the public status.
fn failure(code: &str, msg: &str) -> (String, String) {
    (code.to_string(), msg.to_string())
}

fn exception(sub: &str, e: &str) -> Res {
    Res::fail(255, format!("Exception occurred while executing '{sub}':\n{e}\n\tat com.android.server.pm.PackageManagerShellCommand.onCommand(PackageManagerShellCommand.java:219)\n"))
}

fn no_session(sub: &str, id: u32) -> Res {
    exception(sub, &format!("java.lang.SecurityException: Caller has no access to session {id}"))
}

fn session_arg(sub: &str, a: Option<&String>) -> Result<u32, Res> {
    match a {
        None => Err(exception(sub, "java.lang.NumberFormatException: null")),
        Some(s) => s.parse::<u32>().map_err(|_| exception(sub, &format!("java.lang.NumberFormatException: For input string: \"{s}\""))),
    }
}

fn positional(args: &[String], with_value: &[&str]) -> Vec<String> {
    let mut v = vec![];
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
            continue;
        }
        if with_value.contains(&a.as_str()) {
            skip = true;
            continue;
        }
        if !a.starts_with('-') || a == "-" {
            v.push(a.clone());
        }
    }
    v
}

/// `pm install-create [-r] [-d] [-g] [-t] [-S BYTES] [--user U] [-i PKG] [-p PKG] …`.
pub fn create(dev: &Arc<Device>, args: &[String]) -> Res {
    let mut flags = Flags::default();
    let mut size = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-r" => flags.replace = true,
            "-d" => flags.downgrade = true,
            "-g" => flags.grant = true,
            "-t" | "-f" | "--dont-kill" | "--full" | "--instant" | "--staged" | "--restrict-permissions" | "--force-queryable" | "--no-streaming" | "--bypass-low-target-sdk-block" => {}
            "-S" => match it.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) => size = Some(n),
                None => return exception("install-create", "java.lang.IllegalArgumentException: Size must be positive"),
            },
            "--user" | "-i" | "-p" | "--install-location" | "--install-reason" | "--originating-uri" | "--referrer" | "--abi" | "--pkg" => {
                if it.next().is_none() {
                    return exception("install-create", &format!("java.lang.IllegalArgumentException: Missing argument for {a}"));
                }
            }
            o => return exception("install-create", &format!("java.lang.IllegalArgumentException: Unknown option {o}")),
        }
    }
    let mut ph = dev.phone.lock().unwrap();
    ph.next_session += 1 + (crate::device::now_ms() % 97) as u32;
    let id = ph.next_session;
    ph.install_sessions.insert(
        id,
        Session { id, flags, size, splits: vec![], state: "open".into(), outcome: None, output: None, package: None, version_code: None, version_name: None, sha256: None, created_at_ms: crate::device::now_ms(), pending: None },
    );
    ph.log(1000, 'I', "PackageInstaller", &format!("Created session {id}"));
    drop(ph);
    dev.record("install-session", json!({ "sessionId": id, "state": "open", "sizeBytes": size }));
    Res::ok(format!("Success: created install session [{id}]\n"))
}

/// `pm install-write [-S BYTES] SESSION_ID SPLIT_NAME PATH`: reads PATH from the device filesystem.
pub fn write(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    let size = args.iter().position(|a| a == "-S").and_then(|i| args.get(i + 1)).and_then(|s| s.parse::<u64>().ok());
    let pos = positional(args, &["-S", "--user"]);
    let id = match session_arg("install-write", pos.first()) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let Some(name) = pos.get(1) else { return Res::fail(1, "Error: must specify a split name\n") };
    let path = match pos.get(2) {
        None if size.is_none() => return Res::fail(1, "Error: must specify an APK size\n"),
        None => "-".to_string(),
        Some(p) => p.clone(),
    };
    if path == "-" {
        return Res::fail(1, "Error: install-write from stdin is not supported by aab-android-sim; write a device path\n");
    }
    if dev.phone.lock().unwrap().install_sessions.get(&id).is_none_or(|s| s.state != "open") {
        return no_session("install-write", id);
    }
    let abs = if path.starts_with('/') { path.clone() } else { format!("{}/{path}", ctx.cwd.trim_end_matches('/')) };
    let bytes = match std::fs::read(dev.host_path(&abs)) {
        Ok(b) => b,
        Err(_) => return Res::fail(1, format!("Error: Unable to open file: {path}\nConsider using a file under /data/local/tmp/\n")),
    };
    if let Some(n) = size
        && n != bytes.len() as u64 {
            return Res::fail(1, format!("Error: -S {n} does not match the size of {path} ({} bytes)\n", bytes.len()));
        }
    if bytes.is_empty() {
        return Res::fail(1, "Error: must specify an APK size\n");
    }
    let n = bytes.len();
    let mut ph = dev.phone.lock().unwrap();
    let Some(s) = ph.install_sessions.get_mut(&id) else { return no_session("install-write", id) };
    s.splits.retain(|(nm, _)| nm != name);
    s.splits.push((name.clone(), bytes));
    drop(ph);
    dev.record("install-session", json!({ "sessionId": id, "state": "open", "split": name, "bytes": n }));
    Res::ok(format!("Success: streamed {n} bytes\n"))
}

/// `pm install-abandon SESSION_ID`.
pub fn abandon(dev: &Arc<Device>, args: &[String]) -> Res {
    let pos = positional(args, &["--user"]);
    let id = match session_arg("install-abandon", pos.first()) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let mut ph = dev.phone.lock().unwrap();
    let Some(s) = ph.install_sessions.get_mut(&id).filter(|s| ["open", "pending-user-action", "pending"].contains(&s.state.as_str())) else { return no_session("install-abandon", id) };
    let was_pending = s.state == "pending-user-action";
    s.state = "abandoned".into();
    s.outcome = Some("abandoned".into());
    s.pending = None;
    s.splits.clear();
    if was_pending && ph.system_dialog.as_ref().is_some_and(|d| d.buttons.iter().any(|b| matches!(&b.action, Some(crate::system_dialog::DialogAction::Install { session, .. }) if *session == id))) {
        ph.system_dialog = None;
    }
    ph.log(1000, 'I', "PackageInstaller", &format!("Session {id} abandoned"));
    drop(ph);
    dev.record("install-session", json!({ "sessionId": id, "state": "abandoned" }));
    Res::ok("Success\n")
}

fn tool(var: &str, default: &str) -> String {
    std::env::var(var).ok().filter(|s| !s.is_empty()).unwrap_or_else(|| default.to_string())
}

fn quoted(line: &str, key: &str) -> Option<String> {
    let i = line.find(&format!(" {key}='")).map(|i| i + 1).or_else(|| line.strip_prefix(&format!("{key}='")).map(|_| 0))?;
    let rest = &line[i + key.len() + 2..];
    Some(rest[..rest.find('\'')?].to_string())
}

/// Parses and verifies an APK with the real tools. Err: Ok(failure (code, msg)) or Err(simulator error).
pub fn verify(apk: &[u8], tmp_name: &str) -> Result<Result<ApkInfo, (String, String)>, String> {
    let dir = std::env::temp_dir().join(format!("aab-sim-apk-{}", crate::device::random_hex(12)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("temp dir: {e}"))?;
    let file = dir.join("base.apk");
    let r = (|| {
        std::fs::write(&file, apk).map_err(|e| format!("temp file: {e}"))?;
        let aapt = tool("AAB_SIM_AAPT", "aapt");
        let out = std::process::Command::new(&aapt).args(["dump", "badging"]).arg(&file).output().map_err(|e| format!("cannot run aapt ({aapt}; set AAB_SIM_AAPT): {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let head = text.lines().find(|l| l.starts_with("package: ")).map(str::to_string);
        let Some(head) = head.filter(|_| out.status.success()) else {
            return Ok(Err(failure("INSTALL_PARSE_FAILED_NOT_APK", &format!("Failed to parse {tmp_name}: Failed to load asset path {tmp_name}"))));
        };
        let (Some(package), Some(vc)) = (quoted(&head, "name"), quoted(&head, "versionCode")) else {
            return Ok(Err(failure("INSTALL_PARSE_FAILED_MANIFEST_MALFORMED", &format!("Failed to parse {tmp_name}: <manifest> has no package or versionCode"))));
        };
        let version_code = vc.parse::<u64>().unwrap_or(0);
        let version_name = quoted(&head, "versionName").unwrap_or_default();
        let label = text.lines().find(|l| l.starts_with("application-label:")).and_then(|l| l.split_once(':').map(|(_, v)| v.trim().trim_matches('\'').to_string())).filter(|s| !s.is_empty());
        let permissions = text.lines().filter(|l| l.starts_with("uses-permission:")).filter_map(|l| quoted(l.trim_start_matches("uses-permission:").trim(), "name")).collect::<Vec<_>>();
        let launchable = text.lines().find(|l| l.starts_with("launchable-activity:")).and_then(|l| quoted(l.trim_start_matches("launchable-activity:").trim(), "name"));
        let out = std::process::Command::new(&aapt).args(["dump", "xmltree"]).arg(&file).arg("AndroidManifest.xml").output().map_err(|e| format!("cannot run aapt ({aapt}; set AAB_SIM_AAPT): {e}"))?;
        let instrumentations = instrumentations_of(&package, &String::from_utf8_lossy(&out.stdout));
        let signer = tool("AAB_SIM_APKSIGNER", "apksigner");
        let out = std::process::Command::new(&signer).args(["verify", "--print-certs"]).arg(&file).output().map_err(|e| format!("cannot run apksigner ({signer}; set AAB_SIM_APKSIGNER): {e}"))?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let certs: Vec<String> = text.lines().filter(|l| l.starts_with("Signer #") && l.contains("certificate SHA-256 digest:")).filter_map(|l| l.rsplit(' ').next().map(str::to_string)).collect();
        if !out.status.success() || certs.is_empty() {
            let why = text.lines().find(|l| l.starts_with("ERROR")).unwrap_or("no signature").to_string();
            return Ok(Err(failure("INSTALL_PARSE_FAILED_NO_CERTIFICATES", &format!("Failed to collect certificates from {tmp_name}: {why}"))));
        }
        Ok(Ok(ApkInfo { package, version_code, version_name, label, permissions, launchable, certs, sha256: sha256_hex(apk), instrumentations }))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// The value of one `A: android:<name>(0x…)="value" (Raw: …)` line of `aapt dump xmltree`.
fn xml_attr(line: &str, name: &str) -> Option<String> {
    let rest = line.trim().strip_prefix(&format!("A: android:{name}("))?;
    let value = rest.split_once(")=\"")?.1;
    Some(value[..value.find('"')?].to_string())
}

/// The manifest's `<instrumentation android:name android:targetPackage android:label>` elements,
/// names resolved against the package as the manifest parser does.
pub fn instrumentations_of(package: &str, xmltree: &str) -> Vec<crate::executor::Instrumentation> {
    let mut out = vec![];
    let mut cur: Option<(Option<String>, Option<String>, Option<String>)> = None;
    let flush = |c: Option<(Option<String>, Option<String>, Option<String>)>, out: &mut Vec<crate::executor::Instrumentation>| {
        if let Some((Some(name), Some(target), label)) = c {
            out.push(crate::executor::Instrumentation { name: crate::executor::resolve_class(package, &name), target, label });
        }
    };
    for line in xmltree.lines() {
        let t = line.trim();
        if t.starts_with("E: ") {
            flush(cur.take(), &mut out);
            if t.starts_with("E: instrumentation ") || t == "E: instrumentation" {
                cur = Some((None, None, None));
            }
        } else if let Some(c) = cur.as_mut() {
            if let Some(v) = xml_attr(t, "name") {
                c.0 = Some(v);
            } else if let Some(v) = xml_attr(t, "targetPackage") {
                c.1 = Some(v);
            } else if let Some(v) = xml_attr(t, "label") {
                c.2 = Some(v);
            }
        }
    }
    flush(cur.take(), &mut out);
    out
}

/// The bytes a session installs: the split named `base`/`base.apk`, else the first.
fn base_split(s: &Session) -> Option<Vec<u8>> {
    s.splits.iter().find(|(n, _)| n == "base" || n == "base.apk").or(s.splits.first()).map(|(_, b)| b.clone())
}

/// Installs or updates a verified APK in the phone model. Returns (app index, whether its process must stop).
fn apply(dev: &Arc<Device>, ph: &mut Phone, info: &ApkInfo, bytes: &[u8], flags: &Flags) -> Result<(usize, bool), (String, String)> {
    let cert = info.certs.join(",");
    let existing = ph.apps.iter().position(|a| a.package == info.package);
    if let Some(i) = existing.filter(|&i| ph.apps[i].installed) {
        let a = &ph.apps[i];
        let cur = a.spec.version_code.unwrap_or(1);
        if info.version_code < cur && !flags.downgrade {
            return Err(failure("INSTALL_FAILED_VERSION_DOWNGRADE", &format!("Downgrade detected: Update version code {} is older than current {cur}", info.version_code)));
        }
        if let Some(c) = a.cert.as_ref().or(a.spec.signing_cert_sha256.as_ref())
            && !c.eq_ignore_ascii_case(&cert) {
                return Err(failure("INSTALL_FAILED_UPDATE_INCOMPATIBLE", &format!("Package {} signatures do not match previously installed version; ignoring!", info.package)));
            }
    }
    let dir = format!("/data/app/~~{}==/{}-{}==", crate::device::random_hex(22), info.package, crate::device::random_hex(22));
    let host_dir = dev.host_path(&dir);
    std::fs::create_dir_all(&host_dir).map_err(|e| failure("INSTALL_FAILED_INSUFFICIENT_STORAGE", &e.to_string()))?;
    let corrupt = std::mem::take(&mut dev.faults.lock().unwrap().install_corrupt_installed_bytes);
    let mut stored = bytes.to_vec();
    if corrupt && let Some(b) = stored.get_mut(bytes.len() / 2) {
        *b ^= 0x5a;
        dev.record("fault", json!({ "kind": "install-corrupt-installed-bytes", "package": info.package }));
    }
    std::fs::write(host_dir.join("base.apk"), &stored).map_err(|e| failure("INSTALL_FAILED_INSUFFICIENT_STORAGE", &e.to_string()))?;
    let n = ph.apps.len();
    let i = match existing {
        Some(i) => i,
        None => {
            let spec = crate::scenario::AppSpec { package: info.package.clone(), app_id: Some(10100 + n as u32), ..Default::default() };
            ph.apps.push(crate::phone::App::new(spec, 10100 + n as u32));
            n
        }
    };
    let app = &mut ph.apps[i];
    if let Some(old) = app.code_path.take() {
        // The previous version's directory goes (`/data/app/~~X==/pkg-Y==/base.apk` → `~~X==`).
        if let Some(top) = std::path::Path::new(&old).parent().and_then(|p| p.parent()) {
            let _ = std::fs::remove_dir_all(dev.host_path(&top.to_string_lossy()));
        }
    }
    let was_installed = app.installed;
    app.installed = true;
    app.code_path = Some(format!("{dir}/base.apk"));
    app.cert = Some(cert);
    app.apk_sha256 = Some(info.sha256.clone());
    app.instrumentations = info.instrumentations.clone();
    app.spec.version_code = Some(info.version_code);
    app.spec.version_name = Some(info.version_name.clone());
    if let Some(l) = &info.launchable
        && !app.spec.activities.iter().any(|a| app.activity_class(a) == *l) {
            app.spec.activities.push(l.clone());
        }
    for p in &info.permissions {
        if DANGEROUS.contains(&p.as_str()) {
            let g = app.permissions.get(p).copied().unwrap_or(false) || flags.grant;
            app.permissions.insert(p.clone(), g);
        } else if !app.spec.install_permissions.contains(p) {
            app.spec.install_permissions.push(p.clone());
        }
    }
    if !was_installed {
        app.perm_flags.clear();
    }
    let stop = app.process.is_some();
    ph.log(1000, 'I', "PackageManager", &format!("{} {} versionCode={}", if was_installed { "Updated" } else { "Installed" }, info.package, info.version_code));
    Ok((i, stop))
}

fn record(dev: &Arc<Device>, s: &Session) {
    dev.record("package-install", json!({ "package": s.package, "versionCode": s.version_code, "versionName": s.version_name, "sha256": s.sha256, "sessionId": s.id, "outcome": s.outcome, "state": s.state }));
}

/// Finishes a session with a final outcome ("success" or a failure code) and its printed text.
fn settle(dev: &Arc<Device>, id: u32, outcome: &str, state: &str, output: &str) {
    let s = {
        let mut ph = dev.phone.lock().unwrap();
        let Some(s) = ph.install_sessions.get_mut(&id) else { return };
        s.outcome = Some(outcome.into());
        s.state = state.into();
        s.output = Some(output.into());
        s.splits.clear();
        s.clone()
    };
    record(dev, &s);
}

fn stop_later(dev: &Arc<Device>, i: usize) {
    // Called under the phone lock: stop the process once it is released (on the runtime: the
    // WebView teardown spawns tasks).
    let dev = dev.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(h) => drop(h.spawn_blocking(move || crate::lifecycle::stop_process(&dev, i, "installPackageLI"))),
        Err(_) => drop(std::thread::spawn(move || crate::lifecycle::stop_process(&dev, i, "installPackageLI"))),
    }
}

/// `pm install-commit SESSION_ID` (async: the verification runs the real tools).
pub async fn commit(ctx: &Ctx, args: &[String]) -> Res {
    let dev = &ctx.dev;
    let pos = positional(args, &["--user"]);
    let id = match session_arg("install-commit", pos.first()) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let session = {
        let mut ph = dev.phone.lock().unwrap();
        match ph.install_sessions.get_mut(&id).filter(|s| s.state == "open") {
            Some(s) => {
                s.state = "committed".into();
                s.clone()
            }
            None => return no_session("install-commit", id),
        }
    };
    commit_session(dev, session).await
}

async fn commit_session(dev: &Arc<Device>, session: Session) -> Res {
    let id = session.id;
    let tmp = format!("/data/app/vmdl{id}.tmp/base.apk");
    // Faults first: a failure code, or an odd text that leaves the outcome pending.
    let (fail_next, mut odd, odd_code, odd_installs) = {
        let mut f = dev.faults.lock().unwrap();
        let fail = f.install_fail_next.take();
        let odd = if fail.is_none() { f.install_commit_text.take() } else { None };
        let installs = odd.is_some() && std::mem::take(&mut f.install_commit_text_installs);
        (fail, odd, f.install_commit_exit_code, installs)
    };
    // An OEM text over a real install: verified and applied below, then the text.
    let odd_after = if odd_installs { odd.take() } else { None };
    if let Some(code) = fail_next {
        dev.record("fault", json!({ "kind": "install-fail-next", "code": code, "sessionId": id }));
        let text = format!("Failure [{code}: simulated by aab-android-sim]\n");
        settle(dev, id, &code, "failed", &text);
        return Res::out_fail(status_of(&code), text);
    }
    if let Some(t) = odd {
        dev.record("fault", json!({ "kind": "install-commit-text", "text": t, "sessionId": id }));
        let text = if t.ends_with('\n') { t.clone() } else { format!("{t}\n") };
        settle(dev, id, "pending", "pending", &text);
        return Res::out_fail(odd_code, text);
    }
    let Some(bytes) = base_split(&session) else {
        let text = format!("Failure [INSTALL_FAILED_INVALID_APK: Session: {id}. No packages staged]\n");
        settle(dev, id, "INSTALL_FAILED_INVALID_APK", "failed", &text);
        return Res::out_fail(4, text);
    };
    if bytes.windows(16).any(|w| w == b"aab-sim-package:") {
        let r = crate::tools::install_marked(dev, &bytes);
        let out = String::from_utf8_lossy(&r.out).to_string();
        settle(dev, id, if r.code == 0 { "success" } else { "INSTALL_PARSE_FAILED_NOT_APK" }, if r.code == 0 { "committed" } else { "failed" }, &out);
        return r;
    }
    let sha = sha256_hex(&bytes);
    {
        let mut ph = dev.phone.lock().unwrap();
        if let Some(s) = ph.install_sessions.get_mut(&id) {
            s.sha256 = Some(sha.clone());
        }
    }
    let b2 = bytes.clone();
    let tmp2 = tmp.clone();
    let verified = tokio::task::spawn_blocking(move || verify(&b2, &tmp2)).await.unwrap_or_else(|e| Err(e.to_string()));
    let info = match verified {
        Err(e) => {
            let text = format!("aab-android-sim: cannot verify the APK: {e}\n");
            settle(dev, id, "simulator-error", "failed", "");
            return Res::fail(1, text);
        }
        Ok(Err((code, msg))) => {
            let text = format!("Failure [{code}: {msg}]\n");
            settle(dev, id, &code, "failed", &text);
            return Res::out_fail(status_of(&code), text);
        }
        Ok(Ok(info)) => info,
    };
    {
        let mut ph = dev.phone.lock().unwrap();
        if let Some(s) = ph.install_sessions.get_mut(&id) {
            s.package = Some(info.package.clone());
            s.version_code = Some(info.version_code);
            s.version_name = Some(info.version_name.clone());
        }
    }
    // The installer confirmation: the commit returns at once, the install waits for the dialog.
    if crate::faults::Faults::take(&mut dev.faults.lock().unwrap().install_pending_user_action) {
        let text = "Failure [null]\n".to_string();
        let s = {
            let mut ph = dev.phone.lock().unwrap();
            let update = ph.app_index(&info.package).is_some();
            let name = info.label.clone().unwrap_or_else(|| info.package.clone());
            let dialog = crate::system_dialog::SystemDialog {
                package: INSTALLER_PKG.into(),
                title: if update { "Do you want to update this app?".into() } else { "Do you want to install this app?".into() },
                message: Some(name),
                buttons: vec![
                    crate::system_dialog::DialogButton { text: "Cancel".into(), resource_id: Some("button2".into()), permission: None, action: Some(crate::system_dialog::DialogAction::Install { session: id, accept: false }) },
                    crate::system_dialog::DialogButton { text: if update { "Update".into() } else { "Install".into() }, resource_id: Some("button1".into()), permission: None, action: Some(crate::system_dialog::DialogAction::Install { session: id, accept: true }) },
                ],
                window_id: 0,
                activity: Some(format!("{INSTALLER_PKG}/{INSTALLER_ACTIVITY}")),
            };
            crate::system_dialog::show(&mut ph, dialog);
            let s = ph.install_sessions.get_mut(&id).unwrap();
            s.state = "pending-user-action".into();
            s.outcome = Some("pending-user-action".into());
            s.output = Some(text.clone());
            s.pending = Some((info, bytes));
            s.clone()
        };
        dev.record("system-dialog", json!({ "package": INSTALLER_PKG, "title": "install confirmation", "sessionId": id }));
        record(dev, &s);
        return Res::out_fail(255, text);
    }
    let flags = session.flags.clone();
    let r = {
        let mut ph = dev.phone.lock().unwrap();
        apply(dev, &mut ph, &info, &bytes, &flags)
    };
    match r {
        Ok((i, stop)) => {
            if stop {
                crate::lifecycle::stop_process(dev, i, "installPackageLI");
            }
            if let Some(t) = odd_after {
                dev.record("fault", json!({ "kind": "install-commit-text", "text": t, "sessionId": id, "installed": true }));
                let text = if t.ends_with('\n') { t.clone() } else { format!("{t}\n") };
                settle(dev, id, "success", "committed", &text);
                dev.record("install", json!({ "package": info.package, "sha256": info.sha256, "bytes": bytes.len(), "versionCode": info.version_code, "sessionId": id }));
                return Res::out_fail(odd_code, text);
            }
            settle(dev, id, "success", "committed", "Success\n");
            dev.record("install", json!({ "package": info.package, "sha256": info.sha256, "bytes": bytes.len(), "versionCode": info.version_code, "sessionId": id }));
            Res::ok("Success\n")
        }
        Err((code, msg)) => {
            let text = format!("Failure [{code}: {msg}]\n");
            settle(dev, id, &code, "failed", &text);
            Res::out_fail(status_of(&code), text)
        }
    }
}

/// `pm install PATH` / `adb install` (abb_exec): a session created and committed at once.
pub async fn install_bytes(dev: &Arc<Device>, args: &[String], apk: Vec<u8>) -> Res {
    let mut flags = Flags::default();
    for a in args {
        match a.as_str() {
            "-r" => flags.replace = true,
            "-d" => flags.downgrade = true,
            "-g" => flags.grant = true,
            _ => {}
        }
    }
    let id = {
        let mut ph = dev.phone.lock().unwrap();
        ph.next_session += 1 + (crate::device::now_ms() % 97) as u32;
        let id = ph.next_session;
        ph.install_sessions.insert(
            id,
            Session { id, flags, size: Some(apk.len() as u64), splits: vec![("base.apk".into(), apk)], state: "committed".into(), outcome: None, output: None, package: None, version_code: None, version_name: None, sha256: None, created_at_ms: crate::device::now_ms(), pending: None },
        );
        id
    };
    let s = dev.phone.lock().unwrap().install_sessions.get(&id).cloned().unwrap();
    commit_session(dev, s).await
}

/// A press on the installer confirmation's Install (accept) or Cancel button (under the phone lock).
pub fn answer(dev: &Arc<Device>, ph: &mut Phone, session: u32, accept: bool) -> Value {
    let Some(s) = ph.install_sessions.get_mut(&session).filter(|s| s.state == "pending-user-action") else { return json!({ "sessionId": session, "outcome": null }) };
    let Some((info, bytes)) = s.pending.take() else { return json!({ "sessionId": session, "outcome": null }) };
    let flags = s.flags.clone();
    let (outcome, state) = if !accept {
        ("INSTALL_FAILED_ABORTED".to_string(), "cancelled")
    } else {
        match apply(dev, ph, &info, &bytes, &flags) {
            Ok((i, stop)) => {
                if stop {
                    stop_later(dev, i);
                }
                dev.record("install", json!({ "package": info.package, "sha256": info.sha256, "bytes": bytes.len(), "versionCode": info.version_code, "sessionId": session }));
                ("success".to_string(), "committed")
            }
            Err((code, _)) => (code, "failed"),
        }
    };
    let s = ph.install_sessions.get_mut(&session).unwrap();
    s.outcome = Some(outcome.clone());
    s.state = state.into();
    s.splits.clear();
    let s = s.clone();
    record(dev, &s);
    json!({ "sessionId": session, "outcome": outcome })
}

/// Control `installs`: every session since boot with its state and outcome (ground truth).
pub fn control(dev: &Arc<Device>) -> Value {
    let ph = dev.phone.lock().unwrap();
    let items: Vec<Value> = ph
        .install_sessions
        .values()
        .map(|s| {
            json!({
                "sessionId": s.id, "state": s.state, "outcome": s.outcome, "output": s.output, "sizeBytes": s.size,
                "flags": { "replace": s.flags.replace, "downgrade": s.flags.downgrade, "grant": s.flags.grant },
                "splits": s.splits.iter().map(|(n, b)| json!({ "name": n, "bytes": b.len() })).collect::<Vec<_>>(),
                "package": s.package, "versionCode": s.version_code, "versionName": s.version_name, "sha256": s.sha256, "createdAtMs": s.created_at_ms,
            })
        })
        .collect();
    let apps: Vec<Value> = ph.apps.iter().filter(|a| a.code_path.is_some()).map(|a| json!({ "package": a.package, "installed": a.installed, "versionCode": a.spec.version_code, "versionName": a.spec.version_name, "codePath": a.code_path, "sha256": a.apk_sha256, "cert": a.cert })).collect();
    json!({ "ok": true, "sessions": items, "apps": apps })
}
