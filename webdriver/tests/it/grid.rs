//! A Selenium Grid 4 hub with two nodes: sessions spread over both (per the
//! hub's slot table), and killing one node's process group fails only that
//! node's sessions (per the page server's log).

use std::collections::BTreeMap;

use aab_webdriver::servers::{self, Grid};
use aab_webdriver::{Client, Endpoint, Session, WdError};
use serde_json::Value;

use crate::BUDGET;
use crate::support::{PageServer, assert_groups_gone};

/// session id → node URI, from `GET /status` `value.nodes[].slots[].session`.
fn placements(status: &Value) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for node in status["nodes"].as_array().into_iter().flatten() {
        let uri = node["uri"].as_str().unwrap_or_default().to_string();
        for slot in node["slots"].as_array().into_iter().flatten() {
            if let Some(id) = slot["session"]["sessionId"].as_str() {
                map.insert(id.to_string(), uri.clone());
            }
        }
    }
    map
}

#[tokio::test]
async fn grid_spreads_sessions_and_survives_a_killed_node() {
    let pages = PageServer::start();
    let mut grid = Grid::start(2, 2);
    let pgids = grid.pgids();
    assert_eq!(pgids.len(), 3);
    assert!(grid.node_pids().iter().all(|&pid| pid > 0));
    let client = Client::new(Endpoint::parse(grid.url()).unwrap());

    let caps = || servers::chromium_capabilities(true);
    let (a, b, c, d) = tokio::join!(
        client.new_session(caps(), BUDGET),
        client.new_session(caps(), BUDGET),
        client.new_session(caps(), BUDGET),
        client.new_session(caps(), BUDGET),
    );
    let sessions: Vec<Session> = [a, b, c, d]
        .into_iter()
        .map(|s| s.expect("grid session"))
        .collect();

    // Ground truth for placement: the hub's own slot table.
    let placed = placements(&client.status(BUDGET).await.unwrap());
    let nodes: Vec<usize> = sessions
        .iter()
        .map(|s| {
            grid.node_index(&placed[s.id()])
                .unwrap_or_else(|| panic!("{} on an unknown node: {placed:?}", s.id()))
        })
        .collect();
    let mut per_node = [0usize; 2];
    for &n in &nodes {
        per_node[n] += 1;
    }
    assert_eq!(
        per_node,
        [2, 2],
        "four sessions over two nodes with two slots each: {placed:?}"
    );

    for s in &sessions {
        s.navigate(&pages.url(&format!("/visit/{}", s.id())), BUDGET)
            .await
            .unwrap();
        assert!(pages.saw(&format!("/visit/{}", s.id())));
        assert_eq!(s.title(BUDGET).await.unwrap(), s.id());
    }

    let victim = nodes[0];
    let killed = grid.kill_node(victim);
    assert_groups_gone(&[killed]);
    assert_eq!(grid.node_pids()[victim], 0);

    for (s, &node) in sessions.iter().zip(&nodes) {
        let target = format!("/visit/{}/after", s.id());
        let outcome = s.navigate(&pages.url(&target), BUDGET).await;
        if node == victim {
            let err = outcome.expect_err("a session on the killed node cannot navigate");
            eprintln!("session {} on the killed node: {err:?}", s.id());
            assert!(
                matches!(err, WdError::Lost { .. } | WdError::Protocol { .. }),
                "{err:?}"
            );
            assert!(
                !pages.saw(&target),
                "no browser of the killed node reached the page server"
            );
        } else {
            outcome.unwrap_or_else(|e| panic!("session {} on the surviving node: {e}", s.id()));
            assert!(pages.saw(&target));
            s.delete(BUDGET).await.unwrap();
        }
    }

    drop(grid);
    assert_groups_gone(&pgids);
}
