"""The Galera start-up and check scripts of components/sql-ha, run against stand-ins for their peers
and for mariadbd: which pod starts a new cluster, which waits and which joins, a crashed node's
recovered position, and the check port's answers."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.k8s_support import SQL_HA

SCRIPTS = ("galera-start.sh", "galera-http.sh", "galera-check.sh", "galera.cnf")
UUID = "6f3b1c0e-6a6f-11ef-9a57-0242ac120002"


def grastate(seqno: int, safe: int = 0, uuid: str = UUID) -> str:
    return (
        f"# GALERA saved state\nversion: 2.1\nuuid:    {uuid}\nseqno:   {seqno}\n"
        f"safe_to_bootstrap: {safe}\n"
    )


def http(status: str, body: str = "") -> str:
    return f"HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{body}"


def require(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    assert not missing, f"not installed: {', '.join(missing)}"


class Node:
    """One Galera pod's start-up, with its peers' check ports and the image's programs stood in
    for: socat answers from files (no file: the peer does not answer), docker-entrypoint.sh
    records its arguments, galera_recovery prints a recovered position."""

    def __init__(self, root: Path, ordinal: int) -> None:
        self.root = root
        self.ordinal = ordinal
        self.scripts = root / "etc"
        self.scripts.mkdir(parents=True)
        for name in SCRIPTS:
            shutil.copy(SQL_HA / name, self.scripts / name)
        self.data = root / "data"
        self.data.mkdir()
        self.answers = root / "answers"
        self.answers.mkdir()
        self.bin = root / "bin"
        self.bin.mkdir()
        self.conf = root / "galera.cnf"
        self.capture = root / "entrypoint-args"
        self.shim(
            "socat",
            "for a; do last=$a; done\nhost=${last#TCP:}; host=${host%%:*}\nread -r _ path _\n"
            "case $path in /state) f=state ;; *) f=ready ;; esac\n"
            '[ -f "$ANSWERS/$host.$f" ] || exit 1\ncat "$ANSWERS/$host.$f"\n',
        )
        self.shim("docker-entrypoint.sh", 'printf "%s\\n" "$@" >"$CAPTURE"\n')
        self.shim("galera_recovery", f"echo --wsrep_start_position={UUID}:41\n")

    def shim(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def peer(self, ordinal: int, *, ready: bool = False, state: str | None = "") -> None:
        """A peer's answers: GET / (takes writes or not), GET /state (its grastate.dat; None: it
        does not answer at all)."""
        host = f"mariadb-galera-{ordinal}.mariadb-galera"
        if state is None:
            return
        (self.answers / f"{host}.ready").write_text(
            http("200 OK", "synced\n") if ready else http("503 Service Unavailable")
        )
        (self.answers / f"{host}.state").write_text(http("200 OK", state))

    def start(self, seconds: float = 10) -> tuple[list[str] | None, str]:
        """The arguments mariadbd got (None: it still waited when stopped) and the log."""
        require("bash", "sed", "awk", "timeout")
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "POD_NAME": f"mariadb-galera-{self.ordinal}",
            "POD_IP": f"10.1.0.{10 + self.ordinal}",
            "GALERA_NODES": "3",
            "GALERA_SERVICE": "mariadb-galera",
            "GALERA_DATADIR": str(self.data),
            "GALERA_CONF": str(self.conf),
            "GALERA_POLL_SECONDS": "0.2",
            "ANSWERS": str(self.answers),
            "CAPTURE": str(self.capture),
        }
        result = subprocess.run(
            [
                "timeout",
                str(seconds),
                "bash",
                str(self.scripts / "galera-start.sh"),
                "--max-connections=200",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 124:
            return None, result.stderr
        assert result.returncode == 0, result.stderr
        return self.capture.read_text().splitlines(), result.stderr


BOOTSTRAP = ["mariadbd", "--max-connections=200", "--wsrep-new-cluster"]
PLAIN = ["mariadbd", "--max-connections=200"]


def test_a_new_cluster_is_started_by_its_first_pod_alone(tmp_path: Path) -> None:
    first = Node(tmp_path / "0", 0)
    first.peer(1)
    first.peer(2)
    args, log = first.start()
    assert args == BOOTSTRAP, log
    # The pod's galera.cnf: its name, its address, every node by its stable name.
    cnf = configparser.ConfigParser(strict=False, allow_no_value=True)
    cnf.read_string(first.conf.read_text())
    assert cnf["mariadbd"]["wsrep_node_name"] == "mariadb-galera-0"
    assert cnf["mariadbd"]["wsrep_node_address"] == "10.1.0.10"
    assert cnf["mariadbd"]["wsrep_cluster_address"] == "gcomm://" + ",".join(
        f"mariadb-galera-{n}.mariadb-galera" for n in range(3)
    )
    # The other pods of a new cluster wait for it, then join.
    second = Node(tmp_path / "1", 1)
    second.peer(0)
    second.peer(2)
    args, log = second.start(seconds=2)
    assert args is None
    assert "waiting" in log
    second.peer(0, ready=True)
    args, _ = second.start()
    assert args == PLAIN


def test_no_new_cluster_beside_one_that_runs_or_one_that_holds_data(tmp_path: Path) -> None:
    # The first pod with an empty volume (lost) while its peers run a cluster: it joins.
    node = Node(tmp_path / "running", 0)
    node.peer(1, ready=True, state=grastate(-1))
    node.peer(2, state=grastate(-1))
    args, _ = node.start()
    assert args == PLAIN
    # ... while they are down but hold a state, or one of them does not answer: it waits.
    for name, peer2 in (("data", grastate(17)), ("silent", None)):
        node = Node(tmp_path / name, 0)
        node.peer(1)
        node.peer(2, state=peer2)
        args, log = node.start(seconds=2)
        assert args is None, name
        assert "waiting" in log


def test_a_crashed_node_recovers_its_position_and_starts_from_it(tmp_path: Path) -> None:
    node = Node(tmp_path / "crashed", 2)
    (node.data / "grastate.dat").write_text(grastate(-1))
    node.peer(0, state=grastate(-1))
    node.peer(1, state=grastate(-1))
    args, log = node.start()
    # No new cluster: Galera forms the last primary component again once all three are back.
    assert args == [*PLAIN, f"--wsrep_start_position={UUID}:41"], log
    assert "recovered" in log
    # A node that left cleanly, beside one that crashed: the same (it joins what they form).
    clean = Node(tmp_path / "clean", 0)
    (clean.data / "grastate.dat").write_text(grastate(40))
    clean.peer(1, state=grastate(-1))
    clean.peer(2, state=grastate(41))
    args, _ = clean.start()
    assert args == PLAIN


def test_the_last_node_to_leave_starts_the_cluster_again(tmp_path: Path) -> None:
    node = Node(tmp_path / "safe", 2)
    (node.data / "grastate.dat").write_text(grastate(30, safe=1))
    node.peer(0, state=grastate(29))
    node.peer(1, state=None)
    args, _ = node.start()
    assert args == BOOTSTRAP
    other = Node(tmp_path / "other", 0)
    (other.data / "grastate.dat").write_text(grastate(29))
    other.peer(1, state=grastate(28))
    other.peer(2, state=grastate(30, safe=1))
    args, _ = other.start(seconds=2)
    assert args is None


def test_nodes_that_left_together_agree_on_the_highest_seqno(tmp_path: Path) -> None:
    seqnos = {0: 10, 1: 12, 2: 12}
    decisions = {}
    for ordinal, seqno in seqnos.items():
        node = Node(tmp_path / str(ordinal), ordinal)
        (node.data / "grastate.dat").write_text(grastate(seqno))
        for peer, theirs in seqnos.items():
            if peer != ordinal:
                node.peer(peer, state=grastate(theirs))
        args, _ = node.start(seconds=2)
        decisions[ordinal] = args
    # The highest seqno, the lowest ordinal on a tie; the others wait for its cluster.
    assert decisions == {0: None, 1: BOOTSTRAP, 2: None}


def run_check(tmp_path: Path, request: str, status: str) -> str:
    """One exchange with galera-http.sh, the node's status from a stand-in mariadb client."""
    require("bash", "sh", "grep")
    root = tmp_path / "check"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    for name in SCRIPTS:
        shutil.copy(SQL_HA / name, root / name)
    client = root / "bin" / "mariadb"
    client.write_text(f"#!/bin/sh\nprintf '{status}'\n")
    client.chmod(0o755)
    (root / "data" / "grastate.dat").write_text(grastate(-1))
    result = subprocess.run(
        ["bash", str(root / "galera-http.sh")],
        input=request.encode(),
        env={
            **os.environ,
            "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
            "GALERA_DATADIR": str(root / "data"),
        },
        capture_output=True,
        check=True,
        timeout=10,
    )
    # Bytes: the CRLFs of the answer as they are sent.
    return result.stdout.decode()


@pytest.mark.parametrize(
    ("state", "ready", "expected"),
    [
        ("4", "ON", "200 OK"),
        # A donor keeps taking writes (IST from its cache).
        ("2", "ON", "200 OK"),
        # Joining, or cut off from the primary component.
        ("1", "ON", "503 Service Unavailable"),
        ("4", "OFF", "503 Service Unavailable"),
    ],
)
def test_the_check_port_answers_whether_the_node_takes_writes(
    tmp_path: Path, state: str, ready: str, expected: str
) -> None:
    status = f"wsrep_local_state\\t{state}\\nwsrep_ready\\t{ready}\\n"
    answer = run_check(tmp_path, "GET / HTTP/1.0\r\n\r\n", status)
    assert answer.startswith(f"HTTP/1.0 {expected}\r\n")


def test_the_check_port_shows_the_nodes_saved_state(tmp_path: Path) -> None:
    answer = run_check(tmp_path, "GET /state HTTP/1.0\r\nHost: x\r\n\r\n", "")
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.0 200 OK")
    assert body == grastate(-1).rstrip("\n")
