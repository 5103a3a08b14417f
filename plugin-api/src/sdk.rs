//! The safe side of the ABI for provider authors.
//!
//! Implement [`Provider`], then call [`export_provider!`](crate::export_provider) once
//! in the cdylib crate. The SDK contains panics at every entry point, runs each call
//! on the plugin's own tokio runtime (the host's runtime is invisible across the
//! boundary) and turns results into `aab.plugin-outcome/v1` JSON.

use std::cell::RefCell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Once, OnceLock};
use std::time::Duration;

use abi_stable::std_types::{RResult, RStr, RString};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::abi::{HostCallbacksRef, level};
use crate::protocol::{CommandSpec, INVOCATION_SCHEMA, Invocation, Manifest, Outcome, ProviderError, Reply};

/// A platform provider. One value per loaded plugin, shared by concurrent calls.
///
/// A provider lists its commands once, in [`Provider::commands`]: each [`Command`]
/// carries its spec and its handler, and the SDK derives both the manifest's
/// `commands` and the dispatch from that list, so the two cannot drift.
/// [`Provider::manifest`] then only names the plugin (name, version, platforms,
/// features, Intent providers). Providers written before `commands` existed
/// implement [`Provider::invoke`] and list specs in the manifest themselves; that
/// still works, and both styles can be mixed (listed commands are dispatched first).
pub trait Provider: Send + Sync + Sized + 'static {
    /// The manifest without the commands of [`Provider::commands`]; called once at
    /// load time.
    fn manifest(&self) -> Manifest;

    /// The typed commands; called once at load time.
    fn commands(&self) -> Commands<Self> {
        Commands::new()
    }

    /// Execute a validated command not listed in [`Provider::commands`]. Call
    /// [`Context::mark_dispatched`] right before the first externally visible effect.
    /// The default answers `unknown_command`.
    fn invoke(&self, ctx: &Context<'_>, invocation: Invocation) -> impl Future<Output = Result<Reply, ProviderError>> {
        let _ = ctx;
        async move { Err(ProviderError::new(crate::codes::UNKNOWN_COMMAND, format!("this plugin has no command `{}`", invocation.command)).not_dispatched()) }
    }

    /// Optional hooks by method name (e.g. `reconcile`). The default refuses.
    fn hook(&self, ctx: &Context<'_>, method: &str, request: Value) -> impl Future<Output = Result<Value, ProviderError>> {
        let _ = ctx;
        let _ = request;
        let method = method.to_string();
        async move { Err(ProviderError::new(crate::codes::UNSUPPORTED_PLUGIN_METHOD, format!("plugin does not implement `{method}`")).not_dispatched()) }
    }
}

/// One command: its spec and its handler, with typed arguments.
///
/// `Args` is deserialised from the invocation's `arguments` after the host validated
/// them against the spec's `inputSchema`; host execution options (`requestId`,
/// `feedback`, `timeoutMs`) are never among them (they are [`Invocation`] fields),
/// so `#[serde(deny_unknown_fields)]` works and keeps the type and the schema honest.
///
/// ```ignore
/// struct Tap;
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields, rename_all = "camelCase")]
/// struct TapArgs { serial: String, x: u32, y: u32 }
/// impl Command for Tap {
///     type Provider = MyProvider;
///     type Args = TapArgs;
///     fn spec() -> CommandSpec { CommandSpec::mutation("tap").platform("android").device_key("serial") /* ... */ }
///     async fn run(p: &MyProvider, ctx: &Context<'_>, inv: &Invocation, args: TapArgs) -> Result<Reply, ProviderError> { /* ... */ }
/// }
/// ```
pub trait Command: Send + Sync + 'static {
    type Provider: Provider;
    type Args: DeserializeOwned + 'static;

    fn spec() -> CommandSpec;

    /// Execute one validated call. Call [`Context::mark_dispatched`] right before
    /// the first externally visible effect.
    fn run(provider: &Self::Provider, ctx: &Context<'_>, invocation: &Invocation, args: Self::Args) -> impl Future<Output = Result<Reply, ProviderError>>;
}

type Handler<P> = for<'a> fn(&'a P, &'a Context<'a>, &'a Invocation) -> Pin<Box<dyn Future<Output = Result<Reply, ProviderError>> + 'a>>;

/// A provider's command list: spec and handler per command (see [`Command`]).
pub struct Commands<P> {
    entries: Vec<(CommandSpec, Handler<P>)>,
}

impl<P> Default for Commands<P> {
    fn default() -> Self {
        Commands { entries: Vec::new() }
    }
}

impl<P: Provider> Commands<P> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one command.
    pub fn add<C: Command<Provider = P>>(mut self) -> Self {
        self.entries.push((C::spec(), run_typed::<C>));
        self
    }

    /// The specs, in the order added.
    pub fn specs(&self) -> impl Iterator<Item = &CommandSpec> {
        self.entries.iter().map(|(s, _)| s)
    }

    /// Run the listed command `invocation.command`; `None` when it is not listed.
    pub async fn dispatch(&self, provider: &P, ctx: &Context<'_>, invocation: &Invocation) -> Option<Result<Reply, ProviderError>> {
        let (_, run) = self.entries.iter().find(|(s, _)| s.command == invocation.command)?;
        Some(run(provider, ctx, invocation).await)
    }
}

/// Deserialise a command's typed arguments. The host validated them against the
/// command's schema, so a failure here means the schema and the type disagree: a
/// provider bug, reported before anything was dispatched.
pub fn parse_arguments<A: DeserializeOwned>(invocation: &Invocation) -> Result<A, ProviderError> {
    let arguments = if invocation.arguments.is_null() { Value::Object(Default::default()) } else { invocation.arguments.clone() };
    serde_json::from_value(arguments).map_err(|e| {
        ProviderError::new(crate::codes::PLUGIN_ARGUMENTS_MISMATCH, format!("`{}`: arguments do not match the provider's argument type: {e}", invocation.command)).not_dispatched()
    })
}

fn run_typed<'a, C: Command>(provider: &'a C::Provider, ctx: &'a Context<'a>, invocation: &'a Invocation) -> Pin<Box<dyn Future<Output = Result<Reply, ProviderError>> + 'a>> {
    Box::pin(async move {
        let args = parse_arguments::<C::Args>(invocation)?;
        C::run(provider, ctx, invocation, args).await
    })
}

/// What the SDK keeps per loaded plugin: the provider and its command list.
#[doc(hidden)]
pub struct Loaded<P> {
    provider: P,
    commands: Commands<P>,
}

impl<P: Provider> Loaded<P> {
    fn new(provider: P) -> Self {
        let commands = provider.commands();
        Loaded { provider, commands }
    }

    /// The full manifest: [`Provider::manifest`] plus the listed commands' specs.
    pub fn manifest(&self) -> Manifest {
        let mut m = self.provider.manifest();
        m.commands.extend(self.commands.specs().cloned());
        m
    }

    pub async fn invoke(&self, ctx: &Context<'_>, mut invocation: Invocation) -> Result<Reply, ProviderError> {
        // Older hosts sent the execution options inside `arguments`.
        invocation.lift_host_options();
        match self.commands.dispatch(&self.provider, ctx, &invocation).await {
            Some(result) => result,
            None => self.provider.invoke(ctx, invocation).await,
        }
    }
}

/// The host as seen from inside one call.
pub struct Context<'a> {
    host: &'a HostCallbacksRef,
}

impl<'a> Context<'a> {
    #[doc(hidden)]
    pub fn new(host: &'a HostCallbacksRef) -> Self {
        Context { host }
    }

    /// True once the call was cancelled (caller cancel, deadline or runtime stop).
    pub fn is_cancelled(&self) -> bool {
        self.host.is_cancelled()
    }

    /// Time left of the call's deadline.
    pub fn remaining(&self) -> Duration {
        Duration::from_millis(self.host.remaining_ms())
    }

    /// Mark the moment the effect is dispatched; failures after it are ambiguous.
    pub fn mark_dispatched(&self) {
        self.host.mark_dispatched()
    }

    pub fn log(&self, level: u8, message: &str) {
        self.host.log(level, RStr::from_str(message))
    }

    pub fn info(&self, message: &str) {
        self.log(level::INFO, message)
    }

    /// Call a host service by name with JSON parameters.
    pub fn host_call(&self, method: &str, params: &Value) -> Result<Value, ProviderError> {
        host_call(self.host, method, params)
    }

    /// What the host offers (`host.info`, asked once per plugin and cached):
    /// `ctx.host().supports("facts.append")`.
    pub fn host(&self) -> crate::host::HostInfo {
        crate::host::host_info(self)
    }

    /// The plugin's private directory for its own execution tables, if the host
    /// gave one (`host.info` `dataDir`).
    pub fn data_dir(&self) -> Option<std::path::PathBuf> {
        self.host().data_dir
    }

    /// The host's FactStore (typed `facts.append` / `facts.read`).
    pub fn facts(&self) -> crate::host::Facts<'_, 'a> {
        crate::host::Facts::new(self)
    }

    /// Log at a level (`abi::level`); the host writes it to its runtime log.
    pub fn warn(&self, message: &str) {
        self.log(level::WARN, message)
    }

    pub fn debug(&self, message: &str) {
        self.log(level::DEBUG, message)
    }

    /// A handle to the host's JSON services that outlives this call, for work the
    /// plugin does between calls (e.g. committing capture records the moment they
    /// arrive). It carries no deadline or cancellation of its own: those belong to
    /// calls. Only `host_call` is offered.
    pub fn detach(&self) -> HostHandle {
        HostHandle { host: crate::abi::HostCallbacks_TO::from_sabi(self.host.obj.shallow_clone()) }
    }

    /// Resolves when the call is cancelled or its deadline passes; use in
    /// `tokio::select!` so local subprocesses and sockets are dropped promptly.
    pub async fn cancelled(&self) {
        loop {
            if self.is_cancelled() || self.host.remaining_ms() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Host services usable outside a call (see [`Context::detach`]).
pub struct HostHandle {
    host: HostCallbacksRef,
}

impl HostHandle {
    /// Call a host service by name with JSON parameters.
    pub fn host_call(&self, method: &str, params: &Value) -> Result<Value, ProviderError> {
        host_call(&self.host, method, params)
    }

    /// The host's FactStore between calls (typed `facts.append` / `facts.read`).
    pub fn facts(&self) -> crate::host::Facts<'_, 'static> {
        crate::host::Facts::detached(self)
    }
}

fn host_call(host: &HostCallbacksRef, method: &str, params: &Value) -> Result<Value, ProviderError> {
    let params = params.to_string();
    match host.call(RStr::from_str(method), RStr::from_str(&params)) {
        RResult::ROk(s) => serde_json::from_str(s.as_str()).map_err(|e| ProviderError::new(crate::codes::HOST_PROTOCOL_ERROR, format!("host returned invalid JSON: {e}"))),
        RResult::RErr(s) => Err(serde_json::from_str::<ProviderError>(s.as_str()).unwrap_or_else(|_| ProviderError::new(crate::codes::HOST_CALL_FAILED, s.to_string()))),
    }
}

thread_local! {
    /// Message of the last panic on this thread, captured by the quiet hook.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The plugin has its own copy of std, so this hook only affects panics inside
        // the plugin. It records the message for the error envelope instead of
        // printing a backtrace into the runtime's log.
        std::panic::set_hook(Box::new(|info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{location}")));
        }));
    });
}

fn take_panic_message() -> String {
    LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "plugin panicked".to_string())
}

/// The plugin's own tokio runtime, built on first use.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("aab-plugin")
            .enable_all()
            .build()
            .expect("plugin tokio runtime")
    })
}

#[doc(hidden)]
pub fn __manifest<P: Provider>(provider: &OnceLock<Loaded<P>>, make: fn() -> P) -> RString {
    install_quiet_panic_hook();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let p = provider.get_or_init(|| Loaded::new(make()));
        serde_json::to_string(&p.manifest()).unwrap_or_else(|e| Outcome::failure(crate::codes::PLUGIN_MANIFEST_INVALID, e.to_string()).to_json())
    }));
    match result {
        Ok(s) => RString::from(s),
        Err(_) => RString::from(Outcome::failure(crate::codes::PLUGIN_PANIC, take_panic_message()).to_json()),
    }
}

#[doc(hidden)]
pub fn __call<P: Provider>(provider: &OnceLock<Loaded<P>>, make: fn() -> P, method: RStr<'_>, request: RStr<'_>, host: &HostCallbacksRef) -> RString {
    install_quiet_panic_hook();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let p = provider.get_or_init(|| Loaded::new(make()));
        let ctx = Context::new(host);
        match method.as_str() {
            "invoke" => {
                let invocation: Invocation = match serde_json::from_str(request.as_str()) {
                    Ok(i) => i,
                    Err(e) => return Outcome::failure(crate::codes::PLUGIN_PROTOCOL_ERROR, format!("invalid invocation: {e}")).to_json(),
                };
                if invocation.schema != INVOCATION_SCHEMA {
                    return Outcome::failure(crate::codes::PLUGIN_PROTOCOL_ERROR, format!("unsupported invocation schema `{}`", invocation.schema)).to_json();
                }
                let result = runtime().block_on(p.invoke(&ctx, invocation));
                Outcome::from_result(result).to_json()
            }
            other => {
                let request: Value = match serde_json::from_str(request.as_str()) {
                    Ok(v) => v,
                    Err(e) => return Outcome::failure(crate::codes::PLUGIN_PROTOCOL_ERROR, format!("invalid request: {e}")).to_json(),
                };
                let result = runtime().block_on(p.provider.hook(&ctx, other, request));
                Outcome::from_result(result.map(Reply::Json)).to_json()
            }
        }
    }));
    match result {
        Ok(s) => RString::from(s),
        Err(_) => RString::from(Outcome::failure(crate::codes::PLUGIN_PANIC, take_panic_message()).to_json()),
    }
}

/// Export a [`Provider`] as an aab plugin. Use once per cdylib crate:
///
/// ```ignore
/// aab_plugin_api::export_provider!(MyProvider, MyProvider::new);
/// ```
///
/// The plugin crate must list `abi_stable` as a dependency (its export attribute
/// expands to paths in that crate); authors never use its types directly.
#[macro_export]
macro_rules! export_provider {
    ($provider:ty, $make:expr) => {
        /// Plain ABI version symbol, read by the host before the layout check.
        #[unsafe(no_mangle)]
        pub static AAB_PLUGIN_ABI_MAJOR: u32 = $crate::abi::ABI_MAJOR;

        static __AAB_PROVIDER: ::std::sync::OnceLock<$crate::sdk::Loaded<$provider>> = ::std::sync::OnceLock::new();

        fn __aab_make() -> $provider {
            ($make)()
        }

        extern "C" fn __aab_manifest() -> $crate::abi_stable::std_types::RString {
            $crate::sdk::__manifest::<$provider>(&__AAB_PROVIDER, __aab_make)
        }

        extern "C" fn __aab_call(
            method: $crate::abi_stable::std_types::RStr<'_>,
            request: $crate::abi_stable::std_types::RStr<'_>,
            host: &$crate::abi::HostCallbacksRef,
        ) -> $crate::abi_stable::std_types::RString {
            $crate::sdk::__call::<$provider>(&__AAB_PROVIDER, __aab_make, method, request, host)
        }

        #[$crate::abi_stable::export_root_module]
        fn __aab_root_module() -> $crate::abi::PluginModuleRef {
            use $crate::abi_stable::prefix_type::PrefixTypeTrait;
            $crate::abi::PluginModule { manifest: __aab_manifest, call: __aab_call }.leak_into_prefix()
        }
    };
}
