//! A test world for the Web provider: a `TestEnv` with the Web plugin installed, a
//! Web endpoint on an OS-assigned port serving the sample app, and a headless
//! Chromium. Shared by the Web, Intent and Script suites.

use std::time::Duration;

use crate::TestEnv;
use crate::chromium::{Chromium, Tab};

pub struct SampleWeb {
    pub env: TestEnv,
    pub chrome: Chromium,
    /// `http://127.0.0.1:<port>`
    pub base: String,
    pub endpoint: String,
    pub token: String,
}

/// A sample page whose SDK is connected.
pub struct SamplePage {
    pub tab: Tab,
    pub session_id: String,
    pub runtime_epoch: String,
}

impl SampleWeb {
    /// New runtime, `web-session-start --web-port 0 --sample-app true`, a browser.
    pub fn start() -> SampleWeb {
        let env = TestEnv::new();
        env.install_plugin("aab_plugin_web", "web");
        let chrome = Chromium::launch();
        let started = env.aab_ok(&["web-session-start", "--web-port", "0", "--sample-app", "true"]);
        let v = &started["value"];
        let port = v["port"].as_u64().expect("port");
        SampleWeb {
            base: format!("http://127.0.0.1:{port}"),
            endpoint: v["endpoint"].as_str().expect("endpoint").to_string(),
            token: v["token"].as_str().expect("token").to_string(),
            env,
            chrome,
        }
    }

    /// The URL of a sample page with the endpoint, token and (optional) session id
    /// its SDK should use.
    pub fn page_url(&self, page: &str, session: Option<&str>) -> String {
        let mut url = format!("{}/sample/{page}#endpoint={}&token={}", self.base, self.endpoint, self.token);
        if let Some(s) = session {
            url.push_str(&format!("&session={s}"));
        }
        url
    }

    /// Open a sample page and wait (as seen from the page) until its SDK is connected.
    pub fn open_connected(&mut self, page: &str, session: Option<&str>) -> SamplePage {
        let url = self.page_url(page, session);
        let tab = self.chrome.open(&url);
        let ids = self.chrome.wait_for(
            &tab,
            "window.sampleApp && sampleApp.bridge.transportStatus().connected && [sampleApp.bridge.sessionId, sampleApp.bridge.runtimeEpoch]",
            Duration::from_secs(20),
        );
        SamplePage {
            tab,
            session_id: ids[0].as_str().expect("sessionId").to_string(),
            runtime_epoch: ids[1].as_str().expect("runtimeEpoch").to_string(),
        }
    }
}
