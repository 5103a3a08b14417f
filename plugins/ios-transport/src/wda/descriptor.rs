//! The Runner's descriptor (`aab.ios-wda/v1`, protocols §5.2): the only thing that
//! binds a WDA HTTP endpoint to one physical device and one Runner process. It is
//! copied with devicectl from the exact Runner container every connection (never
//! cached: a restarted Runner is a new epoch and process), capped, and parsed
//! strictly; a URL, `/status` or a vendor UUID alone proves nothing.

use serde_json::{Value, json};

use super::codes::*;
use super::{DESCRIPTOR_PATH, DESCRIPTOR_SCHEMA};
use crate::{Deadline, Devicectl, ProviderError};

/// Largest descriptor read (it is a handful of short fields).
pub const MAX_DESCRIPTOR_BYTES: u64 = 4096;

/// A ready Runner's identity: the five fields every header set and every
/// `wdaBinding` repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub bundle_id: String,
    pub runtime_epoch: String,
    pub process_id: u64,
    pub port: u16,
}

impl Descriptor {
    /// The identity as `wdaBinding` spells it.
    pub fn binding(&self) -> Value {
        json!({"schemaVersion": DESCRIPTOR_SCHEMA, "bundleId": self.bundle_id, "runtimeEpoch": self.runtime_epoch, "processId": self.process_id, "port": self.port})
    }
}

pub use crate::ids::{is_bundle_id, is_runtime_epoch};

fn invalid(message: String, doc: &Value) -> ProviderError {
    ProviderError::new(INVALID_IOS_WDA_DESCRIPTOR, message).with_field("wdaRunnerBundleId").with_details(json!({"descriptor": doc})).not_dispatched()
}

/// Parse the descriptor bytes of the container of `runner_bundle_id`.
pub fn parse(bytes: &[u8], runner_bundle_id: &str) -> Result<Descriptor, ProviderError> {
    if bytes.len() as u64 > MAX_DESCRIPTOR_BYTES {
        return Err(invalid(format!("the Runner descriptor is larger than {MAX_DESCRIPTOR_BYTES} bytes"), &Value::Null));
    }
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| invalid(format!("the Runner descriptor is not JSON: {e}"), &Value::Null))?;
    if !doc.is_object() {
        return Err(invalid("the Runner descriptor is not a JSON object".into(), &doc));
    }
    if doc.get("schemaVersion").and_then(Value::as_str) != Some(DESCRIPTOR_SCHEMA) {
        return Err(invalid(format!("the Runner descriptor is not {DESCRIPTOR_SCHEMA} (schemaVersion {})", doc["schemaVersion"]), &doc));
    }
    let bundle_id = doc.get("bundleId").and_then(Value::as_str).filter(|b| is_bundle_id(b)).ok_or_else(|| invalid("the Runner descriptor has no valid bundleId".into(), &doc))?;
    if bundle_id != runner_bundle_id {
        return Err(invalid(format!("the descriptor in the container of {runner_bundle_id} names the Runner {bundle_id}"), &doc));
    }
    match doc.get("ok") {
        Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            return Err(ProviderError::new(IOS_WDA_DESCRIPTOR_NOT_READY, format!("the Runner {runner_bundle_id} is not ready (its descriptor says ok:false)")).with_details(json!({"descriptor": doc})).not_dispatched());
        }
        _ => return Err(invalid("the Runner descriptor has no boolean ok".into(), &doc)),
    }
    let runtime_epoch = doc.get("runtimeEpoch").and_then(Value::as_str).filter(|e| is_runtime_epoch(e)).ok_or_else(|| invalid("the Runner descriptor has no valid runtimeEpoch".into(), &doc))?;
    let process_id = doc.get("processId").and_then(Value::as_u64).filter(|p| (1..=u64::from(u32::MAX)).contains(p)).ok_or_else(|| invalid("the Runner descriptor has no valid processId".into(), &doc))?;
    let port = doc.get("port").and_then(Value::as_u64).filter(|p| (1..=65535).contains(p)).ok_or_else(|| invalid("the Runner descriptor has no valid port (1..65535)".into(), &doc))?;
    Ok(Descriptor { bundle_id: bundle_id.to_string(), runtime_epoch: runtime_epoch.to_string(), process_id, port: port as u16 })
}

/// The raw descriptor bytes of the Runner container, `None` when absent.
pub async fn copy(devicectl: &Devicectl, device_identifier: &str, runner_bundle_id: &str, deadline: Deadline) -> Result<Option<Vec<u8>>, ProviderError> {
    devicectl.copy_from_container(device_identifier, runner_bundle_id, DESCRIPTOR_PATH, MAX_DESCRIPTOR_BYTES, deadline).await
}

/// Whether a devicectl failure says the app is not installed (CoreDeviceError 3002).
fn not_installed(e: &ProviderError) -> bool {
    let error = e.details.as_ref().map(|d| &d["error"]);
    error.and_then(|x| x.get("code")).and_then(Value::as_i64) == Some(3002) || e.message.contains("is not installed")
}

/// Copy and parse; an absent file is `ios_wda_descriptor_absent`, an absent Runner
/// app `ios_wda_runner_not_installed`.
pub async fn read(devicectl: &Devicectl, device_identifier: &str, runner_bundle_id: &str, deadline: Deadline) -> Result<Descriptor, ProviderError> {
    let copied = copy(devicectl, device_identifier, runner_bundle_id, deadline).await.map_err(|e| {
        if not_installed(&e) {
            ProviderError::new(IOS_WDA_RUNNER_NOT_INSTALLED, format!("the Runner {runner_bundle_id} is not installed on the device (ios-setup builds and starts it)"))
                .with_field("wdaRunnerBundleId")
                .with_details(json!({"devicectl": e.details}))
                .not_dispatched()
        } else {
            e
        }
    })?;
    match copied {
        Some(bytes) => parse(&bytes, runner_bundle_id),
        None => Err(ProviderError::new(IOS_WDA_DESCRIPTOR_ABSENT, format!("the container of {runner_bundle_id} has no {DESCRIPTOR_PATH}: the prepared Runner is not running there (ios-setup --start-wda)"))
            .with_field("wdaRunnerBundleId")
            .not_dispatched()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";

    fn doc() -> Value {
        json!({"schemaVersion": DESCRIPTOR_SCHEMA, "bundleId": RUNNER, "runtimeEpoch": "4C1F4C0E-0B7A-4F65-9A43-2D3E1B0C9F11", "processId": 812, "port": 8100, "ok": true})
    }

    fn parse_v(v: &Value) -> Result<Descriptor, ProviderError> {
        parse(v.to_string().as_bytes(), RUNNER)
    }

    #[test]
    fn a_ready_descriptor_parses_and_binds_its_five_fields() {
        let d = parse_v(&doc()).unwrap();
        assert_eq!((d.process_id, d.port), (812, 8100));
        assert_eq!(d.binding()["runtimeEpoch"], doc()["runtimeEpoch"]);
        assert_eq!(d.binding().as_object().unwrap().len(), 5);
    }

    #[test]
    fn every_bad_field_is_refused_before_any_request() {
        let code = |v: Value| parse_v(&v).unwrap_err().error;
        let with = |k: &str, x: Value| {
            let mut v = doc();
            v[k] = x;
            v
        };
        assert_eq!(code(with("schemaVersion", json!("aab.ios-runtime/v1"))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("bundleId", json!("com.other.xctrunner"))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("bundleId", json!("bad id"))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("runtimeEpoch", json!("a/b"))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("processId", json!(0))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("processId", json!("812"))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("port", json!(70000))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("ok", json!("yes"))), INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(code(with("ok", json!(false))), IOS_WDA_DESCRIPTOR_NOT_READY);
        assert_eq!(parse(b"[1]", RUNNER).unwrap_err().error, INVALID_IOS_WDA_DESCRIPTOR);
        assert_eq!(parse(&[b' '; 5000], RUNNER).unwrap_err().error, INVALID_IOS_WDA_DESCRIPTOR);
        assert!(parse_v(&doc()).is_ok());
    }
}
