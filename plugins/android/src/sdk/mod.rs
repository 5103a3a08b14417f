//! The SDK connection sequence (aab-protocols §2.1), run for EVERY request with no
//! cached port: read and validate the endpoint descriptor through `run-as`
//! ([`endpoint`]), reuse or create and then verify the adb forward to its
//! `localabstract` socket ([`forward`]), send exactly one HTTP request on its own
//! connection ([`http`]). Every failure before the HTTP request is written is
//! classified as not dispatched.

pub mod endpoint;
pub mod forward;
pub mod http;

use serde_json::Value;

use crate::adb::device::Device;
use crate::adb::{Deadline, Result};

/// An app that embeds the SDK on one device.
#[derive(Clone, Debug)]
pub struct SdkTarget {
    pub device: Device,
    pub package: String,
    /// The explicit host `port` of the call, if any.
    pub port: Option<u16>,
}

/// How a request reached the SDK (reported by commands such as `status`/`forward`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub descriptor: endpoint::Descriptor,
    pub forward: forward::Forward,
}

impl SdkTarget {
    /// Steps 1–4: descriptor, then the verified forward.
    pub async fn route(&self, deadline: Deadline) -> Result<Route> {
        let descriptor = endpoint::discover(&self.device, &self.package, deadline).await?;
        let forward = forward::ensure(&self.device.server, &self.device.serial, &descriptor.socket_name, self.port, deadline).await?;
        Ok(Route { descriptor, forward })
    }

    /// The whole sequence for one request. A `200` body with `ok:false` is the
    /// SDK's answer and is returned as-is for the command to interpret.
    pub async fn request(&self, method: &str, path: &str, body: Option<&Value>, deadline: Deadline) -> Result<(Route, http::Response)> {
        let route = self.route(deadline).await?;
        let response = http::request(route.forward.port, method, path, body, deadline).await?;
        Ok((route, response))
    }
}
