//! Which browser origins may use the Web endpoint. Browsers attach `Origin` to every
//! WebSocket upgrade and to cross-origin or state-changing HTTP requests, so
//! checking it keeps pages of other sites (and DNS-rebinding pages) from driving
//! the endpoint even when they guess or steal nothing else. The token still
//! authenticates; this policy only narrows who may present it.
//!
//! Allowed by default: no `Origin` header (non-browser clients), loopback origins
//! (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port) and the endpoint's own
//! origin. More exact origins come from `web-session-start --allowed-origins` and
//! the `AI_APP_BRIDGE_WEB_ALLOWED_ORIGINS` environment variable (comma-separated);
//! `*` allows every origin. `null` (file:// pages, sandboxed frames) is refused
//! unless listed. The `Host` header must name a loopback host, an IP literal, the
//! listen host or the host of an allowed origin (DNS-rebinding defence for GETs,
//! which browsers send without `Origin`).

use serde_json::{Value, json};

pub const ENV_ALLOWED_ORIGINS: &str = "AI_APP_BRIDGE_WEB_ALLOWED_ORIGINS";
/// Configured origins beyond the defaults.
pub const MAX_CONFIGURED: usize = 64;
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

#[derive(Clone, Debug, Default, PartialEq)]
pub struct OriginPolicy {
    /// Exact origins (normalised: lowercase, no trailing slash).
    pub allowed: Vec<String>,
    pub any: bool,
    /// The endpoint's own origin, `http://<host>:<port>`.
    pub own: String,
    listen_host: String,
}

/// `scheme://host[:port]` lowercased without a trailing slash; None when it is not
/// an origin (a path, userinfo, query or an unknown scheme).
pub fn normalise(origin: &str) -> Option<String> {
    let o = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    if o == "null" {
        return Some(o);
    }
    let (scheme, rest) = o.split_once("://")?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    Some(o)
}

/// The host part of `host[:port]` (brackets kept for IPv6).
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map(|i| &authority[..=i]).unwrap_or(authority);
    }
    authority.rsplit_once(':').map(|(h, _)| h).unwrap_or(authority)
}

fn is_ip_literal(host: &str) -> bool {
    host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok()
}

impl OriginPolicy {
    /// Defaults plus `configured` (already validated by the manifest) plus the
    /// environment list. Invalid environment entries are reported, not ignored.
    pub fn new(listen_host: &str, port: u16, configured: &[String], env: Option<&str>) -> Result<OriginPolicy, String> {
        let host = if listen_host.contains(':') { format!("[{listen_host}]") } else { listen_host.to_ascii_lowercase() };
        let mut p = OriginPolicy { own: format!("http://{host}:{port}"), listen_host: host, ..Default::default() };
        let from_env = env.into_iter().flat_map(|e| e.split(',')).map(str::trim).filter(|s| !s.is_empty());
        for raw in configured.iter().map(String::as_str).chain(from_env) {
            if raw == "*" {
                p.any = true;
                continue;
            }
            let o = normalise(raw).ok_or_else(|| format!("{raw:?} is not an origin (scheme://host[:port], `null` or `*`)"))?;
            if !p.allowed.contains(&o) {
                p.allowed.push(o);
            }
        }
        if p.allowed.len() > MAX_CONFIGURED {
            return Err(format!("at most {MAX_CONFIGURED} allowed origins"));
        }
        Ok(p)
    }

    /// Whether a request carrying this `Origin` header value (None = absent) may proceed.
    pub fn allows(&self, origin: Option<&str>) -> bool {
        let Some(raw) = origin else { return true };
        if self.any {
            return true;
        }
        let Some(o) = normalise(raw) else { return false };
        if o == self.own || self.allowed.contains(&o) {
            return true;
        }
        match o.split_once("://") {
            Some((_, authority)) => LOOPBACK_HOSTS.contains(&host_of(authority)),
            None => false,
        }
    }

    /// Whether the `Host` header (None = absent, HTTP/1.0) names this endpoint.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        let Some(h) = host else { return true };
        if self.any {
            return true;
        }
        let h = host_of(h.trim()).to_ascii_lowercase();
        if LOOPBACK_HOSTS.contains(&h.as_str()) || is_ip_literal(&h) || h == self.listen_host {
            return true;
        }
        self.allowed.iter().filter_map(|o| o.split_once("://")).any(|(_, a)| host_of(a) == h)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "default": ["no Origin header", "http(s)://localhost:*", "http(s)://127.0.0.1:*", "http(s)://[::1]:*", self.own],
            "allowed": self.allowed,
            "any": self.any,
            "env": ENV_ALLOWED_ORIGINS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(extra: &[&str], env: Option<&str>) -> OriginPolicy {
        OriginPolicy::new("127.0.0.1", 18180, &extra.iter().map(|s| s.to_string()).collect::<Vec<_>>(), env).unwrap()
    }

    #[test]
    fn defaults() {
        let p = policy(&[], None);
        for ok in [None, Some("http://127.0.0.1:5173"), Some("http://localhost"), Some("https://LOCALHOST:8443/"), Some("http://[::1]:3000"), Some("http://127.0.0.1:18180")] {
            assert!(p.allows(ok), "{ok:?}");
        }
        for bad in ["https://evil.example", "null", "http://localhost.evil.example", "http://127.0.0.1.evil.example:80", "file://", "", "http://user@localhost", "ws://localhost"] {
            assert!(!p.allows(Some(bad)), "{bad}");
        }
        assert!(p.host_allowed(Some("127.0.0.1:18180")));
        assert!(p.host_allowed(Some("localhost:18180")));
        assert!(p.host_allowed(Some("[::1]:18180")));
        assert!(p.host_allowed(Some("10.0.0.5:18180")));
        assert!(!p.host_allowed(Some("evil.example:18180")));
    }

    #[test]
    fn configured_and_env() {
        let p = policy(&["https://app.example.com"], Some(" http://dev.test:8080 , null"));
        assert!(p.allows(Some("https://app.example.com")));
        assert!(p.allows(Some("http://dev.test:8080")));
        assert!(p.allows(Some("null")));
        assert!(!p.allows(Some("https://app.example.com:444")));
        assert!(!p.allows(Some("http://app.example.com")));
        assert!(p.host_allowed(Some("dev.test:18180")));
        assert!(policy(&["*"], None).allows(Some("https://evil.example")));
        assert!(OriginPolicy::new("127.0.0.1", 1, &[], Some("not an origin")).is_err());
        assert!(OriginPolicy::new("127.0.0.1", 1, &["https://a/b".into()], None).is_err());
    }

    #[test]
    fn ipv6_listen_host() {
        let p = OriginPolicy::new("::1", 9000, &[], None).unwrap();
        assert_eq!(p.own, "http://[::1]:9000");
        assert!(p.allows(Some("http://[::1]:9000")));
    }
}
