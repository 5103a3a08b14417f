//! A minimal MCP stdio client shared by the bench binaries: start a server process,
//! `initialize`, then request/response by id (notifications in between are skipped).
//! Each request returns the reply and its size in bytes (the figure agents pay for).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

pub struct Mcp {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Mcp {
    /// Start `command` as an MCP server and initialise the session as `client_name`.
    pub fn start(mut command: Command, client_name: &str) -> Result<Mcp, String> {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut m = Mcp { child, stdin, stdout, next: 1 };
        m.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": client_name, "version": "0"}}))?;
        writeln!(m.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).map_err(|e| e.to_string())?;
        Ok(m)
    }

    /// One request; returns the reply with the same id and its size in bytes.
    pub fn request(&mut self, method: &str, params: Value) -> Result<(Value, usize), String> {
        let id = self.next;
        self.next += 1;
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).map_err(|e| e.to_string())?;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("the MCP server closed its stdout".into());
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if v.get("id") == Some(&json!(id)) {
                return Ok((v, line.trim_end().len()));
            }
        }
    }

    /// A tool call that must not be an error; returns the result and the reply's bytes.
    #[allow(dead_code)] // used by aab-bench-android only
    pub fn tool(&mut self, name: &str, arguments: Value) -> Result<(Value, usize), String> {
        let (v, n) = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        if v["result"]["isError"] == json!(true) || v.get("error").is_some() {
            return Err(format!("{name}: {}", v.to_string().chars().take(20000).collect::<String>()));
        }
        Ok((v["result"].clone(), n))
    }
}

/// One aab command through the MCP `run` tool; the execution must have succeeded.
/// Returns the public reply (structured content, else the text content parsed).
#[allow(dead_code)] // used by aab-bench-android only
pub fn run_command(m: &mut Mcp, command: &str, arguments: Value) -> Result<Value, String> {
    let (v, _) = m.request("tools/call", json!({"name": "run", "arguments": {"command": command, "arguments": arguments, "extract": null}}))?;
    let r = &v["result"];
    let body = if r["structuredContent"].is_null() { serde_json::from_str(r["content"][0]["text"].as_str().unwrap_or("null")).unwrap_or(Value::Null) } else { r["structuredContent"].clone() };
    if body["execution"]["ok"] != json!(true) {
        return Err(format!("{command}: {}", v.to_string().chars().take(2000).collect::<String>()));
    }
    Ok(body)
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
