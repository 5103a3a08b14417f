//! The scenario: the simulated phone model and the apps installed on it, with
//! their screens (native elements, a WKWebView, a Flutter view). Loaded from
//! JSON (`scenarios/sample.json` is built in); unknown fields are refused so a
//! typo in a scenario fails loudly instead of silently changing behaviour.

use serde::Deserialize;
use serde_json::Value;

const SAMPLE: &str = include_str!("../scenarios/sample.json");

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub device: DeviceSpec,
    pub apps: Vec<AppSpec>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    pub product_type: String,
    pub marketing_name: String,
    pub hardware_model: String,
    pub os_version_number: String,
    pub os_build_update: String,
    pub screen: ScreenSize,
}

/// The screen in points (portrait) and its pixel scale.
#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(deny_unknown_fields)]
pub struct ScreenSize {
    pub width: f64,
    pub height: f64,
    pub scale: f64,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppSpec {
    pub bundle_id: String,
    pub name: String,
    #[serde(default = "one")]
    pub version_name: String,
    #[serde(default = "one")]
    pub build_number: String,
    /// The app embeds the aab iOS SDK (a listener and the descriptor).
    #[serde(default)]
    pub sdk: bool,
    /// Installed when the simulator starts (else only after `device install app`).
    #[serde(default)]
    pub installed: bool,
    /// Running (and the last one listed foreground) when the simulator starts.
    #[serde(default)]
    pub launched: bool,
    #[serde(default = "portrait_only")]
    pub supported_orientations: Vec<String>,
    pub initial_screen: String,
    pub screens: Vec<ScreenSpec>,
}

fn one() -> String {
    "1".into()
}

fn portrait_only() -> Vec<String> {
    vec!["portrait".into()]
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScreenSpec {
    pub name: String,
    /// The root view controller class (`activity.current` of the SDK status).
    pub controller: String,
    #[serde(default)]
    pub nav_bar: Option<NavBarSpec>,
    #[serde(default)]
    pub elements: Vec<ElementSpec>,
    #[serde(default)]
    pub web_view: Option<WebViewSpec>,
    #[serde(default)]
    pub flutter: Option<FlutterSpec>,
    /// Native controls drawn over the bottom of the screen (over a WebView's content).
    #[serde(default)]
    pub toolbar: Vec<ElementSpec>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NavBarSpec {
    pub title: String,
    /// The screen the Back button returns to.
    pub back: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElementSpec {
    /// label | textField | secureField | button
    #[serde(rename = "type")]
    pub kind: String,
    /// The accessibility identifier.
    pub id: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub placeholder: Option<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub on_tap: Option<TapSpec>,
}

fn yes() -> bool {
    true
}

/// What a tap on a native control does.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TapSpec {
    #[serde(default)]
    pub goto: Option<String>,
    #[serde(default)]
    pub sign_in: Option<SignInSpec>,
    #[serde(default)]
    pub set_text: Option<SetTextSpec>,
}

/// A sign-in button: reads two fields, writes a status label, records captures.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct SignInSpec {
    pub user: String,
    pub secret: String,
    pub status: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct SetTextSpec {
    pub target: String,
    pub text: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebViewSpec {
    pub id: String,
    /// Relative urls are served by the simulator's H5 server.
    pub url: String,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlutterSpec {
    pub initial_route: String,
    pub routes: Vec<RouteSpec>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSpec {
    pub name: String,
    pub widgets: Vec<WidgetSpec>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WidgetSpec {
    pub key: String,
    pub widget_type: String,
    /// `{name}` is replaced by the engine's counter `name`.
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub hint: Option<String>,
    #[serde(default)]
    pub actions: Vec<String>,
    /// [left, top, right, bottom] in logical pixels of the Flutter view.
    pub bounds: [f64; 4],
    #[serde(default)]
    pub on_tap: Option<Value>,
    /// A list: this many tappable rows of `repeatHeight`, text `repeatText` (`{i}` = row number).
    #[serde(default)]
    pub repeat: u32,
    #[serde(default)]
    pub repeat_text: Option<String>,
    #[serde(default)]
    pub repeat_height: Option<f64>,
}

impl Scenario {
    /// The built-in sample (`scenarios/sample.json`).
    pub fn sample() -> Scenario {
        Scenario::from_json(SAMPLE).expect("the built-in sample scenario parses")
    }

    pub fn from_json(text: &str) -> Result<Scenario, String> {
        let s: Scenario = serde_json::from_str(text).map_err(|e| format!("scenario: {e}"))?;
        for a in &s.apps {
            if !a.screens.iter().any(|sc| sc.name == a.initial_screen) {
                return Err(format!("scenario: app {} has no initial screen {:?}", a.bundle_id, a.initial_screen));
            }
        }
        Ok(s)
    }

    pub fn app(&self, bundle_id: &str) -> Option<&AppSpec> {
        self.apps.iter().find(|a| a.bundle_id == bundle_id)
    }
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::sample()
    }
}

impl AppSpec {
    pub fn screen(&self, name: &str) -> Option<&ScreenSpec> {
        self.screens.iter().find(|s| s.name == name)
    }

    /// An app installed from a bundle the scenario does not know: one empty screen, no SDK.
    pub fn plain(bundle_id: &str, name: &str, version: &str, build: &str) -> AppSpec {
        AppSpec {
            bundle_id: bundle_id.to_string(),
            name: name.to_string(),
            version_name: version.to_string(),
            build_number: build.to_string(),
            sdk: false,
            installed: true,
            launched: false,
            supported_orientations: portrait_only(),
            initial_screen: "main".into(),
            screens: vec![ScreenSpec { name: "main".into(), controller: "UIViewController".into(), nav_bar: None, elements: vec![], web_view: None, flutter: None, toolbar: vec![] }],
        }
    }
}
