//! Appium 3 with its fake driver: the app model is an XML file this test
//! writes; element state is read back through the driver's model.

use aab_webdriver::servers::{self, Appium};
use aab_webdriver::{Client, Endpoint, WdError};
use serde_json::json;

use crate::BUDGET;
use crate::support::assert_groups_gone;

const APP_XML: &str = r#"<app width="400" height="800">
  <title>aab fake app</title>
  <MockListView id="list">
    <MockButton id="login" name="Log in" width="100" height="40">Log in</MockButton>
    <MockInputField id="user" />
  </MockListView>
</app>"#;

#[tokio::test]
async fn appium_fake_driver_session() {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("app.xml");
    std::fs::write(&app, APP_XML).unwrap();

    let appium = Appium::start();
    let pgid = appium.pgid();
    let client = Client::new(Endpoint::parse(appium.url()).unwrap());
    let session = client
        .new_session(servers::fake_app_capabilities(&app), BUDGET)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", appium.log_tail()));
    assert_eq!(session.capabilities()["platformName"], json!("Fake"));

    let login = session.find_element("#login", BUDGET).await.unwrap();
    let by_xpath = session
        .find_element_using("xpath", "//MockButton[@name='Log in']", BUDGET)
        .await
        .unwrap();
    // One node, one element reference, whichever strategy found it.
    assert_eq!(login, by_xpath);
    session.click(&login, BUDGET).await.unwrap();
    session.click(&by_xpath, BUDGET).await.unwrap();
    // The driver's model counts the clicks the element received.
    assert_eq!(
        session
            .element_attribute(&login, "clicks", BUDGET)
            .await
            .unwrap()
            .as_deref(),
        Some("2")
    );

    let user = session
        .find_element_using("id", "user", BUDGET)
        .await
        .unwrap();
    session.send_keys(&user, "alice", BUDGET).await.unwrap();
    assert_eq!(session.element_text(&user, BUDGET).await.unwrap(), "alice");

    let source = session.source(BUDGET).await.unwrap();
    assert!(
        source.contains("<title>aab fake app</title>") && source.contains(r#"id="login""#),
        "{source}"
    );

    let err = session.find_element("#nowhere", BUDGET).await.unwrap_err();
    assert_eq!(err.w3c_error(), Some("no such element"), "{err:?}");
    session.delete(BUDGET).await.unwrap();
    let err = session.source(BUDGET).await.unwrap_err();
    assert!(
        matches!(&err, WdError::Protocol { status: 404, .. }),
        "the session is gone: {err:?}"
    );

    drop(appium);
    assert_groups_gone(&[pgid]);
}
