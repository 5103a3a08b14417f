//! `devicectl`: the one way aab learns about an iOS device and reads files out of
//! an app's data container. Every call is a child process
//! `<program> [devicectl] <args…> --timeout <sec> --json-output <tmp>/out.json`
//! (the `devicectl` prefix when the program's basename is `xcrun`, protocols §4.2)
//! bounded by the command deadline and killed when dropped; the answer is the
//! JSON document devicectl writes, read with a size cap. stdout/stderr are kept
//! (bounded) only for the error message.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::codes::*;
use crate::{Deadline, ProviderError};

/// The environment variable naming the devicectl program (contract name).
pub const DEVICECTL_ENV: &str = "AI_APP_BRIDGE_DEVICECTL";
/// Largest `--json-output` document read (a long device list is a few hundred KiB).
pub const MAX_DOCUMENT_BYTES: u64 = 4 * 1024 * 1024;
/// How much of the child's stdout/stderr is kept for an error message.
const MAX_DIAGNOSTIC_BYTES: usize = 8 * 1024;

/// A resolved devicectl program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Devicectl {
    pub program: PathBuf,
    /// Whether `devicectl` is passed as the first argument (`xcrun devicectl …`).
    pub prefixed: bool,
}

impl Devicectl {
    /// The explicit `devicectl` argument, else `AI_APP_BRIDGE_DEVICECTL`, else `xcrun`.
    pub fn resolve(explicit: Option<&str>) -> Devicectl {
        let from_env = std::env::var(DEVICECTL_ENV).ok().filter(|v| !v.is_empty());
        let program = PathBuf::from(explicit.map(str::to_string).or(from_env).unwrap_or_else(|| "xcrun".to_string()));
        let prefixed = program.file_name().and_then(|n| n.to_str()) == Some("xcrun");
        Devicectl { program, prefixed }
    }

    /// Run one devicectl command; the whole `--json-output` document on success.
    /// `timeout_sec` is devicectl's own `--timeout`; the deadline bounds the child too.
    pub async fn run(&self, args: &[String], timeout_sec: u64, deadline: Deadline) -> Result<Value, ProviderError> {
        let what = args.iter().take_while(|a| !a.starts_with("--")).cloned().collect::<Vec<_>>().join(" ");
        let dir = tempfile::Builder::new().prefix("aab-devicectl-").tempdir().map_err(|e| ProviderError::new(IOS_DEVICECTL_UNAVAILABLE, format!("no temporary directory for devicectl output: {e}")).not_dispatched())?;
        let out = dir.path().join("out.json");
        let timeout_sec = timeout_sec.max(1).min(deadline.remaining().as_secs().max(1));
        let mut cmd = tokio::process::Command::new(&self.program);
        if self.prefixed {
            cmd.arg("devicectl");
        }
        cmd.args(args).arg("--timeout").arg(timeout_sec.to_string()).arg("--json-output").arg(&out);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            ProviderError::new(IOS_DEVICECTL_UNAVAILABLE, format!("cannot run devicectl `{}`: {e}", self.program.display()))
                .with_details(json!({"program": self.program, "prefixed": self.prefixed, "env": DEVICECTL_ENV}))
                .not_dispatched()
        })?;
        let (mut so, mut se) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let drain = async {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let _ = tokio::join!(read_bounded(&mut so, &mut a), read_bounded(&mut se, &mut b));
            (a, b)
        };
        let waited = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline.instant()), async { tokio::join!(child.wait(), drain) }).await;
        let (status, (stdout, stderr)) = match waited {
            Err(_) => {
                let _ = child.kill().await;
                return Err(ProviderError::new(IOS_DEVICECTL_TIMEOUT, format!("devicectl {what} did not finish within the command deadline")).with_details(json!({"command": what, "timeoutSec": timeout_sec})));
            }
            // The child runs already: whatever it did is unknown, so never "unavailable".
            Ok((status, io)) => (status.map_err(|e| ProviderError::new(IOS_DEVICECTL_INTERRUPTED, format!("waiting for devicectl {what} failed: {e}")).with_details(json!({"command": what})))?, io),
        };
        let document = read_document(&out).await;
        let diag = json!({
            "command": what,
            "exitCode": status.code(),
            "stdout": String::from_utf8_lossy(&stdout),
            "stderr": String::from_utf8_lossy(&stderr),
        });
        let doc = match document {
            Ok(doc) => doc,
            Err(reason) if status.success() => {
                return Err(ProviderError::new(IOS_DEVICECTL_OUTPUT_INVALID, format!("devicectl {what} succeeded but its --json-output is unusable: {reason}")).with_details(diag));
            }
            // No failure document: not the device's answer (a crash, a signal), so unknown.
            Err(_) => return Err(ProviderError::new(IOS_DEVICECTL_INTERRUPTED, format!("devicectl {what} failed (exit {:?}) without a JSON document", status.code())).with_details(diag)),
        };
        let outcome = doc.pointer("/info/outcome").and_then(Value::as_str);
        if !status.success() || outcome != Some("success") || doc.get("error").is_some_and(|e| !e.is_null()) {
            let error = doc.get("error").cloned().unwrap_or(Value::Null);
            let reason = describe_error(&error).unwrap_or_else(|| format!("outcome {outcome:?}, exit {:?}", status.code()));
            let mut details = diag;
            details["error"] = error;
            let code = if is_timeout_error(&details["error"]) { IOS_DEVICECTL_TIMEOUT } else { IOS_DEVICECTL_FAILED };
            return Err(ProviderError::new(code, format!("devicectl {what}: {reason}")).with_details(details));
        }
        Ok(doc)
    }

    /// `list devices`: every device devicectl knows, parsed.
    pub async fn list_devices(&self, deadline: Deadline) -> Result<Vec<DeviceRecord>, ProviderError> {
        let doc = self.run(&args(&["list", "devices"]), 30, deadline).await.map_err(|e| e.not_dispatched())?;
        let Some(devices) = doc.pointer("/result/devices").and_then(Value::as_array) else {
            return Err(ProviderError::new(IOS_DEVICECTL_OUTPUT_INVALID, "devicectl list devices: the document has no result.devices array").not_dispatched());
        };
        devices.iter().map(DeviceRecord::parse).collect::<Result<Vec<_>, _>>().map_err(|e| e.not_dispatched())
    }

    /// `device copy from` one file of an app's data container into a private temp
    /// dir, read with `max_bytes` as the cap (an oversized file comes back as its first
    /// `max_bytes + 1` bytes, for the caller to refuse). `None`: devicectl says the file is not
    /// there (the document's error names a missing file).
    pub async fn copy_from_container(&self, device: &str, bundle_id: &str, source: &str, max_bytes: u64, deadline: Deadline) -> Result<Option<Vec<u8>>, ProviderError> {
        let dir = tempfile::Builder::new().prefix("aab-container-").tempdir().map_err(|e| ProviderError::new(IOS_DEVICECTL_UNAVAILABLE, format!("no temporary directory: {e}")).not_dispatched())?;
        let name = Path::new(source).file_name().and_then(|n| n.to_str()).unwrap_or("copied");
        let dest = dir.path().join(name);
        let a = args(&["device", "copy", "from", "--device", device, "--domain-type", "appDataContainer", "--domain-identifier", bundle_id, "--source", source, "--destination"]);
        let mut a = a;
        a.push(dest.display().to_string());
        match self.run(&a, 5, deadline).await {
            Ok(_) => {}
            Err(e) if e.details.as_ref().is_some_and(|d| names_missing_file(&d["error"])) => return Ok(None),
            Err(e) => return Err(e.not_dispatched()),
        }
        let meta = match tokio::fs::symlink_metadata(&dest).await {
            Ok(m) => m,
            Err(_) => return Ok(None),
        };
        if !meta.is_file() {
            return Err(ProviderError::new(IOS_DEVICECTL_OUTPUT_INVALID, format!("devicectl copied {source} as something other than a regular file")).not_dispatched());
        }
        let file = tokio::fs::File::open(&dest).await.map_err(|e| ProviderError::new(IOS_DEVICECTL_OUTPUT_INVALID, format!("reading the copied {source}: {e}")).not_dispatched())?;
        let mut bytes = Vec::new();
        file.take(max_bytes + 1).read_to_end(&mut bytes).await.map_err(|e| ProviderError::new(IOS_DEVICECTL_OUTPUT_INVALID, format!("reading the copied {source}: {e}")).not_dispatched())?;
        // At most `max_bytes + 1` bytes come back: the caller's parser reports an
        // oversized file with its own code (e.g. `invalid_ios_runtime_descriptor`).
        Ok(Some(bytes))
    }

    /// `device install app --device <id> <path>` (a mutation: the caller marks dispatch first).
    pub async fn install_app(&self, device: &str, app_path: &Path, deadline: Deadline) -> Result<Value, ProviderError> {
        let mut a = args(&["device", "install", "app", "--device", device]);
        a.push(app_path.display().to_string());
        let secs = deadline.remaining().as_secs().max(1);
        self.run(&a, secs, deadline).await.map(result_of)
    }

    /// `device process launch --device <id> [--terminate-existing] <bundleId>`.
    pub async fn launch(&self, device: &str, bundle_id: &str, terminate_existing: bool, deadline: Deadline) -> Result<Value, ProviderError> {
        let mut a = args(&["device", "process", "launch", "--device", device]);
        if terminate_existing {
            a.push("--terminate-existing".into());
        }
        a.push(bundle_id.into());
        self.run(&a, 30, deadline).await.map(result_of)
    }

    /// `device capture screenshot --device <id> --destination <png> [--display-unique-id <x>]`.
    pub async fn screenshot(&self, device: &str, destination: &Path, display_unique_id: Option<&str>, deadline: Deadline) -> Result<Value, ProviderError> {
        let mut a = args(&["device", "capture", "screenshot", "--device", device, "--destination"]);
        a.push(destination.display().to_string());
        if let Some(d) = display_unique_id {
            a.push("--display-unique-id".into());
            a.push(d.into());
        }
        self.run(&a, 30, deadline).await.map(result_of).map_err(|e| e.not_dispatched())
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn result_of(doc: Value) -> Value {
    doc.get("result").cloned().unwrap_or(Value::Null)
}

async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(r: &mut R, into: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            // Keep the head; keep draining so the child never blocks on a full pipe.
            Ok(n) => {
                let room = MAX_DIAGNOSTIC_BYTES.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

async fn read_document(path: &Path) -> Result<Value, String> {
    let file = tokio::fs::File::open(path).await.map_err(|e| format!("no document ({e})"))?;
    let mut bytes = Vec::new();
    file.take(MAX_DOCUMENT_BYTES + 1).read_to_end(&mut bytes).await.map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(format!("larger than {MAX_DOCUMENT_BYTES} bytes"));
    }
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))?;
    if !doc.is_object() || !doc.get("info").is_some_and(Value::is_object) {
        return Err("not a devicectl document (no `info` object)".into());
    }
    Ok(doc)
}

/// devicectl wraps `userInfo` values as `{"string": "…"}`; accept plain strings too.
fn user_info_text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string).or_else(|| v.get("string").and_then(Value::as_str).map(str::to_string))
}

fn describe_error(error: &Value) -> Option<String> {
    let info = error.get("userInfo")?;
    user_info_text(info.get("NSLocalizedDescription")?).or_else(|| info.get("NSLocalizedFailureReason").and_then(user_info_text))
}

fn is_timeout_error(error: &Value) -> bool {
    describe_error(error).is_some_and(|d| d.to_ascii_lowercase().contains("timed out"))
}

/// Whether a copy failed because the source file does not exist (NSCocoaErrorDomain
/// 4 / 260, POSIX ENOENT, or CoreDevice's "file not found" wording).
fn names_missing_file(error: &Value) -> bool {
    let code = error.get("code").and_then(Value::as_i64);
    let domain = error.get("domain").and_then(Value::as_str).unwrap_or_default();
    let text = describe_error(error).unwrap_or_default().to_ascii_lowercase();
    // Only a missing *file*: "device not found" or "app not found" are other failures.
    (domain == "NSCocoaErrorDomain" && matches!(code, Some(4) | Some(260))) || (domain == "NSPOSIXErrorDomain" && code == Some(2)) || text.contains("no such file") || text.contains("file was not found") || text.contains("file not found")
}

/// One device of `list devices`, as aab uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceRecord {
    /// CoreDevice identifier (a UUID); what `--device` takes.
    pub identifier: String,
    pub udid: String,
    pub serial: Option<String>,
    pub name: Option<String>,
    pub platform: Option<String>,
    pub product_type: Option<String>,
    pub marketing_name: Option<String>,
    pub os_version: Option<String>,
    pub boot_state: Option<String>,
    pub developer_mode: Option<String>,
    pub ddi_available: bool,
    pub pairing_state: Option<String>,
    pub transport_type: Option<String>,
    pub tunnel_state: Option<String>,
    pub tunnel_ip: Option<String>,
    pub raw: Value,
}

impl DeviceRecord {
    pub fn parse(v: &Value) -> Result<DeviceRecord, ProviderError> {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        let invalid = |what: &str| ProviderError::new(IOS_DEVICECTL_OUTPUT_INVALID, format!("devicectl list devices: a device without {what}")).with_details(json!({"device": v}));
        let identifier = s("/identifier").filter(|x| !x.is_empty()).ok_or_else(|| invalid("identifier"))?;
        let udid = s("/hardwareProperties/udid").filter(|x| !x.is_empty()).ok_or_else(|| invalid("hardwareProperties.udid"))?;
        Ok(DeviceRecord {
            identifier,
            udid,
            serial: s("/hardwareProperties/serialNumber"),
            name: s("/deviceProperties/name"),
            platform: s("/hardwareProperties/platform"),
            product_type: s("/hardwareProperties/productType"),
            marketing_name: s("/hardwareProperties/marketingName"),
            os_version: s("/deviceProperties/osVersionNumber"),
            boot_state: s("/deviceProperties/bootState"),
            developer_mode: s("/deviceProperties/developerModeStatus"),
            ddi_available: v.pointer("/deviceProperties/ddiServicesAvailable").and_then(Value::as_bool).unwrap_or(false),
            pairing_state: s("/connectionProperties/pairingState"),
            transport_type: s("/connectionProperties/transportType"),
            tunnel_state: s("/connectionProperties/tunnelState"),
            tunnel_ip: s("/connectionProperties/tunnelIPAddress").filter(|x| !x.is_empty()),
            raw: v.clone(),
        })
    }

    /// A compact public view (what `ios-devices` lists).
    pub fn summary(&self) -> Value {
        json!({
            "identifier": self.identifier,
            "udid": self.udid,
            "serialNumber": self.serial,
            "name": self.name,
            "platform": self.platform,
            "productType": self.product_type,
            "marketingName": self.marketing_name,
            "osVersion": self.os_version,
            "bootState": self.boot_state,
            "developerModeStatus": self.developer_mode,
            "ddiServicesAvailable": self.ddi_available,
            "pairingState": self.pairing_state,
            "transportType": self.transport_type,
            "tunnelState": self.tunnel_state,
            "tunnelIPAddress": self.tunnel_ip,
        })
    }
}

/// The one device `device_id` names: by CoreDevice identifier, UDID, serial number
/// or name (exact, in that order of precedence; a name shared by two devices is
/// ambiguous, never a guess).
pub fn select_device(devices: &[DeviceRecord], device_id: &str) -> Result<DeviceRecord, ProviderError> {
    let by = |f: &dyn Fn(&DeviceRecord) -> bool| devices.iter().filter(|d| f(d)).cloned().collect::<Vec<_>>();
    for found in [
        by(&|d| d.identifier.eq_ignore_ascii_case(device_id)),
        by(&|d| d.udid.eq_ignore_ascii_case(device_id)),
        by(&|d| d.serial.as_deref() == Some(device_id)),
        by(&|d| d.name.as_deref() == Some(device_id)),
    ] {
        match found.len() {
            0 => continue,
            1 => return Ok(found.into_iter().next().expect("one")),
            n => {
                return Err(ProviderError::new(IOS_DEVICE_AMBIGUOUS, format!("`{device_id}` names {n} devices; use the identifier or UDID"))
                    .with_field("deviceId")
                    .with_details(json!({"matches": found.iter().map(|d| json!({"identifier": d.identifier, "udid": d.udid, "name": d.name})).collect::<Vec<_>>()}))
                    .not_dispatched());
            }
        }
    }
    Err(ProviderError::new(IOS_DEVICE_NOT_FOUND, format!("devicectl lists no device `{device_id}`"))
        .with_field("deviceId")
        .with_details(json!({"known": devices.iter().map(|d| json!({"identifier": d.identifier, "udid": d.udid, "name": d.name})).collect::<Vec<_>>()}))
        .not_dispatched())
}

/// The device's developer tunnel address, once developer mode, DDI services and a
/// connected tunnel are all there (the SDK and the Runner are only reachable then).
pub fn require_developer_tunnel(d: &DeviceRecord) -> Result<String, ProviderError> {
    let details = || json!({"identifier": d.identifier, "udid": d.udid, "developerModeStatus": d.developer_mode, "ddiServicesAvailable": d.ddi_available, "tunnelState": d.tunnel_state, "tunnelIPAddress": d.tunnel_ip});
    if d.developer_mode.as_deref() != Some("enabled") {
        return Err(ProviderError::new(IOS_DEVELOPER_MODE_DISABLED, format!("developer mode is {} on {}", d.developer_mode.as_deref().unwrap_or("unknown"), d.udid)).with_details(details()).not_dispatched());
    }
    if !d.ddi_available {
        return Err(ProviderError::new(IOS_DDI_UNAVAILABLE, format!("developer disk image services are not available on {}", d.udid)).with_details(details()).not_dispatched());
    }
    match (d.tunnel_state.as_deref(), &d.tunnel_ip) {
        (Some("connected"), Some(ip)) => Ok(ip.clone()),
        _ => Err(ProviderError::new(IOS_TUNNEL_UNAVAILABLE, format!("the developer tunnel to {} is {}", d.udid, d.tunnel_state.as_deref().unwrap_or("unknown"))).with_details(details()).not_dispatched()),
    }
}

/// What a failed devicectl MUTATION (install, launch) proves once the dispatch
/// mark is set: a devicectl that could not be started did nothing (not
/// dispatched); a failure document is the device's own answer (settled); a
/// timeout, an interrupted run or an unusable document leaves the outcome
/// unknown, which the host keeps unresolved (devicectl has no receipt to
/// reconcile from). Every iOS command that mutates through devicectl maps its
/// errors here, so the same failure means the same thing in every plugin.
pub fn mutation_failure(mut e: ProviderError) -> ProviderError {
    match e.error.as_str() {
        IOS_DEVICECTL_UNAVAILABLE => e.not_dispatched(),
        IOS_DEVICECTL_FAILED => e.settled_after_dispatch(),
        _ => {
            (e.dispatched, e.ambiguous) = (None, None);
            e
        }
    }
}

/// A per-step cap for devicectl calls inside a command (never beyond the deadline).
pub fn step(deadline: Deadline, secs: u64) -> Deadline {
    deadline.capped(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(identifier: &str, udid: &str, name: &str, tunnel: &str) -> DeviceRecord {
        DeviceRecord::parse(&json!({
            "identifier": identifier,
            "hardwareProperties": {"udid": udid, "serialNumber": format!("SN{udid}"), "platform": "iOS"},
            "deviceProperties": {"name": name, "developerModeStatus": "enabled", "ddiServicesAvailable": true},
            "connectionProperties": {"tunnelState": tunnel, "tunnelIPAddress": "fd00::1"},
        }))
        .unwrap()
    }

    #[test]
    fn selection_by_every_alias_and_never_a_guess() {
        let all = vec![device("AAAA-1", "00008110-0001", "Phone", "connected"), device("BBBB-2", "00008110-0002", "Phone", "connected")];
        assert_eq!(select_device(&all, "aaaa-1").unwrap().udid, "00008110-0001");
        assert_eq!(select_device(&all, "00008110-0002").unwrap().identifier, "BBBB-2");
        assert_eq!(select_device(&all, "SN00008110-0001").unwrap().identifier, "AAAA-1");
        assert_eq!(select_device(&all, "Phone").unwrap_err().error, IOS_DEVICE_AMBIGUOUS);
        let e = select_device(&all, "nope").unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (IOS_DEVICE_NOT_FOUND, Some("deviceId"), Some(false)));
    }

    #[test]
    fn the_tunnel_needs_developer_mode_ddi_and_connected() {
        let mut d = device("A", "U", "P", "connected");
        assert_eq!(require_developer_tunnel(&d).unwrap(), "fd00::1");
        d.tunnel_state = Some("disconnected".into());
        assert_eq!(require_developer_tunnel(&d).unwrap_err().error, IOS_TUNNEL_UNAVAILABLE);
        d.ddi_available = false;
        assert_eq!(require_developer_tunnel(&d).unwrap_err().error, IOS_DDI_UNAVAILABLE);
        d.developer_mode = Some("disabled".into());
        assert_eq!(require_developer_tunnel(&d).unwrap_err().error, IOS_DEVELOPER_MODE_DISABLED);
    }

    #[test]
    fn a_device_without_identity_is_invalid_output() {
        let e = DeviceRecord::parse(&json!({"identifier": "A", "hardwareProperties": {}})).unwrap_err();
        assert_eq!(e.error, IOS_DEVICECTL_OUTPUT_INVALID);
    }

    #[test]
    fn mutation_failures_say_what_they_prove() {
        assert_eq!(mutation_failure(ProviderError::new(IOS_DEVICECTL_UNAVAILABLE, "")).dispatched, Some(false));
        let failed = mutation_failure(ProviderError::new(IOS_DEVICECTL_FAILED, ""));
        assert_eq!((failed.dispatched, failed.ambiguous), (Some(true), Some(false)));
        for unknown in [IOS_DEVICECTL_TIMEOUT, IOS_DEVICECTL_INTERRUPTED, IOS_DEVICECTL_OUTPUT_INVALID] {
            // Even an error a read marked not-dispatched is unknown as a mutation's.
            let e = mutation_failure(ProviderError::new(unknown, "").not_dispatched());
            assert_eq!((e.dispatched, e.ambiguous), (None, None), "{unknown}");
        }
    }

    #[test]
    fn xcrun_is_prefixed_and_a_direct_program_is_not() {
        assert!(Devicectl::resolve(Some("/usr/bin/xcrun")).prefixed);
        assert!(!Devicectl::resolve(Some("/opt/tools/devicectl")).prefixed);
    }

    #[test]
    fn missing_files_are_recognised_in_devicectl_errors() {
        assert!(names_missing_file(&json!({"code": 4, "domain": "NSCocoaErrorDomain", "userInfo": {}})));
        assert!(names_missing_file(&json!({"code": 1, "domain": "com.apple.dt.CoreDeviceError", "userInfo": {"NSLocalizedDescription": {"string": "The file was not found."}}})));
        assert!(!names_missing_file(&json!({"code": 1, "domain": "com.apple.dt.CoreDeviceError", "userInfo": {"NSLocalizedDescription": {"string": "The tunnel is down."}}})));
        assert!(!names_missing_file(&json!({"code": 1000, "domain": "com.apple.dt.CoreDeviceError", "userInfo": {"NSLocalizedDescription": {"string": "The specified device was not found."}}})));
    }

    /// A fake devicectl (a shell script) proves the argument shape, the prefix,
    /// the document read and the failure mapping.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_the_program_and_reads_its_document() {
        let dir = tempfile::tempdir().unwrap();
        let xcrun = dir.path().join("xcrun");
        let log = dir.path().join("args.log");
        std::fs::write(
            &xcrun,
            format!(
                "#!/bin/sh\necho \"$@\" > {log}\nout=''\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --json-output ]; then out=$2; fi; shift; done\nif grep -q fail {log}; then printf '{{\"info\":{{\"outcome\":\"failed\"}},\"error\":{{\"code\":1,\"domain\":\"com.apple.dt.CoreDeviceError\",\"userInfo\":{{\"NSLocalizedDescription\":{{\"string\":\"boom\"}}}}}}}}' > \"$out\"; exit 1; fi\nprintf '{{\"info\":{{\"outcome\":\"success\"}},\"result\":{{\"devices\":[{{\"identifier\":\"ID1\",\"hardwareProperties\":{{\"udid\":\"U1\"}}}}]}}}}' > \"$out\"\n",
                log = log.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&xcrun, std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = Devicectl::resolve(Some(xcrun.to_str().unwrap()));
        let devices = d.list_devices(Deadline::after(Duration::from_secs(10))).await.unwrap();
        assert_eq!(devices[0].udid, "U1");
        let said = std::fs::read_to_string(&log).unwrap();
        assert!(said.starts_with("devicectl list devices --timeout "), "{said}");
        assert!(said.contains("--json-output "), "{said}");
        let e = d.run(&args(&["fail"]), 5, Deadline::after(Duration::from_secs(10))).await.unwrap_err();
        assert_eq!(e.error, IOS_DEVICECTL_FAILED);
        assert!(e.message.contains("boom"), "{}", e.message);
        // Exit 1 without a document (a crash): not the device's answer.
        let crashing = dir.path().join("crashing-devicectl");
        std::fs::write(&crashing, "#!/bin/sh\nexit 1\n").unwrap();
        std::fs::set_permissions(&crashing, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = Devicectl::resolve(Some(crashing.to_str().unwrap())).run(&args(&["device", "install", "app"]), 5, Deadline::after(Duration::from_secs(10))).await.unwrap_err();
        assert_eq!(e.error, IOS_DEVICECTL_INTERRUPTED);
        let e = mutation_failure(e);
        assert_eq!((e.dispatched, e.ambiguous), (None, None), "unknown: the host leaves a mutation ambiguous");
        let missing = Devicectl::resolve(Some("/nonexistent/devicectl"));
        assert_eq!(missing.list_devices(Deadline::after(Duration::from_secs(5))).await.unwrap_err().error, IOS_DEVICECTL_UNAVAILABLE);
    }
}
