//! The scenario file (JSON): the device's identity and screen, and the apps
//! installed on it with their activities, permissions, app-ops and screens
//! (native view trees with transitions). Format: sim/android/README.md;
//! example: sim/android/scenarios/sample.json (the default scenario).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

pub const SAMPLE: &str = include_str!("../scenarios/sample.json");
/// One SDK app whose only screen has 604 views (benchmarks of large trees).
pub const CATALOG: &str = include_str!("../scenarios/catalog.json");

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[derive(Default)]
pub struct Scenario {
    pub device: DeviceSpec,
    pub apps: Vec<AppSpec>,
    /// Package in the foreground at boot (its process is started); none = launcher.
    pub foreground: Option<String>,
}


impl Scenario {
    pub fn sample() -> Scenario {
        serde_json::from_str(SAMPLE).expect("sample scenario parses")
    }

    /// The 604-node screen of `scenarios/catalog.json`.
    pub fn catalog() -> Scenario {
        serde_json::from_str(CATALOG).expect("catalog scenario parses")
    }

    pub fn parse(text: &str) -> Result<Scenario, String> {
        serde_json::from_str(text).map_err(|e| format!("scenario: {e}"))
    }
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DeviceSpec {
    pub model: String,
    pub product: String,
    pub device: String,
    pub manufacturer: String,
    pub sdk_int: u32,
    pub release: String,
    pub width: u32,
    pub height: u32,
    pub density: u32,
    pub props: BTreeMap<String, String>,
}

impl Default for DeviceSpec {
    fn default() -> Self {
        DeviceSpec {
            model: "AAB Sim Phone".into(),
            product: "aab_sim".into(),
            device: "aabsim".into(),
            manufacturer: "AAB".into(),
            sdk_int: 34,
            release: "14".into(),
            width: 1080,
            height: 2400,
            density: 420,
            props: BTreeMap::new(),
        }
    }
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AppSpec {
    pub package: String,
    pub version_name: Option<String>,
    pub version_code: Option<u64>,
    /// Linux app id (uid for user 0); default 10100 + index.
    pub app_id: Option<u32>,
    /// SHA-256 digest of the signing certificate (apksigner's): an update must be signed by it
    /// (`INSTALL_FAILED_UPDATE_INCOMPATIBLE`). None: the first APK installed over it sets it.
    pub signing_cert_sha256: Option<String>,
    /// Debuggable apps answer `run-as`; default true.
    pub debuggable: Option<bool>,
    /// Embeds the aab SDK (listens on localabstract:aab-sdk-<runtimeEpoch>).
    pub sdk: bool,
    pub sdk_version: Option<String>,
    /// Activity class names (`.Main` is relative to the package).
    pub activities: Vec<String>,
    /// The MAIN/LAUNCHER activity; default the first activity.
    pub launcher: Option<String>,
    /// Runtime permissions: name → granted.
    pub permissions: BTreeMap<String, bool>,
    /// Install-time permissions (always granted).
    pub install_permissions: Vec<String>,
    /// App-ops: op → mode (allow, ignore, deny, default, foreground).
    pub appops: BTreeMap<String, String>,
    pub screens: Vec<ScreenSpec>,
    /// Screen shown when the app starts; default the first screen.
    pub start_screen: Option<String>,
    /// Capture records the SDK already holds at process start.
    pub logs: Vec<Value>,
    pub state: Vec<Value>,
    /// WebViews, each a real page in headless Chromium (src/webview/).
    pub web_views: Vec<WebViewSpec>,
}

/// One WebView of an app (README: "WebViews").
#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WebViewSpec {
    pub web_view_id: String,
    /// `standard` (android.webkit.WebView), `reflective` (a vendor class with evaluateJavascript),
    /// or `flutter` (a Flutter H5 adapter registered by the Dart side; src/flutter_h5.rs).
    pub adapter: String,
    pub class_name: String,
    /// Relative: a path on the device's H5 server (`h5/signup.html`); or absolute.
    pub url: String,
    /// Screen it lives on (created when first shown); none = from process start, on every screen.
    pub screen: Option<String>,
    /// Another window of the app (a dialog) instead of the screen's activity window.
    pub window: Option<String>,
    /// [l,t,r,b] in screen px; default the whole screen.
    pub bounds: Option<[i32; 4]>,
    /// Device px per CSS px; default density/160.
    pub scale: Option<f64>,
    pub visible: bool,
    /// `identity`, or a description of a non-identity matrix (e.g. `rotate(5deg)`).
    pub transform: String,
    /// A native view covering this screen rect over the WebView.
    pub obscured: Option<[i32; 4]>,
    /// With adapter `flutter`: the Flutter route whose page shows this adapter
    /// (its Dart `isVisible()`); none = every route of its screen's engine.
    pub flutter_route: Option<String>,
}

impl Default for WebViewSpec {
    fn default() -> Self {
        WebViewSpec {
            web_view_id: String::new(),
            adapter: "standard".into(),
            class_name: "android.webkit.WebView".into(),
            url: "about:blank".into(),
            screen: None,
            window: None,
            bounds: None,
            scale: None,
            visible: true,
            transform: "identity".into(),
            obscured: None,
            flutter_route: None,
        }
    }
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ScreenSpec {
    pub name: String,
    /// Activity showing this screen; default the launcher activity.
    pub activity: Option<String>,
    pub root: NodeSpec,
    /// A Flutter view on this screen (src/flutter.rs).
    pub flutter: Option<crate::flutter::FlutterSpec>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeSpec {
    pub class: String,
    /// Resource id entry name (`pkg:id/<id>`).
    pub id: Option<String>,
    pub text: Option<String>,
    pub desc: Option<String>,
    /// [left, top, right, bottom] in screen pixels; default the parent's.
    pub bounds: Option<[i32; 4]>,
    pub clickable: bool,
    pub long_clickable: bool,
    pub enabled: bool,
    pub focusable: bool,
    pub focused: bool,
    pub editable: bool,
    pub password: bool,
    pub checkable: bool,
    pub checked: bool,
    pub selected: bool,
    pub scrollable: bool,
    pub visible: bool,
    /// Fill colour of this node in `screencap` (#rrggbb); default by kind.
    pub color: Option<String>,
    /// Generate this many plain text rows below the node's children (large trees for benchmarks).
    pub repeat: u32,
    pub children: Vec<NodeSpec>,
    pub on_tap: Option<ActionSpec>,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec {
            class: "android.view.View".into(),
            id: None,
            text: None,
            desc: None,
            bounds: None,
            clickable: false,
            long_clickable: false,
            enabled: true,
            focusable: false,
            focused: false,
            editable: false,
            password: false,
            checkable: false,
            checked: false,
            selected: false,
            scrollable: false,
            visible: true,
            color: None,
            repeat: 0,
            children: vec![],
            on_tap: None,
        }
    }
}

/// What a tap on a node does (all parts optional, applied in this order).
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ActionSpec {
    /// Show another screen of the same app.
    pub goto: Option<String>,
    /// Record a network exchange in the SDK capture (fields of §1.10; `{field}` in strings is replaced by typed values).
    pub network: Option<Value>,
    pub log: Option<Value>,
    pub state: Option<Value>,
    pub event: Option<Value>,
    /// Toggle `checked`.
    pub toggle: bool,
    /// Form validation (src/validation.rs): ids whose typed value must be non-empty…
    pub require_values: Vec<String>,
    /// …ids whose typed value must look like an email (`x@y.z`)…
    pub require_email: Vec<String>,
    /// …and checkable ids that must be checked; if any fails, `otherwise` runs instead.
    pub require_checked: Vec<String>,
    pub otherwise: Option<Box<ActionSpec>>,
}
