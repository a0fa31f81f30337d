"""Serving plugins: listen addresses, TLS, gRPC health, the exec probe, signals, and
`main()`, the whole command line of a sidecar."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import signal
import stat
import sys
from typing import NamedTuple, Tuple

import grpc

from ._stubs import health_pb, pb_grpc
from .service import PluginService, init_tracing, log
from .snapshot import quote

MAX_MESSAGE_BYTES = 64 << 20
# How long replies in flight may take to finish after SIGTERM.
SHUTDOWN_GRACE_SECS = 1.0
LISTEN_ENV = "SWITCHYARD_PLUGIN_LISTEN"
#: The environment fallback of --no-optional-capabilities: "off" (or "false", "0")
#: offers none of the optional capabilities. Read only by `parse_args`.
CAPABILITIES_ENV = "SWITCHYARD_PLUGIN_CAPABILITIES"


class AddressError(ValueError):
    def __init__(self, s):
        super().__init__(
            f"listen address {quote(s)}: expected unix:///path/to.sock, tcp://host:port, "
            "https://host:port or host:port"
        )


def parse_listen_address(s):
    """As the SDK's parse_listen_address: `unix:///path.sock`, `unix:path.sock`,
    `tcp://host:port`, `http://host:port`, `https://host:port` (TLS) or `host:port`,
    where host is an IP literal (`[...]` for IPv6). Returns ("unix", path), or
    ("tcp" or "tls", ip, port)."""
    for prefix in ("unix://", "unix:"):
        if s.startswith(prefix):
            path = s[len(prefix) :]
            if not path:
                raise AddressError(s)
            return ("unix", path)
    hostport, kind = s, "tcp"
    for prefix, k in (("tcp://", "tcp"), ("http://", "tcp"), ("https://", "tls")):
        if s.startswith(prefix):
            hostport, kind = s[len(prefix) :], k
            break
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise AddressError(s)
    try:
        if host.startswith("[") and host.endswith("]"):
            ip = ipaddress.IPv6Address(host[1:-1])
        else:
            ip = ipaddress.IPv4Address(host)
    except ValueError:
        raise AddressError(s) from None
    return (kind, str(ip), int(port))


TLS_CERT_ENV = "SWITCHYARD_PLUGIN_TLS_CERT"
TLS_KEY_ENV = "SWITCHYARD_PLUGIN_TLS_KEY"
TLS_CLIENT_CA_ENV = "SWITCHYARD_PLUGIN_TLS_CLIENT_CA"


class ServerTls:
    """The sidecar's certificate and key (PEM) and, for mutual TLS, the CA client
    certificates must chain to: the files named by the same variables as in the SDK."""

    def __init__(self, cert, key, client_ca):
        self.cert, self.key, self.client_ca = cert, key, client_ca

    @classmethod
    def from_env(cls):
        def read(var, required):
            path = os.environ.get(var, "").strip()
            if not path:
                if required:
                    raise UsageError(
                        f"an https:// listen address needs {var} (a PEM file); set {TLS_CERT_ENV} and {TLS_KEY_ENV}"
                    )
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise UsageError(f"{var}={path}: cannot read: {e.strerror or e}") from None

        return cls(read(TLS_CERT_ENV, True), read(TLS_KEY_ENV, True), read(TLS_CLIENT_CA_ENV, False))

    def server_credentials(self):
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


class UsageError(ValueError):
    """Bad configuration from the command line or the environment (exit code 1)."""


USAGE = """usage: {prog} [--listen unix:///path.sock | --listen 127.0.0.1:PORT | --listen https://IP:PORT] [--probe]
       [--no-optional-capabilities]

Serves the Switchyard plugin(s) {names} over gRPC until SIGTERM.
{listen_env} sets the address when --listen is absent (default {default}). An
https:// address serves TLS with the PEM files in {cert} and {key}; with
{ca} too, clients must present a certificate signed by that CA (mutual TLS).

  --probe   check the running sidecar at that address (gRPC health) and exit 0 if
            it is serving, 1 if not (an exec probe)
  --no-optional-capabilities
            offer none of the protocol's optional capabilities (filter-batch,
            replicate-batch): serve as a sidecar built before them would.
            Default: offered, unless {capabilities_env}=off"""


def default_listen(plugins):
    """unix:///tmp/switchyard/<first plugin's name, lower case>.sock."""
    first = next(iter(plugins), None)
    name = getattr(first, "name", "plugin") or "plugin"
    return f"unix:///tmp/switchyard/{name.lower()}.sock"


def usage(plugins, prog=None):
    return USAGE.format(
        prog=prog or os.path.basename(sys.argv[0] or "sidecar"),
        names=", ".join(getattr(p, "name", "?") for p in plugins),
        listen_env=LISTEN_ENV,
        default=default_listen(plugins),
        cert=TLS_CERT_ENV,
        key=TLS_KEY_ENV,
        ca=TLS_CLIENT_CA_ENV,
        capabilities_env=CAPABILITIES_ENV,
    )


class CommandLine(NamedTuple):
    """What `parse_args` read: the parsed listen address, whether to probe, and
    whether to offer the optional capabilities."""

    listen: Tuple
    probe: bool
    capabilities: bool


def parse_args(argv, plugins=()):
    """The command line, as a CommandLine, or None for --help: --listen / --listen=
    (else SWITCHYARD_PLUGIN_LISTEN), --probe, and --no-optional-capabilities (else
    SWITCHYARD_PLUGIN_CAPABILITIES=off, its fallback: the one place the SDK reads that
    variable). Exits 1 on bad usage, as the Rust sidecars do."""
    listen = os.environ.get(LISTEN_ENV)
    probe_only = False
    capabilities = os.environ.get(CAPABILITIES_ENV, "").strip() not in ("off", "false", "0")
    args = iter(argv)
    for a in args:
        if a == "--probe":
            probe_only = True
        elif a == "--no-optional-capabilities":
            capabilities = False
        elif a == "--listen":
            listen = next(args, None)
            if listen is None:
                log("--listen needs an address, e.g. unix:///tmp/p.sock")
                raise SystemExit(1)
        elif a.startswith("--listen="):
            listen = a[len("--listen=") :]
        elif a in ("-h", "--help"):
            print(usage(plugins))
            return None
        else:
            log(f"unknown argument {quote(a)}; try --help")
            raise SystemExit(1)
    return CommandLine(parse_listen_address(listen or default_listen(plugins)), probe_only, capabilities)


HEALTH_SERVICE = "grpc.health.v1.Health"
PLUGIN_SERVICE = "switchyard.plugin.v1.Plugin"


class HealthService:
    """grpc.health.v1.Health: SERVING while the sidecar serves, NOT_SERVING from the
    moment shutdown starts (so probes fail while replies drain), for "" and the plugin
    service. Registered by hand from the generated messages."""

    def __init__(self):
        self.status = health_pb.HealthCheckResponse.SERVING
        self.changed = asyncio.Event()

    def set(self, status):
        self.status = status
        self.changed.set()
        self.changed = asyncio.Event()

    @staticmethod
    def _known(service):
        return service in ("", PLUGIN_SERVICE)

    async def check(self, request, context):
        if not self._known(request.service):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {quote(request.service)}")
        return health_pb.HealthCheckResponse(status=self.status)

    async def watch(self, request, context):
        while True:
            st = self.status if self._known(request.service) else health_pb.HealthCheckResponse.SERVICE_UNKNOWN
            changed = self.changed
            yield health_pb.HealthCheckResponse(status=st)
            await changed.wait()

    def handler(self):
        req = health_pb.HealthCheckRequest.FromString
        resp = health_pb.HealthCheckResponse.SerializeToString
        return grpc.method_handlers_generic_handler(
            HEALTH_SERVICE,
            {
                "Check": grpc.unary_unary_rpc_method_handler(self.check, req, resp),
                "Watch": grpc.unary_stream_rpc_method_handler(self.watch, req, resp),
            },
        )


def grpc_target(listen):
    """The grpcio target for a parsed listen address."""
    if listen[0] == "unix":
        return f"unix:{os.path.abspath(listen[1])}"
    _, ip, port = listen
    host = f"[{ip}]" if ":" in ip else ip
    return f"{host}:{port}"


def probe_channel(listen):
    """A channel to the sidecar at `listen`, as its own --probe dials it. An https://
    address is dialled on the loopback when it is 0.0.0.0 or ::, and its certificate
    verified for "localhost" against SWITCHYARD_PLUGIN_TLS_CLIENT_CA, presenting the
    sidecar's own certificate as the client's (mutual TLS), else against the sidecar's
    own certificate (self-signed), as the SDK's probe does."""
    if listen[0] != "tls":
        return grpc.aio.insecure_channel(grpc_target(listen))
    tls = ServerTls.from_env()
    _, ip, port = listen
    if ipaddress.ip_address(ip).is_unspecified:
        ip = "127.0.0.1"
    if tls.client_ca is not None:
        creds = grpc.ssl_channel_credentials(tls.client_ca, tls.key, tls.cert)
    else:
        creds = grpc.ssl_channel_credentials(tls.cert)
    return grpc.aio.secure_channel(
        grpc_target(("tls", ip, port)), creds, options=[("grpc.ssl_target_name_override", "localhost")]
    )


async def probe(listen, timeout=5.0):
    """Checks a running sidecar's health at `listen`: None when it is SERVING, else
    why not. For exec probes (kubelet's gRPC probes cannot reach a Unix socket)."""
    async with probe_channel(listen) as ch:
        check = ch.unary_unary(
            f"/{HEALTH_SERVICE}/Check",
            request_serializer=health_pb.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb.HealthCheckResponse.FromString,
        )
        try:
            r = await check(health_pb.HealthCheckRequest(), timeout=timeout, wait_for_ready=False)
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {e.details()}"
    if r.status != health_pb.HealthCheckResponse.SERVING:
        return health_pb.HealthCheckResponse.ServingStatus.Name(r.status)
    return None


def _listen_hint(addr, unix, err):
    """As switchyard_proto::listen_hint: what is missing and the change that fixes it."""
    how = f"{LISTEN_ENV} (or --listen)"
    code = err.errno
    if not unix:
        port = str(addr).rsplit(":", 1)[-1]
        if code == errno.EADDRINUSE:
            return (f"port {port} is already in use by another process "
                    f"(`ss -ltnp 'sport = :{port}'` shows which): stop it, or choose a free port with {how}")
        if code == errno.EADDRNOTAVAIL:
            return (f"{addr} is not an address of this machine: use 127.0.0.1 (this machine only) "
                    f"or 0.0.0.0 (every interface) with {how}")
        if code in (errno.EACCES, errno.EPERM):
            return f"ports below 1024 need privileges (CAP_NET_BIND_SERVICE): choose a port of 1024 or above with {how}"
    else:
        folder = os.path.dirname(addr) or "."
        if code == errno.EADDRINUSE:
            return f"{addr} is in use by a running process: stop it, or give this one another path with {how}"
        if code in (errno.EACCES, errno.EPERM, errno.EROFS):
            return (f"cannot create a socket in {folder}: it is not writable here; choose a writable folder "
                    f"with {how}, e.g. unix:///tmp/switchyard/plugin.sock")
        if code == errno.ENOENT:
            return (f"the folder {folder} does not exist and cannot be created: create it "
                    f"(mkdir -p {folder}) or choose another path with {how}")
    return f"choose another address with {how}"


def _probe_listen(listen):
    """Binds the address once with a plain socket, so a failure is explained here
    (gRPC's own says only "Failed to bind")."""
    import socket

    if listen[0] == "unix":
        path = os.path.abspath(listen[1])
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.bind(path)
            finally:
                s.close()
                try:
                    os.unlink(path)
                except OSError:
                    pass
        except OSError as e:
            raise OSError(f"cannot listen on unix://{path}: {e.strerror}; {_listen_hint(path, True, e)}") from None
        return
    _, ip, port = listen
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((ip, int(port)))
    except OSError as e:
        raise OSError(f"cannot listen on {ip}:{port}: {e.strerror}; {_listen_hint(f'{ip}:{port}', False, e)}") from None
    finally:
        s.close()


async def serve(listen, plugins, ready=None, tls=None, max_batch_nodes=0, capabilities=True):
    """Serves `plugins` at `listen` (a parsed address) until SIGTERM or SIGINT, then
    lets replies in flight finish and removes the socket. `tls` (a ServerTls) is
    required for an https:// address; `ready(address)` is called once serving.
    `capabilities=False` offers none of the protocol's optional capabilities
    (filter-batch, replicate-batch, filter-after-pre-filter, permit-after-reserve),
    to serve as a sidecar built before them would."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # grpcio sets SO_REUSEPORT by default: a second sidecar on the same TCP
            # port would silently share it instead of failing.
            ("grpc.so_reuseport", 0),
        ]
    )
    service = PluginService(plugins, max_batch_nodes=max_batch_nodes, capabilities=capabilities)
    pb_grpc.add_PluginServicer_to_server(service, server)
    health = HealthService()
    server.add_generic_rpc_handlers((health.handler(),))
    sock = None
    if listen[0] == "unix":
        sock = os.path.abspath(listen[1])
        # A socket left by a previous run would make bind fail.
        try:
            if stat.S_ISSOCK(os.lstat(sock).st_mode):
                os.unlink(sock)
        except FileNotFoundError:
            pass
    _probe_listen(listen)
    if listen[0] == "unix":
        # A socket left by a previous run would make bind fail.
        try:
            if stat.S_ISSOCK(os.lstat(sock).st_mode):
                os.unlink(sock)
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(sock), exist_ok=True)
        target, shown = f"unix:{sock}", f"unix://{sock}"
    else:
        _, ip, port = listen
        host = f"[{ip}]" if ":" in ip else ip
        target, shown = f"{host}:{port}", None
    try:
        if listen[0] == "tls":
            if tls is None:
                raise UsageError(f"https://{target}: TLS needs {TLS_CERT_ENV} and {TLS_KEY_ENV}")
            port = server.add_secure_port(target, tls.server_credentials())
        else:
            port = server.add_insecure_port(target)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {target}: {e}") from None
    if shown is None:
        shown = f"{'https' if listen[0] == 'tls' else 'tcp'}://{host}:{port}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        names = ", ".join(p.name for p in plugins)
        print(f"{names} listening on {shown}", file=sys.stderr, flush=True)
        if ready is not None:
            ready(shown)
        await stop.wait()
    finally:
        health.set(health_pb.HealthCheckResponse.NOT_SERVING)
        await server.stop(SHUTDOWN_GRACE_SECS)
        if sock is not None:
            try:
                os.unlink(sock)
            except FileNotFoundError:
                pass




def main(plugins, argv=None, max_batch_nodes=0, capabilities=True):
    """The whole command line of a sidecar serving `plugins`: `--listen ADDRESS`
    (or SWITCHYARD_PLUGIN_LISTEN), `--probe`, `--no-optional-capabilities` (or
    SWITCHYARD_PLUGIN_CAPABILITIES=off), `--help`; OTLP tracing from the standard
    OTEL_* variables. `capabilities=False` offers none of the protocol's optional
    capabilities whatever the command line says (as `--no-optional-capabilities`
    does). Returns the exit code:

        if __name__ == "__main__":
            sys.exit(switchyard_plugin.main([Accelerator()]))
    """
    plugins = list(plugins)
    try:
        parsed = parse_args(sys.argv[1:] if argv is None else argv, plugins)
        if parsed is None:
            return 0
        listen, probe_only, offer = parsed
        tls = ServerTls.from_env() if listen[0] == "tls" else None
    except (AddressError, UsageError) as e:
        log(str(e))
        return 1
    if probe_only:
        why = asyncio.run(probe(listen))
        if why is not None:
            scheme = {"unix": "unix://", "tls": "https://"}.get(listen[0], "http://")
            log(f"health check of {scheme}{grpc_target(listen).removeprefix('unix:')}: {why}")
            return 1
        return 0
    try:
        # Checks the plugins (names, node_local with pre_filter, ...) before anything
        # is bound, so a mistake is one clear line.
        PluginService(plugins)
    except ValueError as e:
        log(str(e))
        return 1
    first = plugins[0].name.lower() if plugins else "plugin"
    provider = init_tracing(f"switchyard-sidecar-{first}")
    try:
        asyncio.run(
            serve(listen, plugins, tls=tls, max_batch_nodes=max_batch_nodes, capabilities=capabilities and offer)
        )
    except (OSError, UsageError) as e:
        log(str(e))
        return 1
    finally:
        if provider is not None:
            provider.shutdown()  # exports the spans still queued
    return 0
