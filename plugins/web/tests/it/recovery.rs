//! A runtime restart: a new plugin instance (a second copy of the library) with
//! the same data dir and FactStore recovers a former runtime's WebDriver session
//! by its id, reports one that is gone as lost, and never pretends a local cdp
//! browser survived.

use std::sync::Arc;
use std::time::Duration;

use aab_webdriver::servers::Chromedriver;
use serde_json::json;

use crate::harness::{Plugin, Store};
use crate::pages::server;
use crate::webdriver::remote_session_exists;
use crate::{scratch, tag};

#[test]
fn a_new_runtime_recovers_webdriver_sessions_and_reports_lost_ones() {
    let cd = Chromedriver::start();
    let t = tag("restart");
    let data = scratch().join(format!("restart-{t}")).join("data");
    let store = Arc::new(Store::default());
    let a = Plugin::load_copy(&data, "epoch-R1", store.clone());
    let kept = format!("keep-{t}");
    let gone = format!("gone-{t}");
    let local = format!("local-{t}");
    let opened = a.call(json!({"operation": "open", "sessionId": kept, "endpoint": cd.url(), "url": server().url(&format!("/form?tag={t}"))}));
    let remote = opened.ok()["webdriverSessionId"].as_str().unwrap().to_string();
    let doomed = a.call(json!({"operation": "open", "sessionId": gone, "endpoint": cd.url(), "url": "about:blank"}));
    let doomed_remote = doomed.ok()["webdriverSessionId"].as_str().unwrap().to_string();
    let cdp = a.call(json!({"operation": "open", "sessionId": local, "engine": "cdp", "url": "about:blank"}));
    assert!(cdp.outcome.ok, "{:?}", cdp.outcome.error);
    // The second session ends behind the executor's back.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(cd.url()).unwrap());
        client.attach(&doomed_remote).delete(Duration::from_secs(10)).await.unwrap();
    });

    // "Runtime B": a new instance, the same data dir and FactStore.
    let b = Plugin::load_copy(&data, "epoch-R2", store);
    let status = b.call(json!({"operation": "status", "sessionId": kept}));
    let s = status.ok();
    assert_eq!((s["recovered"].as_bool(), s["recoveredFromRuntimeEpoch"].as_str(), s["runtimeEpoch"].as_str()), (Some(true), Some("epoch-R1"), Some("epoch-R2")));
    assert_eq!(s["webdriverSessionId"], remote.as_str());
    let seen = b.call(json!({"operation": "observe", "sessionId": kept}));
    assert!(seen.ok()["controlCount"].as_u64().unwrap() > 0);
    let clicked = b.call(json!({"operation": "act", "sessionId": kept, "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!(clicked.ok()["receipt"]["runtimeEpoch"], "epoch-R2");
    assert_eq!(server().entries(&t), vec!["click=go&trusted=true&name=".to_string()]);

    let lost = b.call(json!({"operation": "observe", "sessionId": gone}));
    assert_eq!((lost.err().error.as_str(), lost.dispatch()), ("web_executor_session_lost", (Some(false), false)));
    let local_lost = b.call(json!({"operation": "observe", "sessionId": local}));
    assert_eq!(local_lost.err().error, "web_executor_session_lost");
    let kinds: Vec<String> = b.call(json!({"operation": "events", "sessionId": kept})).ok()["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_string()).collect();
    assert!(kinds.contains(&"opened".to_string()) && kinds.contains(&"recovered".to_string()), "{kinds:?}");

    assert_eq!(b.call(json!({"operation": "close", "sessionId": kept})).ok()["remote"], "deleted");
    assert!(!remote_session_exists(cd.url(), &remote));
    // Runtime A's copy of the session is stale now: the endpoint says so.
    let stale = a.call(json!({"operation": "observe", "sessionId": kept}));
    assert_eq!(stale.err().error, "web_executor_session_lost");
    a.call(json!({"operation": "close", "sessionId": local})).ok();
}
