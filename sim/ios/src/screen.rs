//! The seam between the simulated device and the WebDriverAgent Runner: what XCTest
//! sees of the foreground app (its accessibility tree) and the events it can
//! synthesize. The device model implements it; the Runner (`wda`) only uses it, so
//! a WDA tap lands on the same native screen the SDK's `/v1/view/tree` renders and
//! the ground-truth log records.

use serde_json::Value;

/// The foreground app as XCTest identifies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreground {
    pub bundle_id: String,
    pub process_id: u32,
}

/// Why an event could not be synthesized (mapped to a WDA error code by the Runner).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventError {
    /// The app changed (another foreground bundle or process) before submission.
    TargetChanged,
    /// No element with that UID in the current tree.
    ElementGone,
    /// The element exists but cannot take the event (not an editor, disabled, hidden).
    NotOperable(String),
    /// The event was submitted and failed inside XCTest.
    Failed(String),
}

/// The device's native screen, as the Runner reaches it.
pub trait NativeScreen: Send + Sync + 'static {
    /// The foreground app, or `None` on the home screen.
    fn foreground(&self) -> Option<Foreground>;

    /// The foreground app's tree in WDA's JSON source shape: each node has `type`
    /// (`XCUIElementTypeButton`…), `rawIdentifier` (accessibility id or null),
    /// `name`, `label`, `value`, `elementId` (a UID stable for the element's life
    /// in this process), `isVisible`/`isEnabled` (`"1"`/`"0"`), `rect{x,y,width,height}`
    /// and `children`. `None` when `expected` is not the foreground app.
    fn source(&self, expected: &Foreground) -> Option<Value>;

    /// A tap at screen points `(x, y)` in the expected app; the hit element's UID, if any.
    fn tap(&self, expected: &Foreground, x: f64, y: f64) -> Result<Option<String>, EventError>;

    /// A swipe gesture (scrolls the view under the start point when it scrolls).
    fn swipe(&self, expected: &Foreground, start: (f64, f64), end: (f64, f64), duration_ms: u64) -> Result<(), EventError>;

    /// Focus the editor `element_id` (a tap on it); fails if it is not an editor.
    fn focus(&self, expected: &Foreground, element_id: &str) -> Result<(), EventError>;

    /// The focused element's UID, if any.
    fn focused(&self, expected: &Foreground) -> Option<String>;

    /// The raw value of `element_id` (`None` = nil / no such element).
    fn value(&self, expected: &Foreground, element_id: &str) -> Option<String>;

    /// One HID keyboard-clear event (usage page 0x07, usage 0x9c) on the focused editor.
    fn clear_focused(&self, expected: &Foreground) -> Result<(), EventError>;

    /// XCTest text input into the focused editor.
    fn type_text(&self, expected: &Foreground, text: &str) -> Result<(), EventError>;

    /// Request an interface orientation; the observed interface orientation after it
    /// (may differ: the app can refuse a direction).
    fn set_orientation(&self, expected: &Foreground, orientation: &str) -> Result<String, EventError>;

    /// The current interface orientation.
    fn orientation(&self) -> String;

    /// Record a Runner-side fact in the device's ground truth (`truth` control op).
    fn record(&self, fact: Value);
}
