"""
TLS both ways: clients on tls-port (with and without client certificates),
and rediss:// towards a redis-server with TLS on (CA verification, client
certificates, a wrong CA refused), with the cache's invalidation connection
over TLS too.
"""
import os
import socket
import ssl
import subprocess
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from cachehelpers import Stats, wait_tracking_active, warm
from helpers import HOST, free_port, wait_until

pytestmark = pytest.mark.proxy_only


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".crt",
            "-days", "2", "-subj", "/CN=" + name, cwd=d)


def make_cert(d, ca, name, san):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=" + name, cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("subjectAltName=%s\n" % san)
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key", "-CAcreateserial",
            "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("certs"))
    make_ca(d, "ca")
    make_ca(d, "otherca")
    make_cert(d, "ca", "server", "IP:127.0.0.1,DNS:localhost")
    make_cert(d, "ca", "client", "DNS:client")
    make_cert(d, "ca", "wrongname", "DNS:elsewhere.example")
    make_cert(d, "ca", "localname", "DNS:localhost")
    return lambda n: os.path.join(d, n)


def tls_redis(redis_factory, certs, auth="no", cert="server"):
    tport = free_port()
    r = redis_factory(args=("--tls-port", tport, "--tls-cert-file", certs(cert + ".crt"),
                            "--tls-key-file", certs(cert + ".key"), "--tls-ca-cert-file", certs("ca.crt"),
                            "--tls-auth-clients", auth))
    r.tls_port = tport
    return r


def test_rediss_upstream_and_tracking_over_tls(redis_factory, proxy_factory, certs):
    up = tls_redis(redis_factory, certs)
    p = proxy_factory(upstream_url="rediss://%s:%d" % (HOST, up.tls_port),
                      args=("--tls-upstream-ca-cert-file", certs("ca.crt")))
    st = Stats(p)
    wait_tracking_active(p, stats=st)
    c = p.raw()
    assert c.cmd("SET", "i41", "one").raw == b"+OK\r\n"
    assert up.client().get("i41") == b"one"    # it reached Redis (plain port to check)
    warm(c, st, ("GET", "i41"))
    up.client().set("i41", "two")              # invalidation comes over TLS
    wait_until(lambda: c.cmd("GET", "i41").raw == b"$3\r\ntwo\r\n", timeout=2, interval=0.01,
               what="invalidation over the TLS tracking connection")
    big = b"v" * (2 << 20)
    assert c.cmd("SET", "big", big).raw == b"+OK\r\n"
    assert c.cmd("GET", "big").raw == b"$%d\r\n%s\r\n" % (len(big), big)
    # Redis sees the proxy's connections as TLS ones
    assert any("laddr=127.0.0.1:%d" % up.tls_port in line
               for line in up.client().execute_command("CLIENT", "LIST").decode().splitlines())


def test_tracking_upstream_certificate_names_its_own_host(redis_factory, proxy_factory, certs):
    """tracking-upstream over TLS is checked against its own host: a
    certificate for localhost only (not 127.0.0.1, the upstream's host)."""
    up = tls_redis(redis_factory, certs)
    track = tls_redis(redis_factory, certs, cert="localname")
    p = proxy_factory(upstream_url="rediss://%s:%d" % (HOST, up.tls_port),
                      args=("--tls-upstream-ca-cert-file", certs("ca.crt"),
                            "--tracking-upstream", "rediss://localhost:%d" % track.tls_port))
    wait_tracking_active(p, stats=Stats(p))


def test_rediss_client_certificate(redis_factory, proxy_factory, certs):
    up = tls_redis(redis_factory, certs, auth="yes")
    url = "rediss://%s:%d" % (HOST, up.tls_port)
    p = proxy_factory(upstream_url=url, args=("--tls-upstream-ca-cert-file", certs("ca.crt"),
                                              "--tls-upstream-cert-file", certs("client.crt"),
                                              "--tls-upstream-key-file", certs("client.key")))
    c = p.raw()
    assert c.cmd("SET", "k", "v").raw == b"+OK\r\n"
    # without a client certificate Redis refuses the handshake: a clear error
    q = proxy_factory(upstream_url=url, args=("--tls-upstream-ca-cert-file", certs("ca.crt")))
    r = q.raw().cmd("GET", "k")
    assert r.raw.startswith((b"-MASTERDOWN sidecache: upstream", b"-ERR sidecache: upstream",
                             b"-ERR sidecache: connection")), r


@pytest.mark.parametrize("cert,ca", [("server", "otherca"), ("wrongname", "ca")])
def test_rediss_verification_refuses(redis_factory, proxy_factory, certs, cert, ca):
    """A certificate from another CA, or naming another host: no connection."""
    up = tls_redis(redis_factory, certs, cert=cert)
    p = proxy_factory(upstream_url="rediss://%s:%d" % (HOST, up.tls_port),
                      args=("--tls-upstream-ca-cert-file", certs(ca + ".crt")))
    r = p.raw().cmd("SET", "k", "v")
    assert r.raw.startswith((b"-ERR sidecache", b"-MASTERDOWN sidecache")), r
    assert up.client().get("k") is None


def test_rediss_refused_connect_is_told_as_refused(proxy_factory, certs):
    """Nothing listens at a rediss:// upstream: the invalidation
    connection's warning says the connect was refused, as the data
    connection's does, not that Redis closed it (libevent reports a TLS
    connect that fails as an end of stream) nor OpenSSL's code of a socket
    error ("error:00000005:lib(0)::reason(5)")."""
    p = proxy_factory(upstream_url="rediss://%s:%d" % (HOST, free_port()),
                      args=("--tls-upstream-ca-cert-file", certs("ca.crt")))

    def warnings():
        with open(p.logpath) as f:
            return [line for line in f if "level=warning" in line and "tracking state=backoff" in line]

    wait_until(warnings, timeout=5, what="the invalidation connection's warning")
    assert 'reason="invalidation connection failed: Connection refused"' in warnings()[0], warnings()
    r = p.raw().cmd("GET", "k")
    assert r.raw.startswith(b"-MASTERDOWN sidecache: upstream") and b"Connection refused" in r.raw, r


def tls_proxy(proxy_factory, certs, auth):
    port = free_port()
    p = proxy_factory(args=("--tls-port", port, "--tls-cert-file", certs("server.crt"),
                            "--tls-key-file", certs("server.key"), "--tls-ca-cert-file", certs("ca.crt"),
                            "--tls-auth-clients", auth))
    p.tls_port = port
    return p


def test_tls_clients(proxy_factory, certs, upstream):
    p = tls_proxy(proxy_factory, certs, "no")
    r = redis.Redis(host=HOST, port=p.tls_port, ssl=True, ssl_ca_certs=certs("ca.crt"))
    assert r.ping()
    r.set("x", "y")
    assert upstream.client().get("x") == b"y"
    big = os.urandom(3 << 20)
    r.set("big", big)
    assert r.get("big") == big
    pipe = r.pipeline(transaction=False)
    for _ in range(10000):
        pipe.incr("n")
    assert pipe.execute()[-1] == 10000
    with r.pipeline() as t:      # MULTI/EXEC over TLS
        t.set("a", "1").incr("a")
        assert t.execute() == [True, 2]
    # the plain port still works beside it
    assert p.client().get("x") == b"y"
    # a client that is not TLS on the TLS port gets nothing and is dropped
    s = socket.create_connection((HOST, p.tls_port), timeout=3)
    s.sendall(b"PING\r\n")
    try:
        data = s.recv(100)
    except (ConnectionResetError, socket.timeout):
        data = b""
    assert b"PONG" not in data
    s.close()


def test_tls_client_certificates_required(proxy_factory, certs):
    p = tls_proxy(proxy_factory, certs, "yes")
    ok = redis.Redis(host=HOST, port=p.tls_port, ssl=True, ssl_ca_certs=certs("ca.crt"),
                     ssl_certfile=certs("client.crt"), ssl_keyfile=certs("client.key"))
    assert ok.ping()
    no_cert = redis.Redis(host=HOST, port=p.tls_port, ssl=True, ssl_ca_certs=certs("ca.crt"),
                          socket_timeout=3, retry=Retry(NoBackoff(), 0))
    with pytest.raises((redis.exceptions.ConnectionError, ssl.SSLError, OSError)):
        no_cert.ping()
    assert ok.ping()


def test_tls_config_errors(proxy_factory, certs):
    with pytest.raises(RuntimeError) as e:
        proxy_factory(args=("--tls-port", free_port()))
    assert "tls-port needs tls-cert-file" in str(e.value)
    with pytest.raises(RuntimeError) as e:
        proxy_factory(args=("--tls-port", free_port(), "--tls-cert-file", certs("server.crt"),
                            "--tls-key-file", certs("server.key")))
    assert "tls-auth-clients needs tls-ca-cert-file" in str(e.value)
    with pytest.raises(RuntimeError) as e:
        proxy_factory(args=("--tls-port", free_port(), "--tls-cert-file", "/nonexistent.crt",
                            "--tls-key-file", certs("server.key"), "--tls-auth-clients", "no"))
    assert "tls-cert-file /nonexistent.crt" in str(e.value)
