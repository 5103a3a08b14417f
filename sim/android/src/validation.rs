//! Form validation of a tap's action (`onTap.requireValues`, `requireEmail`,
//! `requireChecked`, `otherwise`): a submit button that only proceeds when the
//! form is filled in, as a real sign-up screen does.

use serde_json::{Value, json};

use crate::phone::App;
use crate::scenario::ActionSpec;

impl App {
    /// The action to apply: `action` when its requirements hold, else its
    /// `otherwise` (or nothing); a failed check is one `{invalid:[ids]}` effect.
    pub(crate) fn validated(&self, action: ActionSpec, effects: &mut Vec<Value>) -> ActionSpec {
        let value = |id: &String| self.values.get(id).map(|v| v.trim().to_string()).unwrap_or_default();
        let email = |v: &str| v.split_once('@').is_some_and(|(user, host)| !user.is_empty() && host.contains('.') && !host.starts_with('.') && !host.ends_with('.'));
        let mut invalid: Vec<&String> = action.require_values.iter().filter(|id| value(id).is_empty()).collect();
        invalid.extend(action.require_email.iter().filter(|id| !email(&value(id))));
        invalid.extend(action.require_checked.iter().filter(|id| self.checked.get(*id) != Some(&true)));
        if invalid.is_empty() {
            return action;
        }
        invalid.dedup();
        effects.push(json!({ "invalid": invalid }));
        action.otherwise.map(|b| *b).unwrap_or_default()
    }
}
