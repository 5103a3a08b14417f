//! Identifiers the Runner mints (epochs, session ids) and the shape rules for
//! identifiers it receives (bundle ids, epochs, action and session ids).

/// A random RFC 4122 version-4 UUID, upper case like Foundation's `UUID().uuidString`.
pub fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    // getrandom only fails without an OS entropy source; a simulator cannot run there anyway.
    getrandom::fill(&mut b).expect("OS entropy source");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02X}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// `[A-Za-z0-9_.-]{1,255}` (protocols §4.1).
pub fn valid_bundle_id(s: &str) -> bool {
    (1..=255).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// `[A-Za-z0-9_-]{1,128}` (protocols §4.1).
pub fn valid_epoch(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
}

/// Action and session ids: 1..=256 visible ASCII characters (no spaces or controls),
/// so they embed safely in headers, query strings and log lines.
pub fn valid_token(s: &str) -> bool {
    (1..=256).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
}
