//! The host-side port that reaches the SDK's socket: reuse an existing exact adb
//! forward, or create one with `--no-rebind` (`tcp:0`, or the explicit `port`),
//! then verify the mapping in a fresh listing before any HTTP is sent. An explicit
//! `port` mapped to anything else is `bridge_forward_mismatch`. Also the checked
//! removal used by `remove-forward`.

use serde_json::json;

use crate::adb::server::{AdbServer, ForwardRule};
use crate::adb::{Deadline, ProviderError, Result, codes as adb_codes, err};

pub const BRIDGE_FORWARD_MISMATCH: &str = "bridge_forward_mismatch";

/// What to do about the forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// An exact mapping exists on this host port.
    Reuse(u16),
    /// Create `local` (`tcp:0` or `tcp:<port>`) with `--no-rebind`.
    Create(String),
}

fn remote_of(socket_name: &str) -> String {
    format!("localabstract:{socket_name}")
}

fn tcp_port(local: &str) -> Option<u16> {
    local.strip_prefix("tcp:")?.parse().ok().filter(|p| *p != 0)
}

fn mismatch(serial: &str, port: u16, found: Option<&ForwardRule>, expected_remote: &str) -> ProviderError {
    ProviderError::new(BRIDGE_FORWARD_MISMATCH, match found {
        Some(r) => format!("host port {port} forwards {} {} instead of {serial} {expected_remote}", r.serial, r.remote),
        None => format!("host port {port} does not forward {serial} {expected_remote}"),
    })
    .with_field("port")
    .with_details(json!({"serial": serial, "port": port, "expectedRemote": expected_remote, "found": found.map(|r| json!({"serial": r.serial, "local": r.local, "remote": r.remote}))}))
    .not_dispatched()
}

/// Decide from a listing (pure).
pub fn plan(rules: &[ForwardRule], serial: &str, socket_name: &str, port: Option<u16>) -> Result<Plan> {
    let remote = remote_of(socket_name);
    match port {
        Some(port) => match rules.iter().find(|r| tcp_port(&r.local) == Some(port)) {
            Some(r) if r.serial == serial && r.remote == remote => Ok(Plan::Reuse(port)),
            Some(r) => Err(mismatch(serial, port, Some(r), &remote)),
            None => Ok(Plan::Create(format!("tcp:{port}"))),
        },
        None => Ok(rules.iter().find(|r| r.serial == serial && r.remote == remote).and_then(|r| tcp_port(&r.local)).map(Plan::Reuse).unwrap_or_else(|| Plan::Create("tcp:0".into()))),
    }
}

/// Check that `port` maps exactly `serial` → the socket (pure).
pub fn verify(rules: &[ForwardRule], serial: &str, socket_name: &str, port: u16) -> Result<()> {
    let remote = remote_of(socket_name);
    match rules.iter().find(|r| tcp_port(&r.local) == Some(port)) {
        Some(r) if r.serial == serial && r.remote == remote => Ok(()),
        found => Err(mismatch(serial, port, found, &remote)),
    }
}

/// The forward's host port and whether it was reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forward {
    pub port: u16,
    pub reused: bool,
}

/// Reuse or create the forward to `socket_name`, then verify it.
pub async fn ensure(server: &AdbServer, serial: &str, socket_name: &str, port: Option<u16>, deadline: Deadline) -> Result<Forward> {
    let rules = server.list_forwards(deadline).await?;
    let (host_port, reused) = match plan(&rules, serial, socket_name, port)? {
        Plan::Reuse(p) => (p, true),
        Plan::Create(local) => {
            let created = match server.forward(serial, &local, &remote_of(socket_name), true, deadline).await {
                Ok(p) => p,
                // `--no-rebind` refused: the explicit port was taken meanwhile.
                Err(e) if port.is_some() && e.error == adb_codes::ADB_COMMAND_FAILED => {
                    let rules = server.list_forwards(deadline).await?;
                    let p = port.unwrap_or_default();
                    return Err(match rules.iter().find(|r| tcp_port(&r.local) == Some(p)) {
                        Some(r) => mismatch(serial, p, Some(r), &remote_of(socket_name)),
                        None => e,
                    });
                }
                Err(e) => return Err(e),
            };
            (created.ok_or_else(|| err::command_failed("forward", "adb reported no host port"))?, false)
        }
    };
    verify(&server.list_forwards(deadline).await?, serial, socket_name, host_port)?;
    Ok(Forward { port: host_port, reused })
}

/// `remove-forward`: the rule on `port` must belong to `serial`, then it is removed.
pub async fn remove(server: &AdbServer, serial: &str, port: u16, deadline: Deadline) -> Result<ForwardRule> {
    let rules = server.list_forwards(deadline).await?;
    let Some(rule) = rules.into_iter().find(|r| tcp_port(&r.local) == Some(port)) else {
        return Err(ProviderError::new(BRIDGE_FORWARD_MISMATCH, format!("no adb forward uses host port {port}")).with_field("port").with_details(json!({"serial": serial, "port": port, "found": null})).not_dispatched());
    };
    if rule.serial != serial {
        return Err(ProviderError::new(BRIDGE_FORWARD_MISMATCH, format!("host port {port} forwards device {}, not {serial}", rule.serial))
            .with_field("serial")
            .with_details(json!({"serial": serial, "port": port, "found": {"serial": rule.serial, "local": rule.local, "remote": rule.remote}}))
            .not_dispatched());
    }
    server.kill_forward(serial, &rule.local, deadline).await?;
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(serial: &str, local: &str, remote: &str) -> ForwardRule {
        ForwardRule { serial: serial.into(), local: local.into(), remote: remote.into() }
    }

    #[test]
    fn an_exact_mapping_is_reused_else_tcp0_is_created() {
        let rules = vec![rule("other", "tcp:4000", "localabstract:aab-sdk-1"), rule("s", "tcp:4001", "localabstract:aab-sdk-0"), rule("s", "tcp:4002", "localabstract:aab-sdk-1")];
        assert_eq!(plan(&rules, "s", "aab-sdk-1", None).unwrap(), Plan::Reuse(4002));
        assert_eq!(plan(&rules, "s", "aab-sdk-2", None).unwrap(), Plan::Create("tcp:0".into()));
        // A non-tcp local is not reusable.
        assert_eq!(plan(&[rule("s", "localabstract:x", "localabstract:aab-sdk-1")], "s", "aab-sdk-1", None).unwrap(), Plan::Create("tcp:0".into()));
    }

    #[test]
    fn an_explicit_port_must_match_serial_and_socket() {
        let rules = vec![rule("s", "tcp:4000", "localabstract:aab-sdk-1"), rule("t", "tcp:4001", "localabstract:aab-sdk-1")];
        assert_eq!(plan(&rules, "s", "aab-sdk-1", Some(4000)).unwrap(), Plan::Reuse(4000));
        assert_eq!(plan(&rules, "s", "aab-sdk-1", Some(4005)).unwrap(), Plan::Create("tcp:4005".into()));
        for (port, socket) in [(4001, "aab-sdk-1"), (4000, "aab-sdk-2")] {
            let e = plan(&rules, "s", socket, Some(port)).unwrap_err();
            assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (BRIDGE_FORWARD_MISMATCH, Some("port"), Some(false)));
        }
    }

    #[test]
    fn verification_requires_the_exact_mapping() {
        let rules = vec![rule("s", "tcp:4000", "localabstract:aab-sdk-1")];
        verify(&rules, "s", "aab-sdk-1", 4000).unwrap();
        assert_eq!(verify(&rules, "s", "aab-sdk-1", 4001).unwrap_err().error, BRIDGE_FORWARD_MISMATCH);
        assert_eq!(verify(&rules, "s", "aab-sdk-2", 4000).unwrap_err().error, BRIDGE_FORWARD_MISMATCH);
        assert_eq!(verify(&rules, "t", "aab-sdk-1", 4000).unwrap_err().error, BRIDGE_FORWARD_MISMATCH);
    }
}
