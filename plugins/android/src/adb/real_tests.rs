//! The transport against the REAL adb server (Debian `adb`), each test on its own
//! port and `HOME` (see [`crate::test_support::PrivateServer`]), plus deadline and
//! cancellation behaviour against a silent fake server.

use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::server::{AdbServer, Env};
use super::{Deadline, codes, select};
use crate::test_support::{PrivateServer, deadline, free_port};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn no_server_listening_is_started_and_answers_version_and_an_empty_device_list() {
    let p = PrivateServer::new();
    assert!(!p.is_listening());
    rt().block_on(async {
        // adb 29 (1.0.41) reports protocol version 0x29.
        assert_eq!(p.server.version(deadline()).await.unwrap(), 0x29);
        assert!(p.is_listening(), "the first call started a server");
        assert_eq!(p.server.devices(deadline()).await.unwrap(), vec![]);
        assert_eq!(p.server.list_forwards(deadline()).await.unwrap(), vec![]);
        let e = select::select(&p.server, None, deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::DEVICE_NOT_FOUND, Some(false)));
        let e = p.server.transport("nosuch", deadline(), "t").await.err().unwrap();
        assert_eq!(e.error, codes::DEVICE_NOT_FOUND);
        let e = p.server.forward("nosuch", "tcp:0", "localabstract:x", true, deadline()).await.unwrap_err();
        assert_eq!(e.error, codes::DEVICE_NOT_FOUND, "{e:?}");
    });
    assert!(p.home.path().join(".android").exists(), "the started server used the private HOME");
}

#[test]
fn concurrent_first_calls_start_one_server() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let (a, b) = tokio::join!(p.server.version(deadline()), p.server.version(deadline()));
        assert_eq!((a.unwrap(), b.unwrap()), (0x29, 0x29));
    });
}

#[test]
fn wrong_adb_path_is_a_clear_error_when_no_server_listens() {
    let p = PrivateServer::with_env(|e| e.adb = Some("/nonexistent/bin/adb".into()));
    rt().block_on(async {
        let e = p.server.version(deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::ADB_UNAVAILABLE, Some(false)));
        assert!(e.message.contains("/nonexistent/bin/adb") && e.message.contains("ADB"), "{}", e.message);
        // The call's `adb` argument wins over `ADB` and names the field.
        let with_arg = AdbServer::new(Some("/also/missing/adb".into()), p.server.env.clone()).unwrap();
        let e = with_arg.version(deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (codes::ADB_UNAVAILABLE, Some("adb")));
        // A binary that exists but fails `start-server` reports its exit and stderr.
        let failing = AdbServer::new(Some("/bin/false".into()), p.server.env.clone()).unwrap();
        let e = failing.version(deadline()).await.unwrap_err();
        assert_eq!(e.error, codes::ADB_UNAVAILABLE);
        assert_eq!(e.details.as_ref().unwrap()["exitCode"], 1);
    });
    assert!(!p.is_listening());
}

#[test]
fn a_running_server_is_used_even_with_a_wrong_adb_path() {
    let p = PrivateServer::new();
    rt().block_on(async {
        p.server.start(deadline()).await.unwrap();
        let wrong = AdbServer::new(Some("/nonexistent/adb".into()), p.server.env.clone()).unwrap();
        assert_eq!(wrong.version(deadline()).await.unwrap(), 0x29);
    });
}

#[test]
fn kill_server_stops_it() {
    let p = PrivateServer::new();
    rt().block_on(async {
        p.server.version(deadline()).await.unwrap();
        p.server.kill(deadline()).await.unwrap();
        for _ in 0..100 {
            if !p.is_listening() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server still listening after host:kill");
    });
}

#[test]
fn a_silent_server_gives_adb_timeout_at_the_deadline() {
    rt().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await; // never answers; returns when the client closes
            sink
        });
        let server = AdbServer::new(None, Env { adb_server_port: Some(port.to_string()), ..Env::default() }).unwrap();
        let e = server.version(Deadline::after(Duration::from_millis(300))).await.unwrap_err();
        assert_eq!(e.error, codes::ADB_TIMEOUT);
        // The request went out and the socket was closed when the call gave up.
        let seen = tokio::time::timeout(Duration::from_secs(5), accept).await.unwrap().unwrap();
        assert_eq!(seen, b"000chost:version");
    });
}

#[test]
fn a_cancelled_call_closes_its_connection() {
    rt().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let accept = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 4];
            s.read_exact(&mut head).await.unwrap();
            let _ = tx.send(());
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        });
        let server = AdbServer::new(None, Env { adb_server_port: Some(port.to_string()), ..Env::default() }).unwrap();
        // The caller's cancellation wins the race; dropping the call closes the socket.
        let outcome = tokio::select! {
            r = server.version(Deadline::after(Duration::from_secs(60))) => Some(r),
            _ = rx => None,
        };
        assert!(outcome.is_none());
        tokio::time::timeout(Duration::from_secs(5), accept).await.expect("the server saw EOF").unwrap();
    });
}

#[test]
fn nothing_listening_on_a_remote_address_is_not_started() {
    let _ = free_port;
    rt().block_on(async {
        // 127.0.0.2 is loopback too; use an address that cannot be local to check the
        // no-start branch without waiting: TEST-NET-1 connects fail or time out.
        let server = AdbServer::new(None, Env { adb_server_socket: Some("tcp:192.0.2.1:5037".into()), adb: Some("/nonexistent".into()), ..Env::default() }).unwrap();
        let e = server.version(Deadline::after(Duration::from_millis(200))).await.unwrap_err();
        assert!(e.error == codes::ADB_TIMEOUT || e.error == codes::ADB_UNAVAILABLE, "{e:?}");
        assert!(!e.message.contains("/nonexistent"), "no start attempted: {}", e.message);
    });
}
