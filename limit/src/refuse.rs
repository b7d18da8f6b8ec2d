//! How a connection that got no slot is told: an HTTP `503` with the reason, then closed.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Answers `stream` with `503 Service Unavailable`, `retry-after: 1` and `text` (one line
/// saying why), then closes it. It reads what the client sent until the client closes (closing
/// with its request unread would reset the connection, and the client would never see the
/// answer), for at most a second in all.
pub async fn answer_503<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, text: &str) {
    let text = format!("{}\n", text.trim_end());
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        text.len()
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(text.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn the_client_reads_the_503_and_its_reason() {
        let (mut server, mut client) = tokio::io::duplex(4096);
        let serve = tokio::spawn(async move { answer_503(&mut server, "too many connections from uid 7").await });
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).await.unwrap();
        drop(client);
        serve.await.unwrap();
        assert!(got.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\ntoo many connections from uid 7\n"), "{got}");
        assert!(got.contains("content-length: 32\r\n"), "{got}");
    }
}
