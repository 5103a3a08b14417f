//! Canonical JSON (RFC 8785, JCS) and the sha256 digests computed over it.
//!
//! Evidence checksums, archive manifests and fingerprints all hash this form, so
//! the same value hashes the same way in every process and in the original
//! Node host: object keys sorted by UTF-16 code units, no whitespace, strings
//! escaped exactly as ECMAScript `JSON.stringify` does, numbers printed with
//! ECMAScript `Number::toString`.

use std::fmt::Write as _;

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// The canonical JSON text of `value`.
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(value, &mut out, false);
    out
}

/// Canonical layout (sorted keys, compact) but integers beyond 2^53 printed
/// exactly, so a stored value reads back unchanged. Hashes always use
/// [`to_canonical_string`], which rounds such integers as JCS requires.
pub(crate) fn to_storage_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(value, &mut out, true);
    out
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex sha256 of the canonical JSON of `value`.
pub fn canonical_sha256(value: &Value) -> String {
    sha256_hex(to_canonical_string(value).as_bytes())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn write_value(value: &Value, out: &mut String, exact_ints: bool) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out, exact_ints),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, exact_ints);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // UTF-16 order differs from UTF-8 byte order only above the BMP
            // versus U+E000..U+FFFF, but JCS is defined on UTF-16, so sort on it.
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(v, out, exact_ints);
            }
            out.push('}');
        }
    }
}

/// `JSON.stringify` string escaping: the two mandatory escapes, the five short
/// control escapes, `\u00xx` (lowercase) for the other C0 controls, everything
/// else verbatim.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Integers that a double holds exactly print as integers; everything else
/// goes through the double, as it would in ECMAScript (JCS is defined on
/// IEEE-754 doubles, so an i64 beyond 2^53 hashes as the double it becomes).
fn write_number(n: &Number, out: &mut String, exact_ints: bool) {
    const EXACT: u64 = 1 << 53;
    if let Some(i) = n.as_i64() {
        if exact_ints || i.unsigned_abs() <= EXACT {
            let _ = write!(out, "{i}");
            return;
        }
    } else if let Some(u) = n.as_u64()
        && (exact_ints || u <= EXACT)
    {
        let _ = write!(out, "{u}");
        return;
    }
    // serde_json Numbers are always finite.
    write_double(n.as_f64().unwrap_or(0.0), out);
}

/// ECMAScript `Number::toString(x)` for a finite double (ECMA-262 §6.1.6.1.20),
/// built on Rust's shortest round-trip digits.
pub(crate) fn write_double(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0'); // covers -0 as well
        return;
    }
    let (digits, exp) = shortest_digits(x.abs());
    let k = digits.len() as i32;
    let n = exp + 1; // x = 0.digits × 10^n
    if x < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let e = n - 1;
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if e >= 0 { '+' } else { '-' });
        let _ = write!(out, "{}", e.abs());
    }
}

/// The fewest significant digits that read back as `x`, and the decimal
/// exponent of the first one. Among equally short candidates ECMAScript wants
/// the one closest to `x` (ties to even); Rust's shortest formatter may pick
/// another, so prefer the correctly rounded (half-even) digits of that length
/// whenever they also read back as `x`.
fn shortest_digits(x: f64) -> (String, i32) {
    fn split(sci: &str) -> (String, i32) {
        let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
        (mantissa.chars().filter(char::is_ascii_digit).collect(), exp.parse().unwrap_or(0))
    }
    let (digits, exp) = split(&format!("{x:e}"));
    let nearest = format!("{:.*e}", digits.len() - 1, x);
    if nearest.parse::<f64>() == Ok(x) {
        let (d, e) = split(&nearest);
        let trimmed = d.trim_end_matches('0');
        if !trimmed.is_empty() && trimmed.len() <= digits.len() {
            return (trimmed.to_string(), e);
        }
    }
    (digits, exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn double(bits: u64) -> String {
        let mut s = String::new();
        write_double(f64::from_bits(bits), &mut s);
        s
    }

    #[test]
    fn sorts_keys_and_formats_numbers_like_ecmascript() {
        let v = json!({"b": 1, "a": [1.5, 1e21, 1e-7, 0.000001, 100.0, -0.0, 123456789012.0], "é": "x\u{1}"});
        assert_eq!(to_canonical_string(&v), r#"{"a":[1.5,1e+21,1e-7,0.000001,100,0,123456789012],"b":1,"é":"x\u0001"}"#);
    }

    #[test]
    fn rfc8785_number_vectors() {
        // IEEE-754 bit patterns and their ECMAScript strings (RFC 8785 appendix B).
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, want) in cases {
            assert_eq!(double(*bits), *want, "bits {bits:#018x}");
        }
    }

    #[test]
    fn large_integers_hash_as_doubles_but_store_exactly() {
        assert_eq!(to_storage_string(&json!({"b": u64::MAX, "a": -9007199254740993i64})), "{\"a\":-9007199254740993,\"b\":18446744073709551615}");
        assert_eq!(to_canonical_string(&json!(9007199254740993u64)), "9007199254740992");
        assert_eq!(to_canonical_string(&json!(i64::MIN)), "-9223372036854776000");
        assert_eq!(to_canonical_string(&json!(-9007199254740992i64)), "-9007199254740992");
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let v = json!("\u{8}\u{c}\n\r\t\u{1f}\"\\/\u{7f}\u{2028}😀");
        assert_eq!(to_canonical_string(&v), "\"\\b\\f\\n\\r\\t\\u001f\\\"\\\\/\u{7f}\u{2028}😀\"");
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+FB01 sorts before U+1F600 in UTF-8 bytes but after it in UTF-16.
        let v = json!({"\u{1f600}": 1, "\u{fb01}": 2, "a": 3, "": 4});
        assert_eq!(to_canonical_string(&v), "{\"\":4,\"a\":3,\"\u{1f600}\":1,\"\u{fb01}\":2}");
    }

    #[test]
    fn canonical_text_round_trips_through_the_parser() {
        let v = json!([0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e308, 123.456e-300, 2.2250738585072014e-308]);
        let text = to_canonical_string(&v);
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(to_canonical_string(&back), text);
        assert_eq!(canonical_sha256(&back), canonical_sha256(&v));
    }
}
