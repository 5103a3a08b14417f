//! install-apk's device work (aab-protocols §2.5): inspecting the frozen APK with
//! the Android SDK tools (`aapt dump badging`, `apksigner verify --print-certs`),
//! staging those bytes under the install root, the install script the shell worker
//! runs once (`aab.android-install-execution/v1`: re-hash, `pm install-create`,
//! `install-write`, `install-commit`), and turning the phone's receipt into an
//! outcome. Only the exact `Success` (then an independent `pm path` + `sha256sum`
//! of the installed bytes) completes; only `Failure [INSTALL_FAILED_…]` /
//! `Failure [INSTALL_PARSE_FAILED_…]` fails; anything else stays unresolved
//! until the installed bytes prove the install or the session is abandoned.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aab_plugin_api::ProviderError;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::adb::Deadline;
use crate::adb::device::{Device, quote};

pub const EXECUTION_SCHEMA: &str = "aab.android-install-execution/v1";
pub const ROOT: &str = "/data/local/tmp/ai-app-bridge-install/v1";
/// Most staged installs the phone keeps.
pub const MAX_RETAINED: usize = 64;
/// Largest APK accepted (bounded read).
pub const MAX_APK_BYTES: u64 = 1024 * 1024 * 1024;
/// FactStore stream of settled install outcomes (key: the install's action id).
pub const OUTCOME_STREAM: &str = "android.installs";

pub mod codes {
    pub const APK_UNREADABLE: &str = "apk_unreadable";
    pub const APK_INVALID: &str = "apk_invalid";
    pub const APK_SIGNATURE_INVALID: &str = "apk_signature_invalid";
    pub const APK_PACKAGE_MISMATCH: &str = "apk_package_mismatch";
    pub const TOOL_UNAVAILABLE: &str = "android_sdk_tool_unavailable";
    pub const STORE_FULL: &str = "install_execution_store_full";
    pub const STAGING_FAILED: &str = "install_staging_failed";
    pub const ARTIFACT_MISMATCH: &str = "install_artifact_mismatch";
    pub const CREATE_FAILED: &str = "install_create_failed";
    pub const WRITE_FAILED: &str = "install_write_failed";
    pub const FAILED: &str = "install_failed";
    pub const VERIFICATION_FAILED: &str = "install_verification_failed";
    pub const NOT_ADMITTED: &str = "install_not_admitted";
    pub const NOT_FOUND: &str = "install_not_found";
    pub const ABANDONED: &str = "install_abandoned";
    pub const RUNNING: &str = "install_running";
}

fn refuse(code: &str, field: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::new(code, message).with_field(field).not_dispatched()
}

/// What the SDK tools say of the APK.
#[derive(Clone, Debug)]
pub struct Inspected {
    pub bytes: Vec<u8>,
    pub sha256: String,
    pub package: String,
    pub version_code: u64,
    pub version_name: String,
    /// SHA-256 digests of the signer certificates.
    pub signers: Vec<String>,
    pub scheme_versions: Vec<String>,
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `explicit`, else `$ANDROID_SDK_ROOT/build-tools/<newest>/<name>`, else `<name>`
/// on PATH (Debian's packages install both there).
pub fn tool(explicit: Option<&str>, name: &str) -> PathBuf {
    if let Some(p) = explicit {
        return PathBuf::from(p);
    }
    if let Some(root) = std::env::var_os("ANDROID_SDK_ROOT").or_else(|| std::env::var_os("ANDROID_HOME")) {
        let dir = Path::new(&root).join("build-tools");
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut versions: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path().join(name)).filter(|p| p.is_file()).collect();
            versions.sort();
            if let Some(p) = versions.pop() {
                return p;
            }
        }
    }
    PathBuf::from(name)
}

/// Read the APK (bounded), before any device access.
pub fn read_apk(path: &Path) -> Result<Vec<u8>, ProviderError> {
    let mut buf = Vec::new();
    let f = std::fs::File::open(path).map_err(|e| refuse(codes::APK_UNREADABLE, "apkPath", format!("cannot open {}: {e}", path.display())))?;
    f.take(MAX_APK_BYTES + 1).read_to_end(&mut buf).map_err(|e| refuse(codes::APK_UNREADABLE, "apkPath", format!("cannot read {}: {e}", path.display())))?;
    if buf.len() as u64 > MAX_APK_BYTES {
        return Err(refuse(codes::APK_UNREADABLE, "apkPath", format!("{} is larger than {MAX_APK_BYTES} bytes", path.display())));
    }
    if buf.len() < 4 || &buf[..4] != b"PK\x03\x04" {
        return Err(refuse(codes::APK_INVALID, "apkPath", format!("{} is not a zip archive (an APK starts with PK\\3\\4)", path.display())));
    }
    Ok(buf)
}

async fn run_tool(program: &Path, args: &[&str], field: &str, timeout: Duration) -> Result<(i32, String, String), ProviderError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).stdin(std::process::Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(timeout, cmd.output())
        .await
        .map_err(|_| refuse(codes::TOOL_UNAVAILABLE, field, format!("{} did not finish within {} ms", program.display(), timeout.as_millis())))?
        .map_err(|e| refuse(codes::TOOL_UNAVAILABLE, field, format!("cannot run {}: {e} (install the Android SDK build tools, or pass {field})", program.display())))?;
    let cut = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(256 * 1024)]).into_owned();
    Ok((out.status.code().unwrap_or(-1), cut(&out.stdout), cut(&out.stderr)))
}

fn quoted(line: &str, key: &str) -> Option<String> {
    let at = line.find(&format!("{key}='"))? + key.len() + 2;
    let rest = &line[at..];
    Some(rest[..rest.find('\'')?].to_string())
}

/// Inspections already made, by APK SHA-256 and tool paths: what the tools say is a
/// function of the bytes, and `apksigner` alone costs a JVM start (~270 ms here).
static INSPECTED: std::sync::Mutex<Vec<(String, Inspected)>> = std::sync::Mutex::new(Vec::new());
const INSPECTED_KEPT: usize = 64;

/// Inspect a frozen copy of `bytes` (the tools read a file; the copy is the exact
/// bytes that will be staged, so the file at `apkPath` may change meanwhile).
pub async fn inspect(bytes: Vec<u8>, aapt: &Path, apksigner: &Path, timeout: Duration) -> Result<Inspected, ProviderError> {
    let sha256 = hex(&Sha256::digest(&bytes));
    let key = format!("{sha256}\0{}\0{}", aapt.display(), apksigner.display());
    if let Some(mut hit) = INSPECTED.lock().ok().and_then(|c| c.iter().find(|(k, _)| *k == key).map(|(_, i)| i.clone())) {
        hit.bytes = bytes;
        return Ok(hit);
    }
    let found = inspect_uncached(bytes, &sha256, aapt, apksigner, timeout).await?;
    if let Ok(mut c) = INSPECTED.lock() {
        if c.len() >= INSPECTED_KEPT {
            c.remove(0);
        }
        c.push((key, Inspected { bytes: Vec::new(), ..found.clone() }));
    }
    Ok(found)
}

async fn inspect_uncached(bytes: Vec<u8>, sha256: &str, aapt: &Path, apksigner: &Path, timeout: Duration) -> Result<Inspected, ProviderError> {
    let sha256 = sha256.to_string();
    let mut nonce = [0u8; 16];
    let _ = getrandom::fill(&mut nonce);
    let dir = std::env::temp_dir().join(format!("aab-install-{}", hex(&nonce)));
    std::fs::create_dir_all(&dir).map_err(|e| refuse(codes::APK_UNREADABLE, "apkPath", format!("cannot freeze the APK: {e}")))?;
    let copy = dir.join("base.apk");
    let result = async {
        std::fs::write(&copy, &bytes).map_err(|e| refuse(codes::APK_UNREADABLE, "apkPath", format!("cannot freeze the APK: {e}")))?;
        let c = copy.to_string_lossy().into_owned();
        let (code, out, err) = run_tool(aapt, &["dump", "badging", &c], "aaptPath", timeout).await?;
        let line = out.lines().find(|l| l.starts_with("package:")).unwrap_or("");
        let (Some(package), Some(vc)) = (quoted(line, "name"), quoted(line, "versionCode")) else {
            return Err(refuse(codes::APK_INVALID, "apkPath", format!("aapt dump badging found no package (exit {code}): {}", err.trim())).with_details(json!({"stdout": out, "stderr": err})));
        };
        let version_code = vc.parse::<u64>().map_err(|_| refuse(codes::APK_INVALID, "apkPath", format!("versionCode {vc:?} is not a number")))?;
        let version_name = quoted(line, "versionName").unwrap_or_default();
        if out.lines().any(|l| l.starts_with("split:") || l.contains("split='")) {
            return Err(refuse(codes::APK_INVALID, "apkPath", "split APKs are not supported; pass a base APK"));
        }
        let (code, out, err) = run_tool(apksigner, &["verify", "--verbose", "--print-certs", &c], "apksignerPath", timeout).await?;
        if code != 0 {
            return Err(refuse(codes::APK_SIGNATURE_INVALID, "apkPath", format!("apksigner verify refused the APK (exit {code}): {}", err.trim())).with_details(json!({"stdout": out, "stderr": err})));
        }
        let signers: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("Signer #") && l.contains("certificate SHA-256 digest:"))
            .filter_map(|l| l.rsplit(':').next().map(|d| d.trim().to_string()))
            .collect();
        let scheme_versions: Vec<String> = out
            .lines()
            .filter_map(|l| l.strip_prefix("Verified using ").and_then(|r| r.split_once(": true")).map(|(v, _)| v.trim().to_string()))
            .collect();
        if signers.is_empty() {
            return Err(refuse(codes::APK_SIGNATURE_INVALID, "apkPath", "apksigner printed no signer certificate").with_details(json!({"stdout": out})));
        }
        Ok(Inspected { bytes: Vec::new(), sha256: sha256.clone(), package, version_code, version_name, signers, scheme_versions })
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result.map(|mut i| {
        i.bytes = bytes;
        i
    })
}

pub fn stage_dir(install_id: &str) -> String {
    format!("{ROOT}/{install_id}")
}

/// The staged installs on the phone (directories under the root).
pub async fn retained(device: &Device, deadline: Deadline) -> Result<usize, ProviderError> {
    let out = device.shell(&format!("ls -1 {ROOT} 2>/dev/null"), None, deadline).await?;
    Ok(out.stdout_text().lines().filter(|l| !l.trim().is_empty()).count())
}

/// Push the frozen bytes to `<stage>/base.apk` and check their hash on the phone.
pub async fn stage(device: &Device, install_id: &str, apk: &Inspected, deadline: Deadline) -> Result<String, ProviderError> {
    let dir = stage_dir(install_id);
    let staging = |why: String| ProviderError::new(codes::STAGING_FAILED, why).not_dispatched();
    let mk = device.shell(&format!("umask 077; mkdir -p {ROOT} && mkdir {} && echo made", quote(&dir)), None, deadline).await?;
    if !mk.stdout_text().contains("made") {
        return Err(staging(format!("cannot create {dir}: {}", mk.stderr_text().trim())));
    }
    let path = format!("{dir}/base.apk");
    device.push(&path, 0o600, &apk.bytes, 0, deadline).await.map_err(|e| staging(format!("push to {path} failed: {}", e.message)))?;
    let sum = device.shell(&format!("sha256sum {}", quote(&path)), None, deadline).await?;
    if sum.stdout_text().split_whitespace().next() != Some(apk.sha256.as_str()) {
        let _ = device.shell(&format!("rm -rf {}", quote(&dir)), None, deadline).await;
        return Err(staging(format!("the staged {path} does not hash to {}", apk.sha256)));
    }
    Ok(path)
}

/// The install script (one shell-worker job): prints one JSON document.
pub fn script(install_id: &str, apk: &Inspected, staged: &str, allow_downgrade: bool) -> String {
    let create_flags = if allow_downgrade { "-r -d" } else { "-r" };
    format!(
        r#"id={id}; want={sha}; pkg={pkg}; n={n}; apk={apk}; e={dir}/pm.err
b64() {{ printf %s "$1" | base64 -w 0; }}
emit() {{ printf '{{"schemaVersion":"{schema}","installId":"%s","apkSha256":"%s","packageName":"%s","sessionId":%s,"phase":"%s","code":%s,"stdout":"%s","stderr":"%s"}}\n' "$id" "$want" "$pkg" "$3" "$1" "$2" "$(b64 "$4")" "$(b64 "$5")"; }}
got=$(sha256sum "$apk" 2>/dev/null); got=${{got%% *}}
[ "$got" = "$want" ] || {{ emit artifact-mismatch 1 null "$got" ""; exit 0; }}
out=$(pm install-create {flags} -S "$n" 2>"$e"); c=$?
[ $c -eq 0 ] || {{ emit create-failed $c null "$out" "$(cat "$e")"; exit 0; }}
sid=$(printf '%s\n' "$out" | sed -n 's/^Success: created install session \[\([0-9][0-9]*\)\]$/\1/p')
[ -n "$sid" ] || {{ emit create-invalid $c null "$out" "$(cat "$e")"; exit 0; }}
out=$(pm install-write -S "$n" "$sid" base.apk "$apk" 2>"$e"); c=$?
[ $c -eq 0 ] || {{ emit write-failed $c "$sid" "$out" "$(cat "$e")"; exit 0; }}
out=$(pm install-commit "$sid" 2>"$e"); c=$?
emit commit-returned $c "$sid" "$out" "$(cat "$e")"
"#,
        id = install_id,
        sha = apk.sha256,
        pkg = apk.package,
        n = apk.bytes.len(),
        apk = quote(staged),
        dir = quote(&stage_dir(install_id)),
        schema = EXECUTION_SCHEMA,
        flags = create_flags,
    )
}

/// How the commit's PackageManager output reads.
#[derive(Debug, PartialEq)]
pub enum Commit {
    Success,
    /// A final failure: the `INSTALL_FAILED_…` / `INSTALL_PARSE_FAILED_…` code.
    Failure(String),
    /// Anything else (pending user action, OEM text, truncated output).
    Unrecognised,
}

pub fn classify_commit(exit_code: i64, stdout: &str) -> Commit {
    let text = stdout.strip_suffix('\n').unwrap_or(stdout);
    if exit_code == 0 && text == "Success" {
        return Commit::Success;
    }
    if let Some(inner) = text.strip_prefix("Failure [").and_then(|r| r.strip_suffix(']'))
        && !text.contains('\n')
    {
        let code: String = inner.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
        if (code.starts_with("INSTALL_FAILED_") || code.starts_with("INSTALL_PARSE_FAILED_")) && code.len() > 15 && (inner.len() == code.len() || inner[code.len()..].starts_with(':')) {
            return Commit::Failure(code);
        }
    }
    Commit::Unrecognised
}

/// The installed base APK of `package` (`pm path`) and its SHA-256 (`sha256sum`).
pub async fn installed(device: &Device, package: &str, deadline: Deadline) -> Result<Option<(String, String)>, ProviderError> {
    let out = device.shell(&format!("pm path {}", quote(package)), None, deadline).await?;
    let paths: Vec<String> = out.stdout_text().lines().filter_map(|l| l.trim().strip_prefix("package:").map(str::to_string)).collect();
    let Some(base) = paths.iter().find(|p| p.ends_with("/base.apk")).cloned() else { return Ok(None) };
    let sum = device.shell(&format!("sha256sum {}", quote(&base)), None, deadline).await?;
    let sha = sum.stdout_text().split_whitespace().next().unwrap_or_default().to_string();
    Ok(Some((base, sha)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_texts_settle_a_commit() {
        assert_eq!(classify_commit(0, "Success"), Commit::Success);
        assert_eq!(classify_commit(0, "Success\n"), Commit::Success);
        assert_eq!(classify_commit(1, "Success"), Commit::Unrecognised, "a nonzero exit is not success");
        assert_eq!(classify_commit(0, "Success: but"), Commit::Unrecognised);
        assert_eq!(classify_commit(1, "Failure [INSTALL_FAILED_VERSION_DOWNGRADE: Downgrade detected]"), Commit::Failure("INSTALL_FAILED_VERSION_DOWNGRADE".into()));
        assert_eq!(classify_commit(1, "Failure [INSTALL_PARSE_FAILED_NOT_APK]"), Commit::Failure("INSTALL_PARSE_FAILED_NOT_APK".into()));
        assert_eq!(classify_commit(255, "Failure [null]"), Commit::Unrecognised, "pending user action");
        assert_eq!(classify_commit(1, "Failure [INSTALL_FAILED_]"), Commit::Unrecognised);
        assert_eq!(classify_commit(1, "Installing… please confirm on the phone"), Commit::Unrecognised);
        assert_eq!(classify_commit(1, "Failure [INSTALL_FAILED_ABORTED: x]\nmore"), Commit::Unrecognised);
    }
}
