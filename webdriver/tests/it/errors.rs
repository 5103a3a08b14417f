//! Failure classification against endpoints that misbehave on purpose: the
//! fault server's log proves whether the request reached the remote end.

use std::time::Duration;

use aab_webdriver::{Client, DEFAULT_BODY_LIMIT, Endpoint, WdError};
use serde_json::json;

use crate::support::{Fault, FaultServer, closed_port};

fn client(url: &str) -> Client {
    Client::new(Endpoint::parse(url).unwrap())
}

#[tokio::test]
async fn a_closed_port_is_not_sent_and_not_ambiguous() {
    let err = client(&format!("http://127.0.0.1:{}", closed_port()))
        .status(Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(err, WdError::NotSent { .. }), "{err:?}");
    assert!(!err.ambiguous());
    assert_eq!(err.code(), "webdriver_not_sent");
}

#[tokio::test]
async fn no_budget_left_sends_nothing() {
    let server = FaultServer::start(Fault::Html);
    let err = client(&server.url())
        .new_session(json!({}), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, WdError::NotSent { .. }), "{err:?}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        server.hits().is_empty(),
        "nothing may reach the server: {:?}",
        server.hits()
    );
}

#[tokio::test]
async fn a_reset_after_the_request_arrived_is_lost_and_ambiguous() {
    let server = FaultServer::start(Fault::Reset);
    let session = client(&server.url()).attach("s-1");
    let err = session
        .navigate("http://127.0.0.1:9/x", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, WdError::Lost { .. }), "{err:?}");
    assert!(err.ambiguous());
    assert_eq!(err.code(), "webdriver_response_lost");
    // The server did receive the command: "lost" is the truth, not a guess.
    let hits = server.hits();
    assert_eq!(hits.len(), 1, "sent exactly once, never retried: {hits:?}");
    assert_eq!(
        (hits[0].method.as_str(), hits[0].target.as_str()),
        ("POST", "/session/s-1/url")
    );
    assert_eq!(
        hits[0].content_type.as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&hits[0].body).unwrap(),
        json!({"url": "http://127.0.0.1:9/x"})
    );
}

#[tokio::test]
async fn a_hang_past_the_budget_is_lost_once() {
    let server = FaultServer::start(Fault::Hang);
    let err = client(&server.url())
        .attach("s-2")
        .click(
            &aab_webdriver::ElementRef("e-1".into()),
            Duration::from_millis(400),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, WdError::Lost { .. }), "{err:?}");
    let hits = server.hits();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].target, "/session/s-2/element/e-1/click");
}

#[tokio::test]
async fn a_truncated_body_is_lost() {
    let server = FaultServer::start(Fault::Truncated);
    let err = client(&server.url())
        .status(Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, WdError::Lost { .. }), "{err:?}");
    assert_eq!(server.hits().len(), 1);
}

#[tokio::test]
async fn an_oversized_body_stops_at_the_cap() {
    let streamed = FaultServer::start(Fault::Oversized(DEFAULT_BODY_LIMIT + 1024 * 1024));
    let err = client(&streamed.url())
        .status(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WdError::TooLarge {
            limit: DEFAULT_BODY_LIMIT
        }
    );
    assert_eq!(err.code(), "webdriver_response_too_large");
    assert!(!err.ambiguous());

    let declared = FaultServer::start(Fault::DeclaredOversized(DEFAULT_BODY_LIMIT + 1));
    let err = client(&declared.url())
        .attach("s")
        .title(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WdError::TooLarge {
            limit: DEFAULT_BODY_LIMIT
        }
    );
}

#[tokio::test]
async fn a_complete_non_json_reply_is_not_json() {
    let server = FaultServer::start(Fault::Html);
    let err = client(&server.url())
        .status(Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WdError::NotJson { status: 200, .. }),
        "{err:?}"
    );
    assert!(!err.ambiguous());
}
