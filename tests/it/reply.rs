//! Public reply assembly through the CLI: `control` keeps an operation's
//! continuation facts when an extractor replaced the value, and `_feedback` on a
//! plugin command's object result follows the `feedback` option (auto|full|off).

use std::time::{Duration, Instant};

use aab_e2e::TestEnv;
use serde_json::{Value, json};

const EXTRACT_ONE: &str = r#"{"mode":"script","language":"javascript","source":"function main(ctx) { return 1; }"}"#;

#[test]
fn control_keeps_script_continuation_facts_under_extract() {
    let env = TestEnv::new();
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": "exports.main = async (ctx) => ({answer: 42});"});
    env.aab_ok(&["script", "--operation", "start", "--operation-id", "ctl-1", "--script", &spec.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = env.aab_ok(&["script", "--operation", "wait", "--operation-id", "ctl-1", "--wait-ms", "5000"]);
        if v["value"]["status"] == json!("completed") {
            break;
        }
        assert!(!["failed", "cancelled"].contains(&v["value"]["status"].as_str().unwrap_or_default()), "script ended: {v}");
        assert!(Instant::now() < deadline, "script did not complete: {v}");
    }
    let run = env.aab(&["script", "--operation", "status", "--operation-id", "ctl-1", "--extract", EXTRACT_ONE]);
    let body = env.expect_ok(&run, "script status with an extract");
    println!("script status control under extract: {}", body["control"]);
    assert_eq!(body["value"], json!(1), "{body}");
    let c = &body["control"];
    assert_eq!((c["operationId"].clone(), c["status"].clone()), (json!("ctl-1"), json!("completed")), "{body}");
    assert!(c["eventSequence"].is_u64(), "{body}");
    assert!(c["resultRef"].is_object(), "{body}");
    assert!(c.get("pendingQuestion").is_none(), "null continuation facts are dropped: {body}");
    // Without extract the same facts are there too (the value is the original).
    let body = env.aab_ok(&["script", "--operation", "status", "--operation-id", "ctl-1"]);
    assert_eq!(body["control"]["resultRef"], body["value"]["resultRef"], "{body}");
}

#[test]
fn feedback_follows_the_feedback_option() {
    let env = TestEnv::new();
    env.install_fixtures();
    let auto = env.aab_ok(&["fixture-echo", "--message", "hi"]);
    let f = &auto["value"]["_feedback"];
    println!("_feedback auto: {f}");
    assert_eq!((f["status"].clone(), f["mode"].clone()), (json!("completed"), json!("auto")), "{auto}");
    assert_eq!(f["dispatch"]["command"], json!("fixture-echo"), "{f}");
    assert_eq!(f["dispatch"]["serializedByTarget"], json!(true), "{f}");
    assert!(f["timings"]["durationMs"].is_u64() && f.get("evidence").is_none(), "auto is compact: {f}");

    let full = env.aab_ok(&["fixture-echo", "--message", "hi", "--feedback", "full", "--request-id", "fb-1"]);
    let f = &full["value"]["_feedback"];
    println!("_feedback full: {f}");
    assert_eq!(f["mode"], json!("full"), "{full}");
    assert_eq!(f["dispatch"]["requestId"], json!("fb-1"), "{f}");
    for k in ["requestedAtMs", "startedAtMs", "completedAtMs", "queueWaitMs", "durationMs"] {
        assert!(f["timings"][k].is_u64(), "timings.{k}: {f}");
    }
    assert!(f["target"]["kind"].is_string() && f["target"]["key"].is_string() && f["target"]["platform"].is_string(), "{f}");
    assert!(f["evidence"].is_array() && f["outcome"].is_object(), "{f}");

    let off = env.aab_ok(&["fixture-echo", "--message", "hi", "--feedback", "off"]);
    assert!(off["value"].get("_feedback").is_none(), "off returns the provider result unchanged: {off}");
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().filter(|k| *k != "_feedback").cloned().collect() };
    assert_eq!(keys(&off["value"]), keys(&auto["value"]), "off = the provider's own object");
    assert_eq!(off["value"]["echo"], json!("hi"));
}
