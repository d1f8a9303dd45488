"""`setup`: the Debian packages (as root, when missing), the virtualenvs and the gRPC stubs."""

import glob
import hashlib
import os
import shutil

from . import settings, shell
from .host import is_root
from .paths import PY, ROOT, VENV


def setup() -> None:
    install_packages()
    setup_venv()
    gen_protos()


def install_packages() -> None:
    missing = [package for wanted, packages in _wanted() if not wanted for package in packages]
    if not missing:
        return
    if not is_root():
        shell.die(
            f"missing Debian packages: {' '.join(missing)} (run as root, or apt-get install them)"
        )
    shell.log(f"installing Debian packages: {' '.join(missing)}")
    os.environ["DEBIAN_FRONTEND"] = "noninteractive"
    # Debian's policy-rc.d keeps the packages from starting their own system services: good, the
    # stack runs its own instances in ./var.
    shell.run(["apt-get", "update", "-qq"])
    shell.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        stdout=shell.DEVNULL,
    )


def _wanted() -> list[tuple[bool, list[str]]]:
    """Each thing the stack runs, whether it is there, and the packages that bring it."""
    wanted = [
        (
            _has("mariadbd") or _executable("/usr/sbin/mariadbd"),
            ["mariadb-server", "mariadb-client"],
        ),
        (bool(glob.glob("/usr/lib/postgresql/*/bin/postgres")), ["postgresql"]),
        (_has("redis-server"), ["redis-server"]),
        # kubectl renders deploy/k8s (kustomize) for the offline manifest checks.
        (_has("kubectl"), ["kubernetes-client"]),
        # promtool unit-tests the alerting rules; PgBouncer pools PostgreSQL connections
        # (transaction mode).
        (_has("promtool"), ["prometheus"]),
        (_has("pgbouncer") or _executable("/usr/sbin/pgbouncer"), ["pgbouncer"]),
        # buf (npm, pinned in tools/buf) lints the protos; Chromium runs the browser tests
        # (Playwright drives it, never downloading a browser of its own).
        (_has("npm"), ["nodejs", "npm"]),
        (_has("chromium"), ["chromium"]),
        # wrk saturates the gateway in `make bench`.
        (_has("wrk"), ["wrk"]),
        # ss finds the processes behind a port, whose CPU the bench counts per request.
        (_executable("/usr/bin/ss"), ["iproute2"]),
        # Colour emoji in the web client (Vietnamese chats are full of them).
        (
            os.path.isfile("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"),
            ["fonts-noto-color-emoji"],
        ),
    ]
    # `make up HA=1`: Patroni and its store etcd, HAProxy in front, Galera (mariadb-server's
    # provider, usually there already) with its arbitrator garbd, rsync for Galera's full state
    # transfers.
    if settings.ha_mode() == "1":
        wanted += [
            (_has("patroni"), ["patroni"]),
            (_has("etcd"), ["etcd-server", "etcd-client"]),
            (_has("haproxy") or _executable("/usr/sbin/haproxy"), ["haproxy"]),
            (os.path.isfile("/usr/lib/galera/libgalera_smm.so"), ["galera-4"]),
            (_has("garbd"), ["galera-arbitrator-4"]),
            (_has("rsync"), ["rsync"]),
        ]
    return wanted


def _has(program: str) -> bool:
    return shell.which(program) is not None


def _executable(path: str) -> bool:
    return os.access(path, os.X_OK)


def setup_venv() -> None:
    want = _sha256(f"{ROOT}/requirements.txt", f"{ROOT}/requirements-dev.txt")
    if not _executable(PY):
        shell.log("creating .venv")
        shell.run(["python3", "-m", "venv", VENV])
    if _read(f"{VENV}/.requirements.sha256") != want:
        shell.log("installing Python dependencies")
        _pip_install(PY, f"{ROOT}/requirements-dev.txt")
        _write(f"{VENV}/.requirements.sha256", want)
    # checkov pins versions that conflict with the test tools: it gets a virtualenv of its own.
    tools = f"{ROOT}/.venv-tools"
    tools_want = _sha256(f"{ROOT}/requirements-tools.txt")
    if _read(f"{tools}/.requirements.sha256") != tools_want:
        shell.log("installing the Kubernetes policy scanner (checkov)")
        shell.run(["python3", "-m", "venv", tools])
        _pip_install(f"{tools}/bin/python", f"{ROOT}/requirements-tools.txt")
        _write(f"{tools}/.requirements.sha256", tools_want)
    # buf, pinned by tools/buf/package-lock.json.
    if not _executable(f"{ROOT}/tools/buf/node_modules/.bin/buf"):
        shell.log("installing buf (npm)")
        npm_ci = ["npm", "ci", "--prefix", f"{ROOT}/tools/buf"]
        shell.run([*npm_ci, "--no-audit", "--no-fund", "--loglevel=error"], stdout=shell.DEVNULL)
    # axe-core (accessibility rules the browser tests inject), pinned by tools/axe's lockfile.
    if not os.path.exists(f"{ROOT}/tools/axe/node_modules/axe-core/axe.min.js"):
        shell.log("installing axe-core (npm)")
        npm_ci = ["npm", "ci", "--prefix", f"{ROOT}/tools/axe"]
        shell.run([*npm_ci, "--no-audit", "--no-fund", "--loglevel=error"], stdout=shell.DEVNULL)
    # The repository root and the generated stubs are importable without installing a package.
    site = shell.output(
        [PY, "-c", 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], check=True
    )
    _write(f"{site}/agora.pth", f"{ROOT}\n{ROOT}/gen")


def gen_protos() -> None:
    shell.log("generating gRPC stubs")
    gen = f"{ROOT}/gen"
    shutil.rmtree(gen, ignore_errors=True)
    os.makedirs(gen, exist_ok=True)
    protos = sorted(
        os.path.relpath(os.path.join(top, name), ROOT)
        for top, _, names in os.walk(f"{ROOT}/protos")
        for name in names
        if name.endswith(".proto")
    )
    protoc = [PY, "-m", "grpc_tools.protoc", "-Iprotos"]
    outputs = ["--python_out=gen", "--grpc_python_out=gen", "--pyi_out=gen"]
    # 123 for a failed protoc, the status `find protos | xargs protoc` answers (callers see it).
    if shell.status([*protoc, *outputs, *protos], cwd=ROOT):
        raise SystemExit(123)


def _pip_install(python: str, requirements: str) -> None:
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    shell.run([*pip, "-r", requirements])


def _sha256(*paths: str) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as contents:
            digest.update(contents.read())
    return digest.hexdigest()


def _read(path: str) -> str:
    try:
        with open(path) as kept:
            return kept.read().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return ""


def _write(path: str, line: str) -> None:
    with open(path, "w") as kept:
        kept.write(f"{line}\n")
