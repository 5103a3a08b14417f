//! The simulator side of the `devicectl` double: each command the double
//! parsed arrives as control op `devicectl` and is answered with the `result`
//! member Xcode's devicectl writes to `--json-output` (protocols §4.2), or an
//! NSError-shaped `error{code, domain, userInfo}`. Device selection (CoreDevice
//! identifier, UDID, serial, ECID or name), developer-services and tunnel
//! checks, and the devicectl faults live here; `cli` writes the document.

use std::path::{Component, Path};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::device::Device;
use crate::util::{b64, uuid_from};

pub const CORE_DEVICE: &str = "com.apple.dt.CoreDeviceError";
/// Largest file `device copy from` moves through the control socket.
pub const MAX_COPY: usize = 16 * 1024 * 1024;

pub fn ns_error(domain: &str, code: i64, message: &str) -> Value {
    json!({ "code": code, "domain": domain, "userInfo": { "NSLocalizedDescription": { "string": message } } })
}

fn fail(domain: &str, code: i64, message: &str) -> Value {
    json!({ "ok": false, "error": ns_error(domain, code, message) })
}

/// The `commandType` of each command.
pub fn command_type(command: &str) -> String {
    format!("devicectl.{}", command.replace(' ', "."))
}

/// One `result.devices[]` entry.
pub fn device_json(d: &Device) -> Value {
    let st = d.st.lock().unwrap();
    let f = d.faults.lock().unwrap();
    let tunnel = st.tunnel_connected;
    let mut conn = json!({
        "authenticationType": "manualPairing", "isMobileDeviceOnly": false, "lastConnectionDate": "2025-01-01T00:00:00.000Z",
        "pairingState": "paired",
        "potentialHostnames": [format!("{}.coredevice.local", d.udid), format!("{}.coredevice.local", d.identifier)],
        "transportType": "wired", "tunnelState": if tunnel { "connected" } else { "disconnected" }, "tunnelTransportProtocol": "tcp",
    });
    if tunnel {
        conn["tunnelIPAddress"] = json!(d.tunnel_ip);
    }
    json!({
        "capabilities": [
            { "featureIdentifier": "com.apple.coredevice.feature.installapp", "name": "Install Application" },
            { "featureIdentifier": "com.apple.coredevice.feature.launchapplication", "name": "Launch Application" },
            { "featureIdentifier": "com.apple.coredevice.feature.transferFiles", "name": "Transfer Files" },
            { "featureIdentifier": "com.apple.coredevice.feature.capturescreenshot", "name": "Capture Screenshot" },
        ],
        "connectionProperties": conn,
        "deviceProperties": {
            "bootState": "booted", "bootedFromSnapshot": true, "ddiServicesAvailable": !f.ddi_unavailable,
            "developerModeStatus": if f.developer_mode_disabled { "disabled" } else { "enabled" },
            "hasInternalOSBuild": false, "name": d.name, "osBuildUpdate": d.os_build, "osVersionNumber": d.os_version, "rootFileSystemIsWritable": false,
        },
        "hardwareProperties": {
            "cpuType": { "name": "arm64e", "subType": 2, "type": 16777228 }, "deviceType": "iPhone", "ecid": d.ecid, "hardwareModel": d.hardware_model,
            "internalStorageCapacity": 128000000000u64, "isProductionFused": true, "marketingName": d.marketing_name, "platform": "iOS",
            "productType": d.product_type, "reality": "physical", "serialNumber": d.serial, "supportedCPUTypes": [{ "name": "arm64e", "subType": 2, "type": 16777228 }],
            "supportedDeviceFamilies": [1], "thinningProductType": d.product_type, "udid": d.udid,
        },
        "identifier": d.identifier,
        "tags": [],
        "visibilityClass": "default",
    })
}

fn find<'a>(devices: &'a [Arc<Device>], id: &str) -> Option<&'a Arc<Device>> {
    devices.iter().find(|d| d.identifier.eq_ignore_ascii_case(id) || d.udid.eq_ignore_ascii_case(id) || d.serial == id || d.ecid.to_string() == id || d.name == id)
}

/// The developer services a device command needs.
fn services(d: &Device) -> Result<(), Value> {
    let tunnel = d.st.lock().unwrap().tunnel_connected;
    let f = d.faults.lock().unwrap().clone();
    if !tunnel {
        return Err(fail(CORE_DEVICE, 4, "The device is not connected: its developer tunnel is unavailable."));
    }
    if f.developer_mode_disabled {
        return Err(fail(CORE_DEVICE, 10002, "Developer Mode is disabled on the device."));
    }
    if f.ddi_unavailable {
        return Err(fail(CORE_DEVICE, 10003, "The developer disk image services are not available on the device."));
    }
    Ok(())
}

/// A container-relative source path that stays inside the container.
fn safe_relative(p: &str) -> bool {
    !p.is_empty() && p.len() <= 1024 && Path::new(p).components().all(|c| matches!(c, Component::Normal(_)))
}

/// Handles control op `devicectl`: `{command, device?, …}`.
pub async fn handle(devices: &[Arc<Device>], req: &Value) -> Value {
    let command = req["command"].as_str().unwrap_or("");
    // Faults: a hang or an injected failure, checked on the devices the command names (or all for list).
    let named = req["device"].as_str().and_then(|id| find(devices, id));
    let fault_devices: Vec<&Arc<Device>> = match named {
        Some(d) => vec![d],
        None => devices.iter().collect(),
    };
    for d in &fault_devices {
        let f = d.faults.lock().unwrap().clone();
        if f.hangs(command) {
            d.record("devicectl", json!({ "command": command, "fault": "hang" }));
            return json!({ "ok": false, "hang": true });
        }
        if let Some(fail_spec) = f.devicectl_fail.as_ref().filter(|x| crate::faults::covers(&x.command, command)) {
            d.record("devicectl", json!({ "command": command, "fault": "fail", "code": fail_spec.code }));
            return fail(CORE_DEVICE, fail_spec.code, "The operation couldn't be completed (injected failure).");
        }
    }
    if command == "list devices" {
        return json!({ "ok": true, "result": { "devices": devices.iter().map(|d| device_json(d)).collect::<Vec<_>>() } });
    }
    let Some(id) = req["device"].as_str() else { return fail(CORE_DEVICE, 1000, "A device must be specified.") };
    let Some(dev) = find(devices, id).cloned() else { return fail(CORE_DEVICE, 1000, &format!("The specified device was not found: {id}.")) };
    if let Err(e) = services(&dev) {
        return e;
    }
    let r = match command {
        "device copy from" => copy_from(&dev, req),
        "device install app" => install(&dev, req),
        "device process launch" => launch(&dev, req),
        "device capture screenshot" => screenshot(&dev),
        other => fail(CORE_DEVICE, 1, &format!("Unsupported command: {other}")),
    };
    dev.record("devicectl", json!({ "command": command, "ok": r["ok"], "bundleId": req["bundleId"], "source": req["source"], "error": r.get("error") }));
    r
}

fn copy_from(dev: &Device, req: &Value) -> Value {
    if req["domainType"] != "appDataContainer" {
        return fail(CORE_DEVICE, 1, "Only the appDataContainer domain is supported.");
    }
    let (Some(bundle), Some(source)) = (req["bundleId"].as_str(), req["source"].as_str()) else { return fail(CORE_DEVICE, 1, "--domain-identifier and --source are required.") };
    if !dev.st.lock().unwrap().apps.contains_key(bundle) {
        return fail(CORE_DEVICE, 3002, &format!("The application {bundle} is not installed."));
    }
    if !safe_relative(source) {
        return fail("NSCocoaErrorDomain", 260, "The source path must be relative to the container.");
    }
    let path = dev.container(bundle).join(source);
    let max = req["maxBytes"].as_u64().map(|m| m as usize).unwrap_or(MAX_COPY).min(MAX_COPY);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() && m.len() as usize <= max => match std::fs::read(&path) {
            Ok(bytes) => json!({ "ok": true, "content": b64(&bytes), "result": {
                "deviceIdentifier": dev.identifier, "domainType": "appDataContainer", "domainIdentifier": bundle, "source": source,
                "files": [{ "path": source, "size": bytes.len() }],
            } }),
            Err(e) => fail("NSPOSIXErrorDomain", 5, &e.to_string()),
        },
        Ok(m) if m.is_file() => fail("NSPOSIXErrorDomain", 27, "The file is too large to copy."),
        _ => fail("NSCocoaErrorDomain", 4, &format!("The file “{source}” couldn't be opened because there is no such file.")),
    }
}

fn install(dev: &Arc<Device>, req: &Value) -> Value {
    let info = &req["info"];
    match crate::lifecycle::install(dev, info) {
        Ok(spec) => {
            let app_uuid = uuid_from(&format!("{}/{}", dev.udid, spec.bundle_id));
            json!({ "ok": true, "result": {
                "deviceIdentifier": dev.identifier,
                "installedApplications": [{
                    "bundleID": spec.bundle_id, "databaseSequenceNumber": dev.truth_len(), "databaseUUID": uuid_from(&dev.udid),
                    "installationURL": format!("file:///private/var/containers/Bundle/Application/{app_uuid}/{}.app/", spec.name.replace(' ', "")),
                    "launchServicesIdentifier": "unknown", "options": {},
                }],
            } })
        }
        Err(e) => fail(CORE_DEVICE, 3002, &format!("Failed to install the app: {e}")),
    }
}

fn launch(dev: &Arc<Device>, req: &Value) -> Value {
    let Some(bundle) = req["bundleId"].as_str() else { return fail(CORE_DEVICE, 1, "A bundle identifier is required.") };
    let terminate = req["terminateExisting"].as_bool().unwrap_or(false);
    let name = dev.st.lock().unwrap().apps.get(bundle).map(|a| a.spec.name.replace(' ', ""));
    match crate::lifecycle::launch(dev, bundle, terminate, "devicectl") {
        Ok((pid, _)) => {
            let app_uuid = uuid_from(&format!("{}/{bundle}", dev.udid));
            let name = name.unwrap_or_default();
            json!({ "ok": true, "result": {
                "deviceIdentifier": dev.identifier,
                "launchOptions": { "activatedWhenStarted": true, "arguments": [], "environmentVariables": { "TERM": "dumb" }, "platformSpecificOptions": {}, "startStopped": false, "terminateExistingInstances": terminate, "user": { "active": true } },
                "process": { "auditToken": [4294967295u64, 501, 501, 501, 501, pid, 0, 0], "executable": format!("file:///private/var/containers/Bundle/Application/{app_uuid}/{name}.app/{name}"), "processIdentifier": pid },
            } })
        }
        Err(crate::lifecycle::LaunchError::NotInstalled) => fail("FBSOpenApplicationServiceErrorDomain", 4, &format!("The request to open \"{bundle}\" failed: the application is not installed.")),
        Err(e) => fail(CORE_DEVICE, 1, &format!("The app failed to launch: {e:?}")),
    }
}

fn screenshot(dev: &Arc<Device>) -> Value {
    let tree = {
        let st = dev.st.lock().unwrap();
        st.foreground.clone().and_then(|b| crate::native::current(dev, &st, &b, true)).map(|t| t.0)
    };
    let tree = tree.unwrap_or_else(|| {
        // The home screen: an empty window.
        let (w, h) = dev.screen_points(&dev.st.lock().unwrap().orientation);
        crate::native::layout(&crate::scenario::AppSpec::plain("com.apple.springboard", "SpringBoard", "1", "1").screens[0], &Default::default(), (w, h), "portrait", vec![])
    });
    let (w, h, png) = crate::screenshot::render(&tree, dev.scale());
    json!({ "ok": true, "content": b64(&png), "result": { "deviceIdentifier": dev.identifier, "width": w, "height": h, "format": "png" } })
}
