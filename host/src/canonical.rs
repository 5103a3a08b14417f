//! Canonical JSON (RFC 8785 JCS): sorted keys, compact, ECMAScript number
//! formatting. Used for fingerprints, request digests and evidence checksums so
//! the same value always hashes the same way.

use serde_json::Value;

pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&format_number(n)),
        Value::String(s) => out.push_str(&serde_json::to_string(s).expect("string serialises")),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // JCS sorts by UTF-16 code units.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("key serialises"));
                out.push(':');
                write_value(&map[*k], out);
            }
            out.push('}');
        }
    }
}

/// ECMAScript Number::toString for finite doubles (integers print without a
/// fraction; exponent form outside 1e-7..1e21 with an explicit sign).
fn format_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f == 0.0 {
        return "0".into();
    }
    if f.fract() == 0.0 && f.abs() < 1e21 {
        return format!("{f:.0}");
    }
    // Shortest round-trip digits from Rust's `{:e}` formatting.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("scientific format");
    let exp: i32 = exp.parse().expect("exponent");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let k = digits.len() as i32;
    let n_pos = exp + 1; // position of the decimal point relative to digits
    let mut s = String::new();
    if negative {
        s.push('-');
    }
    if k <= n_pos && n_pos <= 21 {
        s.push_str(&digits);
        s.extend(std::iter::repeat_n('0', (n_pos - k) as usize));
    } else if 0 < n_pos && n_pos <= 21 {
        s.push_str(&digits[..n_pos as usize]);
        s.push('.');
        s.push_str(&digits[n_pos as usize..]);
    } else if -6 < n_pos && n_pos <= 0 {
        s.push_str("0.");
        s.extend(std::iter::repeat_n('0', (-n_pos) as usize));
        s.push_str(&digits);
    } else {
        let e = n_pos - 1;
        s.push_str(&digits[..1]);
        if k > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if e >= 0 { '+' } else { '-' });
        s.push_str(&e.abs().to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_and_formats_numbers_like_ecmascript() {
        let v = json!({"b": 1, "a": [1.5, 1e21, 1e-7, 0.000001, 100.0, -0.0, 123456789012.0], "é": "x\u{1}"});
        assert_eq!(to_canonical_string(&v), r#"{"a":[1.5,1e+21,1e-7,0.000001,100,0,123456789012],"b":1,"é":"x\u0001"}"#);
    }
}
