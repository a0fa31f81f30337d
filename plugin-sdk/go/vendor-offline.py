#!/usr/bin/env python3
"""Makes a Go plugin module build in module mode with no network: vendors what it
imports from this SDK checkout and from Debian's Go packages (/usr/share/gocode).

    python3 plugin-sdk/go/vendor-offline.py [MODULE_DIR]

MODULE_DIR (default: the current directory) holds your plugin's go.mod. The script
  * adds `replace github.com/switchyard-sched/switchyard/plugin-sdk/go => <this SDK>`
    (unless go.mod already replaces it) and requires the SDK,
  * finds every package the module imports (with `go list` in GOPATH mode over the
    SDK and /usr/share/gocode), and the module each comes from,
  * requires each such module in go.mod at the version Debian packaged,
  * writes vendor/ (the packages' non-test files) and vendor/modules.txt.

Afterwards `go build ./...`, `go vet ./...` and `go test ./...` work offline in module
mode (Go uses vendor/ by default when go.mod says go 1.14 or later). Run it again when
your imports change. Where a module proxy is reachable, use `go mod tidy` and
`go mod vendor` instead: they pick releases, not Debian's copies.

Exit status 1, with the reason, when go is missing, go.mod is not there, or an
imported package is in none of the places above.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

SDK = "github.com/switchyard-sched/switchyard/plugin-sdk/go"
SDK_DIR = os.path.dirname(os.path.abspath(__file__))
GOCODE = "/usr/share/gocode/src"


def fail(msg):
    print(f"vendor-offline: {msg}", file=sys.stderr)
    sys.exit(1)


def run(args, cwd, env=None):
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(args)} failed in {cwd}:\n{r.stderr.strip()}")
    return r.stdout


def module_line(gomod):
    with open(gomod) as f:
        for line in f:
            m = re.match(r"\s*module\s+(\S+)", line)
            if m:
                return m.group(1).strip('"')
    fail(f"{gomod}: no module line")


def go_line(gomod):
    with open(gomod) as f:
        for line in f:
            m = re.match(r"\s*go\s+(\d+\.\d+)", line)
            if m:
                return m.group(1)
    return None


def debian_version(gomod):
    """The version Debian packaged the module at, as a module version."""
    try:
        pkg = subprocess.run(
            ["dpkg", "-S", gomod], capture_output=True, text=True, check=True
        ).stdout.split(":")[0]
        v = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", pkg],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "v0.0.0"
    v = v.split(":")[-1].rsplit("-", 1)[0].split("+")[0]
    m = re.fullmatch(r"(\d+\.\d+\.\d+)", v)
    if m:
        return "v" + m.group(1)
    # 0.0~git20200413.b5235f6: a pseudo-version of that date and commit.
    m = re.search(r"git(\d{8})\.([0-9a-f]+)", v)
    if m:
        return f"v0.0.0-{m.group(1)}000000-{m.group(2).ljust(12, '0')[:12]}"
    return "v0.0.0"


def owning_module(pkg_dir):
    """The directory and path of the module holding a package under GOCODE."""
    d = pkg_dir
    while d.startswith(GOCODE) and d != GOCODE:
        gomod = os.path.join(d, "go.mod")
        if os.path.exists(gomod):
            return d, module_line(gomod)
        d = os.path.dirname(d)
    # No go.mod up to the root (an old GOPATH package): its top three path elements.
    rel = os.path.relpath(pkg_dir, GOCODE).split(os.sep)
    return os.path.join(GOCODE, *rel[:3]), "/".join(rel[:3])


def main():
    mod_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    gomod = os.path.join(mod_dir, "go.mod")
    if not os.path.exists(gomod):
        fail(f"{gomod} not found: create it with `go mod init example.com/yourplugin`")
    if shutil.which("go") is None:
        fail("go not found (apt-get install golang-go golang-google-grpc-dev golang-google-protobuf-dev)")
    if not os.path.isdir(GOCODE):
        fail(f"{GOCODE} not found (apt-get install golang-google-grpc-dev golang-google-protobuf-dev)")
    main_path = module_line(gomod)

    # The import graph, in GOPATH mode: the module and the SDK linked at their paths.
    with tempfile.TemporaryDirectory() as gopath:
        for path, target in ((main_path, mod_dir), (SDK, SDK_DIR)):
            link = os.path.join(gopath, "src", path)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(target, link)
        here = os.path.join(gopath, "src", main_path)
        # PWD: Go takes the directory by the symlinked path only if PWD says so.
        env = dict(os.environ, GO111MODULE="off", GOPATH=f"{gopath}:{os.path.dirname(GOCODE)}",
                   GOFLAGS="", PWD=here)
        out = run(
            ["go", "list", "-e", "-deps", "-test", "-f",
             "{{if not .Standard}}{{.ImportPath}}\t{{.Dir}}\t{{.Error}}{{end}}", "./..."],
            here, env,
        )
    modules = {}  # path -> {"dir", "version", "go", "packages", "replace"}
    for line in out.splitlines():
        if not line.strip():
            continue
        path, pkg_dir, err = (line.split("\t") + ["", ""])[:3]
        if path.endswith(".test") or " [" in path:
            continue
        if path == main_path or path.startswith(main_path + "/"):
            continue
        if path == SDK or path.startswith(SDK + "/"):
            mdir, mpath = SDK_DIR, SDK
            src = os.path.join(SDK_DIR, os.path.relpath(path, SDK))
        elif pkg_dir.startswith(GOCODE + "/"):
            mdir, mpath = owning_module(pkg_dir)
            src = pkg_dir
        else:
            fail(f"package {path} is neither in this SDK nor in {GOCODE}: {err or pkg_dir or 'not found'}")
        m = modules.setdefault(mpath, {
            "dir": mdir,
            "version": "v0.0.0" if mpath == SDK else debian_version(os.path.join(mdir, "go.mod")),
            "go": go_line(os.path.join(mdir, "go.mod")) if os.path.exists(os.path.join(mdir, "go.mod")) else None,
            "packages": {},
            "replace": SDK_DIR if mpath == SDK else None,
        })
        m["packages"][path] = src

    # go.mod: the SDK replaced by this checkout, every module required (textual
    # edits: `go mod edit` needs no network).
    text = open(gomod).read()
    if not re.search(r"^\s*replace\s+" + re.escape(SDK) + r"\b", text, re.M):
        run(["go", "mod", "edit", f"-replace={SDK}={SDK_DIR}"], mod_dir)
    for mpath, m in sorted(modules.items()):
        run(["go", "mod", "edit", f"-require={mpath}@{m['version']}"], mod_dir)
    # Indirect ones are marked so by `go mod tidy`; the build does not care.

    vendor = os.path.join(mod_dir, "vendor")
    shutil.rmtree(vendor, ignore_errors=True)
    lines = []
    for mpath, m in sorted(modules.items()):
        head = f"# {mpath} {m['version']}"
        if m["replace"]:
            head += f" => {m['replace']}"
        lines.append(head)
        lines.append("## explicit" + (f"; go {m['go']}" if m["go"] else ""))
        for pkg, src in sorted(m["packages"].items()):
            lines.append(pkg)
            dst = os.path.join(vendor, pkg)
            os.makedirs(dst, exist_ok=True)
            for name in os.listdir(src):
                p = os.path.join(src, name)
                if os.path.isfile(p) and not name.endswith("_test.go") and name.endswith((".go", ".s", ".c", ".h")):
                    shutil.copyfile(p, os.path.join(dst, name))
    for mpath, m in sorted(modules.items()):
        if m["replace"]:
            lines.append(f"# {mpath} => {m['replace']}")
    with open(os.path.join(vendor, "modules.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    n = sum(len(m["packages"]) for m in modules.values())
    print(f"vendor-offline: {n} packages of {len(modules)} modules in {vendor}")


if __name__ == "__main__":
    main()
