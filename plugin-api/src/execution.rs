//! Device-side managed execution (`aab.<kind>-execution/v1`) as every provider
//! reads it: the one shape of a terminal receipt. The Android SDK, the iOS SDK and
//! the UIA/WDA runtimes all answer a settled action the same way, so whether a
//! reply settles *this* action is one check, not one per plugin.

use serde_json::{Value, json};

/// Whether `r` is the terminal result of exactly action `action_id` in runtime
/// `epoch` under execution schema `schema`: `settled:true`, its identity at the top
/// and in the exact 4-key `execution`, boolean `ok`/`dispatched`/`ambiguous`, an
/// error when not ok, and never ok while ambiguous.
pub fn is_settled_receipt(schema: &str, r: &Value, action_id: &str, epoch: &str) -> bool {
    let exec = json!({"schemaVersion": schema, "actionId": action_id, "runtimeEpoch": epoch, "settled": true});
    let ok = r.get("ok").and_then(Value::as_bool);
    r.get("settled") == Some(&Value::Bool(true))
        && r.get("actionId").and_then(Value::as_str) == Some(action_id)
        && r.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch)
        && r.get("execution") == Some(&exec)
        && ok.is_some()
        && r.get("dispatched").is_some_and(Value::is_boolean)
        && r.get("ambiguous").is_some_and(Value::is_boolean)
        && (ok == Some(true) || r.get("error").and_then(Value::as_str).is_some_and(|e| !e.is_empty()))
        && (ok == Some(false) || r.get("ambiguous") == Some(&Value::Bool(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_actions_well_formed_terminal_result_settles() {
        let s = "aab.h5-execution/v1";
        let good = json!({"ok": true, "settled": true, "dispatched": true, "ambiguous": false, "actionId": "a1", "runtimeEpoch": "E",
                          "execution": {"schemaVersion": s, "actionId": "a1", "runtimeEpoch": "E", "settled": true}});
        assert!(is_settled_receipt(s, &good, "a1", "E"));
        assert!(!is_settled_receipt(s, &good, "a2", "E"), "another action");
        assert!(!is_settled_receipt(s, &good, "a1", "F"), "another runtime");
        assert!(!is_settled_receipt("aab.flutter-execution/v1", &good, "a1", "E"), "another schema");
        let mut v = good.clone();
        v["ambiguous"] = json!(true);
        assert!(!is_settled_receipt(s, &v, "a1", "E"), "ok and ambiguous together");
        let mut v = good.clone();
        v["ok"] = json!(false);
        assert!(!is_settled_receipt(s, &v, "a1", "E"), "a failure needs its error");
        v["error"] = json!("h5_target_changed");
        assert!(is_settled_receipt(s, &v, "a1", "E"));
        let mut v = good;
        v["execution"]["extra"] = json!(1);
        assert!(!is_settled_receipt(s, &v, "a1", "E"), "execution has exactly four keys");
    }
}
