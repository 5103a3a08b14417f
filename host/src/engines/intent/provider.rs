//! Provider-generic Intent mechanics driven only by manifest data
//! (`IntentProvider`): argument templates, summaries, selector resolution.

use aab_plugin_api::protocol::{IntentProvider, IntentSummarize};
use serde_json::{Map, Value, json};

/// Summary JSON budget (bytes).
pub const SUMMARY_MAX_BYTES: usize = 64 * 1024;

/// Values a template may refer to.
pub struct Sources<'a> {
    pub target: &'a Value,
    pub action: Option<&'a Value>,
    pub element: Option<&'a Value>,
    pub observation: Option<&'a Value>,
    pub require: Option<&'a Value>,
    pub watermark: Option<&'a Value>,
    /// The capture window the engine resolved for one stream read
    /// (`factCursor`, `afterActionId`), see `require` in docs/COMMAND_CONTRACT.md.
    pub window: Option<&'a Value>,
    /// The previous page of a paged stream read (continuation templates).
    pub page: Option<&'a Value>,
    /// The Intent's current `observationTarget` (validated against the provider's
    /// `observationTargetSchema`), if any.
    pub observation_target: Option<&'a Value>,
    /// A managed workflow's `{args, begin, actions}` (`${workflow.…}`).
    pub workflow: Option<&'a Value>,
}

impl<'a> Sources<'a> {
    pub fn new(target: &'a Value) -> Sources<'a> {
        Sources { target, action: None, element: None, observation: None, require: None, watermark: None, window: None, page: None, observation_target: None, workflow: None }
    }
}

/// `${a.b|c.d}`: the first alternative that has a value; an alternative `=JSON`
/// is that literal (a default, e.g. `${action.durationMs|=400}`, for a field
/// nested in an argument that must not be dropped when the action omits it).
fn lookup(sources: &Sources<'_>, path: &str) -> Option<Value> {
    path.split('|').find_map(|alt| match alt.trim().strip_prefix('=') {
        Some(literal) => serde_json::from_str(literal).ok(),
        None => lookup_one(sources, alt.trim()),
    })
}

fn lookup_one(sources: &Sources<'_>, path: &str) -> Option<Value> {
    let mut parts = path.split('.');
    let root = parts.next()?;
    let mut cur: Value = match root {
        "target" => sources.target.clone(),
        "action" => sources.action?.clone(),
        "element" => sources.element?.clone(),
        "observation" => sources.observation?.clone(),
        "require" => sources.require?.clone(),
        "watermark" => return sources.watermark.filter(|v| !v.is_null()).cloned(),
        "window" => sources.window?.clone(),
        "page" => sources.page?.clone(),
        "observationTarget" => sources.observation_target?.clone(),
        "workflow" => sources.workflow?.clone(),
        _ => return None,
    };
    for p in parts {
        cur = cur.get(p)?.clone();
    }
    (!cur.is_null()).then_some(cur)
}

/// Render one value; `None` if a placeholder inside has no value.
fn render_value(template: &Value, sources: &Sources<'_>) -> Option<Value> {
    match template {
        Value::String(s) if s.starts_with("${") && s.ends_with('}') => lookup(sources, &s[2..s.len() - 1]),
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(k.clone(), render_value(v, sources)?);
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => a.iter().map(|v| render_value(v, sources)).collect::<Option<Vec<_>>>().map(Value::Array),
        other => Some(other.clone()),
    }
}

/// Render a template only if every placeholder has a value (a continuation is
/// taken only when the previous page names all of it).
pub fn render_complete(template: &Value, sources: &Sources<'_>) -> Option<Map<String, Value>> {
    match render_value(template, sources)? {
        Value::Object(m) if !m.is_empty() => Some(m),
        _ => None,
    }
}

/// Render a text template: every `${…}` inside it is replaced by the value's text
/// (a string as is, anything else as JSON; no value: empty).
pub fn render_text(template: &str, sources: &Sources<'_>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let Some(j) = rest[i..].find('}') else { break };
        match lookup(sources, &rest[i + 2..i + j]) {
            Some(Value::String(t)) => out.push_str(&t),
            Some(v) => out.push_str(&v.to_string()),
            None => {}
        }
        rest = &rest[i + j + 1..];
    }
    out.push_str(rest);
    out
}

/// Render an arguments template: a top-level argument whose placeholders have no
/// value is left out.
pub fn render(template: &Value, sources: &Sources<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Value::Object(m) = template {
        for (k, v) in m {
            if let Some(r) = render_value(v, sources) {
                out.insert(k.clone(), r);
            }
        }
    }
    out
}

fn pointer<'a>(v: &'a Value, p: &str) -> Option<&'a Value> {
    if p.is_empty() { Some(v) } else { v.pointer(p) }
}

pub fn elements<'a>(s: &IntentSummarize, observation: &'a Value) -> Vec<&'a Value> {
    pointer(observation, &s.elements).and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
}

/// The element plus `identity` (its identity fields), for templates.
pub fn element_source(s: &IntentSummarize, element: &Value) -> Value {
    let mut e = element.clone();
    let identity: Map<String, Value> = s.identity_fields.iter().map(|f| (f.clone(), element.get(f).cloned().unwrap_or(Value::Null))).collect();
    if let Value::Object(m) = &mut e {
        m.insert("identity".into(), Value::Object(identity));
    }
    e
}

/// Resolve an action's selector against the committed observation: every
/// selector key must equal the mapped element field; exactly one element.
pub fn resolve<'a>(s: &IntentSummarize, observation: &'a Value, selector: &Value) -> Result<&'a Value, (String, usize)> {
    let Some(sel) = selector.as_object() else { return Err(("selector is not an object".into(), 0)) };
    for k in sel.keys() {
        if !s.selector_fields.contains_key(k) {
            return Err((format!("selector key `{k}` cannot be resolved against an observation of this provider"), 0));
        }
    }
    let matches: Vec<&Value> = elements(s, observation)
        .into_iter()
        .filter(|e| sel.iter().all(|(k, want)| s.selector_fields.get(k).is_some_and(|field| e.get(field) == Some(want))))
        .collect();
    match matches.len() {
        1 => Ok(matches[0]),
        0 => Err(("no element of the committed observation matches the selector".into(), 0)),
        n => Err((format!("{n} elements of the committed observation match the selector; use its elementId"), n)),
    }
}

/// Build the summary of one observation within `max_bytes`.
pub fn summarize(p: &IntentProvider, observation: &Value, raw_tree_id: &str, max_bytes: usize) -> Value {
    let s = &p.summarize;
    let mut page = Map::new();
    for (name, ptr) in &s.page {
        page.insert(name.clone(), pointer(observation, ptr).cloned().unwrap_or(Value::Null));
    }
    let body_limit = 12_000.min(max_bytes / 12);
    if let Some(ptr) = &s.body_text {
        let body = pointer(observation, ptr).and_then(Value::as_str).unwrap_or("");
        let cut: String = body.chars().take(body_limit).collect();
        page.insert("bodyTextTruncated".into(), json!(cut.len() < body.len()));
        page.insert("bodyText".into(), json!(cut));
    }
    let all = elements(s, observation);
    let nodes: Vec<Value> = all
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut n = Map::new();
            n.insert("nodeId".into(), json!(format!("{raw_tree_id}#{i}")));
            n.insert("sourceIndex".into(), json!(i));
            for f in &s.node_fields {
                if let Some(v) = e.get(f).filter(|v| !v.is_null()) {
                    let v = match v {
                        Value::String(t) if t.chars().count() > 300 => json!(t.chars().take(300).collect::<String>()),
                        other => other.clone(),
                    };
                    n.insert(f.clone(), v);
                }
            }
            Value::Object(n)
        })
        .collect();
    let source_truncated = s.source_truncated.as_deref().and_then(|ptr| pointer(observation, ptr)).and_then(Value::as_bool).unwrap_or(false);
    let build = |k: usize| {
        json!({
            "ok": true, "provider": p.provider, "rawTreeId": raw_tree_id, "screenshotId": null,
            "visited": all.len(), "truncated": source_truncated || k < nodes.len(),
            "reason": if k < nodes.len() { json!("max_bytes") } else { Value::Null },
            "sourceTruncated": source_truncated,
            "page": Value::Object(page.clone()), "nodes": &nodes[..k],
        })
    };
    let size = |v: &Value| serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX);
    let full = build(nodes.len());
    if size(&full) <= max_bytes {
        return full;
    }
    // Longest node prefix that fits (nodes come in document order; controls first).
    let (mut lo, mut hi) = (0usize, nodes.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if size(&build(mid)) <= max_bytes { lo = mid } else { hi = mid - 1 }
    }
    build(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_alternative_defaults_a_nested_field() {
        let target = json!({"serial": "s"});
        let given = json!({"durationMs": 900});
        let template = json!({"payload": {"action": "scroll", "durationMs": "${action.durationMs|=400}"}, "serial": "${target.serial}", "adb": "${target.adb}"});
        let omitted = json!({});
        let with = |a: &Value| Value::Object(render(&template, &Sources { action: Some(a), ..Sources::new(&target) }));
        assert_eq!(with(&given), json!({"payload": {"action": "scroll", "durationMs": 900}, "serial": "s"}));
        assert_eq!(with(&omitted), json!({"payload": {"action": "scroll", "durationMs": 400}, "serial": "s"}));
    }
}
