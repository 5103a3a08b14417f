//! The `aab-ios-sim` binary's subcommands: `serve` (a standalone simulator)
//! and the tool doubles reached through `<home>/bin/{xcrun,devicectl,xcodebuild}`:
//! `devicectl` parses Xcode devicectl's argument shapes, asks the simulator
//! over the authenticated control socket (bounded reads, `--timeout` honoured)
//! and writes the `--json-output` document; `xcodebuild` checks the prepared
//! WDA project for `build-for-testing` (exit 65 like a compile error) and runs
//! the Runner for `test-without-building`, staying alive until it stops.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

const DEVICECTL_VERSION: &str = "397.24";
const MAX_REPLY: u64 = 64 * 1024 * 1024;
const MAX_SMALL_FILE: u64 = 64 * 1024;
/// How long a hung double waits at most (the simulator's drop ends it sooner).
const HANG_LIMIT: Duration = Duration::from_secs(600);

/// Entry point: `args` without the program name. Returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("usage: aab-ios-sim serve [--home DIR] [--devices N] | devicectl|xcrun|xcodebuild --home DIR ARGS…");
        return 64;
    };
    match cmd.as_str() {
        "serve" => serve(rest),
        "devicectl" | "xcrun" | "xcodebuild" => {
            let (home, rest) = match rest {
                [flag, home, rest @ ..] if flag == "--home" => (PathBuf::from(home), rest.to_vec()),
                _ => {
                    eprintln!("aab-ios-sim {cmd}: --home DIR is required first");
                    return 64;
                }
            };
            match cmd.as_str() {
                "devicectl" => devicectl(&home, rest),
                "xcodebuild" => xcodebuild(&home, rest),
                _ => match rest.split_first() {
                    Some((tool, more)) if tool == "devicectl" => devicectl(&home, more.to_vec()),
                    Some((tool, more)) if tool == "xcodebuild" => xcodebuild(&home, more.to_vec()),
                    _ => {
                        eprintln!("xcrun: error: unable to find utility \"{}\", not a developer tool or in PATH", rest.first().map(String::as_str).unwrap_or(""));
                        72
                    }
                },
            }
        }
        other => {
            eprintln!("aab-ios-sim: unknown subcommand {other:?}");
            64
        }
    }
}

fn serve(args: &[String]) -> i32 {
    let mut opts = crate::Options::default();
    let mut i = 0;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--home", Some(h)) => opts.home = Some(PathBuf::from(h)),
            ("--devices", Some(n)) => opts.devices = n.parse().unwrap_or(1).clamp(1, 16),
            ("--scenario", Some(f)) => match std::fs::read_to_string(f).map_err(|e| e.to_string()).and_then(|t| crate::Scenario::from_json(&t)) {
                Ok(s) => opts.scenario = s,
                Err(e) => {
                    eprintln!("aab-ios-sim serve: {e}");
                    return 64;
                }
            },
            (a, _) => {
                eprintln!("aab-ios-sim serve: unknown argument {a:?}");
                return 64;
            }
        }
        i += 2;
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return 70 };
    rt.block_on(async {
        let sim = match crate::Simulator::start(opts).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("aab-ios-sim serve: {e}");
                return 70;
            }
        };
        println!("{}", sim.describe());
        let _ = std::io::stdout().flush();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        drop(sim);
        0
    })
}

// ------------------------------------------------------------------ the control client

struct Client {
    wr: TcpStream,
    rd: BufReader<TcpStream>,
}

fn read_small(path: &Path) -> Result<String, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut s = String::new();
    f.take(MAX_SMALL_FILE).read_to_string(&mut s).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(s)
}

impl Client {
    fn connect(home: &Path) -> Result<Client, String> {
        let info: Value = serde_json::from_str(&read_small(&home.join("control.json"))?).map_err(|e| format!("control.json: {e}"))?;
        let addr: SocketAddr = info["address"].as_str().and_then(|a| a.parse().ok()).ok_or("control.json has no address")?;
        let token = read_small(&home.join("control.token"))?;
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("simulator unreachable at {addr}: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(10))).ok();
        let mut wr = s.try_clone().map_err(|e| e.to_string())?;
        wr.write_all(format!("{}\n", token.trim()).as_bytes()).map_err(|e| e.to_string())?;
        Ok(Client { wr, rd: BufReader::new(s) })
    }

    /// One request; `None` timeout = wait as long as the simulator lives.
    fn call(&mut self, req: &Value, timeout: Option<Duration>) -> Result<Value, CallError> {
        self.rd.get_ref().set_read_timeout(timeout).ok();
        self.wr.write_all(format!("{req}\n").as_bytes()).map_err(|e| CallError::Io(e.to_string()))?;
        let mut line = Vec::new();
        let r = (&mut self.rd).take(MAX_REPLY).read_until(b'\n', &mut line);
        match r {
            Ok(0) => Err(CallError::Io("the simulator closed the connection".into())),
            Ok(_) if line.last() != Some(&b'\n') => Err(CallError::Io("reply too large".into())),
            Ok(_) => serde_json::from_slice(&line).map_err(|e| CallError::Io(e.to_string())),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Err(CallError::Timeout),
            Err(e) => Err(CallError::Io(e.to_string())),
        }
    }

    /// Blocks until the simulator closes the connection (or `limit`).
    fn hold(&mut self, limit: Duration) {
        self.rd.get_ref().set_read_timeout(Some(limit)).ok();
        let mut buf = [0u8; 256];
        let _ = self.rd.read(&mut buf);
    }
}

enum CallError {
    Timeout,
    Io(String),
}

// ------------------------------------------------------------------ devicectl

const VALUE_OPTIONS: [&str; 11] = ["--timeout", "--json-output", "-j", "--log-output", "--device", "-d", "--domain-type", "--domain-identifier", "--source", "--destination", "--display-unique-id"];
const FLAGS: [&str; 5] = ["--terminate-existing", "--quiet", "-q", "--verbose", "-v"];
const COMMANDS: [&str; 5] = ["list devices", "device copy from", "device install app", "device process launch", "device capture screenshot"];

struct Parsed {
    command: String,
    options: std::collections::HashMap<String, String>,
    flags: Vec<String>,
    positional: Vec<String>,
}

fn canonical(opt: &str) -> &str {
    match opt {
        "-j" => "--json-output",
        "-d" => "--device",
        "-q" => "--quiet",
        "-v" => "--verbose",
        o => o,
    }
}

fn parse_devicectl(args: &[String]) -> Result<Parsed, String> {
    let mut options = std::collections::HashMap::new();
    let mut flags = vec![];
    let mut words = vec![];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if VALUE_OPTIONS.contains(&a) {
            let v = args.get(i + 1).ok_or_else(|| format!("Missing value for '{a}'"))?;
            if options.insert(canonical(a).to_string(), v.clone()).is_some() {
                return Err(format!("'{a}' given twice"));
            }
            i += 2;
            continue;
        }
        if FLAGS.contains(&a) {
            flags.push(canonical(a).to_string());
        } else if a.starts_with('-') {
            return Err(format!("Unknown option '{a}'"));
        } else {
            words.push(a.to_string());
        }
        i += 1;
    }
    let command = COMMANDS.iter().find(|c| {
        let n = c.split(' ').count();
        words.len() >= n && words[..n].join(" ") == **c
    });
    let Some(command) = command else { return Err(format!("Unknown command '{}'", words.join(" "))) };
    let positional = words[command.split(' ').count()..].to_vec();
    Ok(Parsed { command: command.to_string(), options, flags, positional })
}

fn write_document(path: Option<&String>, args: &[String], command: &str, outcome: Result<Value, Value>) {
    let Some(path) = path else { return };
    let mut arguments = vec!["devicectl".to_string()];
    arguments.extend(args.iter().cloned());
    let info = json!({
        "arguments": arguments, "commandType": crate::devicectl::command_type(command),
        "environment": { "TERM": std::env::var("TERM").unwrap_or_else(|_| "dumb".into()) },
        "jsonVersion": 2, "outcome": if outcome.is_ok() { "success" } else { "failed" }, "version": DEVICECTL_VERSION,
    });
    let doc = match outcome {
        Ok(result) => json!({ "info": info, "result": result }),
        Err(error) => json!({ "error": error, "info": info }),
    };
    if let Err(e) = std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default()) {
        eprintln!("ERROR: could not write the JSON output to {path}: {e}");
    }
}

fn devicectl(home: &Path, args: Vec<String>) -> i32 {
    let p = match parse_devicectl(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("Error: {e}\nUsage: devicectl <subcommand>");
            return 64;
        }
    };
    let timeout = match p.options.get("--timeout").map(|t| t.parse::<u64>()) {
        None => None,
        Some(Ok(t)) if (1..=86400).contains(&t) => Some(Duration::from_secs(t)),
        Some(_) => {
            eprintln!("Error: The value '{}' is invalid for '--timeout <seconds>'", p.options["--timeout"]);
            return 64;
        }
    };
    let json_out = p.options.get("--json-output");
    let fail = |error: Value| {
        let msg = error["userInfo"]["NSLocalizedDescription"]["string"].as_str().unwrap_or("failed").to_string();
        eprintln!("ERROR: {msg} ({} error {}.)", error["domain"].as_str().unwrap_or(""), error["code"]);
        write_document(json_out, &args, &p.command, Err(error));
        1
    };
    let mut req = json!({ "op": "devicectl", "command": p.command, "device": p.options.get("--device") });
    let need = |k: &str| p.options.get(k).cloned().ok_or_else(|| format!("Missing expected argument '{k}'"));
    let prepared: Result<(), String> = (|| {
        match p.command.as_str() {
            "list devices" => {}
            "device copy from" => {
                need("--device")?;
                req["domainType"] = json!(need("--domain-type")?);
                req["bundleId"] = json!(need("--domain-identifier")?);
                req["source"] = json!(need("--source")?);
                need("--destination")?;
            }
            "device install app" => {
                need("--device")?;
                let [path] = p.positional.as_slice() else { return Err("Missing expected argument '<path>'".into()) };
                req["appPath"] = json!(path);
            }
            "device process launch" => {
                need("--device")?;
                let [bundle] = p.positional.as_slice() else { return Err("Missing expected argument '<bundle-identifier-or-path>'".into()) };
                req["bundleId"] = json!(bundle);
                req["terminateExisting"] = json!(p.flags.iter().any(|f| f == "--terminate-existing"));
            }
            _ => {
                need("--device")?;
                need("--destination")?;
            }
        }
        Ok(())
    })();
    if let Err(e) = prepared {
        eprintln!("Error: {e}");
        return 64;
    }
    if p.command == "device install app" {
        let path = PathBuf::from(req["appPath"].as_str().unwrap_or(""));
        let info = read_small(&path.join("Info.plist")).and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| format!("Info.plist: {e}")));
        match info {
            Ok(info) if path.is_dir() => req["info"] = info,
            Ok(_) => return fail(crate::devicectl::ns_error("NSCocoaErrorDomain", 260, "The app bundle is not a directory.")),
            Err(e) => return fail(crate::devicectl::ns_error("NSCocoaErrorDomain", 260, &format!("The app bundle could not be read: {e}"))),
        }
    }
    let mut client = match Client::connect(home) {
        Ok(c) => c,
        Err(e) => return fail(crate::devicectl::ns_error(crate::devicectl::CORE_DEVICE, 1, &format!("Unable to reach CoreDevice services: {e}"))),
    };
    let reply = match client.call(&req, timeout) {
        Ok(r) => r,
        Err(CallError::Timeout) => return fail(crate::devicectl::ns_error(crate::devicectl::CORE_DEVICE, 2, &format!("The operation timed out after {} seconds.", timeout.map(|t| t.as_secs()).unwrap_or(0)))),
        Err(CallError::Io(e)) => return fail(crate::devicectl::ns_error(crate::devicectl::CORE_DEVICE, 1, &format!("The connection to CoreDevice services failed: {e}"))),
    };
    if reply["hang"] == true {
        client.hold(HANG_LIMIT);
        return 1;
    }
    if reply["ok"] != true {
        return fail(reply["error"].clone());
    }
    let mut result = reply["result"].clone();
    if let (Some(content), Some(dest)) = (reply["content"].as_str(), p.options.get("--destination")) {
        let Some(bytes) = crate::util::unb64(content) else { return fail(crate::devicectl::ns_error(crate::devicectl::CORE_DEVICE, 1, "corrupt transfer")) };
        if let Err(e) = std::fs::write(dest, &bytes) {
            return fail(crate::devicectl::ns_error("NSPOSIXErrorDomain", e.raw_os_error().unwrap_or(5) as i64, &format!("Could not write {dest}: {e}")));
        }
        result["destination"] = json!(dest);
    }
    if !p.flags.iter().any(|f| f == "--quiet") {
        println!("{}", summary(&p.command, &result));
    }
    write_document(json_out, &args, &p.command, Ok(result));
    0
}

fn summary(command: &str, r: &Value) -> String {
    match command {
        "list devices" => r["devices"].as_array().map(|d| d.iter().map(|x| format!("{}   {}   {}   {}", x["deviceProperties"]["name"].as_str().unwrap_or(""), x["identifier"].as_str().unwrap_or(""), x["connectionProperties"]["tunnelState"].as_str().unwrap_or(""), x["hardwareProperties"]["marketingName"].as_str().unwrap_or(""))).collect::<Vec<_>>().join("\n")).unwrap_or_default(),
        "device process launch" => format!("Launched application with PID {}", r["process"]["processIdentifier"]),
        "device install app" => format!("App installed: bundleID: {}", r["installedApplications"][0]["bundleID"].as_str().unwrap_or("")),
        _ => "Done.".into(),
    }
}

// ------------------------------------------------------------------ xcodebuild

struct XcodebuildArgs {
    project: Option<String>,
    scheme: Option<String>,
    destination: Option<String>,
    derived: Option<String>,
    settings: std::collections::HashMap<String, String>,
    action: Option<String>,
}

fn parse_xcodebuild(args: &[String]) -> Result<XcodebuildArgs, String> {
    let mut x = XcodebuildArgs { project: None, scheme: None, destination: None, derived: None, settings: Default::default(), action: None };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let value = || args.get(i + 1).cloned().ok_or_else(|| format!("option '{a}' requires an argument"));
        match a {
            "-project" => x.project = Some(value()?),
            "-scheme" => x.scheme = Some(value()?),
            "-destination" => x.destination = Some(value()?),
            "-derivedDataPath" => x.derived = Some(value()?),
            "-sdk" | "-configuration" | "-xctestrun" | "-resultBundlePath" => {
                value()?;
            }
            "-allowProvisioningUpdates" | "-quiet" | "-allowProvisioningDeviceRegistration" => {
                i += 1;
                continue;
            }
            "build-for-testing" | "test-without-building" => x.action = Some(a.to_string()),
            s if s.contains('=') && !s.starts_with('-') => {
                let (k, v) = s.split_once('=').unwrap_or((s, ""));
                x.settings.insert(k.to_string(), v.to_string());
                i += 1;
                continue;
            }
            other => return Err(format!("invalid option '{other}'")),
        }
        i += if matches!(a, "build-for-testing" | "test-without-building") { 1 } else { 2 };
    }
    Ok(x)
}

fn event(home: &Path, udid: Option<&str>, ev: Value) {
    if let Ok(mut c) = Client::connect(home) {
        let _ = c.call(&json!({ "op": "xcodebuild-event", "udid": udid, "event": ev }), Some(Duration::from_secs(5)));
    }
}

fn xcodebuild(home: &Path, args: Vec<String>) -> i32 {
    let x = match parse_xcodebuild(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("xcodebuild: error: {e}");
            return 64;
        }
    };
    let udid = x.destination.as_deref().and_then(|d| d.split(',').find_map(|kv| kv.trim().strip_prefix("id="))).map(str::to_string);
    let Some(action) = x.action.clone() else {
        eprintln!("xcodebuild: error: an action (build-for-testing or test-without-building) is required");
        return 64;
    };
    let (Some(project), Some(derived)) = (x.project.clone(), x.derived.clone()) else {
        eprintln!("xcodebuild: error: -project and -derivedDataPath are required");
        return 64;
    };
    if x.scheme.as_deref() != Some("WebDriverAgentRunner") {
        eprintln!("xcodebuild: error: The project does not contain a scheme named \"{}\".", x.scheme.unwrap_or_default());
        return 65;
    }
    let Some(test_bundle) = x.settings.get("PRODUCT_BUNDLE_IDENTIFIER").cloned() else {
        eprintln!("xcodebuild: error: PRODUCT_BUNDLE_IDENTIFIER is required for the Runner");
        return 65;
    };
    let runner = format!("{test_bundle}.xctrunner");
    let products = Path::new(&derived).join("Build/Products");
    match action.as_str() {
        "build-for-testing" => {
            let proj = Path::new(&project);
            let manifest = proj.parent().map(|p| p.join("aab-wda-project.json")).unwrap_or_default();
            let manifest_ok = read_small(&manifest).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()).is_some_and(|m| m["schemaVersion"] == "aab.ios-wda-project/v1");
            if proj.file_name().is_none_or(|n| n != "WebDriverAgent.xcodeproj") || !proj.is_dir() {
                eprintln!("xcodebuild: error: '{project}' does not exist.");
                return 66;
            }
            if !manifest_ok {
                println!("/WebDriverAgentLib/Routing/FBWebServer.m:112:5: error: use of undeclared identifier 'AABWDARouteQueue'");
                println!("\nThe following build commands failed:\n\tCompileC WebDriverAgentLib FBWebServer.m\n(1 failure)");
                eprintln!("** TEST BUILD FAILED **");
                event(home, udid.as_deref(), json!({ "action": action, "ok": false, "reason": "unprepared project" }));
                return 65;
            }
            if x.settings.get("DEVELOPMENT_TEAM").is_none_or(|t| t.is_empty()) {
                eprintln!("error: Signing for \"WebDriverAgentRunner\" requires a development team. Select a development team in the Signing & Capabilities editor.");
                eprintln!("** TEST BUILD FAILED **");
                return 65;
            }
            let app = products.join("Debug-iphoneos/WebDriverAgentRunner-Runner.app");
            let wrote = std::fs::create_dir_all(&app)
                .and_then(|_| std::fs::write(app.join("Info.plist"), json!({ "CFBundleIdentifier": runner, "CFBundleName": "WebDriverAgentRunner-Runner", "CFBundleShortVersionString": "14.1.1", "CFBundleVersion": "1" }).to_string()))
                .and_then(|_| std::fs::write(products.join("WebDriverAgentRunner_iphoneos-arm64.xctestrun"), json!({ "TestBundleIdentifier": test_bundle, "RunnerBundleIdentifier": runner, "DevelopmentTeam": x.settings.get("DEVELOPMENT_TEAM") }).to_string()));
            if let Err(e) = wrote {
                eprintln!("error: could not write build products: {e}");
                return 65;
            }
            println!("** TEST BUILD SUCCEEDED **");
            event(home, udid.as_deref(), json!({ "action": action, "ok": true, "runnerBundleId": runner, "derivedDataPath": derived }));
            0
        }
        _ => {
            if !products.join("WebDriverAgentRunner_iphoneos-arm64.xctestrun").is_file() {
                eprintln!("xcodebuild: error: Failed to build workspace: the test products under {} are missing; run build-for-testing first.", products.display());
                return 65;
            }
            let Some(udid) = udid else {
                eprintln!("xcodebuild: error: Unable to find a destination matching the provided destination specifier");
                return 70;
            };
            let mut client = match Client::connect(home) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("xcodebuild: error: {e}");
                    return 70;
                }
            };
            let started = client.call(&json!({ "op": "start-runner", "udid": udid, "runnerBundleId": runner, "xcodebuildPid": std::process::id() }), Some(Duration::from_secs(60)));
            let started = match started {
                Ok(v) if v["ok"] == true => v,
                Ok(v) if v["error"] == "no_device" => {
                    eprintln!("xcodebuild: error: Unable to find a destination matching the provided destination specifier:\n\t\t{{ id:{udid} }}");
                    return 70;
                }
                Ok(v) => {
                    eprintln!("Testing failed:\n\t{}", v["message"].as_str().unwrap_or("the Runner did not start"));
                    return 65;
                }
                Err(_) => {
                    eprintln!("Testing failed: the test runner did not start");
                    return 65;
                }
            };
            println!("Test Suite 'All tests' started");
            println!("    t =     0.00s Start Test");
            println!("ServerURLHere->http://{}:{}<-ServerURLHere", started["ip"].as_str().unwrap_or("127.0.0.1"), started["port"]);
            let _ = std::io::stdout().flush();
            let epoch = started["runtimeEpoch"].clone();
            let _ = client.call(&json!({ "op": "runner-wait", "udid": udid, "runtimeEpoch": epoch }), None);
            eprintln!("Testing failed:\n\tWebDriverAgentRunner-Runner encountered an error (Lost connection to the test process)\n** TEST EXECUTE FAILED **");
            65
        }
    }
}
