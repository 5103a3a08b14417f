//! Owns `aab mcp`, the MCP stdio adapter, and is the only module that knows MCP
//! types. It exposes exactly two tools, `capabilities` and `run`, and hands their
//! arguments unchanged to the runtime client, which validates them (rmcp checks
//! nothing against `inputSchema`). Every result is the compact JSON text of the
//! public reply; `isError` mirrors its failure. stdin EOF closes this adapter
//! only: the shared runtime and its operations keep going. The wire itself (line
//! reading, answering malformed messages) is [`crate::mcp_wire`]'s.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use aab_host::CommandError;
use aab_host::client::{Client, PublicReply};
use aab_host::registry::{discovery, request};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

use crate::mcp_wire;

const CAPABILITIES: &str = "capabilities";
const RUN: &str = "run";

const CAPABILITIES_DESCRIPTION: &str = "Discover aab commands. No arguments: the command directory by domain. \
     {command}: that command's input schema; narrow large schemas with operation/platform/provider/action.";
const RUN_DESCRIPTION: &str = "Run one aab command: {command, arguments, extract}. All command parameters go in \
     `arguments`. `extract` is required: null returns the result; a regex or script extractor returns only what it selects.";
const INSTRUCTIONS: &str = "Call `capabilities` to find a command and its schema, then `run` it. \
     Replies are compact JSON; isError marks a failure.";

/// Usage text for `aab mcp --help`.
pub const USAGE: &str = "\
Usage: aab mcp

Serve the Model Context Protocol on stdin/stdout (newline-delimited JSON-RPC).
Tools: `capabilities` (command discovery) and `run` (execute one command).
Logs go to stderr (filter with RUST_LOG). stdin EOF ends this adapter only;
the shared runtime keeps running.
";

/// Run the adapter until the client closes stdin; returns the exit code.
pub fn serve(client: Result<Client, CommandError>) -> i32 {
    let _ = tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return 1;
        }
    };
    runtime.block_on(async move {
        let adapter = Adapter::new(client);
        let in_flight = adapter.in_flight.clone();
        // Non-blocking pipes when the client launched us with FIFOs (the usual case),
        // blocking handles otherwise.
        let (stdin, stdout) = rmcp::transport::stdio_pipes();
        // rmcp reads through the line filter (mcp_wire): every line with an id is
        // answered, including the ones rmcp's own reader would drop.
        let writer = mcp_wire::shared_writer(stdout);
        let lines = mcp_wire::LineReader::new(tokio::io::BufReader::with_capacity(64 * 1024, HoldEof::new(stdin, in_flight)), writer.clone());
        let transport = (mcp_wire::message_sink(writer), lines.into_stream());
        let service = match adapter.serve(transport).await {
            Ok(service) => service,
            Err(error) => {
                tracing::error!(%error, "MCP session did not start");
                return 1;
            }
        };
        match service.waiting().await {
            Ok(_) => 0,
            Err(error) => {
                tracing::error!(%error, "MCP session ended abnormally");
                1
            }
        }
    })
}

/// The `ServerHandler`: two fixed tools over one shared runtime client.
struct Adapter {
    /// A client that failed to configure still serves `tools/list`; each call then
    /// reports the configuration error in the contract envelope.
    client: Result<Arc<Client>, CommandError>,
    tools: Vec<Tool>,
    in_flight: Arc<InFlight>,
}

impl Adapter {
    fn new(client: Result<Client, CommandError>) -> Adapter {
        let tools = tools(client.as_ref().ok().map(Client::registry));
        Adapter { client: client.map(Arc::new), tools, in_flight: Arc::default() }
    }

    async fn call(&self, name: &str, arguments: Value) -> CallToolResult {
        let client = match &self.client {
            Ok(client) => client.clone(),
            Err(error) => {
                let command = arguments.get("command").and_then(Value::as_str);
                return reply_result(Client::rejection(command, error.clone()));
            }
        };
        match name {
            CAPABILITIES => {
                let payload = tokio::task::spawn_blocking(move || client.capabilities(&arguments)).await;
                match payload {
                    Ok(payload) => {
                        let failed = payload.get("ok") == Some(&Value::Bool(false));
                        text_result(&payload, failed)
                    }
                    Err(error) => {
                        // Discovery touches no device, so a crash there dispatched nothing.
                        let error = CommandError::new("command_failed", format!("capabilities failed: {error}"));
                        reply_result(Client::rejection(None, error))
                    }
                }
            }
            RUN => {
                let command = arguments.get("command").and_then(Value::as_str).map(str::to_string);
                let cwd = match std::env::current_dir() {
                    Ok(cwd) => cwd,
                    Err(error) => {
                        let error = CommandError::new("invalid_request_directory", format!("cannot read the working directory: {error}"));
                        return reply_result(Client::rejection(command.as_deref(), error));
                    }
                };
                // `run` blocks until the runtime answers; a blocking thread per call lets
                // concurrent calls proceed in parallel without stalling the transport.
                match tokio::task::spawn_blocking(move || client.run(&arguments, &cwd)).await {
                    Ok(reply) => reply_result(reply),
                    Err(error) => {
                        // The request may have reached the runtime before the crash.
                        let error = CommandError::ambiguous("command_failed", format!("the runtime client failed: {error}"));
                        reply_result(Client::rejection(command.as_deref(), error))
                    }
                }
            }
            _ => {
                let error = CommandError::new(
                    "unknown_tool",
                    format!("unknown tool `{name}`; the tools are `{CAPABILITIES}` and `{RUN}`"),
                );
                text_result(&error.to_json(), true)
            }
        }
    }
}

impl ServerHandler for Adapter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("aab", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _guard = self.in_flight.enter();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        Ok(self.call(&request.name, arguments).await.into())
    }
}

/// The two tools; `capabilities`' `domain` enum includes the loaded plugins'
/// private domains when the registry is known.
fn tools(registry: Option<&aab_host::registry::Registry>) -> Vec<Tool> {
    let capabilities_schema = match registry {
        Some(registry) => discovery::capabilities_input_schema_with(registry),
        None => discovery::capabilities_input_schema(),
    };
    vec![
        Tool::new(CAPABILITIES, CAPABILITIES_DESCRIPTION, schema_object(capabilities_schema)),
        Tool::new(RUN, RUN_DESCRIPTION, schema_object(request::public_request_schema())),
    ]
}

/// MCP requires an object schema; anything else from the registry is a host bug,
/// so advertise the loosest object schema rather than refuse to serve.
fn schema_object(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(map) => Arc::new(map),
        other => {
            tracing::warn!(schema = %other, "tool input schema is not an object");
            let mut map = JsonObject::new();
            map.insert("type".into(), Value::String("object".into()));
            Arc::new(map)
        }
    }
}

fn reply_result(reply: PublicReply) -> CallToolResult {
    text_result(&reply.body, reply.exit_code != 0)
}

fn text_result(body: &Value, is_error: bool) -> CallToolResult {
    let content = vec![ContentBlock::text(body.to_string())];
    if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) }
}

// ---------------------------------------------------------------------------
// Holding stdin EOF until tool calls finish

/// Counts tool calls in progress.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            // Register before reading the count so a guard dropped in between wakes us.
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Time given to requests decoded just before EOF to reach `call_tool`: rmcp
/// spawns one task per request, and only an entered call is counted.
const EOF_SETTLE: Duration = Duration::from_millis(100);

/// stdin that reports EOF only once no tool call is in progress. rmcp's serve
/// loop gives in-flight handlers a few seconds after EOF and then drops them, but
/// a command may run for minutes; a client that sends its requests and closes
/// stdin must still receive every reply.
struct HoldEof<R> {
    inner: R,
    in_flight: Arc<InFlight>,
    state: EofState,
}

enum EofState {
    Reading,
    Draining(Pin<Box<dyn Future<Output = ()> + Send>>),
    Closed,
}

impl<R> HoldEof<R> {
    fn new(inner: R, in_flight: Arc<InFlight>) -> Self {
        HoldEof { inner, in_flight, state: EofState::Reading }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for HoldEof<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                EofState::Reading => {
                    let before = buf.filled().len();
                    ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
                    if buf.filled().len() > before || buf.remaining() == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    let in_flight = this.in_flight.clone();
                    this.state = EofState::Draining(Box::pin(async move {
                        tokio::time::sleep(EOF_SETTLE).await;
                        in_flight.wait_idle().await;
                    }));
                }
                EofState::Draining(wait) => {
                    ready!(wait.as_mut().poll(cx));
                    this.state = EofState::Closed;
                }
                EofState::Closed => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole `tools/list` response must stay small: agents pay for it in
    /// every session. Measured as the JSON-RPC response line on the wire.
    #[test]
    fn tools_list_fits_in_4_kib() {
        let result = ListToolsResult::with_all_items(tools(None));
        let line = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "result": result }).to_string();
        assert!(line.len() <= 4096, "tools/list is {} bytes", line.len());
    }

    #[test]
    fn exactly_two_tools() {
        let names: Vec<_> = tools(None).into_iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["capabilities", "run"]);
    }

    #[tokio::test]
    async fn eof_waits_for_calls_in_flight() {
        use tokio::io::AsyncReadExt;
        let in_flight = Arc::new(InFlight::default());
        let guard = in_flight.enter();
        let mut reader = HoldEof::new(&b"{}\n"[..], in_flight.clone());
        let mut data = Vec::new();
        let read = tokio::spawn(async move {
            reader.read_to_end(&mut data).await.map(|_| data)
        });
        tokio::time::sleep(EOF_SETTLE * 3).await;
        assert!(!read.is_finished(), "EOF was reported while a call was in flight");
        drop(guard);
        let data = tokio::time::timeout(Duration::from_secs(5), read).await.unwrap().unwrap().unwrap();
        assert_eq!(data, b"{}\n");
    }
}
