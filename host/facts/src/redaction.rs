//! Write-side redaction (policy `aab.redaction/v1`): everything the FactStore
//! persists passes through [`redact`] first, so credentials never reach disk.
//!
//! Rules, applied to a deep copy of the value:
//! - **Sensitive keys** (lowercased, non-alphanumerics removed): `password`,
//!   `passwd`, `pwd`, `passcode`, `token`, `secret`, `apikey`, `authorization`,
//!   `cookie`, `credential(s)`, `privatekey`, `passphrase`, and any key ending in
//!   `password`, `token`, `secret`, `apikey`, `privatekey` or `passphrase`. The
//!   whole value becomes `"[REDACTED]"`; `null` and booleans are kept because
//!   they carry no secret (`password: true` is the "is a password field" flag).
//! - **JSON inside strings** is parsed, redacted with these same rules and
//!   re-serialised only when something changed or the text had duplicate keys
//!   (a duplicate could hide a second secret the parser dropped); otherwise the
//!   original bytes stay. A key ending in `base64` holding canonical base64 of
//!   UTF-8 JSON is treated the same way (response snapshots); other base64 is
//!   opaque and kept verbatim.
//! - **Text** (every other string): URL passwords (`user:pass@`), sensitive
//!   query/fragment parameters, token path segments, JWTs, `Bearer`/`Basic`
//!   credentials, `authorization:` header values, `name=value`/`name: value`
//!   assignments whose name is sensitive (quotes preserved), and the
//!   `text`/`value` attributes of Android UI XML nodes marked `password="true"`.
//!
//! The result lists the JSON Pointer of every changed value (`/a/b`, and
//! `/a#/inner` for a change inside JSON embedded in the string at `/a`) so a
//! reader knows what was removed. Redaction is idempotent.

use std::cell::Cell;
use std::fmt;

use base64::Engine as _;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical;

/// The policy id written into every [`Representation`].
pub const POLICY: &str = "aab.redaction/v1";
/// The replacement for every removed secret.
pub const REDACTED: &str = "[REDACTED]";

/// Nested JSON-in-string levels that are parsed; deeper text gets text rules only.
const MAX_EMBEDDED_DEPTH: usize = 8;

/// What the stored bytes are, relative to what the caller handed in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Representation {
    /// Always [`POLICY`].
    pub policy: String,
    /// True when the stored value differs from the original.
    pub redacted: bool,
    /// JSON Pointers of the values that were changed (empty when not redacted).
    pub paths: Vec<String>,
    /// sha256 of the canonical JSON of the original, unredacted value.
    pub original_sha256: String,
}

impl Representation {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A redacted copy and the pointers of what changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Redacted {
    pub value: Value,
    pub paths: Vec<String>,
}

impl Redacted {
    pub fn changed(&self) -> bool {
        !self.paths.is_empty()
    }

    /// The representation declaration for this redaction of `original`.
    pub fn representation(&self, original: &Value) -> Representation {
        Representation {
            policy: POLICY.to_string(),
            redacted: self.changed(),
            paths: self.paths.clone(),
            original_sha256: canonical::canonical_sha256(original),
        }
    }
}

/// Redact a JSON value (see the module docs for the rules).
pub fn redact(value: &Value) -> Redacted {
    let mut copy = value.clone();
    let mut paths = Vec::new();
    let mut ptr = String::new();
    walk(&mut copy, &mut ptr, None, &mut paths, 0);
    Redacted { value: copy, paths }
}

/// Redact one piece of free text (log lines, headers, XML). `None` = unchanged.
pub fn redact_text(text: &str) -> Option<String> {
    let mut paths = Vec::new();
    sanitize_string(text, None, "", &mut paths, 0)
}

/// True when a key (or query parameter / assignment name) names a secret.
pub fn is_sensitive_name(name: &str) -> bool {
    let norm = normalize(name);
    sensitive_normalized(&norm)
}

fn normalize(name: &str) -> String {
    name.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

fn sensitive_normalized(norm: &str) -> bool {
    const EXACT: &[&str] = &[
        "password",
        "passwd",
        "pwd",
        "passcode",
        "token",
        "secret",
        "apikey",
        "authorization",
        "proxyauthorization",
        "cookie",
        "setcookie",
        "credential",
        "credentials",
        "privatekey",
        "passphrase",
    ];
    const SUFFIX: &[&str] = &["password", "token", "secret", "apikey", "privatekey", "passphrase"];
    !norm.is_empty() && (EXACT.contains(&norm) || SUFFIX.iter().any(|s| norm.ends_with(s)))
}

/// Query/fragment parameters that carry credentials without a sensitive name.
fn sensitive_param(norm: &str) -> bool {
    sensitive_normalized(norm) || matches!(norm, "key" | "sig" | "signature" | "auth" | "code") || norm.ends_with("signature") || norm.ends_with("credential")
}

fn push_pointer_token(ptr: &mut String, token: &str) {
    ptr.push('/');
    for c in token.chars() {
        match c {
            '~' => ptr.push_str("~0"),
            '/' => ptr.push_str("~1"),
            c => ptr.push(c),
        }
    }
}

fn walk(value: &mut Value, ptr: &mut String, key: Option<&str>, paths: &mut Vec<String>, depth: usize) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let len = ptr.len();
                push_pointer_token(ptr, k);
                if is_sensitive_name(k) {
                    let keep = matches!(v, Value::Null | Value::Bool(_)) || matches!(v, Value::String(s) if s.is_empty() || s == REDACTED);
                    if !keep {
                        *v = Value::String(REDACTED.to_string());
                        paths.push(ptr.clone());
                    }
                } else {
                    walk(v, ptr, Some(k), paths, depth);
                }
                ptr.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                let len = ptr.len();
                push_pointer_token(ptr, &i.to_string());
                walk(v, ptr, key, paths, depth);
                ptr.truncate(len);
            }
        }
        Value::String(s) => {
            if let Some(new) = sanitize_string(s, key, ptr, paths, depth) {
                *s = new;
            }
        }
        _ => {}
    }
}

/// `Some(new)` when the string changed; records the pointer(s) in `paths`.
fn sanitize_string(s: &str, key: Option<&str>, ptr: &str, paths: &mut Vec<String>, depth: usize) -> Option<String> {
    if key.is_some_and(|k| normalize(k).ends_with("base64"))
        && let Some(decoded) = canonical_base64(s)
    {
        // Canonical base64 is opaque data unless it is UTF-8 JSON, which is
        // redacted like any other JSON and re-encoded canonically.
        if depth < MAX_EMBEDDED_DEPTH
            && let Some(inner) = std::str::from_utf8(&decoded).ok().and_then(parse_json_text)
        {
            let (mut inner, _) = inner;
            let mut inner_paths = Vec::new();
            let mut inner_ptr = String::new();
            walk(&mut inner, &mut inner_ptr, None, &mut inner_paths, depth + 1);
            if !inner_paths.is_empty() {
                paths.extend(inner_paths.into_iter().map(|p| format!("{ptr}#{p}")));
                let text = canonical::to_canonical_string(&inner);
                return Some(base64::engine::general_purpose::STANDARD.encode(text.as_bytes()));
            }
        }
        return None;
    }
    if depth < MAX_EMBEDDED_DEPTH
        && let Some((mut inner, duplicates)) = parse_json_text(s)
    {
        let mut inner_paths = Vec::new();
        let mut inner_ptr = String::new();
        walk(&mut inner, &mut inner_ptr, None, &mut inner_paths, depth + 1);
        if inner_paths.is_empty() && !duplicates {
            return None; // keep the caller's exact bytes
        }
        if inner_paths.is_empty() {
            paths.push(ptr.to_string());
        } else {
            paths.extend(inner_paths.into_iter().map(|p| format!("{ptr}#{p}")));
        }
        return Some(serde_json::to_string(&inner).unwrap_or_else(|_| REDACTED.to_string()));
    }
    let out = redact_free_text(s);
    if out.is_some() {
        paths.push(ptr.to_string());
    }
    out
}

fn canonical_base64(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(4) {
        return None;
    }
    let engine = &base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(s).ok()?;
    (engine.encode(&bytes) == s).then_some(bytes)
}

/// Parse a string that is a JSON object or array; reports duplicate keys.
fn parse_json_text(s: &str) -> Option<(Value, bool)> {
    let t = s.trim_start();
    if !(t.starts_with('{') || t.starts_with('[')) {
        return None;
    }
    let dup = Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(s);
    let value = DupSeed(&dup).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some((value, dup.get()))
}

/// Builds a `Value` while noticing repeated object keys (which `Value` would
/// silently collapse to the last one).
struct DupSeed<'a>(&'a Cell<bool>);

impl<'de> DeserializeSeed<'de> for DupSeed<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupSeed<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(DupSeed(self.0))? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(DupSeed(self.0))?;
            if out.insert(k, v).is_some() {
                self.0.set(true);
            }
        }
        Ok(Value::Object(out))
    }
}

// ---------------------------------------------------------------------------
// Text rules
// ---------------------------------------------------------------------------

/// Case-insensitive ASCII substring test; `needle` is lowercase.
fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.len() >= needle.len() && hay.windows(needle.len()).any(|w| w.iter().zip(needle).all(|(a, b)| a.to_ascii_lowercase() == *b))
}

/// Cheap pre-filter: every text rule needs one of these markers, so most
/// strings (labels, ids, numbers as text) skip the scanners entirely.
fn may_hold_secret(s: &str) -> bool {
    let b = s.as_bytes();
    const STEMS: &[&[u8]] = &[b"pass", b"pwd", b"token", b"secret", b"key", b"auth", b"cookie", b"credential", b"bearer", b"basic"];
    s.contains("://") || s.contains("eyJ") || STEMS.iter().any(|stem| contains_ci(b, stem))
}

fn redact_free_text(s: &str) -> Option<String> {
    if !may_hold_secret(s) {
        return None;
    }
    let mut cur: Option<String> = None;
    for rule in [redact_urls as fn(&str) -> Option<String>, redact_assignments, redact_auth_schemes, redact_jwts, redact_secure_xml] {
        let input = cur.as_deref().unwrap_or(s);
        if let Some(next) = rule(input) {
            cur = Some(next);
        }
    }
    cur.filter(|c| c != s)
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'
}

fn is_value_delim(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b',' | b';' | b'&' | b'"' | b'\'' | b'}' | b']' | b')' | b'<' | b'>' | b'\\')
}

/// Rewrites a string from a list of sorted, non-overlapping byte ranges.
fn splice(s: &str, ranges: &[(usize, usize)]) -> Option<String> {
    if ranges.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for &(a, b) in ranges {
        out.push_str(&s[last..a]);
        out.push_str(REDACTED);
        last = b;
    }
    out.push_str(&s[last..]);
    (out != s).then_some(out)
}

fn worth_redacting(v: &str) -> bool {
    !v.is_empty() && v != REDACTED && !matches!(v, "true" | "false" | "null")
}

/// `name=value` / `name: value` / `"name":"value"` where `name` is sensitive.
fn redact_assignments(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        let norm = normalize(&s[start..i]);
        if !sensitive_normalized(&norm) {
            continue;
        }
        let to_line_end = norm.ends_with("authorization") || norm == "cookie" || norm == "setcookie";
        let mut j = i;
        // closing quote of a quoted name, possibly JSON-escaped (`\"`)
        let mut quoted_name = false;
        if j + 1 < b.len() && b[j] == b'\\' && b[j + 1] == b'"' {
            j += 2;
            quoted_name = true;
        } else if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
            j += 1;
            quoted_name = true;
        }
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        if j >= b.len() || (b[j] != b':' && b[j] != b'=') {
            continue;
        }
        // `name: value` needs a quoted name or a space/quote after the colon;
        // a bare colon is how identifiers join parts (`ns:kind:op-secret:1`).
        let colon = b[j] == b':';
        j += 1;
        if colon && !quoted_name && !(j < b.len() && (b[j] == b' ' || b[j] == b'\t' || b[j] == b'"' || b[j] == b'\'' || b[j] == b'\\')) {
            continue;
        }
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        if j >= b.len() {
            break;
        }
        if s[j..].starts_with(REDACTED) {
            i = j + REDACTED.len();
            continue;
        }
        let (vs, ve) = if j + 1 < b.len() && b[j] == b'\\' && b[j + 1] == b'"' {
            let vs = j + 2;
            let ve = s[vs..].find("\\\"").map(|p| vs + p).unwrap_or(b.len());
            (vs, ve)
        } else if b[j] == b'"' || b[j] == b'\'' {
            let q = b[j];
            let vs = j + 1;
            let mut k = vs;
            while k < b.len() && b[k] != q {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            (vs, k.min(b.len()))
        } else if to_line_end {
            let ve = s[j..].find(['\r', '\n']).map(|p| j + p).unwrap_or(b.len());
            (j, ve)
        } else {
            let mut k = j;
            while k < b.len() && !is_value_delim(b[k]) {
                k += 1;
            }
            (j, k)
        };
        if worth_redacting(s[vs..ve].trim_end()) {
            ranges.push((vs, ve));
            i = ve;
        }
    }
    splice(s, &ranges)
}

/// `Bearer <token>` anywhere; `Basic <base64 of user:pass>` anywhere.
fn redact_auth_schemes(s: &str) -> Option<String> {
    if !contains_ci(s.as_bytes(), b"bearer") && !contains_ci(s.as_bytes(), b"basic") {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let b = s.as_bytes();
    let lb = lower.as_bytes();
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let scheme = if lb[i..].starts_with(b"bearer") {
            6
        } else if lb[i..].starts_with(b"basic") {
            5
        } else {
            i += 1;
            continue;
        };
        let boundary_before = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        let mut j = i + scheme;
        if !boundary_before || j >= b.len() || !(b[j] == b' ' || b[j] == b'\t') {
            i += 1;
            continue;
        }
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        let vs = j;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')) {
            j += 1;
        }
        let cred = &s[vs..j];
        let hit = if scheme == 6 { !cred.is_empty() } else { basic_credential(cred) };
        if hit {
            ranges.push((vs, j));
        }
        i = j.max(i + 1);
    }
    splice(s, &ranges)
}

fn basic_credential(cred: &str) -> bool {
    if cred.len() < 4 {
        return false;
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine.decode(cred).is_ok_and(|d| d.contains(&b':'))
}

/// JSON Web Tokens (`eyJ…` header, three base64url parts) anywhere.
fn redact_jwts(s: &str) -> Option<String> {
    if !s.contains("eyJ") {
        return None;
    }
    let b = s.as_bytes();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(p) = s[from..].find("eyJ") {
        let start = from + p;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b'-') {
            from = start + 3;
            continue;
        }
        let mut j = start;
        let mut parts = 1;
        let mut part_len = 0;
        let mut ok = true;
        while j < b.len() {
            let c = b[j];
            if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' {
                part_len += 1;
            } else if c == b'.' && parts < 3 {
                ok &= part_len >= 4;
                parts += 1;
                part_len = 0;
            } else {
                break;
            }
            j += 1;
        }
        if ok && parts == 3 && j - start >= 20 {
            ranges.push((start, j));
        }
        from = j.max(start + 3);
    }
    splice(s, &ranges)
}

/// Android UI XML: `text`/`value` attributes of nodes marked `password="true"`.
fn redact_secure_xml(s: &str) -> Option<String> {
    if !s.contains("password=\"true\"") {
        return None;
    }
    let b = s.as_bytes();
    let mut ranges = Vec::new();
    let mut i = 0;
    while let Some(p) = s[i..].find('<') {
        let start = i + p;
        let end = s[start..].find('>').map(|q| start + q).unwrap_or(b.len());
        let element = &s[start..end];
        if element.contains("password=\"true\"") {
            for attr in [" text=\"", " value=\""] {
                let mut from = 0;
                while let Some(q) = element[from..].find(attr) {
                    let vs = from + q + attr.len();
                    let ve = element[vs..].find('"').map(|r| vs + r).unwrap_or(element.len());
                    if worth_redacting(&element[vs..ve]) {
                        ranges.push((start + vs, start + ve));
                    }
                    from = ve;
                }
            }
        }
        i = end.max(start + 1);
        if i >= b.len() {
            break;
        }
    }
    ranges.sort_unstable();
    splice(s, &ranges)
}

/// Every `scheme://…` URL inside the string: password in the userinfo, a
/// token-like username, sensitive query/fragment parameters, token path
/// segments.
fn redact_urls(s: &str) -> Option<String> {
    if !s.contains("://") {
        return None;
    }
    let b = s.as_bytes();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(p) = s[from..].find("://") {
        let sep = from + p;
        let mut start = sep;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || matches!(b[start - 1], b'+' | b'.' | b'-')) {
            start -= 1;
        }
        let mut end = sep + 3;
        while end < b.len() && !(b[end].is_ascii_whitespace() || matches!(b[end], b'"' | b'\'' | b'<' | b'>' | b'`' | b'\\')) {
            end += 1;
        }
        if start < sep && b[start].is_ascii_alphabetic() {
            url_ranges(s, sep + 3, end, &mut ranges);
        }
        from = end.max(sep + 3);
    }
    splice(s, &ranges)
}

fn url_ranges(s: &str, auth_start: usize, end: usize, ranges: &mut Vec<(usize, usize)>) {
    let rest = &s[auth_start..end];
    let auth_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..auth_len];
    if let Some(at) = authority.rfind('@') {
        let userinfo = &authority[..at];
        match userinfo.find(':') {
            Some(colon) if worth_redacting(&userinfo[colon + 1..]) => ranges.push((auth_start + colon + 1, auth_start + at)),
            None if userinfo.len() >= 20 && userinfo.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') => {
                ranges.push((auth_start, auth_start + at))
            }
            _ => {}
        }
    }
    let path_start = auth_start + auth_len;
    let tail = &s[path_start..end];
    let path_len = tail.find(['?', '#']).unwrap_or(tail.len());
    // Path segments: the segment after a token marker, `marker=value`
    // segments, and the file after Moodle-style `tokenpluginfile.php`.
    let mut seg_start = path_start;
    let mut redact_next = false;
    for seg in s[path_start..path_start + path_len].split('/') {
        let a = seg_start;
        let z = a + seg.len();
        seg_start = z + 1;
        if seg.is_empty() {
            continue;
        }
        if redact_next {
            if worth_redacting(seg) {
                ranges.push((a, z));
            }
            redact_next = false;
            continue;
        }
        if let Some(eq) = seg.find('=') {
            if sensitive_param(&normalize(&seg[..eq])) && worth_redacting(&seg[eq + 1..]) {
                ranges.push((a + eq + 1, z));
            }
            continue;
        }
        let norm = normalize(seg);
        redact_next = norm == "tokenpluginfilephp" || sensitive_normalized(&norm);
    }
    // Query and fragment parameters.
    let mut q = path_start + path_len;
    while q < end {
        let part_start = q + 1;
        let part_end = s[part_start..end].find('#').map(|p| part_start + p).unwrap_or(end);
        let mut p = part_start;
        for pair in s[part_start..part_end].split('&') {
            let a = p;
            p += pair.len() + 1;
            if let Some(eq) = pair.find('=') {
                let name = percent_decode(&pair[..eq]);
                if sensitive_param(&normalize(&name)) && worth_redacting(&pair[eq + 1..]) {
                    ranges.push((a + eq + 1, a + pair.len()));
                }
            }
        }
        q = part_end;
    }
    ranges.sort_unstable();
    ranges.dedup();
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit() {
            let hexval = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
            out.push(hexval(b[i + 1]) * 16 + hexval(b[i + 2]));
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> String {
        redact_text(s).unwrap_or_else(|| s.to_string())
    }

    #[test]
    fn sensitive_keys_lose_their_whole_value() {
        let r = redact(&json!({"user": "ann", "Password": "hunter2", "auth": {"accessToken": {"v": 1}}, "x-api-key": 42, "isPassword": true, "pwd": null}));
        assert_eq!(
            r.value,
            json!({"user": "ann", "Password": REDACTED, "auth": {"accessToken": REDACTED}, "x-api-key": REDACTED, "isPassword": true, "pwd": null})
        );
        assert_eq!(r.paths, vec!["/Password", "/auth/accessToken", "/x-api-key"]);
    }

    #[test]
    fn text_rules() {
        assert_eq!(text("Authorization: Bearer abc.def\r\nHost: x"), "Authorization: [REDACTED]\r\nHost: x");
        assert_eq!(text("sent bearer eyAbc123 to server"), "sent bearer [REDACTED] to server");
        assert_eq!(text("Basic dXNlcjpwYXNz"), "Basic [REDACTED]");
        assert_eq!(text("Basic settings"), "Basic settings");
        assert_eq!(text("login password=hunter2 user=ann"), "login password=[REDACTED] user=ann");
        assert_eq!(text("{'access_token': 'abc', n: 1}"), "{'access_token': '[REDACTED]', n: 1}");
        assert_eq!(text(r#"x {\"password\":\"p4ss\"} y"#), r#"x {\"password\":\"[REDACTED]\"} y"#);
        assert_eq!(text("Forgot password? Reset it"), "Forgot password? Reset it");
        assert_eq!(text("script:checkpoint:op-secret:1:2"), "script:checkpoint:op-secret:1:2");
        assert_eq!(text("token: abc, pwd:'x'"), "token: [REDACTED], pwd:'[REDACTED]'");
        assert_eq!(
            text(r#"<node password="true" text="s3cret" value="v"/><node text="ok"/>"#),
            r#"<node password="true" text="[REDACTED]" value="[REDACTED]"/><node text="ok"/>"#
        );
        assert_eq!(text(r#"<node password="false" text="visible"/>"#), r#"<node password="false" text="visible"/>"#);
    }

    #[test]
    fn url_rules() {
        assert_eq!(
            text("https://ann:hunter2@example.com/a?x=1&access_token=abc#frag"),
            "https://ann:[REDACTED]@example.com/a?x=1&access_token=[REDACTED]#frag"
        );
        assert_eq!(text("see https://h/api/token/abcdef/info now"), "see https://h/api/token/[REDACTED]/info now");
        assert_eq!(text("https://h/webservice/tokenpluginfile.php/f00d/file.png"), "https://h/webservice/tokenpluginfile.php/[REDACTED]/file.png");
        assert_eq!(text("https://h/p/apikey=zzz/q"), "https://h/p/apikey=[REDACTED]/q");
        assert_eq!(text("https://h/cb#access_token=t0k&state=1"), "https://h/cb#access_token=[REDACTED]&state=1");
        assert_eq!(text("https://h/s3?X-Amz-Signature=abc&X-Amz-Credential=cred"), "https://h/s3?X-Amz-Signature=[REDACTED]&X-Amz-Credential=[REDACTED]");
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl";
        assert_eq!(text(&format!("https://h/v/{jwt}/x")), "https://h/v/[REDACTED]/x");
        assert_eq!(text("https://example.com/plain/path?q=1"), "https://example.com/plain/path?q=1");
    }

    #[test]
    fn embedded_json_is_redacted_and_declared() {
        let inner = json!({"user": "ann", "password": "hunter2"}).to_string();
        let r = redact(&json!({"body": inner, "plain": "{not json"}));
        assert_eq!(r.value["body"], json!(r#"{"user":"ann","password":"[REDACTED]"}"#));
        assert_eq!(r.paths, vec!["/body#/password"]);
        // untouched embedded JSON keeps its exact bytes
        let r = redact(&json!({"body": "{ \"a\" : 1 }"}));
        assert!(!r.changed());
        assert_eq!(r.value["body"], json!("{ \"a\" : 1 }"));
        // duplicate keys are re-serialised even when nothing was secret
        let r = redact(&json!({"body": "{\"a\":1,\"a\":2}"}));
        assert_eq!(r.value["body"], json!("{\"a\":2}"));
        // escaped key spelling is still a password key
        let r = redact(&json!({"body": "{\"pass\\u0077ord\":\"x\"}"}));
        assert_eq!(r.value["body"], json!("{\"password\":\"[REDACTED]\"}"));
    }

    #[test]
    fn base64_json_is_redacted_but_binary_base64_is_kept() {
        let engine = &base64::engine::general_purpose::STANDARD;
        let snap = engine.encode(canonical::to_canonical_string(&json!({"value": {"token": "t0k"}})));
        let r = redact(&json!({"snapshotBase64": snap, "pngBase64": engine.encode([0x89u8, b'P', b'N', b'G', 0, 1, 2])}));
        let back: Value = serde_json::from_slice(&engine.decode(r.value["snapshotBase64"].as_str().unwrap()).unwrap()).unwrap();
        assert_eq!(back, json!({"value": {"token": REDACTED}}));
        assert_eq!(r.paths, vec!["/snapshotBase64#/value/token"]);
    }

    #[test]
    fn redaction_is_idempotent() {
        let v = json!({
            "a": "Authorization: Bearer x y\nnext", "u": "https://a:b@h/token/t?sig=1",
            "j": "{\"password\":\"p\",\"n\":[\"Bearer zz\"]}", "k": "password = 'x' token:y",
        });
        let once = redact(&v);
        let twice = redact(&once.value);
        assert_eq!(twice.value, once.value);
        assert!(!twice.changed(), "{:?}", twice.paths);
    }
}
