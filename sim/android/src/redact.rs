//! The SDK's write-side redaction of network captures (aab-protocols §1.10), done
//! when a record is stored, so nothing sensitive ever leaves the app: sensitive
//! query parameters in `url`, sensitive header values, sensitive keys inside JSON
//! and form bodies become `[redacted]`; bodies are cut to 20000 characters.
//! Sensitive: `authorization`, `proxy-authorization`, `password`, `passwd`, `pwd`,
//! `passcode`, and any name ending in `password` or `token` (case-insensitive).

use serde_json::{Map, Value};

pub const MASK: &str = "[redacted]";
/// Longest body the SDK keeps (characters).
pub const BODY_MAX_CHARS: usize = 20_000;

pub fn sensitive(name: &str) -> bool {
    let k = name.trim().to_ascii_lowercase();
    matches!(k.as_str(), "authorization" | "proxy-authorization" | "password" | "passwd" | "pwd" | "passcode") || k.ends_with("password") || k.ends_with("token")
}

/// Redacts one network record in place.
pub fn network(item: &mut Map<String, Value>) {
    if let Some(Value::String(url)) = item.get("url") {
        let redacted = redact_url(url);
        item.insert("url".into(), Value::String(redacted));
    }
    for h in ["requestHeaders", "responseHeaders"] {
        if let Some(Value::Object(headers)) = item.get_mut(h) {
            for (k, v) in headers.iter_mut() {
                if sensitive(k) {
                    *v = Value::String(MASK.into());
                }
            }
        }
    }
    for b in ["requestBody", "responseBody"] {
        match item.get_mut(b) {
            Some(Value::String(body)) => *body = redact_body(body),
            Some(v @ (Value::Object(_) | Value::Array(_))) => redact_json(v),
            _ => {}
        }
    }
    item.insert("redacted".into(), Value::Bool(true));
}

fn redact_url(url: &str) -> String {
    let (rest, fragment) = match url.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (url, None),
    };
    let Some((base, query)) = rest.split_once('?') else { return url.to_string() };
    let mut out = format!("{base}?{}", redact_form(query));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// `a=1&token=x` → `a=1&token=[redacted]` (names compared URL-decoded).
fn redact_form(form: &str) -> String {
    form.split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if sensitive(&crate::sdk::url_decode(k)) => format!("{k}={MASK}"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn redact_json(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if sensitive(k) {
                    *x = Value::String(MASK.into());
                } else {
                    redact_json(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact_json),
        _ => {}
    }
}

fn redact_body(body: &str) -> String {
    let redacted = match serde_json::from_str::<Value>(body) {
        Ok(mut v @ (Value::Object(_) | Value::Array(_))) => {
            redact_json(&mut v);
            v.to_string()
        }
        _ if looks_like_form(body) => redact_form(body),
        _ => body.to_string(),
    };
    if redacted.chars().count() > BODY_MAX_CHARS { redacted.chars().take(BODY_MAX_CHARS).collect() } else { redacted }
}

fn looks_like_form(body: &str) -> bool {
    !body.is_empty() && !body.contains(char::is_whitespace) && body.split('&').all(|p| p.split_once('=').is_some_and(|(k, _)| !k.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_url_headers_and_bodies() {
        let mut item = json!({
            "url": "https://api.example.com/v1/login?client=android&access_token=abc#top",
            "requestHeaders": {"Authorization": "Bearer x", "Accept": "application/json"},
            "requestBody": "{\"email\":\"a@b.c\",\"password\":\"hunter2\",\"nested\":{\"refreshToken\":\"r\"}}",
            "responseBody": "user=a&pwd=secret",
        });
        network(item.as_object_mut().unwrap());
        assert_eq!(item["url"], "https://api.example.com/v1/login?client=android&access_token=[redacted]#top");
        assert_eq!(item["requestHeaders"], json!({"Authorization": "[redacted]", "Accept": "application/json"}));
        assert_eq!(serde_json::from_str::<Value>(item["requestBody"].as_str().unwrap()).unwrap(), json!({"email": "a@b.c", "password": "[redacted]", "nested": {"refreshToken": "[redacted]"}}));
        assert_eq!(item["responseBody"], "user=a&pwd=[redacted]");
        assert_eq!(item["redacted"], true);
    }

    #[test]
    fn plain_text_is_kept_and_long_bodies_are_cut() {
        let mut item = json!({"url": "https://x.test/a", "responseBody": "x".repeat(BODY_MAX_CHARS + 10), "requestBody": "hello world"});
        network(item.as_object_mut().unwrap());
        assert_eq!(item["url"], "https://x.test/a");
        assert_eq!(item["requestBody"], "hello world");
        assert_eq!(item["responseBody"].as_str().unwrap().len(), BODY_MAX_CHARS);
    }
}
