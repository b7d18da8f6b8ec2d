// A loopback pass-through in front of `cordon mcp --http` that adds one header:
// `Authorization: Bearer $CORDON_TOKEN`. The official conformance suite
// (@modelcontextprotocol/conformance) has no option to send a header to the server under test,
// and cordon refuses every request without a token. Everything else passes unchanged in both
// directions, streamed (SSE), including the Host and Origin headers the DNS-rebinding scenario
// forges: cordon itself judges them (the proxy's own authority is allowed with --allow-host).
//
//   node auth-proxy.mjs LISTEN_PORT TARGET_PORT     (both on 127.0.0.1)
import http from "node:http";

const [listenPort, targetPort] = process.argv.slice(2).map(Number);
const token = process.env.CORDON_TOKEN;
if (!listenPort || !targetPort || !token) {
  console.error("usage: CORDON_TOKEN=... node auth-proxy.mjs LISTEN_PORT TARGET_PORT");
  process.exit(2);
}

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const upstream = http.request(
    { host: "127.0.0.1", port: targetPort, method: req.method, path: req.url, headers },
    (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    },
  );
  upstream.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(`auth-proxy: ${e.message}\n`);
  });
  req.pipe(upstream);
  res.on("close", () => upstream.destroy());
});
server.listen(listenPort, "127.0.0.1", () => console.error(`auth-proxy: 127.0.0.1:${listenPort} -> 127.0.0.1:${targetPort}`));
