//! Engine webdriver through a real Selenium Grid 4 (hub + two one-slot nodes):
//! the Grid's own answers classified — its browser list, a full grid, a node
//! that died — with every other session unaffected. (The lead's e2e suite runs
//! the 8-session version through the CLI.)

use std::time::Duration;

use aab_webdriver::servers::Grid;
use serde_json::{Value, json};

use crate::harness::{Plugin, Store};
use crate::pages::server;
use crate::{scratch, tag};

/// The node (index) that hosts a WebDriver session, from the Grid's /status.
fn node_of(grid: &Grid, remote: &str) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status: Value = rt.block_on(async {
        let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(grid.url()).unwrap());
        client.status(Duration::from_secs(10)).await.unwrap()
    });
    for node in status["nodes"].as_array().unwrap() {
        let hosts = node["slots"].as_array().unwrap().iter().any(|s| s.pointer("/session/sessionId").and_then(Value::as_str) == Some(remote));
        if hosts {
            return grid.node_index(node["uri"].as_str().unwrap()).expect("a known node");
        }
    }
    panic!("no node hosts {remote}: {status}");
}

#[test]
fn a_grid_serves_parallel_sessions_and_a_dead_node_costs_only_its_own() {
    let mut grid = Grid::start(2, 1);
    // Its own plugin instance: the runtime-stop at the end closes every session it has.
    let p = &Plugin::load_copy(&scratch().join(format!("grid-{}", tag("data"))).join("data"), "epoch-grid", std::sync::Arc::new(Store::default()));
    let t = tag("grid");
    let prepared = p.call(json!({"operation": "prepare", "endpoint": grid.url()}));
    assert!(prepared.ok()["offered"].as_array().unwrap().contains(&json!("chromium")), "{}", prepared.ok());
    assert_eq!(prepared.ok()["verified"], "session");

    let ids: Vec<String> = (0..2).map(|i| format!("grid{i}-{t}")).collect();
    // Two opens at once: separate sessionIds are separate admission lanes.
    let endpoint = grid.url().to_string();
    let remotes: Vec<String> = std::thread::scope(|scope| {
        let endpoint = &endpoint;
        let opens: Vec<_> = ids
            .iter()
            .map(|id| {
                let page = server().url(&format!("/form?tag={t}-{id}"));
                scope.spawn(move || p.call(json!({"operation": "open", "sessionId": id, "endpoint": endpoint, "url": page})))
            })
            .collect();
        opens.into_iter().map(|h| h.join().unwrap().ok()["webdriverSessionId"].as_str().unwrap().to_string()).collect()
    });
    let nodes: Vec<usize> = remotes.iter().map(|r| node_of(&grid, r)).collect();
    assert_ne!(nodes[0], nodes[1], "one session per one-slot node");

    // Both slots are taken: a third session waits in the Grid's queue past our deadline.
    let full = p.call_with("web-executor", json!({"operation": "open", "sessionId": format!("grid-full-{t}"), "endpoint": grid.url()}), Duration::from_secs(3));
    let e = full.err();
    assert!(matches!(e.error.as_str(), "web_executor_open_lost" | "web_executor_capacity_unavailable"), "{e:?}");
    if e.error == "web_executor_open_lost" {
        assert_eq!(full.dispatch(), (Some(true), true), "a queued new-session request may still be served later");
    }

    for id in &ids {
        let clicked = p.call(json!({"operation": "act", "sessionId": id, "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
        assert_eq!(clicked.ok()["status"], "settled");
    }
    // Node of session 0 dies: only session 0 is lost, before anything is dispatched.
    grid.kill_node(nodes[0]);
    let dead = p.call(json!({"operation": "act", "sessionId": ids[0], "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!(dead.dispatch(), (Some(false), false), "{:?}", dead.err());
    assert_eq!(dead.err().error, "web_executor_session_lost", "{:?}", dead.err());
    let alive = p.call(json!({"operation": "act", "sessionId": ids[1], "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!(alive.ok()["status"], "settled");
    for (i, id) in ids.iter().enumerate() {
        let want = if i == 0 { 1 } else { 2 };
        assert_eq!(server().entries(&format!("{t}-{id}")).len(), want, "{id}: every click reached its page exactly once");
    }
    // Runtime stop: what is still open on the grid is closed (the dead node's
    // slots stay listed until the Grid drops the node; they are not ours to end).
    let stopped = p.hook("runtime-stop", json!({"reason": "runtime-stop"}));
    assert!(stopped.ok, "{:?}", stopped.error);
    // (The queued third request may be served on the freed slot the moment ours is
    // deleted — the documented `open_lost` case — so check our session, not the slot.)
    assert!(!node_sessions(&grid, nodes[1]).contains(&remotes[1]), "runtime-stop deleted the surviving node's session");
    let late = p.call(json!({"operation": "observe", "sessionId": ids[1]}));
    assert_eq!(late.err().error, "web_executor_session_closed");
}

/// Sessions the Grid lists on node `i`.
fn node_sessions(grid: &Grid, i: usize) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status: Value = rt.block_on(async {
        let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(grid.url()).unwrap());
        client.status(Duration::from_secs(10)).await.unwrap()
    });
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["uri"].as_str().and_then(|u| grid.node_index(u)) == Some(i))
        .flat_map(|n| n["slots"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s.pointer("/session/sessionId").and_then(Value::as_str).map(str::to_string))
        .collect()
}
