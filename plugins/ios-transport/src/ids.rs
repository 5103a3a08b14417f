//! The identifier grammars both iOS peers share (protocols §4.3, §5.2): bundle
//! ids and runtime epochs are checked the same way whether an SDK descriptor or
//! a Runner descriptor names them, ids sent in a query string are encoded the
//! same way for either peer, and an error code or message a peer sends is
//! passed on only within the same bounds.

use serde_json::Value;

/// Longest error code passed on from a peer.
pub const MAX_PEER_CODE: usize = 128;
/// Longest peer message passed on (characters).
pub const MAX_PEER_MESSAGE: usize = 1024;

/// A peer's error code when it is one (`[A-Za-z0-9_.-]{1,128}`). Anything else
/// (empty, huge, spaces, control characters) is never relayed as a stable code:
/// the caller falls back to its own.
pub fn peer_code(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|c| (1..=MAX_PEER_CODE).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)))
}

/// A peer's message, cut to [`MAX_PEER_MESSAGE`] characters.
pub fn peer_message(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(|m| m.chars().take(MAX_PEER_MESSAGE).collect())
}

/// `[A-Za-z0-9_.-]{1,255}`: an app's or a Runner's bundle id.
pub fn is_bundle_id(s: &str) -> bool {
    (1..=255).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// `[A-Za-z0-9_-]{1,128}`: a process's runtime epoch (a UUID in practice).
pub fn is_runtime_epoch(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
}

/// Percent-encode a query value (RFC 3986 unreserved characters stay): action ids
/// and base64 cursors.
pub fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammars_and_their_bounds() {
        assert!(is_bundle_id("com.example-app_1") && is_bundle_id(&"a".repeat(255)));
        assert!(!is_bundle_id("") && !is_bundle_id(&"a".repeat(256)) && !is_bundle_id("com example") && !is_bundle_id("com/x"));
        assert!(is_runtime_epoch("5A0D7C1E-3B1F_x") && is_runtime_epoch(&"e".repeat(128)));
        assert!(!is_runtime_epoch("") && !is_runtime_epoch(&"e".repeat(129)) && !is_runtime_epoch("has.dot"));
    }

    #[test]
    fn only_code_shaped_peer_codes_are_relayed() {
        use serde_json::json;
        assert_eq!(peer_code(Some(&json!("ios_wda_action_busy"))), Some("ios_wda_action_busy"));
        for bad in [json!(""), json!("x".repeat(MAX_PEER_CODE + 1)), json!("two words"), json!("bad\ncode"), json!(42)] {
            assert_eq!(peer_code(Some(&bad)), None, "{bad}");
        }
        assert_eq!(peer_code(None), None);
        assert_eq!(peer_message(Some(&json!("m".repeat(5000)))).map(|m| m.chars().count()), Some(MAX_PEER_MESSAGE));
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("host-action-1.2_3~"), "host-action-1.2_3~");
        assert_eq!(query_value("eyJ+/= é"), "eyJ%2B%2F%3D%20%C3%A9");
    }
}
