//! One adb transport connection (the device side of `adb connect`): the CNXN
//! handshake, the stream table and per-stream flow control. Each accepted OPEN
//! becomes a service running on one end of an in-memory duplex pipe; this module
//! pumps the other end over WRTE/OKAY with at most one unacknowledged WRTE per
//! direction, as adbd does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

use crate::device::Device;
use crate::services;
use crate::wire::{self, A_AUTH, A_CLSE, A_CNXN, A_OKAY, A_OPEN, A_WRTE, MAX_PAYLOAD, Message};

/// Capacity of the in-memory pipe between a stream and its service.
const PIPE: usize = 256 * 1024;

struct Stream {
    inbound: mpsc::UnboundedSender<Vec<u8>>,
    acks: Arc<Semaphore>,
    pump: tokio::task::AbortHandle,
}

type Streams = Arc<Mutex<HashMap<u32, Stream>>>;

/// Serves one TCP connection from the adb server until it closes, or until the
/// device is disconnected/rebooted through the control interface.
pub async fn serve(dev: Arc<Device>, sock: TcpStream) {
    let _ = sock.set_nodelay(true);
    let mut gen_rx = dev.connection_generation();
    let (rd, mut wr) = sock.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if wr.write_all(&m.encode()).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let streams: Streams = Arc::new(Mutex::new(HashMap::new()));
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let mut max_payload = 4096u32;
    let mut next_id = 1u32;
    loop {
        let msg = tokio::select! {
            m = wire::read_message(&mut rd) => m,
            _ = gen_rx.changed() => break,
        };
        let Ok(Some(msg)) = msg else { break };
        match msg.cmd {
            A_CNXN => {
                max_payload = msg.arg1.clamp(1024, MAX_PAYLOAD);
                let _ = tx.send(Message::new(A_CNXN, wire::VERSION, MAX_PAYLOAD, dev.banner().into_bytes()));
            }
            A_AUTH => {
                // We never ask for auth; a host that sends AUTH gets our CNXN again.
                let _ = tx.send(Message::new(A_CNXN, wire::VERSION, MAX_PAYLOAD, dev.banner().into_bytes()));
            }
            A_OPEN => {
                let host_id = msg.arg0;
                let mut name = msg.data;
                if name.last() == Some(&0) {
                    name.pop();
                }
                let local_id = next_id;
                next_id = next_id.wrapping_add(1).max(1);
                let (dev, tx, streams) = (dev.clone(), tx.clone(), streams.clone());
                tokio::spawn(async move { open(dev, tx, streams, local_id, host_id, name, max_payload).await });
            }
            A_WRTE => {
                let known = streams.lock().unwrap().get(&msg.arg1).map(|s| s.inbound.send(msg.data).is_ok());
                if known != Some(true) {
                    let _ = tx.send(Message::new(A_CLSE, 0, msg.arg0, vec![]));
                }
            }
            A_OKAY => {
                if let Some(s) = streams.lock().unwrap().get(&msg.arg1) {
                    s.acks.add_permits(1);
                }
            }
            A_CLSE => {
                if let Some(s) = streams.lock().unwrap().remove(&msg.arg1) {
                    s.pump.abort();
                }
            }
            _ => {}
        }
    }
    for (_, s) in streams.lock().unwrap().drain() {
        s.pump.abort();
    }
    drop(tx);
    writer.abort();
}

async fn open(dev: Arc<Device>, tx: mpsc::UnboundedSender<Message>, streams: Streams, local_id: u32, host_id: u32, name: Vec<u8>, max_payload: u32) {
    let (ours, theirs) = tokio::io::duplex(PIPE);
    let Some(service) = services::open(&dev, &name).await else {
        let _ = tx.send(Message::new(A_CLSE, 0, host_id, vec![]));
        return;
    };
    let (mut from_service, mut to_service) = tokio::io::split(ours);
    let acks = Arc::new(Semaphore::new(0));
    let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    // Outbound pump: service output → WRTE, one at a time, each waiting for OKAY.
    let out_tx = tx.clone();
    let out_acks = acks.clone();
    let out_streams = streams.clone();
    let pump = tokio::spawn(async move {
        let mut buf = vec![0u8; max_payload as usize];
        loop {
            let n = match from_service.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if out_tx.send(Message::new(A_WRTE, local_id, host_id, buf[..n].to_vec())).is_err() {
                return;
            }
            match out_acks.acquire().await {
                Ok(p) => p.forget(),
                Err(_) => return,
            }
        }
        // Service finished: close our side unless the host already did.
        if out_streams.lock().unwrap().remove(&local_id).is_some() {
            let _ = out_tx.send(Message::new(A_CLSE, local_id, host_id, vec![]));
        }
    });
    streams.lock().unwrap().insert(local_id, Stream { inbound: in_tx, acks, pump: pump.abort_handle() });
    let _ = tx.send(Message::new(A_OKAY, local_id, host_id, vec![]));
    // Inbound pump: host WRTE → service, acknowledged once the service took it.
    let in_ack = tx.clone();
    tokio::spawn(async move {
        while let Some(data) = in_rx.recv().await {
            if to_service.write_all(&data).await.is_err() {
                break;
            }
            let _ = in_ack.send(Message::new(A_OKAY, local_id, host_id, vec![]));
        }
        let _ = to_service.shutdown().await;
    });
    service.run(dev, theirs).await;
}
