//! `acme`: an example private aab provider for "Acme display panels", written the
//! way a team outside the aab repository would write one (docs/PLUGIN_AUTHORING.md
//! walks through this file).
//!
//! A panel is the device: a directory `<panel root>/<panel id>/` holding
//! `display.txt` (what the panel shows) and `receipts/<actionId>.json` (one durable
//! receipt per completed write). The panel root is `ACME_PANEL_ROOT` or, without it,
//! `panels/` in the plugin's private data directory. Note that the runtime takes its
//! environment from the client that started it, so set `ACME_PANEL_ROOT` before the
//! first `aab` call (or restart the runtime after changing it).
//!
//! * `acme-panel-read` (query): what a panel shows and how often it was written.
//! * `acme-panel-write` (mutation, device key `panel`): show a text on a panel;
//!   marks dispatch right before the write, writes the receipt, appends a fact.
//! * `reconcile` hook: settles an action whose outcome the host lost from the
//!   receipt the write left on the panel.

// `ProviderError` is the SDK's error type and is returned by value.
#![allow(clippy::result_large_err)]

use std::io::Write;
use std::path::{Path, PathBuf};

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Command, CommandSpec, Commands, Context, DomainSpec, Invocation, Manifest, Provider, ProviderError, Reply, codes};
use serde::Deserialize;
use serde_json::{Value, json};

/// The plugin name (manifest `name`, the file `libaab_plugin_acme.so`).
pub const PLUGIN: &str = "acme";
/// The platform every command of this plugin serves.
pub const PLATFORM: &str = "acme";
/// The plugin's own domain: its commands get an "acme" heading in `capabilities`
/// and `--help` instead of being filed under a built-in platform's.
pub const DOMAIN: &str = "acme";
/// Environment variable naming the panel root.
pub const ENV_PANEL_ROOT: &str = "ACME_PANEL_ROOT";
/// Longest text a panel shows.
pub const MAX_TEXT: usize = 256;

pub struct AcmeProvider;

/// The panel id schema shared by both commands: a safe directory name.
fn panel_schema() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", "description": "Panel id (a directory under the panel root)."})
}

/// Arguments of `acme-panel-read`. The host validated them against the schema in
/// [`PanelRead::spec`]; `deny_unknown_fields` keeps type and schema honest
/// (`requestId`, `feedback`, `timeoutMs` are invocation fields, never arguments).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelReadArgs {
    pub panel: String,
}

/// `acme-panel-read`: a query (never changes the panel, never marks dispatch).
pub struct PanelRead;

impl Command for PanelRead {
    type Provider = AcmeProvider;
    type Args = PanelReadArgs;

    fn spec() -> CommandSpec {
        CommandSpec::query("acme-panel-read")
            .summary("Read what an Acme panel shows and how many writes it has completed.")
            .platform(PLATFORM)
            .domain(DOMAIN)
            .target_kind("acme-panel")
            .permission("app.read")
            .input_schema(json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {"panel": panel_schema()},
                "required": ["panel"],
            }))
    }

    async fn run(_: &AcmeProvider, ctx: &Context<'_>, _: &Invocation, args: PanelReadArgs) -> Result<Reply, ProviderError> {
        let dir = panel_dir(ctx, &args.panel)?;
        let text = read_text(&dir)?;
        let mut receipts: Vec<String> = match std::fs::read_dir(dir.join("receipts")) {
            Ok(entries) => entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json").map(str::to_string)).collect(),
            Err(_) => Vec::new(),
        };
        receipts.sort();
        Ok(Reply::Json(json!({"panel": args.panel, "text": text, "writes": receipts.len(), "receipts": receipts})))
    }
}

/// Arguments of `acme-panel-write`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelWriteArgs {
    pub panel: String,
    pub text: String,
}

/// `acme-panel-write`: a mutation. `panel` is both the admission key (writes to one
/// panel run one at a time) and the device key (the host journals the action
/// before dispatch and blocks the panel while an outcome is unknown).
pub struct PanelWrite;

impl Command for PanelWrite {
    type Provider = AcmeProvider;
    type Args = PanelWriteArgs;

    fn spec() -> CommandSpec {
        CommandSpec::mutation("acme-panel-write")
            .summary("Show a text on an Acme panel.")
            .platform(PLATFORM)
            .domain(DOMAIN)
            .target_kind("acme-panel")
            .permission("app.interact")
            .target_key("panel")
            .device_key("panel")
            .timeouts(5_000, 30_000)
            .input_schema(json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "panel": panel_schema(),
                    "text": {"type": "string", "maxLength": MAX_TEXT, "description": "Text the panel shows."},
                },
                "required": ["panel", "text"],
            }))
    }

    async fn run(_: &AcmeProvider, ctx: &Context<'_>, inv: &Invocation, args: PanelWriteArgs) -> Result<Reply, ProviderError> {
        // Everything that can fail without touching the panel comes first: such a
        // failure is `not_dispatched`, so the host knows the panel is unchanged.
        let dir = panel_dir(ctx, &args.panel)?;
        let previous = read_text(&dir)?;
        if ctx.is_cancelled() {
            return Err(ProviderError::new(codes::CANCELLED, "cancelled before the write").not_dispatched());
        }
        // From here on a failure is ambiguous: the panel may or may not show the text.
        ctx.mark_dispatched();
        write_atomically(&dir.join("display.txt"), args.text.as_bytes()).map_err(|e| io_error("acme_panel_write_failed", &dir, e))?;
        // The durable receipt `reconcile` finds if the reply is lost.
        let receipt = json!({"actionId": inv.action_id, "runtimeEpoch": inv.runtime_epoch, "outcome": {"ok": true, "panel": args.panel, "text": args.text}});
        let receipts = dir.join("receipts");
        std::fs::create_dir_all(&receipts).map_err(|e| io_error("acme_panel_write_failed", &receipts, e))?;
        write_atomically(&receipts.join(format!("{}.json", inv.action_id)), receipt.to_string().as_bytes()).map_err(|e| io_error("acme_panel_write_failed", &receipts, e))?;
        // Evidence for later readers, when the host keeps a FactStore.
        let fact = if ctx.host().supports("facts.append") {
            ctx.facts().append("acme.panel", &args.panel, &json!({"actionId": inv.action_id, "text": args.text}), Durability::Memory).ok().map(|r| r.sequence)
        } else {
            None
        };
        ctx.info(&format!("acme: panel {} now shows {} bytes", args.panel, args.text.len()));
        Ok(Reply::Json(json!({"panel": args.panel, "text": args.text, "previous": previous, "actionId": inv.action_id, "factSequence": fact})))
    }
}

/// The `reconcile` hook's request: `{serial, pending}` where `serial` is the device
/// key's value and `pending` the journal's record of the action whose outcome is
/// unknown (`actionId`, `runtimeEpoch`, `plugin`, `command`, ...).
#[derive(Debug, Deserialize)]
pub struct ReconcileRequest {
    pub serial: String,
    pub pending: Value,
}

/// Answer `{status: "settled", receipt}` only from the durable receipt of that very
/// action (the host checks `actionId` and `runtimeEpoch` again); anything else
/// leaves the panel unresolved. Never repeats the write.
pub fn reconcile(ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
    let request: ReconcileRequest = serde_json::from_value(request).map_err(|e| ProviderError::new(codes::INVALID_ARGUMENT, format!("reconcile request: {e}")).not_dispatched())?;
    let Some(action_id) = request.pending.get("actionId").and_then(Value::as_str) else {
        return Ok(json!({"status": "unknown", "reason": "the pending record names no actionId"}));
    };
    let dir = panel_dir(ctx, &request.serial)?;
    match std::fs::read(dir.join("receipts").join(format!("{action_id}.json"))) {
        Ok(bytes) => {
            let receipt: Value = serde_json::from_slice(&bytes).map_err(|e| ProviderError::new("acme_receipt_corrupt", e.to_string()))?;
            Ok(json!({"status": "settled", "receipt": receipt}))
        }
        Err(_) => Ok(json!({"status": "unknown", "reason": "the panel holds no receipt for this action"})),
    }
}

impl Provider for AcmeProvider {
    fn manifest(&self) -> Manifest {
        Manifest::new(PLUGIN, env!("CARGO_PKG_VERSION")).platforms([PLATFORM]).domains([DomainSpec::new(DOMAIN, "Acme display panels: read and write what a panel shows")])
    }

    fn commands(&self) -> Commands<Self> {
        Commands::new().add::<PanelRead>().add::<PanelWrite>()
    }

    async fn hook(&self, ctx: &Context<'_>, method: &str, request: Value) -> Result<Value, ProviderError> {
        match method {
            "reconcile" => reconcile(ctx, request),
            other => Err(ProviderError::new(codes::UNSUPPORTED_PLUGIN_METHOD, format!("plugin `{PLUGIN}` does not implement `{other}`")).not_dispatched()),
        }
    }
}

/// The panel root: `ACME_PANEL_ROOT`, else `panels/` in the plugin's data directory.
pub fn panel_root(ctx: &Context<'_>) -> Result<PathBuf, ProviderError> {
    if let Some(root) = std::env::var_os(ENV_PANEL_ROOT).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(root));
    }
    ctx.data_dir()
        .map(|d| d.join("panels"))
        .ok_or_else(|| ProviderError::new(codes::DEVICE_NOT_FOUND, format!("no panel root: set {ENV_PANEL_ROOT} (the host gave no data directory)")).with_field("panel").not_dispatched())
}

/// The directory of a connected panel, or `device_not_found` (never dispatched).
fn panel_dir(ctx: &Context<'_>, panel: &str) -> Result<PathBuf, ProviderError> {
    let dir = panel_root(ctx)?.join(panel);
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(ProviderError::new(codes::DEVICE_NOT_FOUND, format!("no Acme panel `{panel}` is connected (no directory {})", dir.display()))
            .with_field("panel")
            .with_details(json!({"panel": panel}))
            .not_dispatched())
    }
}

fn read_text(dir: &Path) -> Result<Option<String>, ProviderError> {
    match std::fs::read_to_string(dir.join("display.txt")) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("acme_panel_read_failed", dir, e).not_dispatched()),
    }
}

/// Temp file, fsync, rename: a reader sees the old or the new text, never half.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn io_error(code: &str, path: &Path, e: std::io::Error) -> ProviderError {
    ProviderError::new(code, format!("{}: {e}", path.display()))
}

aab_plugin_api::export_provider!(AcmeProvider, || AcmeProvider);
