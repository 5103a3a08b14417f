//! Engine webdriver against Appium 3 with its fake driver: a non-browser
//! session (capabilities name the platform) through the same engine. Scripts do
//! not run there, so observation is the endpoint's page source and actions use
//! WebDriver's element commands, settled by the endpoint's complete reply; the
//! driver's own model is the ground truth.

use std::time::Duration;

use aab_webdriver::servers::{self, Appium};
use serde_json::json;

use crate::webdriver::remote_session_exists;
use crate::{plugin, scratch, tag};

const APP_XML: &str = r#"<app width="400" height="800">
  <title>aab fake app</title>
  <MockListView id="list">
    <MockButton id="login" name="Log in" width="100" height="40">Log in</MockButton>
    <MockInputField id="user" />
  </MockListView>
</app>"#;

#[test]
fn an_appium_session_through_the_webdriver_engine() {
    let app = scratch().join(format!("{}.xml", tag("app")));
    std::fs::write(&app, APP_XML).unwrap();
    let appium = Appium::start();
    let p = plugin();
    let sid = format!("appium-{}", tag("fake"));
    let opened = p.call(json!({"operation": "open", "sessionId": sid, "endpoint": appium.url(), "capabilities": servers::fake_app_capabilities(&app)}));
    let v = opened.ok().clone();
    assert_eq!((v["browser"].as_str(), v["scripting"].as_bool(), v["capabilities"]["platformName"].as_str()), (Some("none"), Some(false), Some("Fake")));
    let remote = v["webdriverSessionId"].as_str().unwrap().to_string();

    let seen = p.call(json!({"operation": "observe", "sessionId": sid}));
    assert!(seen.ok()["source"].as_str().unwrap().contains("<title>aab fake app</title>"));
    let clicked = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "#login"}}));
    assert_eq!(clicked.ok()["receipt"]["delivery"]["source"], "endpoint-reply");
    let typed = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "input", "text": "alice"}, "selector": {"by": "css", "value": "#user"}}));
    assert_eq!(typed.ok()["status"], "settled");
    let missing = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "#nowhere"}}));
    assert_eq!((missing.err().error.as_str(), missing.dispatch()), ("web_executor_selector_not_found", (Some(false), false)));
    let by_id = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "elementId", "value": "e1"}}));
    assert_eq!(by_id.err().error, "web_executor_selector_unsupported");
    // The driver's model: one click, the typed text.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (clicks, text) = rt.block_on(async {
        let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(appium.url()).unwrap());
        let s = client.attach(&remote);
        let login = s.find_element("#login", Duration::from_secs(10)).await.unwrap();
        let user = s.find_element("#user", Duration::from_secs(10)).await.unwrap();
        (s.element_attribute(&login, "clicks", Duration::from_secs(10)).await.unwrap(), s.element_text(&user, Duration::from_secs(10)).await.unwrap())
    });
    assert_eq!((clicks.as_deref(), text.as_str()), (Some("1"), "alice"));
    let waited = p.call(json!({"operation": "wait", "sessionId": sid, "selector": {"by": "text", "value": "Log in"}}));
    assert_eq!(waited.ok()["matched"], true);
    let shot = p.call(json!({"operation": "screenshot", "sessionId": sid, "outFile": scratch().join(format!("{sid}.png"))}));
    assert!(shot.ok()["width"].as_u64().unwrap() > 0);
    let closed = p.call(json!({"operation": "close", "sessionId": sid}));
    assert_eq!(closed.ok()["remote"], "deleted");
    assert!(!remote_session_exists(appium.url(), &remote));
}
