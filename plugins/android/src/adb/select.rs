//! Choosing the device a call addresses: by `serial` when given, else the only
//! connected device; each refusal is a contract error (`device_not_found`,
//! `serial_required`, `device_offline`, `device_unauthorized`) and never dispatched.
//! Also maps the adb server's `FAIL` texts about devices to the same codes.

use serde_json::json;

use super::server::{AdbServer, DeviceEntry};
use super::{Deadline, ProviderError, Result, codes, err};

/// The device chosen for a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    pub serial: String,
    pub entry: DeviceEntry,
}

/// Pick from a device list (pure, so every branch is unit-tested).
pub fn choose(devices: &[DeviceEntry], serial: Option<&str>) -> Result<Selected> {
    let entry = match serial {
        Some(s) => devices.iter().find(|d| d.serial == s).ok_or_else(|| {
            ProviderError::new(codes::DEVICE_NOT_FOUND, format!("no device with serial {s:?} is connected to the adb server")).with_field("serial").with_details(json!({"serial": s, "connected": serials(devices)})).not_dispatched()
        })?,
        None => match devices {
            [] => return Err(ProviderError::new(codes::DEVICE_NOT_FOUND, "no Android device is connected to the adb server").with_details(json!({"connected": []})).not_dispatched()),
            [only] => only,
            several => {
                return Err(ProviderError::new(codes::SERIAL_REQUIRED, format!("{} devices are connected; name one with `serial`", several.len())).with_field("serial").with_details(json!({"connected": serials(several)})).not_dispatched());
            }
        },
    };
    match entry.state.as_str() {
        "device" => Ok(Selected { serial: entry.serial.clone(), entry: entry.clone() }),
        "unauthorized" => Err(ProviderError::new(codes::DEVICE_UNAUTHORIZED, format!("device {} has not authorized this computer's adb key (accept the prompt on the device)", entry.serial))
            .with_details(json!({"serial": entry.serial, "state": entry.state}))
            .not_dispatched()),
        state => Err(ProviderError::new(codes::DEVICE_OFFLINE, format!("device {} is {state}, not online", entry.serial)).with_details(json!({"serial": entry.serial, "state": state})).not_dispatched()),
    }
}

fn serials(devices: &[DeviceEntry]) -> Vec<serde_json::Value> {
    devices.iter().map(|d| json!({"serial": d.serial, "state": d.state})).collect()
}

/// List the server's devices and choose one.
pub async fn select(server: &AdbServer, serial: Option<&str>, deadline: Deadline) -> Result<Selected> {
    let devices = server.devices(deadline).await?;
    choose(&devices, serial)
}

/// Map a `FAIL` message of a device-addressed request (`host:transport`,
/// `host-serial:…`) to the selection codes; other messages stay `adb_command_failed`.
pub fn map_transport_fail(serial: &str, what: &str, message: &str) -> ProviderError {
    let details = json!({"serial": serial, "operation": what, "adbMessage": message});
    let m = message.to_ascii_lowercase();
    if (m.contains("not found") && m.contains("device") && !m.contains("listener")) || m.contains("no devices") {
        ProviderError::new(codes::DEVICE_NOT_FOUND, format!("device {serial:?}: {message}")).with_field("serial").with_details(details).not_dispatched()
    } else if m.contains("unauthorized") {
        ProviderError::new(codes::DEVICE_UNAUTHORIZED, format!("device {serial:?}: {message}")).with_details(details).not_dispatched()
    } else if m.contains("offline") || m.contains("connecting") || m.contains("authorizing") {
        ProviderError::new(codes::DEVICE_OFFLINE, format!("device {serial:?}: {message}")).with_details(details).not_dispatched()
    } else if m.contains("more than one") {
        ProviderError::new(codes::SERIAL_REQUIRED, format!("{message}; name one with `serial`")).with_field("serial").with_details(details).not_dispatched()
    } else {
        let mut e = err::adb_fail(what, message);
        e.details = Some(details);
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(serial: &str, state: &str) -> DeviceEntry {
        DeviceEntry { serial: serial.into(), state: state.into(), product: None, model: None, device: None, transport_id: None }
    }

    #[test]
    fn one_device_without_serial_is_chosen() {
        assert_eq!(choose(&[dev("a", "device")], None).unwrap().serial, "a");
    }

    #[test]
    fn refusals_have_their_codes_and_are_never_dispatched() {
        let cases: Vec<(Vec<DeviceEntry>, Option<&str>, &str)> = vec![
            (vec![], None, codes::DEVICE_NOT_FOUND),
            (vec![dev("a", "device")], Some("b"), codes::DEVICE_NOT_FOUND),
            (vec![dev("a", "device"), dev("b", "device")], None, codes::SERIAL_REQUIRED),
            (vec![dev("a", "offline")], None, codes::DEVICE_OFFLINE),
            (vec![dev("a", "device"), dev("b", "unauthorized")], Some("b"), codes::DEVICE_UNAUTHORIZED),
            (vec![dev("a", "recovery")], Some("a"), codes::DEVICE_OFFLINE),
            (vec![dev("a", "no permissions")], Some("a"), codes::DEVICE_OFFLINE),
        ];
        for (devices, serial, code) in cases {
            let e = choose(&devices, serial).unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (code, Some(false)), "{devices:?} {serial:?}");
        }
        let e = choose(&[dev("a", "device"), dev("b", "offline")], None).unwrap_err();
        assert_eq!(e.details.unwrap()["connected"], json!([{"serial": "a", "state": "device"}, {"serial": "b", "state": "offline"}]));
    }

    #[test]
    fn two_devices_with_serial_pick_the_named_one() {
        let d = [dev("a", "device"), dev("b", "device")];
        assert_eq!(choose(&d, Some("b")).unwrap().serial, "b");
    }

    #[test]
    fn server_fail_texts_map_to_codes() {
        assert_eq!(map_transport_fail("x", "t", "device 'x' not found").error, codes::DEVICE_NOT_FOUND);
        assert_eq!(map_transport_fail("x", "t", "no devices/emulators found").error, codes::DEVICE_NOT_FOUND);
        assert_eq!(map_transport_fail("x", "t", "listener 'tcp:4000' not found").error, codes::ADB_COMMAND_FAILED);
        assert_eq!(map_transport_fail("x", "t", "device offline").error, codes::DEVICE_OFFLINE);
        assert_eq!(map_transport_fail("x", "t", "device unauthorized.\nThis adb server's $ADB_VENDOR_KEYS is not set").error, codes::DEVICE_UNAUTHORIZED);
        assert_eq!(map_transport_fail("x", "t", "more than one device/emulator").error, codes::SERIAL_REQUIRED);
        let e = map_transport_fail("x", "forward", "cannot bind listener: Address already in use");
        assert_eq!(e.error, codes::ADB_COMMAND_FAILED);
        assert_eq!(err::adb_message(&e), Some("cannot bind listener: Address already in use"));
    }
}
