//! Random identifiers: UUID v4 strings for runtime ids, action ids and response
//! ids, and hex tokens for endpoint authentication.

use std::time::{SystemTime, UNIX_EPOCH};

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("operating system random source");
    b
}

/// A random (version 4) UUID in canonical lowercase form.
pub fn uuid_v4() -> String {
    let mut b: [u8; 16] = random_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = crate::digest::hex(&b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// 32 random bytes as 64 lowercase hex characters.
pub fn token() -> String {
    crate::digest::hex(&random_bytes::<32>())
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
