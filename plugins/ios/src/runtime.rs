//! How a command reaches one app's SDK: the call's [`Target`] turned into a
//! verified [`sdk::Connection`] (devicectl, device selection, tunnel checks,
//! descriptor copy and validation, endpoint — `aab_ios_transport::sdk::connect`,
//! shared with the WDA plugin) and the reply facts every SDK command repeats.

use aab_ios_transport::Deadline;
use aab_ios_transport::Devicectl;
use aab_ios_transport::sdk::{self, Connection, Overrides};
use aab_plugin_api::ProviderError;
use serde_json::Value;

/// Which app on which device, and how to reach it.
#[derive(Clone, Debug, Default)]
pub struct Target {
    pub device_id: String,
    pub bundle_id: String,
    pub overrides: Overrides,
    pub devicectl: Option<String>,
}

impl Target {
    /// Malformed overrides are refused before any device access.
    pub fn check(&self) -> Result<(), ProviderError> {
        self.overrides.check()
    }

    pub fn devicectl(&self) -> Devicectl {
        Devicectl::resolve(self.devicectl.as_deref())
    }

    pub async fn connect(&self, deadline: Deadline) -> Result<Connection, ProviderError> {
        sdk::connect(&self.devicectl(), &self.device_id, &self.bundle_id, &self.overrides, deadline).await
    }
}

/// `v` with the identity facts of `conn`, which replace same-named fields: the
/// device and runtime are what the connection proved, not what a body claims.
pub fn with_facts(mut v: Value, conn: &Connection) -> Value {
    if let (Value::Object(m), Value::Object(f)) = (&mut v, conn.facts()) {
        for (k, x) in f {
            m.insert(k, x);
        }
    }
    v
}

/// The selected device, its developer tunnel checked (device-level commands).
pub struct Device {
    pub devicectl: Devicectl,
    pub record: aab_ios_transport::DeviceRecord,
}

/// devicectl `list devices`, selection and the developer tunnel checks.
pub async fn device(device_id: &str, devicectl: Option<&str>, deadline: Deadline) -> Result<Device, ProviderError> {
    let dc = Devicectl::resolve(devicectl);
    let devices = dc.list_devices(aab_ios_transport::devicectl::step(deadline, 30)).await?;
    let record = aab_ios_transport::select_device(&devices, device_id)?;
    aab_ios_transport::require_developer_tunnel(&record)?;
    Ok(Device { devicectl: dc, record })
}
