//! `cordon-peer`: attacks on cordond's per-connection peer check, run as a tool inside the
//! sandbox (or outside, as a control). Prints one JSON line: the gRPC outcome of one request.
//!
//! ```text
//! cordon-peer direct SOCKET OP [TOOL]         connect and call from this process
//! cordon-peer exited-child SOCKET OP [TOOL]   a child process connects and exits (reaped);
//!                                             this process then calls on the inherited socket
//! cordon-peer zombie-child SOCKET OP [TOOL]   the same, but the child is left unreaped
//! OP: status | reload | invoke (TOOL, no arguments) | health (grpc.health.v1 Check)
//! With CORDON_PEER_TOKEN set, every cordon.v1 request carries `authorization: Bearer <it>`.
//! cordon-peer flood SOCKET N [MS FILE]        open N connections, print how many the daemon
//!                                             closed at accept (also into FILE), hold the rest
//!                                             until stdin ends (for MS milliseconds with FILE)
//! ```

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsRawFd as _, RawFd};
use std::process::Command;

use cordon_proto::v1;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tonic::transport::Endpoint;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__connect") {
        // The child: connect the inherited socket, then exit at once.
        let fd: RawFd = args[2].parse().unwrap();
        let addr = nix::sys::socket::UnixAddr::new(args[3].as_str()).unwrap();
        let code = i32::from(nix::sys::socket::connect(fd, &addr).is_err());
        // (In zombie mode a failed connect shows as a call on an unconnected socket.)
        std::process::exit(code);
    }
    if args.get(1).map(String::as_str) == Some("flood") {
        let hold = args.get(4).map(|ms| (ms.parse().unwrap(), args[5].clone()));
        flood(&args[2], args[3].parse().unwrap(), hold);
        return;
    }
    let (Some(mode), Some(socket), Some(op)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: cordon-peer direct|exited-child|zombie-child SOCKET status|reload|invoke [TOOL]");
        std::process::exit(2);
    };
    let tool = args.get(4).cloned().unwrap_or_default();
    let (stream, child_pid) = match mode.as_str() {
        "direct" => match std::os::unix::net::UnixStream::connect(socket) {
            Ok(s) => (s, None),
            Err(e) => {
                println!("{}", json!({"ok": false, "step": "connect", "errno": e.raw_os_error()}));
                return;
            }
        },
        "exited-child" | "zombie-child" => {
            // Inheritable (no SOCK_CLOEXEC): the child connects it.
            let fd = nix::sys::socket::socket(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::Stream,
                nix::sys::socket::SockFlag::empty(),
                None,
            )
            .unwrap();
            let mut child = Command::new(std::env::current_exe().unwrap())
                .arg("__connect")
                .arg(fd.as_raw_fd().to_string())
                .arg(socket)
                .spawn()
                .unwrap();
            let pid = child.id();
            if mode == "exited-child" {
                if !child.wait().unwrap().success() {
                    // The child's connect failed (its errno is not known here; `direct` reports it).
                    println!("{}", json!({"ok": false, "step": "connect"}));
                    return;
                }
            } else {
                // Wait for its exit without reaping it (WNOWAIT): it stays a zombie.
                nix::sys::wait::waitid(
                    nix::sys::wait::Id::Pid(nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap())),
                    nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
                )
                .unwrap();
                std::mem::forget(child);
            }
            (std::os::unix::net::UnixStream::from(fd), Some(pid))
        }
        other => panic!("unknown mode {other:?}"),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let result = rt.block_on(call(stream, op, &tool));
    let mut line = match result {
        Ok(detail) => json!({"ok": true, "detail": detail}),
        Err(status) => json!({
            "ok": false,
            "grpc_code": status.code() as i32,
            "code": status.metadata().get(cordon_proto::ERROR_CODE_KEY).and_then(|v| v.to_str().ok()),
            "message": status.message(),
        }),
    };
    line["child_pid"] = json!(child_pid);
    line["pid"] = json!(std::process::id());
    println!("{line}");
}

async fn call(stream: std::os::unix::net::UnixStream, op: &str, tool: &str) -> Result<String, tonic::Status> {
    stream.set_nonblocking(true).unwrap();
    let stream = std::sync::Mutex::new(Some(stream));
    let channel = Endpoint::from_static("http://cordon.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let taken = stream.lock().unwrap().take();
            async move {
                let s = taken.ok_or_else(|| std::io::Error::other("the connection was already used"))?;
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::from_std(s)?))
            }
        }))
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect: {e}")))?;
    if op == "health" {
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let request = tonic_health::pb::HealthCheckRequest { service: String::new() };
        return health.check(request).await.map(|r| format!("{:?}", r.get_ref().status));
    }
    let token = std::env::var("CORDON_PEER_TOKEN").ok().map(|t| format!("Bearer {t}").parse().unwrap());
    let mut client = v1::cordon_client::CordonClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
        if let Some(value) = &token {
            req.metadata_mut().insert("authorization", tonic::metadata::AsciiMetadataValue::clone(value));
        }
        Ok(req)
    });
    match op {
        "status" => client.status(v1::StatusRequest {}).await.map(|r| format!("{:?}", r.get_ref().generation)),
        "reload" => client.reload(v1::ReloadRequest {}).await.map(|r| format!("generation {}", r.get_ref().generation)),
        "invoke" => {
            let mut events = client
                .invoke(v1::InvokeRequest {
                    tool: tool.into(),
                    arguments_json: String::new(),
                    stream_output: false,
                    learn: Vec::new(),
                })
                .await?
                .into_inner();
            let mut seen = Vec::new();
            while let Some(event) = events.message().await? {
                seen.push(format!("{:?}", event.event));
            }
            Ok(seen.join("; "))
        }
        other => Err(tonic::Status::invalid_argument(format!("unknown op {other:?}"))),
    }
}

/// Opens `n` connections, waits (up to 5 s) until the daemon has closed the ones over its
/// per-uid cap, prints how many it closed, and holds the rest until stdin is closed.
fn flood(socket: &str, n: usize, hold: Option<(u64, String)>) {
    let streams: Vec<_> = (0..n)
        .map(|_| {
            let s = std::os::unix::net::UnixStream::connect(socket).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let closed = || {
        streams
            .iter()
            .filter(|s| {
                let mut byte = [0u8; 1];
                match nix::sys::socket::recv(s.as_raw_fd(), &mut byte, nix::sys::socket::MsgFlags::MSG_PEEK) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => e != nix::errno::Errno::EAGAIN,
                }
            })
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while closed() < n.saturating_sub(256) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let count = closed();
    println!("{count}");
    match hold {
        Some((ms, file)) => {
            std::fs::write(file, count.to_string()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        None => {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        }
    }
}
