//! `cordon mcp --http` (client/src/mcp/http.rs): what the front-end checks on a request before
//! cordond or rmcp hear of it, the bearer token (exactly one well-formed `Authorization:
//! Bearer`) and the `Host`, on a request head read from the input.
use cordon_client::mcp::http::{check_host, request_token};

fn main() {
    let hosts: Vec<(String, Option<u16>)> = vec![
        ("127.0.0.1".into(), Some(8080)),
        ("localhost".into(), Some(8080)),
        ("::1".into(), Some(8080)),
        ("agent.example".into(), None),
    ];
    afl::fuzz!(|data: &[u8]| {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Request::new(&mut headers);
        if !matches!(head.parse(data), Ok(httparse::Status::Complete(_))) {
            return;
        }
        let mut builder = http::Request::builder().method(head.method.unwrap_or("POST")).uri(head.path.unwrap_or("/"));
        for h in head.headers.iter() {
            builder = builder.header(h.name, h.value);
        }
        let Ok(request) = builder.body(()) else { return };
        let _ = std::hint::black_box(request_token(&request).map(|t| t.hash()));
        let _ = std::hint::black_box(check_host(&request, &hosts).is_ok());
    });
}
