#!/usr/bin/env python3
"""Captures the proxy targets' seeds from real clients on loopback (nothing leaves the host):
curl's proxy requests (plain HTTP, CONNECT, SOCKS5) and the ClientHellos of curl and openssl.

Run from the repository's top: python3 fuzz/capture-seeds.py. Each listener takes one
connection, records what the client sends (answering a SOCKS5 greeting so that the request
follows it) and closes; the client then fails, which is expected.
"""
import os
import socket
import subprocess
import threading

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def capture(target, name, argv, socks=False):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = bytearray()

    def serve():
        conn, _ = srv.accept()
        conn.settimeout(3)
        try:
            if socks:
                greeting = conn.recv(2)
                methods = conn.recv(greeting[1])
                got.extend(greeting + methods)
                conn.sendall(b"\x05\x00")
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got.extend(chunk)
                if socks or (b"\r\n\r\n" in got and not got.startswith(b"\x16")) or (
                    got.startswith(b"\x16") and len(got) >= 5 + int.from_bytes(got[3:5], "big")
                ):
                    break
        except socket.timeout:
            pass
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    argv = [a.replace("PORT", str(port)) for a in argv]
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
    t.join()
    srv.close()
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    if socks:
        # The proxy_socks target puts the version byte in front of every input itself.
        got = got[1:]
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(got)
    print(f"{target}/{name}: {len(got)} bytes")


curl = ["curl", "-s", "--max-time", "3", "--noproxy", ""]
capture("proxy_http", "curl-get", curl + ["-x", "http://127.0.0.1:PORT", "http://example.com/a/b?c=d"])
capture("proxy_http", "curl-post", curl + ["-x", "http://127.0.0.1:PORT", "-d", "k=v", "http://example.com:8080/form"])
capture("proxy_http", "curl-connect", curl + ["-p", "-x", "http://127.0.0.1:PORT", "https://example.com/"])
capture("proxy_http", "curl-connect-v6", curl + ["-p", "-x", "http://127.0.0.1:PORT", "https://[2001:db8::1]:8443/"])
capture("proxy_socks", "curl-socks5h", curl + ["--socks5-hostname", "127.0.0.1:PORT", "http://example.com/"], socks=True)
capture("proxy_socks", "curl-socks5-v4", curl + ["--socks5", "127.0.0.1:PORT", "http://192.0.2.7:81/"], socks=True)
capture("proxy_socks", "curl-socks5-v6", curl + ["--socks5", "127.0.0.1:PORT", "http://[2001:db8::2]:82/"], socks=True)
capture("tls_hello", "curl", curl + ["--resolve", "example.com:PORT:127.0.0.1", "https://example.com:PORT/"])
capture("tls_hello", "openssl-tls13", ["openssl", "s_client", "-connect", "127.0.0.1:PORT", "-servername", "example.com", "-tls1_3"])
capture("tls_hello", "openssl-tls12", ["openssl", "s_client", "-connect", "127.0.0.1:PORT", "-servername", "Example.COM.", "-tls1_2"])
capture("tls_hello", "openssl-no-sni", ["openssl", "s_client", "-connect", "127.0.0.1:PORT", "-noservername"])
