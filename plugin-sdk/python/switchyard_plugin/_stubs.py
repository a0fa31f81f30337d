"""The gRPC stubs of `switchyard.plugin.v1` and `grpc.health.v1`, generated from the
.proto files on first use with grpcio-tools (whose protoc matches the protobuf runtime
it pulls in, so the stubs always fit the installed runtime) into a cache folder keyed
by the protos' content and the generator's version."""

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile

PROTO_FILE = "switchyard/plugin/v1/plugin.proto"
HEALTH_PROTO_FILE = "grpc/health/v1/health.proto"
STUBS_DIR_ENV = "SWITCHYARD_PLUGIN_STUBS_DIR"

_HERE = os.path.dirname(os.path.abspath(__file__))


def proto_root():
    """The folder holding the .proto files: copied into the package when it is built
    (see setup.py), else the repository's proto/ when running from a checkout."""
    for root in (os.path.join(_HERE, "proto"), os.path.normpath(os.path.join(_HERE, "..", "..", "..", "proto"))):
        if os.path.isfile(os.path.join(root, PROTO_FILE)):
            return root
    raise RuntimeError(
        f"switchyard_plugin: {PROTO_FILE} is neither inside the package ({_HERE}/proto) nor in the "
        "repository checkout; reinstall the package with `pip install <repo>/plugin-sdk/python`"
    )


def _cache_dir(root):
    from grpc_tools import protoc  # noqa: F401  (fails early with a clear ImportError)
    import grpc_tools

    h = hashlib.sha256()
    for p in (PROTO_FILE, HEALTH_PROTO_FILE):
        with open(os.path.join(root, p), "rb") as f:
            h.update(f.read())
    version = getattr(grpc_tools, "__version__", "")
    if not version:
        from importlib import metadata

        try:
            version = metadata.version("grpcio-tools")
        except metadata.PackageNotFoundError:
            version = "unknown"
    h.update(version.encode())
    key = h.hexdigest()[:16]
    base = os.environ.get(STUBS_DIR_ENV, "").strip()
    if not base:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(cache, "switchyard-plugin")
    return os.path.join(base, key)


def _generate(root, out):
    """Generates every stub into a fresh folder beside `out`, then renames it into
    place (atomic): processes starting together never import half-written modules."""
    from grpc_tools import protoc

    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".gen-", dir=parent)
    try:
        for proto in (PROTO_FILE, HEALTH_PROTO_FILE):
            rc = protoc.main(
                ["grpc_tools.protoc", f"-I{root}", f"--python_out={tmp}", f"--grpc_python_out={tmp}", proto]
            )
            if rc != 0:
                raise RuntimeError(f"protoc failed ({rc}) on {os.path.join(root, proto)}")
        try:
            os.rename(tmp, out)
        except OSError:
            if not os.path.isdir(out):  # another process won the race: use its stubs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load():
    """(plugin_pb2, plugin_pb2_grpc, health_pb2), generating them when needed."""
    root = proto_root()
    out = _cache_dir(root)
    if not os.path.isfile(os.path.join(out, PROTO_FILE.replace(".proto", "_pb2_grpc.py"))):
        try:
            _generate(root, out)
        except PermissionError:
            out = os.path.join(tempfile.gettempdir(), f"switchyard-plugin-{os.getuid()}", os.path.basename(out))
            if not os.path.isdir(out):
                _generate(root, out)
    # Generated with -I proto/, each *_grpc module imports its *_pb2 by the absolute
    # name switchyard.plugin.v1.plugin_pb2, so the folder goes on the path.
    if out not in sys.path:
        sys.path.insert(0, out)
    from switchyard.plugin.v1 import plugin_pb2, plugin_pb2_grpc

    # As `grpc.health...` the health module would be looked up inside grpcio: load it
    # from its file under a private name (the service is registered by hand).
    path = os.path.join(out, os.path.dirname(HEALTH_PROTO_FILE), "health_pb2.py")
    spec = importlib.util.spec_from_file_location("_switchyard_plugin_health_pb2", path)
    health = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health)
    return plugin_pb2, plugin_pb2_grpc, health


pb, pb_grpc, health_pb = load()
