//! `aab demo`: a short JavaScript Script against the sample app's form — the same
//! observe → input → wait flow, driven by a program through `ctx.call`, with a
//! host-verified assertion and a persisted result. Called once from `demo.rs`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

const SOURCE: &str = r#"
const find = (dom, id) => dom.result.dom.controls.find((c) => c.id === id);
exports.main = async (ctx) => {
  const dom = await ctx.call('web-dom', {});
  if (!dom.ok) throw new Error('web-dom: ' + dom.error.code);
  const name = find(dom, 'name');
  const input = await ctx.call('web-input', { selector: { elementId: name.elementId }, value: ctx.inputs.name });
  ctx.progress({ step: 'renamed', ok: input.ok });
  const after = await ctx.call('web-dom', {});
  const verdict = await ctx.assert({ name: 'name field updated', condition: find(after, 'name').value === ctx.inputs.name, evidence: after.evidence });
  return { name: ctx.inputs.name, verdict: verdict.verdict, calls: 3 };
};
"#;

/// Run the Script through `call` (the demo's public-client call) against `target`
/// (`{sessionId, runtimeEpoch}`); `say` prints one demo line.
pub fn run(call: &mut dyn FnMut(&str, Value) -> Result<Value, Value>, say: &dyn Fn(&str), target: &Value) -> Result<(), String> {
    let mut script_target = target.clone();
    script_target["platform"] = json!("web");
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": SOURCE, "target": script_target, "inputs": {"name": "Grace Hopper"}, "policy": {"timeoutMs": 30000}});
    let fail = |what: &str, e: Value| format!("script {what} failed: {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""));
    let started = Instant::now();
    let v = call("script", json!({"operation": "start", "script": spec})).map_err(|e| fail("start", e))?;
    let id = v["operationId"].as_str().unwrap_or_default().to_string();
    say(&format!("script start: JavaScript operation {id} (hash {}…)", v["hash"].as_str().unwrap_or("").chars().take(12).collect::<String>()));
    let mut after = 0;
    let status = loop {
        let w = call("script", json!({"operation": "wait", "operationId": id, "afterSequence": after, "waitMs": 5000})).map_err(|e| fail("wait", e))?;
        after = w["eventSequence"].as_u64().unwrap_or(after);
        let s = w["status"].as_str().unwrap_or("").to_string();
        if ["completed", "failed", "cancelled"].contains(&s.as_str()) || started.elapsed() > Duration::from_secs(40) {
            break w;
        }
    };
    if status["status"] != json!("completed") {
        return Err(format!("script ended {}: {} {}", status["status"], status["error"], status["message"]));
    }
    let r = call("script", json!({"operation": "result", "operationId": id})).map_err(|e| fail("result", e))?;
    say(&format!(
        "script result: {} — assertion {}, {} events, persisted as {} ({} ms)",
        r["result"]["name"],
        r["result"]["verdict"].as_str().unwrap_or("?"),
        after,
        r["resultRef"]["evidenceId"].as_str().unwrap_or("?"),
        started.elapsed().as_millis()
    ));
    Ok(())
}
