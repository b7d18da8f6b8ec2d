//! Tunnels the proxy does not read, spliced in the kernel (`zerocopy`): byte-exact both ways
//! (sha256 at both ends), with the bytes a client sent right after its `CONNECT` head first;
//! half-closes passed on each way; a transfer cut at exactly `max_bytes` with its record; an
//! invocation's end closing a tunnel mid-transfer; and no pipe left open after many tunnels.

use super::*;
use sha2::{Digest, Sha256};
use tokio::io::AsyncRead;

/// `n` bytes no two tests share (xorshift from `seed`), so a byte out of place changes the hash.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

fn sha(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).to_vec()
}

/// Reads `r` to its end: the sha256 of what came, and how much.
async fn drain<R: AsyncRead + Unpin>(r: &mut R) -> (Vec<u8>, u64) {
    let (mut h, mut n) = (Sha256::new(), 0u64);
    let mut b = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut b).await {
            Ok(0) | Err(_) => return (h.finalize().to_vec(), n),
            Ok(k) => {
                h.update(&b[..k]);
                n += k as u64;
            }
        }
    }
}

/// What a half-closing upstream saw of its one connection.
struct Seen {
    /// The sha256 and length of what it read, up to the end of the client's sending side.
    got: (Vec<u8>, u64),
}

/// An upstream on 127.0.0.1 for one connection. `listen_first`: it reads to the end of the
/// client's sending side (a half-close the proxy passed on) and only then sends `answer` and
/// closes; otherwise it sends `answer`, closes its sending side, and reads on to the end.
async fn half_closer(answer: Vec<u8>, listen_first: bool) -> (u16, tokio::sync::oneshot::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = s.into_split();
        // A write fails when the proxy cut the connection: what was read is said all the same.
        let got = if listen_first {
            let got = drain(&mut r).await;
            let _ = w.write_all(&answer).await;
            let _ = w.shutdown().await;
            got
        } else {
            let _ = w.write_all(&answer).await;
            let _ = w.shutdown().await;
            drain(&mut r).await
        };
        let _ = tx.send(Seen { got });
    });
    (port, rx)
}

/// Opens a `CONNECT` tunnel to `127.0.0.1:up` with `early` in the same write as the head; the
/// stream after the proxy's answer.
async fn tunnel(h: &Harness, up: u16, early: &[u8]) -> TcpStream {
    let mut c = h.client().await;
    let mut first = format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").into_bytes();
    first.extend_from_slice(early);
    c.write_all(&first).await.unwrap();
    assert_eq!(response_head(&mut c).await, "HTTP/1.1 200 Connection established\r\n\r\n");
    c
}

fn spliced() -> u64 {
    crate::zerocopy::SPLICED.load(Ordering::Relaxed)
}

/// Both ways at once, 3 MiB up and 5 MiB down (several pipefuls), in both orders of half-closing: every byte
/// arrives in order (sha256), the pipelined bytes after the head first, each side's end passed on
/// while the other direction goes on, and the record counts exactly what moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spliced_tunnel_is_byte_exact_both_ways_and_passes_half_closes_on() {
    const UP: usize = 3 << 20;
    const DOWN: usize = 5 << 20;
    for listen_first in [true, false] {
        let (up_bytes, down_bytes) = (noise(1 + listen_first as u64, UP), noise(7 + listen_first as u64, DOWN));
        let (up, seen) = half_closer(down_bytes.clone(), listen_first).await;
        let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
        let before = spliced();
        // 1000 bytes go with the CONNECT head; the rest after the answer.
        let c = tunnel(&h, up, &up_bytes[..1000]).await;
        let (mut r, mut w) = c.into_split();
        let send = async {
            w.write_all(&up_bytes[1000..]).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let (_, down_got) = tokio::join!(send, drain(&mut r));
        assert_eq!(down_got, (sha(&down_bytes), DOWN as u64), "listen_first {listen_first}: the download");
        let seen = seen.await.unwrap();
        assert_eq!(seen.got, (sha(&up_bytes), UP as u64), "listen_first {listen_first}: the upload");
        h.closed(1).await;
        let (summary, records) = h.finish().await;
        let closed = records.iter().find(|r| r["decision"] == "egress_closed").unwrap();
        assert_eq!(
            (&closed["end"], closed["bytes_up"].as_u64(), closed["bytes_down"].as_u64()),
            (&json!("closed"), Some(UP as u64), Some(DOWN as u64)),
            "{closed:#}"
        );
        assert_eq!((summary.bytes_up, summary.bytes_down, summary.cut), (UP as u64, DOWN as u64, 0));
        // Spliced, not copied through buffers (the pipelined 1000 bytes are sent from memory).
        assert!(spliced() - before >= (UP + DOWN - 1000) as u64, "{} bytes spliced", spliced() - before);
    }
}

/// A download that would pass `max_bytes` is cut at exactly `max_bytes`: the tool gets every byte
/// the budget allows and not one more, the record says `max_bytes`, later connections are
/// refused.
#[tokio::test]
async fn a_spliced_download_is_cut_at_exactly_max_bytes() {
    const MAX: u64 = 1024 * 1024 + 17;
    let answer = noise(3, 3 << 20);
    let (up, _seen) = half_closer(answer.clone(), false).await;
    let mut e = egress(&[format!("127.0.0.1:{up}")]);
    e.max_bytes = MAX;
    let h = proxy(e, Resolver::System).await;
    let mut c = tunnel(&h, up, b"").await;
    let got = drain(&mut c).await;
    assert_eq!(got, (sha(&answer[..MAX as usize]), MAX), "exactly the first max_bytes bytes arrive");
    let out = h.exchange(format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.contains("X-Cordon-Refused: max-bytes"), "{out}");
    let (summary, records) = h.finish().await;
    assert_eq!((summary.connections, summary.cut, summary.refused), (1, 1, 1));
    assert_eq!((summary.bytes_up, summary.bytes_down), (0, MAX));
    let closed = records.iter().find(|r| r["decision"] == "egress_closed").unwrap();
    assert_eq!(
        (&closed["end"], closed["bytes_up"].as_u64(), closed["bytes_down"].as_u64()),
        (&json!("max_bytes"), Some(0), Some(MAX)),
        "{closed:#}"
    );
    assert!(matches!(summary.denials[0].denied, Denied::Host { refusal: Refusal::MaxBytes(MAX), .. }));
}

/// The invocation's end closes a tunnel in the middle of a transfer (the tool not reading): the
/// tool sees its end, the record says `stopped`.
#[tokio::test]
async fn the_invocations_end_closes_a_spliced_tunnel_mid_transfer() {
    let (up, _seen) = half_closer(vec![b'x'; 32 << 20], false).await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
    let mut c = tunnel(&h, up, b"").await;
    let mut some = vec![0u8; 1 << 20];
    c.read_exact(&mut some).await.unwrap();
    let (summary, records) = h.finish().await;
    let rest = drain(&mut c).await.1;
    assert!(rest < 31 << 20, "the tunnel was closed, {rest} bytes more came");
    assert_eq!(summary.connections, 1);
    assert_eq!(records.last().unwrap()["end"], "stopped", "{records:#?}");
}

/// The pipes this process holds.
fn pipes() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("pipe:"))
        .count()
}

/// Many tunnels, ended every way (closed, cut, stopped mid-transfer): each pipe is closed with
/// its connection. Other tests of this process may hold pipes for a moment: the count is
/// waited for to come back down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spliced_tunnels_leave_no_pipe_open() {
    let before = pipes();
    let up = upstream().await;
    let h = proxy(egress(&[format!("127.0.0.1:{up}")]), Resolver::System).await;
    for _ in 0..100 {
        let mut c = tunnel(&h, up, b"GET /big HTTP/1.1\r\n\r\n").await;
        let (_, n) = drain(&mut c).await;
        assert!(n > BIG as u64, "{n}");
    }
    h.closed(100).await;
    // Open while the invocation ends.
    let mut open = Vec::new();
    for _ in 0..20 {
        open.push(tunnel(&h, up, b"").await);
    }
    let (summary, _) = h.finish().await;
    assert_eq!(summary.connections, 120);
    drop(open);
    // Cut at max_bytes.
    let mut e = egress(&[format!("127.0.0.1:{up}")]);
    e.max_bytes = 10_000;
    let h = proxy(e, Resolver::System).await;
    let mut c = tunnel(&h, up, b"GET /big HTTP/1.1\r\n\r\n").await;
    drain(&mut c).await;
    let (summary, _) = h.finish().await;
    assert_eq!(summary.cut, 1);
    let mut now = pipes();
    for _ in 0..100 {
        if now <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = pipes();
    }
    assert!(now <= before, "{now} pipes open after the tunnels, {before} before");
}
