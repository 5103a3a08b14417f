//! A real Chromium through real chromedriver: every action is checked in the
//! page (read back with execute) and in the page server's request log.

use std::time::{Duration, Instant};

use aab_webdriver::servers::{self, Chromedriver};
use aab_webdriver::{Client, Endpoint, WdError};
use serde_json::{Value, json};

use crate::BUDGET;
use crate::support::{PAGE_TITLE, PageServer, assert_groups_gone, png_size};

/// Live browser processes in chromedriver's group.
fn browsers(pgid: i32) -> usize {
    servers::group_members(pgid)
        .iter()
        .filter(|(_, comm)| comm.starts_with("chrom") && comm != "chromedriver")
        .count()
}

#[tokio::test]
async fn chromedriver_drives_a_real_chromium() {
    let pages = PageServer::start();
    let driver = Chromedriver::start();
    let pgid = driver.pgid();
    let client = Client::new(Endpoint::parse(driver.url()).unwrap());
    assert_eq!(client.status(BUDGET).await.unwrap()["ready"], json!(true));

    let session = client
        .new_session(servers::chromium_capabilities(true), BUDGET)
        .await
        .expect("new session");
    assert!(!session.id().is_empty());
    assert_eq!(session.capabilities()["browserName"], json!("chrome"));
    assert!(
        browsers(pgid) > 0,
        "the browser runs inside chromedriver's process group"
    );
    session.set_window_rect(800, 600, BUDGET).await.unwrap();

    let page = pages.url("/page");
    session.navigate(&page, BUDGET).await.unwrap();
    assert!(
        pages.saw("/page"),
        "the browser fetched the page: {:?}",
        pages.hits()
    );
    assert_eq!(session.url(BUDGET).await.unwrap(), page);
    assert_eq!(session.title(BUDGET).await.unwrap(), PAGE_TITLE);

    // Click: the page's state changes and the page reports it to the server.
    let button = session.find_element("#btn", BUDGET).await.unwrap();
    assert_eq!(
        session
            .execute("return arguments[0].id", vec![button.to_value()], BUDGET)
            .await
            .unwrap(),
        json!("btn")
    );
    session.click(&button, BUDGET).await.unwrap();
    let out = "return document.getElementById('out').textContent";
    assert_eq!(
        session.execute(out, vec![], BUDGET).await.unwrap(),
        json!("clicked 1")
    );
    assert!(pages.wait_for("/clicked?n=1"), "{:?}", pages.hits());

    // The same click as raw pointer actions.
    let actions = json!([{
        "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
        "actions": [
            {"type": "pointerMove", "duration": 0, "origin": button.to_value(), "x": 0, "y": 0},
            {"type": "pointerDown", "button": 0},
            {"type": "pointerUp", "button": 0}
        ]
    }]);
    session.perform_actions(actions, BUDGET).await.unwrap();
    assert_eq!(
        session.execute(out, vec![], BUDGET).await.unwrap(),
        json!("clicked 2")
    );
    assert!(pages.wait_for("/clicked?n=2"), "{:?}", pages.hits());

    // Typing, clearing, typing again, then submitting: the server sees the text.
    let input = session.find_element("#q", BUDGET).await.unwrap();
    session.send_keys(&input, "first", BUDGET).await.unwrap();
    let value = "return document.getElementById('q').value";
    assert_eq!(
        session.execute(value, vec![], BUDGET).await.unwrap(),
        json!("first")
    );
    session.clear(&input, BUDGET).await.unwrap();
    assert_eq!(
        session.execute(value, vec![], BUDGET).await.unwrap(),
        json!("")
    );
    session
        .send_keys(&input, "ground truth", BUDGET)
        .await
        .unwrap();

    // Inside the iframe and back out.
    session.switch_to_frame(json!(0), BUDGET).await.unwrap();
    let inner = session.find_element("#inner", BUDGET).await.unwrap();
    assert_eq!(
        session.element_text(&inner, BUDGET).await.unwrap(),
        "inside the frame"
    );
    session.switch_to_frame(Value::Null, BUDGET).await.unwrap();
    assert!(
        session.find_element("#btn", BUDGET).await.is_ok(),
        "back at the top-level document"
    );

    // The screenshot is a PNG of the viewport, in device pixels.
    let png = session.screenshot(BUDGET).await.unwrap();
    let viewport = session.execute("return [Math.round(innerWidth*devicePixelRatio), Math.round(innerHeight*devicePixelRatio)]", vec![], BUDGET).await.unwrap();
    let (width, height) = png_size(&png);
    assert_eq!(json!([width, height]), viewport);

    // A missing element is a complete W3C error, not an ambiguous one.
    let err = session.find_element("#missing", BUDGET).await.unwrap_err();
    assert!(
        matches!(&err, WdError::Protocol { status: 404, error, .. } if error == "no such element"),
        "{err:?}"
    );
    assert!(!err.ambiguous());

    let send = session.find_element("#send", BUDGET).await.unwrap();
    session.click(&send, BUDGET).await.unwrap();
    assert!(
        pages.wait_for("/submit?q=ground+truth"),
        "{:?}",
        pages.hits()
    );

    // Attach addresses the same session by id.
    let attached = client.attach(session.id());
    assert_eq!(attached.capabilities(), &Value::Null);
    assert!(
        attached
            .url(BUDGET)
            .await
            .unwrap()
            .starts_with(&pages.url("/submit"))
    );

    session.delete(BUDGET).await.unwrap();
    let err = session.title(BUDGET).await.unwrap_err();
    assert_eq!(err.w3c_error(), Some("invalid session id"), "{err:?}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while browsers(pgid) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(browsers(pgid), 0, "deleting the session quit the browser");

    drop(driver);
    assert_groups_gone(&[pgid]);
}
